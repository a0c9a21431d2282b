//! The parked check: how a real sequence gap pages someone instead of waiting unseen.
//!
//! An ordered consumer parks an event that arrives before its predecessor
//! ([`ParkedEvent`](crate::ordering::ParkedEvent)); transient reordering unparks it within
//! milliseconds. A predecessor that never comes leaves it parked, and nothing in the event flow
//! notices. So the consumer kit (`blocks/consumer-kit`) schedules a check: an EventBridge
//! schedule rule (`rate(5 minutes)`) sends the constant message
//! `{"outbox":"check-parked","gap_after_seconds":<SequenceGapAlarmSeconds>}` to the consumer's
//! own delivery queue, and the consumer, recognising it among its events
//! ([`ParkedCheck::recognise`]), runs [`Consumer::check_parked`]:
//!
//! 1. one `Query` of the inbox table's parked index for its own parked rows, oldest first
//!    ([`Ordered::parked_oldest`](crate::ordering::Ordered::parked_oldest), at most [`CHECK_LIMIT`]);
//! 2. the gauges `OldestParkedAgeSeconds` and `EventsParkedNow` (namespace `OutboxConsumer`,
//!    dimension `function`): the kit's `ParkedGapAlarm` fires when the oldest age reaches
//!    `SequenceGapAlarmSeconds`;
//! 3. one WARN line per event parked longer than the gap limit (event id, aggregate, sequence,
//!    the sequence it waits for, age, and the release command);
//! 4. a safety net: a parked event whose predecessor is already applied (the aggregate's
//!    `last_sequence` ≥ `waits_for`) is applied now, as a delivery of its own, its row removed,
//!    and counted in `ParkedRecovered`. The parking protocol leaves none (the ordering row's
//!    count, [`crate::ordering::PARKED_COUNT`], makes every commit see them): the net is for a
//!    row the protocol did not foresee, never for a stranded event.
//!
//! The message is always acknowledged, even when the check fails (a throttled `Query`, a table
//! without the index: logged at ERROR): the next one comes with the next period, and a check
//! message must never reach the dead-letter queue. A failed check emits no gauge, so the alarm
//! (`TreatMissingData: notBreaching`) stays as it was. A consumer without ordering
//! ([`InboxStore::ordering`] `None`) parks nothing: its check finds nothing.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::dispatch::{Consumer, Handled};
use super::{metrics, DeadLetterSink};
use crate::inbox::InboxStore;

/// The `outbox` value of the check message: `{"outbox":"check-parked"}`.
pub const CHECK_PARKED: &str = "check-parked";

/// The gap limit when the message names none: 15 minutes (the kit's default
/// `SequenceGapAlarmSeconds`).
pub const DEFAULT_GAP_AFTER: Duration = Duration::from_secs(900);

/// Most parked events one check reads (the index is queried in pages of up to 1,000).
pub const CHECK_LIMIT: usize = 1000;

/// A parked check, as the scheduled message asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParkedCheck {
    /// How long an event may stay parked before it counts as a real gap (`gap_after_seconds`).
    pub gap_after: Duration,
}

impl Default for ParkedCheck {
    fn default() -> Self {
        Self { gap_after: DEFAULT_GAP_AFTER }
    }
}

#[derive(Deserialize)]
struct Message {
    outbox: String,
    #[serde(default)]
    gap_after_seconds: Option<u64>,
}

impl ParkedCheck {
    /// A check with gap limit `gap_after`.
    pub fn new(gap_after: Duration) -> Self {
        Self { gap_after }
    }

    /// The check an SQS message body asks for: `{"outbox":"check-parked"}`, with an optional
    /// `"gap_after_seconds": n`. `None` for anything else (an event has no top-level `outbox`).
    pub fn recognise(body: &str) -> Option<Self> {
        if !body.contains(CHECK_PARKED) {
            return None;
        }
        let message: Message = serde_json::from_str(body).ok()?;
        (message.outbox == CHECK_PARKED).then(|| Self { gap_after: message.gap_after_seconds.map_or(DEFAULT_GAP_AFTER, Duration::from_secs) })
    }

    /// The message body that asks for this check (what the kit's schedule rule sends).
    pub fn message(&self) -> String {
        serde_json::json!({"outbox": CHECK_PARKED, "gap_after_seconds": self.gap_after.as_secs()}).to_string()
    }
}

/// What one parked check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[non_exhaustive]
pub struct ParkedReport {
    /// Events parked now (at least this many when not `complete`).
    pub parked: usize,
    /// Whether every parked event was read (false: stopped at [`CHECK_LIMIT`]).
    pub complete: bool,
    /// How long the oldest of them has been parked, seconds (0: none).
    pub oldest_age_seconds: u64,
    /// Of them, parked longer than the gap limit.
    pub gaps: usize,
    /// Parked events whose predecessor was already applied, applied by the check.
    pub recovered: usize,
    /// Why the check could not run (then no gauge was emitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<S, D, O> Consumer<S, D, O>
where
    S: InboxStore,
    D: DeadLetterSink,
    O: Serialize + Send + 'static,
{
    /// Runs the parked check (see [`ParkedCheck`]): lists this consumer's parked events,
    /// applies those whose predecessor is already applied (while the `deadline` allows), emits
    /// the gauges and WARNs about each event parked longer than `check.gap_after`. Never fails:
    /// a store error is logged and returned in [`ParkedReport::error`].
    pub async fn check_parked(&self, check: &ParkedCheck, deadline: Instant) -> ParkedReport {
        let store = self.store();
        let consumer = store.consumer().to_owned();
        let listed = match store.ordering() {
            Some(ordering) => ordering.parked_oldest(CHECK_LIMIT).await,
            None => Ok(crate::ordering::ParkedList { events: Vec::new(), complete: true }),
        };
        let list = match listed {
            Ok(list) => list,
            Err(e) => {
                let hint = if e.is_missing_index() {
                    format!("the inbox table has no index {} (the consumer kit's template defines it)", crate::ordering::PARKED_INDEX)
                } else {
                    "the next check retries".to_owned()
                };
                tracing::error!(consumer = %consumer, error = %e, hint = %hint, "parked check failed: no gauge emitted");
                return ParkedReport { error: Some(format!("{e}; {hint}")), ..ParkedReport::default() };
            }
        };
        let now = chrono::Utc::now();
        let mut report = ParkedReport { complete: list.complete, ..ParkedReport::default() };
        // In sequence order per aggregate, not the listing's age order: events parked in the same
        // millisecond tie on `parked_at`, and a later one checked first would count as waiting
        // although recovering its predecessor drains it a moment later.
        let mut events: Vec<&crate::ordering::ParkedEvent> = list.events.iter().collect();
        events.sort_by(|a, b| (&a.aggregate_type, &a.aggregate_id, a.sequence).cmp(&(&b.aggregate_type, &b.aggregate_id, b.sequence)));
        for parked in events {
            if Instant::now() + self.retry_policy().margin < deadline {
                match self.recover(parked, deadline).await {
                    Recovery::Applied => {
                        report.recovered += 1;
                        continue;
                    }
                    Recovery::Settled => continue,
                    Recovery::Waiting => {}
                }
            }
            let age = parked.age(now);
            report.parked += 1;
            report.oldest_age_seconds = report.oldest_age_seconds.max(age.as_secs());
            if age >= check.gap_after {
                report.gaps += 1;
                let aggregate = parked.aggregate();
                tracing::warn!(
                    consumer = %consumer,
                    event_id = %parked.event_id,
                    event_type = %parked.event_type,
                    aggregate = %aggregate,
                    sequence = parked.sequence,
                    waits_for = parked.waits_for,
                    age_seconds = age.as_secs(),
                    gap_after_seconds = check.gap_after.as_secs(),
                    release = %format!("outbox ordering release --consumer {consumer} --aggregate {aggregate} --through {}", parked.waits_for),
                    "sequence gap: an event has waited for its predecessor longer than the gap limit; if the predecessor never comes, release it"
                );
            }
        }
        metrics::parked_now(report.parked, report.oldest_age_seconds);
        tracing::info!(
            consumer = %consumer,
            parked = report.parked,
            complete = report.complete,
            oldest_age_seconds = report.oldest_age_seconds,
            gaps = report.gaps,
            recovered = report.recovered,
            "parked check"
        );
        report
    }

    /// The safety net: applies `parked` (and what waits behind it) when its predecessor is
    /// already applied.
    async fn recover(&self, parked: &crate::ordering::ParkedEvent, deadline: Instant) -> Recovery {
        let store = self.store();
        let Some(ordering) = store.ordering() else { return Recovery::Waiting };
        let last = match ordering.last_sequence(&parked.aggregate_type, &parked.aggregate_id).await {
            Ok(last) => last,
            Err(e) => {
                tracing::warn!(event_id = %parked.event_id, error = %e, "parked check: reading the ordering row failed");
                return Recovery::Waiting;
            }
        };
        if last < parked.waits_for {
            return Recovery::Waiting;
        }
        // The listing has no payload: read the row itself (consistent).
        let row = match ordering.parked(&parked.aggregate_type, &parked.aggregate_id, parked.waits_for).await {
            Ok(Some(row)) if row.event_id == parked.event_id => row,
            Ok(_) => return Recovery::Settled,
            Err(e) => {
                tracing::warn!(event_id = %parked.event_id, error = %e, "parked check: reading the parked row failed");
                return Recovery::Waiting;
            }
        };
        let message = super::message::Message::read(&row.payload);
        if message.not_json.is_some() {
            return Recovery::Waiting;
        }
        tracing::warn!(
            consumer = store.consumer(),
            event_id = %row.event_id,
            aggregate = %row.aggregate(),
            sequence = row.sequence,
            waits_for = row.waits_for,
            last_sequence = last,
            "parked check: a parked event's predecessor is already applied; applying it now (the parking protocol should have)"
        );
        let handled = Box::pin(self.handle_one(&message, deadline, false)).await;
        match handled {
            Ok(response) if matches!(response.outcome, Handled::Parked { .. }) => Recovery::Waiting,
            Ok(_) => {
                // Applied as a delivery of its own, its row may be left (its delivery settled it
                // as the invocation's own event, whose parked copy it removes only after a read
                // that succeeded). Removed here (nothing when it is gone).
                let unparked = ordering.unpark(&row).await;
                if let Err(e) = unparked {
                    tracing::warn!(event_id = %row.event_id, error = %e, "parked check: removing the applied event's parked row failed; the next check finds it a duplicate");
                }
                metrics::parked_recovered();
                Recovery::Applied
            }
            Err(e) => {
                tracing::warn!(event_id = %row.event_id, error = %e, "parked check: applying the parked event failed; the next check retries");
                Recovery::Waiting
            }
        }
    }
}

/// What the check's safety net did with one listed parked event.
enum Recovery {
    /// Its predecessor was applied: the check applied it.
    Applied,
    /// Gone from the table since the listing (settled by a delivery or a drain).
    Settled,
    /// Still waiting for its predecessor (or the check could not tell).
    Waiting,
}
