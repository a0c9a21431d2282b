//! Delivery: one attempt to one subscriber, guarded by the inbox ([`Deliverer`]), and what it
//! decides ([`Decision`]): delivered, delivered before, retry after a delay, or dead-letter.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::event::{NotAnEvent, WebhookEvent};
use super::lock;
use super::subscribers::Subscriber;
use crate::backoff::RetrySchedule;
use crate::client::{Attempt as ClientAttempt, SignedPost, WebhookClient};
use crate::outcome::Outcome;
use crate::signature::Secret;
use outbox::inbox::{GuardedError, InboxError, InboxStore, PayloadHash};

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

/// Why a claim-checked event's payload could not be put inline. A retryable one
/// ([`Unresolved::is_retryable`]) is retried on the schedule like a 5xx; any other dead-letters
/// the message with [`Unresolved::code`] as `ERROR_CODE` and the message as `ERROR_MESSAGE`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unresolved {
    /// The claim check could not fetch or verify the payload (feature `claim-check`): retried
    /// when S3 may answer later, otherwise dead-lettered with its `error_type` (`PayloadMissing`,
    /// `PayloadCorrupt`, `PayloadTooLarge`, `PayloadStoreError`).
    #[cfg(feature = "claim-check")]
    #[error(transparent)]
    Fetch(#[from] outbox::claim_check::ClaimCheckError),
    /// The payload fetched is not JSON, or cannot be put inline: `PayloadCorrupt`.
    #[error(transparent)]
    Corrupt(#[from] NotAnEvent),
    /// A claim-checked event and no claim check to fetch its payload with (`CLAIM_CHECK_BUCKET`
    /// unset): `WebhookClaimCheckUnavailable`.
    #[error("the event's payload is claim-checked{} and this dispatcher has no claim check to fetch it (CLAIM_CHECK_BUCKET)", located(.reference.as_ref()))]
    Unavailable {
        /// The event's `detail.data_ref`.
        reference: Option<outbox::envelope::PayloadRef>,
    },
}

impl Unresolved {
    /// Whether a later attempt can succeed (an S3 failure the claim check classifies so).
    pub fn is_retryable(&self) -> bool {
        match self {
            #[cfg(feature = "claim-check")]
            Unresolved::Fetch(e) => e.is_retryable(),
            Unresolved::Corrupt(_) | Unresolved::Unavailable { .. } => false,
        }
    }

    /// The dead letter's `ERROR_CODE` when it is not retried.
    pub fn code(&self) -> &'static str {
        match self {
            #[cfg(feature = "claim-check")]
            Unresolved::Fetch(e) => e.error_type(),
            Unresolved::Corrupt(_) => "PayloadCorrupt",
            Unresolved::Unavailable { .. } => "WebhookClaimCheckUnavailable",
        }
    }
}

/// ` (s3://<bucket>/<key>, <size> bytes)`, or nothing without a reference.
fn located(reference: Option<&outbox::envelope::PayloadRef>) -> String {
    reference.map_or_else(String::new, |r| format!(" (s3://{}/{}, {} bytes)", r.bucket, r.key, r.size))
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
        let resolve = || async { Err(Unresolved::Unavailable { reference: event.data_ref.clone() }) };
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
        // The event's trace, one hop on: its trace id, a new parent id for this delivery (with
        // feature `opentelemetry`, the id of the event's exported span).
        let trace = outbox::TraceContext::next_hop(event.metadata.trace_context().as_ref());
        let traceparent = trace.as_ref().map(outbox::TraceContext::traceparent);
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
                let post = SignedPost {
                    url: &subscriber.url,
                    id: &event.metadata.id,
                    body,
                    secrets,
                    correlation_id,
                    trace_header,
                    traceparent: traceparent.as_deref(),
                    tracestate: trace.as_ref().and_then(|t| t.tracestate()),
                };
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
            Err(GuardedError::Effect(Failure::Payload(e))) if e.is_retryable() => self.retry(attempt, e.to_string(), None),
            Err(GuardedError::Effect(Failure::Payload(e))) => Decision::DeadLetter { code: e.code(), reason: e.to_string(), disable: false },
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
