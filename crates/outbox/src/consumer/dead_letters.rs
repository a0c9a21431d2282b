//! Where a consumer sends the events no retry can fix: its SQS dead-letter queue
//! ([`ConsumerDeadLetterQueue`]), or [`MemoryDeadLetters`] in your unit tests. Each message is a
//! [`ConsumerFailureRecord`] (`kind: outbox-consumer-failure`) holding the event verbatim and the
//! reason, which `outbox dlq list|show|redrive` reads back.

use std::future::Future;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::value::RawValue;

use sha2::{Digest, Sha256};

use crate::dead_letter::{ConsumerFailureRecord, FifoIds, CONSUMER_FAILURE_KIND};

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
/// dead-letter record's, and with `aggregate_type` and `subject` a FIFO queue's message group); the other fields are read for their types, so a metadata whose
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
    /// console. To a FIFO queue (`url` ending `.fifo`) with `MessageGroupId` = the event's
    /// `<aggregate_type>#<subject>` (else the consumer's name) and `MessageDeduplicationId` = the
    /// record's SHA-256 (hex).
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
        // A FIFO dead-letter queue (the consumer kit's with a Custom bus): the event's aggregate
        // as the message group, as the relay's EventGroupId, so one aggregate's dead letters
        // keep their order; the record's SHA-256 as the deduplication id (the record carries
        // its `failed_at`, so only a resend of the same record is absorbed).
        let group = fifo_group(event, &self.consumer);
        let deduplication = hex::encode(Sha256::digest(body.as_bytes()));
        let fifo = self.url.ends_with(".fifo").then_some(FifoIds { group: &group, deduplication: &deduplication });
        crate::dead_letter::send_grouped(&self.sqs, &self.url, body, &[("error_type", error_type), ("reason", reason)], fifo)
            .await
            .map_err(DeadLetterError::Send)
    }
}

/// The `MessageGroupId` of a dead letter on a FIFO queue: `<aggregate_type>#<subject>` of the
/// event (the relay's EventGroupId) when its metadata has both, else the consumer's name (one
/// group for what names no aggregate). Cut to SQS's 128 characters (a group id is only an
/// ordering key here: two aggregates sharing a cut prefix are merely ordered together).
fn fifo_group(event: &RawValue, consumer: &str) -> String {
    let metadata = loose_metadata(event);
    let group = match (metadata.aggregate_type, metadata.subject) {
        (Some(aggregate_type), Some(subject)) if !aggregate_type.is_empty() && !subject.is_empty() => format!("{aggregate_type}#{subject}"),
        _ if consumer.is_empty() => "consumer".to_owned(),
        _ => consumer.to_owned(),
    };
    group.chars().take(128).collect()
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use aws_sdk_sqs::operation::send_message::SendMessageOutput;
    use aws_smithy_mocks::{mock, mock_client, RuleMode};
    use serde_json::value::RawValue;

    use super::ConsumerDeadLetterQueue;

    type Sent = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

    /// Sends one dead letter for `event` to `url`; answers each `SendMessage`'s (group, dedup) ids.
    async fn sent_ids(url: &str, event: &str) -> Vec<(Option<String>, Option<String>)> {
        let sent: Sent = Arc::default();
        let log = sent.clone();
        let rule = mock!(aws_sdk_sqs::Client::send_message).then_compute_output(move |input| {
            log.lock().unwrap().push((input.message_group_id().map(str::to_owned), input.message_deduplication_id().map(str::to_owned)));
            SendMessageOutput::builder().message_id("m").build()
        });
        let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&rule]);
        let event = RawValue::from_string(event.to_owned()).unwrap();
        ConsumerDeadLetterQueue::new(sqs, url, "reserve").send(&event, "MalformedEvent", "why").await.unwrap();
        let ids = sent.lock().unwrap().clone();
        ids
    }

    const EVENT: &str = r#"{"detail":{"metadata":{"id":"e-1","aggregate_type":"Order","subject":"o-1"}}}"#;

    #[tokio::test]
    async fn a_fifo_dead_letter_queue_gets_the_aggregate_as_message_group() {
        let ids = sent_ids("https://sqs.us-east-1.amazonaws.com/123456789012/dlq.fifo", EVENT).await;
        let [(Some(group), Some(dedup))] = ids.as_slice() else { panic!("one message with both ids: {ids:?}") };
        assert_eq!(group, "Order#o-1");
        assert_eq!(dedup.len(), 64, "the record's SHA-256, hex");
        let ids = sent_ids("https://sqs.us-east-1.amazonaws.com/123456789012/dlq.fifo", r#""not an event""#).await;
        assert_eq!(ids[0].0.as_deref(), Some("reserve"), "no aggregate: the consumer's name");
    }

    #[tokio::test]
    async fn a_standard_dead_letter_queue_gets_no_fifo_ids() {
        let ids = sent_ids("https://sqs.us-east-1.amazonaws.com/123456789012/dlq", EVENT).await;
        assert_eq!(ids, [(None, None)]);
    }
}
