//! Dead-letter messages: what lands in the SQS dead-letter queues, and how to read it back.
//!
//! Three shapes reach the queues of this project:
//!
//! * [`RelayFailureRecord`] — written by the relay itself for a poison outbox record (it can
//!   never be published), so the shard is not blocked. Carries the full stream record.
//! * [`ConsumerFailureRecord`] — written by a consumer itself for an event no retry can fix
//!   (malformed, or an event id reused with another payload), on the first attempt, instead of
//!   burning Lambda's retries. Carries the whole event.
//! * A Lambda *asynchronous invocation record* — written by Lambda to a function's `OnFailure`
//!   destination when retries are exhausted (`requestContext.condition` =
//!   `RetriesExhausted`/`EventAgeExceeded`, `requestPayload` = the event, `responsePayload` =
//!   the error). For a stream event source mapping, the record holds `DDBStreamBatchInfo`
//!   (shard, sequence-number range) instead of the records themselves. Source:
//!   <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html>.
//! * A raw EventBridge event — written by EventBridge to a rule target's `DeadLetterConfig`
//!   queue when it could not invoke the target; the reason is in the message attributes
//!   `ERROR_CODE` / `ERROR_MESSAGE`. Source:
//!   <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html>.
//!
//! [`DeadLetter::parse`] tells them apart; anything else is [`DeadLetter::Unknown`] and is left
//! in the queue by the tools.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `kind` of a [`RelayFailureRecord`].
pub const RELAY_FAILURE_KIND: &str = "outbox-relay-failure";

/// The relay's own dead-letter message for an outbox record that can never be published. `R`
/// is how the stream record is held: [`Value`] when reading, a `&RawValue` when writing
/// (verbatim, as Lambda delivered it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RelayFailureRecord<R = Value> {
    /// Always [`RELAY_FAILURE_KIND`].
    pub kind: String,
    /// Why the record can never be published, in words.
    pub reason: String,
    /// Machine-readable cause: `MalformedRecord` (not a stream record), `MalformedOutboxItem`,
    /// `EventTooLarge`, or the `PutEvents` entry error code (e.g. `MalformedDetail`).
    pub error_code: String,
    /// The outbox item's `event_id`, if it could be read.
    #[serde(default)]
    pub event_id: Option<String>,
    /// The stream record's `SequenceNumber`.
    #[serde(default)]
    pub sequence_number: Option<String>,
    /// The stream ARN the record came from.
    #[serde(default)]
    pub event_source_arn: Option<String>,
    /// When the relay gave up on it: RFC 3339 UTC.
    pub failed_at: String,
    /// The whole DynamoDB stream record, exactly as Lambda delivered it (`dynamodb.NewImage`
    /// holds the outbox item in DynamoDB JSON).
    pub record: R,
}

/// `kind` of a [`ConsumerFailureRecord`].
pub const CONSUMER_FAILURE_KIND: &str = "outbox-consumer-failure";

/// A consumer's own dead-letter message for an event that can never be processed. `E` is how
/// the event is held: [`Value`] when reading, a `&RawValue` when writing (verbatim).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsumerFailureRecord<E = Value> {
    /// Always [`CONSUMER_FAILURE_KIND`].
    pub kind: String,
    /// The consumer's name (its inbox name).
    pub consumer: String,
    /// Machine-readable cause: `MalformedEvent`, `PayloadMismatch`, …
    pub error_type: String,
    /// Why, in words (naming the field for malformed events).
    pub reason: String,
    /// `detail.metadata.id`, if it could be read.
    #[serde(default)]
    pub event_id: Option<String>,
    /// When the consumer gave up: RFC 3339 UTC.
    pub failed_at: String,
    /// The EventBridge event as the consumer received it.
    pub event: E,
}

/// Sends `body` to the dead-letter queue at `url`, with `attributes` as string message
/// attributes (each cut to 1,024 characters) so the SQS console shows the reason without opening
/// the body. SQS accepts bodies up to 1 MiB (`SendMessage` API reference,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>);
/// an outbox item is at most 400 KB.
///
/// # Errors
/// The classified SQS failure ([`crate::aws_error::AwsError`]): the caller must then keep the
/// record (fail it), never drop it.
#[cfg(any(feature = "relay", feature = "inbox"))]
pub async fn send(sqs: &aws_sdk_sqs::Client, url: &str, body: String, attributes: &[(&str, &str)]) -> Result<(), crate::aws_error::AwsError> {
    send_grouped(sqs, url, body, attributes, None).await
}

/// A message's ids on an SQS FIFO queue (SQS API reference, `SendMessage`: a FIFO queue requires
/// `MessageGroupId`, and `MessageDeduplicationId` unless the queue has content-based
/// deduplication; each 1-128 characters).
#[cfg(any(feature = "relay", feature = "inbox"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct FifoIds<'a> {
    /// `MessageGroupId`.
    pub(crate) group: &'a str,
    /// `MessageDeduplicationId`.
    pub(crate) deduplication: &'a str,
}

/// [`send`], with `fifo`'s ids when the queue is a FIFO queue (`None`: a standard queue).
#[cfg(any(feature = "relay", feature = "inbox"))]
pub(crate) async fn send_grouped(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    body: String,
    attributes: &[(&str, &str)],
    fifo: Option<FifoIds<'_>>,
) -> Result<(), crate::aws_error::AwsError> {
    use crate::aws_error::AwsError;
    let mut request = sqs.send_message().queue_url(url).message_body(body);
    if let Some(ids) = fifo {
        request = request.message_group_id(ids.group).message_deduplication_id(ids.deduplication);
    }
    for (name, value) in attributes {
        let value = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("String")
            .string_value(value.chars().take(1024).collect::<String>())
            .build()
            .map_err(|e| AwsError::construction("SendMessage", e.to_string()))?;
        request = request.message_attributes(*name, value);
    }
    request.send().await.map_err(|e| AwsError::from_sdk("SendMessage", &e))?;
    Ok(())
}

/// A dead-letter message, recognised by shape.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DeadLetter {
    /// Written by the relay.
    RelayFailure(RelayFailureRecord),
    /// Written by a consumer.
    ConsumerFailure(ConsumerFailureRecord),
    /// A Lambda asynchronous-invocation (or stream batch) failure record.
    InvocationRecord {
        /// `requestContext.condition`, e.g. `RetriesExhausted`.
        condition: String,
        /// `requestContext.functionArn`.
        function_arn: Option<String>,
        /// `requestContext.approximateInvokeCount`.
        approximate_invoke_count: Option<u64>,
        /// The error: `responsePayload.errorType: errorMessage`, when there is one.
        error: Option<String>,
        /// `requestPayload`: the event that failed (absent for stream batches).
        request_payload: Option<Value>,
        /// `DDBStreamBatchInfo`, for a stream event source mapping.
        stream_batch: Option<Value>,
    },
    /// A raw EventBridge event (rule target DLQ).
    EventBridgeEvent {
        /// `detail-type`.
        detail_type: String,
        /// `source`.
        source: String,
        /// `detail.metadata.id`, when the event follows this project's envelope.
        event_id: Option<String>,
        /// The whole event.
        event: Value,
    },
    /// Not a shape this project knows.
    Unknown(String),
}

impl DeadLetter {
    /// Recognises a message body.
    pub fn parse(body: &str) -> DeadLetter {
        let value: Value = match serde_json::from_str(body) {
            Ok(v) => v,
            Err(e) => return DeadLetter::Unknown(format!("body is not JSON: {e}")),
        };
        if value.get("kind").and_then(Value::as_str) == Some(RELAY_FAILURE_KIND) {
            return match serde_json::from_value::<RelayFailureRecord>(value) {
                Ok(r) => DeadLetter::RelayFailure(r),
                Err(e) => DeadLetter::Unknown(format!("relay failure record without its fields: {e}")),
            };
        }
        if value.get("kind").and_then(Value::as_str) == Some(CONSUMER_FAILURE_KIND) {
            return match serde_json::from_value::<ConsumerFailureRecord>(value) {
                Ok(r) => DeadLetter::ConsumerFailure(r),
                Err(e) => DeadLetter::Unknown(format!("consumer failure record without its fields: {e}")),
            };
        }
        if let Some(ctx) = value.get("requestContext").filter(|c| c.get("condition").is_some()) {
            let error = value.get("responsePayload").and_then(|p| {
                let kind = p.get("errorType").and_then(Value::as_str);
                let message = p.get("errorMessage").and_then(Value::as_str);
                match (kind, message) {
                    (None, None) => None,
                    (k, m) => Some(format!("{}: {}", k.unwrap_or("Error"), m.unwrap_or(""))),
                }
            });
            return DeadLetter::InvocationRecord {
                condition: ctx["condition"].as_str().unwrap_or_default().to_owned(),
                function_arn: ctx.get("functionArn").and_then(Value::as_str).map(str::to_owned),
                approximate_invoke_count: ctx.get("approximateInvokeCount").and_then(Value::as_u64),
                error,
                request_payload: value.get("requestPayload").cloned(),
                stream_batch: value.get("DDBStreamBatchInfo").cloned(),
            };
        }
        if let (Some(detail_type), Some(source)) = (value.get("detail-type").and_then(Value::as_str), value.get("source").and_then(Value::as_str)) {
            return DeadLetter::EventBridgeEvent {
                detail_type: detail_type.to_owned(),
                source: source.to_owned(),
                event_id: value.pointer("/detail/metadata/id").and_then(Value::as_str).map(str::to_owned),
                event: value,
            };
        }
        DeadLetter::Unknown("neither a relay failure record, a Lambda invocation record nor an EventBridge event".into())
    }

    /// The failure reason in one line, for listings.
    pub fn reason(&self) -> String {
        match self {
            DeadLetter::RelayFailure(r) => format!("{}: {}", r.error_code, r.reason),
            DeadLetter::ConsumerFailure(r) => format!("{}: {}", r.error_type, r.reason),
            DeadLetter::InvocationRecord { condition, error, stream_batch, .. } => match (error, stream_batch) {
                (Some(e), _) => format!("{condition}: {e}"),
                (None, Some(_)) => format!("{condition}: stream batch failed"),
                (None, None) => condition.clone(),
            },
            DeadLetter::EventBridgeEvent { .. } => "EventBridge could not deliver to the target".into(),
            DeadLetter::Unknown(why) => format!("unknown shape: {why}"),
        }
    }

    /// Short name of the shape.
    pub fn shape(&self) -> &'static str {
        match self {
            DeadLetter::RelayFailure(_) => "relay-failure",
            DeadLetter::ConsumerFailure(_) => "consumer-failure",
            DeadLetter::InvocationRecord { .. } => "invocation-record",
            DeadLetter::EventBridgeEvent { .. } => "eventbridge-event",
            DeadLetter::Unknown(_) => "unknown",
        }
    }

    /// The event id (`detail.metadata.id` / outbox `event_id`) the message is about, if known.
    pub fn event_id(&self) -> Option<String> {
        match self {
            DeadLetter::RelayFailure(r) => r.event_id.clone(),
            DeadLetter::ConsumerFailure(r) => r.event_id.clone(),
            DeadLetter::InvocationRecord { request_payload, .. } => {
                request_payload.as_ref().and_then(|p| p.pointer("/detail/metadata/id")).and_then(Value::as_str).map(str::to_owned)
            }
            DeadLetter::EventBridgeEvent { event_id, .. } => event_id.clone(),
            DeadLetter::Unknown(_) => None,
        }
    }

    /// The failure cause, one word to group messages by: the relay's `error_code`, the
    /// consumer's `error_type`, `<condition>` or `<condition>:<errorType>` for an invocation
    /// record, `eventbridge-delivery` for a rule target's dead letter (its `ERROR_CODE` attribute
    /// says more), `unknown` otherwise.
    pub fn cause(&self) -> String {
        match self {
            DeadLetter::RelayFailure(r) => r.error_code.clone(),
            DeadLetter::ConsumerFailure(r) => r.error_type.clone(),
            DeadLetter::InvocationRecord { condition, error, .. } => match error.as_deref().and_then(|e| e.split(':').next()) {
                Some(kind) if !kind.is_empty() => format!("{condition}:{kind}"),
                _ => condition.clone(),
            },
            DeadLetter::EventBridgeEvent { .. } => "eventbridge-delivery".into(),
            DeadLetter::Unknown(_) => "unknown".into(),
        }
    }

    /// Whether a redrive can never make it succeed: the event itself is wrong (malformed, too
    /// large, its id reused with another payload, rejected by the business logic, or rejected by
    /// `PutEvents` as malformed). Redriving such a message only dead-letters it again; tools
    /// refuse it unless forced.
    pub fn is_permanent(&self) -> bool {
        PERMANENT_CAUSES.contains(&self.cause().as_str())
    }
}

/// Causes no redrive fixes ([`DeadLetter::is_permanent`]).
pub const PERMANENT_CAUSES: &[&str] = &["MalformedEvent", "PayloadMismatch", "Rejected", "MalformedOutboxItem", "EventTooLarge", "MalformedDetail"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_a_relay_failure_record() {
        let body = serde_json::to_string(&RelayFailureRecord {
            kind: RELAY_FAILURE_KIND.into(),
            reason: "payload is not JSON".into(),
            error_code: "MalformedOutboxItem".into(),
            event_id: Some("e-1".into()),
            sequence_number: Some("100".into()),
            event_source_arn: None,
            failed_at: "2026-11-29T08:00:00Z".into(),
            record: serde_json::json!({"eventName": "INSERT"}),
        })
        .unwrap();
        let dl = DeadLetter::parse(&body);
        assert_eq!(dl.shape(), "relay-failure");
        assert_eq!(dl.event_id().as_deref(), Some("e-1"));
        assert_eq!(dl.reason(), "MalformedOutboxItem: payload is not JSON");
    }

    #[test]
    fn recognises_a_consumer_failure_record() {
        let body = r#"{"kind":"outbox-consumer-failure","consumer":"reserve-inventory","error_type":"MalformedEvent",
            "reason":"detail.data.lines: invalid type","event_id":"e-5","failed_at":"2026-11-29T08:00:00Z",
            "event":{"detail-type":"OrderCreated","source":"example.orders","detail":{"metadata":{"id":"e-5"}}}}"#;
        let dl = DeadLetter::parse(body);
        assert_eq!(dl.shape(), "consumer-failure");
        assert_eq!(dl.event_id().as_deref(), Some("e-5"));
        assert_eq!(dl.reason(), "MalformedEvent: detail.data.lines: invalid type");
    }

    #[test]
    fn recognises_an_async_invocation_record() {
        let body = r#"{"version":"1.0","timestamp":"2026-11-29T08:00:00.000Z",
            "requestContext":{"requestId":"r","functionArn":"arn:aws:lambda:us-east-1:123456789012:function:f:$LATEST","condition":"RetriesExhausted","approximateInvokeCount":3},
            "requestPayload":{"detail-type":"OrderCreated","source":"example.orders","detail":{"metadata":{"id":"e-9"}}},
            "responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":"Unhandled"},
            "responsePayload":{"errorType":"MalformedEvent","errorMessage":"detail.data.lines: missing field"}}"#;
        let dl = DeadLetter::parse(body);
        assert_eq!(dl.shape(), "invocation-record");
        assert_eq!(dl.event_id().as_deref(), Some("e-9"));
        assert_eq!(dl.reason(), "RetriesExhausted: MalformedEvent: detail.data.lines: missing field");
    }

    #[test]
    fn recognises_a_stream_batch_record() {
        let body = r#"{"requestContext":{"condition":"RetryAttemptsExhausted","approximateInvokeCount":11},
            "DDBStreamBatchInfo":{"shardId":"s","startSequenceNumber":"1","endSequenceNumber":"9","batchSize":9}}"#;
        let dl = DeadLetter::parse(body);
        assert_eq!(dl.reason(), "RetryAttemptsExhausted: stream batch failed");
    }

    #[test]
    fn recognises_a_raw_eventbridge_event_and_unknowns() {
        let dl = DeadLetter::parse(r#"{"detail-type":"OrderCreated","source":"example.orders","detail":{"metadata":{"id":"e-2"}}}"#);
        assert_eq!(dl.shape(), "eventbridge-event");
        assert_eq!(dl.event_id().as_deref(), Some("e-2"));
        assert_eq!(DeadLetter::parse("hello").shape(), "unknown");
        assert_eq!(DeadLetter::parse(r#"{"a":1}"#).shape(), "unknown");
    }
}
