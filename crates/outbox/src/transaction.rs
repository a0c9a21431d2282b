//! Executing one DynamoDB `TransactWriteItems` call and reading why it was cancelled.
//!
//! The outbox writer and the inbox both rely on the same AWS behaviour: a transaction writes all
//! of its items or none, and when it is cancelled, `CancellationReasons` holds one reason per
//! request item, *in request order* (`None` for items that were fine). Source: the
//! `TransactWriteItems` API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.
//!
//! Limits enforced before the call, so they fail with a clear error instead of a
//! `ValidationException`: at most [`MAX_TRANSACTION_ITEMS`] items; two items on the same key are
//! the caller's bug and are left to DynamoDB to reject.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use aws_sdk_dynamodb::Client;

/// Most items one `TransactWriteItems` call accepts (AWS limit, raised from 25 to 100 in 2022).
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// Why a transaction did not commit, by request position (the low-level answer of
/// [`transact_write`]; [`CommitError`] names the write instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// A condition expression of item `index` (request order) was false. `item` is the item as
    /// stored when the request asked for it with `ReturnValuesOnConditionCheckFailure=ALL_OLD`.
    #[error("condition of transaction item {index} failed")]
    ConditionFailed {
        /// Position of the failed item in the request.
        index: usize,
        /// The stored item, if returned.
        item: Option<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>,
    },
    /// Another transaction or write touched the same items (`TransactionConflict`), or the table
    /// was throttled. Retrying later succeeds; the SDK's standard retry already tried.
    #[error("transaction conflicted or was throttled ({0}); retry later")]
    Retryable(String),
    /// More than [`MAX_TRANSACTION_ITEMS`] items.
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items, got {0}")]
    TooManyItems(usize),
    /// Any other failure (validation, permissions, network after retries).
    #[error("TransactWriteItems failed: {0}")]
    Sdk(String),
}

impl TransactionError {
    /// Whether a later retry of the same transaction can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TransactionError::Retryable(_))
    }
}

/// Executes `items` as one `TransactWriteItems` call.
///
/// # Errors
/// See [`TransactionError`]; cancellation reasons are mapped by [`classify_cancellation`].
pub async fn transact_write(client: &Client, items: Vec<TransactWriteItem>) -> Result<(), TransactionError> {
    if items.len() > MAX_TRANSACTION_ITEMS {
        return Err(TransactionError::TooManyItems(items.len()));
    }
    match client.transact_write_items().set_transact_items(Some(items)).send().await {
        Ok(_) => Ok(()),
        Err(SdkError::ServiceError(err)) => match err.err() {
            TransactWriteItemsError::TransactionCanceledException(cancelled) => Err(classify_cancellation(cancelled.cancellation_reasons())),
            TransactWriteItemsError::TransactionInProgressException(e) => Err(TransactionError::Retryable(format!("TransactionInProgress: {e}"))),
            TransactWriteItemsError::ProvisionedThroughputExceededException(e) => {
                Err(TransactionError::Retryable(format!("ProvisionedThroughputExceeded: {e}")))
            }
            TransactWriteItemsError::RequestLimitExceeded(e) => Err(TransactionError::Retryable(format!("RequestLimitExceeded: {e}"))),
            TransactWriteItemsError::InternalServerError(e) => Err(TransactionError::Retryable(format!("InternalServerError: {e}"))),
            other => Err(TransactionError::Sdk(format!("{other}"))),
        },
        Err(err @ (SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_))) => {
            Err(TransactionError::Retryable(format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(err))))
        }
        Err(err) => Err(TransactionError::Sdk(format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(err)))),
    }
}

/// Maps `CancellationReasons` to the first cause that matters:
/// a `ConditionalCheckFailed` reason wins (it is a definite answer about the data); otherwise a
/// `TransactionConflict`, throttling or capacity reason makes the whole transaction retryable;
/// anything else (e.g. `ValidationError`) is reported as is.
pub fn classify_cancellation(reasons: &[CancellationReason]) -> TransactionError {
    if let Some((index, reason)) = reasons.iter().enumerate().find(|(_, r)| r.code() == Some("ConditionalCheckFailed")) {
        return TransactionError::ConditionFailed { index, item: reason.item().cloned() };
    }
    let codes: Vec<String> = reasons.iter().filter_map(|r| r.code()).filter(|c| *c != "None").map(str::to_owned).collect();
    let retryable = ["TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"];
    if codes.iter().any(|c| retryable.contains(&c.as_str())) {
        TransactionError::Retryable(codes.join(", "))
    } else {
        TransactionError::Sdk(format!("transaction cancelled: {}", codes.join(", ")))
    }
}

/// A DynamoDB item: attribute name → value.
pub type Item = HashMap<String, AttributeValue>;

/// Which write of a transaction had a false condition expression.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConditionFailed {
    /// The caller's own write number `index` (0-based, counting only the writes added with
    /// `write`, in the order they were added). `item` is the item as stored, when the write asked
    /// for it with `ReturnValuesOnConditionCheckFailure=ALL_OLD` (see [`all_old`]).
    Write {
        /// Position among the caller's writes.
        index: usize,
        /// The stored item, if returned.
        item: Option<Item>,
    },
    /// An outbox put: `sequence` of the aggregate is already taken — another writer emitted an
    /// event for the same aggregate version (optimistic concurrency lost).
    SequenceTaken {
        /// The event type that could not be written.
        event_type: String,
        /// Aggregate type.
        aggregate_type: String,
        /// Aggregate id.
        aggregate_id: String,
        /// The sequence already taken.
        sequence: u64,
    },
}

impl std::fmt::Display for ConditionFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConditionFailed::Write { index, .. } => write!(f, "the condition of write {index} failed"),
            ConditionFailed::SequenceTaken { event_type, aggregate_type, aggregate_id, sequence } => {
                write!(f, "{event_type}: sequence {sequence} of {aggregate_type}#{aggregate_id} is already taken")
            }
        }
    }
}

/// Why an [`OutboxTransaction`](crate::OutboxTransaction) (or a consumer's transaction) did not
/// commit, naming the write. Nothing was written in any case: a transaction writes all or nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// A condition expression was false: which write, see [`ConditionFailed`]. Retrying the same
    /// transaction fails the same way until the data changes.
    #[error("transaction cancelled: {0}")]
    ConditionFailed(ConditionFailed),
    /// `TransactionConflict`, throttling, capacity, an internal error or a network failure,
    /// after the SDK's own retries: retrying later can succeed.
    #[error("transaction conflicted or was throttled ({reason}); retry later")]
    Retryable {
        /// The AWS error codes or SDK error, for logs.
        reason: String,
    },
    /// More than [`MAX_TRANSACTION_ITEMS`] items.
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items, got {count}")]
    TooManyItems {
        /// Items in the transaction.
        count: usize,
    },
    /// Anything else (validation, permissions): a bug or a configuration error, not retryable.
    #[error("TransactWriteItems failed: {reason}")]
    Other {
        /// The AWS error, for logs.
        reason: String,
    },
}

impl CommitError {
    /// Whether a later retry of the same transaction can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, CommitError::Retryable { .. })
    }
}

/// What occupies one request position of a [`Batch`].
#[derive(Debug, Clone)]
enum Slot {
    /// The caller's write number n.
    Write(usize),
    /// Outbox event number n (index into `Batch::events`).
    Event(usize),
}

/// The items of one transaction in the making, remembering which request position is whose, so
/// a cancellation can be reported as a [`ConditionFailed`] instead of a bare position. Shared by
/// the producer's `OutboxTransaction` and the consumer's `Tx`.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) items: Vec<TransactWriteItem>,
    slots: Vec<Slot>,
    writes: usize,
    pub(crate) events: Vec<crate::envelope::OutboxItem>,
}

impl Batch {
    /// Adds the caller's write.
    pub(crate) fn write(&mut self, item: TransactWriteItem) {
        self.slots.push(Slot::Write(self.writes));
        self.writes += 1;
        self.items.push(item);
    }

    /// Adds an outbox put for `event`.
    pub(crate) fn event(&mut self, put: TransactWriteItem, event: crate::envelope::OutboxItem) -> &crate::envelope::OutboxItem {
        self.slots.push(Slot::Event(self.events.len()));
        self.items.push(put);
        self.events.push(event);
        // Pushed on the line above: the vector is not empty.
        &self.events[self.events.len() - 1]
    }

    /// Whether request position `index` is an outbox put.
    pub(crate) fn is_event(&self, index: usize) -> bool {
        matches!(self.slots.get(index), Some(Slot::Event(_)))
    }

    /// Names the write at request position `index` (positions of this batch only).
    pub(crate) fn failed_at(&self, index: usize, item: Option<Item>) -> ConditionFailed {
        match self.slots.get(index) {
            Some(Slot::Event(n)) => {
                let e = &self.events[*n];
                ConditionFailed::SequenceTaken {
                    event_type: e.event_type.clone(),
                    aggregate_type: e.aggregate_type.clone(),
                    aggregate_id: e.aggregate_id.clone(),
                    sequence: e.sequence,
                }
            }
            Some(Slot::Write(n)) => ConditionFailed::Write { index: *n, item },
            // Positions come from DynamoDB's answer to this batch's own request: always in range.
            None => ConditionFailed::Write { index, item },
        }
    }

    /// Maps the low-level answer of [`transact_write`] to a [`CommitError`].
    pub(crate) fn commit_error(&self, error: TransactionError) -> CommitError {
        match error {
            TransactionError::ConditionFailed { index, item } => CommitError::ConditionFailed(self.failed_at(index, item)),
            TransactionError::Retryable(reason) => CommitError::Retryable { reason },
            TransactionError::TooManyItems(count) => CommitError::TooManyItems { count },
            TransactionError::Sdk(reason) => CommitError::Other { reason },
        }
    }
}

/// `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a failed condition returns the stored item.
pub fn all_old() -> ReturnValuesOnConditionCheckFailure {
    ReturnValuesOnConditionCheckFailure::AllOld
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason::builder().code(code).build()
    }

    #[test]
    fn condition_failure_is_reported_with_its_request_position() {
        let err = classify_cancellation(&[reason("None"), reason("ConditionalCheckFailed")]);
        assert!(matches!(err, TransactionError::ConditionFailed { index: 1, item: None }));
    }

    #[test]
    fn conflicts_and_throttles_are_retryable() {
        assert!(classify_cancellation(&[reason("TransactionConflict"), reason("None")]).is_retryable());
        assert!(classify_cancellation(&[reason("None"), reason("ThrottlingError")]).is_retryable());
    }

    #[test]
    fn a_condition_failure_wins_over_a_conflict() {
        let err = classify_cancellation(&[reason("TransactionConflict"), reason("ConditionalCheckFailed")]);
        assert!(matches!(err, TransactionError::ConditionFailed { index: 1, .. }));
    }

    #[test]
    fn validation_errors_are_not_retryable() {
        let err = classify_cancellation(&[reason("ValidationError")]);
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("ValidationError"));
    }
}
