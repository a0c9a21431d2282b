//! Signed webhooks, out and in (feature `webhook`; delivery with `webhook-dispatcher`).
//!
//! Events leave the company as HTTP `POST`s signed by the [Standard Webhooks] scheme, and a
//! partner's webhooks arrive verified by the same scheme:
//!
//! * [`signature`]: `webhook-id` / `webhook-timestamp` / `webhook-signature` headers,
//!   `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, several signatures while a secret
//!   is rotated, `whsec_` secrets, constant-time verification with a timestamp tolerance;
//! * [`backoff`]: the retry schedule, `min(cap, base × 2^retry)` with jitter, `Retry-After` honoured;
//! * [`outcome`]: what each answer means (delivered, gone, rejected, retry);
//! * `client` (feature `webhook-dispatcher`): one signed attempt over HTTPS with timeouts and no redirects;
//! * `dispatcher` (feature `webhook-dispatcher`): the SQS-triggered function that fans an event
//!   out to its subscribers, delivers each once (guarded inbox), retries through the message's
//!   visibility timeout and dead-letters with a readable reason.
//!
//! [Standard Webhooks]: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md

pub mod backoff;
#[cfg(feature = "webhook-dispatcher")]
pub mod client;
#[cfg(feature = "webhook-dispatcher")]
pub mod dispatcher;
pub mod outcome;
pub mod signature;

pub use backoff::{parse_retry_after, Backoff};
pub use outcome::Outcome;
pub use signature::{signature_header, Secret, SecretError, SignedHeaders, Verifier, VerifyError};
