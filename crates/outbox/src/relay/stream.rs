//! The DynamoDB Streams batch as the relay reads it, decoded once.
//!
//! Lambda delivers `{"Records": [...]}`; each record holds `eventName`, `eventSourceARN`,
//! `userIdentity` (TTL deletions) and `dynamodb` with `SequenceNumber` and `NewImage` (the item
//! in DynamoDB JSON). Source: "Using AWS Lambda with Amazon DynamoDB",
//! <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>. [`StreamBatch`] keeps each
//! record's JSON text exactly as delivered (the dead-letter copy) and decodes from it only what
//! the relay reads, `NewImage` straight into DynamoDB attributes; no full `aws_lambda_events`
//! tree is built, and nothing is converted or cloned on the way.
//!
//! A record that is not a stream record (a shape this decoder cannot read) does not fail the
//! batch: it is kept with its reason and becomes a poison record (dead-lettered, verbatim).

use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Why a stream record cannot be read as one (the relay dead-letters it verbatim as a poison
/// record, error code `MalformedRecord`, with this text as its reason).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record's JSON does not have a stream record's shape (e.g. `eventName` not a string,
    /// or the record not an object).
    #[error("not a DynamoDB stream record: {0}")]
    NotAStreamRecord(#[source] Arc<serde_json::Error>),
    /// An `aws_lambda_events` record ([`StreamBatch::from_event`]) could not be written as JSON.
    #[error("the record cannot be written as JSON: {0}")]
    NotJson(#[source] Arc<serde_json::Error>),
}

/// One invocation's stream batch: the payload of the relay's event source mapping.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StreamBatch {
    /// `Records`, in stream order.
    pub records: Vec<StreamRecord>,
}

/// One stream record: its JSON text as delivered, and what the relay reads from it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StreamRecord {
    /// The record exactly as Lambda delivered it.
    pub raw: Box<RawValue>,
    /// What the relay reads, or why the record cannot be read as a stream record.
    pub decoded: Result<RecordFields, RecordError>,
    /// `dynamodb.SequenceNumber`, also when the rest cannot be read.
    pub sequence_number: Option<String>,
}

/// The fields of a stream record the relay reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[non_exhaustive]
pub struct RecordFields {
    /// `eventName`: `INSERT`, `MODIFY` or `REMOVE`.
    #[serde(rename = "eventName", default)]
    pub event_name: String,
    /// `eventSourceARN`: the stream's ARN, `arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>`.
    #[serde(rename = "eventSourceARN", default)]
    pub event_source_arn: Option<String>,
    /// `userIdentity`: set on deletions by DynamoDB's TTL process.
    #[serde(rename = "userIdentity", default)]
    pub user_identity: Option<UserIdentity>,
    /// `dynamodb`.
    #[serde(default)]
    pub dynamodb: Change,
}

/// `userIdentity` of a stream record.
#[derive(Debug, Clone, Default, Deserialize)]
#[non_exhaustive]
pub struct UserIdentity {
    /// `type`, e.g. `Service`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `principalId`, e.g. `dynamodb.amazonaws.com`.
    #[serde(rename = "principalId", default)]
    pub principal_id: String,
}

/// `dynamodb` of a stream record.
#[derive(Debug, Clone, Default, Deserialize)]
#[non_exhaustive]
pub struct Change {
    /// `SequenceNumber`.
    #[serde(rename = "SequenceNumber", default)]
    pub sequence_number: Option<String>,
    /// `NewImage`: the item after the change, DynamoDB JSON (stream view `NEW_IMAGE`).
    #[serde(rename = "NewImage", default)]
    pub new_image: Option<serde_dynamo::Item>,
}

impl StreamRecord {
    /// Reads a record from its JSON text.
    pub fn from_raw(raw: Box<RawValue>) -> Self {
        #[derive(Deserialize, Default)]
        struct Sequence {
            #[serde(rename = "SequenceNumber", default)]
            sequence_number: Option<String>,
        }
        #[derive(Deserialize, Default)]
        struct Lenient {
            #[serde(default)]
            dynamodb: Sequence,
        }
        let decoded = serde_json::from_str::<RecordFields>(raw.get()).map_err(|e| RecordError::NotAStreamRecord(Arc::new(e)));
        // An unreadable record's sequence number is read on its own, so that it can still be
        // reported in `batchItemFailures` (if its dead-letter write fails).
        let sequence_number = match &decoded {
            Ok(fields) => fields.dynamodb.sequence_number.clone(),
            Err(_) => serde_json::from_str::<Lenient>(raw.get()).unwrap_or_default().dynamodb.sequence_number,
        }
        .filter(|s| !s.is_empty());
        Self { raw, decoded, sequence_number }
    }

    /// `eventSourceARN`, when it can be read.
    pub fn event_source_arn(&self) -> Option<&str> {
        self.decoded.as_ref().ok().and_then(|f| f.event_source_arn.as_deref())
    }
}

impl<'de> Deserialize<'de> for StreamBatch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(rename = "Records", default)]
            records: Vec<Box<RawValue>>,
        }
        let raw = Raw::deserialize(deserializer)?;
        Ok(StreamBatch { records: raw.records.into_iter().map(StreamRecord::from_raw).collect() })
    }
}

impl StreamBatch {
    /// The batch of an `aws_lambda_events` DynamoDB event (for callers that hold one; the
    /// relay function decodes Lambda's payload straight into a [`StreamBatch`]). Each record is
    /// written back to JSON as `aws_lambda_events` serialises it.
    pub fn from_event(event: &aws_lambda_events::dynamodb::Event) -> Self {
        let records = event
            .records
            .iter()
            .map(|record| match serde_json::value::to_raw_value(record) {
                Ok(raw) => StreamRecord::from_raw(raw),
                Err(e) => StreamRecord {
                    raw: RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("`null` is JSON")),
                    decoded: Err(RecordError::NotJson(Arc::new(e))),
                    sequence_number: record.change.sequence_number.clone(),
                },
            })
            .collect();
        StreamBatch { records }
    }
}

/// The table name in a DynamoDB table or stream ARN
/// (`arn:aws:dynamodb:<region>:<account>:table/<table>[/stream/<label>]`), or `arn` itself when
/// it is not an ARN (a bare table name).
pub fn table_name(arn: &str) -> &str {
    match arn.split_once(":table/") {
        Some((_, rest)) => rest.split('/').next().unwrap_or(rest),
        None => arn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_verbatim_and_read_once() {
        let text = r#"{"Records":[{"eventID":"1","eventName":"INSERT","eventSourceARN":"arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026","dynamodb":{"SequenceNumber":"42","NewImage":{"event_id":{"S":"e-1"}},"SizeBytes":1.0E2}}]}"#;
        let batch: StreamBatch = serde_json::from_str(text).unwrap();
        let record = &batch.records[0];
        assert_eq!(record.raw.get(), &text[12..text.len() - 2], "byte for byte");
        let fields = record.decoded.as_ref().unwrap();
        assert_eq!(fields.event_name, "INSERT");
        assert_eq!(record.sequence_number.as_deref(), Some("42"));
        assert_eq!(table_name(fields.event_source_arn.as_deref().unwrap()), "outbox");
        assert!(fields.dynamodb.new_image.as_ref().unwrap().get("event_id").is_some());
    }

    #[test]
    fn an_unreadable_record_keeps_its_reason_and_sequence_number() {
        let text = r#"{"Records":[{"eventName":7,"dynamodb":{"SequenceNumber":"43"}},"hello"]}"#;
        let batch: StreamBatch = serde_json::from_str(text).unwrap();
        let reason = batch.records[0].decoded.as_ref().unwrap_err();
        assert!(matches!(reason, RecordError::NotAStreamRecord(_)), "{reason:?}");
        assert!(reason.to_string().starts_with("not a DynamoDB stream record: invalid type"), "{reason}");
        assert!(std::error::Error::source(reason).is_some(), "the serde_json error is kept as the source");
        assert_eq!(batch.records[0].sequence_number.as_deref(), Some("43"));
        assert!(matches!(batch.records[1].decoded, Err(RecordError::NotAStreamRecord(_))));
        assert_eq!(batch.records[1].sequence_number, None);
    }

    #[test]
    fn table_names_from_arns() {
        assert_eq!(table_name("arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026-01-01T00:00:00.000"), "outbox");
        assert_eq!(table_name("arn:aws:dynamodb:us-east-1:123456789012:table/outbox"), "outbox");
        assert_eq!(table_name("outbox"), "outbox");
    }
}
