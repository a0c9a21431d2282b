//! What the ordering layer needs from a store besides the inbox ([`OrderingStore`]): one
//! transaction per [`Step`], parked rows, the ordering row. The DynamoDB table
//! ([`Inbox`](crate::inbox::Inbox), `ordering/dynamodb.rs`) and the in-memory store
//! ([`MemoryInbox`](crate::inbox::MemoryInbox), `ordering/memory.rs`) implement it; the rules
//! that use it are [`Ordered`](super::Ordered)'s, once.

use std::future::Future;

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::{OrderingRow, ParkedEvent, ParkedList, Step, StepAnswer};
use crate::envelope::EventMetadata;
use crate::inbox::{InboxError, InboxStore, PayloadHash, RecordedOutcome};

/// An aggregate's rows as one consistent read found them ([`OrderingStore::read`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Rows {
    /// The ordering row, when it was asked for and exists.
    pub ordering: Option<OrderingRow>,
    /// The parked rows found among those asked for.
    pub parked: Vec<ParkedEvent>,
}

impl Rows {
    /// The rows (for stores and tests).
    pub fn new(ordering: Option<OrderingRow>, parked: Vec<ParkedEvent>) -> Self {
        Self { ordering, parked }
    }

    /// The parked row waiting for `waits_for`, if read.
    pub fn waiting_for(&self, waits_for: u64) -> Option<&ParkedEvent> {
        self.parked.iter().find(|p| p.waits_for == waits_for)
    }
}

/// Storage of per-aggregate ordering (see [`crate::ordering`] for the rows and the rules).
pub trait OrderingStore: InboxStore {
    /// ONE transaction: the inbox claim of `metadata.id` (recording `outcome`), the ordering
    /// row's `step` (its condition is [`Step::admits`], its result [`Step::advanced`]; with
    /// [`Advance::Unpark`](super::Advance::Unpark) also the deletion of the parked row this
    /// event holds, on that condition) and `writes`, all or nothing.
    ///
    /// # Errors
    /// [`InboxError::PayloadMismatch`] when the claim finds the id applied with another payload;
    /// [`InboxError::Transaction`] when the store fails.
    fn apply_step(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        step: Step,
    ) -> impl Future<Output = Result<StepAnswer, InboxError>> + Send;

    /// Stores `payload` (the invocation payload, verbatim) of the event of `metadata`, waiting
    /// for `waits_for`, and adds one to the aggregate's [`PARKED_COUNT`](super::PARKED_COUNT),
    /// together. Idempotent for the same event; `false` when another event id waits for
    /// `waits_for` already.
    ///
    /// # Errors
    /// [`InboxError::Transaction`] if the store fails.
    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send;

    /// Deletes the row of `parked` if that event still holds it, taking it off the count
    /// together; nothing when it does not.
    ///
    /// # Errors
    /// [`InboxError::Transaction`] or [`InboxError::Sdk`] if the store fails.
    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send;

    /// Strongly consistent read of the aggregate's parked rows waiting for `waits_for` and, when
    /// `ordering_row`, its ordering row. A row it could not read is an error, never absent.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn read(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: &[u64],
        ordering_row: bool,
    ) -> impl Future<Output = Result<Rows, InboxError>> + Send;

    /// This consumer's parked events, oldest first, at most `limit`, without their payload.
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails (the DynamoDB table also when it lacks the parked
    /// index: [`InboxError::is_missing_index`]).
    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send;

    /// Operator action: the aggregate's (`<aggregate_type>#<aggregate_id>`) row as
    /// [`OrderingRow::released`] leaves it, recording when; answers `last_sequence` before (0:
    /// none).
    ///
    /// # Errors
    /// [`InboxError::Sdk`] if the store fails.
    fn release_through(&self, aggregate: &str, through: u64) -> impl Future<Output = Result<u64, InboxError>> + Send;
}

impl<S: OrderingStore> OrderingStore for std::sync::Arc<S> {
    fn apply_step(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        step: Step,
    ) -> impl Future<Output = Result<StepAnswer, InboxError>> + Send {
        (**self).apply_step(metadata, payload_hash, writes, outcome, step)
    }

    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        (**self).park(metadata, waits_for, payload)
    }

    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        (**self).unpark(parked)
    }

    fn read(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: &[u64],
        ordering_row: bool,
    ) -> impl Future<Output = Result<Rows, InboxError>> + Send {
        (**self).read(aggregate_type, aggregate_id, waits_for, ordering_row)
    }

    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        (**self).parked_oldest(limit)
    }

    fn release_through(&self, aggregate: &str, through: u64) -> impl Future<Output = Result<u64, InboxError>> + Send {
        (**self).release_through(aggregate, through)
    }
}
