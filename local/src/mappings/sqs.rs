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
//! * **Outcomes**: an outbox consumer's answer lists the events it settled (`outcomes`, see
//!   [`settled_outcomes`]); they are counted as rule delivery counts its consumer's (`up`'s
//!   status line, the proof's figures).
//! * A message not deleted becomes visible again when its visibility timeout ends: the queue's
//!   `VisibilityTimeout`, or what the function set with `ChangeMessageVisibility` (the webhook
//!   dispatcher's backoff). Each receive counts (`ApproximateReceiveCount`); past the queue's
//!   `RedrivePolicy.maxReceiveCount`, **SQS itself** moves the message to the dead-letter queue
//!   on the next receive (moto does this as AWS does; the mapping does not play it).
//! * **Retry timing**: by default the queue's `VisibilityTimeout` runs in real time (moto
//!   keeps it as SQS does), so a failed message of a queue with a 5-minute timeout comes back
//!   after 5 minutes, as on AWS. When the runtime compresses retry waits
//!   ([`RuntimeOptions::compressed`](crate::options::RuntimeOptions::compressed), what the
//!   tests, the demo and the proof turn on), the mapping scales that wait like Lambda's
//!   asynchronous retries ([`retry_visibility`]: 300 s becomes 1 s) with
//!   `ChangeMessageVisibility` on the messages the invocation did not settle — unless the
//!   function times its own retries ([`times_its_own_retries`]: the webhook dispatcher's
//!   backoff), whose waits it leaves alone. `maxReceiveCount` is not scaled: a retry window of
//!   `VisibilityTimeout × maxReceiveCount` (4 h) is then seconds.
//!
//! * **FIFO queues** (a name ending `.fifo`: the consumer kit's delivery queue on a Custom
//!   Event Bus): Lambda hands each message group to one invocation at a time, in order, and a
//!   batch holds a group's messages in order. Its settings are refused as Lambda refuses them
//!   ([`check_fifo_settings`]: `BatchSize` at most 10, no batching window; services-sqs-parameters.html).
//!   The emulator keeps the order itself, as
//!   SQS does: a `ReceiveMessage` returns a group's messages in order and none of a group with
//!   messages in flight (moto 5.2.5, `receive_messages`: `pending_message_groups`; checked: of
//!   A0 A1 B2 A3 B4, a receive of 2 gives A0 A1, the next B2 B4 but not A3, and A0 A1 A3 once A's
//!   messages are visible again). So the mapping's concurrent batches never share a group, its
//!   batching window gathers only groups not in flight, and the messages an invocation leaves
//!   unsettled (the consumer's FIFO rule reports a failed message with the later ones of its
//!   group) come back together, in order, before the group's later messages; the compressed wait
//!   ([`retry_visibility`]) applies to them as to a standard queue's. Each record carries the
//!   message's system attributes (`MessageGroupId`, `MessageDeduplicationId`), and
//!   `eventSourceARN` the queue's ARN, from which the consumer tells a FIFO queue.
//!
//! Source: <https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html> ("Reporting
//! batch item failures") and <https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>
//! (SQS message bodies are filtered as JSON when they are JSON).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};
use serde_json::Value;
use tokio::sync::{watch, Semaphore};

use super::Glue;
use crate::lambda::function::LocalFunction;
use crate::options::{RuntimeOptions, LAMBDA_ASYNC_RETRY_DELAY};
use crate::stats::Stats;
use outbox_cli::filter;
use outbox_cli::trace::timeline::StageKind;
use outbox_template::stack::QueueInfo;
use outbox_template::SqsMappingSpec;

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

/// The events an outbox consumer's answer says it settled (`outcomes[]` of
/// `outbox::consumer::SqsBatchAnswer`: `event_id`, `outcome`; parked events applied in passing
/// included), each with its `detail.metadata.time` when one of `bodies` carries that event (for
/// the commit-to-effect latency). Other functions' answers (the webhook dispatcher's) have none.
pub fn settled_outcomes(response: &Value, bodies: &[&str]) -> Vec<(String, String, Option<SystemTime>)> {
    let Some(outcomes) = response.get("outcomes").and_then(Value::as_array) else { return Vec::new() };
    let times: HashMap<String, SystemTime> = bodies
        .iter()
        .filter_map(|b| serde_json::from_str::<Value>(b).ok())
        .filter_map(|event| {
            let id = event.pointer("/detail/metadata/id")?.as_str()?.to_owned();
            let time = chrono::DateTime::parse_from_rfc3339(event.pointer("/detail/metadata/time")?.as_str()?).ok()?;
            Some((id, SystemTime::from(time)))
        })
        .collect();
    outcomes
        .iter()
        .filter_map(|o| {
            let id = o.get("event_id")?.as_str()?;
            Some((id.to_owned(), o.get("outcome")?.as_str()?.to_owned(), times.get(id).copied()))
        })
        .collect()
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

/// How long a message the invocation did not settle stays invisible, when the runtime
/// compresses retry waits: the queue's `VisibilityTimeout` scaled as the asynchronous retries
/// are (`async_retry_delay` / Lambda's 60 s; 300 s → 1 s at the runtime's compressed 200 ms),
/// in whole seconds (`ChangeMessageVisibility`'s unit), at least 1 s so that a failing message
/// does not come back in a busy loop. `None`: the queue's own timeout stands — the runtime plays
/// Lambda's timing (not compressed), or the queue's timeout is already that short.
pub fn retry_visibility(queue_visibility: Duration, options: &RuntimeOptions) -> Option<Duration> {
    if !options.is_compressed() {
        return None;
    }
    let scaled = queue_visibility.as_secs_f64() * options.async_retry_delay.as_secs_f64() / LAMBDA_ASYNC_RETRY_DELAY.as_secs_f64();
    let seconds = Duration::from_secs((scaled.ceil() as u64).max(1));
    (seconds < queue_visibility).then_some(seconds)
}

/// Whether a function's `Policies` allow it `sqs:ChangeMessageVisibility` (or `sqs:*`): such a
/// function times its own retries (the webhook dispatcher holds a message until its next
/// attempt), and a compressed mapping must not shorten the waits it chose. SAM's `SQS` event
/// grants only `ReceiveMessage`, `DeleteMessage` and `GetQueueAttributes`, so the template says
/// it in so many words.
pub fn times_its_own_retries(policies: Option<&serde_yaml_ng::Value>) -> bool {
    fn any(v: &serde_yaml_ng::Value) -> bool {
        match v {
            serde_yaml_ng::Value::String(s) => s.eq_ignore_ascii_case("sqs:ChangeMessageVisibility") || s == "sqs:*",
            serde_yaml_ng::Value::Sequence(items) => items.iter().any(any),
            serde_yaml_ng::Value::Mapping(m) => m.values().any(any),
            serde_yaml_ng::Value::Tagged(t) => any(&t.value),
            _ => false,
        }
    }
    policies.is_some_and(any)
}

/// Whether a mapping of the queue `queue_arn` may have these settings: on a FIFO queue (an ARN
/// ending `.fifo`) Lambda takes a `BatchSize` of at most 10 and no batching window ("For FIFO
/// queues, the maximum is 10", "Batching window is not supported for FIFO queues": Lambda
/// developer guide, "Lambda parameters for Amazon SQS event source mappings").
///
/// # Errors
/// [`crate::Error`] (invalid input) naming the setting and the limit.
pub fn check_fifo_settings(queue_arn: &str, batch_size: usize, max_batching_window_secs: u64) -> crate::Result<()> {
    if !queue_arn.ends_with(".fifo") {
        return Ok(());
    }
    if batch_size > 10 {
        return Err(crate::Error::invalid(format!("BatchSize {batch_size} on the FIFO queue {queue_arn}: Lambda takes at most 10 for a FIFO queue")));
    }
    if max_batching_window_secs > 0 {
        return Err(crate::Error::invalid(format!(
            "MaximumBatchingWindowInSeconds {max_batching_window_secs} on the FIFO queue {queue_arn}: Lambda supports no batching window for FIFO queues"
        )));
    }
    Ok(())
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
    options: RuntimeOptions,
    /// The function's `Policies` allow `ChangeMessageVisibility` ([`times_its_own_retries`]).
    own_retry_timing: bool,
    /// The compressed wait of unsettled messages ([`retry_visibility`]), read when the mapping starts.
    retry_visibility: Option<Duration>,
}

impl std::fmt::Debug for SqsMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsMapping").field("spec", &self.spec).finish_non_exhaustive()
    }
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
        check_fifo_settings(&queue.arn, spec.batch_size, spec.max_batching_window_secs)
            .map_err(|e| crate::Error::invalid(format!("{}.Properties.Events.{}: {e}", function.spec.logical_id, spec.name)))?;
        for pattern in &spec.filters {
            filter::validate(pattern).map_err(|e| {
                crate::Error::invalid(format!("{}.Properties.Events.{}.Properties.FilterCriteria: {e}", function.spec.logical_id, spec.name))
            })?;
        }
        let own_retry_timing = glue
            .stack
            .template
            .resources_of("AWS::Serverless::Function")
            .iter()
            .find(|(id, _)| *id == function.spec.logical_id)
            .is_some_and(|(_, properties)| times_its_own_retries(properties.get("Policies")));
        Ok(Self {
            function,
            spec,
            queue,
            region: glue.stack.resolver.region.clone(),
            sqs: aws_sdk_sqs::Client::new(glue.sdk),
            stats: glue.stats.clone(),
            in_flight: Arc::new(Semaphore::new(glue.options.max_instances.max(1))),
            options: glue.options.clone(),
            own_retry_timing,
            retry_visibility: None,
        })
    }

    /// The queue's `VisibilityTimeout` (`GetQueueAttributes`), if SQS answers.
    async fn queue_visibility(&self) -> Option<Duration> {
        let out = self.sqs.get_queue_attributes().queue_url(&self.queue.url).attribute_names(QueueAttributeName::VisibilityTimeout).send().await;
        match out {
            Ok(out) => out.attributes()?.get(&QueueAttributeName::VisibilityTimeout)?.parse().ok().map(Duration::from_secs),
            Err(e) => {
                tracing::warn!(queue = %self.queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "GetQueueAttributes failed; failed messages come back after the queue's own visibility timeout");
                None
            }
        }
    }

    /// Runs until `shutdown` is true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        if self.options.is_compressed() && !self.own_retry_timing {
            self.retry_visibility = self.queue_visibility().await.and_then(|v| retry_visibility(v, &self.options));
            if let Some(wait) = self.retry_visibility {
                tracing::info!(queue = %self.queue.name, wait_s = wait.as_secs(), "retry waits compressed: failed messages come back after this, not the queue's visibility timeout");
            }
        }
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
        if let Some(journal) = &self.options.journal {
            let who = format!("{} from queue {}", self.function.spec.logical_id, self.queue.logical_id);
            for (message, _) in &kept {
                let body = message.body().unwrap_or_default();
                if let Some(id) = serde_json::from_str(body).ok().as_ref().and_then(crate::journal::event_id_in) {
                    journal.record(crate::journal::Record::now(&id, StageKind::Delivered, &who));
                }
            }
        }
        let invocation = self.function.invoke(&payload).await;
        let ids: Vec<&str> = kept.iter().map(|(m, _)| m.message_id().unwrap_or_default()).collect();
        let done = settled(invocation.result.as_ref().ok(), &ids, self.spec.report_batch_item_failures);
        if let Ok(response) = &invocation.result {
            let bodies: Vec<&str> = kept.iter().map(|(m, _)| m.body().unwrap_or_default()).collect();
            for (event_id, outcome, time) in settled_outcomes(response, &bodies) {
                self.stats.add_outcome(&event_id, &outcome, time);
            }
        }
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
        let (settled, unsettled): (Vec<_>, Vec<_>) = kept.iter().zip(done).partition(|(_, d)| *d);
        self.delete(settled.iter().map(|((m, _), _)| *m)).await;
        if let Some(wait) = self.retry_visibility {
            self.hold(unsettled.iter().map(|((m, _), _)| *m), wait).await;
        }
    }

    /// `ChangeMessageVisibilityBatch` of `messages` to `wait` (10 per call): the compressed retry
    /// wait. A refusal leaves the queue's own timeout, which only delays the retry.
    async fn hold<'a>(&self, messages: impl Iterator<Item = &'a Message>, wait: Duration) {
        let seconds = i32::try_from(wait.as_secs()).unwrap_or(i32::MAX);
        let entries: Vec<ChangeMessageVisibilityBatchRequestEntry> = messages
            .enumerate()
            .filter_map(|(i, m)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(i.to_string())
                    .set_receipt_handle(m.receipt_handle.clone())
                    .visibility_timeout(seconds)
                    .build()
                    .ok()
            })
            .collect();
        for chunk in entries.chunks(10) {
            let sent = self.sqs.change_message_visibility_batch().queue_url(&self.queue.url).set_entries(Some(chunk.to_vec())).send().await;
            if let Err(e) = sent {
                tracing::warn!(queue = %self.queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "ChangeMessageVisibilityBatch failed; those messages come back after the queue's visibility timeout");
            }
        }
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
    fn an_outbox_consumers_outcomes_are_read_with_their_event_times() {
        let response = json!({"batchItemFailures": [], "outcomes": [
            {"event_id": "e-1", "outcome": "sent"}, {"event_id": "e-2", "outcome": "duplicate"}, {"event_id": "e-3", "outcome": "applied"}
        ]});
        let body = r#"{"detail": {"metadata": {"id": "e-1", "time": "2026-12-01T08:00:00.000Z"}}}"#;
        let read = settled_outcomes(&response, &[body, "not json"]);
        let at = SystemTime::from(chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:00Z").expect("a time"));
        assert_eq!(
            read,
            [("e-1".to_owned(), "sent".to_owned(), Some(at)), ("e-2".into(), "duplicate".into(), None), ("e-3".into(), "applied".into(), None)]
        );
        // The webhook dispatcher's answer: batchItemFailures only.
        assert!(settled_outcomes(&json!({"batchItemFailures": []}), &[body]).is_empty());
    }

    #[test]
    fn compressed_runs_scale_the_visibility_timeout_and_lambdas_timing_keeps_it() {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        // Lambda's timing (the default): the queue's own timeout, in real time.
        assert_eq!(retry_visibility(minutes(5), &RuntimeOptions::default()), None);
        // Compressed (200 ms for Lambda's 60 s): 5 min → 1 s, 12 h → 144 s; never under 1 s.
        let compressed = RuntimeOptions::default().compressed();
        assert_eq!(retry_visibility(minutes(5), &compressed), Some(Duration::from_secs(1)));
        assert_eq!(retry_visibility(minutes(12 * 60), &compressed), Some(Duration::from_secs(144)));
        assert_eq!(retry_visibility(Duration::from_secs(30), &compressed), Some(Duration::from_secs(1)));
        // A timeout already that short stands.
        assert_eq!(retry_visibility(Duration::from_secs(1), &compressed), None);
        assert_eq!(retry_visibility(Duration::ZERO, &compressed), None);
    }

    #[test]
    fn a_function_allowed_to_change_visibility_times_its_own_retries() {
        let policies = |yaml: &str| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml).expect("YAML");
        // The webhook dispatcher's statement (blocks/webhooks/template.yaml).
        let dispatcher = policies("- SQSSendMessagePolicy: {QueueName: q}\n- Statement:\n    - Effect: Allow\n      Action: sqs:ChangeMessageVisibility\n      Resource: arn\n");
        assert!(times_its_own_retries(Some(&dispatcher)));
        assert!(times_its_own_retries(Some(&policies("- Statement: [{Effect: Allow, Action: ['sqs:*'], Resource: arn}]"))));
        // A consumer with the kit's policies: the mapping's compressed wait applies.
        let consumer = policies("- DynamoDBCrudPolicy: {TableName: inbox}\n- SQSSendMessagePolicy: {QueueName: dlq}\n");
        assert!(!times_its_own_retries(Some(&consumer)));
        assert!(!times_its_own_retries(None));
    }

    #[test]
    fn a_fifo_queues_mapping_takes_lambdas_fifo_limits() {
        let fifo = "arn:aws:sqs:us-east-1:123456789012:delivery.fifo";
        assert!(check_fifo_settings(fifo, 10, 0).is_ok());
        let too_many = check_fifo_settings(fifo, 11, 0).expect_err("11 on a FIFO queue").to_string();
        assert!(too_many.contains("BatchSize 11") && too_many.contains("at most 10"), "{too_many}");
        let window = check_fifo_settings(fifo, 10, 1).expect_err("a window on a FIFO queue").to_string();
        assert!(window.contains("MaximumBatchingWindowInSeconds 1") && window.contains("no batching window"), "{window}");
        // A standard queue takes both.
        assert!(check_fifo_settings("arn:aws:sqs:us-east-1:123456789012:delivery", 100, 1).is_ok());
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
