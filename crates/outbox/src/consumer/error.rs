//! The consumer's errors: [`HandlerError`] (what your handler answers) and [`ConsumerError`]
//! (what an invocation failed with), one variant per failure mode, each retryable or not.

use crate::consumer::MalformedEvent;
use crate::inbox::InboxError;
use crate::transaction::ConditionFailed;
use crate::writer::WriteError;

/// Any error, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a handler did not produce an outcome. Nothing of its [`Tx`](super::Tx) is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// May succeed later (a read failed, a dependency is down): the invocation fails and Lambda
    /// retries it.
    #[error("{0}")]
    Retry(#[source] BoxError),
    /// Can never succeed: the event is dead-lettered now (`error_type` `Rejected`).
    #[error("{0}")]
    Reject(#[source] BoxError),
    /// The event breaks its contract (e.g. an empty list where one item is required):
    /// dead-lettered now (`error_type` `MalformedEvent`).
    #[error(transparent)]
    Malformed(#[from] MalformedEvent),
    /// An event the handler emits is not publishable: dead-lettered now (a bug to fix, then redrive).
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl HandlerError {
    /// [`HandlerError::Retry`] of `error`.
    pub fn retry(error: impl Into<BoxError>) -> Self {
        HandlerError::Retry(error.into())
    }

    /// [`HandlerError::Reject`] of `error`.
    pub fn reject(error: impl Into<BoxError>) -> Self {
        HandlerError::Reject(error.into())
    }

    /// Whether a later attempt can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HandlerError::Retry(_))
    }
}

/// Why a delivery failed or was dead-lettered. [`ConsumerError::error_type`] is the Lambda
/// `errorType` and the dead letter's `error_type`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumerError {
    /// The event can never be processed (bad envelope, unknown `detail-type`, `data` not matching
    /// the handler's type, or the handler said so).
    #[error(transparent)]
    Malformed(#[from] MalformedEvent),
    /// The inbox failed or found a conflict (payload mismatch, sequence gap, transaction failure).
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// An event the handler emitted could not be built.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A condition of the handler's writes was false and it set no fallback
    /// ([`Tx::on_condition_failed`](super::Tx::on_condition_failed)): retried, as the data may
    /// change.
    #[error("event {event_id}: {failed}, and the handler set no fallback")]
    ConditionFailed {
        /// `detail.metadata.id`.
        event_id: String,
        /// Which write.
        failed: ConditionFailed,
    },
    /// The handler failed: [`HandlerError::Retry`] or [`HandlerError::Reject`].
    #[error(transparent)]
    Handler(HandlerError),
    /// Ordering: this invocation's event was settled, but events parked behind it on its
    /// aggregate are still waiting (the invocation's budget ended, or one failed transiently;
    /// see [`ParkedEvent`](crate::ordering::ParkedEvent)). Retryable: the redelivery of this event finds it a
    /// duplicate and applies the parked events.
    #[error("events parked on {aggregate} still wait after sequence {after}: {why}")]
    ParkedPending {
        /// `<aggregate_type>#<aggregate_id>`.
        aggregate: String,
        /// The aggregate's last applied sequence.
        after: u64,
        /// Why the invocation stopped applying them.
        why: String,
    },
    /// The claim-checked payload (`detail.data_ref`) could not be fetched or is corrupt:
    /// missing and corrupt objects are dead-lettered, transient S3 failures retried.
    #[cfg(feature = "claim-check")]
    #[error(transparent)]
    ClaimCheck(#[from] crate::claim_check::ClaimCheckError),
}

impl From<HandlerError> for ConsumerError {
    fn from(e: HandlerError) -> Self {
        match e {
            HandlerError::Malformed(m) => ConsumerError::Malformed(m),
            HandlerError::Write(w) => ConsumerError::Write(w),
            other => ConsumerError::Handler(other),
        }
    }
}

impl ConsumerError {
    /// Short machine-readable name: `MalformedEvent`, `PayloadMismatch`, `SequenceGap`,
    /// `ParkedPending`, `InProgress`, `Retryable`, `InboxError`, `WriteError`, `ConditionFailed`, `Rejected`;
    /// with a claim check also `PayloadMissing`, `PayloadCorrupt`, `PayloadTooLarge`,
    /// `PayloadStoreError`.
    pub fn error_type(&self) -> &'static str {
        match self {
            ConsumerError::Malformed(_) => "MalformedEvent",
            ConsumerError::Inbox(InboxError::PayloadMismatch { .. }) => "PayloadMismatch",
            ConsumerError::Inbox(InboxError::SequenceGap { .. }) => "SequenceGap",
            ConsumerError::Inbox(InboxError::InProgress { .. }) => "InProgress",
            ConsumerError::Inbox(i) if i.is_retryable() => "Retryable",
            ConsumerError::Inbox(_) => "InboxError",
            ConsumerError::Write(_) => "WriteError",
            ConsumerError::ConditionFailed { .. } => "ConditionFailed",
            ConsumerError::Handler(HandlerError::Retry(_)) => "Retryable",
            ConsumerError::ParkedPending { .. } => "ParkedPending",
            ConsumerError::Handler(_) => "Rejected",
            #[cfg(feature = "claim-check")]
            ConsumerError::ClaimCheck(e) => e.error_type(),
        }
    }

    /// Whether a retry within the same invocation is worthwhile ([`RetryPolicy`](super::RetryPolicy)):
    /// a transient AWS failure of the inbox transaction (conflict, throttling, 5xx, time-out), a
    /// condition that failed without a fallback (the data changed; the handler reads it again) or
    /// a [`HandlerError::Retry`]. A sequence gap or a live lease is not: it waits for another
    /// delivery, which Lambda's retries (minutes apart) give time for.
    pub fn is_transient(&self) -> bool {
        match self {
            ConsumerError::Inbox(e @ (InboxError::Transaction(_) | InboxError::Sdk { .. })) => e.is_retryable(),
            ConsumerError::ConditionFailed { .. } | ConsumerError::Handler(HandlerError::Retry(_)) => true,
            #[cfg(feature = "claim-check")]
            ConsumerError::ClaimCheck(e) => e.is_retryable(),
            _ => false,
        }
    }

    /// Whether a later attempt can succeed (then the invocation fails and Lambda retries it;
    /// otherwise the event is dead-lettered at once).
    pub fn is_retryable(&self) -> bool {
        match self {
            ConsumerError::Malformed(_) | ConsumerError::Write(_) => false,
            ConsumerError::Inbox(e) => e.is_retryable(),
            ConsumerError::ConditionFailed { .. } | ConsumerError::ParkedPending { .. } => true,
            ConsumerError::Handler(h) => h.is_retryable(),
            #[cfg(feature = "claim-check")]
            ConsumerError::ClaimCheck(e) => e.is_retryable(),
        }
    }
}
