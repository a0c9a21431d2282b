//! The `outbox` library as AWS Lambda functions: the glue between `lambda_runtime` and the
//! core crate `outbox`.
//!
//! * [`relay::run_from_env`] (feature `relay`) is the whole relay function: DynamoDB Streams in,
//!   EventBridge `PutEvents` out, `batchItemFailures` back;
//! * [`consumer_from_env`] (feature `consumer`) wires a consumer from its function's environment
//!   (inbox, dead-letter queue, consumer name), and [`LambdaConsumer`] serves an
//!   [`outbox::consumer::Consumer`] as a Lambda handler bounded by the invocation's deadline;
//! * [`webhooks::run_from_env`] (feature `webhooks`) is the whole webhook dispatcher function;
//! * [`Env`] reads a function's settings from its environment, with the SDK clients' time-outs
//!   ([`SdkTimeouts`], [`load_sdk_config`]) and the inbox retention rule ([`inbox_retention`]);
//! * [`telemetry::init`] installs the function's tracing subscriber (with feature
//!   `opentelemetry`, spans exported to the ADOT collector layer: docs/tracing.md);
//! * [`run`] serves a handler and, with feature `metrics`, writes the library's counts as
//!   CloudWatch Embedded Metric Format ([`emf_metrics`]).
//!
//! # Features
//!
//! | feature | brings | needs |
//! |---|---|---|
//! | (none) | [`run`], [`telemetry::init`], [`deadline`], [`lease_until`], [`load_sdk_config`], [`Env`], [`SdkTimeouts`], [`inbox_retention`], [`consumer_name`] | `lambda_runtime`, `aws-config` |
//! | `relay` | [`relay`] | `outbox/relay` |
//! | `consumer` | [`consumer_from_env`], [`LambdaConsumer`] | `outbox/inbox` |
//! | `claim-check` | [`claim_check`]: the claim check of `CLAIM_CHECK_BUCKET` | `outbox/claim-check`, `aws-sdk-s3` |
//! | `metrics` | [`emf_metrics`]; [`run`] installs it; the core's counts; [`load_sdk_config`] counts failed AWS calls per service ([`FailedCallsClient`]) | `outbox/metrics`, `metrics_cloudwatch_embedded` |
//! | `webhooks` | [`webhooks`]: the dispatcher function | `consumer`, `outbox-webhooks/dispatcher` |
//! | `opentelemetry` | [`telemetry::init`] adds a `tracing-opentelemetry` layer exporting OTLP/HTTP to the ADOT collector layer (X-Ray ids); [`run`] serves each invocation in an exported span continuing its X-Ray header, flushed after it; the consumer's event spans continue each event's trace | `outbox/opentelemetry`, `opentelemetry_sdk`, `opentelemetry-otlp`, `opentelemetry-aws`, `tracing-opentelemetry` |
//!
//! Every feature is additive: with `metrics`, [`run`] installs the EMF recorder only when the
//! application has none (its own is kept, with a warning), so turning `metrics` on never stops a
//! function from starting.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "metrics")]
mod aws_calls;
mod config;
#[cfg(feature = "consumer")]
mod consumer;
#[cfg(feature = "relay")]
pub mod relay;
mod runtime;
pub mod telemetry;
#[cfg(feature = "webhooks")]
pub mod webhooks;

#[cfg(feature = "metrics")]
pub use aws_calls::FailedCallsClient;
pub use config::{
    consumer_name, inbox_retention, ConfigError, Env, SdkTimeouts, DEAD_LETTER_RETENTION_RANGE, DEFAULT_DEAD_LETTER_RETENTION,
    DEFAULT_REDRIVE_MARGIN, DEFAULT_RETENTION, MAX_MILLIS,
};
#[cfg(feature = "consumer")]
pub use consumer::{consumer_from_env, LambdaConsumer};
#[cfg(feature = "metrics")]
pub use runtime::emf_metrics;
#[cfg(feature = "claim-check")]
pub use runtime::{claim_check, BUCKET_ENV, MAX_BYTES_ENV, PREFIX_ENV};
pub use runtime::{deadline, lease_until, load_sdk_config, run};

// The crates whose types appear in this crate's public signatures, re-exported so a user
// names (and matches) one version of each (the SDK clients: `outbox_lambda::outbox::aws_sdk_dynamodb`).
pub use aws_config;
pub use lambda_runtime;
pub use outbox;
#[cfg(feature = "webhooks")]
pub use outbox_webhooks;

/// An invocation that failed as a whole: Lambda retries it (the event source mapping's retry,
/// the asynchronous invocation's retries). Converts into the runtime's
/// [`Diagnostic`](lambda_runtime::Diagnostic), whose `errorType` is the failure's
/// machine-readable type (`Retryable`, `MalformedEvent`, `RelayError`, …).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvocationError {
    /// The consumer failed the invocation ([`outbox::consumer::ConsumerError`]).
    #[cfg(feature = "consumer")]
    #[error(transparent)]
    Consumer(#[from] outbox::consumer::ConsumerError),
    /// The relay failed the whole batch ([`outbox::relay::RelayError`]).
    #[cfg(feature = "relay")]
    #[error(transparent)]
    Relay(#[from] outbox::relay::RelayError),
}

impl InvocationError {
    /// The machine-readable failure type (the Lambda error's `errorType`).
    pub fn error_type(&self) -> &'static str {
        match *self {
            #[cfg(feature = "consumer")]
            InvocationError::Consumer(ref e) => e.error_type(),
            #[cfg(feature = "relay")]
            InvocationError::Relay(_) => "RelayError",
        }
    }

    /// Whether a retry of the invocation may succeed.
    pub fn is_retryable(&self) -> bool {
        match *self {
            #[cfg(feature = "consumer")]
            InvocationError::Consumer(ref e) => e.is_retryable(),
            #[cfg(feature = "relay")]
            InvocationError::Relay(_) => true,
        }
    }
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(e: InvocationError) -> Self {
        lambda_runtime::Diagnostic { error_type: e.error_type().into(), error_message: e.to_string() }
    }
}

/// The Rust snippets of the repository's README.md and docs/ pages (today all in
/// docs/use-in-your-service.md: producer, relay, consumer, its unit test, claim check) compile as
/// doctests of this crate (it depends on the other two), so the docs cannot drift from the API.
/// Every page is included, so a snippet moved to another page still compiles; a new page under
/// docs/ is added here. Not part of the published crate's API: compiled only by
/// `cargo test --doc` inside the repository, with the features the snippets use.
#[cfg(all(doctest, feature = "relay", feature = "consumer", feature = "claim-check"))]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/contracts.md")]
#[doc = include_str!("../../../docs/failure-behaviour.md")]
#[doc = include_str!("../../../docs/ordering.md")]
#[doc = include_str!("../../../docs/use-in-your-service.md")]
#[doc = include_str!("../../../docs/deploy.md")]
#[doc = include_str!("../../../docs/operations.md")]
#[doc = include_str!("../../../docs/local-runtime.md")]
#[doc = include_str!("../../../docs/webhooks.md")]
#[doc = include_str!("../../../docs/cost.md")]
#[doc = include_str!("../../../docs/layout.md")]
#[doc = include_str!("../../../docs/tracing.md")]
pub struct DocsDoctests;
