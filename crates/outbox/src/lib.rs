//! Transactional outbox and inbox for AWS serverless, in Rust.
//!
//! The dual-write problem — a service saves an order and then publishes `OrderCreated`, and a
//! crash in between loses the event or announces a rolled-back order — is solved in three steps:
//!
//! 1. **Outbox** ([`writer`], feature `writer`): the producer writes its business item and an
//!    outbox item in ONE DynamoDB `TransactWriteItems` call ([`transaction`]): build an
//!    [`Event`] from any `Serialize` payload, [`OutboxTransaction::emit`] it beside your writes,
//!    and a cancelled transaction answers which write failed ([`CommitError`]).
//! 2. **Relay** ([`relay`], feature `relay`): the outbox table's DynamoDB Stream triggers the
//!    relay, which publishes each new outbox item to EventBridge with `PutEvents` — batched,
//!    retried, failures reported per record through `batchItemFailures`, poison records
//!    dead-lettered ([`dead_letter`]). Delivery is at-least-once. With feature `lambda`,
//!    [`relay::lambda::run_from_env`] is the whole relay function.
//! 3. **Inbox** ([`inbox`], feature `inbox`): each consumer records the event id in an inbox
//!    table in the same transaction as its effect, so every event takes effect exactly once.
//!    [`Consumer`] does decode → claim → your writes → answer → dead-letter; you write one
//!    handler per event type ([`consumer`]). Effects outside DynamoDB use
//!    [`InboxStore::guarded`]. The store is a trait: [`Inbox`] (DynamoDB) in Lambda,
//!    [`MemoryInbox`] in your unit tests.
//!
//! 4. **Webhooks** ([`webhook`], feature `webhook`): events delivered to partners as signed HTTP
//!    `POST`s with backoff, and partners' signed webhooks verified on the way in.
//!
//! The contracts between the steps — outbox item attributes and the event on the bus — live in
//! [`envelope`]. [`config`] reads settings from the environment.
//!
//! # Features
//!
//! | feature | brings | needs |
//! |---|---|---|
//! | `writer` | [`Event`], [`OutboxWriter`], [`OutboxTransaction`], [`CommitError`], [`transaction`] | `aws-sdk-dynamodb` |
//! | `inbox` | [`Consumer`], [`Tx`], [`InboxStore`], [`Inbox`], [`MemoryInbox`], [`consumer`], [`inbox`] | `writer`, `aws-sdk-sqs` |
//! | `relay` | [`relay`] | `aws-sdk-eventbridge`, `aws-sdk-sqs` |
//! | `lambda` | [`lambda`], [`relay::lambda`] (with `relay`), `Consumer::handle(LambdaEvent)` and `Diagnostic` conversions (with `inbox`) | `lambda_runtime`, `aws-config` |
//! | `claim-check` (not default) | `claim_check`, `ClaimCheck`: payloads too large for an outbox item or a `PutEvents` entry stored in S3, fetched and verified by consumers | `writer`, `aws-sdk-s3` |
//! | `metrics` | counts through the `metrics` facade; CloudWatch EMF with `lambda` | `metrics` |
//! | `webhook` | [`webhook`]: Standard Webhooks signing and verification, backoff, outcome by status | `hmac`, `sha2`, `base64` |
//! | `webhook-dispatcher` | `webhook::client`, `webhook::dispatcher`: delivery to subscribers from SQS | `webhook`, `inbox`, `reqwest` (rustls), `aws-sdk-secretsmanager` |
//!
//! The default is all of them. A producer-only service depends on
//! `outbox = { version = "0.1", default-features = false, features = ["writer"] }` and
//! compiles neither EventBridge, SQS nor `lambda_runtime`.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "writer", feature = "relay"))]
pub mod aws_error;
#[cfg(feature = "claim-check")]
pub mod claim_check;
pub mod config;
#[cfg(feature = "inbox")]
pub mod consumer;
pub mod dead_letter;
pub mod envelope;
#[cfg(feature = "inbox")]
pub mod inbox;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(feature = "writer")]
pub mod transaction;
#[cfg(feature = "webhook")]
pub mod webhook;
#[cfg(feature = "writer")]
pub mod writer;

#[cfg(feature = "claim-check")]
pub use claim_check::{ClaimCheck, ClaimCheckError};
pub use config::{ConfigError, Env};
#[cfg(feature = "inbox")]
pub use consumer::{Consumer, ConsumerDeadLetterQueue, ConsumerError, DeliveredEvent, EventHandler, Fallback, Handled, HandlerError, Tx};
pub use envelope::{EventMetadata, OutboxItem, PayloadRef};
#[cfg(feature = "inbox")]
pub use inbox::{Guarded, Inbox, InboxError, InboxOutcome, InboxStore, MemoryInbox};
#[cfg(feature = "relay")]
pub use relay::{Relay, RelayConfig};
#[cfg(feature = "writer")]
pub use transaction::{CommitError, ConditionFailed, TransactionError};
#[cfg(feature = "writer")]
pub use writer::{AggregateSequence, Event, OutboxTransaction, OutboxWriter, WriteError};

/// The Rust snippets of the repository's README ("Use it in your own service") compile as
/// doctests of this crate, so the README cannot drift from the API. Not part of the published
/// crate's API (only compiled by `cargo test --doc` inside the repository).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
