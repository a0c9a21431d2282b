//! Where a consumer sends the events no retry can fix: its SQS dead-letter queue
//! ([`ConsumerDeadLetterQueue`]), or [`MemoryDeadLetters`] in your unit tests. Each message is a
//! [`ConsumerFailureRecord`] (`kind: outbox-consumer-failure`) holding the event verbatim and the
//! reason, which `outbox dlq list|show|redrive` reads back.

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dead_letter::{ConsumerFailureRecord, CONSUMER_FAILURE_KIND};

/// Why an event could not be dead-lettered. The consumer then fails the invocation instead, so
/// nothing is lost (Lambda retries it, then sends it to the on-failure destination).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterError {
    /// No dead-letter queue is configured (a `None` sink).
    #[error("no dead-letter queue is configured")]
    NotConfigured,
    /// Sending failed: the classified SQS failure (code, HTTP status, retryable).
    #[error("the dead-letter queue is unreachable: {0}")]
    Send(#[source] crate::aws_error::AwsError),
}

/// A destination for events that can never be processed. Generic like
/// [`InboxStore`](crate::inbox::InboxStore) (futures are `Send`, no boxing); `Option<D>` is a
/// sink whose `None` answers [`DeadLetterError::NotConfigured`], `Arc<D>` shares one.
pub trait DeadLetterSink: Send + Sync {
    /// Sends `event` (the invocation payload, verbatim) with a machine-readable `error_type`
    /// (e.g. `MalformedEvent`) and the `reason` in words.
    ///
    /// # Errors
    /// [`DeadLetterError`]; the caller must then fail the invocation.
    fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> impl Future<Output = Result<(), DeadLetterError>> + Send;
}

type Text<'a> = Option<std::borrow::Cow<'a, str>>;

/// Whatever of `detail.metadata` an invocation payload has, read leniently (a malformed event
/// still gives what it carries); `data` is skipped without being built. Only `id` is used (the
/// dead-letter record's); the other fields are read for their types, so a metadata whose
/// fields are of the wrong type gives no id, as the consumer's span gives none.
#[derive(Deserialize, Default)]
#[allow(dead_code)]
struct LooseMetadata<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow, rename = "type")]
    event_type: Text<'a>,
    #[serde(borrow)]
    aggregate_type: Text<'a>,
    #[serde(borrow)]
    subject: Text<'a>,
    #[serde(borrow)]
    correlation_id: Text<'a>,
}

fn loose_metadata(event: &RawValue) -> LooseMetadata<'_> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        detail: Option<Detail<'a>>,
    }
    #[derive(Deserialize)]
    struct Detail<'a> {
        #[serde(borrow)]
        metadata: Option<LooseMetadata<'a>>,
    }
    serde_json::from_str::<Envelope<'_>>(event.get()).ok().and_then(|e| e.detail).and_then(|d| d.metadata).unwrap_or_default()
}

/// `detail.metadata.id` of an invocation payload, if it has one.
pub(crate) fn event_id_of(event: &RawValue) -> Option<String> {
    loose_metadata(event).id.map(std::borrow::Cow::into_owned)
}

/// A consumer's own route to its SQS dead-letter queue.
#[derive(Debug, Clone)]
pub struct ConsumerDeadLetterQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    consumer: String,
}

impl ConsumerDeadLetterQueue {
    /// Sends to the queue at `url` on behalf of `consumer`.
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>, consumer: impl Into<String>) -> Self {
        Self { sqs, url: url.into(), consumer: consumer.into() }
    }

    /// Sends a [`ConsumerFailureRecord`] holding `event` (as received) and the reason with
    /// `SendMessage`. The message attributes `error_type` and `reason` repeat them for the SQS
    /// console.
    ///
    /// # Errors
    /// [`DeadLetterError::Send`] with the classified SQS failure; the caller must then fail the
    /// invocation so nothing is lost.
    pub async fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> Result<(), DeadLetterError> {
        let record = ConsumerFailureRecord {
            kind: CONSUMER_FAILURE_KIND.into(),
            consumer: self.consumer.clone(),
            error_type: error_type.into(),
            reason: reason.into(),
            event_id: event_id_of(event),
            failed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            // Embedded verbatim (a RawValue), so no number is rounded.
            event,
        };
        let body = serde_json::to_string(&record).map_err(|e| {
            DeadLetterError::Send(crate::aws_error::AwsError::construction("SendMessage", format!("the record does not encode: {e}")))
        })?;
        crate::dead_letter::send(&self.sqs, &self.url, body, &[("error_type", error_type), ("reason", reason)]).await.map_err(DeadLetterError::Send)
    }
}

impl DeadLetterSink for ConsumerDeadLetterQueue {
    async fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> Result<(), DeadLetterError> {
        ConsumerDeadLetterQueue::send(self, event, error_type, reason).await
    }
}

impl<D: DeadLetterSink> DeadLetterSink for Option<D> {
    async fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> Result<(), DeadLetterError> {
        match self {
            Some(sink) => sink.send(event, error_type, reason).await,
            None => Err(DeadLetterError::NotConfigured),
        }
    }
}

impl<D: DeadLetterSink> DeadLetterSink for Arc<D> {
    fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> impl Future<Output = Result<(), DeadLetterError>> + Send {
        (**self).send(event, error_type, reason)
    }
}

/// One message of [`MemoryDeadLetters`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLettered {
    /// `detail.metadata.id`, if the event had one.
    pub event_id: Option<String>,
    /// Machine-readable cause, e.g. `MalformedEvent`, `PayloadMismatch`.
    pub error_type: String,
    /// Why, in words.
    pub reason: String,
    /// The event as received (JSON text).
    pub event: String,
}

/// An in-memory dead-letter queue for unit tests: records what would have been sent. Clones
/// share the messages.
#[derive(Debug, Clone, Default)]
pub struct MemoryDeadLetters {
    messages: Arc<Mutex<Vec<DeadLettered>>>,
}

impl MemoryDeadLetters {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages sent so far, in order.
    pub fn messages(&self) -> Vec<DeadLettered> {
        // A poisoned lock only means a test panicked elsewhere; the vector is still whole.
        self.messages.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl DeadLetterSink for MemoryDeadLetters {
    fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> impl Future<Output = Result<(), DeadLetterError>> + Send {
        let message =
            DeadLettered { event_id: event_id_of(event), error_type: error_type.into(), reason: reason.into(), event: event.get().to_owned() };
        self.messages.lock().unwrap_or_else(|p| p.into_inner()).push(message);
        std::future::ready(Ok(()))
    }
}
