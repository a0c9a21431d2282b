//! The webhook dispatcher (feature `webhook-dispatcher`): delivers bus events to subscribers'
//! HTTPS endpoints, signed, once per event and subscriber, with backoff.
//!
//! ```text
//! EventBridge rule ─▶ WebhookDeliveryQueue ─▶ dispatcher (SQS event source mapping, ReportBatchItemFailures)
//!   message without `subscriber` attribute: fan out ─▶ one message per matching subscriber (SendMessageBatch)
//!   message with `subscriber`:  guarded inbox claim ─▶ signed POST ─▶
//!       2xx        → recorded COMPLETED (a redelivery replays it: no second POST)
//!       408/429/5xx/timeout/connection → claim released; ChangeMessageVisibility(delay) + batchItemFailure
//!       retries used up, other 4xx, 3xx → WebhookDeadLetterQueue (ERROR_CODE/ERROR_MESSAGE attributes)
//!       410        → subscriber disabled in its table, message dead-lettered
//! ```
//!
//! **One message per (event, subscriber)**: each subscriber then has its own receive count (the
//! attempt number of its backoff), its own visibility timeout and its own dead letter; a slow
//! subscriber never delays another. The fan-out costs one `SendMessageBatch` per 10 subscribers.
//!
//! **Retry**: a retryable answer sets the message's visibility timeout to
//! [`Backoff::delay`](super::Backoff::delay)`(receive count − 1, Retry-After)` with
//! `ChangeMessageVisibility` and reports the message in `batchItemFailures`, so SQS hands it back
//! after that delay (SQS developer guide, "Visibility timeout"; Lambda developer guide,
//! "Reporting batch item failures for Amazon SQS"). After `max_attempts` receives the message is
//! dead-lettered by the dispatcher itself, with a readable reason; the queue's redrive policy
//! (`maxReceiveCount` above `max_attempts`) is only the backstop for invocations that crash.
//!
//! **Dead letters** carry the original EventBridge event as body (so the existing `dlq redrive`
//! re-publishes it; the fan-out then skips subscribers that already have it, through the inbox)
//! and attributes `ERROR_CODE` (`WebhookRejected`, `WebhookGone`, `WebhookRetriesExhausted`,
//! `WebhookUnknownSubscriber`, `WebhookMalformedEvent`, `WebhookInboxError`; for a
//! claim-checked payload `PayloadMissing`, `PayloadCorrupt`, `PayloadStoreError` (S3 refused:
//! without `s3:ListBucket` a missing object is a 403, so it lands here, not as
//! `PayloadMissing`), `WebhookClaimCheckUnavailable`), `ERROR_MESSAGE`, `subscriber`.
//!
//! **Claim-checked events** (`detail.data_ref`, feature `claim-check`): a subscriber receives the
//! payload inline, `{"metadata": …, "data": …}`, fetched from S3 and verified (size, SHA-256)
//! only when a request is about to be sent (a delivery the inbox already holds reads nothing;
//! `Dispatcher::with_claim_check`, which `run_from_env` sets up from `CLAIM_CHECK_BUCKET`). The
//! signature is over that body; the inbox's payload hash over the event as published (its
//! reference carries the payload's SHA-256). A transient S3 failure is retried with the backoff
//! like a 5xx. A subscriber never sees the S3 reference.
//!
//! **Subscribers live in a DynamoDB table** (not SSM Parameter Store): one item per subscriber
//! (`id`, `url`, `event_types` — `*` for all —, `secret_id`, `enabled`), changed with a `PutItem`
//! without a deploy, read with a `Scan` cached for a TTL (default 60 s); the dispatcher itself
//! writes to it (`enabled = false` on 410), which a parameter would make a read-modify-write of
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

use super::backoff::Backoff;
use super::client::{ClientConfig, SignedPost, WebhookClient};
use super::outcome::Outcome;
use super::signature::Secret;
use crate::config::{ConfigError, Env};
use crate::envelope::EventMetadata;
use crate::inbox::{payload_hash, GuardedError, InboxError, InboxStore};

/// The message attribute naming the subscriber of a fanned-out message.
pub const SUBSCRIBER_ATTRIBUTE: &str = "subscriber";
/// Default number of attempts per (event, subscriber) before dead-lettering: 8 (with the default
/// backoff, about 20 minutes of retries).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

/// One subscriber, as stored in the subscriber table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Whether this subscriber gets events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.enabled && self.event_types.iter().any(|t| t == "*" || t == event_type)
    }
}

/// A bus event as the delivery queue holds it.
#[derive(Debug, Clone)]
pub struct WebhookEvent {
    /// The envelope metadata (`detail.metadata`): `id` is the `webhook-id`.
    pub metadata: EventMetadata,
    /// The request body: the event's `detail`, verbatim (for a claim-checked event, until the
    /// dispatcher replaced its `data_ref` with the payload: [`WebhookEvent::with_payload`]).
    pub body: String,
    /// `detail.data_ref` of a claim-checked event (its payload is in S3, `detail.data` absent).
    pub data_ref: Option<crate::envelope::PayloadRef>,
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
            data_ref: Option<crate::envelope::PayloadRef>,
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
fn no_claim_check(reference: Option<&crate::envelope::PayloadRef>) -> Unresolved {
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
    backoff: Backoff,
    max_attempts: u32,
}

/// The value stored with a delivered (event, subscriber) in the inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// HTTP status of the delivering attempt.
    pub status: u16,
    /// Which receive of the message delivered it (1 = first attempt).
    pub attempt: u32,
}

impl<S: InboxStore> Deliverer<S> {
    /// A deliverer recording deliveries in `inbox` (key `<consumer>#<subscriber>#<event id>`).
    pub fn new(client: WebhookClient, inbox: S, backoff: Backoff, max_attempts: u32) -> Self {
        Self { client, inbox, backoff, max_attempts: max_attempts.max(1) }
    }

    /// The inbox.
    pub fn inbox(&self) -> &S {
        &self.inbox
    }

    /// Attempt number `receive_count` (1 for the first) of delivering `event` to `subscriber`.
    /// `lease_until` bounds how long a crash here blocks the next attempt (the invocation's deadline).
    /// A claim-checked `event` (`data_ref`) is dead-lettered `WebhookClaimCheckUnavailable`:
    /// the dispatcher delivers those with [`Deliverer::deliver_resolved`].
    pub async fn deliver(
        &self,
        subscriber: &Subscriber,
        secrets: &[Secret],
        event: &WebhookEvent,
        receive_count: u32,
        lease_until: DateTime<Utc>,
        trace_header: Option<&str>,
    ) -> Decision {
        let resolve = || async { Err(no_claim_check(event.data_ref.as_ref())) };
        self.deliver_resolved(subscriber, secrets, event, resolve, receive_count, lease_until, trace_header).await
    }

    /// [`Deliverer::deliver`], where a claim-checked `event` is first given its payload by
    /// `resolve` (fetch and verify), only when a request is about to be sent: a delivery the
    /// inbox already holds reads nothing from S3. A transient failure of `resolve` is retried with
    /// the same backoff and attempt limit as a 5xx; a permanent one dead-letters with its code.
    /// The inbox's payload hash is over the event as published (its reference carries the
    /// payload's SHA-256), so it is the same on every redelivery.
    #[allow(clippy::too_many_arguments)]
    pub async fn deliver_resolved<F, Fut>(
        &self,
        subscriber: &Subscriber,
        secrets: &[Secret],
        event: &WebhookEvent,
        resolve: F,
        receive_count: u32,
        lease_until: DateTime<Utc>,
        trace_header: Option<&str>,
    ) -> Decision
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = Result<WebhookEvent, Unresolved>> + Send,
    {
        let mut claim = event.metadata.clone();
        claim.id = format!("{}#{}", subscriber.id, event.metadata.id);
        let hash = payload_hash(&event.body);
        let correlation_id = Some(&event.metadata.correlation_id).filter(|c| !c.is_empty()).map(String::as_str);
        let attempt = receive_count.max(1);
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
                let sent = self.client.post(&post, Utc::now().timestamp()).await;
                match sent.outcome {
                    Outcome::Delivered { status } => Ok((DeliveryRecord { status, attempt }, sent.latency)),
                    other => Err(Failure::Http(other)),
                }
            })
            .await;
        match result {
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
            Err(GuardedError::Inbox(e @ InboxError::InProgress { .. })) => {
                Decision::Retry { delay: self.backoff.delay(attempt - 1, None), reason: e.to_string() }
            }
            Err(e) if e.is_retryable() => Decision::Retry { delay: self.backoff.delay(attempt - 1, None), reason: e.to_string() },
            Err(e) => Decision::DeadLetter { code: "WebhookInboxError", reason: e.to_string(), disable: false },
        }
    }

    /// Attempt `attempt` failed in a way worth retrying: back off, or give up after the last.
    fn retry(&self, attempt: u32, reason: String, retry_after: Option<Duration>) -> Decision {
        if attempt >= self.max_attempts {
            Decision::DeadLetter {
                code: "WebhookRetriesExhausted",
                reason: format!("gave up after {attempt} attempts; last: {reason}"),
                disable: false,
            }
        } else {
            Decision::Retry { delay: self.backoff.delay(attempt - 1, retry_after), reason }
        }
    }
}

/// Settings of the dispatcher function (see [`DispatcherConfig::from_env`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherConfig {
    /// URL of `WebhookDeliveryQueue` (fan-out target and visibility changes).
    pub delivery_queue_url: String,
    /// URL of `WebhookDeadLetterQueue`.
    pub dead_letter_queue_url: String,
    /// The subscriber table.
    pub subscribers_table: String,
    /// Attempts per (event, subscriber) before dead-lettering.
    pub max_attempts: u32,
    /// Retry schedule.
    pub backoff: Backoff,
    /// HTTP client settings.
    pub client: ClientConfig,
    /// How long a secret is cached.
    pub secrets_ttl: Duration,
    /// How long the subscriber list is cached.
    pub subscribers_ttl: Duration,
}

impl DispatcherConfig {
    /// Reads:
    ///
    /// | variable | meaning | default |
    /// |---|---|---|
    /// | `WEBHOOK_DELIVERY_QUEUE_URL` | the delivery queue | required |
    /// | `WEBHOOK_DLQ_URL` | the dead-letter queue | required |
    /// | `WEBHOOK_SUBSCRIBERS_TABLE` | the subscriber table | required |
    /// | `WEBHOOK_MAX_ATTEMPTS` | attempts before dead-lettering | 8 |
    /// | `WEBHOOK_BACKOFF_BASE_SECONDS` | first retry delay | 5 |
    /// | `WEBHOOK_BACKOFF_CAP_SECONDS` | longest backoff | 600 |
    /// | `WEBHOOK_CONNECT_TIMEOUT_MS` | connect timeout | 3000 |
    /// | `WEBHOOK_TIMEOUT_MS` | whole-request timeout | 10000 |
    /// | `WEBHOOK_ALLOW_HTTP` | `true` accepts `http://` URLs (local runs only) | `false` |
    /// | `WEBHOOK_SECRETS_TTL_SECONDS` | secret cache TTL | 300 |
    /// | `WEBHOOK_SUBSCRIBERS_TTL_SECONDS` | subscriber cache TTL | 60 |
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let defaults = Backoff::default();
        let client_defaults = ClientConfig::default();
        let allow_http = env.optional("WEBHOOK_ALLOW_HTTP", "false");
        let allow_http = match allow_http.as_str() {
            "true" | "1" => true,
            "false" | "0" | "" => false,
            _ => return Err(ConfigError::Invalid { name: "WEBHOOK_ALLOW_HTTP", value: allow_http, reason: "expected true or false".into() }),
        };
        let client = ClientConfig {
            connect_timeout: env.millis("WEBHOOK_CONNECT_TIMEOUT_MS", client_defaults.connect_timeout)?,
            timeout: env.millis("WEBHOOK_TIMEOUT_MS", client_defaults.timeout)?,
            allow_http,
        };
        Ok(Self {
            delivery_queue_url: env.required("WEBHOOK_DELIVERY_QUEUE_URL")?,
            dead_letter_queue_url: env.required("WEBHOOK_DLQ_URL")?,
            subscribers_table: env.required("WEBHOOK_SUBSCRIBERS_TABLE")?,
            max_attempts: env.count("WEBHOOK_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)?.max(1),
            backoff: Backoff {
                base: env.seconds("WEBHOOK_BACKOFF_BASE_SECONDS", defaults.base)?,
                cap: env.seconds("WEBHOOK_BACKOFF_CAP_SECONDS", defaults.cap)?,
                ..defaults
            },
            client,
            secrets_ttl: env.seconds("WEBHOOK_SECRETS_TTL_SECONDS", Duration::from_secs(300))?,
            subscribers_ttl: env.seconds("WEBHOOK_SUBSCRIBERS_TTL_SECONDS", Duration::from_secs(60))?,
        })
    }
}

/// A failure reading configuration from AWS (retryable: the message is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// A call to AWS failed.
    #[error("{action} failed: {reason}")]
    Aws {
        /// What was being done.
        action: &'static str,
        /// The SDK error, with context.
        reason: String,
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
        let out = self.client.get_secret_value().secret_id(secret_id).send().await.map_err(|e| DispatchError::Aws {
            action: "GetSecretValue",
            reason: aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string(),
        })?;
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
        let mut list = Vec::new();
        let mut start = None;
        loop {
            let out = self.client.scan().table_name(&self.table).set_exclusive_start_key(start).send().await.map_err(|e| DispatchError::Aws {
                action: "Scan of the subscriber table",
                reason: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
            })?;
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
            .map_err(|e| DispatchError::Aws {
                action: "UpdateItem (disable subscriber)",
                reason: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
            })?;
        *lock(&self.cache) = None;
        Ok(())
    }
}

/// What one invocation did (for logs, metrics and the local demo).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispatchReport {
    /// Event messages fanned out, and the per-subscriber messages they made.
    pub fanned_out: usize,
    /// Per-subscriber messages sent by the fan-out.
    pub fan_out_messages: usize,
    /// Delivered now.
    pub delivered: usize,
    /// Delivered before (no request sent).
    pub already_delivered: usize,
    /// Retried later.
    pub retried: usize,
    /// Dead-lettered.
    pub dead_lettered: usize,
    /// Subscribers disabled (410).
    pub disabled: usize,
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
    #[cfg(feature = "claim-check")]
    claim_check: Option<crate::claim_check::ClaimCheck>,
}

enum MessageResult {
    Done,
    Retry(Duration),
    Failed,
}

impl<S: InboxStore> Dispatcher<S> {
    /// Builds the dispatcher.
    ///
    /// # Errors
    /// [`super::client::ClientBuildError`] when the HTTP client cannot start.
    pub fn new(sdk: &aws_config::SdkConfig, inbox: S, config: DispatcherConfig) -> Result<Self, super::client::ClientBuildError> {
        let client = WebhookClient::new(&config.client)?;
        Ok(Self {
            deliverer: Deliverer::new(client, inbox, config.backoff, config.max_attempts),
            sqs: aws_sdk_sqs::Client::new(sdk),
            subscribers: SubscriberTable::new(aws_sdk_dynamodb::Client::new(sdk), &config.subscribers_table, config.subscribers_ttl),
            secrets: SecretCache::new(aws_sdk_secretsmanager::Client::new(sdk), config.secrets_ttl),
            config,
            #[cfg(feature = "claim-check")]
            claim_check: None,
        })
    }

    /// Delivers claim-checked events (`detail.data_ref`) with their payload inline, fetched from
    /// S3 and verified (size, SHA-256) for each delivery: a subscriber never sees the reference.
    /// Without it such an event is dead-lettered (`WebhookClaimCheckUnavailable`). Needs
    /// `s3:GetObject` on the payloads.
    #[cfg(feature = "claim-check")]
    pub fn with_claim_check(mut self, claim_check: crate::claim_check::ClaimCheck) -> Self {
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

    /// Handles one batch. Messages that must come back later are in `batchItemFailures` (their
    /// visibility timeout set to the backoff delay first).
    pub async fn handle(&self, event: &SqsEvent, lease_until: DateTime<Utc>) -> (SqsBatchResponse, DispatchReport) {
        let mut report = DispatchReport::default();
        let mut response = SqsBatchResponse::default();
        for message in &event.records {
            let id = message.message_id.clone().unwrap_or_default();
            match self.handle_message(message, lease_until, &mut report).await {
                MessageResult::Done => {}
                MessageResult::Retry(delay) => {
                    self.delay(message, delay).await;
                    response.batch_item_failures.push(failure(id));
                }
                MessageResult::Failed => {
                    report.failed += 1;
                    response.batch_item_failures.push(failure(id));
                }
            }
        }
        (response, report)
    }

    async fn delay(&self, message: &SqsMessage, delay: Duration) {
        let Some(receipt) = message.receipt_handle.as_deref() else { return };
        let seconds = i32::try_from(delay.as_secs()).unwrap_or(i32::MAX);
        let result = self
            .sqs
            .change_message_visibility()
            .queue_url(&self.config.delivery_queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds)
            .send()
            .await;
        if let Err(e) = result {
            // The message still comes back, after the queue's visibility timeout instead.
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "ChangeMessageVisibility failed");
        }
    }

    async fn handle_message(&self, message: &SqsMessage, lease_until: DateTime<Utc>, report: &mut DispatchReport) -> MessageResult {
        let body = message.body.as_deref().unwrap_or_default();
        let event = match WebhookEvent::parse(body) {
            Ok(event) => event,
            Err(e) => {
                return self.dead_letter(body, None, "WebhookMalformedEvent", &e.to_string(), report).await;
            }
        };
        // Every line about this event is inside its span (envelope::event_span); the attempt is
        // the queue message's receive count.
        let receive_count: u32 = message.attributes.get("ApproximateReceiveCount").and_then(|c| c.parse().ok()).unwrap_or(1);
        let span = event.metadata.span();
        span.record("attempt", receive_count);
        self.handle_event(message, body, &event, receive_count, lease_until, report).instrument(span).await
    }

    async fn handle_event(
        &self,
        message: &SqsMessage,
        body: &str,
        event: &WebhookEvent,
        receive_count: u32,
        lease_until: DateTime<Utc>,
        report: &mut DispatchReport,
    ) -> MessageResult {
        let subscribers = match self.subscribers.all().await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the subscribers");
                return MessageResult::Failed;
            }
        };
        let target = message.message_attributes.get(SUBSCRIBER_ATTRIBUTE).and_then(|a| a.string_value.clone());
        let Some(target) = target else {
            return self.fan_out(body, event, &subscribers, report).await;
        };
        let Some(subscriber) = subscribers.iter().find(|s| s.id == target && s.enabled) else {
            let reason = format!("subscriber {target} is unknown or disabled");
            return self.dead_letter(body, Some(&target), "WebhookUnknownSubscriber", &reason, report).await;
        };
        let secrets = match self.secrets.get(&subscriber.secret_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(subscriber = %subscriber.id, error = %e, "cannot read the subscriber's secret");
                return MessageResult::Failed;
            }
        };
        let trace = message.attributes.get("AWSTraceHeader").map(String::as_str);
        let resolve = || self.inline_payload(event);
        let decision = self.deliverer.deliver_resolved(subscriber, &secrets, event, resolve, receive_count, lease_until, trace).await;
        record_metrics(&subscriber.id, &decision);
        match decision {
            Decision::Delivered { status, latency } => {
                tracing::info!(subscriber = %subscriber.id, event_id = %event.metadata.id, status, latency_ms = latency.as_millis() as u64, attempt = receive_count, "webhook delivered");
                report.delivered += 1;
                MessageResult::Done
            }
            Decision::AlreadyDelivered => {
                tracing::info!(subscriber = %subscriber.id, event_id = %event.metadata.id, "webhook delivered before; not sent again");
                report.already_delivered += 1;
                MessageResult::Done
            }
            Decision::Retry { delay, reason } => {
                tracing::info!(subscriber = %subscriber.id, event_id = %event.metadata.id, attempt = receive_count, delay_s = delay.as_secs(), %reason, "webhook will be retried");
                report.retried += 1;
                MessageResult::Retry(delay)
            }
            Decision::DeadLetter { code, reason, disable } => {
                if disable {
                    match self.subscribers.disable(&subscriber.id, &reason).await {
                        Ok(()) => {
                            report.disabled += 1;
                            tracing::warn!(subscriber = %subscriber.id, "subscriber answered 410 Gone: disabled");
                        }
                        Err(e) => tracing::warn!(subscriber = %subscriber.id, error = %e, "could not disable the subscriber"),
                    }
                }
                self.dead_letter(body, Some(&subscriber.id), code, &reason, report).await
            }
        }
    }

    async fn fan_out(&self, body: &str, event: &WebhookEvent, subscribers: &[Subscriber], report: &mut DispatchReport) -> MessageResult {
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
                    return MessageResult::Failed;
                }
            };
            let sent = self.sqs.send_message_batch().queue_url(&self.config.delivery_queue_url).set_entries(Some(entries)).send().await;
            match sent {
                Ok(out) if out.failed().is_empty() => report.fan_out_messages += chunk.len(),
                Ok(out) => {
                    // Retrying the whole fan-out repeats the sent ones: the inbox absorbs those.
                    tracing::warn!(failed = out.failed().len(), "fan-out partly failed; the event is retried");
                    return MessageResult::Failed;
                }
                Err(e) => {
                    tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "fan-out failed; the event is retried");
                    return MessageResult::Failed;
                }
            }
        }
        report.fanned_out += 1;
        tracing::info!(event_id = %event.metadata.id, event_type = %event.metadata.event_type, subscribers = targets.len(), "event fanned out");
        MessageResult::Done
    }

    async fn dead_letter(&self, body: &str, subscriber: Option<&str>, code: &str, reason: &str, report: &mut DispatchReport) -> MessageResult {
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
                report.dead_lettered += 1;
                MessageResult::Done
            }
            Err(e) => {
                tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "could not dead-letter; the message is retried");
                MessageResult::Failed
            }
        }
    }
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

/// Counters `WebhooksDelivered`, `WebhookRetries`, `WebhooksDeadLettered` and histogram
/// `WebhookLatencyMilliseconds`, labelled `subscriber` (feature `metrics`; EMF in Lambda).
#[allow(unused_variables)]
fn record_metrics(subscriber: &str, decision: &Decision) {
    #[cfg(feature = "metrics")]
    {
        let label = subscriber.to_owned();
        match decision {
            Decision::Delivered { latency, .. } => {
                metrics::counter!("WebhooksDelivered", "subscriber" => label.clone()).increment(1);
                metrics::histogram!("WebhookLatencyMilliseconds", "subscriber" => label).record(latency.as_secs_f64() * 1000.0);
            }
            Decision::Retry { .. } => metrics::counter!("WebhookRetries", "subscriber" => label).increment(1),
            Decision::DeadLetter { .. } => metrics::counter!("WebhooksDeadLettered", "subscriber" => label).increment(1),
            Decision::AlreadyDelivered => {}
        }
    }
}

/// The whole `WebhookDispatcherFunction` (feature `lambda`): Lambda's tracing subscriber, an EMF
/// metrics recorder (feature `metrics`, namespace `METRICS_NAMESPACE`, default
/// `OutboxWebhooks`), the configuration of [`DispatcherConfig::from_env`] plus `INBOX_TABLE`
/// (deliveries are recorded there as consumer `WEBHOOK_CONSUMER_NAME`, default
/// `webhook-dispatcher`, kept as the retention rule says, [`crate::config::inbox_retention`]: a
/// delivery redriven from the webhook dead-letter queue still finds its record), with feature
/// `claim-check` the claim check of `CLAIM_CHECK_BUCKET` / `CLAIM_CHECK_PREFIX` (claim-checked
/// events delivered inline), and [`Dispatcher::handle`] per batch; the guarded lease ends at the
/// invocation's deadline.
///
/// # Errors
/// A missing or invalid variable ends the cold start with a Lambda init error naming it.
#[cfg(feature = "lambda")]
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    use lambda_runtime::LambdaEvent;
    lambda_runtime::tracing::init_default_subscriber();
    let env = Env::process();
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS), once per cold start.
    let sdk = crate::lambda::load_sdk_config(&env).await?;
    let built = (|| -> Result<Dispatcher<crate::inbox::Inbox>, Box<dyn std::error::Error + Send + Sync>> {
        let inbox = crate::inbox::Inbox::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            env.required("INBOX_TABLE")?,
            env.optional("WEBHOOK_CONSUMER_NAME", "webhook-dispatcher"),
            crate::config::inbox_retention(&env)?,
        );
        let dispatcher = Dispatcher::new(&sdk, inbox, DispatcherConfig::from_env(&env)?)?;
        #[cfg(feature = "claim-check")]
        let dispatcher = match crate::lambda::claim_check(&sdk, &env)? {
            Some(claim_check) => dispatcher.with_claim_check(claim_check),
            None => dispatcher,
        };
        Ok(dispatcher)
    })();
    let dispatcher = match built {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "the dispatcher's configuration is invalid");
            return Err(e.to_string().into());
        }
    };
    let dispatcher = &dispatcher;
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let lease_until = crate::lambda::lease_until(&event.context, Duration::from_secs(60));
        let (response, report) = dispatcher.handle(&event.payload, lease_until).await;
        tracing::info!(?report, "batch dispatched");
        Ok::<_, std::convert::Infallible>(response)
    });
    crate::lambda::run(&env, "OutboxWebhooks", handler).await
}
