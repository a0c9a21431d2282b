//! Reading dead-letter queues without consuming them: messages are received with a short
//! visibility timeout and made visible again at once, so listing changes nothing but their
//! receive count. Works against the emulator and, with ordinary AWS configuration, against AWS.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use outbox::dead_letter::DeadLetter;
use serde::Serialize;

use crate::message::DlqMessage;
use crate::{Error, Result};
use outbox_template::stack::QueueInfo;

mod republish;

pub use republish::{redrive, redrive_entry, watch, NotRedrivable, RedriveOptions, RedriveReport, WatchReport};

/// Approximate number of messages in `queue` (visible + in flight).
///
/// # Errors
/// [`Error::Aws`]: `GetQueueAttributes` failed.
pub async fn depth(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> Result<u64> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(&queue.url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(Error::aws(format!("GetQueueAttributes of {}", queue.name)))?;
    let get = |name: QueueAttributeName| out.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(get(QueueAttributeName::ApproximateNumberOfMessages) + get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

/// Receives every message of `queue` once, each hidden for `visibility_secs` (long-polling the
/// first receive so that every SQS server is asked).
pub(super) async fn receive_all(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, visibility_secs: i32) -> Result<Vec<aws_sdk_sqs::types::Message>> {
    let mut received = Vec::new();
    let mut seen = std::collections::HashSet::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility_secs)
            .wait_time_seconds(if received.is_empty() { 1 } else { 0 })
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(Error::aws(format!("ReceiveMessage from {}", queue.name)))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(received);
        }
        for m in messages {
            if seen.insert(m.message_id().unwrap_or_default().to_owned()) {
                received.push(m);
            }
        }
    }
}

/// Makes a received message visible again at once.
pub(super) async fn unhide(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, message: &aws_sdk_sqs::types::Message) {
    if let Some(handle) = message.receipt_handle() {
        let _ = sqs.change_message_visibility().queue_url(&queue.url).receipt_handle(handle).visibility_timeout(0).send().await;
    }
}

/// Every message of `queue`, oldest first, left in the queue.
///
/// # Errors
/// [`Error::Aws`]: `ReceiveMessage` failed.
pub async fn peek(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> Result<Vec<DlqMessage>> {
    let received = receive_all(sqs, queue, 30).await?;
    for m in &received {
        unhide(sqs, queue, m).await;
    }
    let mut list = describe(queue, &received);
    list.sort_by(|a, b| a.sent_at.cmp(&b.sent_at));
    Ok(list)
}

/// The received messages of `queue` as [`DlqMessage`]s, in the same order.
pub(super) fn describe(queue: &QueueInfo, received: &[aws_sdk_sqs::types::Message]) -> Vec<DlqMessage> {
    let now = chrono::Utc::now();
    received
        .iter()
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
            let mut cause = parsed.cause();
            match (&parsed, attributes.get("ERROR_CODE")) {
                (DeadLetter::EventBridgeEvent { .. }, Some(code)) => {
                    reason = format!("{code}: {}", attributes.get("ERROR_MESSAGE").map(String::as_str).unwrap_or(""));
                    cause = code.clone();
                }
                // A bus event without EventBridge's error attributes: SQS moved it here from a
                // delivery queue (the consumer kit's, the webhooks') after the queue's
                // RedrivePolicy.maxReceiveCount receives, every attempt having failed.
                (DeadLetter::EventBridgeEvent { .. }, None) => {
                    reason = "moved by SQS after the delivery queue's maxReceiveCount receives: every attempt failed (the function's logs and `trace <event-id>` say why)".into();
                    cause = "MaxReceiveCountExceeded".into();
                }
                _ => {}
            }
            DlqMessage {
                queue: queue.name.clone(),
                message_id: m.message_id().unwrap_or_default().to_owned(),
                sent_at: sent.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                age_secs: sent.map(|t| (now - t).num_seconds()),
                receive_count: system.and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount)).and_then(|v| v.parse().ok()),
                shape: parsed.shape().to_owned(),
                event_id: parsed.event_id(),
                reason,
                cause,
                permanent: parsed.is_permanent(),
                attributes,
                body,
            }
        })
        .collect()
}

/// Waits until `queue` holds at least `count` messages, or `timeout` passes; returns the depth.
///
/// # Errors
/// [`Error::Aws`]: `GetQueueAttributes` failed.
pub async fn wait_for_depth(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, count: u64, timeout: Duration) -> Result<u64> {
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

/// The messages of one queue that share a failure cause.
#[derive(Debug, Clone, Serialize)]
pub struct CauseGroup {
    /// Queue name.
    pub queue: String,
    /// The cause ([`DlqMessage::cause`]).
    pub cause: String,
    /// Whether no redrive can fix it.
    pub permanent: bool,
    /// Number of messages.
    pub count: usize,
    /// When the oldest was sent (RFC 3339 UTC).
    pub oldest: Option<String>,
    /// When the newest was sent (RFC 3339 UTC).
    pub newest: Option<String>,
    /// One of them: its message id.
    pub example_id: String,
    /// One of them: its reason.
    pub example_reason: String,
}

/// `messages` grouped by (queue, cause), largest group first.
pub fn group_by_cause(messages: &[DlqMessage]) -> Vec<CauseGroup> {
    let mut groups: BTreeMap<(String, String), CauseGroup> = BTreeMap::new();
    for m in messages {
        let g = groups.entry((m.queue.clone(), m.cause.clone())).or_insert_with(|| CauseGroup {
            queue: m.queue.clone(),
            cause: m.cause.clone(),
            permanent: m.permanent,
            count: 0,
            oldest: m.sent_at.clone(),
            newest: m.sent_at.clone(),
            example_id: m.message_id.clone(),
            example_reason: m.reason.clone(),
        });
        g.count += 1;
        if m.sent_at < g.oldest {
            g.oldest = m.sent_at.clone();
        }
        if m.sent_at > g.newest {
            g.newest = m.sent_at.clone();
        }
    }
    let mut list: Vec<CauseGroup> = groups.into_values().collect();
    list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.queue.cmp(&b.queue)).then_with(|| a.cause.cmp(&b.cause)));
    list
}

/// The groups for people: one block per cause.
pub fn format_groups(groups: &[CauseGroup]) -> String {
    let mut out = String::new();
    for g in groups {
        out.push_str(&format!(
            "  {queue}  {cause}{permanent}: {count} message(s), oldest {oldest}, newest {newest}\n      e.g. {id}: {reason}\n",
            queue = g.queue,
            cause = g.cause,
            permanent = if g.permanent { " (permanent: redrive only with --force)" } else { "" },
            count = g.count,
            oldest = g.oldest.as_deref().unwrap_or("?"),
            newest = g.newest.as_deref().unwrap_or("?"),
            id = g.example_id,
            reason = g.example_reason,
        ));
    }
    out
}

/// Which messages a `dlq` verb acts on: all of the given conditions hold (none given: all).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only these SQS message ids (or event ids).
    pub ids: Vec<String>,
    /// Only this cause ([`DlqMessage::cause`], exact).
    pub cause: Option<String>,
    /// Only messages older than this.
    pub older_than: Option<Duration>,
}

impl Selection {
    /// Whether `m` is selected.
    pub fn matches(&self, m: &DlqMessage) -> bool {
        let id = self.ids.is_empty() || self.ids.iter().any(|i| *i == m.message_id || m.event_id.as_deref() == Some(i.as_str()));
        let cause = self.cause.as_ref().is_none_or(|c| *c == m.cause);
        let age = self.older_than.is_none_or(|d| m.age_secs.is_some_and(|a| a >= d.as_secs() as i64));
        id && cause && age
    }

    /// Whether anything narrows the selection.
    pub fn is_filtered(&self) -> bool {
        !self.ids.is_empty() || self.cause.is_some() || self.older_than.is_some()
    }
}

/// Parses an age (`--older-than`, `--gap-after`): a number with unit `s`, `m`, `h` or `d`
/// (e.g. `90m`, `7d`).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the expected form.
pub fn parse_age(text: &str) -> Result<Duration> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| Error::invalid("age", text, "expected a number and a unit, e.g. 30m, 12h, 7d"))?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(Error::invalid("age", text, "unit must be s, m, h or d")),
    };
    Ok(Duration::from_secs(secs))
}

/// What `purge`/`archive` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PurgeReport {
    /// Message ids deleted (after being written to the archive, when there is one).
    pub deleted: Vec<String>,
    /// Messages selected but not deleted, with why.
    pub left: Vec<(String, String)>,
}

/// Deletes the messages of `queue` that `selection` picks; with `archive`, first appends each
/// as one JSON line (the [`DlqMessage`], body included) to that file and deletes only what was
/// written and flushed. Messages not selected are made visible again at once.
///
/// # Errors
/// [`Error::Aws`] (SQS) or [`Error::Io`] (the archive file); messages not yet handled stay in
/// the queue.
pub async fn purge(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueInfo,
    selection: &Selection,
    mut archive: Option<&mut std::fs::File>,
) -> Result<PurgeReport> {
    use std::io::Write;
    let mut report = PurgeReport::default();
    let received = receive_all(sqs, queue, 120).await?;
    let listed = describe(queue, &received);
    for (m, message) in received.iter().zip(listed) {
        if !selection.matches(&message) {
            unhide(sqs, queue, m).await;
            continue;
        }
        if let Some(file) = archive.as_deref_mut() {
            let line = serde_json::to_string(&message)?;
            writeln!(file, "{line}").and_then(|_| file.flush()).map_err(Error::io("the archive"))?;
        }
        match sqs.delete_message().queue_url(&queue.url).receipt_handle(m.receipt_handle().unwrap_or_default()).send().await {
            Ok(_) => report.deleted.push(message.message_id),
            Err(e) => report.left.push((message.message_id, aws_sdk_sqs::error::DisplayErrorContext(e).to_string())),
        }
    }
    Ok(report)
}
