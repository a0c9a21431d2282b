//! The attempt log: every attempt of each (subscriber, event), status, latency and answer
//! excerpt ([`AttemptLog`]), read by `trace` and the operator's `outbox webhooks attempts`
//! ([`read_attempts`]).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::error::{aws, DispatchError};
use crate::client::Attempt as ClientAttempt;

/// The attempts of each (subscriber, event), kept for a retention: one item per pair in the
/// inbox table, `pk = <consumer>#attempts#<subscriber>#<event id>`, its `attempts` a list of
/// `{attempt, at, status, latency_ms, outcome, excerpt}` (`excerpt`: the first 1 KiB of the
/// answer, or the transport error), `expires_at` the table's TTL attribute. `trace` and the
/// operator's `outbox webhooks attempts` read it with one `GetItem`.
#[derive(Debug, Clone)]
pub struct AttemptLog {
    client: aws_sdk_dynamodb::Client,
    table: String,
    consumer: String,
    retention: Duration,
}

/// One recorded attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// Attempt number (1: the first).
    pub attempt: u32,
    /// When it was sent (RFC 3339).
    pub at: String,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// Request latency, milliseconds.
    pub latency_ms: u64,
    /// What it meant (`delivered (HTTP 204)`, `HTTP 503`, `timeout: …`).
    pub outcome: String,
    /// The first 1 KiB of the answer's body, or the transport error.
    pub excerpt: String,
}

impl AttemptLog {
    /// The log in `table`, under `consumer` (the dispatcher's `WEBHOOK_CONSUMER_NAME`), each
    /// pair's item kept `retention` after its last attempt.
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str, consumer: &str, retention: Duration) -> Self {
        Self { client, table: table.to_owned(), consumer: consumer.to_owned(), retention }
    }

    /// The item key of (`subscriber`, `event_id`).
    pub fn key(consumer: &str, subscriber: &str, event_id: &str) -> String {
        format!("{consumer}#attempts#{subscriber}#{event_id}")
    }

    /// Appends one attempt.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record(&self, subscriber: &str, event_id: &str, attempt: u32, sent: &ClientAttempt) -> Result<(), DispatchError> {
        let record = AttemptRecord {
            attempt,
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            status: sent.status,
            latency_ms: u64::try_from(sent.latency.as_millis()).unwrap_or(u64::MAX),
            outcome: sent.outcome.reason().chars().take(200).collect(),
            excerpt: sent.excerpt.clone(),
        };
        let value: AttributeValue = serde_dynamo::to_attribute_value(&record).map_err(DispatchError::AttemptLog)?;
        let expires = outbox::envelope::expires_at(Utc::now(), self.retention);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(Self::key(&self.consumer, subscriber, event_id)))
            .update_expression("SET attempts = list_append(if_not_exists(attempts, :empty), :one), expires_at = :expires, subscriber = :subscriber, event_id = :event")
            .expression_attribute_values(":empty", AttributeValue::L(vec![]))
            .expression_attribute_values(":one", AttributeValue::L(vec![value]))
            .expression_attribute_values(":expires", AttributeValue::N(expires.to_string()))
            .expression_attribute_values(":subscriber", AttributeValue::S(subscriber.to_owned()))
            .expression_attribute_values(":event", AttributeValue::S(event_id.to_owned()))
            .send()
            .await
            .map_err(aws("UpdateItem (record the attempt)"))?;
        Ok(())
    }
}

/// The attempts recorded for (`subscriber`, `event_id`) in `table` by `consumer` (empty: none).
///
/// # Errors
/// [`DispatchError`].
pub async fn read_attempts(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    subscriber: &str,
    event_id: &str,
) -> Result<Vec<AttemptRecord>, DispatchError> {
    let out = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(AttemptLog::key(consumer, subscriber, event_id)))
        .consistent_read(true)
        .send()
        .await
        .map_err(aws("GetItem (attempts)"))?;
    let Some(list) = out.item.as_ref().and_then(|i| i.get("attempts")).cloned() else { return Ok(Vec::new()) };
    serde_dynamo::from_attribute_value(list).map_err(DispatchError::AttemptLog)
}
