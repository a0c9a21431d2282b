//! Stream batches a stream event source mapping gave up on, replayed through the relay.
//!
//! Lambda records a batch it skips (retries exhausted, or records older than
//! `MaximumRecordAgeInSeconds`) at the mapping's on-failure destination:
//!
//! * **S3** — the pointer (`DDBStreamBatchInfo`) and the whole invocation payload (`payload`:
//!   the event `{"Records": [...]}`, as a JSON string or object) in one object under
//!   `aws/lambda/`. Replayed as recorded: the relay gets the recorded batch.
//! * **SQS / SNS**, or any record without `payload` — only the pointer: shard, first and last
//!   sequence number, arrival times of the first and last record. Its records are read back from
//!   the **outbox table**, whose items outlive the stream (they expire with the outbox
//!   retention, 7 days in the template):
//!   1. while the stream still holds the range (24 h), its records give the exact item keys,
//!      and each item is read from the table (an item already expired is reported, not
//!      replayed);
//!   2. once the stream has trimmed it, the keys are gone: every outbox item whose
//!      `occurred_at` lies between the first and last arrival (± [`ARRIVAL_MARGIN`]) is
//!      replayed. That is a superset of the batch (other shards' items of that time too): the
//!      extra events are duplicates, which consumers absorb in their inbox.
//!
//! Either way the relay runs with its own configuration (the function's environment in the
//! template), so poison records are dead-lettered as in production and a replay that still
//! fails leaves the record where it is.
//!
//! Source: <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::{Error, Result};

/// Why a message or object is not an on-failure record of a stream mapping.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The body is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// No `DDBStreamBatchInfo`.
    #[error("no DDBStreamBatchInfo: not a stream batch record")]
    NotABatch,
    /// A field of `DDBStreamBatchInfo` is missing.
    #[error("DDBStreamBatchInfo.{0} is missing")]
    Missing(&'static str),
    /// The recorded `payload` is not a stream event.
    #[error("payload: {0}")]
    Payload(#[source] serde_json::Error),
}

/// Slack around the pointer's arrival times when items are found by `occurred_at` (the
/// producer stamps `occurred_at` just before its transaction; the stream stamps the commit).
pub const ARRIVAL_MARGIN: Duration = Duration::from_secs(300);

/// Time the relay gets for one replayed batch (the template's relay timeout).
pub const REPLAY_BUDGET: Duration = Duration::from_secs(60);

/// `DDBStreamBatchInfo`: which records a skipped batch held.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchInfo {
    /// Shard id.
    pub shard_id: String,
    /// Sequence number of the first record.
    pub start_sequence_number: String,
    /// Sequence number of the last record.
    pub end_sequence_number: String,
    /// Arrival of the first record in the stream.
    pub first_arrival: Option<DateTime<Utc>>,
    /// Arrival of the last record.
    pub last_arrival: Option<DateTime<Utc>>,
    /// Number of records.
    pub batch_size: usize,
    /// The stream's ARN (`arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>`).
    pub stream_arn: String,
}

impl BatchInfo {
    /// The table whose stream it is (from [`BatchInfo::stream_arn`]).
    pub fn table_name(&self) -> Option<&str> {
        self.stream_arn.split_once(":table/").and_then(|(_, rest)| rest.split('/').next()).filter(|t| !t.is_empty())
    }
}

/// A record of a skipped batch.
#[derive(Debug, Clone)]
pub struct FailedBatch {
    /// `requestContext.condition`, e.g. `RetryAttemptsExhausted`, `RecordAgeExceeded`.
    pub condition: String,
    /// The pointer.
    pub info: BatchInfo,
    /// The batch's records, when the destination kept them (S3).
    pub payload: Option<DynamoDbEvent>,
}

/// A time in a pointer: RFC 3339 (AWS) or epoch seconds.
fn time_of(v: Option<&Value>) -> Option<DateTime<Utc>> {
    match v? {
        Value::String(s) => DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc)),
        Value::Number(n) => n.as_f64().and_then(|s| DateTime::from_timestamp_millis((s * 1000.0) as i64)),
        _ => None,
    }
}

/// Parses an on-failure record of a DynamoDB stream mapping.
///
/// # Errors
/// [`BatchError`]: why it is not one (not JSON, no `DDBStreamBatchInfo`, an unreadable `payload`).
pub fn parse(body: &str) -> Result<FailedBatch, BatchError> {
    let value: Value = serde_json::from_str(body).map_err(BatchError::NotJson)?;
    let info = value.get("DDBStreamBatchInfo").ok_or(BatchError::NotABatch)?;
    let text = |name: &'static str| info.get(name).and_then(Value::as_str).map(str::to_owned).ok_or(BatchError::Missing(name));
    let info = BatchInfo {
        shard_id: text("shardId")?,
        start_sequence_number: text("startSequenceNumber")?,
        end_sequence_number: text("endSequenceNumber")?,
        first_arrival: time_of(info.get("approximateArrivalOfFirstRecord")),
        last_arrival: time_of(info.get("approximateArrivalOfLastRecord")),
        batch_size: info.get("batchSize").and_then(Value::as_u64).unwrap_or(0) as usize,
        stream_arn: text("streamArn")?,
    };
    let payload = match value.get("payload") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(serde_json::from_str(s).map_err(BatchError::Payload)?),
        Some(v) => Some(serde_json::from_value(v.clone()).map_err(BatchError::Payload)?),
    };
    let condition = value.pointer("/requestContext/condition").and_then(Value::as_str).unwrap_or("").to_owned();
    Ok(FailedBatch { condition, info, payload })
}

/// `a < b` for sequence numbers (decimal strings of up to 40 digits).
fn seq_lt(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim_start_matches('0'), b.trim_start_matches('0'));
    (a.len(), a) < (b.len(), b)
}

/// What replaying one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Where the records came from: `payload`, `stream keys → outbox table`, `outbox table by time`.
    pub source: String,
    /// Records handed to the relay.
    pub records: usize,
    /// Events the relay published.
    pub published: usize,
    /// Records the relay dead-lettered (poison).
    pub dead_lettered: usize,
    /// Records still failing: the batch record must stay.
    pub failed: usize,
    /// Items of the range no longer in the outbox table (expired): cannot be replayed.
    pub missing: usize,
}

/// Replays failed batches through the relay.
#[derive(Debug, Clone)]
pub struct Replayer {
    relay: outbox::relay::Relay,
    dynamodb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
}

impl Replayer {
    /// A replayer with the relay function's environment `env` (its `EVENT_BUS_NAME`,
    /// `RELAY_DLQ_URL`, …).
    ///
    /// # Errors
    /// [`Error::Library`] naming the variable the relay cannot use.
    pub fn new(sdk: &aws_config::SdkConfig, env: HashMap<String, String>) -> Result<Self> {
        let function = outbox_lambda::relay::RelayFunction::from_env(sdk, &outbox_lambda::Env::from_map(env))
            .map_err(Error::library("the relay's configuration"))?;
        Ok(Self { relay: function.relay().clone(), dynamodb: aws_sdk_dynamodb::Client::new(sdk), streams: aws_sdk_dynamodbstreams::Client::new(sdk) })
    }

    /// The batch's records (see the module docs for where they come from), or why not.
    ///
    /// # Errors
    /// [`Error::Aws`], or [`Error::Record`] for a pointer without a table.
    pub async fn records(&self, batch: &FailedBatch) -> Result<(DynamoDbEvent, Replayed)> {
        if let Some(payload) = &batch.payload {
            return Ok((payload.clone(), Replayed { source: "payload".into(), records: payload.records.len(), ..Default::default() }));
        }
        let table = batch
            .info
            .table_name()
            .ok_or_else(|| Error::Record { what: format!("streamArn {}", batch.info.stream_arn), source: "names no table".into() })?
            .to_owned();
        let (items, source, missing) = match self.keys_from_stream(&batch.info).await {
            Ok(keys) => {
                let mut items = Vec::new();
                let mut missing = 0;
                for key in keys {
                    let out = self
                        .dynamodb
                        .get_item()
                        .table_name(&table)
                        .set_key(Some(key))
                        .consistent_read(true)
                        .send()
                        .await
                        .map_err(Error::aws(format!("GetItem on {table}")))?;
                    match out.item {
                        Some(item) => items.push(item),
                        None => missing += 1,
                    }
                }
                (items, "stream keys → outbox table", missing)
            }
            Err(e) => {
                tracing::info!(error = %e, "the stream no longer holds the range; finding the items by occurred_at");
                (self.items_by_time(&table, &batch.info).await?, "outbox table by time", 0)
            }
        };
        let records: Vec<Value> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let image = serde_json::to_value(serde_dynamo::Item::from(item)).unwrap_or(Value::Null);
                let keys = json!({"pk": image.get("pk"), "sk": image.get("sk")});
                json!({
                    "eventID": format!("replay-{i}"),
                    "eventName": "INSERT",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": batch.info.stream_arn.split(':').nth(3).unwrap_or(""),
                    "eventSourceARN": batch.info.stream_arn,
                    "dynamodb": {"Keys": keys, "NewImage": image, "SequenceNumber": (i + 1).to_string(), "SizeBytes": 0, "StreamViewType": "NEW_IMAGE"},
                })
            })
            .collect();
        let event: DynamoDbEvent = serde_json::from_value(json!({ "Records": records })).map_err(Error::record("the rebuilt batch"))?;
        let replayed = Replayed { source: source.into(), records: event.records.len(), missing, ..Default::default() };
        Ok((event, replayed))
    }

    /// The keys of the range's records, read from the stream.
    async fn keys_from_stream(&self, info: &BatchInfo) -> Result<Vec<HashMap<String, AttributeValue>>> {
        let mut iterator = self
            .streams
            .get_shard_iterator()
            .stream_arn(&info.stream_arn)
            .shard_id(&info.shard_id)
            .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
            .sequence_number(&info.start_sequence_number)
            .send()
            .await
            .map_err(Error::aws(format!("GetShardIterator on {} {}", info.stream_arn, info.shard_id)))?
            .shard_iterator;
        let mut keys = Vec::new();
        while let Some(it) = iterator.take() {
            let out = self
                .streams
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .map_err(Error::aws(format!("GetRecords on {} {}", info.stream_arn, info.shard_id)))?;
            if out.records().is_empty() {
                break;
            }
            for record in out.records() {
                let Some(change) = record.dynamodb() else { continue };
                let seq = change.sequence_number().unwrap_or("");
                if seq_lt(&info.end_sequence_number, seq) {
                    return Ok(keys);
                }
                if let Some(k) = change.keys() {
                    let key = serde_dynamo::Item::from(k.clone());
                    let key: HashMap<String, AttributeValue> = key.into();
                    keys.push(key);
                }
            }
            iterator = out.next_shard_iterator;
        }
        Ok(keys)
    }

    /// Outbox items with `occurred_at` between the pointer's arrivals (± [`ARRIVAL_MARGIN`]).
    async fn items_by_time(&self, table: &str, info: &BatchInfo) -> Result<Vec<HashMap<String, AttributeValue>>> {
        let (Some(first), Some(last)) = (info.first_arrival, info.last_arrival) else {
            return Err(Error::NotFound(
                "the stream no longer holds the range and the record has no arrival times: nothing to find the items by".into(),
            ));
        };
        let margin = chrono::Duration::from_std(ARRIVAL_MARGIN).unwrap_or_default();
        let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut items = Vec::new();
        let mut pages = self
            .dynamodb
            .scan()
            .table_name(table)
            .consistent_read(true)
            .filter_expression("attribute_exists(event_id) AND occurred_at BETWEEN :from AND :to")
            .expression_attribute_values(":from", AttributeValue::S(stamp(first - margin)))
            .expression_attribute_values(":to", AttributeValue::S(stamp(last + margin)))
            .into_paginator()
            .items()
            .send();
        while let Some(item) = pages.next().await {
            items.push(item.map_err(Error::aws(format!("Scan on {table}")))?);
        }
        Ok(items)
    }

    /// Replays `batch` through the relay: done when nothing failed.
    ///
    /// # Errors
    /// As [`Replayer::records`], or the relay's error ([`Error::Library`]).
    pub async fn replay(&self, batch: &FailedBatch) -> Result<Replayed> {
        let (event, mut replayed) = self.records(batch).await?;
        let outcome =
            self.relay.relay(&event, Instant::now() + REPLAY_BUDGET).await.map_err(Error::library("replaying the batch through the relay"))?;
        replayed.published = outcome.report.published;
        replayed.dead_lettered = outcome.report.dead_lettered;
        replayed.failed = outcome.report.records - outcome.report.skipped_total() - outcome.report.published - outcome.report.dead_lettered;
        Ok(replayed)
    }
}

/// The failed-batch objects of `bucket` (under `aws/lambda/`) from `ListObjectsV2` alone, no
/// object read: `message_id` the key, `cause` `FailedStreamBatch`, `shape` `stream-batch`, and an
/// empty body (`dlq show <key>` reads one; [`peek_bucket`] reads them all).
///
/// # Errors
/// [`Error::Aws`]: `ListObjectsV2` failed.
pub async fn list_bucket(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<Vec<crate::message::DlqMessage>> {
    let mut list = Vec::new();
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix("aws/lambda/").into_paginator().send();
    let now = Utc::now();
    while let Some(page) = pages.next().await {
        let page = page.map_err(Error::aws(format!("ListObjectsV2 on s3://{bucket}")))?;
        for object in page.contents() {
            let Some(key) = object.key() else { continue };
            let modified = object.last_modified().and_then(|t| DateTime::from_timestamp(t.secs(), 0));
            list.push(crate::message::DlqMessage {
                queue: format!("s3://{bucket}"),
                message_id: key.to_owned(),
                sent_at: modified.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                age_secs: modified.map(|t| (now - t).num_seconds()),
                receive_count: None,
                shape: "stream-batch".into(),
                event_id: None,
                cause: "FailedStreamBatch".into(),
                permanent: false,
                reason: format!("a stream batch the relay's mapping gave up on ({} bytes; `dlq show {key}` reads it)", object.size().unwrap_or(0)),
                attributes: Default::default(),
                body: String::new(),
            });
        }
    }
    Ok(list)
}

/// Every failed-batch object of `bucket` (under `aws/lambda/`), as `dlq list` shows messages:
/// `queue` is `s3://<bucket>`, `message_id` the object key, `shape` `stream-batch-records`
/// (with the records) or `stream-batch` (a pointer), `reason` the condition and the range.
///
/// # Errors
/// [`Error::Aws`]: an S3 call failed.
pub async fn peek_bucket(s3: &aws_sdk_s3::Client, bucket: &str) -> Result<Vec<crate::message::DlqMessage>> {
    let mut list = Vec::new();
    for listed in list_bucket(s3, bucket).await? {
        list.extend(peek_object(s3, bucket, &listed.message_id).await?);
    }
    Ok(list)
}

/// The failed-batch object `key` of `bucket`, as [`peek_bucket`] shows it; `None` when there is none.
///
/// # Errors
/// [`Error::Aws`]: an S3 error other than a missing key.
pub async fn peek_object(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Result<Option<crate::message::DlqMessage>> {
    let got = match s3.get_object().bucket(bucket).key(key).send().await {
        Ok(got) => got,
        Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => return Ok(None),
        Err(e) => return Err(Error::aws(format!("GetObject s3://{bucket}/{key}"))(e)),
    };
    let modified = got.last_modified().and_then(|t| DateTime::from_timestamp(t.secs(), 0));
    let bytes = got.body.collect().await.map_err(Error::aws(format!("GetObject s3://{bucket}/{key} (reading the body)")))?.into_bytes();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    let (shape, reason) = match parse(&body) {
        Ok(b) => (
            if b.payload.is_some() { "stream-batch-records" } else { "stream-batch" },
            format!(
                "{}: {} record(s) of {} from {} to {}",
                b.condition,
                b.payload.as_ref().map_or(b.info.batch_size, |p| p.records.len()),
                b.info.shard_id,
                b.info.start_sequence_number,
                b.info.end_sequence_number
            ),
        ),
        Err(why) => ("unknown", why.to_string()),
    };
    Ok(Some(crate::message::DlqMessage {
        queue: format!("s3://{bucket}"),
        message_id: key.to_owned(),
        sent_at: modified.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        age_secs: modified.map(|t| (Utc::now() - t).num_seconds()),
        receive_count: None,
        shape: shape.into(),
        event_id: None,
        // The condition (`RecordAgeExceeded`, `RetryAttemptsExhausted`) starts the reason;
        // a failed batch is always worth replaying once the bus is back.
        cause: reason.split(':').next().unwrap_or("unknown").trim().to_owned(),
        permanent: false,
        reason,
        attributes: Default::default(),
        body,
    }))
}

/// What [`redrive_bucket`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BucketReport {
    /// Objects replayed (and deleted, unless a dry run), with the events published.
    pub replayed: Vec<(String, usize)>,
    /// Objects left, with why.
    pub left: Vec<(String, String)>,
    /// Nothing was replayed or deleted.
    pub dry_run: bool,
}

/// Replays every failed-batch object of `bucket` (under `aws/lambda/`) through the relay and
/// deletes each one whose replay fully succeeded. Safe to run again: what is left is what still
/// fails, and events published twice are absorbed by the consumers' inboxes.
///
/// # Errors
/// [`Error::Aws`]: listing the bucket failed (objects not yet handled stay).
pub async fn redrive_bucket(
    s3: &aws_sdk_s3::Client,
    replayer: &Replayer,
    bucket: &str,
    dry_run: bool,
    progress: impl Fn(usize, usize),
) -> Result<BucketReport> {
    let mut keys = Vec::new();
    let mut pages = s3.list_objects_v2().bucket(bucket).prefix("aws/lambda/").into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(Error::aws(format!("ListObjectsV2 on s3://{bucket}")))?;
        keys.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_owned)));
    }
    let mut report = BucketReport { dry_run, ..Default::default() };
    let total = keys.len();
    for (i, key) in keys.into_iter().enumerate() {
        // Ok: the events published; Err: why the object stays.
        let outcome: Result<usize> = async {
            let object = s3.get_object().bucket(bucket).key(&key).send().await.map_err(Error::aws(format!("GetObject s3://{bucket}/{key}")))?;
            let bytes = object.body.collect().await.map_err(Error::aws(format!("GetObject s3://{bucket}/{key} (reading the body)")))?.into_bytes();
            let batch = parse(&String::from_utf8_lossy(&bytes))?;
            if dry_run {
                return Ok(batch.payload.as_ref().map_or(batch.info.batch_size, |p| p.records.len()));
            }
            let replayed = replayer.replay(&batch).await?;
            if replayed.failed > 0 {
                return Err(Error::StillFailing { failed: replayed.failed, records: replayed.records });
            }
            s3.delete_object().bucket(bucket).key(&key).send().await.map_err(Error::aws(format!("DeleteObject s3://{bucket}/{key}")))?;
            Ok(replayed.published)
        }
        .await;
        match outcome {
            Ok(n) => report.replayed.push((key, n)),
            Err(why) => report.left.push((key, why.to_string())),
        }
        progress(i + 1, total);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/s-outbox/stream/2026-12-01T00:00:00.000";

    fn record(payload: Option<Value>) -> String {
        let mut r = json!({
            "requestContext": {"condition": "RecordAgeExceeded", "approximateInvokeCount": 3},
            "DDBStreamBatchInfo": {
                "shardId": "shardId-1", "startSequenceNumber": "900", "endSequenceNumber": "1000",
                "approximateArrivalOfFirstRecord": "2026-12-01T05:00:00Z", "approximateArrivalOfLastRecord": 1_764_565_260,
                "batchSize": 2, "streamArn": STREAM,
            },
        });
        if let Some(p) = payload {
            r["payload"] = p;
        }
        r.to_string()
    }

    #[test]
    fn a_pointer_names_its_table_range_and_times() {
        let batch = parse(&record(None)).expect("a stream batch record");
        assert_eq!(batch.condition, "RecordAgeExceeded");
        assert!(batch.payload.is_none());
        assert_eq!(batch.info.table_name(), Some("s-outbox"));
        assert_eq!((batch.info.start_sequence_number.as_str(), batch.info.end_sequence_number.as_str(), batch.info.batch_size), ("900", "1000", 2));
        assert_eq!(batch.info.first_arrival.map(|t| t.to_rfc3339()), Some("2026-12-01T05:00:00+00:00".into()), "RFC 3339, as AWS writes it");
        assert_eq!(batch.info.last_arrival.map(|t| t.timestamp()), Some(1_764_565_260), "epoch seconds also read");
    }

    #[test]
    fn the_s3_payload_is_read_as_a_string_or_an_object() {
        let event = json!({"Records": [{"eventID": "1", "eventName": "INSERT", "awsRegion": "us-east-1",
            "dynamodb": {"SequenceNumber": "900", "SizeBytes": 20, "StreamViewType": "NEW_IMAGE", "Keys": {"pk": {"S": "Order#1"}},
                "NewImage": {"pk": {"S": "Order#1"}}}}]});
        for payload in [Value::String(event.to_string()), event.clone()] {
            let batch = parse(&record(Some(payload))).expect("a stream batch record with its payload");
            let records = batch.payload.expect("the payload").records;
            assert_eq!(records.len(), 1);
            assert_eq!(records[0].change.sequence_number.as_deref(), Some("900"));
        }
        let err = parse(&record(Some(Value::String("{".into())))).expect_err("a torn payload");
        assert!(matches!(err, BatchError::Payload(_)) && err.to_string().starts_with("payload: "), "{err}");
    }

    #[test]
    fn what_is_not_a_stream_batch_record_says_why() {
        assert!(parse("nope").expect_err("not JSON").to_string().starts_with("not JSON"));
        assert!(parse(r#"{"requestContext":{}}"#).expect_err("no pointer").to_string().contains("no DDBStreamBatchInfo"));
        let err = parse(r#"{"DDBStreamBatchInfo":{"shardId":"s"}}"#).expect_err("no range");
        assert!(matches!(err, BatchError::Missing("startSequenceNumber")), "{err}");
        assert_eq!(err.to_string(), "DDBStreamBatchInfo.startSequenceNumber is missing");
    }

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        assert!(seq_lt("999", "1000"));
        assert!(seq_lt("000999", "1000"));
        assert!(!seq_lt("1000", "1000"));
        assert!(!seq_lt("20000000000000000000000", "9"));
    }
}
