//! The inbox: turns at-least-once delivery into exactly-once effects.
//!
//! EventBridge delivers at least once, and the relay may publish an event twice (each time with
//! a new envelope `id`). A consumer therefore records every event it applied in the inbox table,
//! keyed by *consumer name + `detail.metadata.id`* (so two consumers of one event never block each
//! other), and does so **in the same `TransactWriteItems` call as its business writes**:
//!
//! * the inbox row is put with `attribute_not_exists(pk) OR expires_at < :now` (a row whose TTL
//!   has passed counts as absent: DynamoDB deletes expired items lazily, within days);
//! * if the transaction commits, the event took effect exactly once;
//! * if the inbox condition fails, the event was applied before: a duplicate, no effect;
//! * if a business condition fails (e.g. not enough stock), that is a business outcome for the
//!   caller to handle, not an error; nothing was written, not even the inbox row;
//! * a crash before commit leaves nothing, so the retry applies the event normally.
//!
//! Rows carry `expires_at` (epoch seconds, the table's TTL attribute), set to now + retention
//! (default 7 days: longer than EventBridge's 24-hour retry window and a DLQ replay).
//! Source for the transaction semantics: the `TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};
use sha2::{Digest, Sha256};

use crate::envelope::EventMetadata;
use crate::transaction::{all_old, transact_write, TransactionError};

/// How one delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboxOutcome {
    /// The inbox row and the business writes committed together: the event took effect.
    Applied,
    /// The event was applied before (same consumer, same event id): nothing was written.
    Duplicate,
    /// Business write `index` (0-based, among the caller's writes) had a false condition.
    /// Nothing was written, not even the inbox row.
    BusinessConditionFailed {
        /// Position among the caller's writes.
        index: usize,
    },
}

/// A delivery that could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The same event id arrived with a different payload: never silently skipped.
    #[error("event {event_id} was applied before with a different payload (stored hash {stored}, this delivery {delivered})")]
    PayloadMismatch {
        /// The event id.
        event_id: String,
        /// Hash stored with the first delivery.
        stored: String,
        /// Hash of this delivery.
        delivered: String,
    },
    /// The transaction failed (retryable or not; see [`TransactionError::is_retryable`]).
    #[error(transparent)]
    Transaction(#[from] TransactionError),
}

impl InboxError {
    /// Whether retrying the delivery later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, InboxError::Transaction(e) if e.is_retryable())
    }
}

/// The inbox of one consumer.
#[derive(Debug, Clone)]
pub struct Inbox {
    client: Client,
    table: String,
    consumer: String,
    retention: Duration,
}

impl Inbox {
    /// The inbox of `consumer` in `table`; rows expire `retention` after they are written.
    pub fn new(client: Client, table: impl Into<String>, consumer: impl Into<String>, retention: Duration) -> Self {
        Self { client, table: table.into(), consumer: consumer.into(), retention }
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Partition key of the inbox row for `event_id`: `<consumer>#<event_id>`.
    pub fn key(&self, event_id: &str) -> String {
        format!("{}#{}", self.consumer, event_id)
    }

    /// SHA-256 (hex) of the event data as delivered, stored to detect an id reused for a
    /// different payload.
    pub fn payload_hash(data: &str) -> String {
        hex::encode(Sha256::digest(data.as_bytes()))
    }

    /// The conditional put that claims `metadata.id` for this consumer.
    pub fn claim(&self, metadata: &EventMetadata, payload_hash: &str, now: DateTime<Utc>) -> TransactWriteItem {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", s(&self.key(&metadata.id)))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("source", s(&metadata.source))
            .item("subject", s(&metadata.subject))
            .item("sequence", AttributeValue::N(metadata.sequence.to_string()))
            .item("payload_hash", s(payload_hash))
            .item("processed_at", s(&now.to_rfc3339_opts(SecondsFormat::Millis, true)))
            .item("expires_at", n(now.timestamp() + self.retention.as_secs() as i64))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", n(now.timestamp()))
            .return_values_on_condition_check_failure(all_old())
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// Applies `writes` once for the event: one transaction of the inbox claim plus `writes`.
    ///
    /// # Errors
    /// [`InboxError::PayloadMismatch`] if the event id was applied with another payload;
    /// [`InboxError::Transaction`] otherwise (check [`InboxError::is_retryable`]).
    pub async fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &str,
        writes: Vec<TransactWriteItem>,
    ) -> Result<InboxOutcome, InboxError> {
        let mut items = Vec::with_capacity(writes.len() + 1);
        items.push(self.claim(metadata, payload_hash, Utc::now()));
        items.extend(writes);
        match transact_write(&self.client, items).await {
            Ok(()) => Ok(InboxOutcome::Applied),
            Err(TransactionError::ConditionFailed { index: 0, item }) => {
                let stored = item
                    .as_ref()
                    .and_then(|i| i.get("payload_hash"))
                    .and_then(|v| v.as_s().ok())
                    .cloned();
                match stored {
                    Some(stored) if stored != payload_hash => Err(InboxError::PayloadMismatch {
                        event_id: metadata.id.clone(),
                        stored,
                        delivered: payload_hash.to_owned(),
                    }),
                    _ => Ok(InboxOutcome::Duplicate),
                }
            }
            Err(TransactionError::ConditionFailed { index, .. }) => {
                Ok(InboxOutcome::BusinessConditionFailed { index: index - 1 })
            }
            Err(e) => Err(e.into()),
        }
    }
}
