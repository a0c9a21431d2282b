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

use crate::aws_error::{is_retryable_cancellation, AwsError};

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
    /// A transient failure ([`AwsError`](crate::AwsError)): another transaction touched the same items
    /// (`TransactionConflict`), throttling, a 5xx, a time-out or a network failure. Retrying
    /// later can succeed. The SDK does NOT retry a cancelled transaction (`TransactionConflict`
    /// is a cancellation reason), so the caller must. The text keeps the service's code and
    /// message; the classified [`AwsError`] is the source.
    #[error("transaction conflicted, was throttled or the service failed ({}); retry later", .0.detail)]
    Retryable(#[source] AwsError),
    /// More than [`MAX_TRANSACTION_ITEMS`] items.
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items, got {0}")]
    TooManyItems(usize),
    /// A failure no retry fixes (validation, permissions, `IdempotentParameterMismatch`), with
    /// the service's code and message; the classified [`AwsError`] is the source (e.g.
    /// `code()` = `AccessDeniedException` or `ValidationException`).
    #[error("TransactWriteItems failed: {}", .0.detail)]
    Sdk(#[source] AwsError),
}

impl TransactionError {
    /// Whether a later retry of the same transaction can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, TransactionError::Retryable(_))
    }

    /// The classified AWS failure (code, HTTP status, retryable), when the transaction failed in
    /// AWS rather than on a condition or a limit.
    pub fn aws_error(&self) -> Option<&AwsError> {
        match self {
            TransactionError::Retryable(e) | TransactionError::Sdk(e) => Some(e),
            TransactionError::ConditionFailed { .. } | TransactionError::TooManyItems(_) => None,
        }
    }

    /// A classified failure as the variant its retryability calls for.
    pub fn from_aws(error: AwsError) -> Self {
        if error.is_retryable() {
            TransactionError::Retryable(error)
        } else {
            TransactionError::Sdk(error)
        }
    }
}

/// Executes `items` as one `TransactWriteItems` call.
///
/// **Idempotency.** The call carries a fresh `ClientRequestToken` (a UUID v4), one per call of
/// this function: the SDK's automatic retries of this call resend the same request, token
/// included, so when an attempt committed but its answer was lost (time-out, connection reset,
/// 5xx after the commit), DynamoDB answers the retry with success instead of running the
/// transaction again (whose conditions would now fail). DynamoDB honours a token for 10 minutes;
/// the same token with different parameters is `IdempotentParameterMismatchException` (not
/// retryable), which is why a *new* logical attempt (the caller rebuilding its items, e.g. a
/// consumer's in-invocation retry) gets a new token: its items differ (timestamps, event ids),
/// and the inbox claim or the caller's conditions already make it safe. Source: the
/// `TransactWriteItems` API reference, `ClientRequestToken`,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.
///
/// # Errors
/// See [`TransactionError`]; cancellation reasons are mapped by `classify_cancellation`, every
/// other failure by [`AwsError::from_sdk`] (retryable or not, with the service's code and message).
pub async fn transact_write(client: &Client, items: Vec<TransactWriteItem>) -> Result<(), TransactionError> {
    transact_write_with_token(client, items, uuid::Uuid::new_v4().to_string()).await
}

/// [`transact_write`] with the caller's `ClientRequestToken` (1 to 36 characters), for a caller
/// that retries one logical attempt itself and wants DynamoDB to recognise it.
///
/// # Errors
/// See [`transact_write`].
pub async fn transact_write_with_token(client: &Client, items: Vec<TransactWriteItem>, token: String) -> Result<(), TransactionError> {
    if items.len() > MAX_TRANSACTION_ITEMS {
        return Err(TransactionError::TooManyItems(items.len()));
    }
    let events = items.iter().filter(|i| i.put().is_some_and(|p| crate::envelope::is_outbox_item(p.item()))).count();
    let started = std::time::Instant::now();
    let result = send(client, items, token).await;
    record_metrics(&result, events, started.elapsed());
    result
}

async fn send(client: &Client, items: Vec<TransactWriteItem>, token: String) -> Result<(), TransactionError> {
    let err = match client.transact_write_items().set_transact_items(Some(items)).client_request_token(token).send().await {
        Ok(_) => return Ok(()),
        Err(err) => err,
    };
    if let SdkError::ServiceError(service) = &err {
        if let TransactWriteItemsError::TransactionCanceledException(cancelled) = service.err() {
            let status = Some(service.raw().status().as_u16());
            return Err(classify(cancelled.cancellation_reasons(), cancelled.message().map(str::to_owned), status));
        }
    }
    Err(TransactionError::from_aws(AwsError::from_sdk("TransactWriteItems", &err)))
}

/// The transaction's figures through the `metrics` facade (feature `metrics`; the function's
/// EMF recorder, `outbox_lambda::emf_metrics`, sends them to CloudWatch): counters
/// `TransactionsCommitted`, `EventsWritten` (outbox items committed), `TransactionsCancelled`
/// (dimension `function` only, for alarms) and `TransactionsCancelledByCause` (dimension
/// `cause`: `ConditionFailed`, `Retryable`, `TooManyItems`, `Error`), and the histogram
/// `TransactionMilliseconds` (the call, SDK retries included).
fn record_metrics(result: &Result<(), TransactionError>, events: usize, took: std::time::Duration) {
    #[cfg(feature = "metrics")]
    {
        metrics::histogram!(crate::contract::metric::TRANSACTION_MILLISECONDS).record(took.as_secs_f64() * 1000.0);
        match result {
            Ok(()) => {
                metrics::counter!(crate::contract::metric::TRANSACTIONS_COMMITTED).increment(1);
                metrics::counter!(crate::contract::metric::EVENTS_WRITTEN).increment(events as u64);
            }
            Err(e) => {
                let cause = match e {
                    TransactionError::ConditionFailed { .. } => "ConditionFailed",
                    TransactionError::Retryable(_) => "Retryable",
                    TransactionError::TooManyItems(_) => "TooManyItems",
                    TransactionError::Sdk(_) => "Error",
                };
                metrics::counter!(crate::contract::metric::TRANSACTIONS_CANCELLED).increment(1);
                metrics::counter!(crate::contract::metric::TRANSACTIONS_CANCELLED_BY_CAUSE, crate::contract::dimension::CAUSE => cause).increment(1);
            }
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (result, events, took);
}

/// Maps `CancellationReasons` to the first cause that matters:
/// a `ConditionalCheckFailed` reason wins (it is a definite answer about the data); otherwise a
/// `TransactionConflict`, throttling or capacity reason makes the whole transaction retryable
/// (`AwsError`'s retryable cancellation codes); anything else (e.g. `ValidationError`) is
/// reported as is. Each reason is reported as `code` or `code: message`; the [`AwsError`](crate::AwsError) of a
/// non-condition failure has code `TransactionCanceledException`. (The tests' entry; the client
/// path passes the answer's message and status to `classify`.)
#[cfg(test)]
fn classify_cancellation(reasons: &[CancellationReason]) -> TransactionError {
    classify(reasons, None, None)
}

fn classify(reasons: &[CancellationReason], message: Option<String>, status: Option<u16>) -> TransactionError {
    if let Some((index, reason)) = reasons.iter().enumerate().find(|(_, r)| r.code() == Some("ConditionalCheckFailed")) {
        return TransactionError::ConditionFailed { index, item: reason.item().cloned() };
    }
    let relevant = reasons.iter().filter(|r| r.code().is_some_and(|c| c != "None"));
    let described: Vec<String> = relevant
        .clone()
        .map(|r| match (r.code().unwrap_or_default(), r.message()) {
            (code, Some(message)) => format!("{code}: {message}"),
            (code, None) => code.to_owned(),
        })
        .collect();
    let retryable = relevant.clone().any(|r| r.code().is_some_and(is_retryable_cancellation));
    TransactionError::from_aws(AwsError::cancelled(&described, retryable, message, status))
}

/// A DynamoDB item: attribute name → value.
pub(crate) type Item = HashMap<String, AttributeValue>;

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
    /// `TransactionConflict`, throttling, capacity, a 5xx, a time-out or a network failure
    /// ([`AwsError`](crate::AwsError)): retrying later can succeed.
    #[error("transaction conflicted, was throttled or the service failed ({}); retry later", .source.detail)]
    Retryable {
        /// The classified AWS failure: code (`TransactionCanceledException` for a cancellation
        /// whose reasons are in `detail`), HTTP status, message.
        source: AwsError,
    },
    /// More than [`MAX_TRANSACTION_ITEMS`] items.
    #[error("a transaction holds at most {MAX_TRANSACTION_ITEMS} items, got {count}")]
    TooManyItems {
        /// Items in the transaction.
        count: usize,
    },
    /// Uploading a claim-checked payload failed before the transaction was sent (nothing written).
    #[cfg(feature = "claim-check")]
    #[error("storing a large payload failed, nothing was written: {0}")]
    ClaimCheck(#[source] crate::claim_check::ClaimCheckError),
    /// Anything else (validation, permissions): a bug or a configuration error, not retryable.
    /// `source` keeps the service's code and message (e.g. which action on which resource was
    /// denied): `source.code()` tells `AccessDeniedException` from `ValidationException`.
    #[error("TransactWriteItems failed: {}", .source.detail)]
    Other {
        /// The classified AWS failure.
        source: AwsError,
    },
}

impl CommitError {
    /// Whether a later retry of the same transaction can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            CommitError::Retryable { .. } => true,
            #[cfg(feature = "claim-check")]
            CommitError::ClaimCheck(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// The classified AWS failure (code, HTTP status, message), when the transaction failed in
    /// AWS: `Retryable` and `Other` (and a claim-check upload's S3 failure).
    pub fn aws_error(&self) -> Option<&AwsError> {
        match self {
            CommitError::Retryable { source } | CommitError::Other { source } => Some(source),
            #[cfg(feature = "claim-check")]
            CommitError::ClaimCheck(crate::claim_check::ClaimCheckError::S3 { source, .. }) => Some(source.as_ref()),
            _ => None,
        }
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

    /// Adds the caller's write in front of every item so far: it becomes write 0 and the writes
    /// added before it move up by one.
    pub(crate) fn write_first(&mut self, item: TransactWriteItem) {
        for slot in &mut self.slots {
            if let Slot::Write(n) = slot {
                *n += 1;
            }
        }
        self.slots.insert(0, Slot::Write(0));
        self.writes += 1;
        self.items.insert(0, item);
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
            TransactionError::Retryable(source) => CommitError::Retryable { source },
            TransactionError::TooManyItems(count) => CommitError::TooManyItems { count },
            TransactionError::Sdk(source) => CommitError::Other { source },
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

    use crate::testing::LostAnswer;

    fn put() -> TransactWriteItem {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name("orders")
            .item("pk", AttributeValue::S("Order#o-1".into()))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    #[tokio::test]
    async fn a_commit_whose_answer_is_lost_succeeds_on_the_sdk_retry_with_the_same_token() {
        let fake = LostAnswer::new(1);
        let client = fake.client();
        transact_write(&client, vec![put()]).await.expect("the retry is DynamoDB's idempotent replay: success, not a failed condition");
        let tokens = fake.tokens();
        assert_eq!(tokens.len(), 2, "one lost answer, one retry by the SDK");
        assert!(tokens[0].as_ref().is_some_and(|t| !t.is_empty() && t.len() <= 36), "{tokens:?}");
        assert_eq!(tokens[0], tokens[1], "the SDK's retry carries the same ClientRequestToken");
    }

    #[tokio::test]
    async fn every_logical_call_gets_its_own_token_whatever_the_client_provides() {
        // `with_test_defaults` installs a fixed idempotency-token provider: left to the SDK, two
        // different transactions within 10 minutes would share a token, and DynamoDB would answer
        // the second as a replay of the first without writing it.
        let fake = LostAnswer::new(1);
        let client = fake.client();
        transact_write(&client, vec![put()]).await.unwrap();
        let err = transact_write(&client, vec![put()]).await.unwrap_err();
        assert!(matches!(err, TransactionError::ConditionFailed { index: 0, .. }), "a second logical write is a new transaction: {err:?}");
        let tokens = fake.tokens();
        assert_ne!(tokens[0], tokens[2], "{tokens:?}");
    }

    #[tokio::test]
    async fn service_unavailable_and_throttling_are_retryable_access_denied_is_not_and_keeps_its_message() {
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let answer = |status: u16, code: &'static str, message: &'static str| async move {
            let body = format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}"#);
            let rule = mock!(Client::transact_write_items).then_http_response(move || {
                aws_sdk_dynamodb::config::http::HttpResponse::new(status.try_into().unwrap(), aws_smithy_types::body::SdkBody::from(body.clone()))
            });
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule], |c| {
                c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            });
            transact_write(&client, vec![put()]).await.unwrap_err()
        };
        for (status, code) in [(503, "ServiceUnavailable"), (400, "ThrottlingException"), (500, "InternalServerError")] {
            let err = answer(status, code, "slow down").await;
            assert!(err.is_retryable(), "{code}: {err}");
            assert!(err.to_string().contains(&format!("{code}: slow down")), "{err}");
        }
        let err = answer(400, "AccessDeniedException", "not authorized to perform: dynamodb:TransactWriteItems on resource: table/orders").await;
        assert!(!err.is_retryable());
        assert!(
            err.to_string().contains("AccessDeniedException: not authorized to perform: dynamodb:TransactWriteItems on resource: table/orders"),
            "{err}"
        );
    }

    #[test]
    fn cancellation_reasons_keep_their_messages() {
        let reason = CancellationReason::builder().code("ValidationError").message("One or more parameter values were invalid").build();
        let err = classify_cancellation(&[reason]);
        assert!(err.to_string().contains("ValidationError: One or more parameter values were invalid"), "{err}");
    }
}
