//! The dispatcher's settings ([`DispatcherConfig`]), each with its default.

use std::time::Duration;

use crate::backoff::RetrySchedule;
use crate::breaker::BreakerConfig;
use crate::client::ClientConfig;

/// The default time a subscriber may fail every attempt before it is disabled: 3 days (the
/// outbox keeps events 7 days, so `recover` still finds everything it missed).
pub const DEFAULT_DISABLE_AFTER: Duration = Duration::from_secs(3 * 24 * 60 * 60);

/// Settings of the dispatcher function (see [`DispatcherConfig::new`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherConfig {
    /// URL of `WebhookDeliveryQueue` (fan-out target, re-enqueued retries, visibility changes).
    pub delivery_queue_url: String,
    /// URL of `WebhookDeadLetterQueue`.
    pub dead_letter_queue_url: String,
    /// The subscriber table.
    pub subscribers_table: String,
    /// Retry schedule (its length + 1 attempts per (event, subscriber)).
    pub schedule: RetrySchedule,
    /// Time kept free at the end of an invocation for what follows the attempts (re-enqueues,
    /// dead letters, the answer): no attempt runs past `deadline − batch_margin`.
    pub batch_margin: Duration,
    /// An attempt starts only with at least this much of the batch's budget left; a message
    /// without it is reported in `batchItemFailures`, not attempted.
    pub min_attempt_time: Duration,
    /// The subscribers' circuit breaker.
    pub breaker: BreakerConfig,
    /// A subscriber whose attempts have all failed for this long is disabled (zero: never).
    pub disable_after: Duration,
    /// The bus that gets a `WebhookEndpointDisabled` event when a subscriber is disabled.
    pub event_bus: Option<String>,
    /// The `source` of that event.
    pub event_source: String,
    /// HTTP client settings.
    pub client: ClientConfig,
    /// How long a secret is cached.
    pub secrets_ttl: Duration,
    /// How long the subscriber list is cached.
    pub subscribers_ttl: Duration,
}

impl DispatcherConfig {
    /// The settings for these queues and table, everything else at its default: Svix's
    /// [`RetrySchedule`], a 3 s batch margin, 1 s least attempt time, the default
    /// [`BreakerConfig`], subscribers disabled after [`DEFAULT_DISABLE_AFTER`], no
    /// `WebhookEndpointDisabled` event (no bus; source `outbox.webhooks`), the default
    /// [`ClientConfig`], secrets cached 5 minutes and the subscriber list 60 s.
    /// (`outbox_lambda::webhooks::dispatcher_config` reads them from the environment.)
    pub fn new(delivery_queue_url: impl Into<String>, dead_letter_queue_url: impl Into<String>, subscribers_table: impl Into<String>) -> Self {
        Self {
            delivery_queue_url: delivery_queue_url.into(),
            dead_letter_queue_url: dead_letter_queue_url.into(),
            subscribers_table: subscribers_table.into(),
            schedule: RetrySchedule::default(),
            batch_margin: Duration::from_secs(3),
            min_attempt_time: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
            disable_after: DEFAULT_DISABLE_AFTER,
            event_bus: None,
            event_source: "outbox.webhooks".into(),
            client: ClientConfig::default(),
            secrets_ttl: Duration::from_secs(300),
            subscribers_ttl: Duration::from_secs(60),
        }
    }
}
