//! The inbox storage interface, as Powertools' `persistence/base.py`: five operations a store
//! must have (its consumer name, the transactional claim, and guarded mode's claim, completion
//! and release), everything else provided on top of them, with the DynamoDB table ([`Inbox`]) and an in-memory store
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
use super::{Claim, Inbox, InboxError, InboxOutcome, Lease, PayloadHash, RecordedOutcome};
use crate::envelope::EventMetadata;
use crate::ordering::Sequencing;

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
    /// [`InboxError::SequenceGap`] for an ordered store ([`crate::ordering::Ordered`]);
    /// [`InboxError::Transaction`] otherwise
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

    /// The ordering layer, when this store is one ([`crate::ordering::Ordered`] answers
    /// itself): how the consumer parks, drains and checks parked events. Default `None`: the
    /// consumer applies events as they come.
    fn ordering(&self) -> Option<&dyn Sequencing> {
        None
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

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        Inbox::applied_sha256(self, event_id)
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

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        (**self).applied_sha256(event_id)
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

    fn ordering(&self) -> Option<&dyn Sequencing> {
        (**self).ordering()
    }
}
