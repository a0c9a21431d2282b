//! Signed webhooks, out and in: Standard Webhooks signing and verification with no AWS
//! dependency (default features: none); the HTTPS delivery client (feature `client`); the
//! dispatcher (feature `dispatcher`).
//!
//! Events leave the company as HTTP `POST`s signed by the [Standard Webhooks] scheme, and a
//! partner's webhooks arrive verified by the same scheme:
//!
//! * signing and verification ([`Verifier`], [`signature_header`], [`Secret`]): `webhook-id` / `webhook-timestamp` / `webhook-signature` headers,
//!   `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`, several signatures while a secret
//!   is rotated, `whsec_` secrets, constant-time verification with a timestamp tolerance;
//! * [`RetrySchedule`]: the retry schedule (Svix's by default: 5 s … 10 h, about a day), with jitter,
//!   `Retry-After` honoured;
//! * [`BreakerConfig`], [`BreakerState`]: a subscriber's circuit breaker (closed, open, half-open with one probe);
//! * [`Outcome`]: what each answer means (delivered, gone, rejected, retry);
//! * `client` (feature `client`): one signed attempt over HTTPS with timeouts and no redirects;
//! * `dispatcher` (feature `dispatcher`): the SQS-triggered function that fans an event
//!   out to its subscribers, delivers a batch's messages concurrently within the invocation's
//!   time budget, each once (guarded inbox), retries by re-enqueueing the message for the next
//!   attempt, and dead-letters with a readable reason.
//!
//! [Standard Webhooks]: https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod breaker;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "dispatcher")]
pub mod dispatcher;
mod outcome;
mod signature;

pub use backoff::{parse_retry_after, RetrySchedule, ScheduleError, DEFAULT_MAX_RETRY_AFTER, DEFAULT_SCHEDULE};
pub use breaker::{BreakerConfig, BreakerState, Gate};
pub use outcome::{Outcome, BODY_EXCERPT_BYTES};
pub use signature::{
    signature_header, Secret, SecretError, SignedHeaders, Verifier, VerifyError, DEFAULT_MAX_BODY_BYTES, DEFAULT_TOLERANCE, MIN_SECRET_BYTES,
    SECRET_PREFIX, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP,
};

// The crates whose types appear in this crate's public signatures, re-exported so a user
// names (and matches) one version of each.
#[cfg(feature = "dispatcher")]
pub use aws_config;
#[cfg(feature = "dispatcher")]
pub use aws_sdk_secretsmanager;
#[cfg(feature = "dispatcher")]
pub use outbox;
#[cfg(feature = "client")]
pub use reqwest;
