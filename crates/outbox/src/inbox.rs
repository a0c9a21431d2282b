//! The inbox: turns at-least-once delivery into exactly-once effects.
//!
//! EventBridge delivers at least once, and the relay may publish an event twice (each time with
//! a new envelope `id`). A consumer therefore records every event it applied in the inbox table,
//! keyed by *consumer name + `detail.metadata.id`* (so two consumers of one event never block each
//! other), and does so **in the same `TransactWriteItems` call as its business writes**:
//!
//! * the inbox row is put with `attribute_not_exists(pk) OR expires_at < :now` (a row whose TTL
//!   has passed counts as absent: DynamoDB deletes expired items lazily, within days);
//! * if the transaction commits, the event took effect exactly once;
//! * if the inbox condition fails, the event was applied before: a duplicate, no effect;
//! * if a business condition fails (e.g. not enough stock), that is a business outcome for the
//!   caller to handle, not an error; nothing was written, not even the inbox row;
//! * a crash before commit leaves nothing, so the retry applies the event normally.
//!
//! **Guarded mode** ([`Inbox::begin`], [`Inbox::complete`], [`Inbox::release`]) is for effects
//! outside DynamoDB (an HTTP call, an email), which no transaction can cover:
//!
//! | row | meaning | a delivery that finds it |
//! |---|---|---|
//! | absent, or `expires_at` passed | never claimed | claims it: `IN_PROGRESS` with a lease |
//! | `IN_PROGRESS`, lease live | another invocation is on it | [`InboxError::InProgress`] (retryable) |
//! | `IN_PROGRESS`, lease ended | its invocation died | takes it over, conditional on the old lease |
//! | `COMPLETED` | done | [`Claim::Completed`] with the stored result |
//!
//! The lease ends when the claiming invocation's time ends (the Lambda context's deadline), or
//! after a configured maximum when that is unknown — never "forever", so a crash between claim
//! and effect only delays the retry. Completing and releasing are conditioned on the lease
//! token, so an invocation whose lease was taken over cannot overwrite the new owner.
//!
//! **Ordering** (opt-in, [`Inbox::ordered`] or [`Inbox::ordered_by_types`]): the transaction
//! also moves a per-aggregate row (`<consumer>#aggregate#<type>#<id>`, attribute
//! `last_sequence`: the sequence of the last event of the aggregate this consumer applied or an
//! operator released) to the event's `sequence`, on the condition that it stands at the event's
//! *required predecessor* ([`required_predecessor`]):
//!
//! * [`Inbox::ordered`]: `sequence − 1` — every event of the aggregate must reach the consumer;
//! * [`Inbox::ordered_by_types`] (the event types the consumer handles): the latest earlier
//!   event of one of *those* types, from `detail.metadata.previous` (written by the producer,
//!   [`crate::Event::previous`]); events of types the consumer never receives are not waited
//!   for. An event without `previous` falls back to `sequence − 1`.
//!
//! The condition is `last_sequence` in `[required, sequence − 1]` (absent counts as 0). An
//! event at or below `last_sequence` is a duplicate; one whose predecessor is missing is
//! [`InboxError::SequenceGap`]. The [`Consumer`](crate::consumer::Consumer) does not fail such
//! an event: it **parks** it in this table and applies it when its predecessor is applied
//! ([`ParkedEvent`]: what is stored, why nothing is stranded). **A sequence that never comes**
//! (dead-lettered at the relay, lost to an expired retry) leaves its successor parked, found by
//! the consumer kit's scheduled parked check (which raises the sequence-gap alarm,
//! [`crate::consumer::ParkedCheck`]) through the table's sparse parked index ([`PARKED_INDEX`]),
//! and listed with its age by `outbox ordering parked`; an operator releases the aggregate with
//! [`Inbox::release_through`] (`outbox ordering release`, which also re-publishes what
//! was parked behind it). A store that does not park ([`InboxStore::parks`]) fails the
//! invocation instead, logging the release command and counting `SequenceGaps`.
//!
//! **Nothing parked, proved by the commit.** The ordering row also counts the aggregate's
//! parked rows ([`PARKED_COUNT`]: parking adds one in the transaction that puts the row, every
//! deletion of a counted row takes one off in its own), and an ordered event's transaction is
//! conditioned on that count being 0 (or the row absent). When it commits, nothing waits for the
//! event and no earlier copy of it is parked, so the consumer reads nothing after it: an ordered
//! event is ONE `TransactWriteItems`, like an unordered one ([`Inbox::apply_checking_parked`]).
//! When the count alone is not 0, the transaction is made again without it and the consumer
//! reads the parked rows, as before. Rows parked by a version before the count are not
//! counted: one the count passes by waits for the consumer kit's parked check, which applies a
//! parked event whose predecessor is already applied and removes its row
//! ([`crate::consumer::ParkedCheck`], every 5 minutes). Versions side by side (a deploy, a
//! rollback) stay safe: the older one never touches the count, so it can only leave it too high
//! (the aggregate's events then read, as before), and a park gives a new ordering row
//! `last_sequence` 0, which the older version's condition needs for the aggregate's first event.
//!
//! Ordering rows **never expire**: they carry no `expires_at` (an old row that had one loses it
//! on the next event), because an aggregate can emit its next event months later and a deleted
//! row would turn it into a permanent gap. One small row per (consumer, aggregate).
//!
//! Claim rows carry `expires_at` (epoch seconds, the table's TTL attribute), set to now + retention.
//! The retention must outlive every redelivery of the event — the dead-letter queues' retention
//! plus a redrive margin (`outbox_lambda::inbox_retention`, 16 days by default), or a message
//! redriven after its row expired is applied twice.
//! Source for the transaction semantics: the `TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::aws_error::{AwsError, AwsErrorKind};
use crate::envelope::EventMetadata;
use crate::transaction::{all_old, transact_write, TransactionError};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;

mod guarded;
mod memory;
mod parked;
mod payload_hash;
mod store;

pub use guarded::{Guarded, GuardedError};
pub use memory::{AppliedEvent, Injected, MemoryInbox};
pub use parked::{ParkedAround, ParkedEvent, ParkedList, PARKED_AT, PARKED_CONSUMER, PARKED_INDEX, PARKED_INDEX_ATTRIBUTES, PARKED_KIND};
pub use payload_hash::{PayloadHash, CANONICAL_PREFIX};
pub use store::InboxStore;

/// How one delivery ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum InboxOutcome {
    /// The inbox row and the business writes committed together: the event took effect.
    Applied,
    /// The event was applied before (same consumer, same event id): nothing was written.
    Duplicate,
    /// Business write `index` (0-based, among the caller's writes) had a false condition.
    /// Nothing was written, not even the inbox row.
    BusinessConditionFailed {
        /// Position among the caller's writes.
        index: usize,
        /// The stored item, when that write asked for it (`ReturnValuesOnConditionCheckFailure=ALL_OLD`).
        item: Option<crate::transaction::Item>,
    },
}

/// What an applied event did, recorded on its inbox row (attributes `outcome` and `reason`) so
/// that `trace` can say it: the handler's outcome (e.g. `reserved`), or `nothing_to_do` with the
/// reason a fallback gave (e.g. "settled by another event").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RecordedOutcome {
    /// Short machine-readable outcome (`reserved`, `nothing_to_do`, …).
    pub outcome: String,
    /// Why, in words (for `nothing_to_do`).
    pub reason: Option<String>,
    /// The delivery settles a parked event ([`ParkedEvent`]) whose row waits for this sequence
    /// (the row's key, [`ParkedEvent::waits_for`] as read): an ordered store that honours it
    /// ([`InboxStore::unparks_in_transaction`]) deletes the row in the same transaction as the
    /// inbox claim, so a crash right after the commit cannot leave the row behind, and the
    /// consumer makes no separate `DeleteItem` for it ([`RecordedOutcome::unparking`]).
    pub unparks: Option<u64>,
}

impl RecordedOutcome {
    /// The outcome `outcome`, without a reason.
    pub fn new(outcome: impl Into<String>) -> Self {
        Self { outcome: outcome.into(), reason: None, unparks: None }
    }

    /// `nothing_to_do`, because of `reason`.
    pub fn nothing_to_do(reason: impl Into<String>) -> Self {
        Self { outcome: NOTHING_TO_DO.into(), reason: Some(reason.into()), unparks: None }
    }

    /// This outcome, committed together with the deletion of the event's parked row, which waits
    /// for sequence `unparks` (the consumer's drain of parked successors sets it; `None`: no row).
    pub fn unparking(self, unparks: Option<u64>) -> Self {
        Self { unparks, ..self }
    }
}

/// The outcome recorded for an event a fallback found nothing to do for.
pub const NOTHING_TO_DO: &str = "nothing_to_do";

/// A delivery that could not be settled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The same event id arrived with a different payload (compared as [`PayloadHash::matches`]
    /// says: the JSON's canonical form, so other whitespace or member order is the same
    /// payload): never silently skipped.
    #[error("event {event_id} was applied before with a different payload (stored hash {stored}, this delivery {delivered})")]
    PayloadMismatch {
        /// The event id.
        event_id: String,
        /// Hash stored with the first delivery (the row's `payload_hash`).
        stored: String,
        /// Hash of this delivery, in the stored hash's form ([`PayloadHash::compared_with`]).
        delivered: String,
    },
    /// The transaction failed (retryable or not; see [`TransactionError::is_retryable`]).
    #[error(transparent)]
    Transaction(#[from] TransactionError),
    /// Guarded mode: another invocation holds a live lease on the event.
    #[error("event {event_id} is being processed by another invocation (lease until {lease_expires_at} epoch ms); retry later")]
    InProgress {
        /// The event id.
        event_id: String,
        /// When the holder's lease ends, epoch milliseconds.
        lease_expires_at: i64,
    },
    /// Guarded mode: the lease ended and another invocation took the event over; this
    /// invocation must not report its result.
    #[error("the lease on event {0} was taken over by another invocation")]
    LeaseLost(String),
    /// Ordering: the event's required predecessor has not been applied (or released) yet.
    #[error("sequence gap on {aggregate}: sequence {got} waits for sequence {expected} (last applied {last_applied})")]
    SequenceGap {
        /// `<aggregate_type>#<aggregate_id>`.
        aggregate: String,
        /// The sequence that must be applied or released first ([`required_predecessor`]).
        expected: u64,
        /// The event's sequence.
        got: u64,
        /// The aggregate's `last_sequence` (0: none yet).
        last_applied: u64,
    },
    /// A DynamoDB call other than the transaction failed (retryable or not as
    /// [`AwsError`] classifies it; the service's code and message are kept).
    #[error("inbox {action} failed: {error}")]
    Sdk {
        /// What was being done.
        action: &'static str,
        /// The classified AWS error.
        #[source]
        error: AwsError,
    },
}

impl InboxError {
    /// [`InboxError::PayloadMismatch`] of `event_id`: `stored` (the row's `payload_hash`) does not
    /// match `delivered` ([`PayloadHash::matches`]); the error shows the delivery's hash in the
    /// stored hash's form.
    pub fn mismatch(event_id: &str, stored: String, delivered: &PayloadHash) -> Self {
        let delivered = delivered.compared_with(&stored).to_owned();
        InboxError::PayloadMismatch { event_id: event_id.to_owned(), stored, delivered }
    }

    /// Whether DynamoDB refused the request because the table has no such index (a
    /// `ValidationException` naming it): e.g. an inbox table without [`PARKED_INDEX`].
    pub fn is_missing_index(&self) -> bool {
        match self {
            InboxError::Sdk { error, .. } => error.code() == Some("ValidationException") && error.to_string().contains("index"),
            _ => false,
        }
    }

    /// Whether retrying the delivery later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            InboxError::Transaction(e) => e.is_retryable(),
            InboxError::Sdk { error, .. } => error.is_retryable(),
            InboxError::InProgress { .. } | InboxError::SequenceGap { .. } => true,
            InboxError::PayloadMismatch { .. } | InboxError::LeaseLost(_) => false,
        }
    }
}

/// Guarded mode: the answer of [`Inbox::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// This invocation holds the event until `lease_expires_at` (epoch ms): perform the effect,
    /// then [`Inbox::complete`] (or [`Inbox::release`] on failure).
    Acquired(Lease),
    /// The event was completed before; `result` is what the first run stored.
    Completed {
        /// The stored result (e.g. a JSON document), if any.
        result: Option<String>,
    },
}

/// A held claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The event id.
    pub event_id: String,
    /// Unique per claim; completion and release are conditioned on it.
    pub token: String,
    /// When the lease ends, epoch milliseconds.
    pub lease_expires_at: i64,
}

/// The sequence an ordered consumer must have applied (or released) last before it may apply
/// the event of `metadata`: with `types` (the event types the consumer handles) and a
/// `detail.metadata.previous` from the producer, the highest `previous[t]` over those types (0
/// when none: the first event of those types); otherwise `sequence − 1`.
pub fn required_predecessor(metadata: &EventMetadata, types: Option<&BTreeSet<String>>) -> u64 {
    match types {
        Some(types) if !metadata.previous.is_empty() => types.iter().filter_map(|t| metadata.previous.get(t)).max().copied().unwrap_or(0),
        _ => metadata.sequence.saturating_sub(1),
    }
}

/// Reports a sequence gap: a log line naming the release command and the metric `SequenceGaps`
/// (namespace `OutboxConsumer`, dimension `function`; the consumer's `metrics` module).
pub(crate) fn report_gap(consumer: &str, error: &InboxError) {
    let InboxError::SequenceGap { aggregate, expected, got, last_applied } = error else { return };
    tracing::warn!(
        consumer,
        aggregate = %aggregate,
        waits_for = expected,
        sequence = got,
        last_applied,
        release = %format!("outbox ordering release --consumer {consumer} --aggregate {aggregate} --through {expected}"),
        "sequence gap: the event waits for its predecessor; if that never comes, release it"
    );
    // Through the metrics facade: the function's EMF recorder (`outbox_lambda::run`) turns it
    // into the CloudWatch metric, dimension `function`.
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::SEQUENCE_GAPS).increment(1);
}

/// A parked row as stored ([`ParkedEvent`]), `None` when it lacks a field; `payload` is empty
/// when the item comes from [`PARKED_INDEX`] (which does not project it).
pub fn parked_from_item(item: &std::collections::HashMap<String, AttributeValue>) -> Option<ParkedEvent> {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let num = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    Some(ParkedEvent {
        event_id: text("event_id")?,
        event_type: text("event_type").unwrap_or_default(),
        aggregate_type: text("aggregate_type")?,
        aggregate_id: text("subject")?,
        sequence: num("sequence")?,
        waits_for: num("waits_for")?,
        payload: text("payload").unwrap_or_default(),
        parked_at: text(PARKED_AT).unwrap_or_default(),
    })
}

const IN_PROGRESS: &str = "IN_PROGRESS";
const COMPLETED: &str = "COMPLETED";

fn sdk<E>(action: &'static str, operation: &'static str, error: &SdkError<E, HttpResponse>) -> InboxError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    InboxError::Sdk { action, error: AwsError::from_sdk(operation, error) }
}

/// Most `BatchGetItem` calls one consistent read of parked rows makes while DynamoDB answers
/// `UnprocessedKeys` ([`Inbox::parked_around`]); then it fails (retryable), never answering
/// "absent" for a key it could not read.
pub const UNPROCESSED_KEYS_ATTEMPTS: u32 = 5;
/// First backoff step before unprocessed keys are requested again (full jitter, doubling).
const UNPROCESSED_KEYS_BACKOFF: Duration = Duration::from_millis(25);
/// Longest backoff before unprocessed keys are requested again.
const UNPROCESSED_KEYS_MAX_BACKOFF: Duration = Duration::from_millis(500);

/// One DynamoDB item, by attribute name.
type Item = std::collections::HashMap<String, AttributeValue>;

/// The `last_sequence` of an ordering row (0: no row, or no number in it).
fn last_sequence_of(item: Option<&Item>) -> u64 {
    stored_sequence(item).unwrap_or(0)
}

/// The `last_sequence` an ordering row stores (`None`: no row, or a row without one).
fn stored_sequence(item: Option<&Item>) -> Option<u64> {
    item.and_then(|i| i.get("last_sequence")).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok())
}

/// The ordering row's count of the aggregate's parked rows (absent on a row written before the
/// count existed: then nothing is proved, and the consumer reads). [`Inbox::park`] adds one in
/// the transaction that puts the parked row; every deletion of a counted row takes one off in
/// its own transaction, so the count is exact and "0" proves that nothing is parked.
pub const PARKED_COUNT: &str = "parked_count";

/// The attribute (`BOOL` true) of a parked row counted in [`PARKED_COUNT`]; a row parked by a
/// version before the count lacks it and is deleted without touching the count.
const COUNTED: &str = "counted";

/// Most transactions [`Inbox::park`] makes while DynamoDB cancels it as retryable (a
/// `TransactionConflict` with the predecessor's own transaction on the ordering row, throttling).
pub const PARK_ATTEMPTS: u32 = 3;

/// How an ordered event's transaction treats the aggregate's ordering row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Advance {
    /// Also on the condition that nothing is parked on the aggregate (no row, or
    /// [`PARKED_COUNT`] 0): a commit then proves it, and no read follows.
    NoneParked,
    /// The sequence condition alone; a row without a count gets one (0: a count only moves with
    /// counted rows, and the reads after this commit find rows parked before it).
    Plain,
    /// The drain's event, settling its counted parked row `waits_for`: the row is deleted on the
    /// condition that it is counted, and the count goes down by one.
    UnparkCounted(u64),
    /// The drain's event whose parked row is not counted (parked before the count existed) or
    /// gone: deleted on the condition that it is absent or this event's uncounted row, the count
    /// untouched.
    UnparkUncounted(u64),
}

/// What one transaction of [`Inbox::apply_checking_parked`] settled.
enum Attempt {
    /// The event's outcome.
    Done(InboxOutcome),
    /// Refused for a reason that is not the event's: made again as this.
    Again(Advance),
}

/// Whether the ordering row `item` (as stored, `None`: no row) lets an event of `sequence` whose
/// required predecessor is `required` apply: the sequence part of [`Inbox`]'s condition.
fn in_sequence(item: Option<&Item>, required: u64, sequence: u64) -> bool {
    match stored_sequence(item) {
        None => required == 0,
        Some(last) => last >= required && last < sequence,
    }
}

/// The inbox of one consumer.
#[derive(Debug, Clone)]
pub struct Inbox {
    client: Client,
    table: String,
    consumer: String,
    retention: Duration,
    ordered: bool,
    types: Option<BTreeSet<String>>,
}

impl Inbox {
    /// The inbox of `consumer` in `table`; rows expire `retention` after they are written (at
    /// most [`crate::envelope::MAX_RETENTION`]; a longer one is capped to it, so a row is never
    /// written already expired).
    pub fn new(client: Client, table: impl Into<String>, consumer: impl Into<String>, retention: Duration) -> Self {
        Self { client, table: table.into(), consumer: consumer.into(), retention, ordered: false, types: None }
    }

    /// Enables per-aggregate ordering over every sequence (see the module docs).
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }

    /// Enables per-aggregate ordering for a consumer that handles the event `types` (e.g. its
    /// rule's `detail-type` list): an event waits only for the latest earlier event of those
    /// types, as the producer recorded it in `detail.metadata.previous` (see the module docs).
    pub fn ordered_by_types<I: IntoIterator<Item = T>, T: Into<String>>(mut self, types: I) -> Self {
        self.ordered = true;
        self.types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// Partition key of the ordering row of an aggregate.
    pub fn aggregate_key(&self, metadata: &EventMetadata) -> String {
        self.ordering_key(&format!("{}#{}", metadata.aggregate_type, metadata.subject))
    }

    /// Partition key of the ordering row of `aggregate` (`<type>#<id>`):
    /// `<consumer>#aggregate#<type>#<id>`.
    fn ordering_key(&self, aggregate: &str) -> String {
        format!("{}#aggregate#{aggregate}", self.consumer)
    }

    /// The update that moves the aggregate's `last_sequence` from its required predecessor (or
    /// anything up to `sequence − 1`) to `sequence`, the ordering row's part of the event's
    /// transaction as `advance` says. No `expires_at`: the row never expires. A row parking
    /// created (count only, [`Inbox::park`]) has no `last_sequence` yet: it counts as 0.
    fn advance_sequence(&self, metadata: &EventMetadata, now: DateTime<Utc>, advance: Advance) -> TransactWriteItem {
        const IN_SEQUENCE: &str =
            "((attribute_not_exists(last_sequence) AND :required = :zero) OR (last_sequence >= :required AND last_sequence < :seq))";
        let required = required_predecessor(metadata, self.types.as_ref());
        let (update, condition) = match advance {
            Advance::NoneParked => (
                "SET last_sequence = :seq, updated_at = :now, parked_count = if_not_exists(parked_count, :zero) REMOVE expires_at",
                format!("{IN_SEQUENCE} AND (attribute_not_exists(pk) OR parked_count = :zero)"),
            ),
            Advance::Plain | Advance::UnparkUncounted(_) => (
                "SET last_sequence = :seq, updated_at = :now, parked_count = if_not_exists(parked_count, :zero) REMOVE expires_at",
                IN_SEQUENCE.to_owned(),
            ),
            Advance::UnparkCounted(_) => (
                "SET last_sequence = :seq, updated_at = :now ADD parked_count :minus_one REMOVE expires_at",
                format!("{IN_SEQUENCE} AND attribute_exists(parked_count)"),
            ),
        };
        let mut builder = Update::builder()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.aggregate_key(metadata)))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_values(":seq", AttributeValue::N(metadata.sequence.to_string()))
            .expression_attribute_values(":required", AttributeValue::N(required.to_string()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .expression_attribute_values(":now", AttributeValue::S(now.to_rfc3339_opts(SecondsFormat::Millis, true)))
            .return_values_on_condition_check_failure(all_old());
        if let Advance::UnparkCounted(_) = advance {
            builder = builder.expression_attribute_values(":minus_one", AttributeValue::N("-1".into()));
        }
        let update = builder
            .build()
            // table_name, key and update_expression are set above, the only required fields.
            .expect("Update has its required fields");
        TransactWriteItem::builder().update(update).build()
    }

    /// The deletion of the parked row of `metadata`'s event (parked waiting for `waits_for`), as
    /// part of its transaction ([`RecordedOutcome::unparks`]). `counted`: on the condition that
    /// the row is this event's and counted (the count goes down with it); otherwise on the
    /// condition that the key holds no row or this event's uncounted one, so a counted row is
    /// never deleted without its count.
    fn unpark_in_transaction(&self, metadata: &EventMetadata, waits_for: u64, counted: bool) -> TransactWriteItem {
        let condition = match counted {
            true => "event_id = :id AND attribute_exists(#counted)",
            false => "attribute_not_exists(pk) OR (event_id = :id AND attribute_not_exists(#counted))",
        };
        let delete = Delete::builder()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.parked_key(&metadata.aggregate_type, &metadata.subject, waits_for)))
            .condition_expression(condition)
            .expression_attribute_names("#counted", COUNTED)
            .expression_attribute_values(":id", AttributeValue::S(metadata.id.clone()))
            .build()
            // table_name and key are set above, the only required fields.
            .expect("Delete has its required fields");
        TransactWriteItem::builder().delete(delete).build()
    }

    /// Whether the inbox is ordered ([`Inbox::ordered`], [`Inbox::ordered_by_types`]).
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    /// Partition key of the parked row of the event of `aggregate_type`/`aggregate_id` that
    /// waits for `waits_for` ([`ParkedEvent`]).
    pub fn parked_key(&self, aggregate_type: &str, aggregate_id: &str, waits_for: u64) -> String {
        format!("{}#parked#{aggregate_type}#{aggregate_id}#{waits_for}", self.consumer)
    }

    /// Parks the event of `metadata`, waiting for `waits_for` ([`ParkedEvent`]): ONE transaction
    /// of the parked row's put (on the condition that the key holds no row) and one more on the
    /// aggregate's [`PARKED_COUNT`] (the ordering row, created when absent). Idempotent: a row
    /// the same event holds already is left as it is, counted once. Returns `false` when another
    /// event id waits for the same sequence. A transaction cancelled as retryable (a
    /// `TransactionConflict` with the predecessor's transaction on the ordering row, throttling)
    /// is made again after a jittered backoff, [`PARK_ATTEMPTS`] in all.
    ///
    /// # Errors
    /// [`InboxError::Transaction`] if DynamoDB fails (e.g. a payload over the 400 KB item limit),
    /// or still cancels it as retryable after the last attempt.
    pub async fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> Result<bool, InboxError> {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: u64| AttributeValue::N(v.to_string());
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(&self.parked_key(&metadata.aggregate_type, &metadata.subject, waits_for)))
            .item("kind", s(parked::PARKED_KIND))
            // Only parked rows carry it: the partition key of the sparse PARKED_INDEX.
            .item(PARKED_CONSUMER, s(&self.consumer))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("aggregate_type", s(&metadata.aggregate_type))
            .item("subject", s(&metadata.subject))
            .item("sequence", n(metadata.sequence))
            .item("waits_for", n(waits_for))
            .item("payload", s(payload))
            .item(PARKED_AT, s(&Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)))
            .item(COUNTED, AttributeValue::Bool(true))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(all_old())
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        let count = self.count_parked(&metadata.aggregate_type, &metadata.subject, 1);
        let mut attempt = 1;
        loop {
            let items = vec![TransactWriteItem::builder().put(put.clone()).build(), count.clone()];
            match transact_write(&self.client, items).await {
                Ok(()) => return Ok(true),
                Err(TransactionError::ConditionFailed { index: 0, item }) => {
                    let holder = item.as_ref().and_then(|i| i.get("event_id")).and_then(|v| v.as_s().ok());
                    return Ok(holder == Some(&metadata.id));
                }
                Err(e) if e.is_retryable() && attempt < PARK_ATTEMPTS => {
                    tokio::time::sleep(crate::aws_error::full_jitter(UNPROCESSED_KEYS_BACKOFF, UNPROCESSED_KEYS_MAX_BACKOFF, attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The update adding `by` to the [`PARKED_COUNT`] of the aggregate's ordering row. An
    /// increment creates the row when absent, with `last_sequence` 0 (so a version before the
    /// count, which reads a row without `last_sequence` as a gap, still applies the aggregate's
    /// first event), and removes an old row's `expires_at` (a count must never expire). A
    /// decrement only on a row that has a count.
    fn count_parked(&self, aggregate_type: &str, aggregate_id: &str, by: i64) -> TransactWriteItem {
        let mut update = Update::builder()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.ordering_key(&format!("{aggregate_type}#{aggregate_id}"))))
            .expression_attribute_values(":by", AttributeValue::N(by.to_string()));
        update = if by < 0 {
            update.update_expression("ADD parked_count :by").condition_expression("attribute_exists(parked_count)")
        } else {
            update
                .update_expression("SET last_sequence = if_not_exists(last_sequence, :zero) ADD parked_count :by REMOVE expires_at")
                .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        };
        let update = update
            .build()
            // table_name, key and update_expression are set above, the only required fields.
            .expect("Update has its required fields");
        TransactWriteItem::builder().update(update).build()
    }

    /// The event parked on the aggregate waiting for `waits_for`, if any (consistent read).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn parked(&self, aggregate_type: &str, aggregate_id: &str, waits_for: u64) -> Result<Option<ParkedEvent>, InboxError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.parked_key(aggregate_type, aggregate_id, waits_for)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("read parked", "GetItem", &e))?;
        Ok(out.item.as_ref().and_then(parked_from_item))
    }

    /// This consumer's parked events, oldest first, at most `limit` (without their payload): a
    /// paginated `Query` of the table's sparse index [`PARKED_INDEX`] (eventually consistent;
    /// reads only parked rows, [`ParkedEvent`] explains the index).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails; a table without the index answers
    /// `ValidationException` ([`InboxError::is_missing_index`]).
    pub async fn parked_oldest(&self, limit: usize) -> Result<ParkedList, InboxError> {
        let mut list = ParkedList::default();
        let mut start = None;
        loop {
            let page = (limit - list.events.len()).clamp(1, 1000) as i32;
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(PARKED_INDEX)
                .key_condition_expression("#c = :c")
                .expression_attribute_names("#c", PARKED_CONSUMER)
                .expression_attribute_values(":c", AttributeValue::S(self.consumer.clone()))
                .scan_index_forward(true)
                .limit(page)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk("list parked events", "Query", &e))?;
            list.events.extend(out.items().iter().filter_map(parked_from_item));
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                list.complete = true;
                return Ok(list);
            }
            if list.events.len() >= limit {
                list.events.truncate(limit);
                return Ok(list);
            }
        }
    }

    /// Deletes the parked row of `parked`, if that event still holds it: with the aggregate's
    /// [`PARKED_COUNT`] down by one in the same transaction when the row is counted; a row parked
    /// before the count existed is deleted alone (`DeleteItem`), the count untouched.
    ///
    /// # Errors
    /// [`InboxError::Transaction`] or [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn unpark(&self, parked: &ParkedEvent) -> Result<(), InboxError> {
        let key = AttributeValue::S(self.parked_key(&parked.aggregate_type, &parked.aggregate_id, parked.waits_for));
        let id = AttributeValue::S(parked.event_id.clone());
        let delete = Delete::builder()
            .table_name(&self.table)
            .key("pk", key.clone())
            .condition_expression("event_id = :id AND attribute_exists(#counted)")
            .expression_attribute_names("#counted", COUNTED)
            .expression_attribute_values(":id", id.clone())
            .build()
            // table_name and key are set above, the only required fields.
            .expect("Delete has its required fields");
        let items = vec![TransactWriteItem::builder().delete(delete).build(), self.count_parked(&parked.aggregate_type, &parked.aggregate_id, -1)];
        match transact_write(&self.client, items).await {
            Ok(()) => return Ok(()),
            // Not this event's counted row (another event's, one parked before the count, or
            // none), or an ordering row without a count: the row alone, if this event holds it.
            Err(TransactionError::ConditionFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", key)
            // Never a counted row without its count: one counted since the transaction above
            // (the same event parked again by a stale delivery) stays, for the drain or the
            // parked check to settle as a duplicate and unpark with its count.
            .condition_expression("event_id = :id AND attribute_not_exists(#counted)")
            .expression_attribute_names("#counted", COUNTED)
            .expression_attribute_values(":id", id)
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk("unpark", "DeleteItem", &e)),
            },
        }
    }

    /// Removes the parked row of the event of `metadata`, if it holds one
    /// ([`InboxStore::unpark_settled`]).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn unpark_settled(&self, metadata: &EventMetadata) -> Result<(), InboxError> {
        let waits_for = required_predecessor(metadata, self.types.as_ref());
        match self.parked(&metadata.aggregate_type, &metadata.subject, waits_for).await? {
            Some(parked) if parked.event_id == metadata.id => self.unpark(&parked).await,
            _ => Ok(()),
        }
    }

    /// [`InboxStore::parked_around`]: the parked row of the event of `metadata` (held by that
    /// event) and the one waiting for `last` (the aggregate's `last_sequence`; `None`: read with
    /// them), read in ONE `BatchGetItem` with `ConsistentRead` instead of two or three `GetItem`s
    /// (unprocessed keys requested again, up to [`UNPROCESSED_KEYS_ATTEMPTS`] calls). For a
    /// duplicate (`last` unknown) the batch reads the row waiting for the event's own sequence,
    /// the usual `last_sequence` of a redelivered event; when the ordering row says otherwise, one
    /// consistent `GetItem` of the row waiting for it follows.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails or leaves a key unprocessed through every retry.
    pub async fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> Result<ParkedAround, InboxError> {
        let key = |waits_for: u64| self.parked_key(&metadata.aggregate_type, &metadata.subject, waits_for);
        let guess = last.unwrap_or(metadata.sequence);
        let (own_key, next_key, ordering_key) = (key(required_predecessor(metadata, self.types.as_ref())), key(guess), self.aggregate_key(metadata));
        let mut keys = vec![own_key.as_str(), next_key.as_str()];
        if last.is_none() {
            keys.push(ordering_key.as_str());
        }
        let items = self.read_consistent("read parked events", &keys).await?;
        let row = |k: &str| items.get(k).and_then(parked_from_item);
        // Both keys are one row only when a `previous` names the event's own sequence: its own
        // copy then, never a successor.
        let own = row(&own_key).filter(|p| p.event_id == metadata.id);
        let last = last.unwrap_or_else(|| last_sequence_of(items.get(&ordering_key)));
        let next = if last == guess { row(&next_key) } else { self.parked(&metadata.aggregate_type, &metadata.subject, last).await? };
        Ok(ParkedAround::new(own, last, next.filter(|p| p.event_id != metadata.id)))
    }

    /// The items of partition keys `keys` (duplicates read once; at most 100, the call's limit),
    /// by key, absent ones missing: one `BatchGetItem` with `ConsistentRead: true`, whose
    /// `UnprocessedKeys` (a key DynamoDB did not read, e.g. throughput exceeded on its partition)
    /// are requested again after a backoff with full jitter, up to
    /// [`UNPROCESSED_KEYS_ATTEMPTS`] calls in all. A key still unprocessed then is an error,
    /// never "absent". The SDK does not retry unprocessed keys itself: the call succeeded.
    /// Source: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] (retryable) when DynamoDB fails or keys stay unprocessed.
    async fn read_consistent(&self, action: &'static str, keys: &[&str]) -> Result<HashMap<String, Item>, InboxError> {
        let mut pending: Vec<Item> = Vec::with_capacity(keys.len());
        for key in keys {
            let key = HashMap::from([("pk".to_owned(), AttributeValue::S((*key).to_owned()))]);
            if !pending.contains(&key) {
                pending.push(key);
            }
        }
        let mut found = HashMap::with_capacity(pending.len());
        let mut attempt = 1;
        loop {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut pending)))
                .consistent_read(true)
                .build()
                .map_err(|e| InboxError::Sdk { action, error: AwsError::construction("BatchGetItem", e.to_string()) })?;
            let out = self.client.batch_get_item().request_items(&self.table, request).send().await.map_err(|e| sdk(action, "BatchGetItem", &e))?;
            for item in out.responses.and_then(|mut r| r.remove(&self.table)).unwrap_or_default() {
                if let Some(pk) = item.get("pk").and_then(|v| v.as_s().ok()).cloned() {
                    found.insert(pk, item);
                }
            }
            pending = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table)).map(|k| k.keys).unwrap_or_default();
            if pending.is_empty() {
                return Ok(found);
            }
            if attempt >= UNPROCESSED_KEYS_ATTEMPTS {
                let detail = format!("{} of {} keys still unprocessed after {attempt} calls", pending.len(), keys.len());
                return Err(InboxError::Sdk { action, error: AwsError::new("BatchGetItem", AwsErrorKind::Service, true, detail) });
            }
            tokio::time::sleep(crate::aws_error::full_jitter(UNPROCESSED_KEYS_BACKOFF, UNPROCESSED_KEYS_MAX_BACKOFF, attempt)).await;
            attempt += 1;
        }
    }

    /// The aggregate's `last_sequence` (0: no row), a consistent read.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> Result<u64, InboxError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.ordering_key(&format!("{aggregate_type}#{aggregate_id}"))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk("read the ordering row", "GetItem", &e))?;
        Ok(last_sequence_of(out.item()))
    }

    /// The SHA-256 (hex) of the payload bytes `event_id` was applied with, when this consumer's
    /// inbox holds a live record of it (transactional claim or completed guarded claim,
    /// `expires_at` not passed): the row's `payload_sha256`, or for a row written before that
    /// attribute its unprefixed `payload_hash` (the same SHA-256; a `jcs1:` hash is not one, so
    /// such a row answers `None`). A strongly consistent `GetItem` ([`InboxStore::applied_sha256`]).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn applied_sha256(&self, event_id: &str) -> Result<Option<String>, InboxError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(event_id)))
            .consistent_read(true)
            .projection_expression("payload_hash, payload_sha256, expires_at, #status")
            .expression_attribute_names("#status", "status")
            .send()
            .await
            .map_err(|e| sdk("read the inbox row", "GetItem", &e))?;
        let Some(item) = out.item() else { return Ok(None) };
        let expires_at = item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
        // The claim's own condition: a row whose expires_at has passed is free to claim again.
        if expires_at.is_none_or(|at| at < Utc::now().timestamp()) {
            return Ok(None);
        }
        if item.get("status").and_then(|v| v.as_s().ok()).is_some_and(|status| status != COMPLETED) {
            return Ok(None);
        }
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        Ok(text("payload_sha256").or_else(|| text("payload_hash").filter(|h| !h.contains(':'))))
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Partition key of the inbox row for `event_id`: `<consumer>#<event_id>`.
    pub fn key(&self, event_id: &str) -> String {
        format!("{}#{}", self.consumer, event_id)
    }

    /// The conditional put that claims `metadata.id` for this consumer.
    pub fn claim(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, now: DateTime<Utc>) -> TransactWriteItem {
        self.claim_recording(metadata, payload_hash, now, None)
    }

    /// [`Inbox::claim`] with the event's `outcome` (attributes `outcome`, `reason`).
    pub fn claim_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        now: DateTime<Utc>,
        outcome: Option<&RecordedOutcome>,
    ) -> TransactWriteItem {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mut put = Put::builder();
        if let Some(o) = outcome {
            put = put.item("outcome", s(&o.outcome));
            if let Some(reason) = &o.reason {
                put = put.item("reason", s(reason));
            }
        }
        let put = put
            .table_name(&self.table)
            .item("pk", s(&self.key(&metadata.id)))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("source", s(&metadata.source))
            .item("subject", s(&metadata.subject))
            .item("sequence", AttributeValue::N(metadata.sequence.to_string()))
            .item("payload_hash", s(payload_hash.stored()))
            .item("payload_sha256", s(payload_hash.sha256()))
            .item("processed_at", s(&now.to_rfc3339_opts(SecondsFormat::Millis, true)))
            .item("expires_at", n(crate::envelope::expires_at(now, self.retention)))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", n(now.timestamp()))
            .return_values_on_condition_check_failure(all_old())
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// Applies `writes` once for the event: one transaction of the inbox claim plus `writes`.
    ///
    /// # Errors
    /// [`InboxError::PayloadMismatch`] if the event id was applied with another payload;
    /// [`InboxError::Transaction`] otherwise (check [`InboxError::is_retryable`]).
    pub async fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> Result<InboxOutcome, InboxError> {
        self.apply_recording(metadata, payload_hash, writes, None).await
    }

    /// [`Inbox::apply`], recording `outcome` on the inbox row.
    ///
    /// # Errors
    /// As [`Inbox::apply`].
    pub async fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
    ) -> Result<InboxOutcome, InboxError> {
        self.apply_checking_parked(metadata, payload_hash, writes, outcome).await.map(|(outcome, _)| outcome)
    }

    /// [`Inbox::apply_recording`], answering also whether the commit proved that nothing is
    /// parked on the event's aggregate ([`InboxStore::apply_checking_parked`]): `true` only for an
    /// ordered inbox whose transaction applied the event on the condition that the ordering row
    /// is absent or its [`PARKED_COUNT`] is 0. When that condition alone is false (something is
    /// parked), the transaction is made again without it and the answer is `false`: the
    /// consumer then reads the parked rows. The drain's event (`outcome.unparks`) deletes its
    /// counted parked row and takes it off the count; for an uncounted row (parked before the
    /// count existed) the event's transaction is made again, deleting the row without the count;
    /// a row that is neither (another event's) is left.
    ///
    /// Why no row can be missed: the parked row and its count are written in one transaction
    /// ([`Inbox::park`]), and this transaction reads the count on the same item it moves the
    /// sequence on; DynamoDB serialises transactions on one item. A park before this commit
    /// makes the condition false; a park after it is followed by the parker's own consistent read
    /// of the ordering row, which sees this sequence, and the parker applies its event itself.
    /// Source: the isolation levels of `TransactWriteItems`,
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation>.
    ///
    /// # Errors
    /// As [`Inbox::apply`].
    pub async fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        mut writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
    ) -> Result<(InboxOutcome, bool), InboxError> {
        let mut advance = match outcome.and_then(|o| o.unparks) {
            Some(waits_for) => Advance::UnparkCounted(waits_for),
            None => Advance::NoneParked,
        };
        loop {
            // Only these three may be refused for a reason that is not the event's, and made again
            // (NoneParked -> Plain; UnparkCounted -> UnparkUncounted -> Plain: three at most).
            let again = (self.ordered && matches!(advance, Advance::NoneParked | Advance::UnparkCounted(_) | Advance::UnparkUncounted(_)))
                .then(|| writes.clone());
            match self.apply_once(metadata, payload_hash, writes, outcome, advance).await? {
                Attempt::Done(result) => {
                    let proved = self.ordered && advance == Advance::NoneParked && result == InboxOutcome::Applied;
                    return Ok((result, proved));
                }
                Attempt::Again(next) => {
                    advance = next;
                    // `again` is Some for the three refusals apply_once makes again.
                    writes = again.unwrap_or_default();
                }
            }
        }
    }

    /// One transaction of the event's inbox claim, its ordering row as `advance` says (an
    /// ordered inbox) and `writes`.
    async fn apply_once(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        advance: Advance,
    ) -> Result<Attempt, InboxError> {
        let now = Utc::now();
        let mut items = Vec::with_capacity(writes.len() + 3);
        items.push(self.claim_recording(metadata, payload_hash, now, outcome));
        if self.ordered {
            items.push(self.advance_sequence(metadata, now, advance));
            match advance {
                // The drain read this row (the event's own, at this key) after the predecessor
                // was applied, and nothing parks behind an applied predecessor (parking needs a
                // sequence gap, and sequences only move forward), so the key holds this event's
                // row or nothing.
                Advance::UnparkCounted(waits_for) => items.push(self.unpark_in_transaction(metadata, waits_for, true)),
                Advance::UnparkUncounted(waits_for) => items.push(self.unpark_in_transaction(metadata, waits_for, false)),
                Advance::NoneParked | Advance::Plain => {}
            }
        }
        let business_offset = items.len();
        items.extend(writes);
        let done = |outcome| Ok(Attempt::Done(outcome));
        match transact_write(&self.client, items).await {
            Ok(()) => done(InboxOutcome::Applied),
            Err(TransactionError::ConditionFailed { index: 0, item }) => {
                let stored = item.as_ref().and_then(|i| i.get("payload_hash")).and_then(|v| v.as_s().ok()).cloned();
                match stored {
                    Some(stored) if !payload_hash.matches(&stored) => Err(InboxError::mismatch(&metadata.id, stored, payload_hash)),
                    _ => done(InboxOutcome::Duplicate),
                }
            }
            Err(TransactionError::ConditionFailed { index: 1, item }) if self.ordered => {
                let required = required_predecessor(metadata, self.types.as_ref());
                if in_sequence(item.as_ref(), required, metadata.sequence) {
                    match advance {
                        // In sequence: the count said something is parked on the aggregate.
                        Advance::NoneParked => return Ok(Attempt::Again(Advance::Plain)),
                        // In sequence: the row has no count to take the parked row off.
                        Advance::UnparkCounted(waits_for) => return Ok(Attempt::Again(Advance::UnparkUncounted(waits_for))),
                        Advance::Plain | Advance::UnparkUncounted(_) => {}
                    }
                }
                let last = last_sequence_of(item.as_ref());
                if metadata.sequence <= last {
                    done(InboxOutcome::Duplicate)
                } else {
                    Err(InboxError::SequenceGap {
                        aggregate: format!("{}#{}", metadata.aggregate_type, metadata.subject),
                        expected: required,
                        got: metadata.sequence,
                        last_applied: last,
                    })
                }
            }
            Err(TransactionError::ConditionFailed { index, item }) => match advance {
                // The parked row is not this event's counted row (parked before the count
                // existed, or gone).
                Advance::UnparkCounted(waits_for) if self.ordered && index == 2 => Ok(Attempt::Again(Advance::UnparkUncounted(waits_for))),
                // Nor this event's uncounted row: another event's, or counted since. Left for
                // the drain or the parked check, which settle it with its count.
                Advance::UnparkUncounted(_) if self.ordered && index == 2 => Ok(Attempt::Again(Advance::Plain)),
                _ => done(InboxOutcome::BusinessConditionFailed { index: index - business_offset, item }),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// Ordering, operator action: moves the `last_sequence` of aggregate `aggregate`
    /// (`<aggregate_type>#<aggregate_id>`) up to `through`, as if every event up to `through`
    /// had been applied, so an event waiting for a sequence that will never come (dead-lettered
    /// at the relay, skipped on purpose) applies on its next retry or redrive. Never moves it
    /// down; records `released_through` and `released_at` on the row. Returns the
    /// `last_sequence` before (0: no row).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn release_through(&self, aggregate: &str, through: u64) -> Result<u64, InboxError> {
        let n = |v: u64| AttributeValue::N(v.to_string());
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.ordering_key(aggregate)))
            .update_expression("SET last_sequence = :through, released_through = :through, released_at = :now REMOVE expires_at")
            // A row parking created has a count and no sequence yet.
            .condition_expression("attribute_not_exists(last_sequence) OR last_sequence < :through")
            .expression_attribute_values(":through", n(through))
            .expression_attribute_values(":now", AttributeValue::S(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let last = last_sequence_of;
        match result {
            Ok(out) => Ok(last(out.attributes())),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(cfe)) => Ok(last(cfe.item())),
                _ => Err(sdk("release_through", "UpdateItem", &e)),
            },
        }
    }

    /// Guarded mode: claims `metadata.id` for an effect outside DynamoDB, with a lease until
    /// `lease_until` (use the invocation's deadline; see `outbox_lambda::deadline`).
    ///
    /// # Errors
    /// [`InboxError::InProgress`] while another invocation holds a live lease;
    /// [`InboxError::PayloadMismatch`] if the id was claimed with another payload;
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn begin(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, lease_until: DateTime<Utc>) -> Result<Claim, InboxError> {
        let now = Utc::now();
        let token = uuid::Uuid::new_v4().to_string();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(&self.key(&metadata.id)))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("status", s(IN_PROGRESS))
            .item("lease_token", s(&token))
            .item("lease_expires_at", n(lease_until.timestamp_millis()))
            .item("payload_hash", s(payload_hash.stored()))
            .item("payload_sha256", s(payload_hash.sha256()))
            .item("expires_at", n(crate::envelope::expires_at(now, self.retention)))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now OR (#status = :in_progress AND lease_expires_at < :now_ms)")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":now", n(now.timestamp()))
            .expression_attribute_values(":now_ms", n(now.timestamp_millis()))
            .expression_attribute_values(":in_progress", s(IN_PROGRESS))
            .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let failed = match result {
            Ok(_) => return Ok(Claim::Acquired(Lease { event_id: metadata.id.clone(), token, lease_expires_at: lease_until.timestamp_millis() })),
            Err(e) => e,
        };
        let Some(aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(cfe)) = failed.as_service_error() else {
            return Err(sdk("claim", "PutItem", &failed));
        };
        let stored = cfe.item().cloned().unwrap_or_default();
        let text = |name: &str| stored.get(name).and_then(|v| v.as_s().ok()).cloned();
        if let Some(stored_hash) = text("payload_hash").filter(|h| !payload_hash.matches(h)) {
            return Err(InboxError::mismatch(&metadata.id, stored_hash, payload_hash));
        }
        match text("status").as_deref() {
            Some(COMPLETED) | None => Ok(Claim::Completed { result: text("result") }),
            Some(_) => Err(InboxError::InProgress {
                event_id: metadata.id.clone(),
                lease_expires_at: stored.get("lease_expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0),
            }),
        }
    }

    /// Guarded mode: marks the claimed event `COMPLETED` with `result` (returned to later
    /// duplicates), if this invocation still holds the lease.
    ///
    /// # Errors
    /// [`InboxError::LeaseLost`] when another invocation took the event over.
    pub async fn complete(&self, lease: &Lease, result: Option<&str>) -> Result<(), InboxError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(&lease.event_id)))
            .condition_expression("lease_token = :token")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":token", AttributeValue::S(lease.token.clone()))
            .expression_attribute_values(":completed", AttributeValue::S(COMPLETED.into()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)));
        update = match result {
            Some(r) => update
                .update_expression("SET #status = :completed, processed_at = :at, #result = :result REMOVE lease_expires_at")
                .expression_attribute_names("#result", "result")
                .expression_attribute_values(":result", AttributeValue::S(r.to_owned())),
            None => update.update_expression("SET #status = :completed, processed_at = :at REMOVE lease_expires_at"),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_)) => {
                    Err(InboxError::LeaseLost(lease.event_id.clone()))
                }
                _ => Err(sdk("complete", "UpdateItem", &e)),
            },
        }
    }

    /// Guarded mode: gives the claim up after a failed effect, so a retry can run at once.
    /// Does nothing if the lease was taken over meanwhile.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn release(&self, lease: &Lease) -> Result<(), InboxError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(&lease.event_id)))
            .condition_expression("lease_token = :token")
            .expression_attribute_values(":token", AttributeValue::S(lease.token.clone()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk("release", "DeleteItem", &e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> EventMetadata {
        serde_json::from_str(
            r#"{"id":"e-1","type":"OrderCreated","version":1,"source":"s","time":"2026-12-01T00:00:00Z","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"c"}"#,
        )
        .unwrap()
    }

    fn expires_at(item: &TransactWriteItem) -> i64 {
        item.put().and_then(|p| p.item().get("expires_at")).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap()
    }

    /// A retention too large for epoch seconds must never produce a claim that is expired when
    /// written (`expires_at < now`): the next delivery would overwrite it and apply the event again.
    #[test]
    fn a_huge_retention_never_makes_a_claim_born_expired() {
        let client =
            Client::from_conf(aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build());
        let now = Utc::now();
        for seconds in [u64::MAX, i64::MAX as u64, i64::MAX as u64 - 1, 1 << 62] {
            let inbox = Inbox::new(client.clone(), "inbox", "c", Duration::from_secs(seconds));
            let expires = expires_at(&inbox.claim(&metadata(), &PayloadHash::of("{}"), now));
            assert!(expires > now.timestamp(), "retention {seconds} s: expires_at {expires} is not after now ({})", now.timestamp());
        }
    }

    /// What the consumer asks before fetching a claim-checked payload: the SHA-256 of the bytes
    /// of a live applied row only (a row of an earlier version: its unprefixed `payload_hash`).
    #[tokio::test]
    async fn applied_sha256_reads_live_applied_rows_only() {
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let row = |expires: i64, status: Option<&str>, hashes: &[(&str, &str)]| {
            let mut item = std::collections::HashMap::from([("expires_at".to_owned(), AttributeValue::N(expires.to_string()))]);
            for (name, value) in hashes {
                item.insert((*name).to_owned(), AttributeValue::S((*value).to_owned()));
            }
            if let Some(status) = status {
                item.insert("status".to_owned(), AttributeValue::S(status.into()));
            }
            GetItemOutput::builder().set_item(Some(item)).build()
        };
        let later = Utc::now().timestamp() + 3600;
        let current: &[(&str, &str)] = &[("payload_hash", "jcs1:c"), ("payload_sha256", "s")];
        let legacy: &[(&str, &str)] = &[("payload_hash", "h")];
        let answers = [
            (Some(row(later, None, current)), Some("s")),
            (Some(row(later, Some(COMPLETED), current)), Some("s")),
            (Some(row(later, None, legacy)), Some("h")),
            (Some(row(later, Some(COMPLETED), legacy)), Some("h")),
            (Some(row(later, None, &[("payload_hash", "jcs1:c")])), None),
            (Some(row(later, Some(IN_PROGRESS), current)), None),
            (Some(row(Utc::now().timestamp() - 10, None, current)), None),
            (Some(GetItemOutput::builder().build()), None),
        ];
        for (answer, expected) in answers {
            let answer = answer.unwrap();
            let rule = mock!(Client::get_item)
                .match_requests(|r| {
                    r.consistent_read() == Some(true)
                        && r.key().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).map(String::as_str) == Some("c#e-1")
                })
                .then_output(move || answer.clone());
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60));
            assert_eq!(inbox.applied_sha256("e-1").await.unwrap().as_deref(), expected);
            assert_eq!(rule.num_calls(), 1);
        }
    }

    /// A parked row as [`Inbox::park`] writes it, for event `id` (sequence `sequence`, waiting
    /// for `waits_for`) of aggregate `Order#o-1`, consumer `c`.
    fn parked_row(id: &str, sequence: u64, waits_for: u64) -> Item {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: u64| AttributeValue::N(v.to_string());
        HashMap::from([
            ("pk".to_owned(), s(&format!("c#parked#Order#o-1#{waits_for}"))),
            ("event_id".to_owned(), s(id)),
            ("event_type".to_owned(), s("OrderUpdated")),
            ("aggregate_type".to_owned(), s("Order")),
            ("subject".to_owned(), s("o-1")),
            ("sequence".to_owned(), n(sequence)),
            ("waits_for".to_owned(), n(waits_for)),
            ("payload".to_owned(), s("{}")),
        ])
    }

    /// A `BatchGetItem` that reads `table` (items by `pk`) for every key, except that the first
    /// `unprocessed_calls` calls leave every key unprocessed (throughput exceeded), answering
    /// none; it checks each request reads consistently.
    fn batch_get(table: Vec<Item>, unprocessed_calls: usize) -> aws_smithy_mocks::Rule {
        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        let calls = std::sync::atomic::AtomicUsize::new(0);
        aws_smithy_mocks::mock!(Client::batch_get_item).then_compute_output(move |request| {
            let asked = &request.request_items().expect("request items")["inbox"];
            assert_eq!(asked.consistent_read(), Some(true), "every read is strongly consistent");
            let keys = asked.keys().to_vec();
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < unprocessed_calls {
                let again = KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().expect("keys set");
                return BatchGetItemOutput::builder().responses("inbox", Vec::new()).unprocessed_keys("inbox", again).build();
            }
            let found: Vec<Item> = table.iter().filter(|item| keys.iter().any(|k| k.get("pk") == item.get("pk"))).cloned().collect();
            BatchGetItemOutput::builder().responses("inbox", found).set_unprocessed_keys(Some(HashMap::new())).build()
        })
    }

    fn sequenced(id: &str, sequence: u64) -> EventMetadata {
        EventMetadata { id: id.into(), sequence, ..metadata() }
    }

    /// After an ordered event's commit, its own parked copy and the event waiting for it are one
    /// consistent `BatchGetItem`; a row at the own key held by another event is not "own".
    #[tokio::test]
    async fn parked_around_reads_both_rows_in_one_consistent_batch() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let table = vec![parked_row("e-2", 2, 1), parked_row("e-3", 3, 2)];
        let rule = batch_get(table, 0);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let around = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.unwrap();
        assert_eq!(around.own.map(|p| p.event_id).as_deref(), Some("e-2"), "e-2 was parked before it was applied");
        assert_eq!(around.next.map(|p| (p.event_id, p.waits_for)), Some(("e-3".to_owned(), 2)));
        let other = inbox.parked_around(&sequenced("e-2-other-id", 2), Some(2)).await.unwrap();
        assert_eq!(other.own, None, "another event id holds the row at the own key");
        assert_eq!(rule.num_calls(), 2, "one call per applied event");
    }

    /// A key `BatchGetItem` leaves unprocessed is requested again, never taken as absent: the
    /// parked successor is found on the second call.
    #[tokio::test]
    async fn an_unprocessed_key_is_read_again_not_taken_as_absent() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let rule = batch_get(vec![parked_row("e-3", 3, 2)], 1);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let around = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.unwrap();
        assert_eq!(around.next.map(|p| p.event_id).as_deref(), Some("e-3"));
        assert_eq!(rule.num_calls(), 2);
    }

    /// Keys unprocessed through every retry fail the read (retryable): the consumer's drain
    /// then fails the invocation, and its redelivery drains; nothing is reported absent.
    #[tokio::test]
    async fn keys_unprocessed_through_every_retry_fail_the_read() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let rule = batch_get(vec![parked_row("e-3", 3, 2)], usize::MAX);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let error = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.expect_err("never read");
        assert!(error.is_retryable(), "{error}");
        assert!(error.to_string().contains("unprocessed"), "{error}");
        assert_eq!(rule.num_calls(), UNPROCESSED_KEYS_ATTEMPTS as usize);
    }

    /// A duplicate does not know the aggregate's last sequence: the batch reads the ordering row
    /// too, with the row waiting for the event's own sequence; when the ordering row has moved
    /// further, one consistent `GetItem` reads the row waiting for it.
    #[tokio::test]
    async fn a_duplicate_reads_the_ordering_row_in_the_same_batch() {
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let ordering = |last: u64| {
            let pk = AttributeValue::S("c#aggregate#Order#o-1".into());
            HashMap::from([("pk".to_owned(), pk), ("last_sequence".to_owned(), AttributeValue::N(last.to_string()))])
        };
        let rule = batch_get(vec![ordering(2), parked_row("e-3", 3, 2)], 0);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let around = inbox.parked_around(&sequenced("e-2", 2), None).await.unwrap();
        assert_eq!((around.last, around.next.map(|p| p.event_id)), (2, Some("e-3".to_owned())));
        assert_eq!(rule.num_calls(), 1, "one call when the aggregate stands at the duplicate's sequence");

        let rule = batch_get(vec![ordering(3), parked_row("e-3", 3, 2)], 0);
        let e4 = parked_row("e-4", 4, 3);
        let get = mock!(Client::get_item)
            .match_requests(|r| {
                r.consistent_read() == Some(true)
                    && r.key().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).map(String::as_str) == Some("c#parked#Order#o-1#3")
            })
            .then_output(move || GetItemOutput::builder().set_item(Some(e4.clone())).build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule, &get]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let around = inbox.parked_around(&sequenced("e-2", 2), None).await.unwrap();
        assert_eq!((around.last, around.next.map(|p| p.event_id)), (3, Some("e-4".to_owned())));
        assert_eq!((rule.num_calls(), get.num_calls()), (1, 1));
    }

    /// A `TransactWriteItems` cancellation: item `failed` (0-based) `ConditionalCheckFailed` with
    /// `item` as stored (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), `None` for the others.
    fn cancelled_at(failed: usize, items: usize, item: Option<Item>) -> aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError {
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        use aws_sdk_dynamodb::types::CancellationReason;
        let reasons = (0..items)
            .map(|i| match i == failed {
                true => CancellationReason::builder().code("ConditionalCheckFailed").set_item(item.clone()).build(),
                false => CancellationReason::builder().code("None").build(),
            })
            .collect();
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
            TransactionCanceledException::builder().set_cancellation_reasons(Some(reasons)).message("Transaction cancelled").build(),
        )
    }

    fn ordering_row(last: Option<u64>, parked: Option<i64>) -> Item {
        let mut item = HashMap::from([("pk".to_owned(), AttributeValue::S("c#aggregate#Order#o-1".into()))]);
        if let Some(last) = last {
            item.insert("last_sequence".to_owned(), AttributeValue::N(last.to_string()));
        }
        if let Some(parked) = parked {
            item.insert(PARKED_COUNT.to_owned(), AttributeValue::N(parked.to_string()));
        }
        item
    }

    /// The ordering update of a transaction request (its second item).
    fn ordering_update(request: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput) -> (String, String) {
        let update = request.transact_items()[1].update().expect("the ordering row's update");
        (update.update_expression().to_owned(), update.condition_expression().unwrap_or_default().to_owned())
    }

    /// Nothing parked: ONE transaction, on the condition that the count is 0 (or the row absent),
    /// proves it; the consumer then reads nothing.
    #[tokio::test]
    async fn an_ordered_event_with_nothing_parked_is_one_transaction_that_proves_it() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let rule = mock!(Client::transact_write_items)
            .match_requests(|r| ordering_update(r).1.contains("parked_count = :zero"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let applied = inbox.apply_checking_parked(&sequenced("e-2", 2), &PayloadHash::of("h"), Vec::new(), None).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, true));
        assert_eq!(rule.num_calls(), 1);
    }

    /// The race the count closes: sequence 3 parked (its row and the count in one transaction)
    /// just before sequence 2's transaction. That transaction's condition is then false on the
    /// count alone (the sequence is in order): it is made again without it, and the answer is
    /// "read" (`false`), never "nothing parked" — the consumer's read then finds 3 and drains it.
    #[tokio::test]
    async fn a_park_before_the_commit_makes_the_commit_say_read() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let refused = mock!(Client::transact_write_items)
            .match_requests(|r| ordering_update(r).1.contains("parked_count = :zero"))
            .then_error(|| cancelled_at(1, 2, Some(ordering_row(Some(1), Some(1)))));
        let plain = mock!(Client::transact_write_items)
            .match_requests(|r| !ordering_update(r).1.contains("parked_count") && ordering_update(r).0.contains("if_not_exists(parked_count"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&refused, &plain]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let applied = inbox.apply_checking_parked(&sequenced("e-2", 2), &PayloadHash::of("h"), Vec::new(), None).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, false));
        assert_eq!((refused.num_calls(), plain.num_calls()), (1, 1));
    }

    /// The count's condition never hides a gap or a duplicate: a refusal whose stored sequence is
    /// out of order is reported as before, in one transaction.
    #[tokio::test]
    async fn a_gap_or_a_duplicate_under_the_count_condition_is_reported_as_before() {
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        for (last, sequence) in [(Some(1), 3), (Some(5), 3), (None, 2)] {
            let rule = mock!(Client::transact_write_items).then_error(move || cancelled_at(1, 2, Some(ordering_row(last, Some(0)))));
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
            let applied = inbox.apply_checking_parked(&sequenced("e", sequence), &PayloadHash::of("h"), Vec::new(), None).await;
            match last {
                Some(5) => assert_eq!(applied.unwrap(), (InboxOutcome::Duplicate, false)),
                _ => assert!(matches!(applied, Err(InboxError::SequenceGap { .. })), "{applied:?}"),
            }
            assert_eq!(rule.num_calls(), 1);
        }
    }

    /// The drain's event deletes its counted parked row and takes it off the count; a row parked
    /// before the count existed (no `counted`: the delete's condition is false) is deleted in a
    /// second transaction without touching the count, so the count never falls below the rows.
    #[tokio::test]
    async fn the_drain_takes_a_counted_row_off_the_count_and_an_uncounted_one_alone() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let counted = |r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput| {
            r.transact_items()[2].delete().and_then(|d| d.condition_expression()).is_some_and(|c| c.contains("attribute_exists(#counted)"))
        };
        let refused = mock!(Client::transact_write_items)
            .match_requests(move |r| counted(r) && ordering_update(r).0.contains("ADD parked_count :minus_one"))
            .then_error(|| cancelled_at(2, 3, None));
        let uncounted = mock!(Client::transact_write_items)
            .match_requests(move |r| !counted(r) && !ordering_update(r).0.contains("ADD"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&refused, &uncounted]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let drained = RecordedOutcome::new("applied").unparking(Some(2));
        let applied = inbox.apply_checking_parked(&sequenced("e-3", 3), &PayloadHash::of("h"), Vec::new(), Some(&drained)).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, false));
        assert_eq!((refused.num_calls(), uncounted.num_calls()), (1, 1));
    }

    /// The drained key holds a row that is neither this event's counted row nor its uncounted
    /// one (another event's, or one counted since): the event commits without touching it or the
    /// count (three transactions), and the row stays for the drain or the parked check.
    #[tokio::test]
    async fn a_row_at_the_drained_key_that_is_not_this_events_is_left_with_its_count() {
        use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsInput, TransactWriteItemsOutput};
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let delete_condition = |r: &TransactWriteItemsInput| {
            r.transact_items().get(2).and_then(|i| i.delete()).and_then(|d| d.condition_expression()).unwrap_or_default().to_owned()
        };
        let counted = mock!(Client::transact_write_items)
            .match_requests(move |r| delete_condition(r) == "event_id = :id AND attribute_exists(#counted)")
            .then_error(|| cancelled_at(2, 3, None));
        let uncounted = mock!(Client::transact_write_items)
            .match_requests(move |r| delete_condition(r).starts_with("attribute_not_exists(pk) OR"))
            .then_error(|| cancelled_at(2, 3, None));
        let plain = mock!(Client::transact_write_items)
            .match_requests(|r| r.transact_items().len() == 2 && !ordering_update(r).0.contains("ADD"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&counted, &uncounted, &plain]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        let drained = RecordedOutcome::new("applied").unparking(Some(2));
        let applied = inbox.apply_checking_parked(&sequenced("e-3", 3), &PayloadHash::of("h"), Vec::new(), Some(&drained)).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, false));
        assert_eq!((counted.num_calls(), uncounted.num_calls(), plain.num_calls()), (1, 1, 1));
    }

    /// Parking is one transaction of the row and the count; a `TransactionConflict` (the
    /// predecessor's transaction on the ordering row) is made again; the same event parked again
    /// is not counted twice; another event id at the key is "not parked".
    #[tokio::test]
    async fn parking_counts_once_and_survives_a_conflict_with_the_predecessor() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let conflict = || {
            let reasons = vec![CancellationReason::builder().code("None").build(), CancellationReason::builder().code("TransactionConflict").build()];
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder().set_cancellation_reasons(Some(reasons)).message("Transaction cancelled").build(),
            )
        };
        let is_park = |r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput| {
            r.transact_items().len() == 2
                && r.transact_items()[0].put().is_some_and(|p| p.item().get("counted") == Some(&AttributeValue::Bool(true)))
                && r.transact_items()[1].update().is_some_and(|u| u.update_expression().contains("ADD parked_count :by"))
        };
        let first = mock!(Client::transact_write_items).match_requests(is_park).then_error(conflict);
        let second = mock!(Client::transact_write_items).match_requests(is_park).then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&first, &second]);
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
        assert!(inbox.park(&sequenced("e-3", 3), 2, "{}").await.unwrap());
        assert_eq!((first.num_calls(), second.num_calls()), (1, 1));

        for (holder, parked) in [("e-3", true), ("e-3-other", false)] {
            let row = parked_row(holder, 3, 2);
            let rule = mock!(Client::transact_write_items).then_error(move || cancelled_at(0, 2, Some(row.clone())));
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60)).ordered();
            assert_eq!(inbox.park(&sequenced("e-3", 3), 2, "{}").await.unwrap(), parked, "row held by {holder}");
            assert_eq!(rule.num_calls(), 1, "no second count");
        }
    }
}
