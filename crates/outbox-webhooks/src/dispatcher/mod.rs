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
//! **The schedule** ([`RetrySchedule`], default Svix's: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
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
//! subscriber failing [`BreakerConfig::threshold`] times in a row opens its circuit breaker
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

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::Instrument;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::backoff::{ceil_seconds, RetrySchedule};
use super::breaker::{BreakerConfig, BreakerState, Gate};
use super::client::{Attempt as ClientAttempt, ClientConfig, SignedPost, WebhookClient};
use super::outcome::Outcome;
use super::signature::Secret;
use outbox::envelope::EventMetadata;
use outbox::inbox::{GuardedError, InboxError, InboxStore, PayloadHash};

/// The message attribute naming the subscriber of a fanned-out message.
pub const SUBSCRIBER_ATTRIBUTE: &str = "subscriber";
/// The message attribute carrying the attempt a re-enqueued copy is for (Number; absent: 1).
pub const ATTEMPT_ATTRIBUTE: &str = "attempt";
/// The message attribute carrying when a re-enqueued copy may be attempted (Number, epoch ms).
pub const NOT_BEFORE_ATTRIBUTE: &str = "not_before";
/// SQS's longest `DelaySeconds`: 15 minutes (`SendMessage` API reference).
pub const MAX_DELAY_SECONDS: u64 = 900;
/// SQS's longest visibility timeout, counted from a message's first receive: 12 hours
/// (`ChangeMessageVisibility` API reference).
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);
/// The default time a subscriber may fail every attempt before it is disabled: 3 days (the
/// outbox keeps events 7 days, so `recover` still finds everything it missed).
pub const DEFAULT_DISABLE_AFTER: Duration = Duration::from_secs(3 * 24 * 60 * 60);
/// The detail-type of the event announcing a disabled subscriber.
pub const ENDPOINT_DISABLED: &str = "WebhookEndpointDisabled";
/// What a visibility hold keeps clear of [`MAX_VISIBILITY`] (the receive time is approximate).
const VISIBILITY_MARGIN: Duration = Duration::from_secs(60);

/// One subscriber, as stored in the subscriber table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Subscriber {
    /// Subscriber id (the table's partition key `id`): the metric dimension and inbox key part.
    pub id: String,
    /// Endpoint URL (`https://`; `http://` only with `WEBHOOK_ALLOW_HTTP`).
    pub url: String,
    /// Event types delivered (`detail.metadata.type`); `*` for all.
    pub event_types: Vec<String>,
    /// Secrets Manager secret id or ARN holding the subscriber's `whsec_` secret(s).
    pub secret_id: String,
    /// `false` after a 410 (or by hand): no more deliveries. Default `true`.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl Subscriber {
    /// An enabled subscriber: `url` gets the `event_types` (`*` for all), signed with the
    /// secrets of Secrets Manager secret `secret_id`.
    pub fn new(id: impl Into<String>, url: impl Into<String>, event_types: Vec<String>, secret_id: impl Into<String>) -> Self {
        Self { id: id.into(), url: url.into(), event_types, secret_id: secret_id.into(), enabled: true }
    }

    /// Whether this subscriber gets events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.enabled && self.event_types.iter().any(|t| t == "*" || t == event_type)
    }
}

/// A bus event as the delivery queue holds it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebhookEvent {
    /// The envelope metadata (`detail.metadata`): `id` is the `webhook-id`.
    pub metadata: EventMetadata,
    /// The request body: the event's `detail`, verbatim (for a claim-checked event, until the
    /// dispatcher replaced its `data_ref` with the payload: [`WebhookEvent::with_payload`]).
    pub body: String,
    /// `detail.data_ref` of a claim-checked event (its payload is in S3, `detail.data` absent).
    pub data_ref: Option<outbox::envelope::PayloadRef>,
}

/// Why a queue message could not be read as a bus event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the message is not an EventBridge event with the outbox envelope as detail: {0}")]
pub struct NotAnEvent(pub String);

impl WebhookEvent {
    /// Reads an EventBridge event (the SQS body an EventBridge rule target delivers).
    ///
    /// # Errors
    /// [`NotAnEvent`] naming what is missing.
    pub fn parse(message_body: &str) -> Result<Self, NotAnEvent> {
        #[derive(Deserialize)]
        struct Routed<'a> {
            #[serde(borrow)]
            detail: &'a RawValue,
        }
        /// `detail`: the envelope's metadata and its payload, inline (`data`) or claim-checked (`data_ref`).
        #[derive(Deserialize)]
        struct Detail<'a> {
            metadata: EventMetadata,
            // `deserialize_with` runs only for a present key: `"data": null` is a payload.
            #[serde(borrow, default, deserialize_with = "present")]
            data: Option<&'a RawValue>,
            data_ref: Option<outbox::envelope::PayloadRef>,
        }
        fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
            <&RawValue>::deserialize(d).map(Some)
        }
        let routed: Routed<'_> = serde_json::from_str(message_body).map_err(|e| NotAnEvent(e.to_string()))?;
        let detail: Detail<'_> = serde_json::from_str(routed.detail.get()).map_err(|e| NotAnEvent(format!("detail: {e}")))?;
        let data_ref = match (detail.data, detail.data_ref) {
            (Some(_), None) => None,
            (None, Some(reference)) => Some(reference),
            (Some(_), Some(_)) => return Err(NotAnEvent("detail: both `data` and `data_ref`".to_owned())),
            (None, None) => return Err(NotAnEvent("detail: neither `data` nor `data_ref`".to_owned())),
        };
        Ok(Self { metadata: detail.metadata, body: routed.detail.get().to_owned(), data_ref })
    }

    /// This claim-checked event with its payload inline: the body becomes
    /// `{"metadata": …, "data": <payload>}`, what the subscriber would have received had the
    /// payload fitted in the event (a subscriber never sees the S3 reference).
    ///
    /// # Errors
    /// [`NotAnEvent`] when `payload` is not JSON.
    pub fn with_payload(&self, payload: &[u8]) -> Result<Self, NotAnEvent> {
        /// The detail's metadata as the producer wrote it, and the payload.
        #[derive(Deserialize, Serialize)]
        struct Inline<'a> {
            #[serde(borrow)]
            metadata: &'a RawValue,
            #[serde(borrow, default)]
            data: Option<&'a RawValue>,
        }
        let mut detail: Inline<'_> = serde_json::from_str(&self.body).map_err(|e| NotAnEvent(format!("detail: {e}")))?;
        detail.data = Some(serde_json::from_slice(payload).map_err(|e| NotAnEvent(format!("the claim-checked payload is not JSON: {e}")))?);
        let body = serde_json::to_string(&detail).map_err(|e| NotAnEvent(format!("the event with its payload cannot be written: {e}")))?;
        Ok(Self { metadata: self.metadata.clone(), body, data_ref: None })
    }
}

/// What to do with one (event, subscriber) message after an attempt.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Decision {
    /// Delivered now (2xx).
    Delivered {
        /// HTTP status.
        status: u16,
        /// Request latency.
        latency: Duration,
    },
    /// Delivered before (the inbox holds the record): no request was sent.
    AlreadyDelivered,
    /// Try again after `delay` (the message's new visibility timeout).
    Retry {
        /// Delay before the next attempt.
        delay: Duration,
        /// Why.
        reason: String,
    },
    /// Give up: dead-letter the message with this reason.
    DeadLetter {
        /// `ERROR_CODE` attribute.
        code: &'static str,
        /// `ERROR_MESSAGE` attribute.
        reason: String,
        /// Disable the subscriber too (410).
        disable: bool,
    },
}

/// Why a claim-checked event's payload could not be put inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// S3 failed in a way a later attempt can get past: retried like a 5xx.
    Transient(String),
    /// It can never be delivered: the dead letter's `ERROR_CODE` and `ERROR_MESSAGE`.
    Permanent(&'static str, String),
}

/// `WebhookClaimCheckUnavailable`: a claim-checked event and nothing to fetch its payload with.
fn no_claim_check(reference: Option<&outbox::envelope::PayloadRef>) -> Unresolved {
    let what = reference.map_or_else(String::new, |r| format!(" (s3://{}/{}, {} bytes)", r.bucket, r.key, r.size));
    Unresolved::Permanent(
        "WebhookClaimCheckUnavailable",
        format!("the event's payload is claim-checked{what} and this dispatcher has no claim check to fetch it (CLAIM_CHECK_BUCKET)"),
    )
}

/// Why an attempt failed inside the inbox guard.
enum Failure {
    Http(Outcome),
    Payload(Unresolved),
}

/// The delivery core, without queues: one attempt to one subscriber, guarded by the inbox.
#[derive(Debug, Clone)]
pub struct Deliverer<S> {
    client: WebhookClient,
    inbox: S,
    schedule: RetrySchedule,
}

/// The value stored with a delivered (event, subscriber) in the inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryRecord {
    /// HTTP status of the delivering attempt.
    pub status: u16,
    /// Which attempt delivered it (1 = the first).
    pub attempt: u32,
}

/// One attempt's decision, and the HTTP request it sent (if it sent one).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Attempted {
    /// What to do with the message.
    pub decision: Decision,
    /// The request sent and its answer; `None` when nothing was sent (delivered before, the
    /// payload or the inbox failed first).
    pub sent: Option<ClientAttempt>,
}

impl Attempted {
    /// Whether the subscriber's endpoint answered (`Some(true)`: 2xx), failed (`Some(false)`:
    /// timeout, connection error, 408, 429, 5xx) or neither (`None`): its circuit breaker's input.
    pub fn endpoint_up(&self) -> Option<bool> {
        match self.sent.as_ref().map(|a| &a.outcome) {
            Some(Outcome::Delivered { .. }) => Some(true),
            Some(Outcome::Retry { .. }) => Some(false),
            _ => None,
        }
    }
}

impl<S: InboxStore> Deliverer<S> {
    /// A deliverer recording deliveries in `inbox` (key `<consumer>#<subscriber>#<event id>`),
    /// retrying on `schedule` (its length + 1 attempts, then dead-lettered).
    pub fn new(client: WebhookClient, inbox: S, schedule: RetrySchedule) -> Self {
        Self { client, inbox, schedule }
    }

    /// The inbox.
    pub fn inbox(&self) -> &S {
        &self.inbox
    }

    /// The retry schedule.
    pub fn schedule(&self) -> &RetrySchedule {
        &self.schedule
    }

    /// Attempt number `attempt` (1 for the first) of delivering `event` to `subscriber`.
    /// `lease_until` bounds how long a crash here blocks the next attempt, and the request
    /// itself (it must end by then). A claim-checked `event` (`data_ref`) is dead-lettered
    /// `WebhookClaimCheckUnavailable`: the dispatcher delivers those with [`Deliverer::deliver_resolved`].
    pub async fn deliver(
        &self,
        subscriber: &Subscriber,
        secrets: &[Secret],
        event: &WebhookEvent,
        attempt: u32,
        lease_until: DateTime<Utc>,
        trace_header: Option<&str>,
    ) -> Decision {
        let resolve = || async { Err(no_claim_check(event.data_ref.as_ref())) };
        self.deliver_resolved(subscriber, secrets, event, resolve, attempt, lease_until, trace_header).await
    }

    /// [`Deliverer::deliver`], where a claim-checked `event` is first given its payload by
    /// `resolve` (fetch and verify), only when a request is about to be sent: a delivery the
    /// inbox already holds reads nothing from S3. A transient failure of `resolve` is retried with
    /// the same schedule as a 5xx; a permanent one dead-letters with its code.
    /// The inbox's payload hash is over the event as published (its reference carries the
    /// payload's SHA-256), so it is the same on every redelivery.
    #[allow(clippy::too_many_arguments)]
    pub async fn deliver_resolved<F, Fut>(
        &self,
        subscriber: &Subscriber,
        secrets: &[Secret],
        event: &WebhookEvent,
        resolve: F,
        attempt: u32,
        lease_until: DateTime<Utc>,
        trace_header: Option<&str>,
    ) -> Decision
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = Result<WebhookEvent, Unresolved>> + Send,
    {
        self.attempt(subscriber, secrets, event, resolve, attempt, lease_until, trace_header).await.decision
    }

    /// [`Deliverer::deliver_resolved`], with the request it sent.
    #[allow(clippy::too_many_arguments)]
    pub async fn attempt<F, Fut>(
        &self,
        subscriber: &Subscriber,
        secrets: &[Secret],
        event: &WebhookEvent,
        resolve: F,
        attempt: u32,
        lease_until: DateTime<Utc>,
        trace_header: Option<&str>,
    ) -> Attempted
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = Result<WebhookEvent, Unresolved>> + Send,
    {
        let mut claim = event.metadata.clone();
        claim.id = format!("{}#{}", subscriber.id, event.metadata.id);
        let hash = PayloadHash::of(&event.body);
        let correlation_id = Some(&event.metadata.correlation_id).filter(|c| !c.is_empty()).map(String::as_str);
        let attempt = attempt.max(1);
        let sent: Mutex<Option<ClientAttempt>> = Mutex::new(None);
        let result = self
            .inbox
            .guarded(&claim, &hash, lease_until, || async {
                let inline;
                let body = match event.data_ref {
                    None => &event.body,
                    Some(_) => {
                        inline = resolve().await.map_err(Failure::Payload)?;
                        &inline.body
                    }
                };
                let post = SignedPost { url: &subscriber.url, id: &event.metadata.id, body, secrets, correlation_id, trace_header };
                // The request ends by the lease's end (the invocation's time budget); a lease
                // already over (the dispatcher never starts one so) leaves the client's timeout.
                let left = (lease_until - Utc::now()).to_std().ok().filter(|l| !l.is_zero());
                let answer = self.client.post(&post, Utc::now().timestamp(), left).await;
                let outcome = answer.outcome.clone();
                let latency = answer.latency;
                *lock(&sent) = Some(answer);
                match outcome {
                    Outcome::Delivered { status } => Ok((DeliveryRecord { status, attempt }, latency)),
                    other => Err(Failure::Http(other)),
                }
            })
            .await;
        let decision = match result {
            Ok(guarded) if guarded.is_replayed() => Decision::AlreadyDelivered,
            Ok(guarded) => {
                let (record, latency) = guarded.into_inner();
                Decision::Delivered { status: record.status, latency }
            }
            Err(GuardedError::Effect(Failure::Payload(Unresolved::Permanent(code, reason)))) => Decision::DeadLetter { code, reason, disable: false },
            Err(GuardedError::Effect(Failure::Payload(Unresolved::Transient(reason)))) => self.retry(attempt, reason, None),
            Err(GuardedError::Effect(Failure::Http(Outcome::Retry { reason, retry_after }))) => self.retry(attempt, reason, retry_after),
            Err(GuardedError::Effect(Failure::Http(gone @ Outcome::Gone { .. }))) => {
                Decision::DeadLetter { code: "WebhookGone", reason: gone.reason(), disable: true }
            }
            Err(GuardedError::Effect(Failure::Http(other))) => {
                Decision::DeadLetter { code: "WebhookRejected", reason: other.reason(), disable: false }
            }
            // Another invocation holds the delivery (a duplicate of this message): not an
            // attempt of ours; look again after the first delay.
            Err(GuardedError::Inbox(e @ InboxError::InProgress { .. })) => Decision::Retry { delay: self.first_delay(), reason: e.to_string() },
            Err(e) if e.is_retryable() => self.retry(attempt, e.to_string(), None),
            Err(e) => Decision::DeadLetter { code: "WebhookInboxError", reason: e.to_string(), disable: false },
        };
        let sent = sent.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        Attempted { decision, sent }
    }

    fn first_delay(&self) -> Duration {
        self.schedule.delay(0, None).unwrap_or(Duration::from_secs(1))
    }

    /// Attempt `attempt` failed in a way worth retrying: wait as the schedule says, or give up
    /// after the last attempt.
    fn retry(&self, attempt: u32, reason: String, retry_after: Option<Duration>) -> Decision {
        match self.schedule.delay(attempt - 1, retry_after) {
            Some(delay) => Decision::Retry { delay, reason },
            None => Decision::DeadLetter {
                code: "WebhookRetriesExhausted",
                reason: format!("gave up after {attempt} attempts; last: {reason}"),
                disable: false,
            },
        }
    }
}

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

/// A failure reading configuration from AWS (retryable: the message is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// A call to AWS failed.
    #[error("{action} failed: {}", .source.detail)]
    Aws {
        /// What was being done.
        action: &'static str,
        /// The classified failure: code, HTTP status, whether a retry can succeed.
        #[source]
        source: outbox::AwsError,
    },
    /// A secret is not `whsec_` text.
    #[error("secret {secret_id} is unusable: {reason}")]
    Secret {
        /// The secret id.
        secret_id: String,
        /// Why.
        reason: String,
    },
    /// A subscriber item does not have the expected attributes.
    #[error("subscriber table item is malformed: {0}")]
    Subscriber(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves only a cache behind: keep using it.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Secrets Manager secrets cached for a TTL.
#[derive(Debug)]
pub struct SecretCache {
    client: aws_sdk_secretsmanager::Client,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Vec<Secret>)>>,
}

impl SecretCache {
    /// A cache over `client`.
    pub fn new(client: aws_sdk_secretsmanager::Client, ttl: Duration) -> Self {
        Self { client, ttl, cache: Mutex::new(HashMap::new()) }
    }

    /// The secrets of `secret_id` (`GetSecretValue`'s `SecretString`, whitespace-separated `whsec_` values).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn get(&self, secret_id: &str) -> Result<Vec<Secret>, DispatchError> {
        if let Some((at, secrets)) = lock(&self.cache).get(secret_id) {
            if at.elapsed() < self.ttl {
                return Ok(secrets.clone());
            }
        }
        let out = self
            .client
            .get_secret_value()
            .secret_id(secret_id)
            .send()
            .await
            .map_err(|e| DispatchError::Aws { action: "GetSecretValue", source: outbox::AwsError::from_sdk("GetSecretValue", &e) })?;
        let text = out.secret_string().unwrap_or_default();
        let secrets = Secret::parse_list(text).map_err(|e| DispatchError::Secret { secret_id: secret_id.to_owned(), reason: e.to_string() })?;
        lock(&self.cache).insert(secret_id.to_owned(), (Instant::now(), secrets.clone()));
        Ok(secrets)
    }
}

/// The subscriber table, its `Scan` cached for a TTL.
#[derive(Debug)]
pub struct SubscriberTable {
    client: aws_sdk_dynamodb::Client,
    table: String,
    ttl: Duration,
    cache: Mutex<Option<(Instant, Vec<Subscriber>)>>,
}

impl SubscriberTable {
    /// The table `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>, ttl: Duration) -> Self {
        Self { client, table: table.into(), ttl, cache: Mutex::new(None) }
    }

    /// Every subscriber (enabled or not).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn all(&self) -> Result<Vec<Subscriber>, DispatchError> {
        if let Some((at, list)) = lock(&self.cache).as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(list.clone());
            }
        }
        self.refresh().await
    }

    /// Every subscriber, read now (the cache renewed).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn refresh(&self) -> Result<Vec<Subscriber>, DispatchError> {
        let mut list = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| DispatchError::Aws { action: "Scan of the subscriber table", source: outbox::AwsError::from_sdk("Scan", &e) })?;
            let items: Vec<Subscriber> = serde_dynamo::from_items(out.items().to_vec()).map_err(|e| DispatchError::Subscriber(e.to_string()))?;
            list.extend(items);
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        *lock(&self.cache) = Some((Instant::now(), list.clone()));
        Ok(list)
    }

    /// Sets `enabled = false` with the reason and time (after a 410), and forgets the cache.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn disable(&self, id: &str, reason: &str) -> Result<(), DispatchError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET enabled = :no, disabled_reason = :reason, disabled_at = :at")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .expression_attribute_values(":reason", AttributeValue::S(reason.to_owned()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339()))
            .send()
            .await
            .map_err(|e| DispatchError::Aws { action: "UpdateItem (disable subscriber)", source: outbox::AwsError::from_sdk("UpdateItem", &e) })?;
        *lock(&self.cache) = None;
        Ok(())
    }
}

impl SubscriberTable {
    fn aws<E>(action: &'static str) -> impl FnOnce(aws_sdk_dynamodb::error::SdkError<E>) -> DispatchError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        move |e| DispatchError::Aws { action, source: outbox::AwsError::from_sdk(action, &e) }
    }

    /// The breaker attributes of subscriber `id` (a consistent `GetItem`; an absent item is a
    /// closed breaker).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn breaker(&self, id: &str) -> Result<BreakerState, DispatchError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .projection_expression("breaker_failures, breaker_open_until, breaker_probe_until, failing_since")
            .send()
            .await
            .map_err(Self::aws("GetItem (circuit breaker)"))?;
        Ok(out.item.as_ref().map(breaker_state).unwrap_or_default())
    }

    /// Makes this caller the probe of a half-open breaker until `until` (epoch ms): `true` for
    /// exactly one of racing callers (a conditional `UpdateItem`).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn claim_probe(&self, id: &str, now: i64, until: i64) -> Result<bool, DispatchError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET breaker_probe_until = :until")
            .condition_expression("breaker_open_until <= :now AND (attribute_not_exists(breaker_probe_until) OR breaker_probe_until <= :now)")
            .expression_attribute_values(":until", AttributeValue::N(until.to_string()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(Self::aws("UpdateItem (claim the breaker's probe)")(e)),
        }
    }

    /// A 2xx from subscriber `id`: its breaker closes (failures 0, the rest removed).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record_success(&self, id: &str) -> Result<(), DispatchError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET breaker_failures = :zero REMOVE breaker_open_until, breaker_probe_until, failing_since")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send()
            .await
            .map_err(Self::aws("UpdateItem (close the breaker)"))?;
        Ok(())
    }

    /// A failed attempt to subscriber `id` at `now` (epoch ms): one more consecutive failure;
    /// at `config.threshold` (or when this was the probe) the breaker opens for the cool-down.
    /// Returns the state after.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record_failure(&self, id: &str, now: i64, config: &BreakerConfig, probe: bool) -> Result<BreakerState, DispatchError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("ADD breaker_failures :one SET failing_since = if_not_exists(failing_since, :now) REMOVE breaker_probe_until")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await
            .map_err(Self::aws("UpdateItem (count a failure)"))?;
        let mut state = out.attributes.as_ref().map(breaker_state).unwrap_or_default();
        if config.threshold > 0 && (probe || state.failures >= config.threshold) {
            let until = now + i64::try_from(config.cooldown.as_millis()).unwrap_or(i64::MAX / 2);
            self.client
                .update_item()
                .table_name(&self.table)
                .key("id", AttributeValue::S(id.to_owned()))
                .update_expression("SET breaker_open_until = :until")
                .condition_expression("attribute_exists(id)")
                .expression_attribute_values(":until", AttributeValue::N(until.to_string()))
                .send()
                .await
                .map_err(Self::aws("UpdateItem (open the breaker)"))?;
            state.open_until = Some(until);
        }
        Ok(state)
    }
}

impl SubscriberTable {
    /// Disables subscriber `id` for failing since `failing_since` (epoch ms): `enabled = false`,
    /// `disabled_reason`, `disabled_at`, `disabled_failing_since` (where `enable` recovers
    /// from). `false` when it was disabled already (another invocation won).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn disable_failing(&self, id: &str, reason: &str, failing_since: i64) -> Result<bool, DispatchError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET enabled = :no, disabled_reason = :reason, disabled_at = :at, disabled_failing_since = :since")
            .condition_expression("attribute_exists(id) AND enabled = :yes")
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":reason", AttributeValue::S(reason.to_owned()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339()))
            .expression_attribute_values(":since", AttributeValue::N(failing_since.to_string()))
            .send()
            .await;
        *lock(&self.cache) = None;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(Self::aws("UpdateItem (disable a failing subscriber)")(e)),
        }
    }
}

/// The breaker attributes of a subscriber item.
fn breaker_state(item: &HashMap<String, AttributeValue>) -> BreakerState {
    let n = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
    BreakerState {
        failures: n("breaker_failures").and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
        open_until: n("breaker_open_until"),
        probe_until: n("breaker_probe_until"),
        failing_since: n("failing_since"),
    }
}

/// The attempts of each (subscriber, event), kept for a retention: one item per pair in the
/// inbox table, `pk = <consumer>#attempts#<subscriber>#<event id>`, its `attempts` a list of
/// `{attempt, at, status, latency_ms, outcome, excerpt}` (`excerpt`: the first 1 KiB of the
/// answer, or the transport error), `expires_at` the table's TTL attribute. `trace` and the
/// operator's `outbox webhooks attempts` read it with one `GetItem`.
#[derive(Debug, Clone)]
pub struct AttemptLog {
    client: aws_sdk_dynamodb::Client,
    table: String,
    consumer: String,
    retention: Duration,
}

/// One recorded attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// Attempt number (1: the first).
    pub attempt: u32,
    /// When it was sent (RFC 3339).
    pub at: String,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// Request latency, milliseconds.
    pub latency_ms: u64,
    /// What it meant (`delivered (HTTP 204)`, `HTTP 503`, `timeout: …`).
    pub outcome: String,
    /// The first 1 KiB of the answer's body, or the transport error.
    pub excerpt: String,
}

impl AttemptLog {
    /// The log in `table`, under `consumer` (the dispatcher's `WEBHOOK_CONSUMER_NAME`), each
    /// pair's item kept `retention` after its last attempt.
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str, consumer: &str, retention: Duration) -> Self {
        Self { client, table: table.to_owned(), consumer: consumer.to_owned(), retention }
    }

    /// The item key of (`subscriber`, `event_id`).
    pub fn key(consumer: &str, subscriber: &str, event_id: &str) -> String {
        format!("{consumer}#attempts#{subscriber}#{event_id}")
    }

    /// Appends one attempt.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record(&self, subscriber: &str, event_id: &str, attempt: u32, sent: &ClientAttempt) -> Result<(), DispatchError> {
        let record = AttemptRecord {
            attempt,
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            status: sent.status,
            latency_ms: u64::try_from(sent.latency.as_millis()).unwrap_or(u64::MAX),
            outcome: sent.outcome.reason().chars().take(200).collect(),
            excerpt: sent.excerpt.clone(),
        };
        let value: AttributeValue = serde_dynamo::to_attribute_value(&record).map_err(|e| DispatchError::Subscriber(e.to_string()))?;
        let expires = outbox::envelope::expires_at(Utc::now(), self.retention);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(Self::key(&self.consumer, subscriber, event_id)))
            .update_expression("SET attempts = list_append(if_not_exists(attempts, :empty), :one), expires_at = :expires, subscriber = :subscriber, event_id = :event")
            .expression_attribute_values(":empty", AttributeValue::L(vec![]))
            .expression_attribute_values(":one", AttributeValue::L(vec![value]))
            .expression_attribute_values(":expires", AttributeValue::N(expires.to_string()))
            .expression_attribute_values(":subscriber", AttributeValue::S(subscriber.to_owned()))
            .expression_attribute_values(":event", AttributeValue::S(event_id.to_owned()))
            .send()
            .await
            .map_err(SubscriberTable::aws("UpdateItem (record the attempt)"))?;
        Ok(())
    }
}

/// The attempts recorded for (`subscriber`, `event_id`) in `table` by `consumer` (empty: none).
///
/// # Errors
/// [`DispatchError`].
pub async fn read_attempts(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    subscriber: &str,
    event_id: &str,
) -> Result<Vec<AttemptRecord>, DispatchError> {
    let out = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(AttemptLog::key(consumer, subscriber, event_id)))
        .consistent_read(true)
        .send()
        .await
        .map_err(SubscriberTable::aws("GetItem (attempts)"))?;
    let Some(list) = out.item.as_ref().and_then(|i| i.get("attempts")).cloned() else { return Ok(Vec::new()) };
    serde_dynamo::from_attribute_value(list).map_err(|e| DispatchError::Subscriber(format!("attempts: {e}")))
}

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
            let payload = claim_check.fetch(reference).await.map_err(|e| {
                if e.is_retryable() {
                    Unresolved::Transient(e.to_string())
                } else {
                    Unresolved::Permanent(e.error_type(), e.to_string())
                }
            })?;
            return event.with_payload(&payload).map_err(|e| Unresolved::Permanent("PayloadCorrupt", e.to_string()));
        }
        Err(no_claim_check(event.data_ref.as_ref()))
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

    /// `ChangeMessageVisibility`: the message comes back after `delay`. `false` when SQS refused
    /// (the message then comes back after the queue's visibility timeout, and waits again).
    async fn hold(&self, message: &SqsMessage, delay: Duration) -> bool {
        let Some(receipt) = message.receipt_handle.as_deref() else { return false };
        let seconds = i32::try_from(delay.as_secs()).unwrap_or(i32::MAX);
        let result = self
            .sqs
            .change_message_visibility()
            .queue_url(&self.config.delivery_queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds)
            .send()
            .await;
        match result {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "ChangeMessageVisibility failed");
                false
            }
        }
    }

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
        let Some(subscriber) = attribute(message, SUBSCRIBER_ATTRIBUTE) else {
            return self.fan_out(body, &event, report).instrument(span).await;
        };
        let copy = SubscriberMessage { message, body, subscriber, attempt };
        self.handle_copy(&copy, &event, budget_end, gates, report).instrument(span).await
    }

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

    /// The message waits `wait` without an attempt: held by its visibility timeout when that
    /// fits within SQS's 12 hours from its first receive and this is that first receive,
    /// re-enqueued (same attempt, `not_before`) otherwise.
    async fn defer(&self, copy: &SubscriberMessage<'_>, wait: Duration, report: &Mutex<DispatchReport>) -> MessageResult {
        lock(report).deferred += 1;
        let wait = ceil_seconds(wait.max(Duration::from_secs(1)));
        let receive_count: u32 = copy.message.attributes.get("ApproximateReceiveCount").and_then(|c| c.parse().ok()).unwrap_or(1);
        let first_receive = copy.message.attributes.get("ApproximateFirstReceiveTimestamp").and_then(|t| t.parse::<i64>().ok());
        let held = first_receive.map_or(Duration::ZERO, |t| millis(Utc::now().timestamp_millis().saturating_sub(t)));
        let room = MAX_VISIBILITY.saturating_sub(held + VISIBILITY_MARGIN);
        if receive_count <= 1 && room >= Duration::from_secs(1) {
            // The rest, if longer than the room, is waited by a re-enqueued copy on the next receive.
            return MessageResult::Hold(wait.min(room));
        }
        match self.requeue(copy, copy.attempt, wait).await {
            Ok(()) => MessageResult::Done,
            Err(()) => {
                lock(report).failed += 1;
                MessageResult::Failed
            }
        }
    }

    /// Sends a copy of the message for attempt `attempt`, not before `wait` from now
    /// (`DelaySeconds` ≤ 15 minutes; the rest is waited on receive). The original is deleted
    /// only once this send succeeded (it is then reported settled).
    async fn requeue(&self, copy: &SubscriberMessage<'_>, attempt: u32, wait: Duration) -> Result<(), ()> {
        let wait = ceil_seconds(wait);
        let not_before = Utc::now().timestamp_millis() + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
        let delay = i32::try_from(wait.as_secs().min(MAX_DELAY_SECONDS)).unwrap_or(0);
        let sent = self
            .sqs
            .send_message()
            .queue_url(&self.config.delivery_queue_url)
            .message_body(copy.body)
            .delay_seconds(delay)
            .message_attributes(SUBSCRIBER_ATTRIBUTE, string_attribute(&copy.subscriber))
            .message_attributes(ATTEMPT_ATTRIBUTE, number_attribute(i64::from(attempt)))
            .message_attributes(NOT_BEFORE_ATTRIBUTE, number_attribute(not_before))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::warn!(subscriber = %copy.subscriber, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "could not re-enqueue the webhook; the message is retried as it is");
                Err(())
            }
        }
    }

    async fn fan_out(&self, body: &str, event: &WebhookEvent, report: &Mutex<DispatchReport>) -> MessageResult {
        let subscribers = match self.subscribers.all().await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the subscribers");
                lock(report).failed += 1;
                return MessageResult::Failed;
            }
        };
        let targets: Vec<&Subscriber> = subscribers.iter().filter(|s| s.wants(&event.metadata.event_type)).collect();
        for chunk in targets.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(body)
                        .message_attributes(SUBSCRIBER_ATTRIBUTE, string_attribute(&s.id))
                        .build()
                })
                .collect::<Result<Vec<_>, _>>();
            let entries = match entries {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::error!(error = %e, "fan-out entry incomplete");
                    lock(report).failed += 1;
                    return MessageResult::Failed;
                }
            };
            let sent = self.sqs.send_message_batch().queue_url(&self.config.delivery_queue_url).set_entries(Some(entries)).send().await;
            match sent {
                Ok(out) if out.failed().is_empty() => lock(report).fan_out_messages += chunk.len(),
                Ok(out) => {
                    // Retrying the whole fan-out repeats the sent ones: the inbox absorbs those.
                    tracing::warn!(failed = out.failed().len(), "fan-out partly failed; the event is retried");
                    lock(report).failed += 1;
                    return MessageResult::Failed;
                }
                Err(e) => {
                    tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "fan-out failed; the event is retried");
                    lock(report).failed += 1;
                    return MessageResult::Failed;
                }
            }
        }
        lock(report).fanned_out += 1;
        tracing::debug!(event_type = %event.metadata.event_type, subscribers = targets.len(), "event fanned out");
        MessageResult::Done
    }

    /// Sends the message to the dead-letter queue with its reason, and counts it in
    /// `WebhooksDeadLettered` (every dead letter: malformed messages under subscriber `none`).
    async fn dead_letter(&self, body: &str, subscriber: Option<&str>, code: &str, reason: &str, report: &Mutex<DispatchReport>) -> MessageResult {
        let mut send = self
            .sqs
            .send_message()
            .queue_url(&self.config.dead_letter_queue_url)
            .message_body(body)
            .message_attributes("ERROR_CODE", string_attribute(code))
            .message_attributes("ERROR_MESSAGE", string_attribute(reason));
        if let Some(subscriber) = subscriber {
            send = send.message_attributes(SUBSCRIBER_ATTRIBUTE, string_attribute(subscriber));
        }
        match send.send().await {
            Ok(_) => {
                tracing::warn!(subscriber = subscriber.unwrap_or(""), code, reason, "webhook dead-lettered");
                lock(report).dead_lettered += 1;
                #[cfg(feature = "metrics")]
                metrics::counter!(outbox::contract::metric::WEBHOOKS_DEAD_LETTERED, outbox::contract::dimension::SUBSCRIBER => subscriber.unwrap_or("none").to_owned()).increment(1);
                MessageResult::Done
            }
            Err(e) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "could not dead-letter; the message is retried");
                lock(report).failed += 1;
                MessageResult::Failed
            }
        }
    }
}

/// A message attribute's string value.
fn attribute(message: &SqsMessage, name: &str) -> Option<String> {
    message.message_attributes.get(name).and_then(|a| a.string_value.clone())
}

/// `ms` milliseconds (0 when negative).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn number_attribute(value: i64) -> MessageAttributeValue {
    // data_type is set: the only required field, so build cannot fail.
    MessageAttributeValue::builder().data_type("Number").string_value(value.to_string()).build().expect("data_type is set")
}

fn string_attribute(value: &str) -> MessageAttributeValue {
    // data_type is set: the only required field, so build cannot fail.
    MessageAttributeValue::builder().data_type("String").string_value(value).build().expect("data_type is set")
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
