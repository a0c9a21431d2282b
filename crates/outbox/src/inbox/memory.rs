//! An in-memory inbox for your unit tests: the same answers as the DynamoDB [`Inbox`](super::Inbox)
//! — claims, duplicates, payload mismatches, guarded leases, and per-aggregate ordering under
//! [`Ordered`](crate::ordering::Ordered), whose rules run on it unchanged (its
//! [`OrderingStore`](crate::ordering::OrderingStore) is in `ordering/memory.rs`) — without AWS. In transactional mode it cannot evaluate your condition expressions: it *records* the
//! writes it was given ([`MemoryInbox::applied`]) instead of executing them, and answers what
//! you queue with [`MemoryInbox::fail_next`] (a business condition failing, a conflict) to
//! drive the other paths of your handler.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use outbox::inbox::{InboxOutcome, InboxStore, MemoryInbox, PayloadHash};
//! # let metadata: outbox::envelope::EventMetadata = serde_json::from_str(r#"{"id":"e-1","type":"OrderCreated","version":1,"source":"s","time":"t","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"c"}"#)?;
//! let inbox = MemoryInbox::new("reserve-inventory");
//! let data = PayloadHash::of(r#"{"order_id":"o-1","quantity":2}"#);
//! assert_eq!(inbox.apply(&metadata, &data, vec![]).await?, InboxOutcome::Applied);
//! // The same JSON, serialised otherwise: a duplicate.
//! let again = PayloadHash::of(r#"{ "quantity": 2, "order_id": "o-1" }"#);
//! assert_eq!(inbox.apply(&metadata, &again, vec![]).await?, InboxOutcome::Duplicate);
//! let other = PayloadHash::of(r#"{"order_id":"o-1","quantity":3}"#);
//! assert!(inbox.apply(&metadata, &other, vec![]).await.is_err()); // PayloadMismatch
//! assert_eq!(inbox.applied().len(), 1);
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::types::TransactWriteItem;
use chrono::{DateTime, Utc};

use super::{Claim, InboxError, InboxOutcome, InboxStore, Lease, PayloadHash, RecordedOutcome};
use crate::envelope::EventMetadata;
use crate::ordering::{OrderingRow, ParkedEvent, Step, StepAnswer};
use crate::transaction::TransactionError;

/// One transaction the store committed (in place of executing it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AppliedEvent {
    /// `detail.metadata.id`.
    pub event_id: String,
    /// The payload hash it was claimed with, as the DynamoDB row stores it
    /// ([`PayloadHash::stored`]).
    pub payload_hash: String,
    /// The consumer's writes, outbox puts included, in request order (without the inbox claim).
    pub writes: Vec<TransactWriteItem>,
    /// What the event did, as recorded on its inbox row ([`InboxStore::apply_recording`]).
    pub outcome: Option<RecordedOutcome>,
}

/// An answer to give instead of committing, queued with [`MemoryInbox::fail_next`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Injected {
    /// The condition of the consumer's write `index` (request order among its writes, outbox puts
    /// included) is false: [`InboxOutcome::BusinessConditionFailed`].
    ConditionFailed {
        /// Position among the writes given to `apply`.
        index: usize,
    },
    /// `TransactionConflict` or throttling: a retryable [`InboxError::Transaction`].
    Conflict,
}

#[derive(Debug, Clone)]
enum Row {
    Applied { payload_hash: PayloadHash },
    InProgress { payload_hash: PayloadHash, token: String, lease_expires_at: i64 },
    Completed { payload_hash: PayloadHash, result: Option<String> },
}

impl Row {
    fn payload_hash(&self) -> &PayloadHash {
        match self {
            Row::Applied { payload_hash } | Row::InProgress { payload_hash, .. } | Row::Completed { payload_hash, .. } => payload_hash,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct State {
    rows: HashMap<String, Row>,
    applied: Vec<AppliedEvent>,
    injected: VecDeque<Injected>,
    /// Ordering rows by `<aggregate_type>#<aggregate_id>`.
    pub(crate) ordering: HashMap<String, OrderingRow>,
    /// Parked events by `<aggregate_type>#<aggregate_id>#<waits_for>`.
    pub(crate) parked: HashMap<String, ParkedEvent>,
    /// Separate `unpark` calls still to fail ([`MemoryInbox::fail_next_unparks`]).
    pub(crate) unparks_to_fail: usize,
    /// Reads of one parked row still to fail ([`MemoryInbox::fail_next_parked_reads`]).
    pub(crate) parked_reads_to_fail: usize,
}

/// The in-memory [`InboxStore`] (see the [module docs](crate::inbox)). Clones share one state.
#[derive(Debug, Clone)]
pub struct MemoryInbox {
    consumer: String,
    state: Arc<Mutex<State>>,
}

impl MemoryInbox {
    /// An empty inbox of `consumer`.
    pub fn new(consumer: impl Into<String>) -> Self {
        Self { consumer: consumer.into(), state: Arc::default() }
    }

    /// Makes the next `apply` answer `answer` instead of committing (answers are used in order).
    pub fn fail_next(&self, answer: Injected) -> &Self {
        self.lock().injected.push_back(answer);
        self
    }

    /// The transactions committed so far, in order.
    pub fn applied(&self) -> Vec<AppliedEvent> {
        self.lock().applied.clone()
    }

    /// Whether `event_id` is recorded (applied, in progress or completed).
    pub fn contains(&self, event_id: &str) -> bool {
        self.lock().rows.contains_key(event_id)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a test assertion elsewhere; the state
        // is a plain map and stays consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The outcome recorded for `event_id` (None: not applied, or applied without one).
    pub fn outcome(&self, event_id: &str) -> Option<RecordedOutcome> {
        self.lock().applied.iter().find(|a| a.event_id == event_id).and_then(|a| a.outcome.clone())
    }

    /// One transaction: the claim; with `step` (the ordering layer's, `ordering/memory.rs`)
    /// the ordering row's condition ([`Step::admits`]) and, for an unparking step, the parked row
    /// held by the event; the injected answers; then the commit.
    pub(crate) fn apply_now(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        step: Option<Step>,
    ) -> Result<StepAnswer, InboxError> {
        let mut state = self.lock();
        if let Some(row) = state.rows.get(&metadata.id) {
            if !payload_hash.matches(row.payload_hash().stored()) {
                return Err(InboxError::mismatch(&metadata.id, row.payload_hash().stored().to_owned(), payload_hash));
            }
            return Ok(StepAnswer::Settled(InboxOutcome::Duplicate));
        }
        let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
        if let Some(step) = step {
            let row = state.ordering.get(&aggregate).copied();
            if !step.admits(row.as_ref()) {
                return Ok(StepAnswer::OrderingRefused(row));
            }
            if let crate::ordering::Advance::Unpark(waits_for) = step.advance {
                if state.parked.get(&format!("{aggregate}#{waits_for}")).is_none_or(|p| p.event_id != metadata.id) {
                    return Ok(StepAnswer::ParkedRowRefused);
                }
            }
        }
        match state.injected.pop_front() {
            Some(Injected::ConditionFailed { index }) => return Ok(StepAnswer::Settled(InboxOutcome::BusinessConditionFailed { index, item: None })),
            Some(Injected::Conflict) => {
                let injected = crate::aws_error::AwsError::cancelled(&["TransactionConflict (injected)".to_owned()], true, None, None);
                return Err(InboxError::Transaction(TransactionError::Retryable(injected)));
            }
            None => {}
        }
        if let Some(step) = step {
            if let crate::ordering::Advance::Unpark(waits_for) = step.advance {
                state.parked.remove(&format!("{aggregate}#{waits_for}"));
            }
            let row = step.advanced(state.ordering.get(&aggregate));
            state.ordering.insert(aggregate, row);
        }
        state.rows.insert(metadata.id.clone(), Row::Applied { payload_hash: payload_hash.clone() });
        state.applied.push(AppliedEvent {
            event_id: metadata.id.clone(),
            payload_hash: payload_hash.stored().to_owned(),
            writes,
            outcome: outcome.cloned(),
        });
        Ok(StepAnswer::Settled(InboxOutcome::Applied))
    }

    /// [`MemoryInbox::apply_now`] without ordering.
    fn apply_claim(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
    ) -> Result<InboxOutcome, InboxError> {
        match self.apply_now(metadata, payload_hash, writes, outcome, None)? {
            StepAnswer::Settled(outcome) => Ok(outcome),
            // Without a step nothing else is answered; a refusal here would be this store's bug.
            other => Err(InboxError::Sdk {
                action: "apply",
                error: crate::aws_error::AwsError::construction("TransactWriteItems", format!("an ordering answer without ordering: {other:?}")),
            }),
        }
    }

    fn begin_now(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, lease_until: DateTime<Utc>) -> Result<Claim, InboxError> {
        let mut state = self.lock();
        match state.rows.get(&metadata.id) {
            Some(row) if !payload_hash.matches(row.payload_hash().stored()) => {
                return Err(InboxError::mismatch(&metadata.id, row.payload_hash().stored().to_owned(), payload_hash));
            }
            Some(Row::Completed { result, .. }) => return Ok(Claim::Completed { result: result.clone() }),
            Some(Row::Applied { .. }) => return Ok(Claim::Completed { result: None }),
            Some(Row::InProgress { lease_expires_at, .. }) if *lease_expires_at >= Utc::now().timestamp_millis() => {
                return Err(InboxError::InProgress { event_id: metadata.id.clone(), lease_expires_at: *lease_expires_at });
            }
            // Absent, or a lease that ended: claim (take over).
            Some(Row::InProgress { .. }) | None => {}
        }
        let token = uuid::Uuid::new_v4().to_string();
        let lease_expires_at = lease_until.timestamp_millis();
        state.rows.insert(metadata.id.clone(), Row::InProgress { payload_hash: payload_hash.clone(), token: token.clone(), lease_expires_at });
        Ok(Claim::Acquired(Lease { event_id: metadata.id.clone(), token, lease_expires_at }))
    }

    fn complete_now(&self, lease: &Lease, result: Option<&str>) -> Result<(), InboxError> {
        let mut state = self.lock();
        match state.rows.get(&lease.event_id) {
            Some(Row::InProgress { token, payload_hash, .. }) if *token == lease.token => {
                let payload_hash = payload_hash.clone();
                state.rows.insert(lease.event_id.clone(), Row::Completed { payload_hash, result: result.map(str::to_owned) });
                Ok(())
            }
            _ => Err(InboxError::LeaseLost(lease.event_id.clone())),
        }
    }

    fn release_now(&self, lease: &Lease) {
        let mut state = self.lock();
        if matches!(state.rows.get(&lease.event_id), Some(Row::InProgress { token, .. }) if *token == lease.token) {
            state.rows.remove(&lease.event_id);
        }
    }
}

impl InboxStore for MemoryInbox {
    fn consumer(&self) -> &str {
        &self.consumer
    }

    fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        std::future::ready(self.apply_claim(metadata, payload_hash, writes, None))
    }

    fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        std::future::ready(self.apply_claim(metadata, payload_hash, writes, Some(outcome)))
    }

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        let hash = match self.lock().rows.get(event_id) {
            Some(Row::Applied { payload_hash } | Row::Completed { payload_hash, .. }) => Some(payload_hash.sha256().to_owned()),
            Some(Row::InProgress { .. }) | None => None,
        };
        std::future::ready(Ok(hash))
    }

    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Claim, InboxError>> + Send {
        std::future::ready(self.begin_now(metadata, payload_hash, lease_until))
    }

    fn complete(&self, lease: &Lease, result: Option<&str>) -> impl Future<Output = Result<(), InboxError>> + Send {
        std::future::ready(self.complete_now(lease, result))
    }

    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), InboxError>> + Send {
        self.release_now(lease);
        std::future::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::{Guarded, GuardedError};

    use crate::fixtures::metadata;

    #[tokio::test]
    async fn guarded_runs_once_replays_and_releases_on_failure() {
        let inbox = MemoryInbox::new("mailer");
        let until = Utc::now() + chrono::Duration::seconds(30);
        let meta = metadata("g-1", 1);
        let failed = inbox.guarded(&meta, &PayloadHash::of("h"), until, || async { Err::<u32, _>("partner down") }).await;
        assert!(matches!(failed, Err(GuardedError::Effect("partner down"))));
        assert!(!inbox.contains("g-1"), "a failed effect releases the claim");
        let runs = std::sync::atomic::AtomicU32::new(0);
        let effect = || async {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(7_u32)
        };
        assert_eq!(inbox.guarded(&meta, &PayloadHash::of("h"), until, effect).await.unwrap(), Guarded::Ran(7));
        assert_eq!(inbox.guarded(&meta, &PayloadHash::of("h"), until, effect).await.unwrap(), Guarded::Replayed(7));
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        let mismatch = inbox.guarded(&meta, &PayloadHash::of("other"), until, effect).await.unwrap_err();
        assert!(matches!(mismatch, GuardedError::Inbox(InboxError::PayloadMismatch { .. })) && !mismatch.is_retryable());
    }

    #[tokio::test]
    async fn a_live_lease_blocks_and_an_ended_one_is_taken_over() {
        let inbox = MemoryInbox::new("mailer");
        let meta = metadata("l-1", 1);
        let Claim::Acquired(old) = inbox.begin(&meta, &PayloadHash::of("h"), Utc::now() + chrono::Duration::seconds(30)).await.unwrap() else {
            panic!("first claim")
        };
        assert!(matches!(inbox.begin(&meta, &PayloadHash::of("h"), Utc::now()).await, Err(InboxError::InProgress { .. })));
        let meta2 = metadata("l-2", 1);
        let Claim::Acquired(crashed) = inbox.begin(&meta2, &PayloadHash::of("h"), Utc::now() - chrono::Duration::seconds(1)).await.unwrap() else {
            panic!()
        };
        let Claim::Acquired(taker) = inbox.begin(&meta2, &PayloadHash::of("h"), Utc::now() + chrono::Duration::seconds(30)).await.unwrap() else {
            panic!("an ended lease is taken over")
        };
        assert!(matches!(inbox.complete(&crashed, None).await, Err(InboxError::LeaseLost(_))));
        inbox.complete(&taker, Some("1")).await.unwrap();
        inbox.complete(&old, None).await.unwrap();
        assert_eq!(inbox.begin(&meta2, &PayloadHash::of("h"), Utc::now()).await.unwrap(), Claim::Completed { result: Some("1".into()) });
    }
}
