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
//! 2. **Publish in full calls, in batch order.** The batch's events are cut, in batch order,
//!    into `PutEvents` calls of at most [`MAX_ENTRIES_PER_CALL`] entries and at most
//!    `max_request_bytes` (counted as [`BusEvent::entry_size`] does), whatever the mix of
//!    aggregates: 100 records of one aggregate take 10 calls. Calls are made one after the
//!    other; a call is settled (retries included) before the next one is sent. An aggregate's
//!    records are in sequence order within its shard (the stream keeps each item's order, and the
//!    event source mapping runs one batch per shard at a time with `ParallelizationFactor` 1),
//!    so its events are submitted in sequence order: within one call by position, across calls
//!    by time.
//! 3. **Partial failures.** `PutEvents` answers HTTP 200 even when entries fail:
//!    `FailedEntryCount` > 0 and, *by position*, an `ErrorCode` on each failed response entry.
//!    Failed entries with a transient code (`ThrottlingException`, `InternalFailure`, any code
//!    not known to be permanent) are resent alone, with exponential backoff and full jitter,
//!    while the invocation's time budget lasts. Entries failing with a permanent code
//!    (`MalformedDetail`, `InvalidArgument`) are poison. Source: the `PutEvents` API reference,
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
//! the relay sends nothing that lies after the earliest failure known so far (it would only be
//! duplicated): for an aggregate, nothing after its first failed event is sent in a later call
//! of the invocation. Loss is impossible: nothing at or after the checkpoint is acknowledged.
//! Entries that were in the *same* call as the failed one and were accepted (other aggregates'
//! events, or later events of the same aggregate) count as published but lie after the
//! checkpoint, so they are published again on re-delivery: duplicates, absorbed by the
//! consumers' inbox.
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

#[cfg(feature = "lambda")]
pub mod lambda;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::{Event as DynamoDbEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::Utc;
use rand::Rng;
use serde::Serialize;

use crate::dead_letter::{RelayFailureRecord, RELAY_FAILURE_KIND};
use crate::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES;
use crate::envelope::{BusEvent, OutboxItem};

/// Most entries in one `PutEvents` call (AWS limit).
pub const MAX_ENTRIES_PER_CALL: usize = 10;

/// Entry error codes that no retry can fix. Any other code is treated as transient.
pub const PERMANENT_ERROR_CODES: [&str; 2] = ["MalformedDetail", "InvalidArgument"];

/// Relay settings. [`RelayConfig::new`] gives the documented defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// Name or ARN of the target event bus.
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
    /// ([`crate::config::SdkTimeouts`], default 15 s). After the invocation's first call, no
    /// call (a new wave's or a resend) starts with less than `call_budget + safety_margin` left
    /// before the deadline; the records not sent then are reported from the earliest one on as
    /// `batchItemFailures`, so nothing after them is acknowledged and Lambda delivers them again.
    pub call_budget: Duration,
    /// Attribute names of the outbox table where they differ from the contract's
    /// ([`crate::envelope`]): table name → contract name, e.g. `"EventId"` → `"event_id"`.
    /// Empty (the default) when the table uses the contract's names. See
    /// [`RelayConfig::rename_attributes`].
    pub attribute_names: HashMap<String, String>,
}

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
        }
    }
}

/// What one invocation did, for logs and metrics.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RelayReport {
    /// Records in the batch.
    pub records: usize,
    /// Records that were not events, by reason.
    pub skipped: HashMap<SkipReason, usize>,
    /// Events accepted by EventBridge.
    pub published: usize,
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
    /// Largest "now − `occurred_at`" among published events, milliseconds.
    pub max_lag_ms: i64,
    /// Event ids accepted by EventBridge, in publication order.
    #[serde(skip)]
    pub published_event_ids: Vec<String>,
}

impl RelayReport {
    /// Total skipped records.
    pub fn skipped_total(&self) -> usize {
        self.skipped.values().sum()
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
        metrics::counter!("RecordsSeen").increment(self.records as u64);
        for (reason, n) in &self.skipped {
            metrics::counter!("RecordsSkipped", "reason" => reason.as_str()).increment(*n as u64);
        }
        metrics::counter!("EventsPublished").increment(self.published as u64);
        metrics::counter!("EntriesRetried").increment(self.retried as u64);
        metrics::counter!("RecordsDeadLettered").increment(self.dead_lettered as u64);
        metrics::counter!("RecordsFailed").increment(self.failed as u64);
        metrics::counter!("RecordsDeferred").increment(self.deferred as u64);
        metrics::counter!("PutEventsCalls").increment(self.put_events_calls as u64);
        if self.published > 0 {
            metrics::histogram!("LagMilliseconds").record(self.max_lag_ms as f64);
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
    /// Whether a resend can succeed: false only for [`PERMANENT_ERROR_CODES`] on an entry.
    pub retryable: bool,
}

impl EntryFailure {
    /// The failure of a response entry with `ErrorCode` = `code`.
    pub fn entry(code: &str, message: &str) -> Self {
        Self { code: code.into(), message: message.into(), retryable: !PERMANENT_ERROR_CODES.contains(&code) }
    }

    /// Whether a resend can succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

/// A record that must be either published or dead-lettered.
#[derive(Debug)]
struct Work {
    index: usize,
    action: Action,
}

#[derive(Debug)]
enum Action {
    Publish { item: Box<OutboxItem>, event: BusEvent },
    DeadLetter { event_id: Option<String>, error_code: String, reason: String },
}

enum Classified {
    Skip(SkipReason),
    Work(Action),
}

/// Publishes outbox records to EventBridge (see the module docs).
#[derive(Debug, Clone)]
pub struct Relay {
    events: aws_sdk_eventbridge::Client,
    sqs: aws_sdk_sqs::Client,
    config: RelayConfig,
}

impl Relay {
    /// A relay that publishes with `events` and dead-letters with `sqs`.
    pub fn new(events: aws_sdk_eventbridge::Client, sqs: aws_sdk_sqs::Client, config: RelayConfig) -> Self {
        Self { events, sqs, config }
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
        let records = &batch.records;
        let mut report = RelayReport { records: records.len(), ..Default::default() };

        let mut works: Vec<Work> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match self.classify(record) {
                Classified::Skip(reason) => *report.skipped.entry(reason).or_default() += 1,
                Classified::Work(action) => works.push(Work { index, action }),
            }
        }

        // Earliest failed record so far: nothing at or after it is attempted any more.
        let mut checkpoint = usize::MAX;
        // Poison records first, in batch order: a failed dead-letter write keeps the records
        // after it from being published only to be published again on re-delivery.
        let (publish, poison): (Vec<Work>, Vec<Work>) = works.into_iter().partition(|w| matches!(w.action, Action::Publish { .. }));
        for work in poison {
            if work.index >= checkpoint {
                break;
            }
            if let Action::DeadLetter { event_id, error_code, reason } = &work.action {
                self.dead_letter_or_fail(&records[work.index], work.index, event_id.clone(), error_code, reason, &mut report, &mut checkpoint).await;
            }
        }
        // Then full calls in batch order (an aggregate's records are in sequence order in its
        // shard), each settled before the next: once the checkpoint is set, every record still
        // to come lies after it.
        let mut chunk: Vec<Work> = Vec::new();
        let mut chunk_bytes = 0;
        for work in publish {
            if work.index >= checkpoint {
                break;
            }
            let size = match &work.action {
                Action::Publish { event, .. } => event.entry_size(),
                Action::DeadLetter { .. } => 0,
            };
            if chunk.len() >= MAX_ENTRIES_PER_CALL || chunk_bytes + size > self.config.max_request_bytes {
                self.publish(records, std::mem::take(&mut chunk), deadline, &mut report, &mut checkpoint).await;
                chunk_bytes = 0;
                if work.index >= checkpoint {
                    break;
                }
            }
            chunk_bytes += size;
            chunk.push(work);
        }
        self.publish(records, chunk, deadline, &mut report, &mut checkpoint).await;

        // Not attempted because they lay after the checkpoint.
        report.deferred = report.records - report.skipped_total() - report.published - report.dead_lettered - report.failed;

        let mut response = DynamoDbEventResponse::default();
        if checkpoint != usize::MAX {
            let sequence_number = records[checkpoint].change.sequence_number.clone().filter(|s| !s.is_empty());
            let Some(sequence_number) = sequence_number else {
                return Err(RelayError::NoSequenceNumber { index: checkpoint });
            };
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence_number);
            response.batch_item_failures.push(failure);
        }
        report.emit_metrics();
        tracing::info!(
            records = report.records,
            skipped = report.skipped_total(),
            published = report.published,
            retried = report.retried,
            dead_lettered = report.dead_lettered,
            failed = report.failed,
            deferred = report.deferred,
            out_of_time = report.out_of_time,
            put_events_calls = report.put_events_calls,
            max_lag_ms = report.max_lag_ms,
            "relay batch done"
        );
        Ok(RelayOutcome { response, report })
    }

    fn classify(&self, record: &EventRecord) -> Classified {
        match record.event_name.as_str() {
            "INSERT" => {}
            "MODIFY" => return Classified::Skip(SkipReason::Modify),
            "REMOVE" => {
                let ttl = record.user_identity.as_ref().is_some_and(|u| u.type_ == "Service" && u.principal_id == "dynamodb.amazonaws.com");
                return Classified::Skip(if ttl { SkipReason::TtlRemove } else { SkipReason::Remove });
            }
            _ => return Classified::Skip(SkipReason::UnknownEventName),
        }
        let renamed;
        let image = if self.config.attribute_names.is_empty() {
            &record.change.new_image
        } else {
            let names = &self.config.attribute_names;
            renamed = record
                .change
                .new_image
                .iter()
                .map(|(k, v)| (names.get(k).cloned().unwrap_or_else(|| k.clone()), v.clone()))
                .collect::<std::collections::HashMap<_, _>>()
                .into();
            &renamed
        };
        if image.is_empty() {
            return Classified::Work(Action::DeadLetter {
                event_id: None,
                error_code: "MalformedOutboxItem".into(),
                reason: "INSERT record has no NewImage: the outbox table's stream must use StreamViewType NEW_IMAGE".into(),
            });
        }
        let event_id = match image.get("event_id") {
            None => return Classified::Skip(SkipReason::NotOutboxItem),
            Some(serde_dynamo::AttributeValue::S(id)) => Some(id.clone()),
            Some(_) => None,
        };
        let poison = |error_code: &str, reason: String| {
            Classified::Work(Action::DeadLetter { event_id: event_id.clone(), error_code: error_code.into(), reason })
        };
        let item = match OutboxItem::from_item(image.clone()) {
            Ok(item) => item,
            Err(e) => return poison("MalformedOutboxItem", e.to_string()),
        };
        let event = match item.to_bus_event() {
            Ok(event) => event,
            Err(e) => return poison("MalformedOutboxItem", e.to_string()),
        };
        let size = event.entry_size();
        if size > self.config.max_request_bytes {
            return poison(
                "EventTooLarge",
                format!("event is {size} bytes as a PutEvents entry; the limit is {} bytes", self.config.max_request_bytes),
            );
        }
        Classified::Work(Action::Publish { item: Box::new(item), event })
    }

    /// Settles one `PutEvents` call's worth of records: publishes `chunk` (entries in batch
    /// order, so an aggregate's events are in sequence order within the call) with retries.
    /// Failures move `checkpoint` back to the earliest failed record; chunk entries after it
    /// that EventBridge accepted count as published but are not acknowledged (re-delivered).
    async fn publish(&self, records: &[EventRecord], chunk: Vec<Work>, deadline: Instant, report: &mut RelayReport, checkpoint: &mut usize) {
        // The first call always starts (so a function timeout shorter than the budget still
        // makes progress); later ones only with their whole budget left.
        if !chunk.is_empty() && report.put_events_calls > 0 && !self.time_for_a_call(deadline, Duration::ZERO) {
            // Out of time: the chunk's first record becomes the checkpoint; it and everything
            // after it are delivered again.
            let earliest = chunk.iter().map(|w| w.index).min().unwrap_or(usize::MAX);
            *checkpoint = (*checkpoint).min(earliest);
            report.out_of_time = true;
            tracing::warn!(checkpoint = *checkpoint, "too little time left for another PutEvents call; reporting the rest for re-delivery");
            return;
        }
        if !chunk.is_empty() {
            for (work, result) in self.put_with_retries(chunk, deadline, report).await {
                let Action::Publish { item, .. } = &work.action else { continue };
                match result {
                    Ok(()) => {
                        report.published += 1;
                        report.published_event_ids.push(item.event_id.clone());
                        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&item.occurred_at) {
                            let lag = (Utc::now() - t.with_timezone(&Utc)).num_milliseconds();
                            report.max_lag_ms = report.max_lag_ms.max(lag);
                        }
                    }
                    Err(failure) if !failure.is_retryable() => {
                        let reason = format!("PutEvents rejected the entry: {}", failure.message);
                        let event_id = Some(item.event_id.clone());
                        self.dead_letter_or_fail(&records[work.index], work.index, event_id, &failure.code, &reason, report, checkpoint).await;
                    }
                    Err(_) => {
                        report.failed += 1;
                        *checkpoint = (*checkpoint).min(work.index);
                    }
                }
            }
        }
    }

    /// Sends `works` with `PutEvents`, resending transiently failed entries alone with backoff
    /// until they succeed, `max_attempts` is reached, or the time budget runs out.
    async fn put_with_retries(&self, works: Vec<Work>, deadline: Instant, report: &mut RelayReport) -> Vec<(Work, Result<(), EntryFailure>)> {
        let mut done = Vec::with_capacity(works.len());
        let mut pending = works;
        let mut attempt = 0u32;
        while !pending.is_empty() {
            attempt += 1;
            let outcomes = self.put_events(&pending).await;
            report.put_events_calls += 1;
            let mut retry = Vec::new();
            for (work, outcome) in pending.into_iter().zip(outcomes) {
                // One line per event, inside its span (`event_id`, `event_type`, `aggregate_type`,
                // `aggregate_id`, `correlation_id`, `attempt`: envelope::event_span).
                let span = match &work.action {
                    Action::Publish { item, .. } => Some(item.span()),
                    _ => None,
                };
                if let Some(span) = &span {
                    span.record("attempt", attempt);
                }
                match outcome {
                    Ok(()) => {
                        if let Some(span) = &span {
                            span.in_scope(|| tracing::info!("event published"));
                        }
                        done.push((work, Ok(())))
                    }
                    Err(failure) => {
                        if let Some(span) = &span {
                            span.in_scope(|| tracing::warn!(error_code = %failure.code, error_message = %failure.message, "PutEvents entry failed"));
                        }
                        if failure.is_retryable() {
                            retry.push((work, failure));
                        } else {
                            done.push((work, Err(failure)));
                        }
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            let backoff = self.backoff(attempt);
            let out_of_time = !self.time_for_a_call(deadline, backoff);
            if attempt >= self.config.max_attempts || out_of_time {
                done.extend(retry.into_iter().map(|(w, f)| (w, Err(f))));
                break;
            }
            report.retried += retry.len();
            tokio::time::sleep(backoff).await;
            pending = retry.into_iter().map(|(w, _)| w).collect();
        }
        done
    }

    /// One `PutEvents` call; the result of each entry, by position.
    async fn put_events(&self, works: &[Work]) -> Vec<Result<(), EntryFailure>> {
        let entries = works
            .iter()
            .filter_map(|w| match &w.action {
                Action::Publish { event, .. } => Some(event.to_entry(&self.config.event_bus_name)),
                Action::DeadLetter { .. } => None,
            })
            .collect::<Vec<_>>();
        let n = entries.len();
        match self.events.put_events().set_entries(Some(entries)).send().await {
            Ok(output) => {
                let results = output.entries();
                if results.len() != n {
                    let failure = EntryFailure::entry("InternalFailure", &format!("PutEvents answered {} entries for {n}", results.len()));
                    return vec![Err(failure); n];
                }
                results
                    .iter()
                    .map(|r| match (r.error_code(), r.event_id()) {
                        (None, Some(_)) => Ok(()),
                        (code, _) => Err(EntryFailure::entry(code.unwrap_or("InternalFailure"), r.error_message().unwrap_or("entry has no EventId"))),
                    })
                    .collect()
            }
            Err(err) => {
                // The whole request failed after the SDK's own retries. Its entries are never
                // poison: a transient failure ([`crate::aws_error`]) is resent; a permanent one
                // (access denied, a missing bus) is a configuration error that would otherwise
                // dead-letter every event, so the records fail instead and the event source
                // mapping retries them until the configuration is fixed.
                let aws = crate::aws_error::AwsError::from_sdk("PutEvents", &err);
                if !aws.is_retryable() {
                    tracing::error!(error = %aws, "PutEvents failed permanently; failing the records (a configuration error?)");
                }
                let failure =
                    EntryFailure { code: aws.code.clone().unwrap_or_else(|| "RequestFailed".into()), message: aws.to_string(), retryable: true };
                vec![Err(failure); n]
            }
        }
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

    #[allow(clippy::too_many_arguments)]
    async fn dead_letter_or_fail(
        &self,
        record: &EventRecord,
        index: usize,
        event_id: Option<String>,
        error_code: &str,
        reason: &str,
        report: &mut RelayReport,
        checkpoint: &mut usize,
    ) {
        match self.dead_letter(record, event_id.clone(), error_code, reason).await {
            Ok(()) => {
                report.dead_lettered += 1;
                tracing::error!(event_id = event_id.as_deref().unwrap_or(""), error_code, reason, "poison outbox record dead-lettered");
            }
            Err(e) => {
                report.failed += 1;
                *checkpoint = (*checkpoint).min(index);
                tracing::error!(event_id = event_id.as_deref().unwrap_or(""), error_code, reason, error = %e, "poison outbox record could not be dead-lettered; will be retried");
            }
        }
    }

    async fn dead_letter(&self, record: &EventRecord, event_id: Option<String>, error_code: &str, reason: &str) -> Result<(), String> {
        let body = RelayFailureRecord {
            kind: RELAY_FAILURE_KIND.into(),
            reason: reason.into(),
            error_code: error_code.into(),
            event_id,
            sequence_number: record.change.sequence_number.clone(),
            event_source_arn: record.event_source_arn.clone(),
            failed_at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            record: serde_json::to_value(record).map_err(|e| e.to_string())?,
        };
        let body = serde_json::to_string(&body).map_err(|e| e.to_string())?;
        crate::dead_letter::send(&self.sqs, &self.config.dead_letter_queue_url, body, &[("error_code", error_code), ("reason", reason)]).await
    }
}

#[cfg(feature = "lambda")]
impl From<RelayError> for lambda_runtime::Diagnostic {
    fn from(e: RelayError) -> Self {
        lambda_runtime::Diagnostic { error_type: "RelayError".into(), error_message: e.to_string() }
    }
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
