//! What the local runtime observed, for `demo` reports and tests.
//!
//! Bounded: a long `up` session keeps counters, a window of the most recent deliveries and of
//! the most recent commit → effect latencies, never one entry per event. Only a caller that asks
//! for it ([`Stats::record_every_event`], what `demo` does to prove each of the orders it
//! committed took effect exactly once) gets every event's deliveries, which then grows with the
//! events it sends. [`status`] shows it to people.

pub mod status;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::SystemTime;

/// How many of the most recent successful deliveries [`Counts::recent`] keeps.
pub const RECENT_DELIVERIES: usize = 256;
/// How many of the most recent commit → effect latencies [`Counts::latencies`] keeps.
pub const LATENCY_WINDOW: usize = 10_000;
/// How many distinct outcome names [`Counts::outcomes`] counts separately; deliveries with
/// further names are counted under [`OTHER_OUTCOMES`].
pub const OUTCOME_NAMES: usize = 32;
/// The [`Counts::outcomes`] key of outcome names beyond the first [`OUTCOME_NAMES`].
pub const OTHER_OUTCOMES: &str = "(other)";
/// How many deliveries of one event [`Counts::per_event`] keeps (one more than two is already
/// an event applied twice).
pub const DELIVERIES_PER_EVENT: usize = 8;

/// Counters shared by the pipelines.
#[derive(Debug, Default)]
pub struct Stats {
    inner: Mutex<Counts>,
    /// The Custom Event Bus the runtime's endpoint plays, when it is ours ([`Stats::watch_custom_bus`]).
    custom_bus: Mutex<Option<std::sync::Arc<crate::custom_bus::CustomBus>>>,
    /// The functions' log lines, by logical id (the last [`LOG_LINES_PER_FUNCTION`] each), when
    /// [`Stats::capture_logs`] asked for them.
    logs: Mutex<Option<HashMap<String, VecDeque<String>>>>,
}

/// How many of a function's most recent log lines [`Stats::log_lines`] keeps.
pub const LOG_LINES_PER_FUNCTION: usize = 5_000;

/// One successful consumer delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The event's `detail.metadata.id` (the SQS message id when it has none).
    pub event_id: String,
    /// The `outcome` field of the function's response (`"ok"` when it has none).
    pub outcome: String,
    /// Milliseconds from the event's `detail.metadata.time` to the end of the invocation.
    pub latency_ms: Option<i64>,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Stream records read from the outbox stream(s).
    pub stream_records: usize,
    /// Stream records dropped by the mapping's `FilterCriteria`.
    pub stream_records_filtered: usize,
    /// Relay invocations.
    pub relay_invocations: usize,
    /// Relay invocations answered with `batchItemFailures` or an error.
    pub relay_failed_invocations: usize,
    /// Stream batches sent to the mapping's on-failure destination.
    pub stream_batches_dead_lettered: usize,
    /// What the functions reported as CloudWatch Embedded Metric Format lines (`lambda::emf`):
    /// per function logical id, per metric name, the sum of the values (for counters such as
    /// the relay's `EventsPublished`, `PutEventsCalls`, `RecordsSeen`: the totals).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// Messages the SQS event source mappings received (`mappings::sqs`; every receive
    /// of a message counts, redeliveries included).
    pub sqs_messages_received: usize,
    /// Received messages that matched no `FilterCriteria` (deleted without invoking).
    pub sqs_messages_filtered: usize,
    /// SQS mapping invocations.
    pub sqs_invocations: usize,
    /// SQS mapping invocations that failed (nothing deleted).
    pub sqs_invocation_errors: usize,
    /// Messages an SQS mapping invocation did not settle (reported in `batchItemFailures`, or in a
    /// failed invocation): they come back after their visibility timeout.
    pub sqs_messages_failed: usize,
    /// Messages the SQS mappings deleted (settled or filtered out).
    pub sqs_messages_deleted: usize,
    /// Consumer invocations (all attempts).
    pub consumer_invocations: usize,
    /// Consumer invocations that failed.
    pub consumer_errors: usize,
    /// Events sent to a consumer's on-failure destination.
    pub consumer_dead_lettered: usize,
    /// Successful consumer deliveries per outcome (`outcome` field of the response); at most
    /// [`OUTCOME_NAMES`] names, the rest under [`OTHER_OUTCOMES`].
    pub outcomes: BTreeMap<String, usize>,
    /// The last [`RECENT_DELIVERIES`] successful deliveries, oldest first.
    pub recent: VecDeque<Delivery>,
    /// Commit → effect latencies (ms) of the last [`LATENCY_WINDOW`] successful deliveries that
    /// had an effect (outcome other than `duplicate`), oldest first.
    pub latencies: VecDeque<i64>,
    /// Every event's successful deliveries (at most [`DELIVERIES_PER_EVENT`] each), by event id;
    /// `None` unless [`Stats::record_every_event`] asked for it.
    pub per_event: Option<HashMap<String, Vec<Delivery>>>,
    /// What the Custom Event Bus did (published, deduplicated, delivered, retried, sent to
    /// on-failure) and its delivery backlog; `None` when the runtime does not play it.
    pub custom_bus: Option<(crate::custom_bus::BusStats, usize)>,
}

impl Counts {
    /// The sum of `function`'s metric `name` (0 when it never reported it).
    pub fn metric(&self, function: &str, name: &str) -> f64 {
        self.metrics.get(function).and_then(|m| m.get(name)).copied().unwrap_or(0.0)
    }

    /// Number of successful deliveries with `outcome`.
    pub fn outcome_count(&self, outcome: &str) -> usize {
        self.outcomes.get(outcome).copied().unwrap_or(0)
    }

    /// The recorded deliveries of `event_id` (empty unless [`Stats::record_every_event`] is on).
    pub fn deliveries(&self, event_id: &str) -> &[Delivery] {
        self.per_event.as_ref().and_then(|m| m.get(event_id)).map_or(&[], Vec::as_slice)
    }

    /// Whether `event_id` had a delivery with `outcome` (per [`Counts::deliveries`]).
    pub fn has_outcome(&self, event_id: &str, outcome: &str) -> bool {
        self.deliveries(event_id).iter().any(|d| d.outcome == outcome)
    }

    /// How many deliveries of `event_id` had an effect (outcome other than `duplicate` and
    /// `parked`, which wait for a later delivery).
    pub fn effects(&self, event_id: &str) -> usize {
        self.deliveries(event_id).iter().filter(|d| has_effect(&d.outcome)).count()
    }

    /// The window of latencies (ms, event time → effect) of deliveries that had an effect, sorted.
    pub fn effect_latencies(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.latencies.iter().copied().collect();
        v.sort_unstable();
        v
    }
}

/// Whether a delivery's outcome is an effect: not `duplicate` (applied before) nor `parked`
/// (waiting for its predecessor; its effect comes with a later invocation).
pub fn has_effect(outcome: &str) -> bool {
    outcome != "duplicate" && outcome != "parked"
}

impl Stats {
    /// Applies `f` to the counters.
    pub fn update(&self, f: impl FnOnce(&mut Counts)) {
        // A poisoned lock only means another task panicked mid-update; counts stay usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    /// A copy of the counters, with the Custom Event Bus's when it is watched.
    pub fn snapshot(&self) -> Counts {
        let mut counts = self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(bus) = self.custom_bus.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            counts.custom_bus = Some((bus.stats(), bus.backlog()));
        }
        counts
    }

    /// From now on, [`Stats::snapshot`] includes what `bus` did ([`Counts::custom_bus`]).
    pub fn watch_custom_bus(&self, bus: std::sync::Arc<crate::custom_bus::CustomBus>) {
        *self.custom_bus.lock().unwrap_or_else(|p| p.into_inner()) = Some(bus);
    }

    /// From now on, also record every event's deliveries in [`Counts::per_event`] (memory grows
    /// with the number of events: for runs of a known size such as `demo`, not for `up`).
    pub fn record_every_event(&self) {
        self.update(|c| {
            c.per_event.get_or_insert_with(HashMap::new);
        });
    }

    /// From now on, keep the functions' log lines (each function's last
    /// [`LOG_LINES_PER_FUNCTION`]) for [`Stats::log_lines`]: what a test reads a function's
    /// logs by, as CloudWatch Logs would hold them.
    pub fn capture_logs(&self) {
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new);
    }

    /// Keeps one log line of `function` when [`Stats::capture_logs`] asked for them.
    pub fn add_log_line(&self, function: &str, line: &str) {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        let Some(logs) = logs.as_mut() else { return };
        let lines = logs.entry(function.to_owned()).or_default();
        if lines.len() == LOG_LINES_PER_FUNCTION {
            lines.pop_front();
        }
        lines.push_back(line.to_owned());
    }

    /// The log lines of `function` kept so far, oldest first (none unless [`Stats::capture_logs`]).
    pub fn log_lines(&self, function: &str) -> Vec<String> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.as_ref().and_then(|l| l.get(function)).map(|l| l.iter().cloned().collect()).unwrap_or_default()
    }

    /// Adds the values of one EMF document of `function` (parsed by `lambda::emf::parse`).
    pub fn add_metrics(&self, function: &str, values: &[(String, f64)]) {
        if values.is_empty() {
            return;
        }
        self.update(|c| {
            let metrics = c.metrics.entry(function.to_owned()).or_default();
            for (name, value) in values {
                *metrics.entry(name.clone()).or_default() += value;
            }
        });
    }

    /// Records a successful consumer delivery.
    pub fn add_outcome(&self, event_id: &str, outcome: &str, event_time: Option<SystemTime>) {
        let latency_ms = event_time.and_then(|t| SystemTime::now().duration_since(t).ok()).map(|d| d.as_millis() as i64);
        let delivery = Delivery { event_id: event_id.to_owned(), outcome: outcome.to_owned(), latency_ms };
        self.update(|c| {
            let key = if c.outcomes.contains_key(outcome) || c.outcomes.len() < OUTCOME_NAMES { outcome } else { OTHER_OUTCOMES };
            *c.outcomes.entry(key.to_owned()).or_default() += 1;
            if let (Some(latency), true) = (latency_ms, has_effect(outcome)) {
                if c.latencies.len() == LATENCY_WINDOW {
                    c.latencies.pop_front();
                }
                c.latencies.push_back(latency);
            }
            if let Some(per_event) = c.per_event.as_mut() {
                let deliveries = per_event.entry(event_id.to_owned()).or_default();
                if deliveries.len() < DELIVERIES_PER_EVENT {
                    deliveries.push(delivery.clone());
                }
            }
            if c.recent.len() == RECENT_DELIVERIES {
                c.recent.pop_front();
            }
            c.recent.push_back(delivery);
        });
    }
}

/// The `q`-quantile (0..=1) of sorted `values`, nearest rank.
pub fn percentile(values: &[i64], q: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_add_up_per_function_and_name() {
        let stats = Stats::default();
        stats.add_metrics("Relay", &[("EventsPublished".into(), 3.0), ("PutEventsCalls".into(), 1.0)]);
        stats.add_metrics("Relay", &[("EventsPublished".into(), 4.0)]);
        stats.add_metrics("Other", &[("EventsPublished".into(), 100.0)]);
        let c = stats.snapshot();
        assert_eq!((c.metric("Relay", "EventsPublished"), c.metric("Relay", "PutEventsCalls")), (7.0, 1.0));
        assert_eq!(c.metric("Relay", "RecordsFailed"), 0.0);
        assert_eq!(c.metric("Nobody", "EventsPublished"), 0.0);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&[7], 0.99), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }

    /// What an `up` session holds after many events: counters and fixed-size windows, whatever
    /// the number of events, ids and outcome names.
    #[test]
    fn state_stays_bounded_after_many_events() {
        let stats = Stats::default();
        let long_ago = SystemTime::now() - std::time::Duration::from_secs(1);
        let events = 3 * LATENCY_WINDOW;
        for i in 0..events {
            let outcome = if i % 10 == 0 { "duplicate".to_owned() } else { format!("outcome-{}", i % 100) };
            stats.add_outcome(&format!("event-{i}"), &outcome, Some(long_ago));
        }
        let c = stats.snapshot();
        assert_eq!(c.outcomes.values().sum::<usize>(), events, "every delivery is counted");
        assert_eq!(c.outcomes.len(), OUTCOME_NAMES + 1, "{:?}", c.outcomes.keys());
        assert_eq!(c.outcome_count("duplicate"), events / 10);
        assert!(c.outcome_count(OTHER_OUTCOMES) > 0);
        assert_eq!(c.recent.len(), RECENT_DELIVERIES);
        assert_eq!(c.recent.back().map(|d| d.event_id.as_str()), Some(format!("event-{}", events - 1).as_str()), "the newest is kept");
        assert_eq!(c.latencies.len(), LATENCY_WINDOW);
        assert!(c.latencies.iter().all(|l| *l >= 1000), "latencies count from the event time");
        assert!(c.per_event.is_none(), "no per-event record unless asked for");
        assert!(c.deliveries("event-1").is_empty());
    }

    #[test]
    fn every_event_is_recorded_when_asked_and_repeats_are_capped() {
        let stats = Stats::default();
        stats.add_outcome("before", "reserved", None);
        stats.record_every_event();
        stats.add_outcome("e-1", "reserved", None);
        stats.add_outcome("e-1", "duplicate", None);
        stats.add_outcome("e-2", "rejected", None);
        for _ in 0..(2 * DELIVERIES_PER_EVENT) {
            stats.add_outcome("e-3", "reserved", None);
        }
        let c = stats.snapshot();
        assert!(c.deliveries("before").is_empty(), "recorded only from the request on");
        assert!(c.has_outcome("e-1", "reserved") && c.has_outcome("e-1", "duplicate") && !c.has_outcome("e-1", "rejected"));
        assert_eq!((c.effects("e-1"), c.effects("e-2"), c.effects("e-3")), (1, 1, DELIVERIES_PER_EVENT));
        assert_eq!(c.effects("never-delivered"), 0);
        assert_eq!(c.outcome_count("reserved"), 2 + 2 * DELIVERIES_PER_EVENT, "counters count every delivery");
        assert!(c.effect_latencies().is_empty(), "no event time, no latency");
    }
}
