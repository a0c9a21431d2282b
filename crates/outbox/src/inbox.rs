//! The inbox: turns at-least-once delivery into exactly-once effects. A small store, as
//! Powertools' `BasePersistenceLayer`: [`InboxStore`] asks five operations of a store (the
//! consumer's name, a transactional claim, and guarded mode's claim, completion and release) and
//! provides the rest on top (recording an outcome, the claim-check read, [`InboxStore::guarded`]).
//! Per-aggregate ordering is a layer of its own over a store: [`crate::ordering`].
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
//! **Guarded mode** ([`Inbox::begin`], [`Inbox::complete`], [`Inbox::release`]) is for effects
//! outside DynamoDB (an HTTP call, an email), which no transaction can cover:
//!
//! | row | meaning | a delivery that finds it |
//! |---|---|---|
//! | absent, or `expires_at` passed | never claimed | claims it: `IN_PROGRESS` with a lease |
//! | `IN_PROGRESS`, lease live | another invocation is on it | [`InboxError::InProgress`] (retryable) |
//! | `IN_PROGRESS`, lease ended | its invocation died | takes it over, conditional on the old lease |
//! | `COMPLETED` | done | [`Claim::Completed`] with the stored result |
//!
//! The lease ends when the claiming invocation's time ends (the Lambda context's deadline), or
//! after a configured maximum when that is unknown — never "forever", so a crash between claim
//! and effect only delays the retry. Completing and releasing are conditioned on the lease
//! token, so an invocation whose lease was taken over cannot overwrite the new owner.
//!
//! Claim rows carry the event's W3C trace id ([`TRACE_ID`], when its metadata has a
//! `traceparent`), so `outbox trace` names the trace after the outbox item has expired; it is
//! part of the put the claim makes anyway (no extra call).
//!
//! Claim rows carry `expires_at` (epoch seconds, the table's TTL attribute), set to now + retention.
//! The retention must outlive every redelivery of the event — the dead-letter queues' retention
//! plus a redrive margin (`outbox_lambda::inbox_retention`, 16 days by default), or a message
//! redriven after its row expired is applied twice.
//! Source for the transaction semantics: the `TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, SecondsFormat, Utc};

use crate::aws_error::AwsError;
use crate::envelope::EventMetadata;
use crate::transaction::{all_old, transact_write, TransactionError};
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;

mod guarded;
mod memory;
mod payload_hash;
mod store;

pub use guarded::{Guarded, GuardedError};
pub use memory::{AppliedEvent, Injected, MemoryInbox};
pub use payload_hash::{PayloadHash, CANONICAL_PREFIX};
pub use store::InboxStore;

/// How one delivery ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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
        /// The stored item, when that write asked for it (`ReturnValuesOnConditionCheckFailure=ALL_OLD`).
        item: Option<crate::transaction::Item>,
    },
}

/// What an applied event did, recorded on its inbox row (attributes `outcome` and `reason`) so
/// that `trace` can say it: the handler's outcome (e.g. `reserved`), or `nothing_to_do` with the
/// reason a fallback gave (e.g. "settled by another event").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RecordedOutcome {
    /// Short machine-readable outcome (`reserved`, `nothing_to_do`, …).
    pub outcome: String,
    /// Why, in words (for `nothing_to_do`).
    pub reason: Option<String>,
}

impl RecordedOutcome {
    /// The outcome `outcome`, without a reason.
    pub fn new(outcome: impl Into<String>) -> Self {
        Self { outcome: outcome.into(), reason: None }
    }

    /// `nothing_to_do`, because of `reason`.
    pub fn nothing_to_do(reason: impl Into<String>) -> Self {
        Self { outcome: NOTHING_TO_DO.into(), reason: Some(reason.into()) }
    }
}

/// The outcome recorded for an event a fallback found nothing to do for.
pub const NOTHING_TO_DO: &str = "nothing_to_do";

/// Attribute of an inbox row holding its event's W3C trace id (32 hex digits), when the event's
/// metadata has a `traceparent`.
pub const TRACE_ID: &str = "trace_id";

/// A delivery that could not be settled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The same event id arrived with a different payload (compared as [`PayloadHash::matches`]
    /// says: the JSON's canonical form, so other whitespace or member order is the same
    /// payload): never silently skipped.
    #[error("event {event_id} was applied before with a different payload (stored hash {stored}, this delivery {delivered})")]
    PayloadMismatch {
        /// The event id.
        event_id: String,
        /// Hash stored with the first delivery (the row's `payload_hash`).
        stored: String,
        /// Hash of this delivery, in the stored hash's form ([`PayloadHash::compared_with`]).
        delivered: String,
    },
    /// The transaction failed (retryable or not; see [`TransactionError::is_retryable`]).
    #[error(transparent)]
    Transaction(#[from] TransactionError),
    /// Guarded mode: another invocation holds a live lease on the event.
    #[error("event {event_id} is being processed by another invocation (lease until {lease_expires_at} epoch ms); retry later")]
    InProgress {
        /// The event id.
        event_id: String,
        /// When the holder's lease ends, epoch milliseconds.
        lease_expires_at: i64,
    },
    /// Guarded mode: the lease ended and another invocation took the event over; this
    /// invocation must not report its result.
    #[error("the lease on event {0} was taken over by another invocation")]
    LeaseLost(String),
    /// Ordering: the event's required predecessor has not been applied (or released) yet.
    #[error("sequence gap on {aggregate}: sequence {got} waits for sequence {expected} (last applied {last_applied})")]
    SequenceGap {
        /// `<aggregate_type>#<aggregate_id>`.
        aggregate: String,
        /// The sequence that must be applied or released first ([`Ordered::required_predecessor`](crate::ordering::Ordered::required_predecessor)).
        expected: u64,
        /// The event's sequence.
        got: u64,
        /// The aggregate's `last_sequence` (0: none yet).
        last_applied: u64,
    },
    /// A DynamoDB call other than the transaction failed (retryable or not as
    /// [`AwsError`] classifies it; the service's code and message are kept).
    #[error("inbox {action} failed: {error}")]
    Sdk {
        /// What was being done.
        action: &'static str,
        /// The classified AWS error.
        #[source]
        error: AwsError,
    },
}

impl InboxError {
    /// [`InboxError::PayloadMismatch`] of `event_id`: `stored` (the row's `payload_hash`) does not
    /// match `delivered` ([`PayloadHash::matches`]); the error shows the delivery's hash in the
    /// stored hash's form.
    pub fn mismatch(event_id: &str, stored: String, delivered: &PayloadHash) -> Self {
        let delivered = delivered.compared_with(&stored).to_owned();
        InboxError::PayloadMismatch { event_id: event_id.to_owned(), stored, delivered }
    }

    /// Whether DynamoDB refused the request because the table has no such index (a
    /// `ValidationException` naming it): e.g. an inbox table without [`PARKED_INDEX`](crate::ordering::PARKED_INDEX).
    pub fn is_missing_index(&self) -> bool {
        match self {
            InboxError::Sdk { error, .. } => error.code() == Some("ValidationException") && error.to_string().contains("index"),
            _ => false,
        }
    }

    /// Whether retrying the delivery later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            InboxError::Transaction(e) => e.is_retryable(),
            InboxError::Sdk { error, .. } => error.is_retryable(),
            InboxError::InProgress { .. } | InboxError::SequenceGap { .. } => true,
            InboxError::PayloadMismatch { .. } | InboxError::LeaseLost(_) => false,
        }
    }
}

/// Guarded mode: the answer of [`Inbox::begin`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// This invocation holds the event until `lease_expires_at` (epoch ms): perform the effect,
    /// then [`Inbox::complete`] (or [`Inbox::release`] on failure).
    Acquired(Lease),
    /// The event was completed before; `result` is what the first run stored.
    Completed {
        /// The stored result (e.g. a JSON document), if any.
        result: Option<String>,
    },
}

/// A held claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The event id.
    pub event_id: String,
    /// Unique per claim; completion and release are conditioned on it.
    pub token: String,
    /// When the lease ends, epoch milliseconds.
    pub lease_expires_at: i64,
}

const IN_PROGRESS: &str = "IN_PROGRESS";
const COMPLETED: &str = "COMPLETED";

fn sdk<E>(action: &'static str, operation: &'static str, error: &SdkError<E, HttpResponse>) -> InboxError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    InboxError::Sdk { action, error: AwsError::from_sdk(operation, error) }
}

/// One DynamoDB item, by attribute name.
type Item = std::collections::HashMap<String, AttributeValue>;

/// What a refused claim (the inbox row's condition false, `item` as stored) means: a duplicate
/// when the stored hash matches the delivery's ([`PayloadHash::matches`]).
///
/// # Errors
/// [`InboxError::PayloadMismatch`] when it does not.
pub(crate) fn claim_refused(metadata: &EventMetadata, payload_hash: &PayloadHash, item: Option<&Item>) -> Result<InboxOutcome, InboxError> {
    let stored = item.and_then(|i| i.get("payload_hash")).and_then(|v| v.as_s().ok()).cloned();
    match stored {
        Some(stored) if !payload_hash.matches(&stored) => Err(InboxError::mismatch(&metadata.id, stored, payload_hash)),
        _ => Ok(InboxOutcome::Duplicate),
    }
}

/// The inbox of one consumer, in a DynamoDB table.
#[derive(Debug, Clone)]
pub struct Inbox {
    client: Client,
    table: String,
    consumer: String,
    retention: Duration,
}

impl Inbox {
    /// The inbox of `consumer` in `table`; rows expire `retention` after they are written (at
    /// most [`crate::envelope::MAX_RETENTION`]; a longer one is capped to it, so a row is never
    /// written already expired).
    pub fn new(client: Client, table: impl Into<String>, consumer: impl Into<String>, retention: Duration) -> Self {
        Self { client, table: table.into(), consumer: consumer.into(), retention }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The SHA-256 (hex) of the payload bytes `event_id` was applied with, when this consumer's
    /// inbox holds a live record of it (transactional claim or completed guarded claim,
    /// `expires_at` not passed): the row's `payload_sha256`, or for a row written before that
    /// attribute its unprefixed `payload_hash` (the same SHA-256; a `jcs1:` hash is not one, so
    /// such a row answers `None`). A strongly consistent `GetItem` ([`InboxStore::applied_sha256`]).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn applied_sha256(&self, event_id: &str) -> Result<Option<String>, InboxError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(event_id)))
            .consistent_read(true)
            .projection_expression("payload_hash, payload_sha256, expires_at, #status")
            .expression_attribute_names("#status", "status")
            .send()
            .await
            .map_err(|e| sdk("read the inbox row", "GetItem", &e))?;
        let Some(item) = out.item() else { return Ok(None) };
        let expires_at = item.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
        // The claim's own condition: a row whose expires_at has passed is free to claim again.
        if expires_at.is_none_or(|at| at < Utc::now().timestamp()) {
            return Ok(None);
        }
        if item.get("status").and_then(|v| v.as_s().ok()).is_some_and(|status| status != COMPLETED) {
            return Ok(None);
        }
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        Ok(text("payload_sha256").or_else(|| text("payload_hash").filter(|h| !h.contains(':'))))
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

    /// The conditional put that claims `metadata.id` for this consumer.
    pub fn claim(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, now: DateTime<Utc>) -> TransactWriteItem {
        self.claim_recording(metadata, payload_hash, now, None)
    }

    /// [`Inbox::claim`] with the event's `outcome` (attributes `outcome`, `reason`).
    pub fn claim_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        now: DateTime<Utc>,
        outcome: Option<&RecordedOutcome>,
    ) -> TransactWriteItem {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mut put = Put::builder();
        // The event's W3C trace id, so `outbox trace` finds it once the outbox item has expired.
        if let Some(trace_id) = metadata.trace_id() {
            put = put.item(TRACE_ID, s(trace_id));
        }
        if let Some(o) = outcome {
            put = put.item("outcome", s(&o.outcome));
            if let Some(reason) = &o.reason {
                put = put.item("reason", s(reason));
            }
        }
        let put = put
            .table_name(&self.table)
            .item("pk", s(&self.key(&metadata.id)))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("source", s(&metadata.source))
            .item("subject", s(&metadata.subject))
            .item("sequence", AttributeValue::N(metadata.sequence.to_string()))
            .item("payload_hash", s(payload_hash.stored()))
            .item("payload_sha256", s(payload_hash.sha256()))
            .item("processed_at", s(&now.to_rfc3339_opts(SecondsFormat::Millis, true)))
            .item("expires_at", n(crate::envelope::expires_at(now, self.retention)))
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
    /// Applies `writes` once for the event: one transaction of the inbox claim plus `writes`.
    ///
    /// # Errors
    /// [`InboxError::PayloadMismatch`] if the event id was applied with another payload;
    /// [`InboxError::Transaction`] otherwise (check [`InboxError::is_retryable`]).
    pub async fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> Result<InboxOutcome, InboxError> {
        self.apply_recording(metadata, payload_hash, writes, None).await
    }

    /// [`Inbox::apply`], recording `outcome` on the inbox row.
    ///
    /// # Errors
    /// As [`Inbox::apply`].
    pub async fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
    ) -> Result<InboxOutcome, InboxError> {
        let mut items = Vec::with_capacity(writes.len() + 1);
        items.push(self.claim_recording(metadata, payload_hash, Utc::now(), outcome));
        items.extend(writes);
        match transact_write(&self.client, items).await {
            Ok(()) => Ok(InboxOutcome::Applied),
            Err(TransactionError::ConditionFailed { index: 0, item }) => claim_refused(metadata, payload_hash, item.as_ref()),
            Err(TransactionError::ConditionFailed { index, item }) => Ok(InboxOutcome::BusinessConditionFailed { index: index - 1, item }),
            Err(e) => Err(e.into()),
        }
    }

    /// Guarded mode: claims `metadata.id` for an effect outside DynamoDB, with a lease until
    /// `lease_until` (use the invocation's deadline; see `outbox_lambda::deadline`).
    ///
    /// # Errors
    /// [`InboxError::InProgress`] while another invocation holds a live lease;
    /// [`InboxError::PayloadMismatch`] if the id was claimed with another payload;
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn begin(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, lease_until: DateTime<Utc>) -> Result<Claim, InboxError> {
        let now = Utc::now();
        let token = uuid::Uuid::new_v4().to_string();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: i64| AttributeValue::N(v.to_string());
        let mut put = self.client.put_item();
        if let Some(trace_id) = metadata.trace_id() {
            put = put.item(TRACE_ID, s(trace_id));
        }
        let result = put
            .table_name(&self.table)
            .item("pk", s(&self.key(&metadata.id)))
            .item("consumer", s(&self.consumer))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("status", s(IN_PROGRESS))
            .item("lease_token", s(&token))
            .item("lease_expires_at", n(lease_until.timestamp_millis()))
            .item("payload_hash", s(payload_hash.stored()))
            .item("payload_sha256", s(payload_hash.sha256()))
            .item("expires_at", n(crate::envelope::expires_at(now, self.retention)))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now OR (#status = :in_progress AND lease_expires_at < :now_ms)")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":now", n(now.timestamp()))
            .expression_attribute_values(":now_ms", n(now.timestamp_millis()))
            .expression_attribute_values(":in_progress", s(IN_PROGRESS))
            .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let failed = match result {
            Ok(_) => return Ok(Claim::Acquired(Lease { event_id: metadata.id.clone(), token, lease_expires_at: lease_until.timestamp_millis() })),
            Err(e) => e,
        };
        let Some(aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(cfe)) = failed.as_service_error() else {
            return Err(sdk("claim", "PutItem", &failed));
        };
        let stored = cfe.item().cloned().unwrap_or_default();
        let text = |name: &str| stored.get(name).and_then(|v| v.as_s().ok()).cloned();
        if let Some(stored_hash) = text("payload_hash").filter(|h| !payload_hash.matches(h)) {
            return Err(InboxError::mismatch(&metadata.id, stored_hash, payload_hash));
        }
        match text("status").as_deref() {
            Some(COMPLETED) | None => Ok(Claim::Completed { result: text("result") }),
            Some(_) => Err(InboxError::InProgress {
                event_id: metadata.id.clone(),
                lease_expires_at: stored.get("lease_expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0),
            }),
        }
    }

    /// Guarded mode: marks the claimed event `COMPLETED` with `result` (returned to later
    /// duplicates), if this invocation still holds the lease.
    ///
    /// # Errors
    /// [`InboxError::LeaseLost`] when another invocation took the event over.
    pub async fn complete(&self, lease: &Lease, result: Option<&str>) -> Result<(), InboxError> {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(&lease.event_id)))
            .condition_expression("lease_token = :token")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":token", AttributeValue::S(lease.token.clone()))
            .expression_attribute_values(":completed", AttributeValue::S(COMPLETED.into()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)));
        update = match result {
            Some(r) => update
                .update_expression("SET #status = :completed, processed_at = :at, #result = :result REMOVE lease_expires_at")
                .expression_attribute_names("#result", "result")
                .expression_attribute_values(":result", AttributeValue::S(r.to_owned())),
            None => update.update_expression("SET #status = :completed, processed_at = :at REMOVE lease_expires_at"),
        };
        match update.send().await {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_)) => {
                    Err(InboxError::LeaseLost(lease.event_id.clone()))
                }
                _ => Err(sdk("complete", "UpdateItem", &e)),
            },
        }
    }

    /// Guarded mode: gives the claim up after a failed effect, so a retry can run at once.
    /// Does nothing if the lease was taken over meanwhile.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if DynamoDB fails.
    pub async fn release(&self, lease: &Lease) -> Result<(), InboxError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(self.key(&lease.event_id)))
            .condition_expression("lease_token = :token")
            .expression_attribute_values(":token", AttributeValue::S(lease.token.clone()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::delete_item::DeleteItemError::ConditionalCheckFailedException(_)) => Ok(()),
                _ => Err(sdk("release", "DeleteItem", &e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::first_event as metadata;

    fn expires_at(item: &TransactWriteItem) -> i64 {
        item.put().and_then(|p| p.item().get("expires_at")).and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap()
    }

    /// A retention too large for epoch seconds must never produce a claim that is expired when
    /// written (`expires_at < now`): the next delivery would overwrite it and apply the event again.
    #[test]
    fn a_huge_retention_never_makes_a_claim_born_expired() {
        let client =
            Client::from_conf(aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build());
        let now = Utc::now();
        for seconds in [u64::MAX, i64::MAX as u64, i64::MAX as u64 - 1, 1 << 62] {
            let inbox = Inbox::new(client.clone(), "inbox", "c", Duration::from_secs(seconds));
            let expires = expires_at(&inbox.claim(&metadata(), &PayloadHash::of("{}"), now));
            assert!(expires > now.timestamp(), "retention {seconds} s: expires_at {expires} is not after now ({})", now.timestamp());
        }
    }

    /// The claim carries the event's trace id when its metadata has a `traceparent`, and none
    /// otherwise (so `outbox trace` names the trace from an inbox row).
    #[test]
    fn a_claim_carries_the_events_trace_id() {
        let client =
            Client::from_conf(aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build());
        let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60));
        let trace_id = |m: &EventMetadata| {
            inbox.claim(m, &PayloadHash::of("{}"), Utc::now()).put().and_then(|p| p.item().get(TRACE_ID)).and_then(|v| v.as_s().ok()).cloned()
        };
        let mut traced = metadata();
        traced.traceparent = Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
        assert_eq!(trace_id(&traced).as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        let mut untraced = metadata();
        untraced.traceparent = None;
        assert_eq!(trace_id(&untraced), None);
    }

    /// What the consumer asks before fetching a claim-checked payload: the SHA-256 of the bytes
    /// of a live applied row only (a row of an earlier version: its unprefixed `payload_hash`).
    #[tokio::test]
    async fn applied_sha256_reads_live_applied_rows_only() {
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let row = |expires: i64, status: Option<&str>, hashes: &[(&str, &str)]| {
            let mut item = std::collections::HashMap::from([("expires_at".to_owned(), AttributeValue::N(expires.to_string()))]);
            for (name, value) in hashes {
                item.insert((*name).to_owned(), AttributeValue::S((*value).to_owned()));
            }
            if let Some(status) = status {
                item.insert("status".to_owned(), AttributeValue::S(status.into()));
            }
            GetItemOutput::builder().set_item(Some(item)).build()
        };
        let later = Utc::now().timestamp() + 3600;
        let current: &[(&str, &str)] = &[("payload_hash", "jcs1:c"), ("payload_sha256", "s")];
        let legacy: &[(&str, &str)] = &[("payload_hash", "h")];
        let answers = [
            (Some(row(later, None, current)), Some("s")),
            (Some(row(later, Some(COMPLETED), current)), Some("s")),
            (Some(row(later, None, legacy)), Some("h")),
            (Some(row(later, Some(COMPLETED), legacy)), Some("h")),
            (Some(row(later, None, &[("payload_hash", "jcs1:c")])), None),
            (Some(row(later, Some(IN_PROGRESS), current)), None),
            (Some(row(Utc::now().timestamp() - 10, None, current)), None),
            (Some(GetItemOutput::builder().build()), None),
        ];
        for (answer, expected) in answers {
            let answer = answer.unwrap();
            let rule = mock!(Client::get_item)
                .match_requests(|r| {
                    r.consistent_read() == Some(true)
                        && r.key().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).map(String::as_str) == Some("c#e-1")
                })
                .then_output(move || answer.clone());
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Inbox::new(client, "inbox", "c", Duration::from_secs(60));
            assert_eq!(inbox.applied_sha256("e-1").await.unwrap().as_deref(), expected);
            assert_eq!(rule.num_calls(), 1);
        }
    }
}
