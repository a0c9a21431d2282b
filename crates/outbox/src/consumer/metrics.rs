//! The consumer's figures, through the [`metrics`](https://docs.rs/metrics) facade: with the
//! EMF recorder the Lambda entry points install (`outbox_lambda::run`), CloudWatch metrics in
//! namespace `METRICS_NAMESPACE` (default [`DEFAULT_NAMESPACE`]) with dimension `function`.
//! Without a recorder, and without feature `metrics`, they cost nothing.
//!
//! | metric | unit | when |
//! |---|---|---|
//! | `EventsApplied` | count | the event took effect (its writes committed with the inbox claim) |
//! | `DuplicatesAbsorbed` | count | the inbox already held the event: nothing written |
//! | `NothingToDo` | count | a fallback found nothing to do: the event was recorded (inbox row, sequence) without the handler's writes |
//! | `EventsDeadLettered` | count | sent to the dead-letter queue (never succeeds) |
//! | `DeadLetteredByReason` (dimension `reason`: the error type, e.g. `MalformedEvent`) | count | the same, by cause |
//! | `EventsParked` | count | an ordered event arrived before its predecessor and was parked ([`ParkedEvent`](crate::ordering::ParkedEvent)) |
//! | `EventsRetried` | count | a transient failure retried inside the invocation |
//! | `EventsFailed` | count | the invocation failed (Lambda retries it) |
//! | `SequenceGaps` | count | an ordered event arrived before its predecessor and a store that does not park failed it (counted by the inbox, [`crate::inbox`]) |
//! | `OldestParkedAgeSeconds` | seconds (gauge) | the parked check ([`super::ParkedCheck`]): how long the oldest event parked now has waited (0: none); the kit's `ParkedGapAlarm` |
//! | `EventsParkedNow` | count (gauge) | the parked check: events parked now (at most its limit) |
//! | `ParkedRecovered` | count | the parked check applied a parked event whose predecessor was already applied (should stay 0, except after a deploy from a version before the parked count) |
//! | `CommitToEffectMilliseconds` | milliseconds | from the event's `time` (the producer's commit) to the consumer's commit, for applied events |
//!
//! The alarmed metrics (`EventsDeadLettered`, `CommitToEffectMilliseconds`, `OldestParkedAgeSeconds`) carry only the
//! `function` dimension, so a CloudWatch alarm on `(namespace, metric, function)` sees them;
//! CloudWatch matches an alarm's dimensions exactly
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html#Dimension>).

/// Default CloudWatch namespace of a consumer's metrics.
pub const DEFAULT_NAMESPACE: &str = crate::contract::namespace::CONSUMER;

/// An event took effect; `time` is its `metadata.time` (RFC 3339).
pub(crate) fn applied(time: &str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(crate::contract::metric::EVENTS_APPLIED).increment(1);
        if let Ok(at) = chrono::DateTime::parse_from_rfc3339(time) {
            let ms = (chrono::Utc::now() - at.with_timezone(&chrono::Utc)).num_milliseconds().max(0);
            metrics::histogram!(crate::contract::metric::COMMIT_TO_EFFECT_MILLISECONDS).record(ms as f64);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = time;
}

/// The inbox absorbed a duplicate.
pub(crate) fn duplicate() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::DUPLICATES_ABSORBED).increment(1);
}

/// A fallback found nothing to do; the event was recorded.
pub(crate) fn nothing_to_do() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::NOTHING_TO_DO).increment(1);
}

/// An event was dead-lettered because of `reason` (an error type).
pub(crate) fn dead_lettered(reason: &'static str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(crate::contract::metric::EVENTS_DEAD_LETTERED).increment(1);
        metrics::counter!(crate::contract::metric::DEAD_LETTERED_BY_REASON, crate::contract::dimension::REASON => reason).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// An event was parked to wait for its predecessor.
pub(crate) fn parked() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::EVENTS_PARKED).increment(1);
}

/// A transient failure is retried inside the invocation.
pub(crate) fn retried() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::EVENTS_RETRIED).increment(1);
}

/// The invocation fails (Lambda retries it).
pub(crate) fn failed() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::EVENTS_FAILED).increment(1);
}

/// The parked check's gauges: `parked` events parked now, the oldest for `oldest_secs` seconds.
pub(crate) fn parked_now(parked: usize, oldest_secs: u64) {
    #[cfg(feature = "metrics")]
    {
        metrics::gauge!(crate::contract::metric::EVENTS_PARKED_NOW).set(parked as f64);
        metrics::gauge!(crate::contract::metric::OLDEST_PARKED_AGE_SECONDS).set(oldest_secs as f64);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (parked, oldest_secs);
}

/// The parked check applied a parked event whose predecessor was already applied.
pub(crate) fn parked_recovered() {
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::PARKED_RECOVERED).increment(1);
}
