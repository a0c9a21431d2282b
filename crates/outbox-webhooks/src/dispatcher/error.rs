//! The dispatcher's errors reading its configuration from AWS ([`DispatchError`]).

/// A failure reading configuration from AWS (retryable: the message is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// A call to AWS failed.
    #[error("{action} failed: {}", .source.detail)]
    Aws {
        /// What was being done.
        action: &'static str,
        /// The classified failure: code, HTTP status, whether a retry can succeed.
        #[source]
        source: outbox::AwsError,
    },
    /// A secret is not `whsec_` text.
    #[error("secret {secret_id} is unusable: {source}")]
    Secret {
        /// The secret id.
        secret_id: String,
        /// Why.
        #[source]
        source: crate::SecretError,
    },
    /// A subscriber item does not have the expected attributes.
    #[error("subscriber table item is malformed: {0}")]
    Subscriber(#[source] serde_dynamo::Error),
    /// An attempt log item cannot be written or read (its `attempts` list).
    #[error("an attempt log item (its `attempts` list) cannot be written or read: {0}")]
    AttemptLog(#[source] serde_dynamo::Error),
}

/// Maps a failed DynamoDB call doing `action` to [`DispatchError::Aws`].
pub(super) fn aws<E>(action: &'static str) -> impl FnOnce(aws_sdk_dynamodb::error::SdkError<E>) -> DispatchError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    move |e| DispatchError::Aws { action, source: outbox::AwsError::from_sdk(action, &e) }
}
