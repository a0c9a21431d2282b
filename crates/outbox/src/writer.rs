//! The outbox writer: adds events to the same DynamoDB `TransactWriteItems` call as the business
//! writes, so that both exist or neither does (the dual-write problem cannot happen).
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client, order_put: aws_sdk_dynamodb::types::TransactWriteItem)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use outbox::{CommitError, ConditionFailed, Event, OutboxWriter};
//!
//! #[derive(serde::Serialize)]
//! struct OrderCreated { order_id: String, total: String }
//!
//! let writer = OutboxWriter::new("my-stack-outbox", std::time::Duration::from_secs(7 * 24 * 3600));
//! let mut tx = writer.transaction();
//! tx.write(order_put); // your own Put/Update/ConditionCheck/Delete: write 0
//! let data = OrderCreated { order_id: "o-1".into(), total: "25.00".into() };
//! // Serialised here, checked for size here; the X-Ray trace header comes from `_X_AMZN_TRACE_ID`.
//! let event = tx.emit(Event::new("OrderCreated", "example.orders", ("Order", "o-1"), 1, &data)?.correlation_id("req-1"))?;
//! let event_id = event.event_id.clone();
//! match tx.execute(&client).await {
//!     Ok(_) => println!("committed; consumers dedupe on {event_id}"),
//!     Err(CommitError::ConditionFailed(ConditionFailed::Write { index: 0, .. })) => println!("the order exists"),
//!     Err(CommitError::ConditionFailed(ConditionFailed::SequenceTaken { sequence, .. })) => println!("version {sequence} was written by someone else"),
//!     Err(e) if e.is_retryable() => println!("busy, retry later: {e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! This is the one way to write an event. A caller that commits the request itself (e.g. through
//! `Inbox::apply`, which adds its claim) builds the same transaction and takes its items with
//! [`OutboxTransaction::into_items`] instead of calling `execute`.
//!
//! Each outbox item is put with `attribute_not_exists(pk)`: its key is (aggregate, sequence), so
//! two writers that both read version N of an aggregate and both emit sequence N+1 cannot both
//! commit (optimistic concurrency for free). Limits that would otherwise fail later are checked
//! here, before any write: the event must be valid JSON and fit in one `PutEvents` entry
//! ([`crate::envelope::BusEvent::entry_size`] ≤ the configured bus limit), and the outbox item
//! must stay under DynamoDB's 400 KB item size.
//!
//! With a `ClaimCheck` (feature `claim-check`,
//! `OutboxWriter::with_claim_check`) an event that fails either size check is not refused: its
//! payload (up to the claim check's maximum) goes to S3 and the item carries the reference
//! (`payload_ref`, `payload` = `null`). The inline limit is therefore computed per event from
//! those same two checks ([`OutboxWriter::inline_limit`]), never guessed. The upload happens
//! before the transaction, in [`OutboxTransaction::execute`] or [`OutboxTransaction::into_items`]; a
//! transaction that then fails leaves an orphan object, deleted by the bucket's lifecycle rule.
//!
//! When DynamoDB cancels the transaction, `CancellationReasons` lists one reason per request
//! item in request order (`TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>);
//! [`OutboxTransaction::execute`] maps the failed position back to *your* write or to the
//! outbox put ([`ConditionFailed`](crate::ConditionFailed)).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::envelope::{EnvelopeError, OutboxItem};
use crate::envelope::{DEFAULT_MAX_PUT_EVENTS_BYTES, MAX_ITEM_BYTES};
use crate::trace_context::TraceContext;
use crate::transaction::CommitError;
use crate::transaction::{transact_write, Batch, MAX_TRANSACTION_ITEMS};

/// The environment variable in which the Lambda runtime puts the X-Ray trace header of the
/// current invocation (`Root=1-…;Parent=…;Sampled=…`). `lambda_runtime` sets it before each
/// invocation, except in its concurrent mode (Lambda Managed Instances), where only
/// `Context::xray_trace_id` has it. Source: "Using environment variables", reserved variables,
/// <https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime>.
pub const TRACE_HEADER_ENV: &str = "_X_AMZN_TRACE_ID";

/// The X-Ray trace header of the current invocation, from [`TRACE_HEADER_ENV`] (`None` when unset
/// or empty, e.g. outside Lambda or with tracing off).
pub fn current_trace_header() -> Option<String> {
    std::env::var(TRACE_HEADER_ENV).ok().filter(|v| !v.trim().is_empty())
}

/// An event to add to the outbox. The writer fills in the event id (UUIDv7), `occurred_at`
/// (now, UTC), the keys and the TTL.
///
/// Build it with [`Event::new`], which serialises the payload and picks up the trace header and
/// trace context, then adjust it with [`Event::version`], [`Event::correlation_id`],
/// [`Event::trace_header`] and [`Event::trace_context`]; or
/// write the struct literally when the payload is JSON text already.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Event type, e.g. `OrderCreated` (the bus event's `DetailType`).
    pub event_type: String,
    /// Schema version of `payload`.
    pub event_version: u32,
    /// Event source, e.g. `example.orders` (the bus event's `Source`).
    pub source: String,
    /// Aggregate type, e.g. `Order`.
    pub aggregate_type: String,
    /// Aggregate id.
    pub aggregate_id: String,
    /// Sequence of this event within its aggregate, from 1.
    pub sequence: u64,
    /// Event data as JSON text; stored and published verbatim.
    pub payload: String,
    /// Correlation id of the causing request.
    pub correlation_id: String,
    /// X-Ray trace header of the producing invocation, if any (the relay's `PutEvents` entry's
    /// `TraceHeader`).
    pub trace_header: Option<String>,
    /// The W3C trace context the event belongs to (the outbox item's `traceparent` and
    /// `tracestate`, `detail.metadata.traceparent` on the bus): [`TraceContext::current_or_new`]
    /// when built, so every event has one.
    pub trace_context: Option<TraceContext>,
    /// Event type → sequence of the aggregate's latest earlier event of that type (empty by
    /// default; see [`Event::previous`]).
    pub previous: std::collections::BTreeMap<String, u64>,
}

impl Event {
    /// An event whose data is already JSON text (`payload`, stored and published verbatim; it
    /// is checked when the event is emitted), version 1, a fresh correlation id and the trace
    /// header of [`current_trace_header`]. [`Event::new`] serialises a value instead.
    pub fn from_json(
        event_type: impl Into<String>,
        source: impl Into<String>,
        aggregate: (impl Into<String>, impl Into<String>),
        sequence: u64,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            event_type: event_type.into(),
            event_version: 1,
            source: source.into(),
            aggregate_type: aggregate.0.into(),
            aggregate_id: aggregate.1.into(),
            sequence,
            payload: payload.into(),
            correlation_id: uuid::Uuid::now_v7().to_string(),
            trace_header: current_trace_header(),
            trace_context: Some(TraceContext::current_or_new()),
            previous: Default::default(),
        }
    }

    /// An event of `event_type` from `source` about `aggregate` = `(aggregate_type, aggregate_id)`,
    /// number `sequence` (from 1) of that aggregate, with `data` serialised as the payload by
    /// `serde_json` (so it is valid JSON; decimals and big integers are kept as your `Serialize`
    /// writes them). Version 1, a new UUIDv7 as correlation id, and the trace header of
    /// [`current_trace_header`] until set otherwise.
    ///
    /// # Errors
    /// [`WriteError::Serialize`] when `data` does not serialise (e.g. a map with non-string keys).
    pub fn new<T, A, I>(
        event_type: impl Into<String>,
        source: impl Into<String>,
        aggregate: (A, I),
        sequence: u64,
        data: &T,
    ) -> Result<Self, WriteError>
    where
        T: Serialize + ?Sized,
        A: Into<String>,
        I: Into<String>,
    {
        let event_type = event_type.into();
        let payload = match serde_json::to_string(data) {
            Ok(p) => p,
            Err(source) => return Err(WriteError::Serialize { event_type, source }),
        };
        Ok(Self {
            event_type,
            event_version: 1,
            source: source.into(),
            aggregate_type: aggregate.0.into(),
            aggregate_id: aggregate.1.into(),
            sequence,
            payload,
            correlation_id: uuid::Uuid::now_v7().to_string(),
            trace_header: current_trace_header(),
            trace_context: Some(TraceContext::current_or_new()),
            previous: Default::default(),
        })
    }

    /// Records that the aggregate's latest event of `event_type` before this one has
    /// `sequence` (call once per earlier event type; the outbox item's `previous`,
    /// `detail.metadata.previous` on the bus). An ordered consumer that handles only some of the
    /// aggregate's event types waits only for the latest earlier event of *those* types, so it
    /// is never blocked by a type it does not receive. Without it a consumer waits for every
    /// sequence.
    pub fn previous(mut self, event_type: impl Into<String>, sequence: u64) -> Self {
        self.previous.insert(event_type.into(), sequence);
        self
    }

    /// Sets the schema version of the payload (default 1).
    pub fn version(mut self, version: u32) -> Self {
        self.event_version = version;
        self
    }

    /// Sets the correlation id (default: a new UUIDv7). A consumer passes on the one of the event
    /// it handles (`event.metadata.correlation_id`).
    pub fn correlation_id(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = correlation_id.into();
        self
    }

    /// Sets the X-Ray trace header, e.g. `context.xray_trace_id.clone()` from the Lambda
    /// context (needed in `lambda_runtime`'s concurrent mode); `None` sends none.
    pub fn trace_header(mut self, trace_header: Option<String>) -> Self {
        self.trace_header = trace_header.filter(|t| !t.trim().is_empty());
        self
    }

    /// Sets the W3C trace context (default: [`TraceContext::current_or_new`] when the event was
    /// built), e.g. one parsed from a request's `traceparent` header; `None` stores none.
    pub fn trace_context(mut self, trace_context: Option<TraceContext>) -> Self {
        self.trace_context = trace_context;
        self
    }
}

/// An event that cannot be written, found before anything is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The payload does not serialise as JSON ([`Event::new`]).
    #[error("the payload of {event_type} does not serialise as JSON: {source}")]
    Serialize {
        /// Event type.
        event_type: String,
        /// The serde_json error.
        source: serde_json::Error,
    },
    /// A consumer emitted an event but was built without an outbox writer
    /// (`ConsumerBuilder::outbox`).
    #[error("event {0} emitted, but this consumer has no outbox (ConsumerBuilder::outbox)")]
    NoOutbox(String),
    /// The event would not be publishable (bad payload, empty required field).
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The event is larger than one `PutEvents` entry may be.
    #[error("event {event_type} is {bytes} bytes as a PutEvents entry; the bus accepts at most {limit}")]
    EventTooLarge {
        /// Event type.
        event_type: String,
        /// Entry size in bytes.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The outbox item is larger than DynamoDB's item limit.
    #[error("outbox item for {event_type} is about {bytes} bytes; DynamoDB items hold at most {MAX_ITEM_BYTES}")]
    ItemTooLarge {
        /// Event type.
        event_type: String,
        /// Estimated item size in bytes.
        bytes: usize,
    },
    /// The payload exceeds the claim check's maximum (or, without a claim check, it would have to
    /// be offloaded: see [`WriteError::EventTooLarge`] / [`WriteError::ItemTooLarge`]).
    #[error("the payload of {event_type} is {bytes} bytes; the claim check stores at most {limit}")]
    PayloadTooLarge {
        /// Event type.
        event_type: String,
        /// Payload size in bytes.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// The claim check could not reference the payload for a reason other than its size
    /// ([`WriteError::PayloadTooLarge`]). An upload that fails is `CommitError::ClaimCheck`.
    #[cfg(feature = "claim-check")]
    #[error(transparent)]
    ClaimCheck(#[from] crate::claim_check::ClaimCheckError),
    /// The transaction would exceed [`MAX_TRANSACTION_ITEMS`].
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items")]
    TooManyItems,
    /// The transaction already holds an event with this (aggregate, sequence): DynamoDB would
    /// refuse the whole request (two operations on one item). Use
    /// [`OutboxTransaction::emit_next`] for several events of one aggregate.
    #[error("{event_type}: the transaction already holds sequence {sequence} of {aggregate}")]
    SequenceRepeated {
        /// Event type.
        event_type: String,
        /// `<aggregate_type>#<aggregate_id>`.
        aggregate: String,
        /// The repeated sequence.
        sequence: u64,
    },
    /// [`OutboxTransaction::emit_next`] for an aggregate whose current sequence the transaction
    /// does not know ([`OutboxTransaction::sequence`]).
    #[error("{event_type}: the current sequence of {aggregate} is unknown (OutboxTransaction::sequence)")]
    SequenceUnknown {
        /// Event type.
        event_type: String,
        /// `<aggregate_type>#<aggregate_id>`.
        aggregate: String,
    },
}

/// Builds outbox items and transactions for one outbox table.
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    table: String,
    retention: Duration,
    max_event_bytes: usize,
    #[cfg(feature = "claim-check")]
    claim_check: Option<crate::claim_check::ClaimCheck>,
}

/// A payload to upload before the transaction that references it.
#[derive(Debug)]
#[cfg_attr(not(feature = "claim-check"), allow(dead_code))]
pub(crate) struct Offload {
    pub(crate) reference: crate::envelope::PayloadRef,
    pub(crate) payload: Vec<u8>,
}

/// One emitted event, planned: the outbox item, the put that stores it, and the payload to upload
/// first when it is claim-checked.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) item: OutboxItem,
    pub(crate) put: TransactWriteItem,
    pub(crate) offload: Option<Offload>,
}

/// The two sizes the writer checks, taken from the item's one bus event and its one set of
/// DynamoDB attributes (kept for the put).
#[derive(Debug)]
struct Measured {
    /// The bus event's `PutEvents` entry size in bytes ([`crate::envelope::BusEvent::entry_size`]).
    entry: usize,
    /// Bytes of the payload as embedded in `detail.data`: its JSON text without the whitespace
    /// around it (the payload is embedded verbatim otherwise).
    embedded: usize,
    /// The item's size as DynamoDB counts it, in bytes ([`crate::envelope::item_size`]).
    item: usize,
    /// The item as DynamoDB attributes.
    attributes: serde_dynamo::Item,
}

impl Measured {
    /// Builds `item`'s bus event (checking what the contract requires of it) and its attributes.
    fn of(item: &OutboxItem) -> Result<Self, WriteError> {
        let entry = item.to_bus_event()?.entry_size();
        let embedded = item.payload.trim_matches([' ', '\t', '\n', '\r']).len();
        let attributes = Self::attributes(item);
        Ok(Self { entry, embedded, item: crate::envelope::item_size(&attributes), attributes })
    }

    fn attributes(item: &OutboxItem) -> serde_dynamo::Item {
        // An OutboxItem is strings and integers: serde_dynamo cannot fail on it.
        item.to_item().expect("an OutboxItem always converts")
    }

    /// The largest payload of `payload` bytes' item kind that passes both checks: both sizes grow
    /// byte for byte with the payload.
    fn inline_limit(&self, max_event_bytes: usize, payload: usize) -> usize {
        let in_entry = max_event_bytes.saturating_sub(self.entry - self.embedded);
        let in_item = MAX_ITEM_BYTES.saturating_sub(self.item - payload);
        in_entry.min(in_item)
    }
}

impl OutboxWriter {
    /// A writer for `table` whose items expire (TTL) `retention` after they are written (at most
    /// [`crate::envelope::MAX_RETENTION`]; a longer one is capped to it). The retention only
    /// bounds storage: the relay publishes on INSERT, long before it.
    pub fn new(table: impl Into<String>, retention: Duration) -> Self {
        Self {
            table: table.into(),
            retention,
            max_event_bytes: DEFAULT_MAX_PUT_EVENTS_BYTES,
            #[cfg(feature = "claim-check")]
            claim_check: None,
        }
    }

    /// Stores payloads that do not fit inline in S3 through `claim_check` (see the module docs).
    #[cfg(feature = "claim-check")]
    pub fn with_claim_check(mut self, claim_check: crate::claim_check::ClaimCheck) -> Self {
        self.claim_check = Some(claim_check);
        self
    }

    /// The claim check, if configured.
    #[cfg(feature = "claim-check")]
    pub fn claim_check(&self) -> Option<&crate::claim_check::ClaimCheck> {
        self.claim_check.as_ref()
    }

    /// The largest payload (bytes of its JSON text) that `event` can carry inline: the smaller of
    /// what keeps its `PutEvents` entry within the configured bus limit and what keeps its outbox
    /// item under [`MAX_ITEM_BYTES`]. Both sizes grow byte for byte with the payload (the payload
    /// is embedded verbatim in both), so this is exactly where the writer's checks start failing.
    pub fn inline_limit(&self, event: &Event) -> usize {
        // Measured with a 1-byte payload, so that `event`'s own payload need not be JSON yet.
        let mut probe = self.item_for(event.clone(), Utc::now());
        probe.payload = "0".into();
        match Measured::of(&probe) {
            Ok(measured) => measured.inline_limit(self.max_event_bytes, probe.payload.len()),
            // The event is not publishable whatever its payload: nothing fits.
            Err(_) => 0,
        }
    }

    /// Sets the largest event (as a `PutEvents` entry, bytes) the writer accepts.
    pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event_bytes = bytes;
        self
    }

    /// The outbox table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The outbox item for `event` with `occurred_at` = `now` and a new UUIDv7 event id, inline
    /// when it fits and claim-checked otherwise (with the payload to upload before the
    /// transaction), and the put that stores it. Its bus event is built once, here, and the size
    /// checks measure that event ([`Measured`]).
    pub(crate) fn plan(&self, event: Event, now: DateTime<Utc>) -> Result<Planned, WriteError> {
        let item = self.item_for(event, now);
        // A payload that is not JSON fails here, before any size decision.
        let measured = Measured::of(&item)?;
        if measured.entry <= self.max_event_bytes && measured.item <= MAX_ITEM_BYTES {
            return Ok(Planned { put: self.put(measured.attributes), item, offload: None });
        }
        #[cfg(feature = "claim-check")]
        if let Some(claim_check) = &self.claim_check {
            return self.offload(claim_check, item, &measured);
        }
        Err(self.too_large(item.event_type, measured.entry, measured.item))
    }

    /// The item of [`Self::plan`] with its payload in S3: `payload` = `null` and `payload_ref` set.
    #[cfg(feature = "claim-check")]
    fn offload(&self, claim_check: &crate::claim_check::ClaimCheck, mut item: OutboxItem, measured: &Measured) -> Result<Planned, WriteError> {
        let payload = std::mem::replace(&mut item.payload, "null".into()).into_bytes();
        let reference = claim_check.reference(&item.event_id, &payload).map_err(|e| match e {
            crate::claim_check::ClaimCheckError::TooLarge { bytes, limit } => {
                WriteError::PayloadTooLarge { event_type: item.event_type.clone(), bytes, limit }
            }
            other => WriteError::ClaimCheck(other),
        })?;
        // The stored item's bus event differs from the one measured in `detail` only:
        // `"data":<payload>` becomes `"data_ref":<reference>` (`to_bus_event`), so its size follows
        // without building it again. (A reference is strings and a number: it serialises.)
        let reference_bytes = serde_json::to_string(&reference).map_or(usize::MAX, |json| json.len());
        let entry = (measured.entry - measured.embedded).saturating_add("data_ref".len() - "data".len()).saturating_add(reference_bytes);
        item.payload_ref = Some(reference.clone());
        let attributes = Measured::attributes(&item);
        let item_bytes = crate::envelope::item_size(&attributes);
        if entry > self.max_event_bytes || item_bytes > MAX_ITEM_BYTES {
            return Err(self.too_large(item.event_type, entry, item_bytes));
        }
        Ok(Planned { put: self.put(attributes), item, offload: Some(Offload { reference, payload }) })
    }

    /// The error for an item whose entry (`entry` bytes) or item (`item` bytes) is over its limit:
    /// the bus limit is named first.
    fn too_large(&self, event_type: String, entry: usize, item: usize) -> WriteError {
        if entry > self.max_event_bytes {
            WriteError::EventTooLarge { event_type, bytes: entry, limit: self.max_event_bytes }
        } else {
            WriteError::ItemTooLarge { event_type, bytes: item }
        }
    }

    /// The item for `event`, unchecked.
    fn item_for(&self, event: Event, now: DateTime<Utc>) -> OutboxItem {
        OutboxItem {
            pk: OutboxItem::partition_key(&event.aggregate_type, &event.aggregate_id),
            sk: OutboxItem::sort_key(event.sequence),
            event_id: uuid::Uuid::now_v7().to_string(),
            event_type: event.event_type,
            event_version: event.event_version,
            source: event.source,
            aggregate_type: event.aggregate_type,
            aggregate_id: event.aggregate_id,
            sequence: event.sequence,
            occurred_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            payload: event.payload,
            payload_ref: None,
            correlation_id: event.correlation_id,
            trace_header: event.trace_header,
            traceparent: event.trace_context.as_ref().map(TraceContext::traceparent),
            tracestate: event.trace_context.as_ref().and_then(|c| c.tracestate().map(str::to_owned)),
            expires_at: crate::envelope::expires_at(now, self.retention),
            previous: event.previous,
        }
    }

    /// The transaction item that stores an outbox item's `attributes`, conditioned on
    /// `attribute_not_exists(pk)` so an (aggregate, sequence) pair is written at most once.
    fn put(&self, attributes: serde_dynamo::Item) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(attributes.into()))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// Starts a transaction that mixes the caller's writes with outbox events.
    pub fn transaction(&self) -> OutboxTransaction<'_> {
        OutboxTransaction {
            writer: WriterRef::Borrowed(self),
            batch: Batch::default(),
            now: Utc::now(),
            offloads: Vec::new(),
            reserved: 0,
            sequences: HashMap::new(),
        }
    }
}

/// The writer a transaction writes its events with: borrowed (a producer's
/// [`OutboxWriter::transaction`]), shared (a consumer's, which outlives no borrow), or none (a
/// consumer built without an outbox: [`OutboxTransaction::emit`] answers [`WriteError::NoOutbox`]).
#[derive(Debug, Clone)]
enum WriterRef<'w> {
    Borrowed(&'w OutboxWriter),
    Shared(Arc<OutboxWriter>),
    Missing,
}

impl WriterRef<'_> {
    fn get(&self) -> Option<&OutboxWriter> {
        match self {
            WriterRef::Borrowed(w) => Some(w),
            WriterRef::Shared(w) => Some(w),
            WriterRef::Missing => None,
        }
    }
}

/// The current sequence of one aggregate, for [`OutboxTransaction::emit_next`]: the events of
/// that aggregate in the transaction get `current + 1`, `current + 2`, … in the order emitted.
///
/// Where the current sequence comes from is the caller's business: the version kept on the
/// aggregate's own item (read once, e.g. with the `GetItem` that loads it: [`Self::new`]), or
/// the latest outbox item of the aggregate ([`Self::read`]). Optimistic concurrency stays the
/// caller's too, and is enforced by DynamoDB: each outbox item is put with
/// `attribute_not_exists(pk)` on its (aggregate, sequence) key, so of two writers that read the
/// same current sequence only the first to commit succeeds; the other's transaction fails with
/// [`CommitError::ConditionFailed`]`(`[`ConditionFailed::SequenceTaken`](crate::ConditionFailed::SequenceTaken)`)` and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateSequence {
    aggregate_type: String,
    aggregate_id: String,
    current: u64,
}

impl AggregateSequence {
    /// Aggregate `(aggregate_type, aggregate_id)` whose latest event has sequence `current`
    /// (0: the aggregate has no event yet, its first gets 1).
    pub fn new(aggregate: (impl Into<String>, impl Into<String>), current: u64) -> Self {
        Self { aggregate_type: aggregate.0.into(), aggregate_id: aggregate.1.into(), current }
    }

    /// Reads the aggregate's current sequence from `writer`'s outbox table: the sort key of its
    /// latest outbox item (one strongly consistent `Query`, descending, `Limit` 1, projecting
    /// `sk`), or 0 when it has none.
    ///
    /// Only as good as the outbox's memory: the table's TTL deletes items `retention` after
    /// they were written, so an aggregate quiet for longer than that would restart at 1 and an
    /// ordered consumer would take its new events for duplicates. Aggregates that live longer
    /// than the retention keep their version on their own item and use [`Self::new`].
    /// Source: `Query`, `ScanIndexForward`, `ConsistentRead`,
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Query.html>.
    ///
    /// # Errors
    /// The classified `Query` failure ([`AwsError`](crate::aws_error::AwsError)), or a
    /// construction error when a stored `sk` is not a sequence.
    pub async fn read(
        client: &Client,
        writer: &OutboxWriter,
        aggregate: (impl Into<String>, impl Into<String>),
    ) -> Result<Self, crate::aws_error::AwsError> {
        let mut sequence = Self::new(aggregate, 0);
        let out = client
            .query()
            .table_name(&writer.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(OutboxItem::partition_key(&sequence.aggregate_type, &sequence.aggregate_id)))
            .scan_index_forward(false)
            .limit(1)
            .consistent_read(true)
            .projection_expression("sk")
            .send()
            .await
            .map_err(|e| crate::aws_error::AwsError::from_sdk("Query", &e))?;
        if let Some(sk) = out.items().first().and_then(|i| i.get("sk")) {
            let text = sk.as_s().map(String::as_str).unwrap_or_default();
            sequence.current =
                text.parse().map_err(|_| crate::aws_error::AwsError::construction("Query", format!("outbox item sk {sk:?} is not a sequence")))?;
        }
        Ok(sequence)
    }

    /// The aggregate's current sequence.
    pub fn current(&self) -> u64 {
        self.current
    }
}

/// One `TransactWriteItems` call in the making: the caller's writes plus outbox events. The
/// producer's ([`OutboxWriter::transaction`]) and, underneath, a consumer's
/// ([`crate::consumer::Tx`]): the claim check, the size checks and the naming of a failed write
/// ([`ConditionFailed`](crate::ConditionFailed)) are the same on both sides.
#[derive(Debug)]
pub struct OutboxTransaction<'w> {
    writer: WriterRef<'w>,
    batch: Batch,
    now: DateTime<Utc>,
    offloads: Vec<Offload>,
    /// Items the committer adds beside these (a consumer's inbox claim and sequence row).
    reserved: usize,
    /// Aggregate (type, id) → the highest sequence emitted in this transaction (or its current
    /// one, [`Self::sequence`]).
    sequences: HashMap<(String, String), u64>,
}

impl OutboxTransaction<'static> {
    /// A consumer's transaction: events through `writer` (none: [`WriteError::NoOutbox`]),
    /// `reserved` items left for the inbox.
    #[cfg_attr(not(feature = "inbox"), allow(dead_code))]
    pub(crate) fn shared(writer: Option<Arc<OutboxWriter>>, reserved: usize) -> Self {
        let writer = writer.map_or(WriterRef::Missing, WriterRef::Shared);
        Self { writer, batch: Batch::default(), now: Utc::now(), offloads: Vec::new(), reserved, sequences: HashMap::new() }
    }

    /// An empty transaction with the same writer and reservation.
    #[cfg_attr(not(feature = "inbox"), allow(dead_code))]
    pub(crate) fn fresh(&self) -> Self {
        let writer = match &self.writer {
            WriterRef::Shared(w) => WriterRef::Shared(w.clone()),
            _ => WriterRef::Missing,
        };
        Self { writer, batch: Batch::default(), now: Utc::now(), offloads: Vec::new(), reserved: self.reserved, sequences: HashMap::new() }
    }
}

impl OutboxTransaction<'_> {
    /// Adds one of the caller's writes (Put, Update, Delete or ConditionCheck). Writes are
    /// numbered from 0 in the order added, as [`ConditionFailed::Write`](crate::ConditionFailed::Write) reports them.
    pub fn write(&mut self, item: TransactWriteItem) -> &mut Self {
        self.batch.write(item);
        self
    }

    /// Adds one of the caller's writes in FRONT of the request: it becomes write 0 and the writes
    /// added before it move up by one ([`ConditionFailed::Write`](crate::ConditionFailed::Write) numbers them so). For a write
    /// whose failed condition must win over the others': [`CommitError::ConditionFailed`] names
    /// the first failed item in request order (e.g. an idempotency key record, whose content
    /// needs the event id that [`Self::emit`] assigns).
    pub fn write_first(&mut self, item: TransactWriteItem) -> &mut Self {
        self.batch.write_first(item);
        self
    }

    /// Adds an event; returns the outbox item that will be stored (with its `event_id`; with
    /// its `payload_ref` when the payload goes to S3, uploaded by [`Self::execute`]).
    ///
    /// # Errors
    /// [`WriteError`] if the event is not publishable or the transaction is full.
    pub fn emit(&mut self, event: Event) -> Result<&OutboxItem, WriteError> {
        let Some(writer) = self.writer.get() else { return Err(WriteError::NoOutbox(event.event_type)) };
        if self.batch.items.len() + self.reserved >= MAX_TRANSACTION_ITEMS {
            return Err(WriteError::TooManyItems);
        }
        let repeated = self
            .batch
            .events
            .iter()
            .any(|e| e.sequence == event.sequence && e.aggregate_type == event.aggregate_type && e.aggregate_id == event.aggregate_id);
        if repeated {
            return Err(WriteError::SequenceRepeated {
                event_type: event.event_type,
                aggregate: OutboxItem::partition_key(&event.aggregate_type, &event.aggregate_id),
                sequence: event.sequence,
            });
        }
        let key = (event.aggregate_type.clone(), event.aggregate_id.clone());
        let sequence = event.sequence;
        let planned = writer.plan(event, self.now)?;
        self.offloads.extend(planned.offload);
        let highest = self.sequences.entry(key).or_insert(sequence);
        *highest = (*highest).max(sequence);
        Ok(self.batch.event(planned.put, planned.item))
    }

    /// Sets the current sequence of an aggregate for [`Self::emit_next`] (see
    /// [`AggregateSequence`]). Set it once, before its first event: events already emitted for
    /// the aggregate keep their sequences, and the next one follows the highest of them and
    /// `sequence.current()`.
    pub fn sequence(&mut self, sequence: AggregateSequence) -> &mut Self {
        let highest = self.sequences.entry((sequence.aggregate_type, sequence.aggregate_id)).or_insert(sequence.current);
        *highest = (*highest).max(sequence.current);
        self
    }

    /// [`Self::emit`] with the sequence assigned by the transaction: one more than the
    /// aggregate's highest so far (its [`Self::sequence`], or the latest event of the aggregate
    /// emitted in this transaction), whatever `event.sequence` held. Two events of one aggregate
    /// thus get consecutive sequences in one transaction.
    ///
    /// # Errors
    /// [`WriteError::SequenceUnknown`] when the transaction knows no sequence of the event's
    /// aggregate yet (neither [`Self::sequence`] nor an earlier event); otherwise as [`Self::emit`].
    pub fn emit_next(&mut self, mut event: Event) -> Result<&OutboxItem, WriteError> {
        let key = (event.aggregate_type.clone(), event.aggregate_id.clone());
        let Some(highest) = self.sequences.get(&key) else {
            return Err(WriteError::SequenceUnknown {
                event_type: event.event_type,
                aggregate: OutboxItem::partition_key(&event.aggregate_type, &event.aggregate_id),
            });
        };
        event.sequence = highest.checked_add(1).ok_or_else(|| WriteError::SequenceRepeated {
            event_type: event.event_type.clone(),
            aggregate: OutboxItem::partition_key(&event.aggregate_type, &event.aggregate_id),
            sequence: u64::MAX,
        })?;
        self.emit(event)
    }

    /// The outbox items emitted so far, in the order emitted.
    pub fn events(&self) -> &[OutboxItem] {
        &self.batch.events
    }

    /// The items so far, in request order (your writes and the outbox puts).
    pub fn items(&self) -> &[TransactWriteItem] {
        &self.batch.items
    }

    /// Whether request position `index` (as in [`crate::TransactionError::ConditionFailed`]) is
    /// one of the outbox puts (a sequence already taken) rather than one of the caller's writes.
    pub fn is_outbox_position(&self, index: usize) -> bool {
        self.batch.is_event(index)
    }

    /// Number of items so far.
    pub fn len(&self) -> usize {
        self.batch.items.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.batch.items.is_empty()
    }

    /// Commits everything in one `TransactWriteItems` call; returns the stored outbox items.
    /// Claim-checked payloads are uploaded first, one after the other; the transaction is not
    /// sent if an upload fails (`CommitError::ClaimCheck`).
    ///
    /// # Errors
    /// [`CommitError`]: [`CommitError::ConditionFailed`] names your write by its index among
    /// your writes, or the event whose sequence is taken; [`CommitError::Retryable`] for
    /// conflicts and throttling.
    pub async fn execute(mut self, client: &Client) -> Result<Vec<OutboxItem>, CommitError> {
        self.upload_offloads().await?;
        let (items, batch) = self.into_parts();
        match transact_write(client, items).await {
            Ok(()) => Ok(batch.events),
            Err(e) => Err(batch.commit_error(e)),
        }
    }

    /// Hands the transaction to a committer of your own instead of [`Self::execute`] (e.g.
    /// `Inbox::apply`, which adds its claim to your writes): uploads the claim-checked payloads
    /// first, as `execute` does, then returns the request items, unsent: your writes and the
    /// outbox puts, in request order ([`Self::items`]). [`Self::events`] has the outbox items
    /// before this call. If the request is cancelled, a `ConditionalCheckFailed` reason at an
    /// outbox put's position ([`Self::is_outbox_position`]) means its sequence is taken.
    ///
    /// ```
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let writer = outbox::OutboxWriter::new("outbox", std::time::Duration::from_secs(3600));
    /// let mut tx = writer.transaction();
    /// let event = outbox::Event::new("OrderShipped", "example.orders", ("Order", "o-1"), 3, &serde_json::json!({"order_id": "o-1"}))?;
    /// let event_id = tx.emit(event)?.event_id.clone();
    /// let items = tx.into_items().await?;
    /// assert!(items[0].put().is_some_and(|p| p.item()["event_id"].as_s().ok() == Some(&event_id)));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    ///
    /// # Errors
    /// `CommitError::ClaimCheck` when an upload failed (nothing to commit then).
    pub async fn into_items(mut self) -> Result<Vec<TransactWriteItem>, CommitError> {
        self.upload_offloads().await?;
        Ok(self.into_parts().0)
    }

    /// Uploads the claim-checked payloads (one after the other), before the transaction that
    /// references them is sent; each is uploaded once.
    pub(crate) async fn upload_offloads(&mut self) -> Result<(), CommitError> {
        let offloads = std::mem::take(&mut self.offloads);
        #[cfg(feature = "claim-check")]
        if let Some(claim_check) = self.writer.get().and_then(|w| w.claim_check.as_ref()) {
            for offload in offloads {
                claim_check.upload(&offload.reference, offload.payload).await.map_err(CommitError::ClaimCheck)?;
            }
        }
        #[cfg(not(feature = "claim-check"))]
        let _ = offloads;
        Ok(())
    }

    /// The request items, and the batch that names a failed position.
    pub(crate) fn into_parts(self) -> (Vec<TransactWriteItem>, Batch) {
        let mut batch = self.batch;
        let items = std::mem::take(&mut batch.items);
        (items, batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl OutboxWriter {
        /// The item an emit at `now` stores (the checks' tests).
        fn outbox_item(&self, event: Event, now: DateTime<Utc>) -> Result<OutboxItem, WriteError> {
            self.plan(event, now).map(|planned| planned.item)
        }
    }

    fn event(payload: &str) -> Event {
        Event {
            event_type: "OrderCreated".into(),
            event_version: 1,
            source: "example.orders".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o-1".into(),
            sequence: 7,
            payload: payload.into(),
            correlation_id: "c".into(),
            trace_header: None,
            trace_context: None,
            previous: Default::default(),
        }
    }

    #[test]
    fn outbox_item_follows_the_contract() {
        let writer = OutboxWriter::new("t", Duration::from_secs(3600));
        let now = DateTime::parse_from_rfc3339("2026-11-29T08:00:00Z").unwrap().with_timezone(&Utc);
        let item = writer.outbox_item(event("{}"), now).unwrap();
        assert_eq!(item.pk, "Order#o-1");
        assert_eq!(item.sk, "00000000000000000007");
        assert_eq!(item.occurred_at, "2026-11-29T08:00:00.000Z");
        assert_eq!(item.expires_at, now.timestamp() + 3600);
        let id = uuid::Uuid::parse_str(&item.event_id).unwrap();
        assert_eq!(id.get_version_num(), 7);
    }

    #[test]
    fn oversize_events_fail_before_any_write() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(300);
        let payload = format!("\"{}\"", "x".repeat(400));
        assert!(matches!(writer.outbox_item(event(&payload), Utc::now()), Err(WriteError::EventTooLarge { limit: 300, .. })));
        let writer = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(usize::MAX);
        let payload = format!("\"{}\"", "x".repeat(MAX_ITEM_BYTES));
        assert!(matches!(writer.outbox_item(event(&payload), Utc::now()), Err(WriteError::ItemTooLarge { .. })));
    }

    /// A retention too large for epoch seconds must not wrap `expires_at` into the past (DynamoDB
    /// would treat the item as expired at once).
    #[test]
    fn a_huge_retention_never_makes_an_item_born_expired() {
        let now = Utc::now();
        for seconds in [u64::MAX, i64::MAX as u64, 1 << 62] {
            let item = OutboxWriter::new("t", Duration::from_secs(seconds)).outbox_item(event("{}"), now).unwrap();
            assert!(item.expires_at > now.timestamp(), "retention {seconds} s: expires_at {} is not after now", item.expires_at);
        }
    }

    /// The size check counts every attribute the item carries, `previous` included: an item that
    /// DynamoDB would refuse (over 400 KB) is refused here, before any write.
    #[test]
    fn the_item_size_check_counts_previous() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(4 * 1024 * 1024);
        let mut with_previous = event("{}");
        for n in 0..2_000u64 {
            with_previous = with_previous.previous(format!("SomeRatherLongEventTypeName{n:05}"), u64::MAX - n);
        }
        // What DynamoDB counts for `previous` alone: name, map overhead, each entry's name, its
        // number (20 digits: 10 bytes + 1) and its 1-byte element overhead.
        let previous_bytes: usize = "previous".len() + 3 + with_previous.previous.keys().map(|k| k.len() + 11 + 1).sum::<usize>();
        assert!(previous_bytes > 60_000, "{previous_bytes}");
        // A payload that fills the item up to the limit without `previous`...
        let fill = writer.inline_limit(&event("{}"));
        let payload = format!("\"{}\"", "x".repeat(fill - 2));
        assert!(writer.outbox_item(event(&payload), Utc::now()).is_ok());
        // ...is over it with `previous`.
        with_previous.payload = payload;
        let result = writer.outbox_item(with_previous, Utc::now()).map(|item| item.item_size());
        assert!(matches!(result, Err(WriteError::ItemTooLarge { .. })), "an item over 400 KB passed the check: {result:?}");
    }

    /// A writer without a bus limit (`usize::MAX`) still computes its inline limit.
    #[test]
    fn an_unbounded_event_size_does_not_overflow_the_inline_limit() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(usize::MAX);
        let limit = writer.inline_limit(&event("{}"));
        assert!(limit > 0 && limit < MAX_ITEM_BYTES, "{limit}");
    }

    #[test]
    fn invalid_payloads_fail_before_any_write() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1));
        assert!(matches!(writer.outbox_item(event("{oops"), Utc::now()), Err(WriteError::Envelope(EnvelopeError::Payload(_)))));
    }

    #[test]
    fn inline_limit_is_where_the_size_checks_start_failing() {
        for writer in
            [OutboxWriter::new("t", Duration::from_secs(1)), OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(256 * 1024)]
        {
            let limit = writer.inline_limit(&event("{}"));
            let at = format!("\"{}\"", "x".repeat(limit - 2));
            assert!(writer.outbox_item(event(&at), Utc::now()).is_ok(), "a payload of exactly {limit} bytes is inline");
            let over = format!("\"{}\"", "x".repeat(limit - 1));
            assert!(writer.outbox_item(event(&over), Utc::now()).is_err(), "{} bytes is not", limit + 1);
        }
    }

    fn bus_events_built() -> usize {
        crate::envelope::BUS_EVENTS_BUILT.with(|built| built.get())
    }

    /// An emit builds its bus event once, and the size it checks is that event's: a bus limit of
    /// exactly the event's entry size passes, one byte less fails naming that size.
    #[test]
    fn an_emit_builds_its_bus_event_once_and_checks_that_events_size() {
        let payload = r#"{"order_id": "o-1", "lines": [1, 2, 3]}"#;
        let writer = OutboxWriter::new("t", Duration::from_secs(1));
        let mut tx = writer.transaction();
        let before = bus_events_built();
        let item = tx.emit(event(payload)).unwrap().clone();
        assert_eq!(bus_events_built() - before, 1, "one bus event per emit");
        let size = item.to_bus_event().unwrap().entry_size();

        let at = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(size);
        assert!(at.transaction().emit(event(payload)).is_ok(), "an entry of exactly the limit is accepted");
        let result = OutboxWriter::new("t", Duration::from_secs(1)).with_max_event_bytes(size - 1).transaction().emit(event(payload)).cloned();
        assert!(matches!(result, Err(WriteError::EventTooLarge { bytes, limit, .. }) if bytes == size && limit == size - 1), "{result:?}");
        // The put stores the item the writer measured.
        let stored = OutboxItem::from_item(tx.items()[0].put().unwrap().item().clone().into()).unwrap();
        assert_eq!(stored, item);
    }

    #[cfg(feature = "claim-check")]
    mod claim_check {
        use super::*;
        use crate::claim_check::{sha256_hex, ClaimCheck};

        fn writer() -> OutboxWriter {
            let config = aws_sdk_s3::Config::builder().behavior_version(aws_sdk_s3::config::BehaviorVersion::latest()).build();
            let claim_check = ClaimCheck::new(aws_sdk_s3::Client::from_conf(config), "payloads", "orders").with_max_bytes(2 * 1024 * 1024);
            OutboxWriter::new("t", Duration::from_secs(1)).with_claim_check(claim_check)
        }

        #[test]
        fn at_the_inline_limit_the_payload_stays_inline_one_byte_over_it_goes_to_s3() {
            let writer = writer();
            let limit = writer.inline_limit(&event("{}"));
            let at = format!("\"{}\"", "x".repeat(limit - 2));
            assert_eq!(at.len(), limit);
            let mut tx = writer.transaction();
            let item = tx.emit(event(&at)).unwrap().clone();
            assert_eq!((item.payload.len(), item.payload_ref.is_none()), (limit, true));
            assert!(tx.offloads.is_empty());

            let over = format!("\"{}\"", "x".repeat(limit - 1));
            let item = tx.emit(Event { sequence: 8, ..event(&over) }).unwrap().clone();
            let reference = item.payload_ref.clone().expect("one byte over the limit is claim-checked");
            assert_eq!(item.payload, "null");
            assert_eq!((reference.bucket.as_str(), reference.key.clone()), ("payloads", format!("orders/{}", item.event_id)));
            assert_eq!((reference.size, reference.sha256.clone()), (limit as u64 + 1, sha256_hex(over.as_bytes())));
            assert_eq!(tx.offloads.len(), 1);
            assert_eq!(tx.offloads[0].payload, over.as_bytes());
            let detail: serde_json::Value = serde_json::from_str(&item.to_bus_event().unwrap().detail).unwrap();
            assert_eq!(detail["data_ref"]["key"], reference.key.as_str());
            assert!(detail.get("data").is_none(), "the bus event never carries the bytes");
            // The stored item keeps the outbox contract (`is_outbox_item`) and round-trips.
            let attrs: std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> = item.to_item().unwrap();
            assert!(crate::envelope::is_outbox_item(&attrs));
            assert_eq!(OutboxItem::from_item(attrs.into()).unwrap(), item);
        }

        /// A claim-checked emit builds its bus event once too: the size of the stored item's event
        /// (with `data_ref`) is derived from the measured one, and is exactly the real size.
        #[test]
        fn an_offloaded_emit_builds_one_bus_event_and_checks_the_stored_events_size() {
            let payload = format!("\"{}\"", "x".repeat(MAX_ITEM_BYTES));
            let before = bus_events_built();
            let item = writer().transaction().emit(event(&payload)).unwrap().clone();
            assert_eq!(bus_events_built() - before, 1, "one bus event per emit");
            assert!(item.payload_ref.is_some());
            let size = item.to_bus_event().unwrap().entry_size();

            let at = writer().with_max_event_bytes(size);
            assert!(at.transaction().emit(event(&payload)).unwrap().payload_ref.is_some(), "the reference's entry of exactly the limit is accepted");
            let result = writer().with_max_event_bytes(size - 1).transaction().emit(event(&payload)).cloned();
            assert!(matches!(result, Err(WriteError::EventTooLarge { bytes, .. }) if bytes == size), "{result:?}");
        }

        #[test]
        fn above_the_maximum_or_not_json_fails_before_any_upload() {
            let writer = writer();
            let huge = format!("\"{}\"", "x".repeat(2 * 1024 * 1024));
            assert!(matches!(writer.transaction().emit(event(&huge)), Err(WriteError::PayloadTooLarge { limit: 2097152, .. })));
            let broken = format!("{{{}", "x".repeat(1024 * 1024));
            assert!(matches!(writer.transaction().emit(event(&broken)), Err(WriteError::Envelope(EnvelopeError::Payload(_)))));
        }
    }

    #[test]
    fn a_transaction_holds_at_most_one_hundred_items() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1));
        let mut tx = writer.transaction();
        for sequence in 1..=MAX_TRANSACTION_ITEMS as u64 {
            tx.emit(Event { sequence, ..event("{}") }).unwrap();
        }
        assert!(matches!(tx.emit(Event { sequence: 101, ..event("{}") }), Err(WriteError::TooManyItems)));
        assert!(tx.is_outbox_position(0));
    }
}
