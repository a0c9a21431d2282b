//! The delivery queue's side of the loop: the message attributes a per-subscriber copy carries,
//! a wait held by the visibility timeout or by a re-enqueued copy, the fan-out into one message
//! per subscriber, and dead letters with their reason.

use std::sync::Mutex;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use chrono::Utc;

use super::event::WebhookEvent;
use super::subscribers::Subscriber;
use super::{lock, millis, DispatchReport, Dispatcher, MessageResult, SubscriberMessage};
use crate::backoff::ceil_seconds;
use outbox::inbox::InboxStore;

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
/// What a visibility hold keeps clear of [`MAX_VISIBILITY`] (the receive time is approximate).
const VISIBILITY_MARGIN: Duration = Duration::from_secs(60);

impl<S: InboxStore> Dispatcher<S> {
    /// `ChangeMessageVisibility`: the message comes back after `delay`. `false` when SQS refused
    /// (the message then comes back after the queue's visibility timeout, and waits again).
    pub(super) async fn hold(&self, message: &SqsMessage, delay: Duration) -> bool {
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
    /// The message waits `wait` without an attempt: held by its visibility timeout when that
    /// fits within SQS's 12 hours from its first receive and this is that first receive,
    /// re-enqueued (same attempt, `not_before`) otherwise.
    pub(super) async fn defer(&self, copy: &SubscriberMessage<'_>, wait: Duration, report: &Mutex<DispatchReport>) -> MessageResult {
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
    pub(super) async fn requeue(&self, copy: &SubscriberMessage<'_>, attempt: u32, wait: Duration) -> Result<(), ()> {
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

    /// Fans an event out: one message per subscriber that wants its type (`SendMessageBatch`,
    /// 10 entries a call). Any failed entry fails the whole event, which comes back and is fanned
    /// out again (the inbox absorbs the copies already sent).
    pub(super) async fn fan_out(&self, body: &str, event: &WebhookEvent, report: &Mutex<DispatchReport>) -> MessageResult {
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
    pub(super) async fn dead_letter(
        &self,
        body: &str,
        subscriber: Option<&str>,
        code: &str,
        reason: &str,
        report: &Mutex<DispatchReport>,
    ) -> MessageResult {
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
pub(super) fn attribute(message: &SqsMessage, name: &str) -> Option<String> {
    message.message_attributes.get(name).and_then(|a| a.string_value.clone())
}

pub(super) fn number_attribute(value: i64) -> MessageAttributeValue {
    // data_type is set: the only required field, so build cannot fail.
    MessageAttributeValue::builder().data_type("Number").string_value(value.to_string()).build().expect("data_type is set")
}

pub(super) fn string_attribute(value: &str) -> MessageAttributeValue {
    // data_type is set: the only required field, so build cannot fail.
    MessageAttributeValue::builder().data_type("String").string_value(value).build().expect("data_type is set")
}
