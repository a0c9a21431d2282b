//! A DynamoDB stream event source mapping, played locally: polls the stream, applies
//! `FilterCriteria`, invokes the function with batches of at most `BatchSize` records, and
//! follows Lambda's rules for failures:
//!
//! * `ReportBatchItemFailures`: records before the earliest reported `itemIdentifier` are
//!   acknowledged; the batch is retried from it. An empty, `null` or unknown identifier fails
//!   the whole batch.
//! * `ParallelizationFactor`: a shard's batch runs as up to that many concurrent invocations,
//!   the records of one item key (partition and sort key) in one of them, in order
//!   ([`crate::mappings::lanes`]); each acknowledges its own records.
//! * A function error fails the whole batch; with `BisectBatchOnFunctionError` the retried batch
//!   is halved.
//! * After `MaximumRetryAttempts` retries (-1, the default: no limit) the failed records are
//!   skipped (condition `RetryAttemptsExhausted`); records older than
//!   `MaximumRecordAgeInSeconds` (by `ApproximateCreationDateTime`; -1: no limit) are skipped
//!   before they are (re)tried (condition `RecordAgeExceeded`). Either way a record of the batch
//!   goes to the `OnFailure` destination: to an SQS queue only the pointer
//!   (`DDBStreamBatchInfo`: shard, first and last sequence number — not the records); to an S3
//!   bucket the pointer and the whole invocation payload (`payload`, the event
//!   `{"Records": [...]}` as a JSON string), as object
//!   `aws/lambda/<mapping>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<uuid>` (Lambda's layout, with
//!   `<Function>-<Event>` in place of the mapping's UUID).
//! * The checkpoint (per shard, the last record done with) is kept in
//!   [`RuntimeOptions::state_dir`] when set ([`crate::mappings::checkpoint`]) and resumed on restart.
//!
//! Source: <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>,
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html> and
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html> ("For Amazon S3
//! destinations, Lambda also sends the entire invocation record along with the metadata").

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::Glue;
use crate::lambda::function::LocalFunction;
use crate::lambda::runtime_api::FunctionError;
use crate::mappings::checkpoint::CheckpointFile;
use crate::options::RuntimeOptions;
use crate::stats::Stats;
use outbox_cli::filter;
use outbox_template::stack::Destination;
use outbox_template::StreamMappingSpec;

/// How many records at the front of a batch (given by their sequence numbers) a function's
/// response acknowledges. Without `ReportBatchItemFailures` a successful invocation acknowledges
/// the whole batch. With it, the records before the earliest reported `itemIdentifier` are
/// acknowledged; a `null`, empty or unknown identifier, or a `batchItemFailures` that is not a
/// list, fails the whole batch — as Lambda does.
pub fn acknowledged(response: &Value, sequence_numbers: &[&str], report_batch_item_failures: bool) -> usize {
    let n = sequence_numbers.len();
    if !report_batch_item_failures {
        return n;
    }
    let failures = match response.get("batchItemFailures") {
        None | Some(Value::Null) => return n,
        Some(Value::Array(f)) => f,
        Some(_) => return 0,
    };
    let mut earliest = n;
    for failure in failures {
        let id = failure.get("itemIdentifier").and_then(Value::as_str).filter(|s| !s.is_empty());
        match id.and_then(|id| sequence_numbers.iter().position(|s| *s == id)) {
            Some(p) => earliest = earliest.min(p),
            None => return 0,
        }
    }
    earliest
}

/// One running mapping.
pub struct StreamMapping {
    function: Arc<LocalFunction>,
    spec: StreamMappingSpec,
    stream_arn: String,
    region: String,
    on_failure: Option<Destination>,
    checkpoint: Option<CheckpointFile>,
    streams: aws_sdk_dynamodbstreams::Client,
    sqs: aws_sdk_sqs::Client,
    s3: aws_sdk_s3::Client,
    stats: Arc<Stats>,
    options: RuntimeOptions,
}

impl std::fmt::Debug for StreamMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamMapping").field("spec", &self.spec).field("stream_arn", &self.stream_arn).finish_non_exhaustive()
    }
}

struct Buffered {
    shard_id: String,
    record: Value,
}

impl StreamMapping {
    /// Sets up the mapping `spec` of `function`.
    ///
    /// # Errors
    /// A message when the stream, a filter or the destination cannot be used.
    pub fn new(glue: Glue<'_>, function: Arc<LocalFunction>, spec: StreamMappingSpec) -> crate::Result<Self> {
        let at = format!("{}.Properties.Events.{}", function.spec.logical_id, spec.name);
        let stream_arn = glue
            .stack
            .stream_arns
            .get(&spec.table_logical_id)
            .cloned()
            .ok_or_else(|| crate::Error::invalid(format!("{at}: table {} has no stream (StreamSpecification)", spec.table_logical_id)))?;
        for pattern in &spec.filters {
            filter::validate(pattern).map_err(|e| crate::Error::invalid(format!("{at}.Properties.FilterCriteria: {e}")))?;
        }
        let on_failure = spec
            .on_failure
            .as_ref()
            .map(|d| glue.stack.destination(d, &format!("{at}.Properties.DestinationConfig.OnFailure.Destination")))
            .transpose()?;
        let checkpoint = glue.options.state_dir.as_deref().map(|dir| CheckpointFile::new(dir, &function.spec.logical_id, &spec.name, &stream_arn));
        Ok(Self {
            function,
            spec,
            stream_arn,
            region: glue.stack.resolver.region.clone(),
            on_failure,
            checkpoint,
            streams: aws_sdk_dynamodbstreams::Client::new(glue.sdk),
            sqs: aws_sdk_sqs::Client::new(glue.sdk),
            s3: aws_sdk_s3::Client::new(glue.sdk),
            stats: glue.stats.clone(),
            options: glue.options.clone(),
        })
    }

    /// Runs until `shutdown` is true, from the kept checkpoint if there is one.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut done = self.load_checkpoint();
        let mut saved = done.clone();
        let mut positions: HashMap<String, Option<String>> = done.iter().map(|(shard, seq)| (shard.clone(), Some(seq.clone()))).collect();
        let mut buffer: VecDeque<Buffered> = VecDeque::new();
        let mut attempts: i64 = 0;
        let mut batch_limit = self.spec.batch_size.max(1);
        while !*shutdown.borrow() {
            advance_checkpoint(&positions, &buffer, &mut done);
            if done != saved {
                self.save_checkpoint(&done);
                saved = done.clone();
            }
            if buffer.len() < batch_limit {
                if let Err(e) = self.poll(&mut positions, &mut buffer).await {
                    tracing::warn!(stream = %self.stream_arn, error = %e, "polling the stream failed; retrying");
                }
            }
            if buffer.is_empty() {
                let _ = tokio::time::timeout(self.options.stream_poll_interval, shutdown.changed()).await;
                continue;
            }
            let expired = expired(&buffer, self.spec.max_record_age_secs, chrono::Utc::now().timestamp());
            if expired > 0 {
                let skipped: Vec<Buffered> = buffer.drain(..expired).collect();
                mark_done(&skipped, &mut done);
                self.send_to_destination(&skipped, attempts, "RecordAgeExceeded", None).await;
                attempts = 0;
                batch_limit = self.spec.batch_size.max(1);
                continue;
            }
            let n = batch_limit.min(buffer.len());
            let records: Vec<&Value> = buffer.iter().take(n).map(|b| &b.record).collect();
            let lanes = crate::mappings::lanes::split(&records, self.spec.parallelization_factor);
            let (acked, result) = self.invoke_lanes(&records, lanes).await;
            if let Err(diagnostic) = &result {
                tracing::warn!(function = %self.function.spec.logical_id, error_type = %diagnostic.error_type, error = %diagnostic.error_message, "stream batch failed");
                if self.spec.bisect_on_error && n > 1 {
                    batch_limit = n.div_ceil(2);
                }
            }
            let acknowledged = acked.iter().filter(|a| **a).count();
            let failed = acknowledged < n;
            self.stats.update(|c| {
                c.relay_invocations += 1;
                c.relay_failed_invocations += usize::from(failed);
            });
            // Acknowledged records leave the buffer; the others stay in front, in shard order. The
            // checkpoint moves only over the acknowledged prefix: with several lanes a later record
            // may be acknowledged before an earlier one, and a restart must not skip the earlier.
            let prefix = acked.iter().take(n).take_while(|a| **a).count();
            let mut acknowledged_records = Vec::new();
            let mut kept = VecDeque::with_capacity(buffer.len());
            for (position, b) in buffer.drain(..).enumerate() {
                if position < n && acked[position] {
                    if position < prefix {
                        acknowledged_records.push(b);
                    }
                } else {
                    kept.push_back(b);
                }
            }
            buffer = kept;
            mark_done(&acknowledged_records, &mut done);
            if !failed {
                attempts = 0;
                batch_limit = self.spec.batch_size.max(1);
                continue;
            }
            attempts += 1;
            if self.spec.max_retry_attempts >= 0 && attempts > self.spec.max_retry_attempts {
                let remaining = (n - acknowledged).min(buffer.len());
                let skipped: Vec<Buffered> = buffer.drain(..remaining).collect();
                mark_done(&skipped, &mut done);
                self.send_to_destination(&skipped, attempts, "RetryAttemptsExhausted", Some(&result)).await;
                attempts = 0;
                batch_limit = self.spec.batch_size.max(1);
                continue;
            }
            let _ = tokio::time::timeout(self.options.stream_retry_delay, shutdown.changed()).await;
        }
        advance_checkpoint(&positions, &buffer, &mut done);
        if done != saved {
            self.save_checkpoint(&done);
        }
    }

    fn load_checkpoint(&self) -> BTreeMap<String, String> {
        let Some(file) = &self.checkpoint else { return BTreeMap::new() };
        match file.load() {
            Ok(shards) => {
                if !shards.is_empty() {
                    tracing::info!(function = %self.function.spec.logical_id, shards = shards.len(), file = %file.path().display(), "resuming the stream mapping from its checkpoint");
                }
                shards
            }
            Err(e) => {
                tracing::warn!(error = %e, "the checkpoint cannot be read; reading the stream from TRIM_HORIZON");
                BTreeMap::new()
            }
        }
    }

    fn save_checkpoint(&self, done: &BTreeMap<String, String>) {
        if let Some(file) = &self.checkpoint {
            if let Err(e) = file.save(done) {
                tracing::warn!(error = %e, "the checkpoint cannot be written; a restart would deliver records again");
            }
        }
    }

    /// Invokes the function with `records` (one shard's batch), one concurrent invocation per
    /// lane of [`crate::mappings::lanes::split`] (`ParallelizationFactor`). Answers which records were
    /// acknowledged (per lane, the records before its earliest reported failure, see
    /// [`acknowledged`]) and the result to report: the first lane's that did not acknowledge
    /// all its records, else the last lane's.
    async fn invoke_lanes(&self, records: &[&Value], lanes: Vec<Vec<usize>>) -> (Vec<bool>, Result<Value, FunctionError>) {
        let mut running = tokio::task::JoinSet::new();
        for (lane_number, lane) in lanes.into_iter().enumerate() {
            let payload = json!({ "Records": lane.iter().map(|&p| records[p]).collect::<Vec<_>>() }).to_string();
            let function = self.function.clone();
            running.spawn(async move { (lane_number, lane, function.invoke(&payload).await.result) });
        }
        let mut outcomes = Vec::new();
        let mut panicked = None;
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => panicked = Some(FunctionError::new("Runtime.Panic", format!("the invocation task failed: {e}"))),
            }
        }
        outcomes.sort_by_key(|(lane_number, _, _)| *lane_number);
        let mut acked = vec![false; records.len()];
        let mut reported: Option<Result<Value, FunctionError>> = panicked.map(Err);
        let mut last = Ok(Value::Null);
        for (_, lane, result) in outcomes {
            let done = match &result {
                Ok(response) => {
                    let sequence_numbers: Vec<&str> =
                        lane.iter().map(|&p| records[p].pointer("/dynamodb/SequenceNumber").and_then(Value::as_str).unwrap_or("")).collect();
                    acknowledged(response, &sequence_numbers, self.spec.report_batch_item_failures)
                }
                Err(_) => 0,
            };
            for &p in &lane[..done] {
                acked[p] = true;
            }
            if done < lane.len() && reported.is_none() {
                reported = Some(result);
            } else {
                last = result;
            }
        }
        (acked, reported.unwrap_or(last))
    }

    /// Reads new records of every shard into `buffer`. `positions` holds the last sequence
    /// number read per shard; the iterator is taken afresh each time (AFTER_SEQUENCE_NUMBER), so a
    /// stale or expired iterator never stalls the mapping (iterators expire after 15 minutes on
    /// AWS; moto without the project's shim replaces the table and its shard on a cancelled
    /// transaction).
    async fn poll(&self, positions: &mut HashMap<String, Option<String>>, buffer: &mut VecDeque<Buffered>) -> crate::Result<()> {
        let description = self.streams.describe_stream().stream_arn(&self.stream_arn).send().await.map_err(crate::Error::aws("DescribeStream"))?;
        let shards = description.stream_description().map(|d| d.shards().to_vec()).unwrap_or_default();
        for shard in shards {
            let Some(shard_id) = shard.shard_id() else { continue };
            let last = positions.get(shard_id).cloned().flatten();
            let request = self.streams.get_shard_iterator().stream_arn(&self.stream_arn).shard_id(shard_id);
            let request = match &last {
                Some(seq) => request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq),
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let iterator = request.send().await.map_err(crate::Error::aws("GetShardIterator"))?.shard_iterator;
            let Some(iterator) = iterator else { continue };
            let out = self.streams.get_records().shard_iterator(iterator).limit(1000).send().await.map_err(crate::Error::aws("GetRecords"))?;
            for record in out.records() {
                if let Some(seq) = record.dynamodb().and_then(|d| d.sequence_number()) {
                    positions.insert(shard_id.to_owned(), Some(seq.to_owned()));
                }
                let record = self.lambda_record(record);
                self.stats.update(|c| c.stream_records += 1);
                if !self.spec.filters.is_empty() && !self.spec.filters.iter().any(|p| filter::matches(p, &record)) {
                    self.stats.update(|c| c.stream_records_filtered += 1);
                    continue;
                }
                buffer.push_back(Buffered { shard_id: shard_id.to_owned(), record });
            }
        }
        Ok(())
    }

    /// The record as Lambda delivers it to a function (DynamoDB JSON images).
    fn lambda_record(&self, r: &Record) -> Value {
        let image = |m: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
            m.map(|m| serde_json::to_value(serde_dynamo::Item::from(m.clone())).unwrap_or(Value::Null))
        };
        let change = r.dynamodb();
        let mut dynamodb = json!({
            "ApproximateCreationDateTime": change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()),
            "Keys": image(change.and_then(|c| c.keys.as_ref())),
            "SequenceNumber": change.and_then(|c| c.sequence_number()),
            "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or(0),
            "StreamViewType": change.and_then(|c| c.stream_view_type()).map(|v| v.as_str().to_owned()),
        });
        if let Some(new_image) = image(change.and_then(|c| c.new_image.as_ref())) {
            dynamodb["NewImage"] = new_image;
        }
        if let Some(old_image) = image(change.and_then(|c| c.old_image.as_ref())) {
            dynamodb["OldImage"] = old_image;
        }
        let mut record = json!({
            "eventID": r.event_id(),
            "eventName": r.event_name().map(|n| n.as_str().to_owned()),
            "eventVersion": r.event_version().unwrap_or("1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": r.aws_region().unwrap_or(&self.region),
            "eventSourceARN": self.stream_arn,
            "dynamodb": dynamodb,
        });
        if let Some(identity) = r.user_identity() {
            record["userIdentity"] = json!({"type": identity.r#type(), "principalId": identity.principal_id()});
        }
        record
    }

    async fn send_to_destination(&self, skipped: &[Buffered], attempts: i64, condition: &str, last: Option<&Result<Value, FunctionError>>) {
        let (Some(first), Some(last_record)) = (skipped.first(), skipped.last()) else { return };
        let seq = |b: &Buffered| b.record.pointer("/dynamodb/SequenceNumber").cloned().unwrap_or(Value::Null);
        // RFC 3339, as Lambda writes the arrival times.
        let arrival = |b: &Buffered| {
            let secs = b.record.pointer("/dynamodb/ApproximateCreationDateTime").and_then(Value::as_i64);
            secs.and_then(|s| chrono::DateTime::from_timestamp(s, 0))
                .map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
                .unwrap_or(Value::Null)
        };
        let mut body = json!({
            "version": "1.0",
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "requestContext": {
                "requestId": uuid::Uuid::new_v4().to_string(),
                "functionArn": self.function.arn,
                "condition": condition,
                "approximateInvokeCount": attempts,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST"},
            "DDBStreamBatchInfo": {
                "shardId": first.shard_id,
                "startSequenceNumber": seq(first),
                "endSequenceNumber": seq(last_record),
                "approximateArrivalOfFirstRecord": arrival(first),
                "approximateArrivalOfLastRecord": arrival(last_record),
                "batchSize": skipped.len(),
                "streamArn": self.stream_arn,
            },
        });
        if let Some(Err(d)) = last {
            body["responseContext"]["functionError"] = json!("Unhandled");
            body["responsePayload"] = json!({"errorType": d.error_type, "errorMessage": d.error_message});
        }
        self.stats.update(|c| c.stream_batches_dead_lettered += 1);
        tracing::error!(function = %self.function.spec.logical_id, records = skipped.len(), condition, "stream batch skipped and sent to the on-failure destination");
        let Some(destination) = &self.on_failure else {
            tracing::error!("no OnFailure destination: the skipped records are gone, as on AWS");
            return;
        };
        let mut delay = Duration::from_millis(100);
        loop {
            let sent = match destination {
                Destination::Sqs { url } => outbox::dead_letter::send(&self.sqs, url, body.to_string(), &[]).await.map_err(|e| e.to_string()),
                Destination::S3 { bucket } => {
                    let records: Vec<&Value> = skipped.iter().map(|b| &b.record).collect();
                    body["payload"] = json!(json!({ "Records": records }).to_string());
                    let mapping = format!("{}-{}", self.function.spec.logical_id, self.spec.name).replace('/', "-");
                    let key = s3_key(&mapping, &first.shard_id, chrono::Utc::now());
                    self.s3
                        .put_object()
                        .bucket(bucket)
                        .key(&key)
                        .content_type("application/json")
                        .body(body.to_string().into_bytes().into())
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())
                }
            };
            match sent {
                Ok(()) => return,
                Err(e) => tracing::warn!(error = %e, "sending to the on-failure destination failed; retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }
}

/// The S3 object key Lambda gives an on-failure record of a stream mapping:
/// `aws/lambda/<mapping>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<uuid>`.
pub fn s3_key(mapping: &str, shard: &str, at: chrono::DateTime<chrono::Utc>) -> String {
    format!("aws/lambda/{mapping}/{shard}/{}/{}-{}", at.format("%Y/%m/%d"), at.format("%Y-%m-%dT%H.%M.%S"), uuid::Uuid::new_v4())
}

/// How many records at the front of `buffer` are older than `max_age_secs`
/// (`MaximumRecordAgeInSeconds`; negative: no limit) at `now` (epoch seconds), by their
/// `ApproximateCreationDateTime`.
fn expired(buffer: &VecDeque<Buffered>, max_age_secs: i64, now: i64) -> usize {
    let Ok(max_age) = u64::try_from(max_age_secs) else { return 0 };
    buffer
        .iter()
        .take_while(|b| {
            let created = b.record.pointer("/dynamodb/ApproximateCreationDateTime").and_then(Value::as_i64);
            created.is_some_and(|t| u64::try_from(now - t).is_ok_and(|age| age > max_age))
        })
        .count()
}

/// Marks `records` (in stream order) as done: each shard's checkpoint moves to its last one.
fn mark_done(records: &[Buffered], done: &mut BTreeMap<String, String>) {
    for b in records {
        if let Some(seq) = b.record.pointer("/dynamodb/SequenceNumber").and_then(Value::as_str) {
            done.insert(b.shard_id.clone(), seq.to_owned());
        }
    }
}

/// A shard with nothing buffered is done up to the last record read from it (records the
/// filter dropped included).
fn advance_checkpoint(positions: &HashMap<String, Option<String>>, buffer: &VecDeque<Buffered>, done: &mut BTreeMap<String, String>) {
    for (shard, last) in positions {
        if let Some(last) = last {
            if !buffer.iter().any(|b| &b.shard_id == shard) {
                done.insert(shard.clone(), last.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEQ: [&str; 4] = ["100", "200", "300", "400"];

    #[test]
    fn batch_item_failures_checkpoint_at_the_earliest_reported_record() {
        assert_eq!(acknowledged(&json!({"batchItemFailures": []}), &SEQ, true), 4);
        assert_eq!(acknowledged(&json!({}), &SEQ, true), 4);
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": "300"}]}), &SEQ, true), 2);
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": "400"}, {"itemIdentifier": "200"}]}), &SEQ, true), 1);
    }

    #[test]
    fn invalid_identifiers_fail_the_whole_batch() {
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": null}]}), &SEQ, true), 0);
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": ""}]}), &SEQ, true), 0);
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": "999"}]}), &SEQ, true), 0);
        assert_eq!(acknowledged(&json!({"batchItemFailures": "oops"}), &SEQ, true), 0);
    }

    fn buffered(shard: &str, seq: &str, created: i64) -> Buffered {
        Buffered { shard_id: shard.into(), record: json!({"dynamodb": {"SequenceNumber": seq, "ApproximateCreationDateTime": created}}) }
    }

    #[test]
    fn records_older_than_the_maximum_age_are_expired_from_the_front() {
        let buffer: VecDeque<Buffered> = [buffered("a", "1", 100), buffered("a", "2", 105), buffered("a", "3", 110)].into();
        assert_eq!(expired(&buffer, 4, 110), 2, "aged 10 and 5 s are older than 4 s; the one of 0 s is not");
        assert_eq!(expired(&buffer, 10, 110), 0, "exactly the maximum age is not older");
        assert_eq!(expired(&buffer, -1, 1_000_000), 0, "-1: no limit");
        assert_eq!(expired(&buffer, 0, 110), 2);
    }

    #[test]
    fn the_checkpoint_moves_past_what_is_done_and_never_past_a_buffered_record() {
        let mut done = BTreeMap::new();
        let mut buffer: VecDeque<Buffered> = [buffered("a", "1", 0), buffered("a", "2", 0), buffered("b", "7", 0)].into();
        // Read up to 5 on shard a (3..5 filtered out) and 9 on shard b (8, 9 filtered out).
        let positions: HashMap<String, Option<String>> = [("a".to_owned(), Some("5".to_owned())), ("b".to_owned(), Some("9".to_owned()))].into();
        advance_checkpoint(&positions, &buffer, &mut done);
        assert!(done.is_empty(), "both shards still have records to deliver: {done:?}");
        let acknowledged: Vec<Buffered> = buffer.drain(..1).collect();
        mark_done(&acknowledged, &mut done);
        advance_checkpoint(&positions, &buffer, &mut done);
        assert_eq!(done.get("a").map(String::as_str), Some("1"), "record 2 is still to deliver");
        assert!(!done.contains_key("b"));
        let rest: Vec<Buffered> = buffer.drain(..).collect();
        mark_done(&rest, &mut done);
        advance_checkpoint(&positions, &buffer, &mut done);
        assert_eq!(
            done,
            [("a".to_owned(), "5".to_owned()), ("b".to_owned(), "9".to_owned())].into(),
            "filtered records after the last delivered one are done too"
        );
    }

    #[test]
    fn s3_records_follow_lambdas_key_layout() {
        let at = chrono::DateTime::from_timestamp(1_764_565_200, 0).expect("a valid time");
        let key = s3_key("Relay-Stream", "shardId-1", at);
        assert!(key.starts_with("aws/lambda/Relay-Stream/shardId-1/2025/12/01/2025-12-01T05.00.00-"), "{key}");
        assert_eq!(key.len(), "aws/lambda/Relay-Stream/shardId-1/2025/12/01/2025-12-01T05.00.00-".len() + 36, "ends with a UUID: {key}");
    }

    #[test]
    fn without_report_batch_item_failures_a_response_acknowledges_everything() {
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": "100"}]}), &SEQ, false), 4);
    }
}
