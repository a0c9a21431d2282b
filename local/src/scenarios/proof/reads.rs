//! What the proof reads back: the archive of what reached the bus (its queue: `bus::archive`),
//! the outbox stream's events, whole tables; and the careful client's retried requests.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::runtime::Runtime;
use crate::scenarios::books::{Answer, Request};

pub(super) fn sdk_error(action: &str, e: impl std::error::Error + Send + Sync + 'static) -> crate::Error {
    crate::Error::aws(action)(e)
}

/// Reads (and deletes) the archive queue's messages as they come, until `stop` is true and the
/// queue answered empty twice; returns the events' `detail.metadata.id`. The queue is read while
/// the proof runs, not once at the end: the emulator's SQS passes over every message of a queue
/// on each receive and delete, so a queue left to fill up makes reading it back quadratic.
pub(super) async fn drain_archive(sqs: aws_sdk_sqs::Client, url: String, stop: tokio::sync::watch::Receiver<bool>) -> crate::Result<HashSet<String>> {
    let mut into = HashSet::new();
    let mut empty = 0;
    while !(*stop.borrow() && empty >= 2) {
        let out = sqs.receive_message().queue_url(&url).max_number_of_messages(10).wait_time_seconds(1).send().await;
        let messages = out.map_err(|e| sdk_error("ReceiveMessage", e))?.messages.unwrap_or_default();
        if messages.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        let mut batch = sqs.delete_message_batch().queue_url(&url);
        for (i, m) in messages.iter().enumerate() {
            if let Some(id) = m
                .body()
                .and_then(|b| serde_json::from_str::<Value>(b).ok())
                .and_then(|v| v.pointer("/detail/metadata/id")?.as_str().map(str::to_owned))
            {
                into.insert(id);
            }
            if let Some(handle) = m.receipt_handle() {
                let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder().id(i.to_string()).receipt_handle(handle).build();
                batch = batch.entries(entry.map_err(crate::Error::other("a DeleteMessageBatch entry"))?);
            }
        }
        batch.send().await.map_err(|e| sdk_error("DeleteMessageBatch", e))?;
    }
    Ok(into)
}

/// An event the outbox stream carried (an `INSERT` image of the outbox table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Carried {
    /// `event_id`.
    pub(super) id: String,
    /// `event_type`.
    pub(super) event_type: String,
    /// The outbox item's `pk`: its aggregate, `<aggregate_type>#<aggregate_id>`.
    pub(super) aggregate: String,
    /// Its `sequence` within the aggregate (`None`: not a number in the image).
    pub(super) sequence: Option<u64>,
}

/// Every event the stream `arn` carried (`INSERT` records, every shard, from its trim horizon).
pub(super) async fn stream_events(runtime: &Runtime, arn: &str) -> crate::Result<Vec<Carried>> {
    use aws_sdk_dynamodbstreams::types::{AttributeValue as V, ShardIteratorType};
    let streams = aws_sdk_dynamodbstreams::Client::new(&runtime.sdk);
    let description = streams.describe_stream().stream_arn(arn).send().await.map_err(|e| sdk_error("DescribeStream", e))?;
    let shards: Vec<String> =
        description.stream_description().map(|d| d.shards().iter().filter_map(|s| s.shard_id().map(str::to_owned)).collect()).unwrap_or_default();
    let mut events = Vec::new();
    for shard in shards {
        // A fresh iterator after the last sequence number read for every page, as the stream
        // mapping does (moto's NextShardIterator may repeat the last record).
        let mut last: Option<String> = None;
        loop {
            let request = streams.get_shard_iterator().stream_arn(arn).shard_id(&shard);
            let request = match &last {
                Some(seq) => request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq),
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let Some(iterator) = request.send().await.map_err(|e| sdk_error("GetShardIterator", e))?.shard_iterator else { break };
            let page = streams.get_records().shard_iterator(iterator).limit(1000).send().await.map_err(|e| sdk_error("GetRecords", e))?;
            let mut progressed = false;
            for r in page.records() {
                let Some(seq) = r.dynamodb().and_then(|d| d.sequence_number()) else { continue };
                let newer = last.as_deref().is_none_or(|l| seq.len() > l.len() || (seq.len() == l.len() && seq > l));
                if !newer {
                    continue;
                }
                last = Some(seq.to_owned());
                progressed = true;
                if r.event_name().map(|n| n.as_str()) != Some("INSERT") {
                    continue;
                }
                let image = r.dynamodb().and_then(|d| d.new_image());
                let s = |k: &str| image.and_then(|i| i.get(k)).and_then(|v| if let V::S(s) = v { Some(s.clone()) } else { None });
                if let Some(id) = s("event_id") {
                    let sequence = image.and_then(|i| i.get("sequence")).and_then(|v| if let V::N(n) = v { n.parse().ok() } else { None });
                    events.push(Carried { id, event_type: s("event_type").unwrap_or_default(), aggregate: s("pk").unwrap_or_default(), sequence });
                }
            }
            if !progressed {
                break;
            }
        }
    }
    Ok(events)
}

/// Sends `request` (rebuilt per attempt) until a final answer: 2xx or 4xx other than 408/429;
/// `None` when every attempt failed.
pub(super) async fn send_retrying(attempt: impl Fn() -> reqwest::RequestBuilder) -> Option<(u16, String)> {
    for n in 1..=8u64 {
        match attempt().send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                if !(status >= 500 || status == 408 || status == 429) {
                    return Some((status, body));
                }
            }
            Err(e) => tracing::debug!(error = %e, "proof: request failed"),
        }
        tokio::time::sleep(Duration::from_millis(100 * n * n)).await;
    }
    None
}

/// Sends `request` until a final answer, as a careful client does: an HTTP `POST` through the API
/// at `api` (with `idempotency_key` when given; see [`send_retrying`]), or a direct invocation
/// retried while the function answers with an error. `None` when every attempt failed.
pub(super) async fn send(
    runtime: &Runtime,
    client: &reqwest::Client,
    api: std::net::SocketAddr,
    request: &Request,
    idempotency_key: Option<&str>,
) -> Option<Answer> {
    match request {
        Request::Post { path, body } => {
            let url = format!("http://{api}{path}");
            let attempt = || {
                let post = client.post(&url).header("content-type", "application/json").body(body.clone());
                match idempotency_key {
                    Some(key) => post.header("idempotency-key", key),
                    None => post,
                }
            };
            let (status, text) = send_retrying(attempt).await?;
            let ok = (200..300).contains(&status);
            let body = serde_json::from_str(&text).unwrap_or_else(|_| if ok { Value::Null } else { json!({"status": status, "body": text}) });
            Some(Answer { status: Some(status), ok, body })
        }
        Request::Invoke { function, payload } => {
            let function = match runtime.function(function) {
                Ok(f) => f,
                Err(e) => return Some(Answer { status: None, ok: false, body: json!({"error": e.to_string()}) }),
            };
            for n in 1..=8u64 {
                match function.invoke(payload).await.result {
                    Ok(answer) => return Some(Answer { status: None, ok: true, body: answer }),
                    Err(e) => tracing::debug!(error = ?e, "proof: the invocation failed"),
                }
                tokio::time::sleep(Duration::from_millis(100 * n * n)).await;
            }
            None
        }
    }
}
