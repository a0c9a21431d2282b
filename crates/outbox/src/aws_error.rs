//! One classification of AWS errors for the whole crate: retryable or not, keeping the
//! service's error code and message.
//!
//! Every AWS call of the library (the producer's and consumers' `TransactWriteItems`, the inbox's
//! guarded-mode calls, the relay's `PutEvents`, dead-letter `SendMessage`) maps its failure with
//! [`AwsError::from_sdk`], so "may a later attempt succeed?" is answered in one place:
//!
//! | failure | retryable | why |
//! |---|---|---|
//! | throttling: `ThrottlingException`, `ProvisionedThroughputExceededException`, `RequestLimitExceeded`, `TooManyRequestsException`, `Throttling`, `SlowDown`, HTTP 429 | yes | capacity comes back |
//! | `TransactionConflict`(`Exception`), `TransactionInProgressException` | yes | the other transaction ends |
//! | HTTP 5xx, `InternalServerError`, `InternalFailure`, `ServiceUnavailable` | yes | the service recovers |
//! | time-outs (operation or attempt, [`SdkError::TimeoutError`]), dispatch/IO failures, unreadable responses | yes | the network recovers; a write that did commit is found by its idempotency (inbox claim, `ClientRequestToken`) |
//! | validation, `AccessDeniedException`, malformed request, `ConditionalCheckFailed`, `IdempotentParameterMismatch`, a request the SDK could not build | no | the same request fails the same way |
//!
//! The codes come from the SDK's own error metadata ([`ProvideErrorMetadata`], the `__type` /
//! `x-amzn-ErrorType` of the answer) and the raw HTTP status, never from the error's text.
//! Sources: DynamoDB "Error handling" (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>),
//! the `TransactWriteItems` API reference (cancellation reason codes,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>),
//! and the SDKs' retry behaviour (<https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html>).

// Parts of the classification serve only some features (cancellation codes: `writer`; jitter:
// `relay`, `inbox`): unused, not wrong, with the others off.
#![cfg_attr(not(all(feature = "writer", feature = "relay", feature = "inbox")), allow(dead_code))]

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Error codes (the service's `__type`, without namespace) after which a later attempt can
/// succeed.
pub(crate) const RETRYABLE_CODES: [&str; 19] = [
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "SlowDown",
    "TransactionConflictException",
    "TransactionInProgressException",
    "InternalServerError",
    "InternalServerException",
    "InternalFailure",
    "InternalError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// `CancellationReasons[].Code` values of a cancelled `TransactWriteItems` after which the same
/// transaction can commit later. `ConditionalCheckFailed`, `ValidationError` and
/// `ItemCollectionSizeLimitExceeded` cannot.
pub const RETRYABLE_CANCELLATION_CODES: [&str; 6] = [
    "TransactionConflict",
    "TransactionInProgress",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
    "RequestLimitExceeded",
    "InternalServerError",
];

/// Whether an error code (with or without its `namespace#` prefix) is retryable.
pub(crate) fn is_retryable_code(code: &str) -> bool {
    let code = code.rsplit('#').next().unwrap_or(code);
    RETRYABLE_CODES.contains(&code)
}

/// Whether a cancellation reason code is retryable (see [`RETRYABLE_CANCELLATION_CODES`]).
pub(crate) fn is_retryable_cancellation(code: &str) -> bool {
    RETRYABLE_CANCELLATION_CODES.contains(&code)
}

/// What kind of failure an [`AwsError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AwsErrorKind {
    /// The service answered with an error.
    Service,
    /// The operation or attempt time-out elapsed (see `TimeoutConfig`).
    Timeout,
    /// The request could not be sent or its answer not received (connection, IO).
    Dispatch,
    /// An answer arrived but could not be read.
    Response,
    /// The request could not be built (a bug in the caller).
    Construction,
}

/// A failed AWS call, classified: the operation, the service's code and message (when the
/// service answered), the HTTP status, and whether retrying can succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} failed: {detail}")]
#[non_exhaustive]
pub struct AwsError {
    /// The API operation, e.g. `TransactWriteItems`.
    pub operation: &'static str,
    /// What kind of failure.
    pub kind: AwsErrorKind,
    /// The service's error code, e.g. `ThrottlingException`, when it answered one.
    pub code: Option<String>,
    /// The service's message, e.g. which action on which resource was denied.
    pub message: Option<String>,
    /// HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// Whether a later attempt of the same request can succeed.
    pub retryable: bool,
    /// `code: message (HTTP status)`, or the SDK's error chain for failures without an answer.
    pub detail: String,
}

impl AwsError {
    /// A failure of `operation` described by hand (a test double's, a store's own): no error
    /// code, message or HTTP status, which the public fields take afterwards.
    pub fn new(operation: &'static str, kind: AwsErrorKind, retryable: bool, detail: impl Into<String>) -> Self {
        Self { operation, kind, code: None, message: None, status: None, retryable, detail: detail.into() }
    }

    /// Classifies a failed call of `operation` (see the module docs).
    pub fn from_sdk<E>(operation: &'static str, error: &SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let status = error.raw_response().map(|r| r.status().as_u16());
        let chain = || {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        };
        let (kind, retryable) = match error {
            SdkError::ServiceError(_) => {
                let by_code = error.code().is_some_and(is_retryable_code);
                let by_status = status.is_some_and(|s| s >= 500 || s == 429);
                (AwsErrorKind::Service, by_code || by_status)
            }
            SdkError::TimeoutError(_) => (AwsErrorKind::Timeout, true),
            SdkError::DispatchFailure(d) => (AwsErrorKind::Dispatch, !d.is_user()),
            SdkError::ResponseError(_) => (AwsErrorKind::Response, true),
            _ => (AwsErrorKind::Construction, false),
        };
        let code = error.code().map(str::to_owned);
        let message = error.message().map(str::to_owned);
        let detail = match (&code, &message) {
            (Some(c), Some(m)) => format!("{c}: {m}"),
            (Some(c), None) => c.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => chain(),
        };
        let detail = match status {
            Some(s) if kind == AwsErrorKind::Service => format!("{detail} (HTTP {s})"),
            _ => detail,
        };
        Self { operation, kind, code, message, status, retryable, detail }
    }

    /// A failure the service answered with `code` and `message` at HTTP `status`, classified as
    /// [`AwsError::from_sdk`] classifies it (retryable by code or by a 5xx/429 status). For fakes,
    /// tests and errors the library builds from a service answer it has already decoded.
    pub fn service(operation: &'static str, code: impl Into<String>, message: impl Into<String>, status: u16) -> Self {
        let (code, message) = (code.into(), message.into());
        let retryable = is_retryable_code(&code) || status >= 500 || status == 429;
        let detail = format!("{code}: {message} (HTTP {status})");
        Self { operation, kind: AwsErrorKind::Service, code: Some(code), message: Some(message), status: Some(status), retryable, detail }
    }

    /// A `TransactWriteItems` answered with `TransactionCanceledException`, classified by its
    /// cancellation reasons (`described`, one `code` or `code: message` per reason that is not
    /// `None`): retryable when one of them is ([`RETRYABLE_CANCELLATION_CODES`]). `detail` is
    /// `transaction cancelled: <reasons>`; `status` is the answer's, when known (400).
    pub fn cancelled(described: &[String], retryable: bool, message: Option<String>, status: Option<u16>) -> Self {
        Self {
            operation: "TransactWriteItems",
            kind: AwsErrorKind::Service,
            code: Some("TransactionCanceledException".to_owned()),
            message,
            status,
            retryable,
            detail: format!("transaction cancelled: {}", described.join(", ")),
        }
    }

    /// A request of `operation` that could not be built (`detail` says why): not retryable.
    pub fn construction(operation: &'static str, detail: impl Into<String>) -> Self {
        Self { operation, kind: AwsErrorKind::Construction, code: None, message: None, status: None, retryable: false, detail: detail.into() }
    }

    /// Whether a later attempt of the same request can succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The service's error code without its `namespace#` prefix, e.g. `AccessDeniedException`
    /// (`None` when the service did not answer one: time-out, network failure).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref().map(|c| c.rsplit('#').next().unwrap_or(c))
    }
}

/// Backoff before attempt `attempt + 1` (1-based `attempt`): a random time in
/// `[0, min(max, base × 2^attempt)]` ("full jitter",
/// <https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>).
#[cfg(any(feature = "relay", feature = "inbox"))]
pub(crate) fn full_jitter(base: std::time::Duration, max: std::time::Duration, attempt: u32) -> std::time::Duration {
    use rand::Rng;
    let ceiling = base.saturating_mul(2u32.saturating_pow(attempt.min(20))).min(max);
    let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    std::time::Duration::from_millis(if millis == 0 { 0 } else { rand::rng().random_range(0..=millis) })
}

#[cfg(all(test, feature = "writer"))]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
    use aws_smithy_mocks::{mock, mock_client, RuleMode};
    use aws_smithy_types::body::SdkBody;

    /// A `GetItem` answered with HTTP `status` and the awsJson body `{"__type": code, "message": …}`,
    /// with the SDK's retries off.
    async fn answer(status: u16, code: &str, message: &str) -> AwsError {
        let body = format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}"#);
        let rule = mock!(aws_sdk_dynamodb::Client::get_item)
            .then_http_response(move || HttpResponse::new(status.try_into().expect("a valid status"), SdkBody::from(body.clone())));
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule], |c| {
            c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        });
        let err: SdkError<GetItemError, HttpResponse> = client.get_item().table_name("t").send().await.unwrap_err();
        AwsError::from_sdk("GetItem", &err)
    }

    #[tokio::test]
    async fn throttles_and_5xx_are_retryable_and_keep_code_and_message() {
        for (status, code) in [
            (400, "ThrottlingException"),
            (400, "ProvisionedThroughputExceededException"),
            (400, "RequestLimitExceeded"),
            (400, "TransactionConflictException"),
            (400, "TransactionInProgressException"),
            (500, "InternalServerError"),
            (503, "ServiceUnavailable"),
            (503, "SomethingNew"),
            (429, "TooManyRequestsException"),
        ] {
            let e = answer(status, code, "try later").await;
            assert!(e.is_retryable(), "{status} {code}: {e}");
            assert_eq!((e.code.as_deref(), e.message.as_deref(), e.status), (Some(code), Some("try later"), Some(status)));
            assert_eq!(e.kind, AwsErrorKind::Service);
        }
    }

    #[tokio::test]
    async fn validation_and_access_denied_are_not_retryable_and_keep_the_message() {
        let denied =
            "User: arn:aws:sts::1:assumed-role/r is not authorized to perform: dynamodb:GetItem on resource: arn:aws:dynamodb:us-east-1:1:table/t";
        let e = answer(400, "AccessDeniedException", denied).await;
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("dynamodb:GetItem on resource: arn:aws:dynamodb:us-east-1:1:table/t"), "{e}");
        assert!(e.to_string().starts_with("GetItem failed: AccessDeniedException"), "{e}");
        assert!(!answer(400, "ValidationException", "bad key").await.is_retryable());
        assert!(!answer(400, "ConditionalCheckFailedException", "no").await.is_retryable());
        assert!(!answer(400, "IdempotentParameterMismatchException", "other params").await.is_retryable());
    }

    #[test]
    fn codes_with_a_namespace_are_classified_like_without() {
        assert!(is_retryable_code("com.amazonaws.dynamodb.v20120810#ThrottlingException"));
        assert!(!is_retryable_code("com.amazonaws.dynamodb.v20120810#ValidationException"));
        assert!(is_retryable_cancellation("TransactionConflict") && !is_retryable_cancellation("ConditionalCheckFailed"));
    }
}
