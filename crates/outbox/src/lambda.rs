//! Glue between Lambda and the library (feature `lambda`).

use std::time::{Duration, Instant, SystemTime};

/// When the invocation must have answered, as an [`Instant`]: the Lambda context's
/// [`deadline`](lambda_runtime::Context::deadline) (the `Lambda-Runtime-Deadline-Ms` header of
/// the Runtime API, epoch milliseconds), or `fallback` from now when the context has none
/// (`deadline` 0, e.g. a context built in a test).
///
/// Source: the Lambda Runtime API reference, "Next invocation",
/// <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>.
pub fn deadline(context: &lambda_runtime::Context, fallback: Duration) -> Instant {
    if context.deadline == 0 {
        return Instant::now() + fallback;
    }
    let left = context.deadline().duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
    Instant::now() + left
}

/// The lease end for guarded mode ([`crate::inbox::InboxStore::guarded`], feature `inbox`):
/// the invocation's deadline as a UTC time, or `fallback` from now when the context has none.
/// A crashed invocation then blocks its event no longer than its own timeout.
pub fn lease_until(context: &lambda_runtime::Context, fallback: Duration) -> chrono::DateTime<chrono::Utc> {
    let now = chrono::Utc::now();
    let fallback = now + chrono::Duration::from_std(fallback).unwrap_or(chrono::Duration::MAX);
    if context.deadline == 0 {
        return fallback;
    }
    chrono::DateTime::<chrono::Utc>::from(context.deadline())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_without_deadline_gets_the_fallback_and_a_past_one_none() {
        let mut context = lambda_runtime::Context::default();
        let before = Instant::now();
        assert!(deadline(&context, Duration::from_secs(60)) >= before + Duration::from_secs(59));
        context.deadline = 1_000; // 1970
        assert!(deadline(&context, Duration::from_secs(60)) <= Instant::now());
        assert_eq!(lease_until(&context, Duration::from_secs(60)).timestamp_millis(), 1_000);
        context.deadline = 0;
        assert!(lease_until(&context, Duration::from_secs(60)) > chrono::Utc::now() + chrono::Duration::seconds(59));
    }
}
