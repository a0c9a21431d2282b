//! The outbox writer: adds events to the same DynamoDB `TransactWriteItems` call as the business
//! writes, so that both exist or neither does (the dual-write problem cannot happen).
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client, order_put: aws_sdk_dynamodb::types::TransactWriteItem)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! use outbox::writer::{NewEvent, OutboxWriter};
//! let writer = OutboxWriter::new("my-stack-outbox", std::time::Duration::from_secs(7 * 24 * 3600));
//! let mut tx = writer.transaction();
//! tx.write(order_put); // the caller's own Put/Update/ConditionCheck/Delete
//! tx.emit(NewEvent {
//!     event_type: "OrderCreated".into(),
//!     event_version: 1,
//!     source: "example.orders".into(),
//!     aggregate_type: "Order".into(),
//!     aggregate_id: "o-1".into(),
//!     sequence: 1,
//!     payload: r#"{"order_id":"o-1"}"#.into(),
//!     correlation_id: "req-1".into(),
//!     trace_header: None,
//! })?;
//! let events = tx.execute(&client).await?; // one TransactWriteItems call
//! # Ok(()) }
//! ```
//!
//! Each outbox item is put with `attribute_not_exists(pk)`: its key is (aggregate, sequence), so
//! two writers that both read version N of an aggregate and both emit sequence N+1 cannot both
//! commit (optimistic concurrency for free). Limits that would otherwise fail later are checked
//! here, before any write: the event must be valid JSON and fit in one `PutEvents` entry
//! ([`crate::envelope::BusEvent::entry_size`] ≤ the configured bus limit), and the outbox item
//! must stay under DynamoDB's 400 KB item size.

use std::time::Duration;

use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::envelope::{EnvelopeError, OutboxItem};
pub use crate::envelope::{DEFAULT_MAX_PUT_EVENTS_BYTES, MAX_ITEM_BYTES};
use crate::transaction::{transact_write, TransactionError, MAX_TRANSACTION_ITEMS};

/// An event to add to the outbox. The writer fills in the event id (UUIDv7), `occurred_at`
/// (now, UTC), the keys and the TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
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
    /// X-Ray trace header of the producing invocation, if any.
    pub trace_header: Option<String>,
}

/// An event that cannot be written, found before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
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
    pub fn outbox_item(&self, event: NewEvent, now: DateTime<Utc>) -> Result<OutboxItem, WriteError> {
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

    /// Starts a transaction that mixes the caller's writes with outbox events.
    pub fn transaction(&self) -> OutboxTransaction<'_> {
        OutboxTransaction { writer: self, items: Vec::new(), events: Vec::new(), outbox_positions: Vec::new(), now: Utc::now() }
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
    items: Vec<TransactWriteItem>,
    events: Vec<OutboxItem>,
    outbox_positions: Vec<usize>,
    now: DateTime<Utc>,
}

impl OutboxTransaction<'_> {
    /// Adds one of the caller's writes (Put, Update, Delete or ConditionCheck).
    pub fn write(&mut self, item: TransactWriteItem) -> &mut Self {
        self.items.push(item);
        self
    }

    /// Adds an event; returns the outbox item that will be stored.
    ///
    /// # Errors
    /// [`WriteError`] if the event is not publishable or the transaction is full.
    pub fn emit(&mut self, event: NewEvent) -> Result<&OutboxItem, WriteError> {
        if self.items.len() >= MAX_TRANSACTION_ITEMS {
            return Err(WriteError::TooManyItems);
        }
        let item = self.writer.outbox_item(event, self.now)?;
        self.outbox_positions.push(self.items.len());
        self.items.push(self.writer.put(&item));
        self.events.push(item);
        Ok(self.events.last().expect("just pushed"))
    }

    /// Whether request position `index` (as in [`TransactionError::ConditionFailed`]) is one of
    /// the outbox puts (a sequence already taken) rather than one of the caller's writes.
    pub fn is_outbox_position(&self, index: usize) -> bool {
        self.outbox_positions.contains(&index)
    }

    /// Number of items so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Commits everything in one `TransactWriteItems` call; returns the stored outbox items.
    ///
    /// # Errors
    /// [`TransactionError`]: a failed condition names its request position.
    pub async fn execute(self, client: &Client) -> Result<Vec<OutboxItem>, TransactionError> {
        transact_write(client, self.items).await?;
        Ok(self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: &str) -> NewEvent {
        NewEvent {
            event_type: "OrderCreated".into(),
            event_version: 1,
            source: "example.orders".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o-1".into(),
            sequence: 7,
            payload: payload.into(),
            correlation_id: "c".into(),
            trace_header: None,
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
