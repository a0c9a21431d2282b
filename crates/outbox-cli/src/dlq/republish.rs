//! Redriving dead letters: each message's event re-published to the bus (in sequence order per
//! aggregate), permanent causes refused without `force`, failed stream batches replayed through
//! the relay; and watching the redriven events until they are applied or come back.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::{describe, peek, receive_all, unhide, Selection};
use crate::{Error, Result};
use outbox_template::stack::QueueInfo;

/// Why a dead-letter message's event cannot be re-published to the bus (the message stays in
/// its queue, with this reason in the report).
#[derive(Debug, thiserror::Error)]
pub enum NotRedrivable {
    /// The body is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A relay failure record without the outbox item's image.
    #[error("the relay failure record has no NewImage")]
    NoNewImage,
    /// A relay failure record whose image is not an outbox item.
    #[error("NewImage: {0}")]
    BadImage(#[source] serde_json::Error),
    /// The outbox item cannot be made into a bus event.
    #[error("{0}")]
    BadOutboxItem(#[from] outbox::envelope::EnvelopeError),
    /// A stream mapping's on-failure record: a range of sequence numbers, not the records.
    #[error("a stream batch record names a sequence-number range, not the records: replay it through the relay (failed_batch)")]
    StreamBatch,
    /// No shape the redrive knows (consumer failure, invocation record, EventBridge event).
    #[error("unknown shape: {0}")]
    UnknownShape(String),
    /// The held event lacks `source`, `detail-type` or `detail`.
    #[error("the event cannot be re-put: {0}")]
    BadEvent(#[source] serde_json::Error),
    /// The held event's `detail` is not an object.
    #[error("the event's detail is not a JSON object; EventBridge would reject it")]
    DetailNotObject,
}

/// How to redrive.
#[derive(Debug, Clone, Copy)]
pub struct RedriveOptions<'a> {
    /// The bus to re-publish to (classic or Custom).
    pub bus: &'a crate::republisher::Republisher,
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
/// [`Error::Aws`]: a DynamoDB or SQS call failed.
pub async fn watch(
    dynamodb: &aws_sdk_dynamodb::Client,
    sqs: &aws_sdk_sqs::Client,
    inboxes: &[(String, String)],
    queues: &[QueueInfo],
    before: &std::collections::HashSet<String>,
    event_ids: &[String],
    timeout: Duration,
) -> Result<WatchReport> {
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
                    .map_err(Error::aws(format!("GetItem on {table}")))?;
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
/// [`NotRedrivable`]: why the message cannot be redriven (unknown shape, a stream batch record,
/// a malformed event or outbox item).
pub fn redrive_entry(body: &str, bus: &str) -> Result<aws_sdk_eventbridge::types::PutEventsRequestEntry, NotRedrivable> {
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
    let shape: Shape<'_> = serde_json::from_str(body).map_err(NotRedrivable::NotJson)?;
    let event_text = match (&shape.kind, shape.request_payload, shape.event, &shape.stream_batch, &shape.detail_type) {
        (Some(kind), _, _, _, _) if kind == outbox::dead_letter::RELAY_FAILURE_KIND => {
            let image = shape.record.as_ref().and_then(|r| r.pointer("/dynamodb/NewImage")).cloned().ok_or(NotRedrivable::NoNewImage)?;
            let item: serde_dynamo::Item = serde_json::from_value(image).map_err(NotRedrivable::BadImage)?;
            let event = outbox::envelope::OutboxItem::from_item(item)?.to_bus_event()?;
            return Ok(event.to_entry(bus));
        }
        (Some(kind), _, Some(event), _, _) if kind == outbox::dead_letter::CONSUMER_FAILURE_KIND => event.get().to_owned(),
        (_, _, _, Some(_), _) => return Err(NotRedrivable::StreamBatch),
        (_, Some(payload), _, _, _) => payload.get().to_owned(),
        (_, _, _, _, Some(_)) => body.to_owned(),
        _ => return Err(NotRedrivable::UnknownShape(outbox::dead_letter::DeadLetter::parse(body).reason())),
    };
    let event: Event<'_> = serde_json::from_str(&event_text).map_err(NotRedrivable::BadEvent)?;
    if !event.detail.get().trim_start().starts_with('{') {
        return Err(NotRedrivable::DetailNotObject);
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
/// [`Error::Aws`]: an SQS call failed (messages not yet handled stay in the queue).
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueInfo,
    options: &RedriveOptions<'_>,
    progress: impl Fn(usize, usize),
) -> Result<RedriveReport> {
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
        // Ok(true): sent (delete it); Ok(false): a dry run (leave it); Err: left, with why.
        let outcome = match (redrive_entry(body, bus.bus()), batch, replayer) {
            _ if d.permanent && !force => Err(Error::Permanent { cause: d.cause.clone() }),
            (_, Some(_), _) if dry_run => Ok(false),
            (_, Some(batch), Some(replayer)) => match replayer.replay(&batch).await {
                Ok(r) if r.failed == 0 => Ok(true),
                Ok(r) => Err(Error::StillFailing { failed: r.failed, records: r.records }),
                Err(why) => Err(why),
            },
            (entry, _, _) => match entry {
                Err(why) => Err(why.into()),
                Ok(_) if dry_run => Ok(false),
                Ok(entry) => match bus.put(entry).await {
                    Ok(Ok(())) => Ok(true),
                    Ok(Err(reason)) => Err(Error::Refused { what: "it".into(), reason, left: "it stays in the queue".into() }),
                    Err(e) => Err(e),
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
                    .map_err(Error::aws(format!("DeleteMessage from {}", queue.name)))?;
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
                report.left.push((id, why.to_string()));
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
        let why = |body: &str| redrive_entry(body, "b").expect_err(body);
        assert!(matches!(why("nope"), NotRedrivable::NotJson(_)) && why("nope").to_string().starts_with("not JSON"));
        assert!(why(r#"{"a":1}"#).to_string().contains("unknown shape"));
        let batch = r#"{"requestContext":{"condition":"RetryAttemptsExhausted"},"DDBStreamBatchInfo":{"shardId":"s"}}"#;
        assert!(why(batch).to_string().contains("replay it through the relay"));
        let string_detail = r#"{"detail-type":"OrderCreated","source":"s","detail":"{\"a\":1}"}"#;
        assert!(matches!(why(string_detail), NotRedrivable::DetailNotObject));
        let relay_failure = r#"{"kind":"outbox-relay-failure","record":{"dynamodb":{}}}"#;
        assert!(matches!(why(relay_failure), NotRedrivable::NoNewImage), "{}", why(relay_failure));
    }
}
