//! Transactional outbox and inbox for AWS serverless, in Rust.
//!
//! The dual-write problem — a service saves an order and then publishes `OrderCreated`, and a
//! crash in between loses the event or announces a rolled-back order — is solved in three steps:
//!
//! 1. **Outbox** ([`OutboxWriter`], feature `writer`): the producer writes its business item and an
//!    outbox item in ONE DynamoDB `TransactWriteItems` call ([`transact_write`]): build an
//!    [`Event`] from any `Serialize` payload, [`OutboxTransaction::emit`] it beside your writes,
//!    and a cancelled transaction answers which write failed ([`CommitError`]).
//! 2. **Relay** ([`relay`], feature `relay`): the outbox table's DynamoDB Stream triggers the
//!    relay, which publishes each new outbox item to EventBridge with `PutEvents` — batched,
//!    retried, failures reported per record through `batchItemFailures`, poison records
//!    dead-lettered ([`dead_letter`]). Delivery is at-least-once. The crate `outbox-lambda`
//!    (feature `relay`) has the whole relay function, `outbox_lambda::relay::run_from_env`.
//! 3. **Inbox** ([`inbox`], feature `inbox`): each consumer records the event id in an inbox
//!    table in the same transaction as its effect, so every event takes effect exactly once.
//!    [`consumer::Consumer`] does decode → claim → your writes → answer → dead-letter; you write one
//!    handler per event type ([`consumer`]). Effects outside DynamoDB use
//!    [`inbox::InboxStore::guarded`]. The store is a trait: [`inbox::Inbox`] (DynamoDB) in Lambda,
//!    [`inbox::MemoryInbox`] in your unit tests.
//!
//! The contracts between the steps — outbox item attributes and the event on the bus — live in
//! [`envelope`].
//!
//! Beside this crate: `outbox-lambda` runs the relay and consumers as Lambda functions
//! (configuration from the environment, SDK time-outs, CloudWatch EMF metrics), and
//! `outbox-webhooks` signs, verifies and delivers Standard Webhooks.
//!
//! # Features
//!
//! | feature | brings | needs |
//! |---|---|---|
//! | `writer` | [`Event`], [`OutboxWriter`], [`OutboxTransaction`], [`CommitError`], [`transact_write`], [`AwsError`] | `aws-sdk-dynamodb` |
//! | `inbox` | [`consumer`] ([`consumer::Consumer`], [`consumer::Tx`]), [`inbox`] ([`inbox::Inbox`], [`inbox::MemoryInbox`], [`inbox::InboxStore`], [`inbox::PayloadHash`]), [`ordering`] ([`ordering::Ordered`]) | `writer`, `aws-sdk-sqs`, `serde_json_canonicalizer` |
//! | `relay` | [`relay`] | `aws-sdk-eventbridge`, `aws-sdk-sqs` |
//! | `claim-check` | `claim_check`, `ClaimCheck`: payloads too large for an outbox item or a `PutEvents` entry stored in S3, fetched and verified by consumers | `writer`, `aws-sdk-s3` |
//! | `metrics` | counts through the `metrics` facade (a recorder is the application's: `outbox-lambda` installs CloudWatch EMF) | `metrics` |
//! | `test-util` | `testing`: DynamoDB faults for your tests (a lost `TransactWriteItems` answer) | `writer`, `aws-smithy-mocks` |
//! | `opentelemetry` | [`TraceContext::current`] reads the current `tracing` span's OpenTelemetry context; `TraceContext` to and from OpenTelemetry span contexts; the consumer's event span is a child of the event's `traceparent`, linked to the invocation's span (the application installs the exporter: `outbox-lambda`'s feature `opentelemetry`) | `opentelemetry` (API), `tracing-opentelemetry` |
//!
//! The default is none of them. A producer-only service depends on
//! `outbox = { version = "0.1", features = ["writer"] }` and compiles neither EventBridge, SQS,
//! `lambda_runtime` nor an HTTP client.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "writer", feature = "relay"))]
mod aws_error;
#[cfg(feature = "claim-check")]
pub mod claim_check;
#[cfg(feature = "inbox")]
pub mod consumer;
pub mod contract;
pub mod dead_letter;
pub mod envelope;
#[cfg(all(test, feature = "inbox"))]
mod fixtures;
#[cfg(feature = "inbox")]
pub mod inbox;
#[cfg(feature = "inbox")]
pub mod ordering;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(any(all(test, feature = "writer"), feature = "test-util"))]
pub mod testing;
#[cfg(feature = "writer")]
pub mod trace_context;
#[cfg(feature = "writer")]
mod transaction;
#[cfg(feature = "writer")]
mod writer;

// One path per item: the producer's API at the root; each other concept in its module
// (`outbox::consumer::Consumer`, `outbox::inbox::Inbox`, `outbox::relay::Relay`, …), there only.
#[cfg(any(feature = "writer", feature = "relay"))]
pub use aws_error::{AwsError, AwsErrorKind, RETRYABLE_CANCELLATION_CODES};
#[cfg(feature = "writer")]
pub use trace_context::TraceContext;
#[cfg(feature = "writer")]
pub use transaction::{all_old, transact_write, transact_write_with_token, CommitError, ConditionFailed, TransactionError, MAX_TRANSACTION_ITEMS};
#[cfg(feature = "writer")]
pub use writer::{current_trace_header, AggregateSequence, Event, OutboxTransaction, OutboxWriter, WriteError, TRACE_HEADER_ENV};

// The crates whose types appear in this crate's public signatures, re-exported so a user
// names (and matches) one version of each: `outbox::aws_sdk_dynamodb::Client`, …
#[cfg(any(feature = "inbox", feature = "relay"))]
pub use aws_lambda_events;
#[cfg(feature = "writer")]
pub use aws_sdk_dynamodb;
#[cfg(feature = "relay")]
pub use aws_sdk_eventbridge;
#[cfg(feature = "claim-check")]
pub use aws_sdk_s3;
#[cfg(any(feature = "inbox", feature = "relay"))]
pub use aws_sdk_sqs;
