//! An in-memory inbox for your unit tests: the same answers as the DynamoDB [`Inbox`](super::Inbox)
//! — claims, duplicates, payload mismatches, per-aggregate ordering, guarded leases — without
//! AWS. In transactional mode it cannot evaluate your condition expressions: it *records* the
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

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::types::TransactWriteItem;
use chrono::{DateTime, Utc};

use super::{Claim, InboxError, InboxOutcome, InboxStore, Lease, ParkedAround, ParkedEvent, ParkedList, PayloadHash, RecordedOutcome};
use crate::envelope::EventMetadata;
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
struct State {
    rows: HashMap<String, Row>,
    last_sequence: HashMap<String, u64>,
    applied: Vec<AppliedEvent>,
    injected: VecDeque<Injected>,
    /// Parked events by `<aggregate_type>#<aggregate_id>#<waits_for>`.
    parked: HashMap<String, ParkedEvent>,
    /// Separate `unpark` calls still to fail ([`MemoryInbox::fail_next_unparks`]).
    unparks_to_fail: usize,
    /// `parked` reads still to fail ([`MemoryInbox::fail_next_parked_reads`]).
    parked_reads_to_fail: usize,
}

/// The in-memory [`InboxStore`] (see the [module docs](crate::inbox)). Clones share one state.
#[derive(Debug, Clone)]
pub struct MemoryInbox {
    consumer: String,
    ordered: bool,
    types: Option<BTreeSet<String>>,
    state: Arc<Mutex<State>>,
}

impl MemoryInbox {
    /// An empty inbox of `consumer`.
    pub fn new(consumer: impl Into<String>) -> Self {
        Self { consumer: consumer.into(), ordered: false, types: None, state: Arc::default() }
    }

    /// Enables per-aggregate ordering, as [`Inbox::ordered`](super::Inbox::ordered).
    pub fn ordered(mut self) -> Self {
        self.ordered = true;
        self
    }

    /// Per-aggregate ordering for the event `types` the consumer handles, as
    /// [`Inbox::ordered_by_types`](super::Inbox::ordered_by_types).
    pub fn ordered_by_types<I: IntoIterator<Item = T>, T: Into<String>>(mut self, types: I) -> Self {
        self.ordered = true;
        self.types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// Operator release, as [`Inbox::release_through`](super::Inbox::release_through): moves the
    /// aggregate's (`<aggregate_type>#<aggregate_id>`) last sequence up to `through`; returns
    /// the one before.
    pub fn release_through(&self, aggregate: &str, through: u64) -> u64 {
        let mut state = self.lock();
        let last = state.last_sequence.get(aggregate).copied().unwrap_or(0);
        if last < through {
            state.last_sequence.insert(aggregate.to_owned(), through);
        }
        last
    }

    /// The aggregate's (`<aggregate_type>#<aggregate_id>`) last applied or released sequence.
    pub fn last_sequence(&self, aggregate: &str) -> Option<u64> {
        self.lock().last_sequence.get(aggregate).copied()
    }

    /// Makes the next `apply` answer `answer` instead of committing (answers are used in order).
    pub fn fail_next(&self, answer: Injected) -> &Self {
        self.lock().injected.push_back(answer);
        self
    }

    /// Makes the next `n` separate `unpark` calls fail (a throttled `DeleteItem`, or the
    /// invocation crashing right after the transaction that settled the parked event).
    pub fn fail_next_unparks(&self, n: usize) -> &Self {
        self.lock().unparks_to_fail = n;
        self
    }

    /// Makes the next `n` reads of one parked row ([`InboxStore::parked`]: the drain's read of
    /// what waits behind an event it applied) fail (a throttled `GetItem`, or the invocation
    /// crashing right after the transaction before it).
    pub fn fail_next_parked_reads(&self, n: usize) -> &Self {
        self.lock().parked_reads_to_fail = n;
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

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a test assertion elsewhere; the state
        // is a plain map and stays consistent, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The events parked now (waiting for their predecessor), in no particular order.
    pub fn parked_events(&self) -> Vec<ParkedEvent> {
        self.lock().parked.values().cloned().collect()
    }

    /// Moves the `parked_at` of parked event `event_id` back by `age` (to test the parked
    /// check and gap listings without waiting). Returns whether it was parked.
    pub fn backdate_parked(&self, event_id: &str, age: std::time::Duration) -> bool {
        let mut state = self.lock();
        let Some(parked) = state.parked.values_mut().find(|p| p.event_id == event_id) else { return false };
        let at = DateTime::parse_from_rfc3339(&parked.parked_at).map(|t| t.with_timezone(&Utc)).unwrap_or_else(|_| Utc::now());
        let back = chrono::Duration::from_std(age).ok().and_then(|age| at.checked_sub_signed(age)).unwrap_or(at);
        parked.parked_at = back.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        true
    }

    fn park_now(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> bool {
        let key = format!("{}#{}#{waits_for}", metadata.aggregate_type, metadata.subject);
        let mut state = self.lock();
        if let Some(held) = state.parked.get(&key) {
            return held.event_id == metadata.id;
        }
        let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let parked = ParkedEvent::new(
            &metadata.id,
            &metadata.event_type,
            &metadata.aggregate_type,
            &metadata.subject,
            metadata.sequence,
            waits_for,
            payload,
            at,
        );
        state.parked.insert(key, parked);
        true
    }

    /// The outcome recorded for `event_id` (None: not applied, or applied without one).
    pub fn outcome(&self, event_id: &str) -> Option<RecordedOutcome> {
        self.lock().applied.iter().find(|a| a.event_id == event_id).and_then(|a| a.outcome.clone())
    }

    fn apply_now(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
    ) -> Result<InboxOutcome, InboxError> {
        let mut state = self.lock();
        if let Some(row) = state.rows.get(&metadata.id) {
            if !payload_hash.matches(row.payload_hash().stored()) {
                return Err(InboxError::mismatch(&metadata.id, row.payload_hash().stored().to_owned(), payload_hash));
            }
            return Ok(InboxOutcome::Duplicate);
        }
        let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
        if self.ordered {
            let last = state.last_sequence.get(&aggregate).copied().unwrap_or(0);
            if metadata.sequence <= last {
                return Ok(InboxOutcome::Duplicate);
            }
            let required = super::required_predecessor(metadata, self.types.as_ref());
            if last < required {
                return Err(InboxError::SequenceGap { aggregate, expected: required, got: metadata.sequence, last_applied: last });
            }
        }
        match state.injected.pop_front() {
            Some(Injected::ConditionFailed { index }) => return Ok(InboxOutcome::BusinessConditionFailed { index, item: None }),
            Some(Injected::Conflict) => {
                let injected = crate::aws_error::AwsError::cancelled(&["TransactionConflict (injected)".to_owned()], true, None, None);
                return Err(InboxError::Transaction(TransactionError::Retryable(injected)));
            }
            None => {}
        }
        if self.ordered {
            if let Some(waits_for) = outcome.and_then(|o| o.unparks) {
                state.parked.remove(&format!("{aggregate}#{waits_for}"));
            }
            state.last_sequence.insert(aggregate, metadata.sequence);
        }
        state.rows.insert(metadata.id.clone(), Row::Applied { payload_hash: payload_hash.clone() });
        state.applied.push(AppliedEvent {
            event_id: metadata.id.clone(),
            payload_hash: payload_hash.stored().to_owned(),
            writes,
            outcome: outcome.cloned(),
        });
        Ok(InboxOutcome::Applied)
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
        std::future::ready(self.apply_now(metadata, payload_hash, writes, None))
    }

    fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        std::future::ready(self.apply_now(metadata, payload_hash, writes, Some(outcome)))
    }

    /// Proved when the event was applied and, right after, nothing is parked on its aggregate
    /// (as the DynamoDB table proves it at its commit: a row parked after that is the parker's
    /// to apply).
    fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<(InboxOutcome, bool), InboxError>> + Send {
        let applied = self.apply_now(metadata, payload_hash, writes, Some(outcome)).map(|result| {
            let none_parked = self.ordered
                && result == InboxOutcome::Applied
                && !self.lock().parked.values().any(|p| p.aggregate_type == metadata.aggregate_type && p.aggregate_id == metadata.subject);
            (result, none_parked)
        });
        std::future::ready(applied)
    }

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        let hash = match self.lock().rows.get(event_id) {
            Some(Row::Applied { payload_hash } | Row::Completed { payload_hash, .. }) => Some(payload_hash.sha256().to_owned()),
            Some(Row::InProgress { .. }) | None => None,
        };
        std::future::ready(Ok(hash))
    }

    fn parks(&self) -> bool {
        self.ordered
    }

    fn unparks_in_transaction(&self) -> bool {
        self.ordered
    }

    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        std::future::ready(Ok(self.park_now(metadata, waits_for, payload)))
    }

    fn parked(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: u64,
    ) -> impl Future<Output = Result<Option<ParkedEvent>, InboxError>> + Send {
        let mut state = self.lock();
        if state.parked_reads_to_fail > 0 {
            state.parked_reads_to_fail -= 1;
            let injected = crate::aws_error::AwsError::service("GetItem", "ThrottlingException", "injected", 400);
            return std::future::ready(Err(InboxError::Sdk { action: "read parked", error: injected }));
        }
        std::future::ready(Ok(state.parked.get(&format!("{aggregate_type}#{aggregate_id}#{waits_for}")).cloned()))
    }

    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        let key = format!("{}#{}", parked.aggregate(), parked.waits_for);
        let mut state = self.lock();
        if state.unparks_to_fail > 0 {
            state.unparks_to_fail -= 1;
            let injected = crate::aws_error::AwsError::cancelled(&["ThrottlingException (injected)".to_owned()], true, None, None);
            return std::future::ready(Err(InboxError::Transaction(TransactionError::Retryable(injected))));
        }
        if state.parked.get(&key).is_some_and(|p| p.event_id == parked.event_id) {
            state.parked.remove(&key);
        }
        std::future::ready(Ok(()))
    }

    fn unpark_settled(&self, metadata: &EventMetadata) -> impl Future<Output = Result<(), InboxError>> + Send {
        let waits_for = super::required_predecessor(metadata, self.types.as_ref());
        let key = format!("{}#{}#{waits_for}", metadata.aggregate_type, metadata.subject);
        let mut state = self.lock();
        if state.parked.get(&key).is_some_and(|p| p.event_id == metadata.id) {
            state.parked.remove(&key);
        }
        std::future::ready(Ok(()))
    }

    fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> impl Future<Output = Result<ParkedAround, InboxError>> + Send {
        let waits_for = super::required_predecessor(metadata, self.types.as_ref());
        let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
        let state = self.lock();
        let last = last.unwrap_or_else(|| state.last_sequence.get(&aggregate).copied().unwrap_or(0));
        let own = state.parked.get(&format!("{aggregate}#{waits_for}")).filter(|p| p.event_id == metadata.id).cloned();
        // The same row when a `previous` names the event's own sequence: its own copy, not a successor.
        let next = state.parked.get(&format!("{aggregate}#{last}")).filter(|p| p.event_id != metadata.id).cloned();
        std::future::ready(Ok(ParkedAround::new(own, last, next)))
    }

    fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> impl Future<Output = Result<u64, InboxError>> + Send {
        std::future::ready(Ok(self.lock().last_sequence.get(&format!("{aggregate_type}#{aggregate_id}")).copied().unwrap_or(0)))
    }

    /// As the DynamoDB index answers: oldest first, without the payload.
    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        let mut events: Vec<ParkedEvent> = self.lock().parked.values().cloned().map(|p| ParkedEvent { payload: String::new(), ..p }).collect();
        events.sort_by(|a, b| a.parked_at.cmp(&b.parked_at));
        let complete = events.len() <= limit;
        events.truncate(limit);
        std::future::ready(Ok(ParkedList { events, complete }))
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

    fn metadata(id: &str, sequence: u64) -> EventMetadata {
        EventMetadata {
            id: id.into(),
            event_type: "OrderCreated".into(),
            version: 1,
            source: "s".into(),
            time: "2026-11-29T08:00:00.000Z".into(),
            subject: "o-1".into(),
            aggregate_type: "Order".into(),
            sequence,
            correlation_id: "c".into(),
            previous: Default::default(),
        }
    }

    #[tokio::test]
    async fn duplicates_mismatches_ordering_and_injected_answers() {
        let inbox = MemoryInbox::new("c").ordered();
        assert_eq!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
        assert_eq!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
        assert!(matches!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("x"), vec![]).await, Err(InboxError::PayloadMismatch { .. })));
        assert!(matches!(
            inbox.apply(&metadata("e-3", 3), &PayloadHash::of("h"), vec![]).await,
            Err(InboxError::SequenceGap { expected: 2, got: 3, .. })
        ));
        inbox.fail_next(Injected::ConditionFailed { index: 1 }).fail_next(Injected::Conflict);
        assert_eq!(
            inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap(),
            InboxOutcome::BusinessConditionFailed { index: 1, item: None }
        );
        let err = inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap_err();
        assert!(err.is_retryable(), "{err}");
        assert_eq!(inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
        assert_eq!(inbox.apply(&metadata("e-2-again", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
        assert_eq!(inbox.applied().iter().map(|a| a.event_id.as_str()).collect::<Vec<_>>(), ["e-1", "e-2"]);
    }

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
