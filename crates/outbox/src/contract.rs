//! Names shared with the deployment template (`template.yaml`): CloudWatch metric namespaces,
//! metric and dimension names, and the environment variables the functions read. The code uses
//! these constants and nothing else, and the repository's `tests/contract.rs` reads the template
//! and checks that every alarm on one of these namespaces names a metric the code emits with its
//! dimensions, and that every variable a function's `run_from_env` requires is set on that
//! function: renaming either side fails the test instead of silently disarming an alarm.
//!
//! No dependencies, compiled with every feature set.

/// A metric as the code emits it: its name and its CloudWatch dimensions (the EMF recorder's
/// [`dimension::FUNCTION`] plus the metric's own labels). Read its fields; build one with
/// [`Metric::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metric {
    /// `MetricName`.
    pub name: &'static str,
    /// Dimension names, exactly as an alarm must list them.
    pub dimensions: &'static [&'static str],
}

impl Metric {
    /// The metric `name` with CloudWatch `dimensions` (names, in the order an alarm lists them).
    pub const fn new(name: &'static str, dimensions: &'static [&'static str]) -> Self {
        Self { name, dimensions }
    }
}

/// CloudWatch namespaces (`METRICS_NAMESPACE` overrides the default of each function).
pub mod namespace {
    /// The producer (order API) functions.
    pub const PRODUCER: &str = "OutboxProducer";
    /// The relay function.
    pub const RELAY: &str = "OutboxRelay";
    /// Consumer functions.
    pub const CONSUMER: &str = "OutboxConsumer";
    /// The webhook dispatcher.
    pub const WEBHOOKS: &str = "OutboxWebhooks";
    /// All of them.
    pub const ALL: [&str; 4] = [PRODUCER, RELAY, CONSUMER, WEBHOOKS];
}

/// Dimension names.
pub mod dimension {
    /// The function's name (`AWS_LAMBDA_FUNCTION_NAME`), on every metric.
    pub const FUNCTION: &str = "function";
    /// Why a transaction was cancelled (`TransactionsCancelledByCause`).
    pub const CAUSE: &str = "cause";
    /// Why a record was skipped or an event dead-lettered.
    pub const REASON: &str = "reason";
    /// The webhook subscriber.
    pub const SUBSCRIBER: &str = "subscriber";
    /// The AWS service of a failed call (`AwsCallsFailed`): `DynamoDB`, `EventBridge`, `SQS`,
    /// `S3`, … (`outbox_lambda::FailedCallsClient`).
    pub const SERVICE: &str = "service";
}

/// Metric names.
pub mod metric {
    #![allow(missing_docs)]
    // Every TransactWriteItems of the library (producers' and consumers').
    pub const TRANSACTION_MILLISECONDS: &str = "TransactionMilliseconds";
    pub const TRANSACTIONS_COMMITTED: &str = "TransactionsCommitted";
    pub const EVENTS_WRITTEN: &str = "EventsWritten";
    pub const TRANSACTIONS_CANCELLED: &str = "TransactionsCancelled";
    pub const TRANSACTIONS_CANCELLED_BY_CAUSE: &str = "TransactionsCancelledByCause";
    // Consumers.
    pub const EVENTS_APPLIED: &str = "EventsApplied";
    pub const COMMIT_TO_EFFECT_MILLISECONDS: &str = "CommitToEffectMilliseconds";
    pub const DUPLICATES_ABSORBED: &str = "DuplicatesAbsorbed";
    pub const NOTHING_TO_DO: &str = "NothingToDo";
    pub const EVENTS_DEAD_LETTERED: &str = "EventsDeadLettered";
    pub const DEAD_LETTERED_BY_REASON: &str = "DeadLetteredByReason";
    pub const EVENTS_PARKED: &str = "EventsParked";
    pub const EVENTS_RETRIED: &str = "EventsRetried";
    pub const EVENTS_FAILED: &str = "EventsFailed";
    pub const SEQUENCE_GAPS: &str = "SequenceGaps";
    pub const OLDEST_PARKED_AGE_SECONDS: &str = "OldestParkedAgeSeconds";
    pub const EVENTS_PARKED_NOW: &str = "EventsParkedNow";
    pub const PARKED_RECOVERED: &str = "ParkedRecovered";
    // The relay.
    pub const RECORDS_SEEN: &str = "RecordsSeen";
    pub const RECORDS_SKIPPED: &str = "RecordsSkipped";
    pub const EVENTS_PUBLISHED: &str = "EventsPublished";
    pub const ENTRIES_RETRIED: &str = "EntriesRetried";
    pub const RECORDS_DEAD_LETTERED: &str = "RecordsDeadLettered";
    pub const RECORDS_FAILED: &str = "RecordsFailed";
    pub const RECORDS_DEFERRED: &str = "RecordsDeferred";
    pub const PUT_EVENTS_CALLS: &str = "PutEventsCalls";
    pub const LAG_MILLISECONDS: &str = "LagMilliseconds";
    // The webhook dispatcher.
    pub const WEBHOOK_ENDPOINTS_DISABLED: &str = "WebhookEndpointsDisabled";
    pub const WEBHOOKS_DEAD_LETTERED: &str = "WebhooksDeadLettered";
    pub const WEBHOOKS_DELIVERED: &str = "WebhooksDelivered";
    pub const WEBHOOK_LATENCY_MILLISECONDS: &str = "WebhookLatencyMilliseconds";
    pub const WEBHOOK_RETRIES: &str = "WebhookRetries";
    // Every function (the EMF recorder; the SDK configuration's HTTP client).
    pub const COLD_START: &str = "ColdStart";
    pub const AWS_CALLS_FAILED: &str = "AwsCallsFailed";
}

use dimension::{CAUSE, FUNCTION, REASON, SERVICE, SUBSCRIBER};

const F: &[&str] = &[FUNCTION];

const fn m(name: &'static str, dimensions: &'static [&'static str]) -> Metric {
    Metric::new(name, dimensions)
}

/// What every function emits: the EMF recorder's cold start count, and its failed AWS call
/// attempts per service (`outbox_lambda::load_sdk_config`'s HTTP client; only when some failed).
pub const FUNCTION_METRICS: &[Metric] = &[m(metric::COLD_START, F), m(metric::AWS_CALLS_FAILED, &[FUNCTION, SERVICE])];

/// What every library `TransactWriteItems` emits (in the namespace of the function that calls it).
pub const TRANSACTION_METRICS: &[Metric] = &[
    m(metric::TRANSACTION_MILLISECONDS, F),
    m(metric::TRANSACTIONS_COMMITTED, F),
    m(metric::EVENTS_WRITTEN, F),
    m(metric::TRANSACTIONS_CANCELLED, F),
    m(metric::TRANSACTIONS_CANCELLED_BY_CAUSE, &[FUNCTION, CAUSE]),
];

/// What a consumer emits (besides [`TRANSACTION_METRICS`]).
pub const CONSUMER_METRICS: &[Metric] = &[
    m(metric::EVENTS_APPLIED, F),
    m(metric::COMMIT_TO_EFFECT_MILLISECONDS, F),
    m(metric::DUPLICATES_ABSORBED, F),
    m(metric::NOTHING_TO_DO, F),
    m(metric::EVENTS_DEAD_LETTERED, F),
    m(metric::DEAD_LETTERED_BY_REASON, &[FUNCTION, REASON]),
    m(metric::EVENTS_PARKED, F),
    m(metric::EVENTS_RETRIED, F),
    m(metric::EVENTS_FAILED, F),
    m(metric::SEQUENCE_GAPS, F),
    m(metric::OLDEST_PARKED_AGE_SECONDS, F),
    m(metric::EVENTS_PARKED_NOW, F),
    m(metric::PARKED_RECOVERED, F),
];

/// What the relay emits.
pub const RELAY_METRICS: &[Metric] = &[
    m(metric::RECORDS_SEEN, F),
    m(metric::RECORDS_SKIPPED, &[FUNCTION, REASON]),
    m(metric::EVENTS_PUBLISHED, F),
    m(metric::ENTRIES_RETRIED, F),
    m(metric::RECORDS_DEAD_LETTERED, F),
    m(metric::RECORDS_FAILED, F),
    m(metric::RECORDS_DEFERRED, F),
    m(metric::PUT_EVENTS_CALLS, F),
    m(metric::LAG_MILLISECONDS, F),
];

/// What the webhook dispatcher emits (besides [`CONSUMER_METRICS`]'s inbox and
/// [`TRANSACTION_METRICS`]).
pub const WEBHOOK_METRICS: &[Metric] = &[
    m(metric::WEBHOOK_ENDPOINTS_DISABLED, F),
    m(metric::WEBHOOKS_DEAD_LETTERED, &[FUNCTION, SUBSCRIBER]),
    m(metric::WEBHOOKS_DELIVERED, &[FUNCTION, SUBSCRIBER]),
    m(metric::WEBHOOK_LATENCY_MILLISECONDS, &[FUNCTION, SUBSCRIBER]),
    m(metric::WEBHOOK_RETRIES, &[FUNCTION, SUBSCRIBER]),
];

/// The metrics the code emits into `namespace` (empty for a namespace not in [`namespace::ALL`]).
pub fn emitted(namespace: &str) -> Vec<Metric> {
    let groups: &[&[Metric]] = match namespace {
        namespace::PRODUCER => &[FUNCTION_METRICS, TRANSACTION_METRICS],
        namespace::RELAY => &[FUNCTION_METRICS, RELAY_METRICS],
        namespace::CONSUMER => &[FUNCTION_METRICS, TRANSACTION_METRICS, CONSUMER_METRICS],
        namespace::WEBHOOKS => &[FUNCTION_METRICS, TRANSACTION_METRICS, CONSUMER_METRICS, WEBHOOK_METRICS],
        _ => &[],
    };
    groups.iter().flat_map(|g| g.iter().copied()).collect()
}

/// Environment variable names.
pub mod env {
    /// CloudWatch namespace of a function's EMF metrics.
    pub const METRICS_NAMESPACE: &str = "METRICS_NAMESPACE";
    /// Set by Lambda: the function's name (the `function` dimension).
    pub const AWS_LAMBDA_FUNCTION_NAME: &str = "AWS_LAMBDA_FUNCTION_NAME";
    /// The EventBridge bus the relay publishes to (the dispatcher announces on it).
    pub const EVENT_BUS_NAME: &str = "EVENT_BUS_NAME";
    /// Which bus the relay publishes to: `Classic` (the default when unset) or `Custom` (then
    /// [`EVENT_BUS_NAME`] holds the Custom Event Bus's `event-busv2` ARN).
    pub const EVENT_BUS_TYPE: &str = "EVENT_BUS_TYPE";
    /// The relay's dead-letter queue URL.
    pub const RELAY_DLQ_URL: &str = "RELAY_DLQ_URL";
    /// An inbox table.
    pub const INBOX_TABLE: &str = "INBOX_TABLE";
    /// A consumer's name: its inbox rows are keyed `<CONSUMER_NAME>#<event id>` (and
    /// `<CONSUMER_NAME>#aggregate#…`, `<CONSUMER_NAME>#parked#…` when ordered). Set on every
    /// consumer function, fixed for its life: `outbox trace`, `outbox ordering` and the
    /// function read the same variable (`outbox_lambda::consumer_name`).
    pub const CONSUMER_NAME: &str = "CONSUMER_NAME";
    /// A consumer's dead-letter queue URL (the consumer kit's output).
    pub const DEAD_LETTER_QUEUE_URL: &str = "DEAD_LETTER_QUEUE_URL";
    /// The webhook delivery queue URL.
    pub const WEBHOOK_DELIVERY_QUEUE_URL: &str = "WEBHOOK_DELIVERY_QUEUE_URL";
    /// The webhook dead-letter queue URL.
    pub const WEBHOOK_DLQ_URL: &str = "WEBHOOK_DLQ_URL";
    /// The webhook subscriber table.
    pub const WEBHOOK_SUBSCRIBERS_TABLE: &str = "WEBHOOK_SUBSCRIBERS_TABLE";

    /// What the relay's `run_from_env` requires.
    pub const RELAY_REQUIRED: &[&str] = &[EVENT_BUS_NAME, RELAY_DLQ_URL];
    /// What a consumer wired by `outbox_lambda::consumer_from_env` requires.
    pub const CONSUMER_REQUIRED: &[&str] = &[INBOX_TABLE, CONSUMER_NAME, DEAD_LETTER_QUEUE_URL];
    /// What the webhook dispatcher's `run_from_env` requires.
    pub const WEBHOOK_DISPATCHER_REQUIRED: &[&str] = &[WEBHOOK_DELIVERY_QUEUE_URL, WEBHOOK_DLQ_URL, WEBHOOK_SUBSCRIBERS_TABLE, INBOX_TABLE];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_emits_and_no_metric_name_is_listed_twice_in_one() {
        for ns in namespace::ALL {
            let metrics = emitted(ns);
            assert!(!metrics.is_empty(), "{ns}");
            let mut names: Vec<_> = metrics.iter().map(|m| m.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), metrics.len(), "{ns}: a metric listed twice");
            assert!(metrics.iter().all(|m| m.dimensions.first() == Some(&dimension::FUNCTION)), "{ns}");
        }
        assert!(emitted("AWS/Lambda").is_empty());
    }
}
