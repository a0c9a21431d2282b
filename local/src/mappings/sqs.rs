//! An SQS event source mapping, played locally: receives from the queue, applies
//! `FilterCriteria`, invokes the function with an `SqsEvent` of at most `BatchSize` messages,
//! and deletes what the invocation settled — as Lambda does:
//!
//! * **Batching**: `ReceiveMessage` (up to 10 per call, long polling) until `BatchSize`
//!   messages are in hand or `MaximumBatchingWindowInSeconds` has passed since the first one
//!   (0: invoke with what one receive returned). Up to [`RuntimeOptions::max_instances`](crate::options::RuntimeOptions::max_instances)
//!   batches are in flight at once (Lambda starts with several pollers per queue).
//! * **Filtering**: a message matching no `FilterCriteria` pattern is deleted without
//!   invoking; the patterns see the message as the function would, its `body` parsed when it
//!   is JSON.
//! * **Success**: the whole batch is deleted. With `ReportBatchItemFailures`, every message
//!   except those in `batchItemFailures` is deleted; an empty, `null` or unknown
//!   `itemIdentifier` (or a `batchItemFailures` that is not a list) fails the whole batch.
//! * **Failure** (the function errors, times out or crashes): nothing is deleted.
//! * A message not deleted becomes visible again when its visibility timeout ends: the queue's
//!   `VisibilityTimeout`, or what the function set with `ChangeMessageVisibility` (the webhook
//!   dispatcher's backoff). Each receive counts (`ApproximateReceiveCount`); past the queue's
//!   `RedrivePolicy.maxReceiveCount`, **SQS itself** moves the message to the dead-letter queue
//!   on the next receive (moto does this as AWS does; the mapping does not play it).
//!
//! Source: <https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html> ("Reporting
//! batch item failures") and <https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>
//! (SQS message bodies are filtered as JSON when they are JSON).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use serde_json::Value;
use tokio::sync::{watch, Semaphore};

use super::Glue;
use crate::filter;
use crate::lambda::function::LocalFunction;
use crate::stack::QueueInfo;
use crate::stats::Stats;
use crate::template::SqsMappingSpec;

/// Which messages of a batch (by message id, in batch order) an invocation settled, i.e. may be
/// deleted: all on success without `ReportBatchItemFailures`; with it, all but those reported in
/// `batchItemFailures`, or none when an identifier is empty, `null` or not in the batch, or the
/// list is not a list. `None` (the invocation failed): none.
pub fn settled(response: Option<&Value>, message_ids: &[&str], report_batch_item_failures: bool) -> Vec<bool> {
    let none = vec![false; message_ids.len()];
    let Some(response) = response else { return none };
    if !report_batch_item_failures {
        return vec![true; message_ids.len()];
    }
    let failures = match response.get("batchItemFailures") {
        None | Some(Value::Null) => return vec![true; message_ids.len()],
        Some(Value::Array(f)) => f,
        Some(_) => return none,
    };
    let mut failed = HashSet::new();
    for failure in failures {
        match failure.get("itemIdentifier").and_then(Value::as_str).filter(|id| message_ids.contains(id)) {
            Some(id) => failed.insert(id),
            None => return none,
        };
    }
    message_ids.iter().map(|id| !failed.contains(id)).collect()
}

/// The message as Lambda hands it to the function (`Records[]` of an `SqsEvent`).
pub fn lambda_record(message: &Message, queue_arn: &str, region: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id.clone();
    record.receipt_handle = message.receipt_handle.clone();
    record.body = message.body.clone();
    record.md5_of_body = message.md5_of_body.clone();
    record.md5_of_message_attributes = message.md5_of_message_attributes.clone();
    for (k, v) in message.attributes().into_iter().flatten() {
        record.attributes.insert(k.as_str().to_owned(), v.clone());
    }
    for (k, v) in message.message_attributes().into_iter().flatten() {
        // Through its JSON form: binary values are base64 there, as Lambda delivers them.
        use base64::Engine as _;
        let b64 = |b: &aws_sdk_sqs::primitives::Blob| base64::engine::general_purpose::STANDARD.encode(b.as_ref());
        let attribute = serde_json::json!({
            "stringValue": v.string_value,
            "binaryValue": v.binary_value.as_ref().map(b64),
            "stringListValues": v.string_list_values.clone().unwrap_or_default(),
            "binaryListValues": v.binary_list_values.iter().flatten().map(b64).collect::<Vec<_>>(),
            "dataType": v.data_type,
        });
        match serde_json::from_value::<SqsMessageAttribute>(attribute) {
            Ok(attribute) => {
                record.message_attributes.insert(k.clone(), attribute);
            }
            Err(e) => tracing::warn!(attribute = %k, error = %e, "a message attribute cannot be handed to the function"),
        }
    }
    record.event_source = Some("aws:sqs".into());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(region.to_owned());
    record
}

/// Whether `record` passes `filters` (none: everything passes); the body is matched as JSON
/// when it is JSON, as Lambda does for SQS.
pub fn passes(filters: &[Value], record: &SqsMessage) -> bool {
    if filters.is_empty() {
        return true;
    }
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(body) = record.body.as_deref().and_then(|b| serde_json::from_str::<Value>(b).ok()) {
        value["body"] = body;
    }
    filters.iter().any(|p| filter::matches(p, &value))
}

/// One SQS event source mapping.
pub struct SqsMapping {
    function: Arc<LocalFunction>,
    spec: SqsMappingSpec,
    queue: QueueInfo,
    region: String,
    sqs: aws_sdk_sqs::Client,
    stats: Arc<Stats>,
    in_flight: Arc<Semaphore>,
}

impl SqsMapping {
    /// Sets up the mapping `spec` of `function`.
    ///
    /// # Errors
    /// A message when the queue is not a queue of the stack or a filter is not supported.
    pub fn new(glue: Glue<'_>, function: Arc<LocalFunction>, spec: SqsMappingSpec) -> crate::Result<Self> {
        let queue = glue.stack.queue(&spec.queue_logical_id).cloned().ok_or_else(|| {
            crate::Error::invalid(format!(
                "{}.Properties.Events.{}.Properties.Queue: {} is not a queue of the template",
                function.spec.logical_id, spec.name, spec.queue_logical_id
            ))
        })?;
        for pattern in &spec.filters {
            filter::validate(pattern).map_err(|e| {
                crate::Error::invalid(format!("{}.Properties.Events.{}.Properties.FilterCriteria: {e}", function.spec.logical_id, spec.name))
            })?;
        }
        Ok(Self {
            function,
            spec,
            queue,
            region: glue.stack.resolver.region.clone(),
            sqs: aws_sdk_sqs::Client::new(glue.sdk),
            stats: glue.stats.clone(),
            in_flight: Arc::new(Semaphore::new(glue.options.max_instances.max(1))),
        })
    }

    /// Runs until `shutdown` is true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let mut tasks = tokio::task::JoinSet::new();
        while !*shutdown.borrow() {
            let Ok(permit) = this.in_flight.clone().acquire_owned().await else { break };
            let batch = this.gather(&mut shutdown).await;
            while tasks.try_join_next().is_some() {}
            if batch.is_empty() {
                continue;
            }
            let this = this.clone();
            tasks.spawn(async move {
                this.process(batch).await;
                drop(permit);
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Receives up to `BatchSize` messages, within the batching window after the first.
    async fn gather(&self, shutdown: &mut watch::Receiver<bool>) -> Vec<Message> {
        let mut batch: Vec<Message> = Vec::new();
        let window = Duration::from_secs(self.spec.max_batching_window_secs);
        let mut first_at: Option<tokio::time::Instant> = None;
        loop {
            let wanted = self.spec.batch_size - batch.len();
            // Long polling, 1 s at most so a shutdown is noticed (Lambda polls with 20 s); within
            // the window only as long as it has left.
            let wait = match first_at {
                None => 1,
                Some(t) => {
                    let left = window.saturating_sub(t.elapsed());
                    if left < Duration::from_secs(1) {
                        // Less than the 1 s granularity of long polling: a short pause, then a
                        // short poll (not a burst of them).
                        tokio::time::sleep(left.min(Duration::from_millis(100))).await;
                    }
                    left.as_secs().min(1) as i32
                }
            };
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.queue.url)
                .max_number_of_messages(wanted.min(10) as i32)
                .wait_time_seconds(wait)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await;
            match received {
                Ok(out) => {
                    for message in out.messages.unwrap_or_default() {
                        // Back within the window (a visibility timeout shorter than the window,
                        // which AWS would refuse): one record, the newest receipt handle.
                        match batch.iter_mut().find(|m| m.message_id.is_some() && m.message_id == message.message_id) {
                            Some(earlier) => *earlier = message,
                            None => batch.push(message),
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "ReceiveMessage failed; retrying");
                    let _ = tokio::time::timeout(Duration::from_millis(500), shutdown.changed()).await;
                    return batch;
                }
            }
            if batch.is_empty() {
                return batch;
            }
            let first = *first_at.get_or_insert_with(tokio::time::Instant::now);
            if batch.len() >= self.spec.batch_size || first.elapsed() >= window || *shutdown.borrow() {
                return batch;
            }
        }
    }

    /// Filters, invokes and deletes what is settled.
    async fn process(&self, messages: Vec<Message>) {
        let records: Vec<SqsMessage> = messages.iter().map(|m| lambda_record(m, &self.queue.arn, &self.region)).collect();
        let (kept, dropped): (Vec<_>, Vec<_>) = messages.iter().zip(records).partition(|(_, r)| passes(&self.spec.filters, r));
        self.stats.update(|c| {
            c.sqs_messages_received += messages.len();
            c.sqs_messages_filtered += dropped.len();
        });
        // Lambda deletes messages that match no filter, without invoking.
        self.delete(dropped.iter().map(|(m, _)| *m)).await;
        if kept.is_empty() {
            return;
        }
        let mut event = SqsEvent::default();
        event.records = kept.iter().map(|(_, r)| r.clone()).collect();
        let payload = match serde_json::to_string(&event) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "the SQS event does not serialise; the messages come back after their visibility timeout");
                return;
            }
        };
        let invocation = self.function.invoke(&payload).await;
        let ids: Vec<&str> = kept.iter().map(|(m, _)| m.message_id().unwrap_or_default()).collect();
        let done = settled(invocation.result.as_ref().ok(), &ids, self.spec.report_batch_item_failures);
        let failed = done.iter().filter(|d| !**d).count();
        self.stats.update(|c| {
            c.sqs_invocations += 1;
            c.sqs_messages_failed += failed;
            if invocation.result.is_err() {
                c.sqs_invocation_errors += 1;
            }
        });
        if let Err(e) = &invocation.result {
            tracing::warn!(function = %self.function.spec.logical_id, queue = %self.queue.name, messages = ids.len(), error_type = %e.error_type, error = %e.error_message, "SQS batch failed; nothing deleted");
        } else if failed > 0 {
            tracing::info!(function = %self.function.spec.logical_id, queue = %self.queue.name, failed, "batch item failures: those messages come back after their visibility timeout");
        }
        self.delete(kept.iter().zip(done).filter(|(_, d)| *d).map(|((m, _), _)| *m)).await;
    }

    /// `DeleteMessageBatch` of `messages` (10 per call).
    async fn delete<'a>(&self, messages: impl Iterator<Item = &'a Message>) {
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder().id(i.to_string()).set_receipt_handle(m.receipt_handle.clone()).build().ok()
            })
            .collect();
        for chunk in entries.chunks(10) {
            let sent = self.sqs.delete_message_batch().queue_url(&self.queue.url).set_entries(Some(chunk.to_vec())).send().await;
            match sent {
                Ok(out) => {
                    self.stats.update(|c| c.sqs_messages_deleted += out.successful().len());
                    if !out.failed().is_empty() {
                        tracing::warn!(queue = %self.queue.name, failed = out.failed().len(), "some deletes failed; those messages will be received again");
                    }
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "DeleteMessageBatch failed; the messages will be received again")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const IDS: [&str; 3] = ["a", "b", "c"];

    #[test]
    fn reported_failures_are_kept_and_the_rest_deleted() {
        assert_eq!(settled(Some(&json!({"batchItemFailures": [{"itemIdentifier": "b"}]})), &IDS, true), [true, false, true]);
        assert_eq!(settled(Some(&json!({"batchItemFailures": []})), &IDS, true), [true; 3]);
        assert_eq!(settled(Some(&json!({})), &IDS, true), [true; 3]);
        assert_eq!(settled(Some(&json!(null)), &IDS, true), [true; 3]);
    }

    #[test]
    fn an_invalid_identifier_or_an_error_keeps_the_whole_batch() {
        for bad in [
            json!({"batchItemFailures": [{"itemIdentifier": "zzz"}]}),
            json!({"batchItemFailures": [{"itemIdentifier": ""}]}),
            json!({"batchItemFailures": [{"itemIdentifier": null}]}),
            json!({"batchItemFailures": "b"}),
        ] {
            assert_eq!(settled(Some(&bad), &IDS, true), [false; 3], "{bad}");
        }
        assert_eq!(settled(None, &IDS, true), [false; 3]);
        assert_eq!(settled(None, &IDS, false), [false; 3]);
    }

    #[test]
    fn without_report_batch_item_failures_a_success_deletes_everything() {
        assert_eq!(settled(Some(&json!({"batchItemFailures": [{"itemIdentifier": "b"}]})), &IDS, false), [true; 3]);
    }

    #[test]
    fn filters_see_the_body_as_json() {
        let pattern = json!({"body": {"detail": {"metadata": {"id": [{"exists": true}]}}}});
        let with = |body: &str| {
            let mut r = SqsMessage::default();
            r.body = Some(body.to_owned());
            r
        };
        assert!(passes(std::slice::from_ref(&pattern), &with(r#"{"detail": {"metadata": {"id": "e-1"}}}"#)));
        assert!(!passes(std::slice::from_ref(&pattern), &with(r#"{"detail": {}}"#)));
        assert!(!passes(std::slice::from_ref(&pattern), &with("not json")));
        assert!(passes(&[], &with("not json")));
    }
}
