//! The sample application built on the pattern: an order API (producer), the relay function,
//! and an inventory consumer. Each Lambda function's `main.rs` builds one of these once at cold
//! start and hands its `handle` method to `lambda_runtime::run`; the local runtime calls the
//! same methods in-process.

// A `Problem` (RFC 9457 document) is the error of every request check; it is built at most once
// per rejected request, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

pub mod http;
pub mod idempotency;
pub mod inventory;
pub mod orders;
pub mod relay;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// When the invocation must have answered, from the Lambda context's `deadline` (epoch
/// milliseconds); `fallback` from now when the context has none (0, e.g. in tests).
pub fn deadline_of(context: &lambda_runtime::Context, fallback: Duration) -> Instant {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    if context.deadline == 0 {
        return Instant::now() + fallback;
    }
    Instant::now() + Duration::from_millis(context.deadline.saturating_sub(now_ms))
}
