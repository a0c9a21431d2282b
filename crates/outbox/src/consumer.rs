//! Consumers: the library owns decode → inbox claim → your writes and events in the same
//! transaction → answer; you write the business logic per event type.
//!
//! ```no_run
//! # async fn example(dynamodb: aws_sdk_dynamodb::Client, sqs: aws_sdk_sqs::Client, payload: Box<serde_json::value::RawValue>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use outbox::consumer::{Consumer, ConsumerDeadLetterQueue, Fallback, HandlerError};
//! use outbox::inbox::Inbox;
//! use outbox::{ConditionFailed, Event, OutboxWriter};
//!
//! #[derive(serde::Deserialize)]
//! struct OrderCreated { order_id: String, quantity: u32 }
//!
//! #[derive(serde::Serialize)]
//! #[serde(rename_all = "snake_case")]
//! enum Outcome { Reserved, Rejected }
//!
//! let week = Duration::from_secs(7 * 24 * 3600);
//! let inbox = Inbox::new(dynamodb, "my-inbox", "reserve-stock", week);
//! let dead_letters = ConsumerDeadLetterQueue::new(sqs, "https://sqs…/my-dlq", "reserve-stock");
//! let consumer = Consumer::builder(inbox, dead_letters)
//!     .outbox(OutboxWriter::new("my-outbox", week))
//!     .on::<OrderCreated, _, _>("OrderCreated", |event, tx| async move {
//!         let order = event.data;
//!         tx.write(take_stock(&order.order_id, order.quantity)); // your conditional update: write 0
//!         let data = serde_json::json!({"order_id": order.order_id});
//!         tx.emit(Event::new("StockReserved", "example.stock", ("Reservation", order.order_id.as_str()), 1, &data)?
//!             .correlation_id(&event.metadata.correlation_id))?;
//!         // Not enough stock: nothing was written; record the rejection instead.
//!         tx.on_condition_failed(move |failed, tx| match failed {
//!             ConditionFailed::Write { index: 0, .. } => {
//!                 tx.emit(Event::new("StockRejected", "example.stock", ("Reservation", order.order_id.as_str()), 1, &data)?)?;
//!                 Ok(Fallback::Commit(Outcome::Rejected))
//!             }
//!             _ => Ok(Fallback::Duplicate), // settled by another event meanwhile
//!         });
//!         Ok::<_, HandlerError>(Outcome::Reserved)
//!     })
//!     .build();
//! // One invocation's payload (in Lambda: `outbox_lambda::LambdaConsumer::handle`, which bounds
//! // the retries by the invocation's deadline).
//! let answer = consumer.handle_payload(&payload).await?;
//! # let _ = answer; Ok(())
//! # }
//! # fn take_stock(order_id: &str, quantity: u32) -> aws_sdk_dynamodb::types::TransactWriteItem { unimplemented!() }
//! ```
//!
//! * A **duplicate** (same `detail.metadata.id`, any envelope id) writes nothing and answers
//!   `{"outcome": "duplicate"}`; the payload hash is the SHA-256 of `detail.data` as delivered,
//!   computed by the library.
//! * What can **never succeed** — a malformed event, an id reused with another payload, a
//!   [`HandlerError::Reject`] or [`HandlerError::Malformed`] — is sent to the dead-letter queue
//!   on the first attempt and answered `{"outcome": "dead_lettered"}` (the asynchronous-invocation
//!   retries are for what may pass).
//! * An ordered consumer's event that arrives **before its predecessor** is parked in the inbox
//!   table and answered `{"outcome": "parked"}`; it is applied, in its own transaction, right
//!   after its predecessor ([`ParkedEvent`](crate::ordering::ParkedEvent)).
//! * A fallback that finds **nothing to do** ([`Fallback::Duplicate`], [`Fallback::NothingToDo`])
//!   still records the event (inbox row with the outcome and reason, the aggregate's sequence)
//!   and answers `{"outcome": "nothing_to_do"}`.
//! * What **may succeed later** — a conflict, throttling, a 5xx or time-out, a
//!   [`HandlerError::Retry`] — fails the invocation (behind an SQS queue: the message is reported
//!   in `batchItemFailures`, [`SqsBatchAnswer`]), so Lambda retries it and, when retries run
//!   out, sends it to the function's on-failure destination. Transient failures (conflicts,
//!   throttling, 5xx, time-outs, a condition without fallback, [`HandlerError::Retry`]) are first
//!   retried inside the invocation, with backoff and full jitter, bounded by the time left before
//!   the Lambda deadline ([`RetryPolicy`]); only then does the invocation fail.
//!
//! Your unit tests use [`MemoryInbox`](crate::inbox::MemoryInbox) and [`MemoryDeadLetters`]
//! instead of the AWS ones.
//!
//! # Decoding
//!
//! The Lambda target gets the EventBridge envelope (`id`, `detail-type`, `source`, `time`,
//! `detail`, …). This module checks that `detail` follows the envelope of
//! [`crate::envelope`] (`{"metadata": …, "data": …}`), that `detail-type`/`source` agree with the
//! metadata, and decodes `data` into the consumer's own type, naming the offending field when
//! anything is wrong. Such an event is *malformed*: no retry can fix it, so
//! [`Consumer`] sends it to the dead-letter queue on the first attempt instead of
//! letting Lambda retry it (the asynchronous-invocation retries are for failures that may pass).
//!
//! Each message body is read once (`consumer/message.rs`): the envelope, `detail` split into
//! its raw parts (`metadata`, `data`, `data_ref`), `detail.metadata` decoded, the event id and
//! the span's fields come from that one read, which the SQS batch, the delivery, parking, the
//! drain and the dead-letter path share; the handler's route decodes only `detail.data`, once,
//! into the handler's own type (a claim-checked event: the payload fetched in its place). The parked check's message is told apart from an event by a
//! substring test before any parse ([`ParkedCheck::recognise`]).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::envelope::EventMetadata;

mod dead_letters;
mod dispatch;
mod error;
mod fifo;
mod handler;
mod message;
mod metrics;
mod parked_check;
mod sqs;
mod tx;

pub use dead_letters::{ConsumerDeadLetterQueue, DeadLetterError, DeadLetterSink, DeadLettered, MemoryDeadLetters};
pub use dispatch::{Consumer, ConsumerBuilder, ConsumerResponse, Handled, RetryPolicy, SettledEvent, DEFAULT_PARKED_BUDGET};
pub use error::{BoxError, ConsumerError, HandlerError};
pub use handler::EventHandler;
pub use metrics::DEFAULT_NAMESPACE as DEFAULT_METRICS_NAMESPACE;
pub use parked_check::{ParkedCheck, ParkedReport, CHECK_LIMIT, CHECK_PARKED, DEFAULT_GAP_AFTER};
pub use sqs::{InvocationAnswer, ItemFailure, SqsBatchAnswer};
pub use tx::{Fallback, Tx, SETTLED_ELSEWHERE};

/// An event as a Lambda EventBridge target receives it, with `detail` kept as raw JSON so that
/// nothing in it is rounded before the consumer decodes it.
pub type RawEventBridgeEvent = EventBridgeEvent<Box<RawValue>>;

/// The invocation payload of a consumer, undecoded. Consumers take this rather than
/// [`RawEventBridgeEvent`] so that an event without `detail-type` or `source` reaches their code
/// (and the dead-letter queue, with the reason) instead of failing in the runtime's
/// deserialisation, which Lambda would retry as if it could pass.
pub type RawEvent = Box<RawValue>;

/// Reads the EventBridge envelope of `payload`.
///
/// # Errors
/// [`MalformedEvent`] naming what is missing (`detail-type`, `source`, `detail`).
pub fn decode_envelope(payload: &RawValue) -> Result<RawEventBridgeEvent, MalformedEvent> {
    serde_json::from_str(payload.get()).map_err(|e| MalformedEvent(format!("not an EventBridge event: {e}")))
}

/// A delivered event, decoded.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeliveredEvent<T> {
    /// `detail.metadata`; `metadata.id` is the idempotency key.
    pub metadata: EventMetadata,
    /// `detail.data`, decoded.
    pub data: T,
    /// `detail.data` as delivered (JSON text), for hashing.
    pub raw_data: String,
    /// The EventBridge envelope id of this delivery (differs between duplicates).
    pub envelope_id: Option<String>,
}

/// Why a delivered event can never be processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedEvent(pub String);

/// `detail`'s parts, as raw JSON (`None`: missing, or `null`).
#[derive(Deserialize)]
pub(crate) struct DetailParts<'a> {
    #[serde(borrow)]
    pub(crate) metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) data: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) data_ref: Option<&'a RawValue>,
}

/// Decodes `event` into [`DeliveredEvent<T>`].
///
/// # Errors
/// [`MalformedEvent`] naming the field: `detail` not an object (e.g. a JSON string), missing
/// `detail.metadata` or `detail.data`, a metadata field missing or of the wrong type,
/// `detail-type` different from `detail.metadata.type`, or `data` not matching `T`.
pub fn decode_event<T: DeserializeOwned>(event: &RawEventBridgeEvent) -> Result<DeliveredEvent<T>, MalformedEvent> {
    let parts = split_detail(event.detail.get())?;
    let metadata = parts.metadata.map(|m| decode_metadata(m.get()));
    let (metadata, raw_data) = checked(&event.detail_type, metadata.as_ref(), parts.data.map(RawValue::get))?;
    let data = decode_data(raw_data)?;
    Ok(DeliveredEvent { metadata: metadata.clone(), data, raw_data: raw_data.to_owned(), envelope_id: event.id.clone() })
}

/// Splits `detail` (JSON text) into its raw parts: the one parse of `detail`.
///
/// # Errors
/// `detail` is not a JSON object.
pub(crate) fn split_detail(detail: &str) -> Result<DetailParts<'_>, MalformedEvent> {
    if !detail.trim_start().starts_with('{') {
        return Err(MalformedEvent(format!("detail must be a JSON object, got {}", json_kind(detail))));
    }
    message::counted(message::Part::Detail);
    serde_json::from_str(detail).map_err(|e| MalformedEvent(format!("detail: {e}")))
}

/// Decodes `detail.metadata` (raw JSON), naming the offending field.
pub(crate) fn decode_metadata(metadata: &str) -> Result<EventMetadata, MalformedEvent> {
    message::counted(message::Part::Metadata);
    decode_at("detail.metadata", metadata)
}

/// Decodes `detail.data` (raw JSON) into `T`, naming the offending field.
pub(crate) fn decode_data<T: DeserializeOwned>(data: &str) -> Result<T, MalformedEvent> {
    message::counted(message::Part::Data);
    decode_at("detail.data", data)
}

/// The checks of an event whose `detail` was split, in [`decode_event`]'s order (so the first
/// error is the same): `detail.metadata` present, `detail.data` present, the metadata decoded
/// (`metadata`: its decoding, `None` when missing), its id not empty, `detail-type` equal to
/// `detail.metadata.type`. Answers the metadata and `detail.data` (raw JSON).
pub(crate) fn checked<'m, 'd>(
    detail_type: &str,
    metadata: Option<&'m Result<EventMetadata, MalformedEvent>>,
    data: Option<&'d str>,
) -> Result<(&'m EventMetadata, &'d str), MalformedEvent> {
    let metadata = metadata.ok_or_else(|| MalformedEvent("detail.metadata is missing".into()))?;
    let data = data.ok_or_else(|| MalformedEvent("detail.data is missing".into()))?;
    let metadata = metadata.as_ref().map_err(Clone::clone)?;
    if metadata.id.trim().is_empty() {
        return Err(MalformedEvent("detail.metadata.id is empty".into()));
    }
    if detail_type != metadata.event_type {
        return Err(MalformedEvent(format!("detail-type {:?} differs from detail.metadata.type {:?}", detail_type, metadata.event_type)));
    }
    Ok((metadata, data))
}

fn decode_at<T: DeserializeOwned>(prefix: &str, json: &str) -> Result<T, MalformedEvent> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { prefix.to_owned() } else { format!("{prefix}.{path}") };
        MalformedEvent(format!("{path}: {}", e.inner()))
    })
}

fn json_kind(json: &str) -> &'static str {
    match json.trim_start().chars().next() {
        Some('"') => "a string",
        Some('[') => "an array",
        Some('n') => "null",
        Some('t' | 'f') => "a boolean",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Data {
        n: u32,
    }

    fn event(detail: &str) -> RawEventBridgeEvent {
        serde_json::from_str(&format!(
            r#"{{"version":"0","id":"env-1","detail-type":"T","source":"s","time":"2026-11-29T08:00:00Z","region":"us-east-1","resources":[],"detail":{detail}}}"#
        ))
        .unwrap()
    }

    const META: &str = r#"{"id":"e-1","type":"T","version":1,"source":"s","time":"2026-11-29T08:00:00.000Z","subject":"a","aggregate_type":"A","sequence":1,"correlation_id":"c"}"#;

    #[test]
    fn decodes_a_well_formed_event() {
        let ev = decode_event::<Data>(&event(&format!(r#"{{"metadata":{META},"data":{{"n":3}}}}"#))).unwrap();
        assert_eq!(ev.metadata.id, "e-1");
        assert_eq!(ev.data.n, 3);
        assert_eq!(ev.raw_data, r#"{"n":3}"#);
        assert_eq!(ev.envelope_id.as_deref(), Some("env-1"));
    }

    #[test]
    fn names_what_is_wrong() {
        let err = |d: &str| decode_event::<Data>(&event(d)).unwrap_err().0;
        assert!(err(r#""{\"metadata\":1}""#).contains("detail must be a JSON object, got a string"));
        assert!(err(r#"{"data":{"n":1}}"#).contains("detail.metadata is missing"));
        assert!(err(&format!(r#"{{"metadata":{META}}}"#)).contains("detail.data is missing"));
        assert!(err(&format!(r#"{{"metadata":{META},"data":{{"n":"x"}}}}"#)).starts_with("detail.data.n: invalid type"));
        assert!(err(r#"{"metadata":{"id":"e"},"data":{}}"#).starts_with("detail.metadata: missing field"));
        let wrong_type = META.replace(r#""type":"T""#, r#""type":"U""#);
        assert!(err(&format!(r#"{{"metadata":{wrong_type},"data":{{"n":1}}}}"#)).contains("differs from detail.metadata.type"));
    }
}
