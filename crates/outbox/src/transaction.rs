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

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{CancellationReason, ReturnValuesOnConditionCheckFailure, TransactWriteItem};
use aws_sdk_dynamodb::Client;

/// Most items one `TransactWriteItems` call accepts (AWS limit, raised from 25 to 100 in 2022).
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// Why a transaction did not commit.
#[derive(Debug, thiserror::Error)]
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
