//! `dlq practice`: one real dead letter to practise the `dlq` verbs on, made through the real
//! path. An event of a type a consumer's rule routes (its `source` and first `detail-type`), whose
//! `detail.data` is a string where the consumer decodes an object, is put on the bus; the rule
//! delivers it (to the function, or to the queue its SQS event source mapping reads), the consumer's inbox library finds it malformed (`MalformedEvent`, a permanent
//! cause) and sends it to its dead-letter queue (`DEAD_LETTER_QUEUE_URL`) on the first attempt.
//! The verb waits until the message is in that queue and returns it; [`next_steps`] says what to
//! try next (`dlq redrive` of a permanent cause is refused without `--force`).
//!
//! It needs the consumers running (`outbox-local up`); against AWS it would put a malformed event
//! on a real bus, so the CLI refuses that without `--allow-aws`.

use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use serde_json::json;

use outbox_cli::dlq;
use outbox_cli::message::DlqMessage;
use outbox_template::stack::{QueueInfo, Stack};

/// The dead letter the verb made.
#[derive(Debug, Clone)]
pub struct Practice {
    /// The consumer function (logical id) that dead-lettered it.
    pub function: String,
    /// Its dead-letter queue.
    pub queue: QueueInfo,
    /// The event id put on the bus (`practice-<UUIDv7>`).
    pub event_id: String,
    /// The message as `dlq list` shows it.
    pub message: DlqMessage,
}

/// The first consumer of the template with a delivery from a bus (a rule of its own, or a rule to
/// the queue its SQS event source mapping reads: [`Stack::deliveries`]) and a
/// `DEAD_LETTER_QUEUE_URL`: its logical id, the event's source and detail-type (from the rule's
/// pattern), the bus, the queue.
fn consumer_target(stack: &Stack) -> crate::Result<(String, String, String, String, QueueInfo)> {
    let deliveries = stack.deliveries().map_err(crate::Error::from)?;
    for function in &stack.functions {
        let env = stack.environment(function).map_err(crate::Error::from)?;
        let Some(url) = env.get("DEAD_LETTER_QUEUE_URL") else { continue };
        let Some(queue) = stack.queues.iter().find(|q| &q.url == url) else { continue };
        for delivery in deliveries.iter().filter(|d| d.function == function.logical_id) {
            let (Some(source), Some(detail_type)) = (delivery.listed("source").into_iter().next(), delivery.detail_types().into_iter().next()) else {
                continue;
            };
            return Ok((function.logical_id.clone(), source, detail_type, delivery.bus_name.clone(), queue.clone()));
        }
    }
    Err(crate::Error::invalid(
        "no function of the template has a delivery from a bus (a rule of its own, or a rule to the queue of its SQS event) with source and detail-type, and a DEAD_LETTER_QUEUE_URL",
    ))
}

/// Puts one malformed event on the bus and waits (at most `timeout`) until the consumer has
/// dead-lettered it.
///
/// # Errors
/// A message when the bus refuses the event, or the dead letter does not arrive in time (are the
/// consumers running, e.g. `outbox-local up`?).
pub async fn run(sdk: &SdkConfig, stack: &Stack, timeout: Duration) -> crate::Result<Practice> {
    let (function, source, detail_type, bus, queue) = consumer_target(stack)?;
    let event_id = format!("practice-{}", uuid::Uuid::now_v7());
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let detail = json!({
        "metadata": {"id": event_id, "type": detail_type, "version": 1, "source": source, "time": now,
                     "subject": "practice", "aggregate_type": "Practice", "sequence": 1, "correlation_id": "dlq-practice"},
        "data": "outbox-local dlq practice: a string where the consumer decodes an object"
    });
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(&bus)
        .source(&source)
        .detail_type(&detail_type)
        .detail(detail.to_string())
        .build();
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let out = events.put_events().entries(entry).send().await.map_err(crate::Error::aws(format!("PutEvents on {bus}")))?;
    if out.failed_entry_count() > 0 {
        return Err(crate::Error::expectation(format!("the bus {bus} refused the event: {:?}", out.entries())));
    }
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let started = Instant::now();
    loop {
        let held = dlq::peek(&sqs, &queue).await.map_err(crate::Error::Operator)?;
        if let Some(message) = held.into_iter().find(|m| m.event_id.as_deref() == Some(event_id.as_str())) {
            return Ok(Practice { function, queue, event_id, message });
        }
        if started.elapsed() > timeout {
            return Err(crate::Error::expectation(format!(
                "event {event_id} was put on bus {bus} but is not in {} after {} s: are the consumers running (`outbox-local up`)?",
                queue.name,
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What to try next, for people: the commands (each `run` and a verb; `run` is the program as
/// the user invoked it, e.g. [`crate::hint::command`]) to list, show, redrive (refused: the cause
/// is permanent), force, and clear it.
pub fn next_steps(practice: &Practice, run: &str) -> String {
    let id = &practice.event_id;
    let m = &practice.message;
    format!(
        "{function} dead-lettered event {id} to {queue}: {cause} (permanent: {permanent})\n  reason: {reason}\n\
         try next:\n  {run} dlq list                      # grouped by cause; the practice message is under {cause}\n  \
         {run} dlq show {message_id}\n  \
         {run} trace {id}\n  \
         {run} dlq redrive --id {id}        # refused: {cause} is permanent, a redrive cannot fix it\n  \
         {run} dlq redrive --id {id} --force   # sent anyway: the consumer dead-letters it again\n  \
         {run} dlq archive practice.jsonl --id {id}   # keep a copy, then delete it (or: dlq purge --id {id})\n",
        function = practice.function,
        queue = practice.queue.name,
        cause = m.cause,
        permanent = m.permanent,
        reason = m.reason,
        message_id = m.message_id,
    )
}
