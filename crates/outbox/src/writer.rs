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
//! Callers with their own transaction builder take the outbox put alone with
//! [`OutboxWriter::transact_item`] and add it to their `TransactWriteItems` request.
//!
//! Each outbox item is put with `attribute_not_exists(pk)`: its key is (aggregate, sequence), so
//! two writers that both read version N of an aggregate and both emit sequence N+1 cannot both
//! commit (optimistic concurrency for free). Limits that would otherwise fail later are checked
//! here, before any write: the event must be valid JSON and fit in one `PutEvents` entry
//! ([`crate::envelope::BusEvent::entry_size`] ≤ the configured bus limit), and the outbox item
//! must stay under DynamoDB's 400 KB item size.
//!
//! When DynamoDB cancels the transaction, `CancellationReasons` lists one reason per request
//! item in request order (`TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>);
//! [`OutboxTransaction::execute`] maps the failed position back to *your* write or to the
//! outbox put ([`ConditionFailed`]).

use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::envelope::{EnvelopeError, OutboxItem};
pub use crate::envelope::{DEFAULT_MAX_PUT_EVENTS_BYTES, MAX_ITEM_BYTES};
use crate::transaction::{transact_write, Batch, MAX_TRANSACTION_ITEMS};
pub use crate::transaction::{CommitError, ConditionFailed};

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
/// Build it with [`Event::new`], which serialises the payload and picks up the trace header, then
/// adjust it with [`Event::version`], [`Event::correlation_id`] and [`Event::trace_header`]; or
/// write the struct literally when the payload is JSON text already.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// Event type → sequence of the aggregate's latest earlier event of that type (empty by
    /// default; see [`Event::previous`]).
    pub previous: std::collections::BTreeMap<String, u64>,
}

impl Event {
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
    /// The transaction would exceed [`MAX_TRANSACTION_ITEMS`].
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items")]
    TooManyItems,
}

/// Builds outbox items and transactions for one outbox table.
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    table: String,
    retention: Duration,
    max_event_bytes: usize,
}

impl OutboxWriter {
    /// A writer for `table` whose items expire (TTL) `retention` after they are written.
    /// The retention only bounds storage: the relay publishes on INSERT, long before it.
    pub fn new(table: impl Into<String>, retention: Duration) -> Self {
        Self { table: table.into(), retention, max_event_bytes: DEFAULT_MAX_PUT_EVENTS_BYTES }
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

    /// Turns `event` into the outbox item to store, with a new UUIDv7 event id and
    /// `occurred_at` = `now`.
    ///
    /// # Errors
    /// [`WriteError`] if the event would never be publishable.
    pub fn outbox_item(&self, event: Event, now: DateTime<Utc>) -> Result<OutboxItem, WriteError> {
        let item = OutboxItem {
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
            correlation_id: event.correlation_id,
            trace_header: event.trace_header,
            expires_at: now.timestamp() + self.retention.as_secs() as i64,
            previous: event.previous,
        };
        let bus_event = item.to_bus_event()?;
        let bytes = bus_event.entry_size();
        if bytes > self.max_event_bytes {
            return Err(WriteError::EventTooLarge { event_type: item.event_type, bytes, limit: self.max_event_bytes });
        }
        let bytes = estimated_item_size(&item);
        if bytes > MAX_ITEM_BYTES {
            return Err(WriteError::ItemTooLarge { event_type: item.event_type, bytes });
        }
        Ok(item)
    }

    /// The transaction item that stores `item`, conditioned on `attribute_not_exists(pk)` so an
    /// (aggregate, sequence) pair is written at most once.
    pub fn put(&self, item: &OutboxItem) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(&self.table)
            // An OutboxItem is strings and integers: serde_dynamo cannot fail on it.
            .set_item(Some(item.to_item().expect("an OutboxItem always converts")))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// The escape hatch for callers with their own transaction builder: the outbox item for
    /// `event` (its `event_id` is the consumers' idempotency key) and the plain
    /// `TransactWriteItem` that puts it, to add to your own `TransactWriteItems` request. On a
    /// cancellation, a `ConditionalCheckFailed` reason at its position means the sequence is
    /// taken.
    ///
    /// ```
    /// # fn example() -> Result<(), outbox::WriteError> {
    /// let writer = outbox::OutboxWriter::new("outbox", std::time::Duration::from_secs(3600));
    /// let event = outbox::Event::new("OrderShipped", "example.orders", ("Order", "o-1"), 3, &serde_json::json!({"order_id": "o-1"}))?;
    /// let (item, put) = writer.transact_item(event)?;
    /// assert_eq!(item.sk, "00000000000000000003");
    /// assert!(put.put().is_some());
    /// # Ok(()) }
    /// # example().unwrap();
    /// ```
    ///
    /// # Errors
    /// [`WriteError`] if the event would never be publishable.
    pub fn transact_item(&self, event: Event) -> Result<(OutboxItem, TransactWriteItem), WriteError> {
        let item = self.outbox_item(event, Utc::now())?;
        let put = self.put(&item);
        Ok((item, put))
    }

    /// Starts a transaction that mixes the caller's writes with outbox events.
    pub fn transaction(&self) -> OutboxTransaction<'_> {
        OutboxTransaction { writer: self, batch: Batch::default(), now: Utc::now() }
    }
}

/// Rough DynamoDB item size: attribute names plus values as UTF-8 bytes (numbers count as their
/// decimal digits, an over-estimate of DynamoDB's encoding).
fn estimated_item_size(item: &OutboxItem) -> usize {
    let strings = [
        ("pk", item.pk.len()),
        ("sk", item.sk.len()),
        ("event_id", item.event_id.len()),
        ("event_type", item.event_type.len()),
        ("source", item.source.len()),
        ("aggregate_type", item.aggregate_type.len()),
        ("aggregate_id", item.aggregate_id.len()),
        ("occurred_at", item.occurred_at.len()),
        ("payload", item.payload.len()),
        ("correlation_id", item.correlation_id.len()),
        ("trace_header", item.trace_header.as_ref().map_or(0, String::len)),
    ];
    let numbers = [("event_version", 10), ("sequence", 20), ("expires_at", 20)];
    strings.iter().chain(numbers.iter()).map(|(name, len)| name.len() + len).sum()
}

/// One `TransactWriteItems` call in the making: the caller's writes plus outbox events.
#[derive(Debug)]
pub struct OutboxTransaction<'w> {
    writer: &'w OutboxWriter,
    batch: Batch,
    now: DateTime<Utc>,
}

impl OutboxTransaction<'_> {
    /// Adds one of the caller's writes (Put, Update, Delete or ConditionCheck). Writes are
    /// numbered from 0 in the order added, as [`ConditionFailed::Write`] reports them.
    pub fn write(&mut self, item: TransactWriteItem) -> &mut Self {
        self.batch.write(item);
        self
    }

    /// Adds an event; returns the outbox item that will be stored (with its `event_id`).
    ///
    /// # Errors
    /// [`WriteError`] if the event is not publishable or the transaction is full.
    pub fn emit(&mut self, event: Event) -> Result<&OutboxItem, WriteError> {
        if self.batch.items.len() >= MAX_TRANSACTION_ITEMS {
            return Err(WriteError::TooManyItems);
        }
        let item = self.writer.outbox_item(event, self.now)?;
        let put = self.writer.put(&item);
        Ok(self.batch.event(put, item))
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
    ///
    /// # Errors
    /// [`CommitError`]: [`CommitError::ConditionFailed`] names your write by its index among
    /// your writes, or the event whose sequence is taken; [`CommitError::Retryable`] for
    /// conflicts and throttling.
    pub async fn execute(self, client: &Client) -> Result<Vec<OutboxItem>, CommitError> {
        let mut batch = self.batch;
        let items = std::mem::take(&mut batch.items);
        match transact_write(client, items).await {
            Ok(()) => Ok(batch.events),
            Err(e) => Err(batch.commit_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn invalid_payloads_fail_before_any_write() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1));
        assert!(matches!(writer.outbox_item(event("{oops"), Utc::now()), Err(WriteError::Envelope(EnvelopeError::Payload(_)))));
    }

    #[test]
    fn a_transaction_holds_at_most_one_hundred_items() {
        let writer = OutboxWriter::new("t", Duration::from_secs(1));
        let mut tx = writer.transaction();
        for _ in 0..MAX_TRANSACTION_ITEMS {
            tx.emit(event("{}")).unwrap();
        }
        assert!(matches!(tx.emit(event("{}")), Err(WriteError::TooManyItems)));
        assert!(tx.is_outbox_position(0));
    }
}
