//! Per-aggregate ordering: a layer over an inbox. [`Ordered`] wraps an inbox store and applies
//! an aggregate's events in sequence order; a consumer that needs no order never touches it.
//! Every ordering rule is here, once, and runs unchanged on the DynamoDB table and on the
//! in-memory store: both implement [`OrderingStore`] (one transaction per [`Step`], the parked
//! rows, the ordering row) and nothing more. The consumer only decides when to call the layer
//! (it delivers through the handlers): it parks what the layer refuses with
//! [`SequenceGap`](crate::inbox::InboxError::SequenceGap) and, after a commit, drains the parked
//! successors the layer reads, each applied through it with [`Advance::Unpark`].
//!
//! ```text
//! Consumer ──▶ Ordered<S> ──rules──▶ S: OrderingStore ──▶ S: InboxStore (claims, guarded mode)
//!              │ required_predecessor, Step, refusals → Duplicate | SequenceGap
//!              │ park, parked_around, next_parked, unpark, the parked check's reads
//! ```
//!
//! | room | what a reader finds there |
//! |---|---|
//! | `ordering.rs` (here) | [`Ordered`]: which step to try, what a refusal means, what is read after a commit |
//! | `ordering/rules.rs` | [`OrderingRow`], [`Step`]: the condition ([`Step::admits`]) and its result |
//! | `ordering/store.rs` | [`OrderingStore`]: what a store must do for ordering (six operations) |
//! | `ordering/parked.rs` | [`ParkedEvent`], the parked rows and the sparse index: why nothing is stranded |
//! | `ordering/dynamodb.rs`, `ordering/memory.rs` | the two stores |
//!
//! # The rules
//!
//! An ordered event's transaction also moves a per-aggregate row
//! (`<consumer>#aggregate#<type>#<id>`, attribute `last_sequence`: the sequence of the last
//! event of the aggregate this consumer applied or an operator released) to the event's
//! `sequence`, on the condition that it stands at the event's *required predecessor*
//! ([`Ordered::required_predecessor`]):
//!
//! * [`Ordered::new`]: `sequence − 1` — every event of the aggregate must reach the consumer;
//! * [`Ordered::by_types`] (the event types the consumer handles): the latest earlier event of
//!   one of *those* types, from `detail.metadata.previous` (written by the producer,
//!   [`crate::Event::previous`]); events of types the consumer never receives are not waited
//!   for. An event without `previous` falls back to `sequence − 1`.
//!
//! The condition is `last_sequence` in `[required, sequence − 1]` (absent counts as 0,
//! [`Step::in_sequence`]). An event at or below `last_sequence` is a duplicate; one whose
//! predecessor is missing is [`InboxError::SequenceGap`]. The
//! [`Consumer`](crate::consumer::Consumer) does not fail such an event: it **parks** it and
//! applies it when its predecessor is applied ([`ParkedEvent`]: what is stored, why nothing is
//! stranded). **A sequence that never comes** (dead-lettered at the relay, lost to an expired
//! retry) leaves its successor parked, found by the consumer kit's scheduled parked check
//! ([`crate::consumer::ParkedCheck`], which raises the sequence-gap alarm) through the table's
//! sparse parked index ([`PARKED_INDEX`]) and listed with its age by `outbox ordering parked`;
//! an operator releases the aggregate with [`Ordered::release_through`] (`outbox ordering
//! release`, which also re-publishes what was parked behind it).
//!
//! **Nothing parked, proved by the commit.** The ordering row also counts the aggregate's
//! parked rows ([`PARKED_COUNT`]: parking adds one in the transaction that puts the row, every
//! deletion takes one off in its own), and an ordered event's transaction is first conditioned
//! on that count being 0 or the row absent ([`Advance::NoneParked`]). When it commits, nothing
//! waits for the event and no earlier copy of it is parked, so the consumer reads nothing after
//! it: an ordered event is ONE `TransactWriteItems`, like an unordered one. When the count
//! alone is not 0, the transaction is made again without it ([`Advance::Plain`]) and the
//! consumer reads the parked rows ([`Ordered::parked_around`]). The drain's event deletes its
//! parked row in its own transaction ([`Advance::Unpark`]); when the key holds no row of it,
//! the transaction is made again without the deletion.
//!
//! Why no row can be missed: the parked row and its count are written in one transaction
//! ([`OrderingStore::park`]), and the event's transaction reads the count on the same item it
//! moves the sequence on; DynamoDB serialises transactions on one item. A park before the
//! commit makes the condition false; a park after it is followed by the parker's own consistent
//! read of the ordering row, which sees the sequence, and the parker applies its event itself.
//! Source: the isolation levels of `TransactWriteItems`,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation>.
//!
//! Ordering rows **never expire** (no `expires_at`): an aggregate can emit its next event months
//! later, and a deleted row would turn it into a permanent gap. One small row per (consumer,
//! aggregate).

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;

use aws_sdk_dynamodb::types::TransactWriteItem;
use chrono::{DateTime, Utc};

use crate::envelope::EventMetadata;
use crate::inbox::{Claim, InboxError, InboxOutcome, InboxStore, Lease, PayloadHash, RecordedOutcome};

mod dynamodb;
mod memory;
mod parked;
mod rules;
mod store;

pub use dynamodb::{parked_from_item, PARK_ATTEMPTS, UNPROCESSED_KEYS_ATTEMPTS};
pub use parked::{ParkedAround, ParkedEvent, ParkedList, PARKED_AT, PARKED_CONSUMER, PARKED_INDEX, PARKED_INDEX_ATTRIBUTES, PARKED_KIND};
pub use rules::{Advance, OrderingRow, Step, StepAnswer, PARKED_COUNT};
pub use store::{OrderingStore, Rows};

/// An inbox store `S` with per-aggregate ordering (see the [module docs](self)): an
/// [`InboxStore`] whose `apply` moves the aggregate's ordering row too, plus parking and the
/// reads the consumer's drain and parked check make.
#[derive(Debug, Clone)]
pub struct Ordered<S> {
    store: S,
    /// The event types the consumer handles (`None`: every sequence).
    types: Option<BTreeSet<String>>,
}

impl<S> Ordered<S> {
    /// `store` ordered over every sequence: an event waits for `sequence − 1`.
    pub fn new(store: S) -> Self {
        Self { store, types: None }
    }

    /// `store` ordered for a consumer that handles the event `types` (e.g. its rule's
    /// `detail-type` list): an event waits only for the latest earlier event of those types,
    /// as the producer recorded it in `detail.metadata.previous`.
    pub fn by_types<I: IntoIterator<Item = T>, T: Into<String>>(store: S, types: I) -> Self {
        Self { store, types: Some(types.into_iter().map(Into::into).collect()) }
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The sequence the aggregate must have reached (applied or released) before the event of
    /// `metadata` may apply: with types and a `detail.metadata.previous` from the producer, the
    /// highest `previous[t]` over those types (0 when none: the first event of those types);
    /// otherwise `sequence − 1`.
    pub fn required_predecessor(&self, metadata: &EventMetadata) -> u64 {
        match &self.types {
            Some(types) if !metadata.previous.is_empty() => types.iter().filter_map(|t| metadata.previous.get(t)).max().copied().unwrap_or(0),
            _ => metadata.sequence.saturating_sub(1),
        }
    }
}

impl<S: OrderingStore> Ordered<S> {
    /// Applies `writes` once for the event, in order: one transaction of the inbox claim, the
    /// ordering row's step and `writes` (see the module docs for the steps). Answers also
    /// whether the commit proved that nothing is parked on the aggregate (`true` only when
    /// applied under [`Advance::NoneParked`]). `unparks`: the drain's event, whose parked row
    /// waits for that sequence and goes in the same transaction.
    ///
    /// # Errors
    /// [`InboxError::SequenceGap`] when the predecessor is missing;
    /// [`InboxError::PayloadMismatch`], [`InboxError::Transaction`] as the store answers.
    pub async fn apply_checking_parked(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        mut writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        unparks: Option<u64>,
    ) -> Result<(InboxOutcome, bool), InboxError> {
        let required = self.required_predecessor(metadata);
        let mut advance = unparks.map_or(Advance::NoneParked, Advance::Unpark);
        loop {
            let step = Step { required, sequence: metadata.sequence, advance };
            // At most two transactions: NoneParked or Unpark, then Plain.
            let again = (advance != Advance::Plain).then(|| writes.clone());
            let answer = self.store.apply_step(metadata, payload_hash, writes, outcome, step).await?;
            let retry = match &answer {
                StepAnswer::Settled(result) => {
                    let proved = advance == Advance::NoneParked && *result == InboxOutcome::Applied;
                    return Ok((result.clone(), proved));
                }
                // In sequence, refused for what else the step asked: the count said something is
                // parked, or the key holds no row of this event to unpark (gone, or another
                // event's, which the drain or the parked check settles with its count).
                StepAnswer::OrderingRefused(row) => step.in_sequence(row.as_ref()),
                StepAnswer::ParkedRowRefused => true,
            };
            if let (true, Some(again)) = (retry, again) {
                // Made again without that part.
                advance = Advance::Plain;
                writes = again;
                continue;
            }
            let last = match answer {
                StepAnswer::OrderingRefused(row) => row.map_or(0, |r| r.last()),
                // Plain deletes no parked row: only a store that misreports gets here.
                _ => 0,
            };
            if metadata.sequence <= last {
                return Ok((InboxOutcome::Duplicate, false));
            }
            let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
            return Err(InboxError::SequenceGap { aggregate, expected: required, got: metadata.sequence, last_applied: last });
        }
    }

    /// Parks the event of `metadata` (its invocation `payload`, verbatim), waiting for
    /// `waits_for` ([`OrderingStore::park`]).
    ///
    /// # Errors
    /// As [`OrderingStore::park`].
    pub async fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> Result<bool, InboxError> {
        self.store.park(metadata, waits_for, payload).await
    }

    /// What the consumer reads after the event of `metadata` was settled by its own delivery
    /// (applied: its transaction moved `last_sequence` to `metadata.sequence`, pass
    /// `Some(metadata.sequence)`; a duplicate: `None`, the ordering row is read too), in ONE
    /// consistent read: the event's own parked copy, if an earlier delivery parked it and it
    /// still holds the row (to remove), the aggregate's `last_sequence`, and the event parked
    /// waiting for it (to apply now). For a duplicate the read guesses the row waiting for the
    /// event's own sequence (the usual `last_sequence` of a redelivered event); when the
    /// ordering row says otherwise, one more read of the row waiting for it follows.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails or cannot read a key: never answered as absent.
    pub async fn parked_around(&self, metadata: &EventMetadata, last: Option<u64>) -> Result<ParkedAround, InboxError> {
        let (own_waits, guess) = (self.required_predecessor(metadata), last.unwrap_or(metadata.sequence));
        let rows = self.store.read(&metadata.aggregate_type, &metadata.subject, &[own_waits, guess], last.is_none()).await?;
        // Both keys are one row only when a `previous` names the event's own sequence: its own
        // copy then, never a successor.
        let own = rows.waiting_for(own_waits).filter(|p| p.event_id == metadata.id).cloned();
        let last = last.unwrap_or_else(|| rows.ordering.map_or(0, |r| r.last()));
        let next = match last == guess {
            true => rows.waiting_for(guess).cloned(),
            false => self.parked(&metadata.aggregate_type, &metadata.subject, last).await?,
        };
        Ok(ParkedAround::new(own, last, next.filter(|p| p.event_id != metadata.id)))
    }

    /// The drain's next read: the aggregate's `last_sequence` (`known`, or read) and the event
    /// parked waiting for it.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    pub async fn next_parked(&self, aggregate_type: &str, aggregate_id: &str, known: Option<u64>) -> Result<(u64, Option<ParkedEvent>), InboxError> {
        let last = match known {
            Some(last) => last,
            None => self.last_sequence(aggregate_type, aggregate_id).await?,
        };
        Ok((last, self.parked(aggregate_type, aggregate_id, last).await?))
    }

    /// The event parked on the aggregate waiting for `waits_for`, if any (consistent read).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    pub async fn parked(&self, aggregate_type: &str, aggregate_id: &str, waits_for: u64) -> Result<Option<ParkedEvent>, InboxError> {
        let rows = self.store.read(aggregate_type, aggregate_id, &[waits_for], false).await?;
        Ok(rows.waiting_for(waits_for).cloned())
    }

    /// The aggregate's `last_sequence` (0: none), a consistent read.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    pub async fn last_sequence(&self, aggregate_type: &str, aggregate_id: &str) -> Result<u64, InboxError> {
        Ok(self.store.read(aggregate_type, aggregate_id, &[], true).await?.ordering.map_or(0, |r| r.last()))
    }

    /// Removes `parked` (if its event still holds the row), off the count.
    ///
    /// # Errors
    /// As [`OrderingStore::unpark`].
    pub async fn unpark(&self, parked: &ParkedEvent) -> Result<(), InboxError> {
        self.store.unpark(parked).await
    }

    /// This consumer's parked events, oldest first, at most `limit`, without their payload.
    ///
    /// # Errors
    /// As [`OrderingStore::parked_oldest`].
    pub async fn parked_oldest(&self, limit: usize) -> Result<ParkedList, InboxError> {
        self.store.parked_oldest(limit).await
    }

    /// Operator action: moves the `last_sequence` of `aggregate` (`<aggregate_type>#<aggregate_id>`)
    /// up to `through`, as if every event up to it had been applied, so an event waiting for a
    /// sequence that will never come applies on its next retry or redrive. Never moves it down.
    /// Returns the `last_sequence` before (0: none).
    ///
    /// # Errors
    /// As [`OrderingStore::release_through`].
    pub async fn release_through(&self, aggregate: &str, through: u64) -> Result<u64, InboxError> {
        self.store.release_through(aggregate, through).await
    }
}

/// Reports a sequence gap: a log line naming the release command and the metric `SequenceGaps`
/// (namespace `OutboxConsumer`, dimension `function`; the consumer's `metrics` module).
pub(crate) fn report_gap(consumer: &str, error: &InboxError) {
    let InboxError::SequenceGap { aggregate, expected, got, last_applied } = error else { return };
    tracing::warn!(
        consumer,
        aggregate = %aggregate,
        waits_for = expected,
        sequence = got,
        last_applied,
        release = %format!("outbox ordering release --consumer {consumer} --aggregate {aggregate} --through {expected}"),
        "sequence gap: the event waits for its predecessor; if that never comes, release it"
    );
    // Through the metrics facade: the function's EMF recorder (`outbox_lambda::run`) turns it
    // into the CloudWatch metric, dimension `function`.
    #[cfg(feature = "metrics")]
    metrics::counter!(crate::contract::metric::SEQUENCE_GAPS).increment(1);
}

/// A boxed future, as the consumer holds the ordering layer ([`Sequencing`]).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How the consumer reaches an ordered store ([`InboxStore::ordering`]): [`Ordered`]'s
/// operations with boxed futures, so that a consumer generic over its inbox needs no second
/// type parameter. Implemented by [`Ordered`] only.
pub trait Sequencing: Send + Sync {
    /// [`Ordered::apply_checking_parked`].
    fn apply<'a>(
        &'a self,
        metadata: &'a EventMetadata,
        payload_hash: &'a PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &'a RecordedOutcome,
        unparks: Option<u64>,
    ) -> BoxFuture<'a, Result<(InboxOutcome, bool), InboxError>>;
    /// [`Ordered::park`].
    fn park<'a>(&'a self, metadata: &'a EventMetadata, waits_for: u64, payload: &'a str) -> BoxFuture<'a, Result<bool, InboxError>>;
    /// [`Ordered::parked_around`].
    fn parked_around<'a>(&'a self, metadata: &'a EventMetadata, last: Option<u64>) -> BoxFuture<'a, Result<ParkedAround, InboxError>>;
    /// [`Ordered::next_parked`].
    fn next_parked<'a>(
        &'a self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        known: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Option<ParkedEvent>), InboxError>>;
    /// [`Ordered::parked`].
    fn parked<'a>(&'a self, aggregate_type: &'a str, aggregate_id: &'a str, waits_for: u64)
        -> BoxFuture<'a, Result<Option<ParkedEvent>, InboxError>>;
    /// [`Ordered::last_sequence`].
    fn last_sequence<'a>(&'a self, aggregate_type: &'a str, aggregate_id: &'a str) -> BoxFuture<'a, Result<u64, InboxError>>;
    /// [`Ordered::unpark`].
    fn unpark<'a>(&'a self, parked: &'a ParkedEvent) -> BoxFuture<'a, Result<(), InboxError>>;
    /// [`Ordered::parked_oldest`].
    fn parked_oldest(&self, limit: usize) -> BoxFuture<'_, Result<ParkedList, InboxError>>;
}

impl<S: OrderingStore> Sequencing for Ordered<S> {
    fn apply<'a>(
        &'a self,
        metadata: &'a EventMetadata,
        payload_hash: &'a PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &'a RecordedOutcome,
        unparks: Option<u64>,
    ) -> BoxFuture<'a, Result<(InboxOutcome, bool), InboxError>> {
        Box::pin(self.apply_checking_parked(metadata, payload_hash, writes, Some(outcome), unparks))
    }
    fn park<'a>(&'a self, metadata: &'a EventMetadata, waits_for: u64, payload: &'a str) -> BoxFuture<'a, Result<bool, InboxError>> {
        Box::pin(Ordered::park(self, metadata, waits_for, payload))
    }
    fn parked_around<'a>(&'a self, metadata: &'a EventMetadata, last: Option<u64>) -> BoxFuture<'a, Result<ParkedAround, InboxError>> {
        Box::pin(Ordered::parked_around(self, metadata, last))
    }
    fn next_parked<'a>(
        &'a self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        known: Option<u64>,
    ) -> BoxFuture<'a, Result<(u64, Option<ParkedEvent>), InboxError>> {
        Box::pin(Ordered::next_parked(self, aggregate_type, aggregate_id, known))
    }
    fn parked<'a>(
        &'a self,
        aggregate_type: &'a str,
        aggregate_id: &'a str,
        waits_for: u64,
    ) -> BoxFuture<'a, Result<Option<ParkedEvent>, InboxError>> {
        Box::pin(Ordered::parked(self, aggregate_type, aggregate_id, waits_for))
    }
    fn last_sequence<'a>(&'a self, aggregate_type: &'a str, aggregate_id: &'a str) -> BoxFuture<'a, Result<u64, InboxError>> {
        Box::pin(Ordered::last_sequence(self, aggregate_type, aggregate_id))
    }
    fn unpark<'a>(&'a self, parked: &'a ParkedEvent) -> BoxFuture<'a, Result<(), InboxError>> {
        Box::pin(Ordered::unpark(self, parked))
    }
    fn parked_oldest(&self, limit: usize) -> BoxFuture<'_, Result<ParkedList, InboxError>> {
        Box::pin(Ordered::parked_oldest(self, limit))
    }
}

/// The inbox of an ordered consumer: claims in order ([`Ordered::apply_checking_parked`]);
/// guarded mode and reads as the store underneath.
impl<S: OrderingStore> InboxStore for Ordered<S> {
    fn consumer(&self) -> &str {
        self.store.consumer()
    }

    async fn apply(&self, metadata: &EventMetadata, payload_hash: &PayloadHash, writes: Vec<TransactWriteItem>) -> Result<InboxOutcome, InboxError> {
        Ok(self.apply_checking_parked(metadata, payload_hash, writes, None, None).await?.0)
    }

    async fn apply_recording(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: &RecordedOutcome,
    ) -> Result<InboxOutcome, InboxError> {
        Ok(self.apply_checking_parked(metadata, payload_hash, writes, Some(outcome), None).await?.0)
    }

    fn applied_sha256(&self, event_id: &str) -> impl Future<Output = Result<Option<String>, InboxError>> + Send {
        self.store.applied_sha256(event_id)
    }

    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = Result<Claim, InboxError>> + Send {
        self.store.begin(metadata, payload_hash, lease_until)
    }

    fn complete(&self, lease: &Lease, result: Option<&str>) -> impl Future<Output = Result<(), InboxError>> + Send {
        self.store.complete(lease, result)
    }

    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), InboxError>> + Send {
        self.store.release(lease)
    }

    fn ordering(&self) -> Option<&dyn Sequencing> {
        Some(self)
    }
}
