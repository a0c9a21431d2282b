//! What the functions report about themselves, for people: the per-stage figures of their EMF
//! metrics (`lambda::emf`, summed per function by [`crate::stats`]) and the status line `up`
//! prints every few seconds.

use std::collections::BTreeMap;

use crate::faults::ServiceHealth;
use crate::stats::Counts;

/// The metrics worth showing per stage, in pipeline order: (function metric, label). Those a
/// function did not report are left out.
const STAGE_METRICS: &[(&str, &str)] = &[
    ("EventsWritten", "events written"),
    ("TransactionsCancelled", "transactions cancelled"),
    ("EventsPublished", "published"),
    ("PutEventsCalls", "PutEvents calls"),
    ("EntriesRetried", "entries retried"),
    ("RecordsDeadLettered", "dead-lettered"),
    ("EventsApplied", "applied"),
    ("DuplicatesAbsorbed", "duplicates absorbed"),
    ("NothingToDo", "nothing to do"),
    ("EventsParked", "parked"),
    ("EventsRetried", "retried in the invocation"),
    ("EventsFailed", "invocations failed"),
    ("EventsDeadLettered", "dead-lettered"),
    ("SequenceGaps", "sequence gaps"),
    ("WebhooksDelivered", "webhooks delivered"),
    ("WebhookRetries", "webhook retries"),
    ("WebhooksDeadLettered", "webhooks dead-lettered"),
    // The functions' own failed AWS call attempts (`outbox_lambda::FailedCallsClient`).
    ("AwsCallsFailed{service=DynamoDB}", "DynamoDB calls failed"),
    ("AwsCallsFailed{service=EventBridge}", "EventBridge calls failed"),
    ("AwsCallsFailed{service=SQS}", "SQS calls failed"),
    ("AwsCallsFailed{service=S3}", "S3 calls failed"),
];

/// How the EMF parser names `AwsCallsFailed` of one service (`lambda::emf::parse`).
const FAILED_CALLS_OF: &str = "AwsCallsFailed{service=";

/// Per function, the figures of `STAGE_METRICS` it reported (totals since start).
pub fn stage_figures(counts: &Counts) -> BTreeMap<String, BTreeMap<String, u64>> {
    counts
        .metrics
        .iter()
        .map(|(function, metrics)| {
            let figures = STAGE_METRICS.iter().filter_map(|(name, _)| metrics.get(*name).map(|v| ((*name).to_owned(), *v as u64))).collect();
            (function.clone(), figures)
        })
        .filter(|(_, figures): &(String, BTreeMap<String, u64>)| !figures.is_empty())
        .collect()
}

/// One line per function: `ProducerFunction: 20 events written, 0 transactions cancelled`.
pub fn format_stage_figures(figures: &BTreeMap<String, BTreeMap<String, u64>>) -> String {
    let mut out = String::new();
    for (function, metrics) in figures {
        let parts: Vec<String> = STAGE_METRICS.iter().filter_map(|(name, label)| metrics.get(*name).map(|v| format!("{v} {label}"))).collect();
        out.push_str(&format!("  {function}: {}\n", parts.join(", ")));
    }
    out
}

/// The part of `up`'s status line about failing AWS calls: per service whose calls failed,
/// how many and, while they still fail, for how long (`events: 1285 calls failed, failing for
/// 5m12s`); empty when nothing failed.
pub fn failing_calls(health: &[ServiceHealth]) -> String {
    let parts: Vec<String> = health
        .iter()
        .filter(|h| h.failed > 0)
        .map(|h| match h.failing_for_secs {
            Some(secs) => {
                let secs = secs as u64;
                format!("{}: {} of {} calls failed, FAILING for {}m{:02}s", h.service, h.failed, h.calls, secs / 60, secs % 60)
            }
            None => format!("{}: {} of {} calls failed, recovered", h.service, h.failed, h.calls),
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" · AWS calls: {}", parts.join("; "))
    }
}

/// The functions' own failed AWS call attempts per service, summed over the functions (their
/// EMF `AwsCallsFailed`): ` · functions' failed AWS calls: DynamoDB 12, SQS 3`; empty when none.
pub fn functions_failed_calls(counts: &Counts) -> String {
    let mut by_service: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, value) in counts.metrics.values().flatten() {
        if let Some(service) = name.strip_prefix(FAILED_CALLS_OF).and_then(|s| s.strip_suffix('}')) {
            *by_service.entry(service).or_default() += *value as u64;
        }
    }
    let parts: Vec<String> = by_service.iter().filter(|(_, n)| **n > 0).map(|(service, n)| format!("{service} {n}")).collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" · functions' failed AWS calls: {}", parts.join(", "))
    }
}

/// What the Custom Event Bus did, once it published anything: ` · Custom bus: 12 published, 1
/// deduplicated, 11 delivered, 2 retried, 0 to on-failure, 0 dropped, 0 waiting`.
pub fn custom_bus(counts: &Counts) -> String {
    match &counts.custom_bus {
        Some((s, backlog)) if s.published + s.deduplicated + s.failed_entries > 0 => format!(
            " · Custom bus: {} published, {} deduplicated, {} delivered, {} retried, {} to on-failure, {} dropped, {backlog} waiting",
            s.published, s.deduplicated, s.delivered, s.retried, s.sent_to_on_failure, s.dropped
        ),
        _ => String::new(),
    }
}

/// The status line of `up`: events published per second since `before` (taken `secs` ago),
/// consumer outcomes (the consumers' EMF metrics), the latest commit → effect latency window, what the SQS event source
/// mappings did (once they invoked anything), the functions' failing AWS calls per service
/// (the fault proxies' [`failing_calls`], then the functions' own EMF count,
/// [`functions_failed_calls`]), and the dead-letter queues' depths.
pub fn status_line(before: &Counts, now: &Counts, secs: f64, dlq_depths: &[(String, u64)], health: &[ServiceHealth]) -> String {
    let total = |c: &Counts, name: &str| c.metrics.values().filter_map(|m| m.get(name)).sum::<f64>();
    let rate = (total(now, "EventsPublished") - total(before, "EventsPublished")) / secs.max(0.001);
    let mut latencies: Vec<i64> = now.latencies.iter().copied().collect();
    latencies.sort_unstable();
    let p50 = crate::stats::percentile(&latencies, 0.5).map(|v| format!("{v} ms")).unwrap_or_else(|| "-".into());
    let depths: Vec<String> = dlq_depths.iter().map(|(q, n)| format!("{q} {n}")).collect();
    // The SQS mappings (e.g. webhook deliveries), once they invoked anything.
    let sqs = if now.sqs_invocations > 0 {
        format!(
            " · SQS mappings: {} messages in {} invocations, {} back to the queue, {} invocations failed",
            now.sqs_messages_received, now.sqs_invocations, now.sqs_messages_failed, now.sqs_invocation_errors
        )
    } else {
        String::new()
    };
    format!(
        "[up] {rate:.1} events/s published ({} total) · applied {} · duplicates {} · parked {} · dead-lettered {} · commit→effect p50 {p50}{sqs}{}{}{} · DLQs: {}",
        total(now, "EventsPublished") as u64,
        // The consumers' own EMF figures, whichever way their events arrive (a rule of their
        // own, or the consumer kit's queue through an SQS mapping); dead-lettered adds what the
        // asynchronous invocations' on-failure destinations received.
        total(now, "EventsApplied") as u64,
        total(now, "DuplicatesAbsorbed") as u64,
        total(now, "EventsParked") as u64,
        now.consumer_dead_lettered as u64 + total(now, "EventsDeadLettered") as u64,
        custom_bus(now),
        failing_calls(health),
        functions_failed_calls(now),
        if depths.is_empty() { "none".to_owned() } else { depths.join(", ") },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(published: f64, applied: f64) -> Counts {
        let mut c = Counts::default();
        c.metrics.entry("OutboxRelayFunction".into()).or_default().insert("EventsPublished".into(), published);
        c.metrics.entry("ConsumerFunction".into()).or_default().insert("EventsApplied".into(), applied);
        c.metrics.entry("ConsumerFunction".into()).or_default().insert("ColdStart".into(), 1.0);
        c
    }

    #[test]
    fn stage_figures_keep_the_pipeline_metrics_only() {
        let figures = stage_figures(&counts(30.0, 12.0));
        assert_eq!(figures["OutboxRelayFunction"]["EventsPublished"], 30);
        assert_eq!(figures["ConsumerFunction"].len(), 1, "ColdStart is not a stage figure: {figures:?}");
        let text = format_stage_figures(&figures);
        assert!(text.contains("OutboxRelayFunction: 30 published") && text.contains("ConsumerFunction: 12 applied"), "{text}");
    }

    #[test]
    fn the_status_line_gives_the_rate_since_the_last_line_and_the_dlq_depths() {
        let line = status_line(&counts(10.0, 0.0), &counts(30.0, 0.0), 5.0, &[("consumer-dlq".into(), 2)], &[]);
        assert!(line.contains("4.0 events/s published (30 total)"), "{line}");
        let mut consumer = counts(30.0, 12.0);
        let emf = consumer.metrics.entry("ConsumerFunction".into()).or_default();
        emf.extend([("DuplicatesAbsorbed".to_owned(), 2.0), ("EventsParked".to_owned(), 1.0), ("EventsDeadLettered".to_owned(), 1.0)]);
        consumer.consumer_dead_lettered = 1;
        let outcomes = status_line(&counts(10.0, 0.0), &consumer, 5.0, &[], &[]);
        assert!(outcomes.contains("applied 12 · duplicates 2 · parked 1 · dead-lettered 2"), "the consumers' EMF figures, any delivery: {outcomes}");
        assert!(line.contains("DLQs: consumer-dlq 2"), "{line}");
        assert!(!line.contains("SQS"), "no SQS mapping ran: {line}");
        let mut now = counts(30.0, 0.0);
        (now.sqs_messages_received, now.sqs_invocations, now.sqs_messages_failed, now.sqs_invocation_errors) = (7, 3, 2, 1);
        let line = status_line(&counts(10.0, 0.0), &now, 5.0, &[], &[]);
        assert!(line.contains("SQS mappings: 7 messages in 3 invocations, 2 back to the queue, 1 invocations failed"), "{line}");
        assert!(!line.contains("AWS calls"), "nothing failed: {line}");
    }

    #[test]
    fn the_status_line_shows_failing_calls_per_service_and_for_how_long() {
        let health = [
            ServiceHealth { service: "dynamodb".into(), calls: 900, failed: 0, failing_for_secs: None },
            ServiceHealth { service: "events".into(), calls: 1300, failed: 1285, failing_for_secs: Some(312.4) },
            ServiceHealth { service: "sqs".into(), calls: 40, failed: 3, failing_for_secs: None },
        ];
        let line = status_line(&counts(10.0, 0.0), &counts(10.0, 0.0), 5.0, &[], &health);
        assert!(line.contains("AWS calls: events: 1285 of 1300 calls failed, FAILING for 5m12s; sqs: 3 of 40 calls failed, recovered"), "{line}");
        assert!(!line.contains("dynamodb"), "a healthy service is not listed: {line}");
        assert!(!line.contains("functions' failed"), "no function reported any: {line}");
        let mut now = counts(10.0, 0.0);
        now.metrics.entry("ConsumerFunction".into()).or_default().extend([
            ("AwsCallsFailed".to_owned(), 7.0),
            ("AwsCallsFailed{service=DynamoDB}".to_owned(), 5.0),
            ("AwsCallsFailed{service=SQS}".to_owned(), 2.0),
        ]);
        now.metrics.entry("OutboxRelayFunction".into()).or_default().insert("AwsCallsFailed{service=DynamoDB}".to_owned(), 1.0);
        let line = status_line(&counts(10.0, 0.0), &now, 5.0, &[], &health);
        assert!(
            line.contains("recovered · functions' failed AWS calls: DynamoDB 6, SQS 2 · DLQs"),
            "the functions' own EMF count, by service: {line}"
        );
        assert!(format_stage_figures(&stage_figures(&now)).contains("5 DynamoDB calls failed, 2 SQS calls failed"), "and per function");
    }
}
