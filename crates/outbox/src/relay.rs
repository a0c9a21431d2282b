//! The relay: DynamoDB Streams records of the outbox table → EventBridge `PutEvents`.
//!
//! Delivery is at-least-once; nothing committed is ever acknowledged unpublished, and the events
//! of one aggregate are submitted in sequence order. What happens to each record:
//!
//! 1. **Classify.** Only `INSERT` records of outbox items (items with `event_id`) are events.
//!    `MODIFY`, `REMOVE` (TTL deletions carry `userIdentity` = `Service` /
//!    `dynamodb.amazonaws.com`; replicated ones do not — both are skipped) and other item types
//!    are skipped and counted. An outbox item that breaks the contract, or whose event is larger
//!    than one `PutEvents` request may be, is a *poison record*.
//! 2. **Publish in full calls, many in flight, each aggregate in order.** The batch's events are
//!    cut into `PutEvents` calls of at most [`MAX_ENTRIES_PER_CALL`] entries (100 on the Custom
//!    bus) and at most `max_request_bytes` (counted as [`BusEvent::entry_size`] does). An aggregate's events stay
//!    together, in sequence order: an aggregate that fits in one call joins the first call with
//!    room for all of it, so calls share no aggregate; a *hot* aggregate with more events than
//!    one call holds gets a chain of full calls of its own (100 records of one aggregate take 10
//!    calls). Up to [`RelayConfig::max_calls_in_flight`] calls are in flight together; a call
//!    that shares an aggregate with an earlier call waits until that call has settled (retries
//!    included), and is not sent at all if a record of it failed. An aggregate's records are in
//!    sequence order within its shard (the stream keeps each item's order, and the event source
//!    mapping runs one batch per shard at a time with `ParallelizationFactor` 1), so its events
//!    are submitted in sequence order: within one call by position, across calls by time. The
//!    classic bus promises no order between concurrent calls, and needs none here: concurrent
//!    calls never carry the same aggregate. A batch of 100 distinct aggregates (or 10 × 10) thus
//!    takes one round trip instead of ten; one hot aggregate takes ten, as before.
//! 3. **Partial failures.** `PutEvents` answers HTTP 200 even when entries fail:
//!    `FailedEntryCount` > 0 and, *by position*, an `ErrorCode` on each failed response entry.
//!    Failed entries with a transient code (`ThrottlingException`, `InternalFailure`, any code
//!    not known to be permanent) are resent alone, with exponential backoff and full jitter,
//!    while the invocation's time budget lasts. Entries failing with a permanent code
//!    (`MalformedDetail`, `InvalidArgument`) are poison. Each failed entry is logged at WARN
//!    with its event id, aggregate, error code and message and what happens next (retry, fail
//!    the record, dead-letter it), at most [`MAX_FAILED_ENTRY_WARNINGS`] lines a batch and then
//!    one counting the rest; a batch without failures logs only its summary. Source: the `PutEvents` API reference,
//!    <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html>.
//! 4. **Poison records** go to the relay's dead-letter queue as a
//!    [`RelayFailureRecord`] with the whole stream
//!    record and the reason, and count as done, so one bad record never blocks its shard. If
//!    the dead-letter queue cannot be written either, the record is a failure like any other.
//! 5. **Checkpoint.** The response's `batchItemFailures` holds the sequence number of the
//!    *earliest* failed record. Lambda then re-delivers the batch from that record on
//!    (`ReportBatchItemFailures`; source:
//!    <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>).
//!
//! **The checkpoint rule.** Every record after the earliest failure will be delivered again, so
//! the relay starts no call whose records all lie after the earliest failure known so far (it
//! would only be duplicated), and for an aggregate, nothing after its first failed event is sent
//! in a later call of the invocation. Loss is impossible: nothing at or after the checkpoint is
//! acknowledged. Entries that were accepted but lie after the checkpoint — in the *same* call as
//! the failed one, or in a call in flight beside it — count as published and are published again
//! on re-delivery: duplicates, absorbed by the consumers' inbox.
//!
//! **Two buses.** [`Relay::new`] publishes to a classic event bus, [`Relay::custom`] (feature
//! `custom-bus`) to the Custom Event Bus; what differs (the client, 10 or 100 entries a call,
//! the Custom bus's `EventGroupId` = the aggregate and `DeduplicationId` = the event id, its
//! `DEDUPLICATED` answer, the missing `TraceHeader`) lives in [`bus`] alone. On the Custom bus
//! a FIFO subscriber delivers each event group in publish order, and the plan above already
//! keeps one aggregate's calls from overlapping, so an aggregate reaches its consumers in
//! sequence order, with one exception kept from the classic bus: an entry that failed
//! transiently and is resent alone lands after the later entries of its aggregate that its call
//! published (the ordered inbox applies them in order all the same).
//!
//! **Logs.** One line per batch (`relay batch done`: records, events, published, `PutEvents`
//! calls, most calls in flight, retries, failures, dead letters, deferred, duration): INFO, or
//! WARN when records are reported for re-delivery. One DEBUG line per event and attempt
//! (`event published`, `PutEvents entry failed`) inside the event's span; at INFO the span is
//! not built. Poison records: one ERROR line each.
//!
//! **What order buys.** "The `PutEvents` operation attempts to process all entries in the
//! natural order of the request"
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevents.html>), but a standard
//! event bus promises no order when it delivers to targets: rules deliver in parallel, and a
//! retried delivery comes after later events. A transiently failed entry that is resent alone
//! also lands after the later entries of its call that were accepted. Publish order is
//! therefore not delivery order: consumers that need an aggregate's events in sequence order
//! use the ordered inbox ([`crate::consumer`]), which applies them by `detail.metadata.sequence`
//! whatever order they arrive in.

pub mod bus;
mod entry_warnings;
pub mod stream;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::Utc;
use futures_util::stream::{FuturesUnordered, StreamExt};
use rand::Rng;
use serde::Serialize;

use crate::dead_letter::{RelayFailureRecord, RELAY_FAILURE_KIND};
use crate::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES;
use crate::envelope::{BusEvent, OutboxItem};
use bus::{Accepted, Publisher};
pub use bus::{BusType, BusTypeError, CustomBusArnError};
pub use entry_warnings::MAX_FAILED_ENTRY_WARNINGS;
use entry_warnings::{EntryWarnings, Next};
use stream::{StreamBatch, StreamRecord};

/// Most entries in one classic `PutEvents` call (AWS limit; the Custom bus takes
/// [`bus::MAX_ENTRIES_PER_CUSTOM_CALL`]).
pub const MAX_ENTRIES_PER_CALL: usize = 10;

/// Entry error codes that no retry can fix. Any other code is treated as transient.
pub const PERMANENT_ERROR_CODES: [&str; 2] = ["MalformedDetail", "InvalidArgument"];

/// Relay settings. [`RelayConfig::new`] gives the documented defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// The target bus: a classic bus's name or ARN, or ([`Relay::custom`]) a Custom Event Bus's
    /// `event-busv2` ARN.
    pub event_bus_name: String,
    /// URL of the relay's dead-letter queue (poison records).
    pub dead_letter_queue_url: String,
    /// Most bytes in one `PutEvents` request (default [`DEFAULT_MAX_PUT_EVENTS_BYTES`]).
    pub max_request_bytes: usize,
    /// Most `PutEvents` attempts for one entry within one invocation (default 5).
    pub max_attempts: u32,
    /// First backoff step (default 50 ms); attempt n waits a random time in
    /// `[0, min(max_backoff, base_backoff × 2^n))` ("full jitter").
    pub base_backoff: Duration,
    /// Longest single backoff (default 2 s).
    pub max_backoff: Duration,
    /// Time kept in reserve before the invocation's deadline: no retry starts later than
    /// `deadline − safety_margin` (default 2 s).
    pub safety_margin: Duration,
    /// Longest one `PutEvents` call can take: the SDK operation time-out
    /// (`outbox_lambda::SdkTimeouts`, default 15 s). After the invocation's first call, no
    /// call (a new wave's or a resend) starts with less than `call_budget + safety_margin` left
    /// before the deadline; the records not sent then are reported from the earliest one on as
    /// `batchItemFailures`, so nothing after them is acknowledged and Lambda delivers them again.
    pub call_budget: Duration,
    /// Attribute names of the outbox table where they differ from the contract's
    /// ([`crate::envelope`]): table name → contract name, e.g. `"EventId"` → `"event_id"`.
    /// Empty (the default) when the table uses the contract's names. See
    /// [`RelayConfig::rename_attributes`].
    pub attribute_names: HashMap<String, String>,
    /// Most `PutEvents` calls of one invocation in flight at once (default
    /// [`DEFAULT_MAX_CALLS_IN_FLIGHT`]; at least 1). Calls that carry events of the same
    /// aggregate never overlap, whatever this is (module docs, step 2).
    pub max_calls_in_flight: usize,
    /// The outbox table (its name, or its table or stream ARN) whose stream this relay serves.
    /// A record whose `eventSourceARN` names another table, or no table, is skipped and counted
    /// ([`SkipReason::ForeignStream`]): a mapping attached to the wrong stream publishes
    /// nothing. `None` (the default) relays every stream it is attached to.
    pub outbox_table: Option<String>,
}

/// Default of [`RelayConfig::max_calls_in_flight`]: 10, so a batch of 100 records (the
/// template's `BatchSize`: 10 full calls) of distinct aggregates goes out in one round trip.
/// One shard's relay then makes at most 10 concurrent `PutEvents` calls; the account's
/// `PutEvents` quota (requests per second, per Region) is shared by every shard and producer
/// (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html>).
pub const DEFAULT_MAX_CALLS_IN_FLIGHT: usize = 10;

/// Names of the outbox item contract's attributes ([`crate::envelope`]), which
/// [`RelayConfig::rename_attributes`] accepts.
pub const CONTRACT_ATTRIBUTES: [&str; 15] = [
    "pk",
    "sk",
    "event_id",
    "event_type",
    "event_version",
    "source",
    "aggregate_type",
    "aggregate_id",
    "sequence",
    "occurred_at",
    "payload",
    "correlation_id",
    "trace_header",
    "expires_at",
    "previous",
];

/// A renaming of outbox attributes that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttributeNamesError {
    /// An entry is not `contract=table`.
    #[error("{0:?} is not `contract_name=table_name`")]
    Syntax(String),
    /// A contract attribute is renamed twice, or two attributes get one table name.
    #[error("{0:?} appears twice in the renaming")]
    Duplicate(String),
    /// The left side is not an attribute of the contract.
    #[error("{0:?} is not an outbox attribute; the contract's attributes are {list}", list = CONTRACT_ATTRIBUTES.join(", "))]
    UnknownAttribute(String),
}

impl RelayConfig {
    /// Reads a renaming of the outbox table's attributes from `spec`: comma-separated
    /// `contract_name=table_name` pairs, e.g. `event_id=EventId,payload=Body` (the relay
    /// function's `OUTBOX_ATTRIBUTE_NAMES`). Only attributes whose names differ need a pair.
    ///
    /// # Errors
    /// [`AttributeNamesError`] naming the entry that is not `a=b`, whose left side is not one
    /// of [`CONTRACT_ATTRIBUTES`], or a name used twice. Nothing is changed on error.
    pub fn rename_attributes(&mut self, spec: &str) -> Result<(), AttributeNamesError> {
        let mut names = self.attribute_names.clone();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (contract, table) =
                pair.split_once('=').map(|(a, b)| (a.trim(), b.trim())).ok_or_else(|| AttributeNamesError::Syntax(pair.into()))?;
            if contract.is_empty() || table.is_empty() {
                return Err(AttributeNamesError::Syntax(pair.into()));
            }
            if !CONTRACT_ATTRIBUTES.contains(&contract) {
                return Err(AttributeNamesError::UnknownAttribute(contract.into()));
            }
            if names.values().any(|c| c == contract) {
                return Err(AttributeNamesError::Duplicate(contract.into()));
            }
            if names.contains_key(table) {
                return Err(AttributeNamesError::Duplicate(table.into()));
            }
            names.insert(table.to_owned(), contract.to_owned());
        }
        self.attribute_names = names;
        Ok(())
    }
}

impl RelayConfig {
    /// Defaults for `event_bus_name` and `dead_letter_queue_url`.
    pub fn new(event_bus_name: impl Into<String>, dead_letter_queue_url: impl Into<String>) -> Self {
        Self {
            event_bus_name: event_bus_name.into(),
            dead_letter_queue_url: dead_letter_queue_url.into(),
            max_request_bytes: DEFAULT_MAX_PUT_EVENTS_BYTES,
            max_attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            safety_margin: Duration::from_secs(2),
            call_budget: Duration::from_secs(15),
            attribute_names: HashMap::new(),
            max_calls_in_flight: DEFAULT_MAX_CALLS_IN_FLIGHT,
            outbox_table: None,
        }
    }
}

/// Why a record was not an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// A `MODIFY` record (an update of an outbox item is not a new event).
    Modify,
    /// A `REMOVE` record by a user or a replicated TTL deletion.
    Remove,
    /// A `REMOVE` record by DynamoDB's TTL process (`userIdentity` principal
    /// `dynamodb.amazonaws.com`).
    TtlRemove,
    /// An `INSERT` of an item that is not an outbox item (no `event_id`).
    NotOutboxItem,
    /// An `eventName` that is none of the above.
    UnknownEventName,
    /// A record from another table's stream than [`RelayConfig::outbox_table`].
    ForeignStream,
}

impl SkipReason {
    /// The reason as a metric label / log value, e.g. `ttl_remove`.
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::Modify => "modify",
            SkipReason::Remove => "remove",
            SkipReason::TtlRemove => "ttl_remove",
            SkipReason::NotOutboxItem => "not_outbox_item",
            SkipReason::UnknownEventName => "unknown_event_name",
            SkipReason::ForeignStream => "foreign_stream",
        }
    }
}

/// What one invocation did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RelayReport {
    /// Records in the batch.
    pub records: usize,
    /// Records that are outbox events to publish (neither skipped nor poison).
    pub events: usize,
    /// Records that were not events, by reason.
    pub skipped: HashMap<SkipReason, usize>,
    /// Events accepted by EventBridge (deduplicated ones included).
    pub published: usize,
    /// Of [`RelayReport::published`], entries the Custom bus answered `DEDUPLICATED`: it had
    /// seen their `DeduplicationId` (the event id) within 300 s, so they were not published
    /// again (always 0 on the classic bus).
    pub deduplicated: usize,
    /// Entry resends after a transient failure.
    pub retried: usize,
    /// Poison records written to the relay dead-letter queue.
    pub dead_lettered: usize,
    /// Records that failed (the earliest is the checkpoint).
    pub failed: usize,
    /// Events not attempted because an earlier record failed or the time budget ran out; they
    /// are re-delivered.
    pub deferred: usize,
    /// Whether the invocation stopped starting `PutEvents` calls because too little time was
    /// left ([`RelayConfig::call_budget`]).
    pub out_of_time: bool,
    /// `PutEvents` calls made.
    pub put_events_calls: usize,
    /// Most `PutEvents` calls in flight at once ([`RelayConfig::max_calls_in_flight`]).
    pub max_calls_in_flight: usize,
    /// Largest "now − `occurred_at`" among published events, milliseconds.
    pub max_lag_ms: i64,
    /// Time the relay took for the batch, milliseconds.
    pub duration_ms: u64,
    /// Event ids accepted by EventBridge, in publication order.
    #[serde(skip)]
    pub published_event_ids: Vec<String>,
}

impl RelayReport {
    /// Total skipped records.
    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
    }

    /// Writes the batch's one summary line: INFO when every record was published, skipped or
    /// dead-lettered; WARN when records failed or were left for re-delivery (`checkpoint`: the
    /// sequence number reported in `batchItemFailures`). Per-event lines are DEBUG (module docs).
    pub fn log_summary(&self, checkpoint: Option<&str>) {
        macro_rules! summary {
            ($level:ident) => {
                tracing::$level!(
                    records = self.records,
                    events = self.events,
                    published = self.published,
                    deduplicated = self.deduplicated,
                    put_events_calls = self.put_events_calls,
                    max_calls_in_flight = self.max_calls_in_flight,
                    retried = self.retried,
                    failed = self.failed,
                    dead_lettered = self.dead_lettered,
                    deferred = self.deferred,
                    skipped = self.skipped_total(),
                    out_of_time = self.out_of_time,
                    max_lag_ms = self.max_lag_ms,
                    duration_ms = self.duration_ms,
                    checkpoint,
                    "relay batch done"
                )
            };
        }
        if checkpoint.is_some() || self.failed > 0 {
            summary!(warn);
        } else {
            summary!(info);
        }
    }

    /// Records the report through the `metrics` facade: counters `RecordsSeen`,
    /// `RecordsSkipped` (label `reason`), `EventsPublished`, `EntriesRetried`,
    /// `RecordsDeadLettered`, `RecordsFailed`, `RecordsDeferred`, `PutEventsCalls`, and the
    /// histogram `LagMilliseconds` (now − the newest event's `occurred_at`, for the batch's
    /// slowest event). The relay function installs a CloudWatch Embedded Metric Format
    /// recorder (`metrics_cloudwatch_embedded`); without a recorder this does nothing.
    /// Without feature `metrics` this does nothing.
    pub fn emit_metrics(&self) {
        #[cfg(feature = "metrics")]
        self.record_metrics();
    }

    #[cfg(feature = "metrics")]
    fn record_metrics(&self) {
        metrics::counter!(crate::contract::metric::RECORDS_SEEN).increment(self.records as u64);
        for (reason, n) in &self.skipped {
            metrics::counter!(crate::contract::metric::RECORDS_SKIPPED, crate::contract::dimension::REASON => reason.as_str()).increment(*n as u64);
        }
        metrics::counter!(crate::contract::metric::EVENTS_PUBLISHED).increment(self.published as u64);
        metrics::counter!(crate::contract::metric::ENTRIES_RETRIED).increment(self.retried as u64);
        metrics::counter!(crate::contract::metric::RECORDS_DEAD_LETTERED).increment(self.dead_lettered as u64);
        metrics::counter!(crate::contract::metric::RECORDS_FAILED).increment(self.failed as u64);
        metrics::counter!(crate::contract::metric::RECORDS_DEFERRED).increment(self.deferred as u64);
        metrics::counter!(crate::contract::metric::PUT_EVENTS_CALLS).increment(self.put_events_calls as u64);
        if self.published > 0 {
            metrics::histogram!(crate::contract::metric::LAG_MILLISECONDS).record(self.max_lag_ms as f64);
        }
    }
}

/// The relay's answer to one batch.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayOutcome {
    /// `batchItemFailures` for Lambda: empty, or the earliest failed record's sequence number.
    pub response: DynamoDbEventResponse,
    /// Counts.
    pub report: RelayReport,
}

/// The batch cannot be answered record by record: the whole batch must be retried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// A record that must be retried has no `SequenceNumber` to report. Failing the invocation
    /// makes Lambda retry the whole batch, which loses nothing.
    #[error("record {index} failed and has no SequenceNumber to report; failing the whole batch")]
    NoSequenceNumber {
        /// Position in the batch.
        index: usize,
    },
}

/// One entry's failure as `PutEvents` reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryFailure {
    /// `ErrorCode` of the response entry, or the request's error code.
    pub code: String,
    /// `ErrorMessage`.
    pub message: String,
    /// Whether a resend can succeed: false only for [`PERMANENT_ERROR_CODES`] on an entry (on
    /// the Custom bus, [`bus::PERMANENT_CUSTOM_ERROR_CODES`]).
    pub retryable: bool,
}

impl EntryFailure {
    /// The failure of a classic response entry with `ErrorCode` = `code`.
    pub fn entry(code: &str, message: &str) -> Self {
        Self { code: code.into(), message: message.into(), retryable: !PERMANENT_ERROR_CODES.contains(&code) }
    }

    /// The failure of a Custom bus response entry with `ErrorCode` = `code`.
    pub fn custom_entry(code: &str, message: &str) -> Self {
        Self { code: code.into(), message: message.into(), retryable: !bus::PERMANENT_CUSTOM_ERROR_CODES.contains(&code) }
    }

    /// Whether a resend can succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

/// An outbox record that can become a `PutEvents` entry.
#[derive(Debug)]
struct Pending {
    /// Position in the batch.
    index: usize,
    item: Box<OutboxItem>,
    event: BusEvent,
}

/// An outbox record that can never be published.
#[derive(Debug)]
struct Poison {
    index: usize,
    event_id: Option<String>,
    error_code: String,
    reason: String,
}

enum Classified {
    Skip(SkipReason),
    Poison { event_id: Option<String>, error_code: String, reason: String },
    Publish { item: Box<OutboxItem>, event: BusEvent },
}

/// One planned `PutEvents` call: the positions of its events in the planner's input, and the
/// earlier calls it must wait for because they carry events of the same aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlannedCall {
    events: Vec<usize>,
    bytes: usize,
    after: Vec<usize>,
    /// Whether other aggregates may still join it (calls of a hot aggregate's chain are closed).
    open: bool,
}

/// Cuts events, given in batch order as (aggregate, entry size), into `PutEvents` calls of at
/// most `max_entries` entries and `max_bytes` bytes (module docs, step 2).
///
/// Each aggregate's events stay together and in batch (= sequence) order. An aggregate that
/// fits in one call joins the first open call with room for all of it (first fit), or opens a
/// new one: such calls share no aggregate and may be in flight together. An aggregate that does
/// not fit in one call (a hot aggregate) gets a chain of calls of its own, each after the one
/// before: its events reach the bus in sequence order, as they did when every call was settled
/// before the next.
fn plan_calls<K: Eq + std::hash::Hash>(events: &[(K, usize)], max_entries: usize, max_bytes: usize) -> Vec<PlannedCall> {
    let mut group_of: HashMap<&K, usize> = HashMap::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (position, (key, _)) in events.iter().enumerate() {
        let group = *group_of.entry(key).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(position);
    }
    let mut calls: Vec<PlannedCall> = Vec::new();
    // Calls before this one are full or closed: first fit starts looking here.
    let mut first_open = 0;
    for group in groups {
        let bytes: usize = group.iter().map(|&p| events[p].1).sum();
        if group.len() <= max_entries && bytes <= max_bytes {
            while calls.get(first_open).is_some_and(|c| !c.open || c.events.len() >= max_entries) {
                first_open += 1;
            }
            let fits = |c: &PlannedCall| c.open && c.events.len() + group.len() <= max_entries && c.bytes + bytes <= max_bytes;
            match calls[first_open..].iter_mut().find(|c| fits(c)) {
                Some(call) => {
                    call.events.extend(group);
                    call.bytes += bytes;
                }
                None => calls.push(PlannedCall { events: group, bytes, after: Vec::new(), open: true }),
            }
            continue;
        }
        let mut current = PlannedCall { events: Vec::new(), bytes: 0, after: Vec::new(), open: false };
        for position in group {
            let size = events[position].1;
            if !current.events.is_empty() && (current.events.len() >= max_entries || current.bytes + size > max_bytes) {
                calls.push(current);
                current = PlannedCall { events: Vec::new(), bytes: 0, after: vec![calls.len() - 1], open: false };
            }
            current.events.push(position);
            current.bytes += size;
        }
        calls.push(current);
    }
    calls
}

/// Where a planned call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    /// Not started: waiting for an earlier call of the same aggregate, or for a free slot.
    Waiting,
    InFlight,
    /// Every record published or dead-lettered.
    Settled,
    /// A record failed: the calls after it that share an aggregate are not sent.
    Failed,
    /// Not sent: after the checkpoint, after a failed call of the same aggregate, or out of time.
    NotSent,
}

/// What one call (with its resends and dead-letter writes) did.
#[derive(Debug, Default)]
struct CallResult {
    call: usize,
    published: Vec<Pending>,
    deduplicated: usize,
    /// Batch positions of the records that failed.
    failed: Vec<usize>,
    dead_lettered: usize,
    retried: usize,
    put_events_calls: usize,
}

/// Publishes outbox records to EventBridge (see the module docs).
#[derive(Debug, Clone)]
pub struct Relay {
    events: Publisher,
    sqs: aws_sdk_sqs::Client,
    config: RelayConfig,
}

impl Relay {
    /// A relay that publishes to the classic bus [`RelayConfig::event_bus_name`] with `events`
    /// and dead-letters with `sqs`.
    pub fn new(events: aws_sdk_eventbridge::Client, sqs: aws_sdk_sqs::Client, config: RelayConfig) -> Self {
        Self { events: Publisher::Classic(events), sqs, config }
    }

    /// A relay that publishes to the Custom Event Bus whose ARN is
    /// [`RelayConfig::event_bus_name`] with `events` (feature `custom-bus`; module [`bus`]:
    /// 100 entries a call, each aggregate an event group, the event id its deduplication id).
    ///
    /// # Errors
    /// [`CustomBusArnError`] when `event_bus_name` is not an `event-busv2` ARN.
    #[cfg(feature = "custom-bus")]
    pub fn custom(events: aws_sdk_eventbridgev2::Client, sqs: aws_sdk_sqs::Client, config: RelayConfig) -> Result<Self, CustomBusArnError> {
        bus::check_custom_bus_arn(&config.event_bus_name)?;
        Ok(Self { events: Publisher::Custom(events), sqs, config })
    }

    /// The bus this relay publishes to.
    pub fn bus_type(&self) -> BusType {
        match self.events {
            Publisher::Classic(_) => BusType::Classic,
            #[cfg(feature = "custom-bus")]
            Publisher::Custom(_) => BusType::Custom,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Relays one stream batch; `deadline` is when the invocation must have answered.
    ///
    /// # Errors
    /// [`RelayError`] only when a failed record has no sequence number (whole batch retried).
    pub async fn relay(&self, batch: &DynamoDbEvent, deadline: Instant) -> Result<RelayOutcome, RelayError> {
        self.relay_batch(StreamBatch::from_event(batch), deadline).await
    }

    /// [`Relay::relay`] for a batch decoded as [`StreamBatch`] (what the relay function does
    /// with Lambda's payload: each record decoded once, its text kept for the dead-letter copy).
    ///
    /// # Errors
    /// [`RelayError`] only when a failed record has no sequence number (whole batch retried).
    pub async fn relay_batch(&self, batch: StreamBatch, deadline: Instant) -> Result<RelayOutcome, RelayError> {
        let started = Instant::now();
        let mut records = batch.records;
        let mut report = RelayReport { records: records.len(), ..Default::default() };

        let mut publish: Vec<Pending> = Vec::new();
        let mut poison: Vec<Poison> = Vec::new();
        for (index, record) in records.iter_mut().enumerate() {
            match self.classify(record) {
                Classified::Skip(reason) => *report.skipped.entry(reason).or_default() += 1,
                Classified::Poison { event_id, error_code, reason } => poison.push(Poison { index, event_id, error_code, reason }),
                Classified::Publish { item, event } => publish.push(Pending { index, item, event }),
            }
        }
        report.events = publish.len();

        // Earliest failed record so far: nothing at or after it is attempted any more.
        let mut checkpoint = usize::MAX;
        // Poison records first, in batch order: a failed dead-letter write keeps the records
        // after it from being published only to be published again on re-delivery.
        for p in poison {
            if p.index >= checkpoint {
                break;
            }
            if self.dead_letter_logged(&records[p.index], p.event_id, &p.error_code, &p.reason).await {
                report.dead_lettered += 1;
            } else {
                report.failed += 1;
                checkpoint = checkpoint.min(p.index);
            }
        }
        publish.retain(|p| p.index < checkpoint);
        self.publish(&records, publish, deadline, &mut report, &mut checkpoint).await;

        // Not attempted because they lay after the checkpoint.
        report.deferred = report.records - report.skipped_total() - report.published - report.dead_lettered - report.failed;
        report.duration_ms = started.elapsed().as_millis() as u64;

        let mut response = DynamoDbEventResponse::default();
        let mut checkpoint_sequence_number = None;
        if checkpoint != usize::MAX {
            let Some(sequence_number) = records[checkpoint].sequence_number.clone() else {
                return Err(RelayError::NoSequenceNumber { index: checkpoint });
            };
            checkpoint_sequence_number = Some(sequence_number.clone());
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence_number);
            response.batch_item_failures.push(failure);
        }
        report.emit_metrics();
        report.log_summary(checkpoint_sequence_number.as_deref());
        Ok(RelayOutcome { response, report })
    }

    /// What a record is; an `INSERT`'s image is moved out of `record` (decoded once, never
    /// cloned).
    fn classify(&self, record: &mut StreamRecord) -> Classified {
        let fields = match &mut record.decoded {
            Ok(fields) => fields,
            Err(reason) => return Classified::Poison { event_id: None, error_code: "MalformedRecord".into(), reason: reason.to_string() },
        };
        if let Some(table) = &self.config.outbox_table {
            let ours = fields.event_source_arn.as_deref().is_some_and(|arn| stream::table_name(arn) == stream::table_name(table));
            if !ours {
                return Classified::Skip(SkipReason::ForeignStream);
            }
        }
        match fields.event_name.as_str() {
            "INSERT" => {}
            "MODIFY" => return Classified::Skip(SkipReason::Modify),
            "REMOVE" => {
                let ttl = fields.user_identity.as_ref().is_some_and(|u| u.type_ == "Service" && u.principal_id == "dynamodb.amazonaws.com");
                return Classified::Skip(if ttl { SkipReason::TtlRemove } else { SkipReason::Remove });
            }
            _ => return Classified::Skip(SkipReason::UnknownEventName),
        }
        let mut image: HashMap<String, serde_dynamo::AttributeValue> = fields.dynamodb.new_image.take().map(Into::into).unwrap_or_default();
        if !self.config.attribute_names.is_empty() {
            let names = &self.config.attribute_names;
            image = image.into_iter().map(|(k, v)| (names.get(&k).cloned().unwrap_or(k), v)).collect();
        }
        if image.is_empty() {
            return Classified::Poison {
                event_id: None,
                error_code: "MalformedOutboxItem".into(),
                reason: "INSERT record has no NewImage: the outbox table's stream must use StreamViewType NEW_IMAGE".into(),
            };
        }
        let event_id = match image.get("event_id") {
            None => return Classified::Skip(SkipReason::NotOutboxItem),
            Some(serde_dynamo::AttributeValue::S(id)) => Some(id.clone()),
            Some(_) => None,
        };
        let poison = |error_code: &str, reason: String| Classified::Poison { event_id: event_id.clone(), error_code: error_code.into(), reason };
        let item = match OutboxItem::from_item(image.into()) {
            Ok(item) => item,
            Err(e) => return poison("MalformedOutboxItem", e.to_string()),
        };
        let event = match item.to_bus_event() {
            Ok(event) => event,
            Err(e) => return poison("MalformedOutboxItem", e.to_string()),
        };
        if let Some((code, reason)) = self.events.refuses(&item) {
            return poison(code, reason);
        }
        let size = self.events.entry_size(&item, &event);
        if size > self.config.max_request_bytes {
            return poison(
                "EventTooLarge",
                format!("event is {size} bytes as a PutEvents entry; the limit is {} bytes", self.config.max_request_bytes),
            );
        }
        Classified::Publish { item: Box::new(item), event }
    }

    /// Publishes `pending` (batch order): plans the calls ([`plan_calls`]), then runs them, at
    /// most [`RelayConfig::max_calls_in_flight`] at a time, a call only once every earlier call
    /// that shares an aggregate with it has settled without a failure. Failures move
    /// `checkpoint` back to the earliest failed record; a call whose every record lies at or
    /// after the checkpoint is not sent (it would only be sent again on re-delivery). After the
    /// invocation's first call, no call starts without its time budget
    /// ([`RelayConfig::call_budget`]); one that cannot moves the checkpoint to its earliest record.
    async fn publish(&self, records: &[StreamRecord], pending: Vec<Pending>, deadline: Instant, report: &mut RelayReport, checkpoint: &mut usize) {
        let plan = {
            let events: Vec<((&str, &str), usize)> = pending
                .iter()
                .map(|p| ((p.item.aggregate_type.as_str(), p.item.aggregate_id.as_str()), self.events.entry_size(&p.item, &p.event)))
                .collect();
            plan_calls(&events, self.events.max_entries(), self.config.max_request_bytes)
        };
        let mut slots: Vec<Option<Pending>> = pending.into_iter().map(Some).collect();
        let mut calls: Vec<Vec<Pending>> = Vec::with_capacity(plan.len());
        let mut first_index: Vec<usize> = Vec::with_capacity(plan.len());
        for call in &plan {
            // plan_calls puts every position in exactly one call, so each slot is taken once.
            let works: Vec<Pending> = call.events.iter().filter_map(|&p| slots[p].take()).collect();
            first_index.push(works.iter().map(|w| w.index).min().unwrap_or(usize::MAX));
            calls.push(works);
        }
        let mut state = vec![CallState::Waiting; plan.len()];
        let warnings = EntryWarnings::default();
        let max_in_flight = self.config.max_calls_in_flight.max(1);
        let mut in_flight = FuturesUnordered::new();
        let mut started_one = false;
        loop {
            for j in 0..plan.len() {
                if state[j] != CallState::Waiting {
                    continue;
                }
                let after = &plan[j].after;
                if after.iter().any(|&i| matches!(state[i], CallState::Failed | CallState::NotSent)) || first_index[j] >= *checkpoint {
                    state[j] = CallState::NotSent;
                    continue;
                }
                if after.iter().any(|&i| state[i] != CallState::Settled) || in_flight.len() >= max_in_flight {
                    continue;
                }
                // The first call always starts (so a function timeout shorter than the budget
                // still makes progress); later ones only with their whole budget left.
                if started_one && !self.time_for_a_call(deadline, Duration::ZERO) {
                    state[j] = CallState::NotSent;
                    *checkpoint = (*checkpoint).min(first_index[j]);
                    if !report.out_of_time {
                        tracing::warn!(
                            checkpoint = *checkpoint,
                            "too little time left for another PutEvents call; reporting the rest for re-delivery"
                        );
                    }
                    report.out_of_time = true;
                    continue;
                }
                started_one = true;
                state[j] = CallState::InFlight;
                in_flight.push(self.settle_call(records, j, std::mem::take(&mut calls[j]), deadline, &warnings));
                report.max_calls_in_flight = report.max_calls_in_flight.max(in_flight.len());
            }
            let Some(result) = in_flight.next().await else { break };
            state[result.call] = if result.failed.is_empty() { CallState::Settled } else { CallState::Failed };
            report.put_events_calls += result.put_events_calls;
            report.retried += result.retried;
            report.dead_lettered += result.dead_lettered;
            report.deduplicated += result.deduplicated;
            report.failed += result.failed.len();
            if let Some(&earliest) = result.failed.iter().min() {
                *checkpoint = (*checkpoint).min(earliest);
            }
            for p in result.published {
                report.published += 1;
                if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&p.item.occurred_at) {
                    let lag = (Utc::now() - t.with_timezone(&Utc)).num_milliseconds();
                    report.max_lag_ms = report.max_lag_ms.max(lag);
                }
                report.published_event_ids.push(p.item.event_id);
            }
        }
        warnings.finish();
    }

    /// Settles one planned call: sends it with retries, dead-letters the entries `PutEvents`
    /// rejected for good. Chunk entries after a failed one that EventBridge accepted count as
    /// published (they lie after the checkpoint and are published again on re-delivery).
    async fn settle_call(
        &self,
        records: &[StreamRecord],
        call: usize,
        works: Vec<Pending>,
        deadline: Instant,
        warnings: &EntryWarnings,
    ) -> CallResult {
        let mut result = CallResult { call, ..Default::default() };
        for (work, outcome) in self.put_with_retries(works, deadline, &mut result, warnings).await {
            match outcome {
                Ok(accepted) => {
                    result.deduplicated += usize::from(accepted == Accepted::Deduplicated);
                    result.published.push(work);
                }
                Err(failure) if !failure.is_retryable() => {
                    let reason = format!("PutEvents rejected the entry: {}", failure.message);
                    let event_id = Some(work.item.event_id.clone());
                    if self.dead_letter_logged(&records[work.index], event_id, &failure.code, &reason).await {
                        result.dead_lettered += 1;
                    } else {
                        result.failed.push(work.index);
                    }
                }
                Err(_) => result.failed.push(work.index),
            }
        }
        result
    }

    /// Sends `works` with `PutEvents`, resending transiently failed entries alone with backoff
    /// until they succeed, `max_attempts` is reached, or the time budget runs out. Each failed
    /// entry is logged at WARN with what happens next (`warnings`, bounded per batch).
    async fn put_with_retries(
        &self,
        works: Vec<Pending>,
        deadline: Instant,
        result: &mut CallResult,
        warnings: &EntryWarnings,
    ) -> Vec<(Pending, Result<Accepted, EntryFailure>)> {
        let mut done = Vec::with_capacity(works.len());
        let mut pending = works;
        let mut attempt = 0u32;
        while !pending.is_empty() {
            attempt += 1;
            let outcomes = self.put_events(&pending).await;
            result.put_events_calls += 1;
            // One DEBUG line per entry and attempt, inside the event's span (`event_id`,
            // `event_type`, `aggregate_type`, `aggregate_id`, `correlation_id`, `attempt`:
            // envelope::event_span); the span is not even built when DEBUG is off.
            let per_event_lines = tracing::enabled!(tracing::Level::DEBUG);
            let mut retry = Vec::new();
            for (work, outcome) in pending.into_iter().zip(outcomes) {
                if per_event_lines {
                    let span = work.item.span();
                    span.record("attempt", attempt);
                    span.in_scope(|| match &outcome {
                        Ok(Accepted::Published) => tracing::debug!("event published"),
                        Ok(Accepted::Deduplicated) => tracing::debug!("event deduplicated by the bus (already published)"),
                        Err(failure) => tracing::debug!(error_code = %failure.code, error_message = %failure.message, "PutEvents entry failed"),
                    });
                }
                match outcome {
                    Ok(accepted) => done.push((work, Ok(accepted))),
                    Err(failure) if failure.is_retryable() => retry.push((work, failure)),
                    Err(failure) => {
                        warnings.failed(&work.item, &failure, attempt, Next::DeadLetter);
                        done.push((work, Err(failure)));
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            let backoff = self.backoff(attempt);
            let out_of_time = !self.time_for_a_call(deadline, backoff);
            if attempt >= self.config.max_attempts || out_of_time {
                for (work, failure) in retry {
                    warnings.failed(&work.item, &failure, attempt, Next::FailRecord);
                    done.push((work, Err(failure)));
                }
                break;
            }
            for (work, failure) in &retry {
                warnings.failed(&work.item, failure, attempt, Next::Retry);
            }
            result.retried += retry.len();
            tokio::time::sleep(backoff).await;
            pending = retry.into_iter().map(|(w, _)| w).collect();
        }
        done
    }

    /// One `PutEvents` call on the relay's bus ([`bus`]); the result of each entry, by position.
    async fn put_events(&self, works: &[Pending]) -> Vec<Result<Accepted, EntryFailure>> {
        let events: Vec<(&OutboxItem, &BusEvent)> = works.iter().map(|w| (&*w.item, &w.event)).collect();
        self.events.put(&self.config.event_bus_name, &events).await
    }

    /// Whether a `PutEvents` call starting after `wait` can finish, with its whole
    /// [`RelayConfig::call_budget`], before `deadline − safety_margin`.
    fn time_for_a_call(&self, deadline: Instant, wait: Duration) -> bool {
        Instant::now() + wait + self.config.call_budget + self.config.safety_margin < deadline
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self.config.base_backoff.saturating_mul(2u32.saturating_pow(attempt)).min(self.config.max_backoff);
        let millis = ceiling.as_millis() as u64;
        Duration::from_millis(if millis == 0 { 0 } else { rand::rng().random_range(0..=millis) })
    }

    /// Dead-letters a poison record and logs it (ERROR: a person should look at it). False
    /// when the dead-letter queue could not be written either: the record must then fail.
    async fn dead_letter_logged(&self, record: &StreamRecord, event_id: Option<String>, error_code: &str, reason: &str) -> bool {
        match self.dead_letter(record, event_id.clone(), error_code, reason).await {
            Ok(()) => {
                tracing::error!(event_id = event_id.as_deref().unwrap_or(""), error_code, reason, "poison outbox record dead-lettered");
                true
            }
            Err(e) => {
                tracing::error!(event_id = event_id.as_deref().unwrap_or(""), error_code, reason, error = %e, "poison outbox record could not be dead-lettered; will be retried");
                false
            }
        }
    }

    async fn dead_letter(&self, record: &StreamRecord, event_id: Option<String>, error_code: &str, reason: &str) -> Result<(), DeadLetterFailed> {
        // The record exactly as delivered: never decoded and written again.
        let body = RelayFailureRecord {
            kind: RELAY_FAILURE_KIND.into(),
            reason: reason.into(),
            error_code: error_code.into(),
            event_id,
            sequence_number: record.sequence_number.clone(),
            event_source_arn: record.event_source_arn().map(str::to_owned),
            failed_at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            record: &*record.raw,
        };
        let body = serde_json::to_string(&body)?;
        crate::dead_letter::send(&self.sqs, &self.config.dead_letter_queue_url, body, &[("error_code", error_code), ("reason", reason)]).await?;
        Ok(())
    }
}

/// Why a poison record could not be dead-lettered (the record then fails and is retried).
#[derive(Debug, thiserror::Error)]
enum DeadLetterFailed {
    /// The failure record does not serialise (a record holds only JSON text and strings: not seen).
    #[error("the relay failure record does not serialise: {0}")]
    Serialize(#[from] serde_json::Error),
    /// `SendMessage` to the relay's dead-letter queue failed.
    #[error(transparent)]
    Send(#[from] crate::AwsError),
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn the_report_is_emitted_as_metrics() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let mut report = RelayReport {
            records: 7,
            published: 3,
            retried: 2,
            dead_lettered: 1,
            failed: 1,
            put_events_calls: 2,
            max_lag_ms: 40,
            ..Default::default()
        };
        report.skipped.insert(SkipReason::TtlRemove, 2);
        metrics::with_local_recorder(&recorder, || report.emit_metrics());
        let values: HashMap<String, DebugValue> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let labels: Vec<String> = key.key().labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
                (format!("{}{:?}", key.key().name(), labels), value)
            })
            .collect();
        let counter = |name: &str| match values.get(name) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("{name}: {other:?} in {:?}", values.keys().collect::<Vec<_>>()),
        };
        assert_eq!(counter("RecordsSeen[]"), 7);
        assert_eq!(counter("RecordsSkipped[\"reason=ttl_remove\"]"), 2);
        assert_eq!(counter("EventsPublished[]"), 3);
        assert_eq!(counter("EntriesRetried[]"), 2);
        assert_eq!(counter("RecordsDeadLettered[]"), 1);
        assert_eq!(counter("RecordsFailed[]"), 1);
        assert_eq!(counter("PutEventsCalls[]"), 2);
        assert!(matches!(values.get("LagMilliseconds[]"), Some(DebugValue::Histogram(h)) if h.len() == 1));
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    fn plan(keys: &str, max_entries: usize) -> Vec<(String, Vec<usize>)> {
        let events: Vec<(char, usize)> = keys.chars().map(|k| (k, 1)).collect();
        plan_calls(&events, max_entries, usize::MAX).into_iter().map(|c| (c.events.iter().map(|&p| events[p].0).collect(), c.after)).collect()
    }

    #[test]
    fn distinct_aggregates_fill_calls_in_batch_order() {
        assert_eq!(plan("abcde", 2), [("ab".into(), vec![]), ("cd".into(), vec![]), ("e".into(), vec![])]);
        assert!(plan("", 10).is_empty());
    }

    #[test]
    fn an_aggregate_that_fits_in_a_call_stays_in_one_call() {
        // Interleaved 3 × 3 with 3 entries per call: one call per aggregate, none waiting.
        assert_eq!(plan("abcabcabc", 3), [("aaa".into(), vec![]), ("bbb".into(), vec![]), ("ccc".into(), vec![])]);
        // First fit: `c` joins the first call with room for both of its events.
        assert_eq!(plan("aabbbcc", 4), [("aacc".into(), vec![]), ("bbb".into(), vec![])]);
    }

    #[test]
    fn a_hot_aggregate_gets_a_chain_of_its_own() {
        assert_eq!(
            plan("hahhbhh", 2),
            [("hh".into(), vec![]), ("hh".into(), vec![0]), ("h".into(), vec![1]), ("ab".into(), vec![])],
            "the chain's last call is not shared, so `a` and `b` do not wait for `h`"
        );
    }

    #[test]
    fn the_byte_limit_cuts_calls_too() {
        let events = [('a', 6), ('b', 5), ('a', 6), ('c', 4)];
        let calls = plan_calls(&events, 10, 12);
        let shape: Vec<(Vec<usize>, Vec<usize>)> = calls.into_iter().map(|c| (c.events, c.after)).collect();
        assert_eq!(shape, [(vec![0, 2], vec![]), (vec![1, 3], vec![])]);
        // An aggregate over the byte limit is a chain.
        let events = [('a', 6), ('a', 6), ('a', 6)];
        let shape: Vec<(Vec<usize>, Vec<usize>)> = plan_calls(&events, 10, 12).into_iter().map(|c| (c.events, c.after)).collect();
        assert_eq!(shape, [(vec![0, 1], vec![]), (vec![2], vec![0])]);
    }
}
