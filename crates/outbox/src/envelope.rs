//! The event envelope: the outbox item as it is stored in DynamoDB, and the event as it goes on
//! the EventBridge bus.
//!
//! # Outbox item (DynamoDB attributes)
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `pk` | S | `<aggregate_type>#<aggregate_id>` |
//! | `sk` | S | `sequence`, zero-padded to 20 digits, so items sort by sequence |
//! | `event_id` | S | UUIDv7, the idempotency key consumers dedupe on |
//! | `event_type` | S | e.g. `OrderCreated`; becomes the bus event's `DetailType` |
//! | `event_version` | N | schema version of `payload` |
//! | `source` | S | e.g. `example.orders`; becomes the bus event's `Source` |
//! | `aggregate_type`, `aggregate_id` | S | the aggregate the event belongs to |
//! | `sequence` | N | per aggregate, from 1 |
//! | `occurred_at` | S | RFC 3339, UTC; becomes the bus event's `Time` |
//! | `payload` | S | the event data as JSON *text*, so DynamoDB never rounds a number; `null` when `payload_ref` is set |
//! | `payload_ref` | M, optional | claim check (feature `claim-check`): where the payload is in S3, a [`PayloadRef`] `{bucket, key, size, sha256}` |
//! | `correlation_id` | S | carried into the event metadata |
//! | `trace_header` | S, optional | X-Ray trace header; becomes the entry's `TraceHeader` |
//! | `traceparent` | S, optional | W3C trace context of the producing request (`00-<trace id>-<parent id>-<flags>`); carried into the event metadata ([`crate::trace_context`]) |
//! | `tracestate` | S, optional | W3C vendors' trace state beside it, verbatim |
//! | `previous` | M, optional | event type → sequence of the aggregate's latest earlier event of that type, e.g. `{"OrderCreated": 1}`; lets an ordered consumer that handles some of the types wait only for those (see [`crate::inbox`]) |
//! | `expires_at` | N | epoch seconds, the table's TTL attribute |
//!
//! An item without `event_id` is not an outbox item (other item types may share the table); an
//! item with `event_id` that breaks this contract is a *malformed* outbox item.
//!
//! # Event on the bus
//!
//! `Source` = `source`, `DetailType` = `event_type`, `Time` = `occurred_at`, and
//! `Detail` = `{"metadata": {...}, "data": <payload>}` (see [`EventMetadata`]). EventBridge gives
//! every `PutEvents` entry a new envelope `id`, so consumers dedupe on `detail.metadata.id`.
//! The payload is embedded as the producer wrote it (a [`RawValue`]): numbers are never parsed
//! into `f64`, unicode is never re-escaped, and `detail.data` is never a JSON string.
//!
//! An item with a `payload_ref` (a payload too large for the item or for one `PutEvents` entry,
//! stored in S3 by the claim check) is published as `{"metadata": {...}, "data_ref": {"bucket",
//! "key", "size", "sha256"}}`: the reference, never the bytes. The library's consumer fetches and
//! verifies it before decoding (`crate::claim_check`, feature `claim-check`).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// DynamoDB's maximum item size: 400 KB, counted over every attribute's name and value as
/// [`OutboxItem::item_size`] does. Source:
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html>.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The longest retention (TTL) of an outbox item, an inbox row or a webhook attempt record:
/// 3,650 days (315,360,000 seconds, about ten years). Configuration refuses longer ones at start
/// (`*_RETENTION_SECONDS`); a longer `Duration` given in code is capped to it.
///
/// Why this bound: `expires_at` is DynamoDB's TTL attribute, a Number of epoch seconds, computed
/// as now + retention. Bounding the retention keeps that sum a plausible epoch second, far inside
/// `i64`, so it can never wrap into the past (a row born expired: the inbox would let the next
/// delivery of its event claim it again and apply it twice). DynamoDB's TTL deletes an item only
/// once its `expires_at` is in the past, so a value years ahead already means "keep": a longer
/// retention would keep nothing more safely. It is far beyond every window in which an event can
/// be redelivered (SQS keeps a message 14 days at most, EventBridge retries for 24 h, Lambda's
/// asynchronous queue 6 h), and a value above it is almost always a unit mistake (16 days written
/// in milliseconds is 1,382,400,000 "seconds", 43 years). Source: "Using DynamoDB Time to Live",
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-before-you-start.html>.
pub const MAX_RETENTION: std::time::Duration = std::time::Duration::from_secs(3650 * 24 * 3600);

/// `expires_at` (the TTL attribute) of an item written at `now` and kept `retention` (at most
/// [`MAX_RETENTION`]; a longer one is capped): epoch seconds, never earlier than `now`, never
/// wrapping. The outbox writer, the inbox and the webhook attempt log all compute it here.
pub fn expires_at(now: DateTime<Utc>, retention: std::time::Duration) -> i64 {
    let seconds = retention.min(MAX_RETENTION).as_secs();
    // MAX_RETENTION is a few times 10^8 seconds: it fits an i64, and the sum saturates anyway.
    now.timestamp().saturating_add(i64::try_from(seconds).unwrap_or(i64::MAX))
}

/// The size of a DynamoDB item as DynamoDB counts it against [`MAX_ITEM_BYTES`]: for every
/// attribute, the UTF-8 bytes of its name plus its value's size — a string's UTF-8 bytes, a
/// binary's raw bytes, a number 1 byte per two significant digits plus 1, a Boolean or null 1
/// byte, a list or map 3 bytes plus, per element, 1 byte and the element (with its name, for a
/// map). Numbers are counted as an upper bound (DynamoDB calls its figure approximate). Source:
/// "Item sizes and formats",
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>.
pub fn item_size(item: &std::collections::HashMap<String, serde_dynamo::AttributeValue>) -> usize {
    item.iter().map(|(name, value)| name.len().saturating_add(value_size(value))).fold(0, usize::saturating_add)
}

fn value_size(value: &serde_dynamo::AttributeValue) -> usize {
    use serde_dynamo::AttributeValue as V;
    let sum = |sizes: &mut dyn Iterator<Item = usize>| sizes.fold(0, usize::saturating_add);
    match value {
        V::S(s) => s.len(),
        V::N(n) => number_size(n),
        V::B(b) => b.len(),
        V::Bool(_) | V::Null(_) => 1,
        V::M(m) => 3usize.saturating_add(sum(&mut m.iter().map(|(k, v)| k.len().saturating_add(value_size(v)).saturating_add(1)))),
        V::L(l) => 3usize.saturating_add(sum(&mut l.iter().map(|v| value_size(v).saturating_add(1)))),
        V::Ss(s) => sum(&mut s.iter().map(String::len)),
        V::Ns(n) => sum(&mut n.iter().map(|n| number_size(n))),
        V::Bs(b) => sum(&mut b.iter().map(Vec::len)),
    }
}

/// A number's size: 1 byte per two significant digits, plus 1. Counted over every digit after the
/// leading zeros (trailing zeros included) plus one for the exponent's alignment: an upper bound.
fn number_size(number: &str) -> usize {
    let digits = number.bytes().filter(u8::is_ascii_digit).skip_while(|d| *d == b'0').count();
    (digits.max(1) + 1).div_ceil(2) + 1
}

/// Default limit of one `PutEvents` request, in bytes: 1 MiB, raised from 256 KiB in January 2026.
/// Accounts or regions still on the old limit set `PUT_EVENTS_MAX_REQUEST_BYTES=262144`.
/// Source: the `PutEvents` API reference,
/// <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html>.
pub const DEFAULT_MAX_PUT_EVENTS_BYTES: usize = 1024 * 1024;

/// Width of the zero-padded sequence in the outbox sort key `sk` (20 digits hold any `u64`).
pub const SEQUENCE_WIDTH: usize = 20;

/// Where a claim-checked payload is stored: an S3 object, its size and SHA-256. The outbox
/// item's `payload_ref` attribute (a map) and the bus event's `detail.data_ref`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PayloadRef {
    /// S3 bucket name.
    pub bucket: String,
    /// Object key: `<prefix>/<event_id>`.
    pub key: String,
    /// Size of the payload (its JSON text) in bytes.
    pub size: u64,
    /// SHA-256 of the payload's bytes, lowercase hex (the same digest as the inbox's payload hash).
    pub sha256: String,
}

impl PayloadRef {
    /// The reference to `s3://<bucket>/<key>`, `size` bytes with SHA-256 `sha256` (lowercase hex).
    pub fn new(bucket: impl Into<String>, key: impl Into<String>, size: u64, sha256: impl Into<String>) -> Self {
        Self { bucket: bucket.into(), key: key.into(), size, sha256: sha256.into() }
    }
}

/// The outbox item exactly as stored in the outbox table (see the module docs for the contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OutboxItem {
    /// Partition key: `<aggregate_type>#<aggregate_id>`.
    pub pk: String,
    /// Sort key: [`OutboxItem::sequence`] zero-padded to [`SEQUENCE_WIDTH`] digits.
    pub sk: String,
    /// Event id (UUIDv7), the consumers' idempotency key.
    pub event_id: String,
    /// Event type, e.g. `OrderCreated`.
    pub event_type: String,
    /// Schema version of the payload.
    pub event_version: u32,
    /// Event source, e.g. `example.orders`.
    pub source: String,
    /// Aggregate type, e.g. `Order`.
    pub aggregate_type: String,
    /// Aggregate id, e.g. the order id.
    pub aggregate_id: String,
    /// Per-aggregate sequence, from 1.
    pub sequence: u64,
    /// When the event happened: RFC 3339, UTC.
    pub occurred_at: String,
    /// The event data, as JSON text (`null` when [`OutboxItem::payload_ref`] is set).
    pub payload: String,
    /// Where the payload is stored when it was too large to carry inline (claim check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_ref: Option<PayloadRef>,
    /// Correlation id of the request that caused the event.
    pub correlation_id: String,
    /// X-Ray trace header (`Root=…;Parent=…;Sampled=…`) of the producing invocation, if traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_header: Option<String>,
    /// W3C `traceparent` of the producing request (`00-<32 hex>-<16 hex>-<2 hex>`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C `tracestate` beside [`OutboxItem::traceparent`], verbatim, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// TTL: epoch seconds after which DynamoDB may delete the item.
    pub expires_at: i64,
    /// Event type → sequence of the aggregate's latest event of that type before this one
    /// (attribute `previous`, a map of numbers; absent when empty). See [`EventMetadata::previous`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub previous: BTreeMap<String, u64>,
}

/// Whether a DynamoDB item (as put) is an outbox item: it has the contract's `event_id`,
/// `occurred_at` and `payload` attributes (an inbox row has `event_id` but neither of the others).
/// A claim-checked item has them too (`payload` is `null`, beside `payload_ref`).
#[cfg(feature = "writer")]
pub fn is_outbox_item(item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>) -> bool {
    ["event_id", "occurred_at", "payload"].iter().all(|k| item.contains_key(*k))
}

/// Why an outbox item cannot become an event. Such an item is a poison record: retrying never
/// helps, so the relay dead-letters it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The DynamoDB item does not match the outbox item contract (missing or mistyped attribute).
    #[error("outbox item does not match the contract: {0}")]
    Decode(String),
    /// `payload` is not valid JSON text.
    #[error("outbox item `payload` is not valid JSON: {0}")]
    Payload(String),
    /// `occurred_at` is not an RFC 3339 timestamp.
    #[error("outbox item `occurred_at` is not RFC 3339: {0}")]
    OccurredAt(String),
    /// An attribute that must not be empty is empty.
    #[error("outbox item `{0}` is empty")]
    Empty(&'static str),
}

impl OutboxItem {
    /// An item of `aggregate` (type, id) with its keys, version 1, no claim check, correlation
    /// id, trace header or `previous`, and `expires_at` 0 (never, for TTL): the public fields
    /// take the rest. The writer builds the items it stores from an [`Event`](crate::Event).
    pub fn new(
        event_id: impl Into<String>,
        event_type: impl Into<String>,
        source: impl Into<String>,
        aggregate: (impl Into<String>, impl Into<String>),
        sequence: u64,
        occurred_at: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        let (aggregate_type, aggregate_id) = (aggregate.0.into(), aggregate.1.into());
        Self {
            pk: Self::partition_key(&aggregate_type, &aggregate_id),
            sk: Self::sort_key(sequence),
            event_id: event_id.into(),
            event_type: event_type.into(),
            event_version: 1,
            source: source.into(),
            aggregate_type,
            aggregate_id,
            sequence,
            occurred_at: occurred_at.into(),
            payload: payload.into(),
            payload_ref: None,
            correlation_id: String::new(),
            trace_header: None,
            traceparent: None,
            tracestate: None,
            expires_at: 0,
            previous: BTreeMap::new(),
        }
    }

    /// Sort key for `sequence`: zero-padded to [`SEQUENCE_WIDTH`] digits.
    pub fn sort_key(sequence: u64) -> String {
        format!("{sequence:0width$}", width = SEQUENCE_WIDTH)
    }

    /// Partition key for an aggregate: `<aggregate_type>#<aggregate_id>`.
    pub fn partition_key(aggregate_type: &str, aggregate_id: &str) -> String {
        format!("{aggregate_type}#{aggregate_id}")
    }

    /// The [`event_span`] of this item's event.
    pub fn span(&self) -> tracing::Span {
        event_span(
            &self.event_id,
            &self.event_type,
            &self.aggregate_type,
            &self.aggregate_id,
            &self.correlation_id,
            trace_id(self.traceparent.as_deref()),
        )
    }

    /// Decodes an outbox item from a DynamoDB item (stream image or table item).
    ///
    /// # Errors
    /// [`EnvelopeError::Decode`] naming the attribute when the item breaks the contract, e.g.
    /// "attribute `sequence`: number too large to fit in target type" or "missing field
    /// `event_type`".
    pub fn from_item(item: serde_dynamo::Item) -> Result<Self, EnvelopeError> {
        let map: std::collections::HashMap<String, serde_dynamo::AttributeValue> = item.into();
        let deserializer = serde_dynamo::Deserializer::from_attribute_value(serde_dynamo::AttributeValue::M(map));
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // The root's errors ("missing field `x`") name the attribute already.
            EnvelopeError::Decode(if path == "." { inner.to_string() } else { format!("attribute `{path}`: {inner}") })
        })
    }

    /// The item's size as DynamoDB counts it against [`MAX_ITEM_BYTES`] ([`item_size`] of the
    /// attributes [`OutboxItem::to_item`] stores: every one, `payload_ref` and `previous` included).
    pub fn item_size(&self) -> usize {
        match self.to_item::<serde_dynamo::Item>() {
            Ok(item) => item_size(&item),
            // Cannot happen (strings and integers); too large to store is the safe answer.
            Err(_) => usize::MAX,
        }
    }

    /// Encodes the item as DynamoDB attributes.
    ///
    /// # Errors
    /// None in practice (every field is a string or an integer); the `Result` is serde_dynamo's.
    pub fn to_item<I: From<serde_dynamo::Item>>(&self) -> Result<I, serde_dynamo::Error> {
        serde_dynamo::to_item(self)
    }

    /// Builds the event that goes on the bus, checking what the contract requires of it.
    ///
    /// # Errors
    /// [`EnvelopeError`] when the payload is not JSON, `occurred_at` is not RFC 3339, or a
    /// required attribute is empty.
    pub fn to_bus_event(&self) -> Result<BusEvent, EnvelopeError> {
        #[cfg(test)]
        BUS_EVENTS_BUILT.with(|built| built.set(built.get() + 1));
        for (name, value) in
            [("event_id", &self.event_id), ("event_type", &self.event_type), ("source", &self.source), ("aggregate_id", &self.aggregate_id)]
        {
            if value.trim().is_empty() {
                return Err(EnvelopeError::Empty(name));
            }
        }
        let time = DateTime::parse_from_rfc3339(&self.occurred_at)
            .map_err(|e| EnvelopeError::OccurredAt(format!("{:?}: {e}", self.occurred_at)))?
            .with_timezone(&Utc);
        let data: Option<&RawValue> = match &self.payload_ref {
            Some(_) => None,
            None => Some(serde_json::from_str(&self.payload).map_err(|e| EnvelopeError::Payload(e.to_string()))?),
        };
        let metadata = EventMetadata {
            id: self.event_id.clone(),
            event_type: self.event_type.clone(),
            version: self.event_version,
            source: self.source.clone(),
            time: time.to_rfc3339_opts(SecondsFormat::Millis, true),
            subject: self.aggregate_id.clone(),
            aggregate_type: self.aggregate_type.clone(),
            sequence: self.sequence,
            correlation_id: self.correlation_id.clone(),
            previous: self.previous.clone(),
            traceparent: self.traceparent.clone().filter(|t| !t.is_empty()),
            tracestate: self.tracestate.clone().filter(|t| !t.is_empty()),
        };
        // Serialising a struct of strings, integers and a RawValue cannot fail.
        let detail = match (data, &self.payload_ref) {
            (Some(data), _) => serde_json::to_string(&EventDetail { metadata, data }),
            (None, data_ref) => serde_json::to_string(&EventDetailRef { metadata, data_ref }),
        }
        .map_err(|e| EnvelopeError::Payload(e.to_string()))?;
        Ok(BusEvent {
            source: self.source.clone(),
            detail_type: self.event_type.clone(),
            time,
            detail,
            trace_header: self.trace_header.clone().filter(|t| !t.is_empty()),
        })
    }
}

#[cfg(test)]
thread_local! {
    /// Bus events this thread built ([`OutboxItem::to_bus_event`]): the writer's tests count them.
    pub(crate) static BUS_EVENTS_BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The `tracing` span of one event, named `event`, with the fields every function logs an event
/// by: `event_id`, `event_type`, `aggregate_type`, `aggregate_id`, `correlation_id`, `trace_id`
/// (the W3C trace id of the event's `traceparent`, 32 hex digits; empty without one), and
/// `attempt` (empty until [`tracing::Span::record`]ed: the consumer's attempt within the
/// invocation, the relay's `PutEvents` attempt, the webhook delivery's receive count). Every line
/// logged inside it carries them; with Lambda's JSON log format (`LoggingConfig.LogFormat: JSON`,
/// which sets `AWS_LAMBDA_LOG_FORMAT=JSON` for `lambda_runtime::tracing::init_default_subscriber`)
/// they are the line's `span.event_id`, `span.event_type`, … (docs/operations.md, "Logs":
/// the Logs Insights query).
pub fn event_span(event_id: &str, event_type: &str, aggregate_type: &str, aggregate_id: &str, correlation_id: &str, trace_id: &str) -> tracing::Span {
    tracing::info_span!("event", event_id, event_type, aggregate_type, aggregate_id, correlation_id, trace_id, attempt = tracing::field::Empty)
}

/// The trace id of a `traceparent` (`00-<trace id>-…`: its second field when it is 32
/// characters), or `""`: what [`event_span`] logs. Not validated further: a log field only.
pub fn trace_id(traceparent: Option<&str>) -> &str {
    traceparent.and_then(|t| t.split('-').nth(1)).filter(|id| id.len() == 32).unwrap_or_default()
}

impl EventMetadata {
    /// Metadata of event `id` of `aggregate` (type, id): version 1, `time` now, no correlation
    /// id and no `previous`; the public fields take the rest.
    pub fn new(
        id: impl Into<String>,
        event_type: impl Into<String>,
        source: impl Into<String>,
        aggregate: (impl Into<String>, impl Into<String>),
        sequence: u64,
    ) -> Self {
        Self {
            id: id.into(),
            event_type: event_type.into(),
            version: 1,
            source: source.into(),
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            subject: aggregate.1.into(),
            aggregate_type: aggregate.0.into(),
            sequence,
            correlation_id: String::new(),
            previous: BTreeMap::new(),
            traceparent: None,
            tracestate: None,
        }
    }

    /// The [`event_span`] of this event (`aggregate_id` is [`EventMetadata::subject`]).
    pub fn span(&self) -> tracing::Span {
        event_span(&self.id, &self.event_type, &self.aggregate_type, &self.subject, &self.correlation_id, trace_id(self.traceparent.as_deref()))
    }

    /// The W3C trace id of [`EventMetadata::traceparent`] (32 hex digits), `None` without one.
    pub fn trace_id(&self) -> Option<&str> {
        Some(trace_id(self.traceparent.as_deref())).filter(|id| !id.is_empty())
    }

    /// The event's W3C trace context ([`EventMetadata::traceparent`] and `tracestate`), `None`
    /// when it has none or it is malformed (a consumer then begins a new trace).
    #[cfg(feature = "writer")]
    pub fn trace_context(&self) -> Option<crate::TraceContext> {
        crate::TraceContext::parse(self.traceparent.as_deref()?, self.tracestate.as_deref()).ok()
    }
}

/// `detail.metadata` of every event this project publishes. Field names follow CloudEvents
/// (`id`, `type`, `source`, `time`, `subject`) where one exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventMetadata {
    /// Event id (the outbox item's `event_id`): the idempotency key consumers dedupe on.
    pub id: String,
    /// Event type, e.g. `OrderCreated`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// Schema version of `data`.
    pub version: u32,
    /// Event source, e.g. `example.orders`.
    pub source: String,
    /// When the event happened: RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The aggregate id.
    pub subject: String,
    /// The aggregate type.
    pub aggregate_type: String,
    /// Per-aggregate sequence, from 1.
    pub sequence: u64,
    /// Correlation id of the request that caused the event.
    pub correlation_id: String,
    /// Event type → sequence of the aggregate's latest event of that type before this one, e.g.
    /// `{"OrderCreated": 1}` on an `OrderCancelled` with sequence 3 whose sequence 2 was an
    /// `OrderShipped`: `{"OrderCreated": 1, "OrderShipped": 2}`. Absent (empty) when the
    /// producer does not track it; an ordered consumer then waits for every sequence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub previous: BTreeMap<String, u64>,
    /// W3C `traceparent` of the request that caused the event (`00-<trace id>-<parent id>-<flags>`;
    /// absent when the producer stored none): consumers continue its trace, and it survives
    /// replays and redrives, which EventBridge's `TraceHeader` does not ([`crate::trace_context`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// W3C `tracestate` beside [`EventMetadata::traceparent`], verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// The bus event's `detail`: `{"metadata": …, "data": …}`.
///
/// `T` is `&RawValue`/`Box<RawValue>` to move the payload untouched, or a consumer's own type.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventDetail<T> {
    /// Envelope metadata.
    pub metadata: EventMetadata,
    /// The event data as the producer wrote it.
    pub data: T,
}

/// The bus event's `detail` for a claim-checked payload: `{"metadata": …, "data_ref": …}`.
#[derive(Debug, Clone, Serialize)]
struct EventDetailRef<'a> {
    metadata: EventMetadata,
    data_ref: &'a Option<PayloadRef>,
}

/// One event, ready to be a `PutEventsRequestEntry`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusEvent {
    /// `Source`.
    pub source: String,
    /// `DetailType`.
    pub detail_type: String,
    /// `Time`, from the outbox item's `occurred_at` (never "now", never the stream's
    /// `ApproximateCreationDateTime`).
    pub time: DateTime<Utc>,
    /// `Detail`: JSON text of [`EventDetail`].
    pub detail: String,
    /// `TraceHeader`.
    pub trace_header: Option<String>,
}

impl BusEvent {
    /// Size of the entry as EventBridge counts it against the `PutEvents` limit, in bytes:
    /// 14 for `Time`, plus the UTF-8 bytes of `Source`, `DetailType` and `Detail` (we send no
    /// `Resources`). Source: "Calculating Amazon EventBridge PutEvents event entry size",
    /// <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevent-size.html>.
    pub fn entry_size(&self) -> usize {
        14 + self.source.len() + self.detail_type.len() + self.detail.len()
    }

    /// The `PutEvents` request entry for `event_bus_name`.
    #[cfg(feature = "relay")]
    pub fn to_entry(&self, event_bus_name: &str) -> aws_sdk_eventbridge::types::PutEventsRequestEntry {
        aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(event_bus_name)
            .source(&self.source)
            .detail_type(&self.detail_type)
            .time(aws_smithy_types::DateTime::from_millis(self.time.timestamp_millis()))
            .detail(&self.detail)
            .set_trace_header(self.trace_header.clone())
            .build()
    }

    /// The Custom Event Bus's `PutEvents` request entry (feature `custom-bus`): `Source`,
    /// `DetailType`, `Detail` and `Time` as [`BusEvent::to_entry`], and `SystemMetadata {
    /// EventGroupId: group_id, DeduplicationId: deduplication_id }` (each 1-128 characters, the
    /// caller checks). The entry has no `TraceHeader` field: [`BusEvent::trace_header`] is not
    /// sent (the event's `detail.metadata.correlation_id` still links it to its request).
    /// Source: the Custom Event Bus API reference, `PutEventsRequestEntry` and
    /// `PutEventsSystemMetadata`.
    #[cfg(feature = "custom-bus")]
    pub fn to_custom_entry(&self, group_id: &str, deduplication_id: &str) -> aws_sdk_eventbridgev2::types::PutEventsRequestEntry {
        let metadata =
            aws_sdk_eventbridgev2::types::PutEventsSystemMetadata::builder().event_group_id(group_id).deduplication_id(deduplication_id).build();
        let entry = aws_sdk_eventbridgev2::types::PutEventsRequestEntry::builder()
            .source(&self.source)
            .detail_type(&self.detail_type)
            .time(aws_smithy_types::DateTime::from_millis(self.time.timestamp_millis()))
            .detail(&self.detail)
            .system_metadata(metadata)
            .build();
        // `build` fails only when `Source` or `DetailType` is unset, and both are set above.
        entry.unwrap_or_else(|_| unreachable!("Source and DetailType are set"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_item() -> OutboxItem {
        OutboxItem {
            pk: "Order#o-1".into(),
            sk: OutboxItem::sort_key(1),
            event_id: "0193a4f0-7c1e-7a2b-9c3d-4e5f60718293".into(),
            event_type: "OrderCreated".into(),
            event_version: 1,
            source: "example.orders".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o-1".into(),
            sequence: 1,
            occurred_at: "2026-11-29T09:00:00.123+01:00".into(),
            payload: r#"{"big":123456789012345678901234567890123456789,"price":19.99,"exact":1.234567890123456789,"name":"Zoë 🚀"}"#.into(),
            correlation_id: "c-1".into(),
            payload_ref: None,
            trace_header: None,
            traceparent: None,
            tracestate: None,
            expires_at: 1_900_000_000,
            previous: Default::default(),
        }
    }

    #[test]
    fn sort_key_is_zero_padded_to_twenty_digits() {
        assert_eq!(OutboxItem::sort_key(1), "00000000000000000001");
        assert_eq!(OutboxItem::sort_key(u64::MAX).len(), SEQUENCE_WIDTH);
    }

    #[test]
    fn detail_embeds_payload_verbatim_as_an_object() {
        let event = sample_item().to_bus_event().unwrap();
        assert!(
            event
                .detail
                .contains(r#""data":{"big":123456789012345678901234567890123456789,"price":19.99,"exact":1.234567890123456789,"name":"Zoë 🚀"}"#),
            "{}",
            event.detail
        );
        let v: serde_json::Value = serde_json::from_str(&event.detail).unwrap();
        assert!(v["data"].is_object());
        assert_eq!(v["metadata"]["id"], "0193a4f0-7c1e-7a2b-9c3d-4e5f60718293");
        assert_eq!(v["metadata"]["subject"], "o-1");
        assert_eq!(v["metadata"]["sequence"], 1);
    }

    #[test]
    fn time_comes_from_occurred_at_normalised_to_utc() {
        let event = sample_item().to_bus_event().unwrap();
        assert_eq!(event.time.to_rfc3339_opts(SecondsFormat::Millis, true), "2026-11-29T08:00:00.123Z");
        assert!(event.detail.contains(r#""time":"2026-11-29T08:00:00.123Z""#));
    }

    #[test]
    fn entry_size_counts_utf8_bytes_not_chars() {
        let mut item = sample_item();
        item.payload = r#""🚀""#.into();
        let event = item.to_bus_event().unwrap();
        assert_eq!(event.entry_size(), 14 + "example.orders".len() + "OrderCreated".len() + event.detail.len());
        assert!(event.detail.len() > event.detail.chars().count());
    }

    #[test]
    fn malformed_items_are_reported_with_the_attribute() {
        let mut item = sample_item();
        item.payload = "{not json".into();
        assert!(matches!(item.to_bus_event(), Err(EnvelopeError::Payload(_))));
        let mut item = sample_item();
        item.occurred_at = "yesterday".into();
        assert!(matches!(item.to_bus_event(), Err(EnvelopeError::OccurredAt(_))));
        let mut item = sample_item();
        item.event_type = " ".into();
        assert_eq!(item.to_bus_event(), Err(EnvelopeError::Empty("event_type")));
    }

    /// The documented rules, attribute by attribute
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>).
    #[test]
    fn item_size_follows_dynamodbs_rules() {
        use serde_dynamo::AttributeValue as V;
        let one = |name: &str, value: V| item_size(&[(name.to_owned(), value)].into_iter().collect());
        assert_eq!(one("name", V::S("Zoë".into())), 4 + 4, "UTF-8 bytes");
        assert_eq!(one("b", V::B(vec![0; 10])), 1 + 10, "raw bytes");
        assert_eq!(one("flag", V::Bool(true)), 4 + 1);
        assert_eq!(one("nothing", V::Null(true)), 7 + 1);
        assert_eq!(one("n", V::N("7".into())), 1 + 2);
        assert_eq!(one("n", V::N("12345678901234567890".into())), 1 + 11 + 1, "20 digits: 10 bytes + 1, + 1 for alignment");
        assert_eq!(one("n", V::N("0007".into())), 1 + 2, "leading zeros do not count");
        assert_eq!(one("m", V::M(Default::default())), 1 + 3, "an empty map");
        let map = V::M([("a".to_owned(), V::S("xy".into())), ("bb".to_owned(), V::N("1".into()))].into_iter().collect());
        assert_eq!(one("m", map), 1 + 3 + (1 + 2 + 1) + (2 + 2 + 1), "3 bytes, then name + value + 1 per element");
        assert_eq!(one("l", V::L(vec![V::S("abc".into()), V::Bool(false)])), 1 + 3 + (3 + 1) + (1 + 1));
        assert_eq!(one("ss", V::Ss(vec!["ab".into(), "c".into()])), 2 + 3);
    }

    #[test]
    fn the_item_size_counts_every_attribute_stored() {
        let mut item = sample_item();
        let base = item.item_size();
        item.previous.insert("OrderCreated".into(), 1);
        assert_eq!(item.item_size(), base + "previous".len() + 3 + "OrderCreated".len() + 2 + 1);
        item.trace_header = Some("Root=1-abc".into());
        assert_eq!(item.item_size(), base + 8 + 3 + 12 + 2 + 1 + "trace_header".len() + 10);
    }

    #[test]
    fn item_round_trips_through_dynamodb_attributes() {
        let item = sample_item();
        let attrs: serde_dynamo::Item = item.to_item().unwrap();
        assert_eq!(OutboxItem::from_item(attrs).unwrap(), item);
    }

    #[test]
    fn decode_names_the_missing_attribute() {
        let mut attrs: serde_dynamo::Item = sample_item().to_item().unwrap();
        attrs.remove("event_type");
        let err = OutboxItem::from_item(attrs).unwrap_err();
        assert!(err.to_string().contains("event_type"), "{err}");
    }

    #[test]
    fn decode_names_the_mistyped_attribute() {
        let mut attrs: serde_dynamo::Item = sample_item().to_item().unwrap();
        attrs.insert("sequence".into(), serde_dynamo::AttributeValue::N("123456789012345678901234567890".into()));
        let err = OutboxItem::from_item(attrs).unwrap_err().to_string();
        assert!(err.contains("attribute `sequence`: "), "{err}");
        let mut attrs: serde_dynamo::Item = sample_item().to_item().unwrap();
        attrs.insert("correlation_id".into(), serde_dynamo::AttributeValue::N("7".into()));
        let err = OutboxItem::from_item(attrs).unwrap_err().to_string();
        assert!(err.contains("attribute `correlation_id`: "), "{err}");
    }
}
