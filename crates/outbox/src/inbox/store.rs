//! The inbox storage interface, as Powertools' `persistence/base.py`: what the consumer and the
//! guarded mode need from a store, with the DynamoDB table ([`Inbox`]) and an in-memory store
//! ([`MemoryInbox`](super::MemoryInbox), for your unit tests) behind it.
//!
//! # Why a generic trait (not `Arc<dyn InboxStore>`)
//!
//! The methods return `impl Future + Send` (native async functions in traits, Rust 1.75+), so
//! no extra dependency (`async-trait`) and no boxed future per call; the `Send` bound is spelled
//! out so the consumer's futures can be spawned on a multi-threaded runtime. The price is that the
//! trait is not object-safe: [`Consumer`](crate::consumer::Consumer) is generic over its store
//! (`Consumer<Inbox, …>` in Lambda, `Consumer<MemoryInbox, …>` in tests), which is decided once,
//! at build time, anyway. `Arc<S>` is a store too, so one store can be shared.

use std::future::Future;
use std::sync::Arc;

use aws_sdk_dynamodb::types::TransactWriteItem;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::guarded::{self, Guarded, GuardedError};
use super::{Claim, Inbox, InboxError, InboxOutcome, Lease, ParkedAround, ParkedEvent, ParkedList, PayloadHash, RecordedOutcome};
use crate::envelope::EventMetadata;

/// Where a consumer records the events it applied. See the [module docs](crate::inbox) for why it is
/// generic, and [`crate::inbox`] for the states and the AWS behaviour the DynamoDB store relies on.
pub trait InboxStore: Send + Sync {
    /// The consumer name: inbox rows are per consumer, so two consumers of one event never block
    /// each other.
    fn consumer(&self) -> &str;

    /// Transactional mode: records `metadata.id` with `payload_hash` (the hashes of the payload as
    /// delivered, [`PayloadHash::of`]) and applies `writes` (the consumer's own
    /// `TransactWriteItem`s, outbox puts included) all or nothing. A record of the id whose stored
    /// hash [matches](PayloadHash::matches) makes the event a duplicate.
    ///
    /// # Errors
    /// [`InboxError::PayloadMismatch`] when the id was applied with another payload (one whose
    /// stored hash does not match: [`PayloadHash::matches`]);
    /// [`InboxError::SequenceGap`] for an ordered store; [`InboxError::Transaction`] otherwise
    /// (see [`InboxError::is_retryable`]).
    fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send;

    /// [`InboxStore::apply`], recording what the event did (`outcome`) on its inbox row, for
    /// `trace`. The default implementation ignores `outcome`.
    ///
    /// # Errors
    /// As [`InboxStore::apply`].
    fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        let _ = outcome;
        self.apply(metadata, payload_hash, writes)
    }

    /// Ordering: [`InboxStore::apply_recording`], answering also whether the commit itself proved
    /// that nothing is parked on the event's aggregate — no event waiting for it, no earlier
    /// parked copy of it — so the consumer skips [`InboxStore::parked_around`] and its reads:
    /// `true` only when the event was applied. The DynamoDB table proves it from the ordering
    /// row's count of parked rows, read by the same transaction ([`Inbox::apply_checking_parked`]):
    /// an ordered event that finds nothing parked costs its transaction alone. The default
    /// answers `false` (the consumer reads).
    ///
    /// # Errors
    /// As [`InboxStore::apply`].
    fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<(InboxOutcome, bool), InboxError>> + Send {
        async move { Ok((self.apply_recording(metadata, payload_hash, writes, outcome).await?, false)) }
    }

    /// The SHA-256 (hex, 64 characters) of the payload bytes `event_id` was applied with
    /// ([`PayloadHash::sha256`]), when the store holds a live record of it (applied, or completed
    /// in guarded mode; not expired, not in progress): `None` otherwise.
    /// The consumer asks it before fetching a claim-checked payload from S3, so a duplicate
    /// costs one read instead of a download; the transaction's own claim still decides (a record
    /// written after this read is found there). The default answers `None`: the consumer then
    /// fetches, as for a new event.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        let _ = event_id;
        std::future::ready(Ok(None))
    }

    /// Whether this store parks events that arrive before their predecessor ([`ParkedEvent`](super::ParkedEvent)):
    /// an ordered store that implements the three parking methods. Default `false`.
    fn parks(&self) -> bool {
        false
    }

    /// Ordering: whether [`InboxStore::apply_recording`] deletes the parked row named by
    /// [`RecordedOutcome::unparks`] in the event's own transaction (the DynamoDB table and the
    /// memory store, when ordered). Then the consumer's drain makes no separate
    /// [`InboxStore::unpark`] after a parked event it applied. Default `false`: a store that
    /// ignores `unparks` (the trait's default `apply_recording`) gets the separate call.
    fn unparks_in_transaction(&self) -> bool {
        false
    }

    /// Ordering: stores `payload` (the invocation payload, verbatim) of the event of `metadata`,
    /// which waits for sequence `waits_for` of its aggregate. Idempotent for the same event.
    /// Returns `false` when it did not park it (the default: the store does not park; or another
    /// event id already waits for `waits_for`), and the consumer then fails the invocation as
    /// for any retryable error.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        let _ = (metadata, waits_for, payload);
        std::future::ready(Ok(false))
    }

    /// Ordering: the event parked on the aggregate that waits for sequence `waits_for`, if any
    /// (a strongly consistent read).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn parked(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: u64,
    ) -> impl Future<Output = Result<Option<ParkedEvent>, InboxError>> + Send {
        let _ = (aggregate_type, aggregate_id, waits_for);
        std::future::ready(Ok(None))
    }

    /// Ordering: removes `parked` once its event is settled (only if that event still holds the row).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        let _ = parked;
        std::future::ready(Ok(()))
    }

    /// Ordering: removes the parked row of the event of `metadata` if it still holds one — the
    /// event was settled by a delivery of its own rather than by the drain (e.g. redelivered
    /// after an operator's release). One consistent read; a delete only when the row is there.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn unpark_settled(&self, metadata: &EventMetadata) -> impl Future<Output = Result<(), InboxError>> + Send {
        let _ = metadata;
        std::future::ready(Ok(()))
    }

    /// Ordering, after the event of `metadata` was settled by its own delivery (applied: its
    /// transaction moved the aggregate's `last_sequence` to `metadata.sequence`, pass
    /// `Some(metadata.sequence)`; or found a duplicate: pass `None`, the store reads
    /// `last_sequence` too): what the consumer reads next, with strongly consistent reads — the
    /// event's own parked copy, if an earlier delivery parked it and it still holds the row (to
    /// remove), the aggregate's `last_sequence`, and the event parked waiting for it (to apply
    /// now). The DynamoDB table reads them in one `BatchGetItem` ([`Inbox::parked_around`]); the
    /// default removes the own row with [`InboxStore::unpark_settled`] (a failure only logged, as
    /// the consumer did before), then reads with [`InboxStore::last_sequence`] (when `last` is
    /// `None`) and [`InboxStore::parked`], answering `own: None`.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails, or cannot read a key within its retries: a key
    /// it could not read is never answered as absent.
    fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> impl Future<Output = Result<ParkedAround, InboxError>> + Send {
        async move {
            if let Err(e) = self.unpark_settled(metadata).await {
                tracing::warn!(error = %e, "could not remove the event's own parked row; `ordering parked` lists it");
            }
            let last = match last {
                Some(last) => last,
                None => self.last_sequence(&metadata.aggregate_type, &metadata.subject).await?,
            };
            let next = self.parked(&metadata.aggregate_type, &metadata.subject, last).await?;
            Ok(ParkedAround::new(None, last, next))
        }
    }

    /// Ordering: this consumer's parked events, oldest first, at most `limit`, without their
    /// payload (the parked check and the operator's listing; read one with
    /// [`InboxStore::parked`] for its payload). The default lists none (a store that does not
    /// park).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails (for the DynamoDB table, also when it lacks the
    /// parked index: [`InboxError::is_missing_index`]).
    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        let _ = limit;
        std::future::ready(Ok(ParkedList { events: Vec::new(), complete: true }))
    }

    /// Ordering: the aggregate's `last_sequence` (0: none), a strongly consistent read.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> impl Future<Output = Result<u64, InboxError>> + Send {
        let _ = (aggregate_type, aggregate_id);
        std::future::ready(Ok(0))
    }

    /// Guarded mode: claims `metadata.id` with a lease until `lease_until`.
    ///
    /// # Errors
    /// [`InboxError::InProgress`] while another invocation holds a live lease;
    /// [`InboxError::PayloadMismatch`]; [`InboxError::Sdk`].
    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Claim, InboxError>> + Send;

    /// Guarded mode: marks the claim completed with `result` (JSON text, replayed to duplicates).
    ///
    /// # Errors
    /// [`InboxError::LeaseLost`] when another invocation took the claim over.
    fn complete(&self, lease: &Lease, result: Option<&str>) -> impl Future<Output = Result<(), InboxError>> + Send;

    /// Guarded mode: gives the claim up after a failed effect, so a retry can claim it at once.
    ///
    /// # Errors
    /// [`InboxError::Sdk`].
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), InboxError>> + Send;

    /// Guarded mode in one call, like Powertools' `idempotent_function`: claims the event, runs
    /// `effect`, stores its `Ok` value (as JSON) and returns it; a later delivery of the same
    /// event gets the stored value back ([`Guarded::Replayed`]) without running `effect`. On
    /// `Err` the claim is released, so Lambda's retry runs the effect again. See
    /// [`Guarded`](super::Guarded) for the states.
    ///
    /// `lease_until` bounds how long a crashed invocation blocks the event: use the invocation's
    /// deadline (`outbox_lambda::lease_until`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use outbox::inbox::{Guarded, InboxStore, MemoryInbox, PayloadHash};
    /// # let metadata: outbox::envelope::EventMetadata = serde_json::from_str(r#"{"id":"e-1","type":"OrderCreated","version":1,"source":"s","time":"t","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"c"}"#)?;
    /// let inbox = MemoryInbox::new("mailer"); // in Lambda: outbox::inbox::Inbox::new(client, table, "mailer", retention)
    /// let until = chrono::Utc::now() + chrono::Duration::seconds(30);
    /// let hash = PayloadHash::of(r#"{"order_id":"o-1"}"#);
    /// let send = || async { Ok::<_, std::io::Error>(String::from("message-1")) }; // the call to your partner
    /// let first = inbox.guarded(&metadata, &hash, until, send).await?;
    /// assert_eq!(first, Guarded::Ran("message-1".to_owned()));
    /// let again = inbox.guarded(&metadata, &hash, until, send).await?;
    /// assert_eq!(again, Guarded::Replayed("message-1".to_owned()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`GuardedError::Effect`] with the effect's error (the claim was released);
    /// [`GuardedError::Inbox`] when the claim is held by another invocation (retryable), the
    /// payload differs, or the lease was lost before completing; [`GuardedError::Result`] when
    /// the value does not (de)serialise.
    fn guarded<R, E, F, Fut>(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
        effect: F,
    ) -> impl Future<Output = Result<Guarded<R>, GuardedError<E>>> + Send
    where
        Self: Sized,
        R: Serialize + DeserializeOwned + Send,
        E: Send,
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = Result<R, E>> + Send,
    {
        guarded::run(self, metadata, payload_hash, lease_until, effect)
    }
}

impl InboxStore for Inbox {
    fn consumer(&self) -> &str {
        Inbox::consumer(self)
    }

    fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        Inbox::apply(self, metadata, payload_hash, writes)
    }

    fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        Inbox::apply_recording(self, metadata, payload_hash, writes, Some(outcome))
    }
    fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<(InboxOutcome, bool), InboxError>> + Send {
        Inbox::apply_checking_parked(self, metadata, payload_hash, writes, Some(outcome))
    }

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        Inbox::applied_sha256(self, event_id)
    }

    fn parks(&self) -> bool {
        self.is_ordered()
    }

    fn unparks_in_transaction(&self) -> bool {
        self.is_ordered()
    }

    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        Inbox::park(self, metadata, waits_for, payload)
    }

    fn parked(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: u64,
    ) -> impl Future<Output = Result<Option<ParkedEvent>, InboxError>> + Send {
        Inbox::parked(self, aggregate_type, aggregate_id, waits_for)
    }

    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        Inbox::unpark(self, parked)
    }

    fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> impl Future<Output = Result<u64, InboxError>> + Send {
        Inbox::last_sequence(self, aggregate_type, aggregate_id)
    }

    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        Inbox::parked_oldest(self, limit)
    }

    fn unpark_settled(&self, metadata: &EventMetadata) -> impl Future<Output = Result<(), InboxError>> + Send {
        Inbox::unpark_settled(self, metadata)
    }

    fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> impl Future<Output = Result<ParkedAround, InboxError>> + Send {
        Inbox::parked_around(self, metadata, last)
    }

    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Claim, InboxError>> + Send {
        Inbox::begin(self, metadata, payload_hash, lease_until)
    }

    fn complete(&self, lease: &Lease, result: Option<&str>) -> impl Future<Output = Result<(), InboxError>> + Send {
        Inbox::complete(self, lease, result)
    }

    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), InboxError>> + Send {
        Inbox::release(self, lease)
    }
}

impl<S: InboxStore> InboxStore for Arc<S> {
    fn consumer(&self) -> &str {
        (**self).consumer()
    }

    fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        (**self).apply(metadata, payload_hash, writes)
    }

    fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<InboxOutcome, InboxError>> + Send {
        (**self).apply_recording(metadata, payload_hash, writes, outcome)
    }

    fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> impl Future<Output = Result<(InboxOutcome, bool), InboxError>> + Send {
        (**self).apply_checking_parked(metadata, payload_hash, writes, outcome)
    }

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        (**self).applied_sha256(event_id)
    }

    fn parks(&self) -> bool {
        (**self).parks()
    }

    fn unparks_in_transaction(&self) -> bool {
        (**self).unparks_in_transaction()
    }

    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        (**self).park(metadata, waits_for, payload)
    }

    fn parked(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: u64,
    ) -> impl Future<Output = Result<Option<ParkedEvent>, InboxError>> + Send {
        (**self).parked(aggregate_type, aggregate_id, waits_for)
    }

    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        (**self).unpark(parked)
    }

    fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> impl Future<Output = Result<u64, InboxError>> + Send {
        (**self).last_sequence(aggregate_type, aggregate_id)
    }

    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        (**self).parked_oldest(limit)
    }

    fn unpark_settled(&self, metadata: &EventMetadata) -> impl Future<Output = Result<(), InboxError>> + Send {
        (**self).unpark_settled(metadata)
    }

    fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> impl Future<Output = Result<ParkedAround, InboxError>> + Send {
        (**self).parked_around(metadata, last)
    }

    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Claim, InboxError>> + Send {
        (**self).begin(metadata, payload_hash, lease_until)
    }

    fn complete(&self, lease: &Lease, result: Option<&str>) -> impl Future<Output = Result<(), InboxError>> + Send {
        (**self).complete(lease, result)
    }

    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), InboxError>> + Send {
        (**self).release(lease)
    }
}
