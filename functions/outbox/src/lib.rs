//! Transactional outbox and inbox for AWS serverless, in Rust.
//!
//! The dual-write problem — a service saves an order and then publishes `OrderCreated`, and a
//! crash in between loses the event or announces a rolled-back order — is solved in three steps:
//!
//! 1. **Outbox** ([`outbox`]): the producer writes its business item and an outbox item in ONE
//!    DynamoDB `TransactWriteItems` call ([`transaction`]).
//! 2. **Relay** ([`relay`]): the outbox table's DynamoDB Stream triggers the relay, which
//!    publishes each new outbox item to EventBridge with `PutEvents` — batched, retried,
//!    failures reported per record through `batchItemFailures`, poison records dead-lettered
//!    ([`dead_letter`]). Delivery is at-least-once.
//! 3. **Inbox** ([`inbox`]): each consumer records the event id in an inbox table in the same
//!    transaction as its effect, so every event takes effect exactly once ([`consumer`] reads
//!    the delivered event).
//!
//! The contracts between the steps — outbox item attributes and the event on the bus — live in
//! [`envelope`]. [`config`] reads settings from the environment. [`app`] is the sample
//! application (an order API, the relay function, an inventory consumer) that the Lambda
//! functions in `functions/` and the local runtime run.

#![warn(missing_docs)]

pub mod app;
pub mod config;
pub mod consumer;
pub mod dead_letter;
pub mod envelope;
pub mod inbox;
pub mod outbox;
pub mod relay;
pub mod transaction;
