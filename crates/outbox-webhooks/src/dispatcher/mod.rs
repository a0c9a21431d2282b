//! The webhook dispatcher (feature `dispatcher`): delivers bus events to subscribers'
//! HTTPS endpoints, signed, once per event and subscriber, retried for about a day.
//!
//! ```text
//! EventBridge rule ─▶ WebhookDeliveryQueue ─▶ dispatcher (SQS event source mapping, ReportBatchItemFailures)
//!   message without `subscriber` attribute: fan out ─▶ one message per matching subscriber (SendMessageBatch)
//!   message with `subscriber` (the batch's messages concurrently, within the invocation's time budget):
//!       `not_before` still ahead, or the subscriber's circuit open → waits, not an attempt
//!       no time left in the budget → batchItemFailures as it is, not an attempt
//!       guarded inbox claim ─▶ signed POST ─▶
//!       2xx        → recorded COMPLETED (a redelivery replays it: no second POST)
//!       408/429/5xx/timeout/connection → claim released; a copy for the next attempt is sent
//!                    (attributes `attempt`, `not_before`); the message itself is settled
//!       retries used up, other 4xx, 3xx → WebhookDeadLetterQueue (ERROR_CODE/ERROR_MESSAGE attributes)
//!       410        → subscriber disabled in its table, message dead-lettered
//! ```
//!
//! **One message per (event, subscriber)**: each subscriber then has its own attempts, its own
//! waits and its own dead letter. The fan-out costs one `SendMessageBatch` per 10 subscribers.
//!
//! **The schedule** ([`RetrySchedule`](crate::RetrySchedule), default Svix's: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
//! 10 h, jitter +0–20 %, `Retry-After` honoured up to a day) is longer than SQS holds a received
//! message: a visibility timeout ends at most 12 h after the message's first receive, and a
//! `DelaySeconds` is at most 15 minutes (`ChangeMessageVisibility`, `SendMessage` API
//! references). So a retry is a **new message**: the dispatcher sends a copy carrying the next
//! `attempt` and its `not_before` time (epoch ms) with `DelaySeconds = min(wait, 900)`, and
//! reports the original settled only once that send succeeded (a failed send leaves the original
//! in `batchItemFailures`: the same attempt comes back after the queue's visibility timeout).
//! A copy received before its `not_before` waits again without an attempt: on its first receive
//! by a visibility timeout (as long as 12 h from that receive allow), otherwise by another copy.
//! Every copy is young (its retention restarts), and is received a bounded number of times (one
//! wait on its first receive, then an attempt or a new copy), so the queue's `maxReceiveCount`
//! bounds crash loops per attempt while the `attempt` attribute bounds the schedule.
//!
//! **Isolation**: a batch's messages run concurrently; no attempt runs past the invocation's
//! deadline less [`DispatcherConfig::batch_margin`] (each request's timeout is cut to what is
//! left), and a message reached with less than [`DispatcherConfig::min_attempt_time`] left is
//! reported in `batchItemFailures` untouched: not an attempt, its `attempt` unchanged. A
//! subscriber failing [`BreakerConfig::threshold`](crate::BreakerConfig::threshold) times in a row opens its circuit breaker
//! ([`BreakerState`]; state on its subscriber item, conditional updates): its messages wait
//! for the cool-down without calling it, then one probe decides. Other subscribers' messages
//! never wait for it: they run beside its attempts, not after them.
//!
//! **Dead letters** carry the original EventBridge event as body (so the existing `dlq redrive`
//! re-publishes it; the fan-out then skips subscribers that already have it, through the inbox)
//! and attributes `ERROR_CODE` (`WebhookRejected`, `WebhookGone`, `WebhookRetriesExhausted`,
//! `WebhookUnknownSubscriber`, `WebhookEndpointDisabled`, `WebhookMalformedEvent`, `WebhookInboxError`; for a
//! claim-checked payload `PayloadMissing`, `PayloadCorrupt`, `PayloadStoreError` (S3 refused:
//! without `s3:ListBucket` a missing object is a 403, so it lands here, not as
//! `PayloadMissing`), `WebhookClaimCheckUnavailable`), `ERROR_MESSAGE`, `subscriber`.
//!
//! **Claim-checked events** (`detail.data_ref`, feature `claim-check`): a subscriber receives the
//! payload inline, `{"metadata": …, "data": …}`, fetched from S3 and verified (size, SHA-256)
//! only when a request is about to be sent (a delivery the inbox already holds reads nothing;
//! `Dispatcher::with_claim_check`, which `run_from_env` sets up from `CLAIM_CHECK_BUCKET`). The
//! signature is over that body; the inbox's payload hash over the event as published (its
//! reference carries the payload's SHA-256). A transient S3 failure is retried on the schedule
//! like a 5xx. A subscriber never sees the S3 reference.
//!
//! **Subscribers live in a DynamoDB table** (not SSM Parameter Store): one item per subscriber
//! (`id`, `url`, `event_types` — `*` for all —, `secret_id`, `enabled`), changed with a `PutItem`
//! without a deploy, read with a `Scan` cached for a TTL (default 60 s); the dispatcher itself
//! writes to it (`enabled = false` on 410, the circuit breaker's attributes), which a parameter would make a read-modify-write of
//! a JSON document, and a table has no 4 KiB/8 KiB value limit.
//!
//! **Secrets** come from Secrets Manager (`GetSecretValue` of the subscriber's `secret_id`), cached
//! per secret for a TTL (default 5 minutes). The secret string holds one or more `whsec_` secrets
//! separated by spaces: during a rotation, the new one and the old one, and every request carries
//! one signature per secret.
//!
//! # Rooms
//!
//! | file | what a reader finds there |
//! |---|---|
//! | `mod.rs` (here) | the dispatch loop ([`Dispatcher`]): a batch in, `batchItemFailures` out; a message fanned out or attempted; the breaker's gate and bookkeeping; what an invocation did ([`DispatchReport`]) and its metrics |
//! | `config.rs` | the settings ([`DispatcherConfig`]) and their defaults |
//! | `event.rs` | the event ([`WebhookEvent`]): an SQS body read once, a claim-checked payload put inline |
//! | `delivery.rs` | one attempt to one subscriber under the inbox guard ([`Deliverer`]) and what it decides ([`Decision`]) |
//! | `queue.rs` | the message attributes ([`SUBSCRIBER_ATTRIBUTE`], [`ATTEMPT_ATTRIBUTE`], [`NOT_BEFORE_ATTRIBUTE`]), waits held or re-enqueued, the fan-out, dead letters |
//! | `subscribers.rs` | the subscriber table ([`Subscriber`], [`SubscriberTable`]) and the breaker state stored on its items |
//! | `secrets.rs` | the subscribers' secrets from Secrets Manager ([`SecretCache`]) |
//! | `attempts.rs` | the attempt log ([`AttemptLog`], [`read_attempts`]) |
//! | `error.rs` | [`DispatchError`] |

mod attempts;
mod config;
mod delivery;
mod error;
mod event;
mod queue;
mod secrets;
mod subscribers;

pub use attempts::{read_attempts, AttemptLog, AttemptRecord};
pub use config::{DispatcherConfig, DEFAULT_DISABLE_AFTER};
pub use delivery::{Attempted, Decision, Deliverer, DeliveryRecord, Unresolved};
pub use error::DispatchError;
pub use event::{NotAnEvent, WebhookEvent};
pub use queue::{ATTEMPT_ATTRIBUTE, MAX_DELAY_SECONDS, MAX_VISIBILITY, NOT_BEFORE_ATTRIBUTE, SUBSCRIBER_ATTRIBUTE};
pub use secrets::SecretCache;
pub use subscribers::{Subscriber, SubscriberTable};

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::Instrument;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};

use crate::breaker::{BreakerState, Gate};
use crate::client::WebhookClient;
use outbox::inbox::InboxStore;
use queue::attribute;

/// The detail-type of the event announcing a disabled subscriber.
pub const ENDPOINT_DISABLED: &str = "WebhookEndpointDisabled";

/// What one invocation did (for logs, metrics and the local demo).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatchReport {
    /// Messages in the batch.
    pub messages: usize,
    /// Event messages fanned out, and the per-subscriber messages they made.
    pub fanned_out: usize,
    /// Per-subscriber messages sent by the fan-out.
    pub fan_out_messages: usize,
    /// Delivered now.
    pub delivered: usize,
    /// Delivered before (no request sent).
    pub already_delivered: usize,
    /// Attempts that failed and were re-enqueued for the next attempt.
    pub retried: usize,
    /// Dead-lettered (malformed messages included).
    pub dead_lettered: usize,
    /// Subscribers disabled (410).
    pub disabled: usize,
    /// Messages that waited without an attempt: their time had not come (a retry's
    /// `not_before`), or their subscriber's circuit breaker was open.
    pub deferred: usize,
    /// Messages not attempted because the batch's time budget ran out: in `batchItemFailures`,
    /// not counted as an attempt.
    pub not_attempted: usize,
    /// Circuit breakers this batch opened.
    pub breakers_opened: usize,
    /// Messages failed without a decision (AWS errors): retried by SQS after the visibility timeout.
    pub failed: usize,
}

/// The dispatcher function: SQS batch in, `batchItemFailures` out.
#[derive(Debug)]
pub struct Dispatcher<S> {
    deliverer: Deliverer<S>,
    sqs: aws_sdk_sqs::Client,
    subscribers: SubscriberTable,
    secrets: SecretCache,
    config: DispatcherConfig,
    attempt_log: Option<AttemptLog>,
    events: aws_sdk_eventbridge::Client,
    #[cfg(feature = "claim-check")]
    claim_check: Option<outbox::claim_check::ClaimCheck>,
}

/// What becomes of one message of the batch.
enum MessageResult {
    /// Settled: delete it.
    Done,
    /// Keep it, invisible for this long (set with `ChangeMessageVisibility`).
    Hold(Duration),
    /// Keep it; it comes back after the queue's visibility timeout.
    Failed,
}

/// A subscriber's breaker as this batch saw it at its start.
struct BatchGate {
    state: BreakerState,
    /// A message of this batch already tried to become the half-open breaker's probe.
    probe_tried: std::sync::atomic::AtomicBool,
}

/// What the attributes of a per-subscriber message say.
struct SubscriberMessage<'a> {
    message: &'a SqsMessage,
    body: &'a str,
    subscriber: String,
    /// The attempt this copy carries (1: the fan-out's copy).
    attempt: u32,
}

impl<S: InboxStore> Dispatcher<S> {
    /// Builds the dispatcher.
    ///
    /// # Errors
    /// [`super::client::ClientBuildError`] when the HTTP client cannot start.
    pub fn new(sdk: &aws_config::SdkConfig, inbox: S, config: DispatcherConfig) -> Result<Self, super::client::ClientBuildError> {
        let client = WebhookClient::new(&config.client)?;
        Ok(Self {
            deliverer: Deliverer::new(client, inbox, config.schedule.clone()),
            sqs: aws_sdk_sqs::Client::new(sdk),
            subscribers: SubscriberTable::new(aws_sdk_dynamodb::Client::new(sdk), &config.subscribers_table, config.subscribers_ttl),
            secrets: SecretCache::new(aws_sdk_secretsmanager::Client::new(sdk), config.secrets_ttl),
            events: aws_sdk_eventbridge::Client::new(sdk),
            config,
            attempt_log: None,
            #[cfg(feature = "claim-check")]
            claim_check: None,
        })
    }

    /// Records every attempt (status, latency, response excerpt) in `log`, for `trace` and the
    /// operator's `attempts` verb.
    pub fn with_attempt_log(mut self, log: AttemptLog) -> Self {
        self.attempt_log = Some(log);
        self
    }

    /// Delivers claim-checked events (`detail.data_ref`) with their payload inline, fetched from
    /// S3 and verified (size, SHA-256) for each delivery: a subscriber never sees the reference.
    /// Without it such an event is dead-lettered (`WebhookClaimCheckUnavailable`). Needs
    /// `s3:GetObject` on the payloads.
    #[cfg(feature = "claim-check")]
    pub fn with_claim_check(mut self, claim_check: outbox::claim_check::ClaimCheck) -> Self {
        self.claim_check = Some(claim_check);
        self
    }

    /// `event` with its claim-checked payload inline: fetched and verified (size, SHA-256).
    async fn inline_payload(&self, event: &WebhookEvent) -> Result<WebhookEvent, Unresolved> {
        #[cfg(feature = "claim-check")]
        if let (Some(claim_check), Some(reference)) = (&self.claim_check, &event.data_ref) {
            let payload = claim_check.fetch(reference).await?;
            return Ok(event.with_payload(&payload)?);
        }
        Err(Unresolved::Unavailable { reference: event.data_ref.clone() })
    }

    /// Handles one batch, its messages concurrently, every attempt ending by
    /// `deadline − batch_margin` (`deadline`: the invocation's, from the Lambda context).
    /// Messages that must come back are in `batchItemFailures`: those not attempted in time
    /// (as they were), those whose wait a visibility timeout holds, and those whose handling
    /// failed. A retry is a new message (the next attempt), so the one handled is settled.
    pub async fn handle(&self, event: &SqsEvent, deadline: DateTime<Utc>) -> (SqsBatchResponse, DispatchReport) {
        let started = Instant::now();
        let budget_end = deadline - chrono::Duration::from_std(self.config.batch_margin).unwrap_or_default();
        let report = Mutex::new(DispatchReport { messages: event.records.len(), ..DispatchReport::default() });
        let gates = self.gates(&event.records).await;
        let results = futures_util::future::join_all(event.records.iter().map(|m| self.handle_message(m, budget_end, &gates, &report))).await;
        let mut response = SqsBatchResponse::default();
        let mut holds = Vec::new();
        for (message, result) in event.records.iter().zip(results) {
            let id = message.message_id.clone().unwrap_or_default();
            match result {
                MessageResult::Done => {}
                MessageResult::Hold(delay) => {
                    holds.push((message, delay));
                    response.batch_item_failures.push(failure(id));
                }
                MessageResult::Failed => response.batch_item_failures.push(failure(id)),
            }
        }
        let held = futures_util::future::join_all(holds.into_iter().map(|(m, d)| self.hold(m, d))).await;
        let mut report = report.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        report.failed += held.iter().filter(|ok| !**ok).count();
        tracing::info!(
            messages = report.messages,
            delivered = report.delivered,
            already_delivered = report.already_delivered,
            retried = report.retried,
            dead_lettered = report.dead_lettered,
            deferred = report.deferred,
            not_attempted = report.not_attempted,
            fanned_out = report.fanned_out,
            breakers_opened = report.breakers_opened,
            failed = report.failed,
            duration_ms = started.elapsed().as_millis() as u64,
            "webhook batch dispatched"
        );
        (response, report)
    }

    /// The breaker of each subscriber with a message in the batch: one consistent read each.
    async fn gates(&self, records: &[SqsMessage]) -> HashMap<String, BatchGate> {
        if self.config.breaker.threshold == 0 {
            return HashMap::new();
        }
        let mut ids: Vec<String> = records.iter().filter_map(|m| attribute(m, SUBSCRIBER_ATTRIBUTE)).collect();
        ids.sort();
        ids.dedup();
        let states = futures_util::future::join_all(ids.iter().map(|id| self.subscribers.breaker(id))).await;
        ids.into_iter()
            .zip(states)
            .filter_map(|(id, state)| match state {
                Ok(state) => Some((id, BatchGate { state, probe_tried: std::sync::atomic::AtomicBool::new(false) })),
                Err(e) => {
                    // Without its state the breaker is taken as closed: the attempts go ahead.
                    tracing::warn!(subscriber = %id, error = %e, "cannot read the circuit breaker");
                    None
                }
            })
            .collect()
    }

    /// One message: read as an event once (malformed: dead-lettered), then fanned out (no
    /// `subscriber` attribute) or attempted for its subscriber, inside the event's span.
    async fn handle_message(
        &self,
        message: &SqsMessage,
        budget_end: DateTime<Utc>,
        gates: &HashMap<String, BatchGate>,
        report: &Mutex<DispatchReport>,
    ) -> MessageResult {
        let body = message.body.as_deref().unwrap_or_default();
        let event = match WebhookEvent::parse(body) {
            Ok(event) => event,
            Err(e) => {
                return self.dead_letter(body, None, "WebhookMalformedEvent", &e.to_string(), report).await;
            }
        };
        // Every line about this event is inside its span (envelope::event_span); the attempt is
        // the one the message carries.
        let attempt: u32 = attribute(message, ATTEMPT_ATTRIBUTE).and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
        let span = event.metadata.span();
        span.record("attempt", attempt);
        // With OpenTelemetry: the span is in the event's trace (a child of its context, linked
        // to the invocation's span), and a delivery's `traceparent` is this span's.
        #[cfg(feature = "opentelemetry")]
        if let Some(parent) = event.metadata.trace_context() {
            outbox::TraceContext::continue_in(&parent, &span);
        }
        let Some(subscriber) = attribute(message, SUBSCRIBER_ATTRIBUTE) else {
            return self.fan_out(body, &event, report).instrument(span).await;
        };
        let copy = SubscriberMessage { message, body, subscriber, attempt };
        self.handle_copy(&copy, &event, budget_end, gates, report).instrument(span).await
    }

    /// One per-subscriber copy: the subscriber looked up (unknown or disabled: dead-lettered),
    /// its `not_before` and its breaker's gate (waits), the time budget, then the attempt and
    /// what its decision asks (settled, re-enqueued, dead-lettered, subscriber disabled).
    async fn handle_copy(
        &self,
        copy: &SubscriberMessage<'_>,
        event: &WebhookEvent,
        budget_end: DateTime<Utc>,
        gates: &HashMap<String, BatchGate>,
        report: &Mutex<DispatchReport>,
    ) -> MessageResult {
        let subscribers = match self.subscribers.all().await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the subscribers");
                lock(report).failed += 1;
                return MessageResult::Failed;
            }
        };
        // Not enabled in the cached list: it may have been enabled (or added) since; read again.
        let subscribers = match subscribers.iter().any(|s| s.id == copy.subscriber && s.enabled) {
            true => subscribers,
            false => match self.subscribers.refresh().await {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the subscribers");
                    lock(report).failed += 1;
                    return MessageResult::Failed;
                }
            },
        };
        let Some(subscriber) = subscribers.iter().find(|s| s.id == copy.subscriber && s.enabled) else {
            // Dead-lettered, never dropped: `webhooks enable --recover` (or `dlq redrive`) brings it back.
            let (code, reason) = match subscribers.iter().any(|s| s.id == copy.subscriber) {
                true => ("WebhookEndpointDisabled", format!("subscriber {} is disabled", copy.subscriber)),
                false => ("WebhookUnknownSubscriber", format!("subscriber {} is unknown", copy.subscriber)),
            };
            return self.dead_letter(copy.body, Some(&copy.subscriber), code, &reason, report).await;
        };
        // A retry whose time has not come (SQS delays a message 15 minutes at most).
        let now = Utc::now().timestamp_millis();
        if let Some(not_before) = attribute(copy.message, NOT_BEFORE_ATTRIBUTE).and_then(|n| n.parse::<i64>().ok()) {
            if not_before > now {
                tracing::debug!(subscriber = %subscriber.id, wait_ms = not_before - now, "webhook retry not due yet");
                return self.defer(copy, millis(not_before - now), report).await;
            }
        }
        // The subscriber's circuit breaker.
        let mut probe = false;
        let gate = gates.get(&subscriber.id);
        match gate.map(|g| g.state.gate(now)) {
            None | Some(Gate::Closed) => {}
            Some(Gate::Open { until }) => {
                tracing::debug!(subscriber = %subscriber.id, wait_ms = until - now, "circuit open: webhook waits");
                return self.defer(copy, millis(until - now), report).await;
            }
            Some(Gate::HalfOpen) => {
                let cooldown = self.config.breaker.cooldown;
                if gate.is_some_and(|g| g.probe_tried.swap(true, std::sync::atomic::Ordering::SeqCst)) {
                    return self.defer(copy, cooldown, report).await;
                }
                let lease = now + i64::try_from((self.config.client.timeout + self.config.batch_margin).as_millis()).unwrap_or(60_000);
                match self.subscribers.claim_probe(&subscriber.id, now, lease).await {
                    Ok(true) => {
                        tracing::info!(subscriber = %subscriber.id, "circuit half-open: this delivery is the probe");
                        probe = true;
                    }
                    Ok(false) => return self.defer(copy, cooldown, report).await,
                    Err(e) => {
                        tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot claim the breaker's probe; the webhook waits");
                        return self.defer(copy, cooldown, report).await;
                    }
                }
            }
        }
        // The batch's time budget: an attempt starts only with enough of it left.
        let left = (budget_end - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        if left < self.config.min_attempt_time {
            tracing::debug!(subscriber = %subscriber.id, "no time left in the batch: not attempted");
            lock(report).not_attempted += 1;
            return MessageResult::Failed;
        }
        let secrets = match self.secrets.get(&subscriber.secret_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot read the subscriber's secret");
                lock(report).failed += 1;
                return MessageResult::Failed;
            }
        };
        let trace = copy.message.attributes.get("AWSTraceHeader").map(String::as_str);
        let resolve = || self.inline_payload(event);
        let attempted = self.deliverer.attempt(subscriber, &secrets, event, resolve, copy.attempt, budget_end, trace).await;
        self.update_breaker(subscriber, gate, probe, &attempted, report).await;
        if let (Some(log), Some(sent)) = (&self.attempt_log, &attempted.sent) {
            if let Err(e) = log.record(&subscriber.id, &event.metadata.id, copy.attempt, sent).await {
                tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot record the attempt");
            }
        }
        record_metrics(&subscriber.id, &attempted.decision);
        match attempted.decision {
            Decision::Delivered { status, latency } => {
                tracing::debug!(subscriber = %subscriber.id, status, latency_ms = latency.as_millis() as u64, "webhook delivered");
                lock(report).delivered += 1;
                MessageResult::Done
            }
            Decision::AlreadyDelivered => {
                tracing::debug!(subscriber = %subscriber.id, "webhook delivered before; not sent again");
                lock(report).already_delivered += 1;
                MessageResult::Done
            }
            Decision::Retry { delay, reason } => {
                tracing::debug!(subscriber = %subscriber.id, delay_s = delay.as_secs(), %reason, "webhook will be retried");
                match self.requeue(copy, copy.attempt + 1, delay).await {
                    Ok(()) => {
                        lock(report).retried += 1;
                        MessageResult::Done
                    }
                    Err(()) => {
                        lock(report).failed += 1;
                        MessageResult::Failed
                    }
                }
            }
            Decision::DeadLetter { code, reason, disable } => {
                if disable {
                    match self.subscribers.disable(&subscriber.id, &reason).await {
                        Ok(()) => {
                            lock(report).disabled += 1;
                            tracing::warn!(subscriber = %subscriber.id, "subscriber answered 410 Gone: disabled");
                        }
                        Err(e) => tracing::warn!(subscriber = %subscriber.id, error = %e, "could not disable the subscriber"),
                    }
                }
                self.dead_letter(copy.body, Some(&subscriber.id), code, &reason, report).await
            }
        }
    }

    /// The breaker's bookkeeping after an attempt: a 2xx closes it (when it was not closed and
    /// clean), a failure counts (and may open it).
    async fn update_breaker(
        &self,
        subscriber: &Subscriber,
        gate: Option<&BatchGate>,
        probe: bool,
        attempted: &Attempted,
        report: &Mutex<DispatchReport>,
    ) {
        if self.config.breaker.threshold == 0 {
            return;
        }
        match attempted.endpoint_up() {
            Some(true) if probe || gate.is_some_and(|g| !g.state.is_clean()) => match self.subscribers.record_success(&subscriber.id).await {
                Ok(()) if probe => tracing::info!(subscriber = %subscriber.id, "circuit closed: the probe was delivered"),
                Ok(()) => {}
                Err(e) => tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot reset the circuit breaker"),
            },
            Some(false) => {
                let now = Utc::now().timestamp_millis();
                match self.subscribers.record_failure(&subscriber.id, now, &self.config.breaker, probe).await {
                    Ok(state) => {
                        if state.open_until.is_some() {
                            lock(report).breakers_opened += 1;
                            tracing::warn!(subscriber = %subscriber.id, failures = state.failures, cooldown_s = self.config.breaker.cooldown.as_secs(), "circuit opened: the subscriber's webhooks wait");
                        }
                        let failing_for = millis(now - state.failing_since.unwrap_or(now));
                        if !self.config.disable_after.is_zero() && failing_for >= self.config.disable_after {
                            self.disable_failing(subscriber, state.failing_since.unwrap_or(now), report).await;
                        }
                    }
                    Err(e) => tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot count the failure in the circuit breaker"),
                }
            }
            _ => {}
        }
    }

    /// Disables a subscriber that has failed every attempt since `failing_since` (epoch ms) for
    /// longer than `disable_after`; the invocation whose conditional write wins announces it
    /// (`WebhookEndpointDisabled` on the bus, counter `WebhookEndpointsDisabled`).
    async fn disable_failing(&self, subscriber: &Subscriber, failing_since: i64, report: &Mutex<DispatchReport>) {
        let since = DateTime::<Utc>::from_timestamp_millis(failing_since).unwrap_or_else(Utc::now);
        let reason = format!("every attempt failed since {}", since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        match self.subscribers.disable_failing(&subscriber.id, &reason, failing_since).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(subscriber = %subscriber.id, error = %e, "could not disable the failing subscriber");
                return;
            }
        }
        lock(report).disabled += 1;
        tracing::error!(subscriber = %subscriber.id, %reason, "webhook endpoint disabled; `outbox webhooks enable` re-enables it and recovers what it missed");
        #[cfg(feature = "metrics")]
        metrics::counter!(outbox::contract::metric::WEBHOOK_ENDPOINTS_DISABLED).increment(1);
        let Some(bus) = &self.config.event_bus else { return };
        let detail = serde_json::json!({
            "subscriber": subscriber.id,
            "url": subscriber.url,
            "failing_since": since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "disabled_at": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "reason": reason,
        });
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(bus)
            .source(&self.config.event_source)
            .detail_type(ENDPOINT_DISABLED)
            .detail(detail.to_string())
            .build();
        match self.events.put_events().entries(entry).send().await {
            Ok(out) if out.failed_entry_count() == 0 => {}
            Ok(out) => tracing::warn!(entries = ?out.entries(), "the WebhookEndpointDisabled event was refused"),
            Err(e) => tracing::warn!(error = %aws_sdk_eventbridge::error::DisplayErrorContext(e), "could not announce the disabled endpoint"),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves only a cache behind: keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `ms` milliseconds (0 when negative).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn failure(id: String) -> BatchItemFailure {
    let mut f = BatchItemFailure::default();
    f.item_identifier = id;
    f
}

/// Counters `WebhooksDelivered`, `WebhookRetries` (`WebhooksDeadLettered`: in `dead_letter`) and histogram
/// `WebhookLatencyMilliseconds`, labelled `subscriber` (feature `metrics`; EMF in Lambda).
#[allow(unused_variables)]
fn record_metrics(subscriber: &str, decision: &Decision) {
    #[cfg(feature = "metrics")]
    {
        let label = subscriber.to_owned();
        match decision {
            Decision::Delivered { latency, .. } => {
                metrics::counter!(outbox::contract::metric::WEBHOOKS_DELIVERED, outbox::contract::dimension::SUBSCRIBER => label.clone())
                    .increment(1);
                metrics::histogram!(outbox::contract::metric::WEBHOOK_LATENCY_MILLISECONDS, outbox::contract::dimension::SUBSCRIBER => label)
                    .record(latency.as_secs_f64() * 1000.0);
            }
            Decision::Retry { .. } => {
                metrics::counter!(outbox::contract::metric::WEBHOOK_RETRIES, outbox::contract::dimension::SUBSCRIBER => label).increment(1)
            }
            // Counted where every dead letter is sent (`Dispatcher::dead_letter`).
            Decision::DeadLetter { .. } | Decision::AlreadyDelivered => {}
        }
    }
}
