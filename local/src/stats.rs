//! What the local runtime observed, for `demo` reports and tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::SystemTime;

/// Counters shared by the pipelines.
#[derive(Debug, Default)]
pub struct Stats {
    inner: Mutex<Counts>,
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
    /// What the functions reported as CloudWatch Embedded Metric Format lines ([`crate::emf`]):
    /// per function logical id, per metric name, the sum of the values (for counters such as
    /// the relay's `EventsPublished`, `PutEventsCalls`, `RecordsSeen`: the totals).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// Consumer invocations (all attempts).
    pub consumer_invocations: usize,
    /// Consumer invocations that failed.
    pub consumer_errors: usize,
    /// Events sent to a consumer's on-failure destination.
    pub consumer_dead_lettered: usize,
    /// Successful consumer outcomes (`outcome` field of the response) per event id, with the
    /// milliseconds from the event's `detail.metadata.time` to the end of the invocation.
    pub outcomes: HashMap<String, Vec<(String, Option<i64>)>>,
}

impl Counts {
    /// The sum of `function`'s metric `name` (0 when it never reported it).
    pub fn metric(&self, function: &str, name: &str) -> f64 {
        self.metrics.get(function).and_then(|m| m.get(name)).copied().unwrap_or(0.0)
    }

    /// Number of successful deliveries with `outcome`.
    pub fn outcome_count(&self, outcome: &str) -> usize {
        self.outcomes.values().flatten().filter(|(o, _)| o == outcome).count()
    }

    /// Latencies (ms, event time → effect) of deliveries that had an effect.
    pub fn effect_latencies(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.outcomes.values().flatten().filter(|(o, _)| o != "duplicate").filter_map(|(_, l)| *l).collect();
        v.sort_unstable();
        v
    }
}

impl Stats {
    /// Applies `f` to the counters.
    pub fn update(&self, f: impl FnOnce(&mut Counts)) {
        // A poisoned lock only means another task panicked mid-update; counts stay usable.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard);
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> Counts {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds the values of one EMF document of `function` (see [`crate::emf::parse`]).
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
        let latency = event_time.and_then(|t| SystemTime::now().duration_since(t).ok()).map(|d| d.as_millis() as i64);
        self.update(|c| c.outcomes.entry(event_id.to_owned()).or_default().push((outcome.to_owned(), latency)));
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
}
