//! A DynamoDB stream event source mapping, played locally: polls the stream, applies
//! `FilterCriteria`, invokes the function with batches of at most `BatchSize` records, and
//! follows Lambda's rules for failures:
//!
//! * `ReportBatchItemFailures`: records before the earliest reported `itemIdentifier` are
//!   acknowledged; the batch is retried from it. An empty, `null` or unknown identifier fails
//!   the whole batch.
//! * `ParallelizationFactor`: a shard's batch runs as up to that many concurrent invocations,
//!   the records of one item key (partition and sort key) in one of them, in order
//!   ([`crate::lanes`]); each acknowledges its own records.
//! * A function error fails the whole batch; with `BisectBatchOnFunctionError` the retried batch
//!   is halved.
//! * After `MaximumRetryAttempts` retries the failed records are skipped and a record of the
//!   batch (`DDBStreamBatchInfo`: shard, first and last sequence number — not the records) goes
//!   to the `OnFailure` destination.
//!
//! Source: <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html> and
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html>.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::filter;
use crate::function::LocalFunction;
use crate::glue::{Glue, RuntimeOptions};
use crate::runtime_api::FunctionError;
use crate::stats::Stats;
use crate::template::StreamMappingSpec;

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
    on_failure_url: Option<String>,
    streams: aws_sdk_dynamodbstreams::Client,
    sqs: aws_sdk_sqs::Client,
    stats: Arc<Stats>,
    options: RuntimeOptions,
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
    pub fn new(glue: Glue<'_>, function: Arc<LocalFunction>, spec: StreamMappingSpec) -> Result<Self, String> {
        let at = format!("{}.Properties.Events.{}", function.spec.logical_id, spec.name);
        let stream_arn = glue
            .stack
            .stream_arns
            .get(&spec.table_logical_id)
            .cloned()
            .ok_or_else(|| format!("{at}: table {} has no stream (StreamSpecification)", spec.table_logical_id))?;
        for pattern in &spec.filters {
            filter::validate(pattern).map_err(|e| format!("{at}.Properties.FilterCriteria: {e}"))?;
        }
        let on_failure_url = spec
            .on_failure
            .as_ref()
            .map(|d| glue.stack.destination_url(d, &format!("{at}.Properties.DestinationConfig.OnFailure.Destination")))
            .transpose()?;
        Ok(Self {
            function,
            spec,
            stream_arn,
            region: glue.stack.resolver.region.clone(),
            on_failure_url,
            streams: aws_sdk_dynamodbstreams::Client::new(glue.sdk),
            sqs: aws_sdk_sqs::Client::new(glue.sdk),
            stats: glue.stats.clone(),
            options: glue.options.clone(),
        })
    }

    /// Runs until `shutdown` is true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut positions: HashMap<String, Option<String>> = HashMap::new();
        let mut buffer: VecDeque<Buffered> = VecDeque::new();
        let mut attempts: i64 = 0;
        let mut batch_limit = self.spec.batch_size.max(1);
        while !*shutdown.borrow() {
            if buffer.len() < batch_limit {
                if let Err(e) = self.poll(&mut positions, &mut buffer).await {
                    tracing::warn!(stream = %self.stream_arn, error = %e, "polling the stream failed; retrying");
                }
            }
            if buffer.is_empty() {
                let _ = tokio::time::timeout(self.options.stream_poll_interval, shutdown.changed()).await;
                continue;
            }
            let n = batch_limit.min(buffer.len());
            let records: Vec<&Value> = buffer.iter().take(n).map(|b| &b.record).collect();
            let lanes = crate::lanes::split(&records, self.spec.parallelization_factor);
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
            // Acknowledged records leave the buffer; the others stay in front, in shard order.
            let mut position = 0;
            buffer.retain(|_| {
                let keep = position >= n || !acked[position];
                position += 1;
                keep
            });
            if !failed {
                attempts = 0;
                batch_limit = self.spec.batch_size.max(1);
                continue;
            }
            attempts += 1;
            if self.spec.max_retry_attempts >= 0 && attempts > self.spec.max_retry_attempts {
                let remaining = (n - acknowledged).min(buffer.len());
                let skipped: Vec<Buffered> = buffer.drain(..remaining).collect();
                self.send_to_destination(&skipped, attempts, &result).await;
                attempts = 0;
                batch_limit = self.spec.batch_size.max(1);
                continue;
            }
            let _ = tokio::time::timeout(self.options.stream_retry_delay, shutdown.changed()).await;
        }
    }

    /// Invokes the function with `records` (one shard's batch), one concurrent invocation per
    /// lane of [`crate::lanes::split`] (`ParallelizationFactor`). Answers which records were
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
    async fn poll(&self, positions: &mut HashMap<String, Option<String>>, buffer: &mut VecDeque<Buffered>) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let description = self
            .streams
            .describe_stream()
            .stream_arn(&self.stream_arn)
            .send()
            .await
            .map_err(|e| err(&aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)))?;
        let shards = description.stream_description().map(|d| d.shards().to_vec()).unwrap_or_default();
        for shard in shards {
            let Some(shard_id) = shard.shard_id() else { continue };
            let last = positions.get(shard_id).cloned().flatten();
            let request = self.streams.get_shard_iterator().stream_arn(&self.stream_arn).shard_id(shard_id);
            let request = match &last {
                Some(seq) => request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(seq),
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let iterator = request.send().await.map_err(|e| err(&aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)))?.shard_iterator;
            let Some(iterator) = iterator else { continue };
            let out = self
                .streams
                .get_records()
                .shard_iterator(iterator)
                .limit(1000)
                .send()
                .await
                .map_err(|e| err(&aws_sdk_dynamodbstreams::error::DisplayErrorContext(e)))?;
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

    async fn send_to_destination(&self, skipped: &[Buffered], attempts: i64, last: &Result<Value, FunctionError>) {
        let (Some(first), Some(last_record)) = (skipped.first(), skipped.last()) else { return };
        let seq = |b: &Buffered| b.record.pointer("/dynamodb/SequenceNumber").cloned().unwrap_or(Value::Null);
        let arrival = |b: &Buffered| b.record.pointer("/dynamodb/ApproximateCreationDateTime").cloned().unwrap_or(Value::Null);
        let mut body = json!({
            "version": "1.0",
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "requestContext": {
                "requestId": uuid::Uuid::new_v4().to_string(),
                "functionArn": self.function.arn,
                "condition": "RetryAttemptsExhausted",
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
        if let Err(d) = last {
            body["responseContext"]["functionError"] = json!("Unhandled");
            body["responsePayload"] = json!({"errorType": d.error_type, "errorMessage": d.error_message});
        }
        self.stats.update(|c| c.stream_batches_dead_lettered += 1);
        tracing::error!(function = %self.function.spec.logical_id, records = skipped.len(), "stream batch retries exhausted; skipped and sent to the on-failure destination");
        let Some(url) = &self.on_failure_url else {
            tracing::error!("no OnFailure destination: the skipped records are gone, as on AWS");
            return;
        };
        let mut delay = Duration::from_millis(100);
        while let Err(e) = outbox::dead_letter::send(&self.sqs, url, body.to_string(), &[]).await {
            tracing::warn!(error = %e, "sending to the on-failure destination failed; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
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

    #[test]
    fn without_report_batch_item_failures_a_response_acknowledges_everything() {
        assert_eq!(acknowledged(&json!({"batchItemFailures": [{"itemIdentifier": "100"}]}), &SEQ, false), 4);
    }
}
