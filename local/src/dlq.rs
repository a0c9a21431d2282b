//! Reading dead-letter queues without consuming them: messages are received with a short
//! visibility timeout and made visible again at once, so listing changes nothing but their
//! receive count. Works against the emulator and, with ordinary AWS configuration, against AWS.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use outbox::dead_letter::DeadLetter;
use serde::Serialize;

use crate::stack::QueueInfo;

/// One dead-letter message.
#[derive(Debug, Clone, Serialize)]
pub struct DlqMessage {
    /// Queue name.
    pub queue: String,
    /// SQS message id.
    pub message_id: String,
    /// When SQS received it: RFC 3339 UTC.
    pub sent_at: Option<String>,
    /// Age, seconds.
    pub age_secs: Option<i64>,
    /// Times received (listing counts too).
    pub receive_count: Option<u32>,
    /// Recognised shape: `relay-failure`, `invocation-record`, `eventbridge-event`, `unknown`.
    pub shape: String,
    /// Event id it concerns, if known.
    pub event_id: Option<String>,
    /// Why it failed, in one line.
    pub reason: String,
    /// Message attributes (e.g. EventBridge's `ERROR_CODE`, the relay's `error_code`).
    pub attributes: BTreeMap<String, String>,
    /// The body, as stored.
    pub body: String,
}

/// Approximate number of messages in `queue` (visible + in flight).
///
/// # Errors
/// The SDK error as text.
pub async fn depth(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> Result<u64, String> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(&queue.url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
    let get = |name: QueueAttributeName| {
        out.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
    };
    Ok(get(QueueAttributeName::ApproximateNumberOfMessages) + get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

/// Every message of `queue`, oldest first, left in the queue.
///
/// # Errors
/// The SDK error as text.
pub async fn peek(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> Result<Vec<DlqMessage>, String> {
    let err = |e: aws_sdk_sqs::error::SdkError<_, _>| aws_sdk_sqs::error::DisplayErrorContext(e).to_string();
    let mut seen = BTreeMap::new();
    let mut handles = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .wait_time_seconds(if seen.is_empty() { 1 } else { 0 })
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(err)?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            if let Some(h) = m.receipt_handle() {
                handles.push(h.to_owned());
            }
            let id = m.message_id().unwrap_or_default().to_owned();
            seen.entry(id).or_insert(m);
        }
    }
    // Make them visible again at once.
    for handle in handles {
        let _ = sqs.change_message_visibility().queue_url(&queue.url).receipt_handle(handle).visibility_timeout(0).send().await;
    }
    let now = chrono::Utc::now();
    let mut list: Vec<DlqMessage> = seen
        .into_values()
        .map(|m| {
            let body = m.body().unwrap_or_default().to_owned();
            let parsed = DeadLetter::parse(&body);
            let system = m.attributes();
            let sent = system
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|v| v.parse::<i64>().ok())
                .and_then(chrono::DateTime::from_timestamp_millis);
            let mut attributes = BTreeMap::new();
            for (k, v) in m.message_attributes().into_iter().flatten() {
                if let Some(s) = v.string_value() {
                    attributes.insert(k.clone(), s.to_owned());
                }
            }
            let mut reason = parsed.reason();
            if let (DeadLetter::EventBridgeEvent { .. }, Some(code)) = (&parsed, attributes.get("ERROR_CODE")) {
                reason = format!("{code}: {}", attributes.get("ERROR_MESSAGE").map(String::as_str).unwrap_or(""));
            }
            DlqMessage {
                queue: queue.name.clone(),
                message_id: m.message_id().unwrap_or_default().to_owned(),
                sent_at: sent.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                age_secs: sent.map(|t| (now - t).num_seconds()),
                receive_count: system
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok()),
                shape: parsed.shape().to_owned(),
                event_id: parsed.event_id(),
                reason,
                attributes,
                body,
            }
        })
        .collect();
    list.sort_by(|a, b| a.sent_at.cmp(&b.sent_at));
    Ok(list)
}

/// Waits until `queue` holds at least `count` messages, or `timeout` passes; returns the depth.
///
/// # Errors
/// The SDK error as text.
pub async fn wait_for_depth(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, count: u64, timeout: Duration) -> Result<u64, String> {
    let start = std::time::Instant::now();
    loop {
        let d = depth(sqs, queue).await?;
        if d >= count || start.elapsed() > timeout {
            return Ok(d);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A listing for people: one line per message.
pub fn format_listing(messages: &[DlqMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        let age = m.age_secs.map(|s| format!("{s}s")).unwrap_or_else(|| "?".into());
        out.push_str(&format!(
            "  {queue}  {id}  age {age}  {shape}  event {event}\n      reason: {reason}\n",
            queue = m.queue,
            id = m.message_id,
            shape = m.shape,
            event = m.event_id.as_deref().unwrap_or("-"),
            reason = m.reason,
        ));
    }
    out
}
