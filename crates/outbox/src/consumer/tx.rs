//! [`Tx`]: the writes and events a handler adds for one delivery, committed by the library in ONE
//! `TransactWriteItems` call with the inbox claim — and what to do when one of their conditions
//! is false ([`Tx::on_condition_failed`]).
//!
//! Underneath, a `Tx` is the producer's [`OutboxTransaction`]: an event a producer can emit, a
//! consumer can emit, with the same size checks, the same claim check (a payload too large for an
//! outbox item goes to S3 when the consumer's writer has one, `OutboxWriter::with_claim_check`,
//! uploaded before the commit), the same sequences ([`Tx::emit_next`]) and the same naming of a
//! failed write ([`ConditionFailed`]).

use std::sync::{Arc, Mutex, MutexGuard};

use aws_sdk_dynamodb::types::TransactWriteItem;

use super::HandlerError;
use crate::envelope::OutboxItem;
use crate::transaction::ConditionFailed;
use crate::writer::{AggregateSequence, Event, OutboxTransaction, OutboxWriter, WriteError};

/// Items the library adds to every consumer transaction: the inbox claim and, for an ordered
/// inbox, the aggregate's sequence row.
const INBOX_ITEMS: usize = 2;

/// What a business-condition fallback decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback<O> {
    /// Commit what the fallback added to its [`Tx`] (with the inbox claim), then answer `O`.
    Commit(O),
    /// Nothing to do: the effect happened already (e.g. settled by another event id). None of
    /// the handler's writes are committed, but the event is still **recorded**: its inbox claim
    /// (with the outcome `nothing_to_do` and the reason "settled by another event") and, for an
    /// ordered inbox, the aggregate's sequence, so later events of the aggregate do not wait for
    /// it. Answers `nothing_to_do`. The same as [`Fallback::NothingToDo`] with that reason.
    Duplicate,
    /// Nothing to do, for the reason given: records the inbox claim (outcome `nothing_to_do`,
    /// this reason) and advances the aggregate's sequence, without the handler's writes.
    NothingToDo(String),
}

/// The reason recorded for [`Fallback::Duplicate`].
pub const SETTLED_ELSEWHERE: &str = "settled by another event";

type FallbackFn<O> = Box<dyn FnOnce(ConditionFailed, Tx<O>) -> Result<Fallback<O>, HandlerError> + Send>;

struct State<O> {
    tx: OutboxTransaction<'static>,
    fallback: Option<FallbackFn<O>>,
}

/// The writes and events of one delivery. A cheap handle (clones share one list), so a handler
/// takes it by value into its `async move` block; the library commits the list when the handler
/// returns `Ok`, and drops it when it returns `Err`.
pub struct Tx<O> {
    state: Arc<Mutex<State<O>>>,
}

impl<O> Clone for Tx<O> {
    fn clone(&self) -> Self {
        Self { state: self.state.clone() }
    }
}

impl<O> std::fmt::Debug for Tx<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").field("items", &self.len()).finish_non_exhaustive()
    }
}

impl<O> Tx<O> {
    /// An empty transaction whose events go to `writer`'s outbox table.
    pub(crate) fn new(writer: Option<Arc<OutboxWriter>>) -> Self {
        Self::around(OutboxTransaction::shared(writer, INBOX_ITEMS))
    }

    fn around(tx: OutboxTransaction<'static>) -> Self {
        Self { state: Arc::new(Mutex::new(State { tx, fallback: None })) }
    }

    /// An empty transaction, for testing a handler directly (its events go to `writer`).
    pub fn for_test(writer: Option<OutboxWriter>) -> Self {
        Self::new(writer.map(Arc::new))
    }

    fn lock(&self) -> MutexGuard<'_, State<O>> {
        // The lock is never held across an await or user code; a poisoned lock can only follow a
        // panic in this module's own few lines, which leave the state whole.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one of your writes (Put, Update, Delete or ConditionCheck). Writes are numbered from 0
    /// in the order added, as [`ConditionFailed::Write`] reports them.
    pub fn write(&self, item: TransactWriteItem) -> &Self {
        self.lock().tx.write(item);
        self
    }

    /// Adds an event to the consumer's outbox; returns the outbox item that will be stored (with
    /// its `payload_ref` when its payload goes to S3, uploaded before the commit). The same
    /// checks as [`OutboxTransaction::emit`].
    ///
    /// # Errors
    /// [`WriteError`] if the event is not publishable, the transaction is full (100 items less
    /// the inbox's 2), or the consumer has no outbox ([`WriteError::NoOutbox`]).
    pub fn emit(&self, event: Event) -> Result<OutboxItem, WriteError> {
        self.lock().tx.emit(event).cloned()
    }

    /// Sets the current sequence of an aggregate for [`Tx::emit_next`]
    /// ([`OutboxTransaction::sequence`]).
    pub fn sequence(&self, sequence: AggregateSequence) -> &Self {
        self.lock().tx.sequence(sequence);
        self
    }

    /// [`Tx::emit`] with the next sequence of the event's aggregate
    /// ([`OutboxTransaction::emit_next`]).
    ///
    /// # Errors
    /// As [`OutboxTransaction::emit_next`], and [`WriteError::NoOutbox`].
    pub fn emit_next(&self, event: Event) -> Result<OutboxItem, WriteError> {
        self.lock().tx.emit_next(event).cloned()
    }

    /// What to do when a condition of these writes is false (nothing was written, not even the
    /// inbox claim): `fallback` learns which write failed and gets a fresh `Tx` to fill with the
    /// alternative writes (e.g. record a rejection, emit `…Rejected`). Without a fallback, a
    /// failed condition fails the invocation ([`ConsumerError::ConditionFailed`](super::ConsumerError::ConditionFailed),
    /// retried by Lambda). The fallback's own `Tx` may set a fallback in turn.
    pub fn on_condition_failed<F>(&self, fallback: F) -> &Self
    where
        F: FnOnce(ConditionFailed, Tx<O>) -> Result<Fallback<O>, HandlerError> + Send + 'static,
    {
        self.lock().fallback = Some(Box::new(fallback));
        self
    }

    /// Number of items so far (your writes and events).
    pub fn len(&self) -> usize {
        self.lock().tx.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items so far, in request order (your writes and outbox puts), e.g. to assert on them
    /// in a handler's unit test.
    pub fn items(&self) -> Vec<TransactWriteItem> {
        self.lock().tx.items().to_vec()
    }

    /// The outbox items emitted so far.
    pub fn events(&self) -> Vec<OutboxItem> {
        self.lock().tx.events().to_vec()
    }

    /// Takes the transaction and the fallback out, leaving the handle empty.
    pub(crate) fn take(&self) -> (OutboxTransaction<'static>, Option<FallbackFn<O>>) {
        let mut state = self.lock();
        let fresh = state.tx.fresh();
        (std::mem::replace(&mut state.tx, fresh), state.fallback.take())
    }

    /// An empty `Tx` with the same writer, for the fallback.
    pub(crate) fn fresh(&self) -> Self {
        Self::around(self.lock().tx.fresh())
    }
}
