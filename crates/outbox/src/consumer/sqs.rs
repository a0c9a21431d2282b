//! Consumers behind an SQS queue: EventBridge rule → SQS queue → Lambda event source mapping
//! with `ReportBatchItemFailures`. [`Consumer::handle_invocation`] takes either trigger's
//! payload (an EventBridge event, or an `SqsEvent` whose message bodies are EventBridge events).
//!
//! # Why a queue between the rule and the consumer
//!
//! An EventBridge rule that targets the function invokes it *asynchronously*: Lambda retries a
//! failed invocation at most twice, about 1 and 2 minutes apart, and keeps an event at most
//! 6 hours (`MaximumEventAgeInSeconds`) — so any dependency outage longer than ~3 minutes ends
//! in the on-failure destination, with events that had nothing wrong with them. With the queue
//! as the rule's target, the **retry window is the queue's**: a message a batch reports failed
//! (`batchItemFailures`) becomes visible again after the queue's `VisibilityTimeout` (the
//! backoff) and is retried until `maxReceiveCount` receives, then SQS moves it to the
//! dead-letter queue; the window is `VisibilityTimeout × maxReceiveCount` (e.g. 5 min × 48 =
//! 4 h), up to the queue's retention (14 days at most). What can never succeed is still
//! dead-lettered by the consumer itself, on the first attempt, with the reason. This is how
//! consumers receive events: the consumer kit building block (`blocks/consumer-kit`) creates
//! the queue, the rule feeding it and the redrive, with that 4-hour window as its default
//! (`VisibilityTimeoutSeconds`, `MaxReceiveCount`; `docs/building-blocks.md`). Sources:
//! <https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>.
//!
//! A message `{"outbox":"check-parked",…}` is not an event but the consumer kit's scheduled
//! parked check ([`ParkedCheck`]): it is run and acknowledged.
//!
//! Messages of one batch are handled one after another, in the batch's order, so two events
//! of one aggregate in a batch are applied in order (or the later one is parked,
//! [`ParkedEvent`](crate::ordering::ParkedEvent)). A message not started before the invocation's deadline nears is
//! reported failed, not attempted: it comes back after the visibility timeout.
//!
//! From an SQS **FIFO** queue (the consumer kit's delivery queue on a Custom Event Bus: one
//! message group per aggregate), Lambda's FIFO rule applies, per message group: after a message
//! fails, the later messages of its group are reported failed without being attempted, so they
//! come back behind it in order (`consumer/fifo.rs`: the rule, its source, and why per group
//! rather than per batch).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::dispatch::{Consumer, ConsumerResponse, SettledEvent};
use super::fifo::{Fifo, Stops};
use super::message::Message;
use super::parked_check::{ParkedCheck, ParkedReport};
use super::{ConsumerError, DeadLetterSink};
use crate::inbox::InboxStore;

/// One message Lambda must not delete (`batchItemFailures[]`): it comes back after the
/// queue's visibility timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ItemFailure {
    /// The SQS message id.
    #[serde(rename = "itemIdentifier")]
    pub item_identifier: String,
}

/// The answer to one SQS batch: `batchItemFailures` (what Lambda's `ReportBatchItemFailures`
/// reads; every other message is deleted) and, for the logs and the local runtime, the outcome
/// of each event settled (parked events applied in passing included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[non_exhaustive]
pub struct SqsBatchAnswer {
    /// The messages that failed and must come back.
    #[serde(rename = "batchItemFailures")]
    pub batch_item_failures: Vec<ItemFailure>,
    /// The events settled, in order.
    pub outcomes: Vec<SettledEvent>,
    /// What the parked check found, when the batch held its message ([`ParkedCheck`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_check: Option<ParkedReport>,
}

/// The answer to one invocation of [`Consumer::handle_invocation`]: one event's, or one batch's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum InvocationAnswer<O> {
    /// An EventBridge event (asynchronous invocation).
    Event(ConsumerResponse<O>),
    /// An SQS batch.
    Batch(SqsBatchAnswer),
}

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(rename = "Records", borrow)]
    records: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Batch {
    #[serde(rename = "Records")]
    records: Vec<Record>,
}

/// Why an SQS event's `Records` do not decode.
type BatchError = serde_json::Error;

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "messageId", default)]
    message_id: Option<String>,
    #[serde(default)]
    body: Option<String>,
    /// The queue's ARN: a FIFO queue's ends in `.fifo` ([`Fifo`]).
    #[serde(rename = "eventSourceARN", default)]
    event_source_arn: Option<String>,
    /// The SQS attributes: only a FIFO message's `MessageGroupId` is read.
    #[serde(default)]
    attributes: Attributes,
}

#[derive(Deserialize, Default)]
struct Attributes {
    #[serde(rename = "MessageGroupId", default)]
    message_group_id: Option<String>,
}

impl Record {
    fn fifo(&self) -> Fifo<'_> {
        Fifo::of(self.event_source_arn.as_deref(), self.attributes.message_group_id.as_deref())
    }
}

impl<S, D, O> Consumer<S, D, O>
where
    S: InboxStore,
    D: DeadLetterSink,
    O: Serialize + Send + 'static,
{
    /// Handles one invocation from either trigger: an `SqsEvent` (a payload with `Records`)
    /// through [`Consumer::handle_sqs_until`], anything else as one EventBridge event through
    /// [`Consumer::handle_payload_until`].
    ///
    /// # Errors
    /// Only for a single event, as [`Consumer::handle_payload_until`]; a batch reports its
    /// failures per message.
    pub async fn handle_invocation(&self, payload: &RawValue, deadline: Instant) -> Result<InvocationAnswer<O>, ConsumerError> {
        // One read of the payload: its `Records` (kept raw, decoded once below), else the event.
        match serde_json::from_str::<Probe<'_>>(payload.get()) {
            Ok(Probe { records: Some(records) }) => {
                let records = serde_json::from_str::<Vec<Record>>(records.get());
                Ok(InvocationAnswer::Batch(self.handle_records(records, deadline).await))
            }
            _ => self.handle_payload_until(payload, deadline).await.map(InvocationAnswer::Event),
        }
    }

    /// Handles an `SqsEvent` whose message bodies are EventBridge events (a rule's SQS target),
    /// one message after another: what may succeed later is reported in `batchItemFailures`, what
    /// can never succeed is dead-lettered (and deleted), everything else is settled.
    pub async fn handle_sqs_until(&self, payload: &RawValue, deadline: Instant) -> SqsBatchAnswer {
        self.handle_records(serde_json::from_str::<Batch>(payload.get()).map(|b| b.records), deadline).await
    }

    /// The messages of one SQS event (`records`, or why they do not decode), one after another.
    async fn handle_records(&self, records: Result<Vec<Record>, BatchError>, deadline: Instant) -> SqsBatchAnswer {
        let mut answer = SqsBatchAnswer::default();
        let records = match records {
            Ok(records) => records,
            Err(e) => {
                // Not an SqsEvent at all: nothing to name in batchItemFailures, so an invalid
                // identifier makes Lambda keep the whole batch.
                tracing::error!(error = %e, "the SQS event does not decode; keeping the whole batch");
                answer.batch_item_failures.push(ItemFailure { item_identifier: String::new() });
                return answer;
            }
        };
        let margin = self.retry_policy().margin;
        let (mut settled, mut failed) = (0usize, 0usize);
        // Lambda's rule for FIFO queues, per message group (consumer/fifo.rs).
        let mut stops = Stops::default();
        for record in &records {
            let fifo = record.fifo();
            let id = record.message_id.clone().unwrap_or_default();
            if stops.stopped(fifo) {
                failed += 1;
                tracing::debug!(message_id = %id, "an earlier message of its FIFO message group failed; it comes back behind it");
                answer.batch_item_failures.push(ItemFailure { item_identifier: id });
                continue;
            }
            if Instant::now() + margin >= deadline {
                failed += 1;
                stops.failed(fifo);
                answer.batch_item_failures.push(ItemFailure { item_identifier: id });
                continue;
            }
            let body = record.body.as_deref().unwrap_or_default();
            // The kit's scheduled parked check, not an event: always acknowledged.
            if let Some(check) = ParkedCheck::recognise(body) {
                answer.parked_check = Some(self.check_parked(&check, deadline).await);
                continue;
            }
            // The body read once: every later step takes what it needs from this value.
            let message = Message::read(body);
            let result = match &message.not_json {
                // Boxed like `handle_payload_until`: keeps the caller's future shallow.
                None => Box::pin(self.handle_one(&message, deadline, false)).await,
                Some(e) => self.dead_letter_text(body, &format!("SQS message {id}: the body is not JSON: {e}")).await,
            };
            match result {
                Ok(response) => {
                    settled += 1;
                    answer.outcomes.push(SettledEvent::of(&response));
                    answer.outcomes.extend(response.parked_applied);
                }
                Err(e) => {
                    failed += 1;
                    stops.failed(fifo);
                    tracing::debug!(message_id = %id, error_type = e.error_type(), error = %e, "message failed; it comes back after the visibility timeout");
                    answer.batch_item_failures.push(ItemFailure { item_identifier: id });
                }
            }
        }
        tracing::info!(settled, failed, events = answer.outcomes.len(), "batch handled");
        answer
    }
}
