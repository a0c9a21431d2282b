//! Parking: an ordered consumer's answer to an event that arrives before its predecessor.
//!
//! Reordering is normal, not a failure: when the relay drains a backlog, an order's
//! `OrderCreated` and `OrderCancelled` reach EventBridge within milliseconds of each other, and
//! EventBridge invokes the consumer for both at once. Instead of failing the early event (and
//! spending its retries while it waits), the consumer **parks** it — stores the invocation
//! payload verbatim in the inbox table, beside the aggregate's ordering row — and acknowledges
//! it. When the predecessor is applied, the same invocation applies the parked successors in
//! sequence, each as its own delivery: its handler, its own `TransactWriteItems` with its inbox
//! claim (so exactly once, as if EventBridge had delivered it then).
//!
//! | row | key (`pk`) | attributes |
//! |---|---|---|
//! | ordering | `<consumer>#aggregate#<aggregate_type>#<aggregate_id>` | `last_sequence`, `parked_count` (the aggregate's parked rows) |
//! | parked | `<consumer>#parked#<aggregate_type>#<aggregate_id>#<waits_for>` | `kind` = `parked`, `parked_consumer` = `<consumer>`, `event_id`, `event_type`, `sequence`, `waits_for`, `payload`, `parked_at` |
//!
//! The parked row is keyed by the sequence it waits for (the event's required predecessor,
//! [`Ordered::required_predecessor`](super::Ordered::required_predecessor)), so "what waits for sequence n" is one consistent `GetItem`,
//! with no index. Parked rows never expire (no `expires_at`): they are deleted once their event is
//! settled (applied, found a duplicate, or dead-lettered as never-succeeding).
//!
//! **No event is stranded**, without a timer: the early event writes the parked row and adds
//! one to the ordering row's `parked_count` in ONE transaction, then reads the ordering row;
//! the predecessor's transaction moves `last_sequence` on the condition that `parked_count` is
//! 0, and when that is false (something is parked) it commits without it and then reads the
//! parked rows. DynamoDB serialises the two transactions on the ordering row, and the reads
//! are strongly consistent, so whichever comes second sees the other's write and applies the
//! parked event (if both do, the inbox claim lets one win and the other is a duplicate). With
//! nothing parked, the predecessor's commit proves it and no read follows
//! ([`Ordered::apply_checking_parked`](super::Ordered::apply_checking_parked)).
//! When the invocation's budget ends before every parked successor is applied (or one of them
//! fails transiently), the invocation fails with
//! [`ConsumerError::ParkedPending`](crate::consumer::ConsumerError::ParkedPending): its event is
//! delivered again (the SQS message stays unacknowledged until its visibility timeout; an
//! asynchronous invocation is retried), finds itself a duplicate, and carries on draining.
//!
//! **A real gap** — a predecessor that never comes (dead-lettered at the relay, skipped) — leaves
//! its successor parked, not dead-lettered among poison, and pages someone:
//!
//! * **The parked index.** Only parked rows carry `parked_consumer` (the consumer's name), so the
//!   inbox table's global secondary index [`PARKED_INDEX`] (partition key `parked_consumer`, sort
//!   key `parked_at`, projecting the listing's attributes, not the payload) is *sparse*: it holds
//!   the parked rows only, and "this consumer's parked events, oldest first" is one `Query`
//!   ([`Ordered::parked_oldest`](super::Ordered::parked_oldest)), however many claim rows the table
//!   holds. Its cost: one index write when an event is parked and one when it is unparked (the
//!   row is deleted); ordinary events write nothing to it. All of one consumer's parked rows
//!   share one index partition: fine because parked rows are rare and short-lived (a
//!   partition takes 1,000 writes per second). The index is eventually consistent: a row
//!   parked a moment ago may be missing from one listing, which the next shows. Source:
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-indexes-general-sparse-indexes.html>.
//! * **The parked check** ([`crate::consumer::ParkedCheck`]): the consumer kit's schedule rule
//!   sends [`CHECK_PARKED`](crate::consumer::CHECK_PARKED) to the consumer's delivery queue
//!   every 5 minutes; the consumer queries its parked rows, emits `OldestParkedAgeSeconds` and
//!   `EventsParkedNow`, and logs one WARN per event parked longer than the gap limit (the kit's
//!   `SequenceGapAlarmSeconds`, carried in the message). The kit's `ParkedGapAlarm` fires on
//!   `OldestParkedAgeSeconds` at that limit.
//! * **The operator's verbs**: `outbox ordering parked` and `trace` list the parked events (by
//!   the index) with their age and flag those parked longer than the gap limit;
//!   `outbox ordering release` moves the aggregate past the missing sequence and applies what
//!   was parked behind it.

use serde::{Deserialize, Serialize};

/// An event waiting for its predecessor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParkedEvent {
    /// `detail.metadata.id`.
    pub event_id: String,
    /// `detail.metadata.type`.
    pub event_type: String,
    /// `detail.metadata.aggregate_type`.
    pub aggregate_type: String,
    /// `detail.metadata.subject` (the aggregate id).
    pub aggregate_id: String,
    /// The event's sequence.
    pub sequence: u64,
    /// The sequence that must be applied (or released) first.
    pub waits_for: u64,
    /// The invocation payload, verbatim (JSON text).
    pub payload: String,
    /// When it was parked (RFC 3339, milliseconds).
    pub parked_at: String,
}

impl ParkedEvent {
    /// A parked event (for stores and tests).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        event_id: impl Into<String>,
        event_type: impl Into<String>,
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        sequence: u64,
        waits_for: u64,
        payload: impl Into<String>,
        parked_at: impl Into<String>,
    ) -> Self {
        Self {
            event_id: event_id.into(),
            event_type: event_type.into(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            sequence,
            waits_for,
            payload: payload.into(),
            parked_at: parked_at.into(),
        }
    }

    /// `<aggregate_type>#<aggregate_id>`, as [`InboxError::SequenceGap`](crate::inbox::InboxError::SequenceGap) names it.
    pub fn aggregate(&self) -> String {
        format!("{}#{}", self.aggregate_type, self.aggregate_id)
    }

    /// How long it has been parked, at `now` (zero when `parked_at` does not parse).
    pub fn age(&self, now: chrono::DateTime<chrono::Utc>) -> std::time::Duration {
        chrono::DateTime::parse_from_rfc3339(&self.parked_at)
            .ok()
            .and_then(|at| (now - at.with_timezone(&chrono::Utc)).to_std().ok())
            .unwrap_or_default()
    }
}

/// What an ordered event's delivery finds parked around it once it is settled (its transaction
/// committed, or it was found a duplicate;
/// [`Ordered::parked_around`](super::Ordered::parked_around)): the rows read with strongly
/// consistent reads, after the commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ParkedAround {
    /// The event's own parked row, when an earlier delivery parked it and it still holds the
    /// row: the event is settled now, by this delivery rather than by the drain (e.g. redelivered
    /// after an operator's release), so the row is to be removed
    /// ([`Ordered::unpark`](super::Ordered::unpark)).
    pub own: Option<ParkedEvent>,
    /// The aggregate's `last_sequence` (0: none) `next` is read for.
    pub last: u64,
    /// The event parked waiting for `last`, if any: the drain applies it now.
    pub next: Option<ParkedEvent>,
}

impl ParkedAround {
    /// The answers (for stores and tests).
    pub fn new(own: Option<ParkedEvent>, last: u64, next: Option<ParkedEvent>) -> Self {
        Self { own, last, next }
    }
}

/// Value of the `kind` attribute of parked rows (for a filtered `Scan` of them, on a table
/// without [`PARKED_INDEX`]).
pub const PARKED_KIND: &str = "parked";

/// The attribute only parked rows carry (the consumer's name): the partition key of
/// [`PARKED_INDEX`].
pub const PARKED_CONSUMER: &str = "parked_consumer";

/// The attribute [`PARKED_INDEX`] sorts by: when the event was parked (RFC 3339, UTC,
/// milliseconds, so text order is time order).
pub const PARKED_AT: &str = "parked_at";

/// Name of the inbox table's sparse global secondary index of parked rows: partition key
/// [`PARKED_CONSUMER`], sort key [`PARKED_AT`], projection `INCLUDE` of
/// [`PARKED_INDEX_ATTRIBUTES`] (the consumer kit's template defines it).
pub const PARKED_INDEX: &str = "parked-by-consumer";

/// The non-key attributes [`PARKED_INDEX`] projects: what a listing shows, not the payload
/// (read it from the row by its key).
pub const PARKED_INDEX_ATTRIBUTES: [&str; 6] = ["event_id", "event_type", "aggregate_type", "subject", "sequence", "waits_for"];

/// One page of a consumer's parked events, oldest first ([`Ordered::parked_oldest`](super::Ordered::parked_oldest)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ParkedList {
    /// The parked events, oldest first, without their payload (empty: the index does not
    /// project it).
    pub events: Vec<ParkedEvent>,
    /// Whether every parked event is listed (false: stopped at the limit; more are parked).
    pub complete: bool,
}
