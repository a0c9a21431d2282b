//! Reading dead-letter queues without consuming them: messages are received with a short
//! visibility timeout and made visible again at once, so listing changes nothing but their
//! receive count. Works against the emulator and, with ordinary AWS configuration, against AWS.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use outbox::dead_letter::DeadLetter;
use serde::Serialize;

pub use crate::message::DlqMessage;
use crate::stack::QueueInfo;

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
    let get = |name: QueueAttributeName| out.attributes().and_then(|a| a.get(&name)).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Ok(get(QueueAttributeName::ApproximateNumberOfMessages) + get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

/// Receives every message of `queue` once, each hidden for `visibility_secs` (long-polling the
/// first receive so that every SQS server is asked).
async fn receive_all(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, visibility_secs: i32) -> Result<Vec<aws_sdk_sqs::types::Message>, String> {
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
            .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
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
async fn unhide(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo, message: &aws_sdk_sqs::types::Message) {
    if let Some(handle) = message.receipt_handle() {
        let _ = sqs.change_message_visibility().queue_url(&queue.url).receipt_handle(handle).visibility_timeout(0).send().await;
    }
}

/// Every message of `queue`, oldest first, left in the queue.
///
/// # Errors
/// The SDK error as text.
pub async fn peek(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> Result<Vec<DlqMessage>, String> {
    let received = receive_all(sqs, queue, 30).await?;
    for m in &received {
        unhide(sqs, queue, m).await;
    }
    let mut list = describe(queue, &received);
    list.sort_by(|a, b| a.sent_at.cmp(&b.sent_at));
    Ok(list)
}

/// The received messages of `queue` as [`DlqMessage`]s, in the same order.
fn describe(queue: &QueueInfo, received: &[aws_sdk_sqs::types::Message]) -> Vec<DlqMessage> {
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
            if let (DeadLetter::EventBridgeEvent { .. }, Some(code)) = (&parsed, attributes.get("ERROR_CODE")) {
                reason = format!("{code}: {}", attributes.get("ERROR_MESSAGE").map(String::as_str).unwrap_or(""));
                cause = code.clone();
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

/// Parses `--older-than` values: a number with unit `s`, `m`, `h` or `d` (e.g. `90m`, `7d`).
///
/// # Errors
/// A message naming the expected form.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| format!("{text:?}: expected a number and a unit, e.g. 30m, 12h, 7d"))?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{text:?}: unit must be s, m, h or d")),
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
/// An SQS error or the archive file's I/O error, as text; messages not yet handled stay in the queue.
pub async fn purge(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueInfo,
    selection: &Selection,
    mut archive: Option<&mut std::fs::File>,
) -> Result<PurgeReport, String> {
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
            let line = serde_json::to_string(&message).map_err(|e| e.to_string())?;
            writeln!(file, "{line}").and_then(|_| file.flush()).map_err(|e| format!("archive: {e}"))?;
        }
        match sqs.delete_message().queue_url(&queue.url).receipt_handle(m.receipt_handle().unwrap_or_default()).send().await {
            Ok(_) => report.deleted.push(message.message_id),
            Err(e) => report.left.push((message.message_id, aws_sdk_sqs::error::DisplayErrorContext(e).to_string())),
        }
    }
    Ok(report)
}

/// How to redrive.
#[derive(Debug, Clone, Copy)]
pub struct RedriveOptions<'a> {
    /// The bus to re-publish to.
    pub bus: &'a str,
    /// Replays failed stream batches (S3 on-failure records, pointer-only records) through the
    /// relay; `None` leaves them in the queue/bucket.
    pub replayer: Option<&'a crate::failed_batch::Replayer>,
    /// Say what would be redriven; send and delete nothing.
    pub dry_run: bool,
    /// Which messages.
    pub selection: &'a Selection,
    /// Redrive permanent causes too.
    pub force: bool,
}

/// What a redrive did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RedriveReport {
    /// Messages whose event the bus accepted again (deleted from the queue, unless a dry run).
    pub redriven: Vec<String>,
    /// Per cause: (redriven, left).
    pub by_cause: BTreeMap<String, (usize, usize)>,
    /// Messages left in the queue, with why.
    pub left: Vec<(String, String)>,
    /// Nothing was sent or deleted.
    pub dry_run: bool,
    /// Event ids re-published for a consumer (consumer failures, invocation records, rule
    /// dead letters), in the order sent: what [`watch`] follows.
    pub event_ids: Vec<String>,
}

/// `(aggregate, sequence)` of the event a dead-letter message holds (consumer failure record,
/// invocation record or raw event), to redrive one aggregate's events in sequence order.
fn order_key(body: &str) -> Option<(String, u64)> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let metadata = ["/event/detail/metadata", "/requestPayload/detail/metadata", "/detail/metadata"].iter().find_map(|p| v.pointer(p))?;
    let text = |k: &str| metadata.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
    Some((format!("{}#{}", text("aggregate_type"), text("subject")), metadata.get("sequence")?.as_u64()?))
}

/// Whether `body` is not a failed stream batch (whose records are replayed through the relay).
fn batch_is_none(body: &str) -> bool {
    crate::failed_batch::parse(body).is_err()
}

/// What became of redriven events, watched for a bounded time ([`watch`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatchReport {
    /// Applied: a consumer's inbox holds the event's claim row.
    pub applied: Vec<String>,
    /// Back in a dead-letter queue (a new message about it).
    pub dead_lettered_again: Vec<String>,
    /// Neither, when the time ran out (still retried, or parked behind its predecessor).
    pub pending: Vec<String>,
}

/// Follows `event_ids` for at most `timeout`: an event is applied once the claim row
/// `<consumer>#<event id>` is in one of the `inboxes` (inbox table, consumer name), dead-lettered
/// again once a message about it that was not there before (`before`: the message ids at the
/// start) is in one of `queues`.
///
/// # Errors
/// A DynamoDB or SQS error as text.
pub async fn watch(
    dynamodb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    inboxes: &[(String, String)],
    queues: &[QueueInfo],
    before: &std::collections::HashSet<String>,
    event_ids: &[String],
    timeout: Duration,
) -> Result<WatchReport, String> {
    let started = std::time::Instant::now();
    let mut report = WatchReport { pending: event_ids.to_vec(), ..Default::default() };
    loop {
        let mut back = std::collections::HashSet::new();
        for q in queues {
            for m in peek(sqs, q).await? {
                if !before.contains(&m.message_id) {
                    back.extend(m.event_id);
                }
            }
        }
        let mut still = Vec::new();
        for id in std::mem::take(&mut report.pending) {
            if back.contains(&id) {
                report.dead_lettered_again.push(id);
                continue;
            }
            let mut applied = false;
            for (table, consumer) in inboxes {
                let row = dynamodb
                    .get_item()
                    .table_name(table)
                    .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(format!("{consumer}#{id}")))
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(|e| format!("GetItem on {table}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
                applied |= row.item.is_some();
            }
            if applied {
                report.applied.push(id);
            } else {
                still.push(id);
            }
        }
        report.pending = still;
        if report.pending.is_empty() || started.elapsed() >= timeout {
            return Ok(report);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The `PutEvents` entry that re-publishes the event a dead-letter message holds, or why there
/// is none. Events are re-put to `bus` with their `source`, `detail-type` and `detail` verbatim
/// (EventBridge gives them a new envelope id; consumers dedupe on `detail.metadata.id`, so a
/// redrive of an event that did take effect is absorbed by the inbox).
///
/// # Errors
/// Why the message cannot be redriven (unknown shape, a stream batch record, a malformed
/// event or outbox item).
pub fn redrive_entry(body: &str, bus: &str) -> Result<aws_sdk_eventbridge::types::PutEventsRequestEntry, String> {
    use serde::Deserialize;
    use serde_json::value::RawValue;

    #[derive(Deserialize)]
    struct Shape<'a> {
        kind: Option<String>,
        #[serde(borrow, rename = "requestPayload")]
        request_payload: Option<&'a RawValue>,
        #[serde(borrow)]
        event: Option<&'a RawValue>,
        record: Option<serde_json::Value>,
        #[serde(rename = "DDBStreamBatchInfo")]
        stream_batch: Option<serde_json::Value>,
        #[serde(rename = "detail-type")]
        detail_type: Option<String>,
    }
    #[derive(Deserialize)]
    struct Event<'a> {
        source: String,
        #[serde(rename = "detail-type")]
        detail_type: String,
        #[serde(borrow)]
        detail: &'a RawValue,
    }
    let shape: Shape<'_> = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let event_text = match (&shape.kind, shape.request_payload, shape.event, &shape.stream_batch, &shape.detail_type) {
        (Some(kind), _, _, _, _) if kind == outbox::dead_letter::RELAY_FAILURE_KIND => {
            let image =
                shape.record.as_ref().and_then(|r| r.pointer("/dynamodb/NewImage")).cloned().ok_or("the relay failure record has no NewImage")?;
            let item: serde_dynamo::Item = serde_json::from_value(image).map_err(|e| format!("NewImage: {e}"))?;
            let item = outbox::envelope::OutboxItem::from_item(item).map_err(|e| e.to_string())?;
            let event = item.to_bus_event().map_err(|e| e.to_string())?;
            return Ok(event.to_entry(bus));
        }
        (Some(kind), _, Some(event), _, _) if kind == outbox::dead_letter::CONSUMER_FAILURE_KIND => event.get().to_owned(),
        (_, _, _, Some(_), _) => {
            return Err("a stream batch record names a sequence-number range, not the records: replay it through the relay (failed_batch)".into())
        }
        (_, Some(payload), _, _, _) => payload.get().to_owned(),
        (_, _, _, _, Some(_)) => body.to_owned(),
        _ => return Err(format!("unknown shape: {}", outbox::dead_letter::DeadLetter::parse(body).reason())),
    };
    let event: Event<'_> = serde_json::from_str(&event_text).map_err(|e| format!("the event cannot be re-put: {e}"))?;
    if !event.detail.get().trim_start().starts_with('{') {
        return Err("the event's detail is not a JSON object; EventBridge would reject it".into());
    }
    Ok(aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source(event.source)
        .detail_type(event.detail_type)
        .detail(event.detail.get())
        .build())
}

/// Re-publishes every redrivable message of `queue` to `bus` and deletes it once the bus
/// accepted it; everything else stays in the queue. A stream mapping's pointer-only record
/// (`DDBStreamBatchInfo`) is replayed through the relay by `replayer` (its records read back
/// from the outbox table, [`crate::failed_batch`]) and deleted when nothing of it still fails;
/// without a replayer it stays. `progress(done, total)` is called after each message. Running it
/// twice is safe: the second run finds only what was left, and a re-published event that had
/// taken effect is absorbed by the consumer's inbox.
///
/// # Errors
/// An SQS error as text (messages not yet handled stay in the queue).
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    events: &aws_sdk_eventbridge::Client,
    queue: &QueueInfo,
    options: &RedriveOptions<'_>,
    progress: impl Fn(usize, usize),
) -> Result<RedriveReport, String> {
    let RedriveOptions { bus, replayer, dry_run, selection, force } = *options;
    let mut report = RedriveReport { dry_run, ..Default::default() };
    let received = receive_all(sqs, queue, 120).await?;
    let described = describe(queue, &received);
    let mut chosen = Vec::new();
    for (m, d) in received.iter().zip(described) {
        if selection.matches(&d) {
            chosen.push((m, d));
        } else {
            unhide(sqs, queue, m).await;
        }
    }
    // One aggregate's events in sequence order (the others keep their queue order), so the
    // redrive does not re-create the race that may have dead-lettered them.
    chosen.sort_by_cached_key(|(m, _)| order_key(m.body().unwrap_or_default()));
    let total = chosen.len();
    for (i, (m, d)) in chosen.into_iter().enumerate() {
        let id = m.message_id().unwrap_or_default().to_owned();
        let handle = m.receipt_handle().unwrap_or_default().to_owned();
        let body = m.body().unwrap_or_default();
        let batch = crate::failed_batch::parse(body).ok();
        let outcome = match (redrive_entry(body, bus), batch, replayer) {
            _ if d.permanent && !force => {
                Err(format!("{}: a permanent cause, redriving would only dead-letter it again; fix the cause, then --force", d.cause))
            }
            (_, Some(_), _) if dry_run => Ok(false),
            (_, Some(batch), Some(replayer)) => match replayer.replay(&batch).await {
                Ok(r) if r.failed == 0 => Ok(true),
                Ok(r) => Err(format!("{} of {} record(s) still fail (is the bus reachable?)", r.failed, r.records)),
                Err(why) => Err(why),
            },
            (entry, _, _) => match entry {
                Err(why) => Err(why),
                Ok(_) if dry_run => Ok(false),
                Ok(entry) => match events.put_events().entries(entry).send().await {
                    Ok(out) if out.failed_entry_count() == 0 => Ok(true),
                    Ok(out) => {
                        Err(format!("the bus rejected it: {}", out.entries().first().and_then(|e| e.error_message()).unwrap_or("unknown error")))
                    }
                    Err(e) => Err(format!("PutEvents failed: {}", aws_sdk_eventbridge::error::DisplayErrorContext(e))),
                },
            },
        };
        let tally = report.by_cause.entry(d.cause.clone()).or_default();
        match &outcome {
            Ok(_) => tally.0 += 1,
            Err(_) => tally.1 += 1,
        }
        match outcome {
            Ok(true) => {
                sqs.delete_message()
                    .queue_url(&queue.url)
                    .receipt_handle(&handle)
                    .send()
                    .await
                    .map_err(|e| aws_sdk_sqs::error::DisplayErrorContext(e).to_string())?;
                report.redriven.push(id);
                if let (Some(event_id), true) = (&d.event_id, d.shape != "relay-failure" && batch_is_none(body)) {
                    report.event_ids.push(event_id.clone());
                }
            }
            Ok(false) => {
                report.redriven.push(id);
                unhide(sqs, queue, m).await;
            }
            Err(why) => {
                report.left.push((id, why));
                unhide(sqs, queue, m).await;
            }
        }
        progress(i + 1, total);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redrive_entries_keep_the_detail_verbatim() {
        let event = r#"{"version":"0","id":"env","detail-type":"OrderCreated","source":"example.orders","detail":{"metadata":{"id":"e"},"data":{"n":123456789012345678901234567890}}}"#;
        let record = format!(r#"{{"requestContext":{{"condition":"RetriesExhausted"}},"requestPayload":{event}}}"#);
        let entry = redrive_entry(&record, "bus").unwrap();
        assert_eq!(entry.detail(), Some(r#"{"metadata":{"id":"e"},"data":{"n":123456789012345678901234567890}}"#));
        assert_eq!((entry.source(), entry.detail_type(), entry.event_bus_name()), (Some("example.orders"), Some("OrderCreated"), Some("bus")));
        assert!(redrive_entry(event, "bus").is_ok(), "a raw EventBridge event (rule target DLQ)");
        let consumer =
            format!(r#"{{"kind":"outbox-consumer-failure","consumer":"c","error_type":"SequenceGap","reason":"r","failed_at":"t","event":{event}}}"#);
        assert!(redrive_entry(&consumer, "bus").is_ok());
    }

    #[test]
    fn a_redrive_orders_one_aggregates_events_by_sequence_whatever_the_shape() {
        let event = |seq: u64| {
            format!(
                r#"{{"detail-type":"T","source":"s","detail":{{"metadata":{{"id":"e{seq}","aggregate_type":"Order","subject":"o-1","sequence":{seq}}},"data":{{}}}}}}"#
            )
        };
        let bodies = [
            format!(r#"{{"kind":"outbox-consumer-failure","consumer":"c","error_type":"X","reason":"r","failed_at":"t","event":{}}}"#, event(3)),
            format!(r#"{{"requestContext":{{"condition":"RetriesExhausted"}},"requestPayload":{}}}"#, event(1)),
            event(2),
        ];
        let mut keys: Vec<(String, u64)> = bodies.iter().map(|b| order_key(b).expect("a key")).collect();
        keys.sort();
        assert_eq!(keys, [("Order#o-1".to_owned(), 1), ("Order#o-1".to_owned(), 2), ("Order#o-1".to_owned(), 3)]);
        assert_eq!(order_key("not json"), None);
    }

    #[test]
    fn what_cannot_be_redriven_says_why() {
        assert!(redrive_entry("nope", "b").unwrap_err().contains("not JSON"));
        assert!(redrive_entry(r#"{"a":1}"#, "b").unwrap_err().contains("unknown shape"));
        let batch = r#"{"requestContext":{"condition":"RetryAttemptsExhausted"},"DDBStreamBatchInfo":{"shardId":"s"}}"#;
        assert!(redrive_entry(batch, "b").unwrap_err().contains("replay it through the relay"));
        let string_detail = r#"{"detail-type":"OrderCreated","source":"s","detail":"{\"a\":1}"}"#;
        assert!(redrive_entry(string_detail, "b").unwrap_err().contains("not a JSON object"));
    }
}
