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
//!    dead-lettered ([`dead_letter`]). Delivery is at-least-once. The crate `outbox-lambda`
//!    (feature `relay`) has the whole relay function, `outbox_lambda::relay::run_from_env`.
//! 3. **Inbox** ([`inbox`], feature `inbox`): each consumer records the event id in an inbox
//!    table in the same transaction as its effect, so every event takes effect exactly once.
//!    [`Consumer`] does decode → claim → your writes → answer → dead-letter; you write one
//!    handler per event type ([`consumer`]). Effects outside DynamoDB use
//!    [`InboxStore::guarded`]. The store is a trait: [`Inbox`] (DynamoDB) in Lambda,
//!    [`MemoryInbox`] in your unit tests.
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
//! | `writer` | [`Event`], [`OutboxWriter`], [`OutboxTransaction`], [`CommitError`], [`transaction`] | `aws-sdk-dynamodb` |
//! | `inbox` | [`Consumer`], [`Tx`], [`InboxStore`], [`Inbox`], [`MemoryInbox`], [`consumer`], [`inbox`] | `writer`, `aws-sdk-sqs` |
//! | `relay` | [`relay`] | `aws-sdk-eventbridge`, `aws-sdk-sqs` |
//! | `claim-check` | `claim_check`, `ClaimCheck`: payloads too large for an outbox item or a `PutEvents` entry stored in S3, fetched and verified by consumers | `writer`, `aws-sdk-s3` |
//! | `metrics` | counts through the `metrics` facade (a recorder is the application's: `outbox-lambda` installs CloudWatch EMF) | `metrics` |
//! | `test-util` | `testing`: DynamoDB faults for your tests (a lost `TransactWriteItems` answer) | `writer`, `aws-smithy-mocks` |
//!
//! The default is none of them. A producer-only service depends on
//! `outbox = { version = "0.1", features = ["writer"] }` and compiles neither EventBridge, SQS,
//! `lambda_runtime` nor an HTTP client.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "writer", feature = "relay"))]
pub mod aws_error;
#[cfg(feature = "claim-check")]
pub mod claim_check;
#[cfg(feature = "inbox")]
pub mod consumer;
pub mod dead_letter;
pub mod envelope;
#[cfg(feature = "inbox")]
pub mod inbox;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(any(all(test, feature = "writer"), feature = "test-util"))]
pub mod testing;
#[cfg(feature = "writer")]
pub mod transaction;
#[cfg(feature = "writer")]
pub mod writer;

#[cfg(feature = "claim-check")]
pub use claim_check::{ClaimCheck, ClaimCheckError};
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
pub use writer::{Event, OutboxTransaction, OutboxWriter, WriteError};
