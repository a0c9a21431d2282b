//! Guarded mode in one call ([`InboxStore::guarded`]): for an effect outside DynamoDB (an HTTP
//! call to a partner, an email), which no transaction can cover. Like Powertools'
//! `idempotent_function`:
//!
//! ```text
//! delivery ──begin──▶ Acquired(lease) ──effect Ok(v)──▶ complete(lease, v) ──▶ Ran(v)
//!            │                         └─effect Err(e)─▶ release(lease)     ──▶ Err(Effect(e))
//!            ├──────▶ Completed{result} ─────────────────────────────────────▶ Replayed(v)
//!            └──────▶ InProgress (another lease is live) ────────────────────▶ Err(Inbox(InProgress)), retryable
//! ```
//!
//! A crash between claim and effect leaves an `IN_PROGRESS` row whose lease ends at
//! `lease_until`; the next delivery after that takes it over (see [`crate::inbox`]). So the
//! effect runs at least once and, unless a crash falls between the effect and `complete`, once.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{Claim, InboxError, InboxStore, PayloadHash};
use crate::envelope::EventMetadata;

/// The value of a guarded effect.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded<R> {
    /// The effect ran in this invocation and returned this value (now stored).
    Ran(R),
    /// The effect ran before; this is the value it stored. The effect did not run again.
    Replayed(R),
}

impl<R> Guarded<R> {
    /// The value, however it was obtained.
    pub fn into_inner(self) -> R {
        match self {
            Guarded::Ran(r) | Guarded::Replayed(r) => r,
        }
    }

    /// Whether the value was replayed from the store.
    pub fn is_replayed(&self) -> bool {
        matches!(self, Guarded::Replayed(_))
    }
}

/// Why a guarded effect did not produce a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardedError<E> {
    /// The inbox refused or failed: another invocation holds the claim
    /// ([`InboxError::InProgress`], retryable), the id came with another payload, or the lease was
    /// lost before the result was stored.
    #[error(transparent)]
    Inbox(InboxError),
    /// The effect failed; the claim was released so a retry can run it again.
    #[error("the guarded effect failed")]
    Effect(#[source] E),
    /// The effect's value does not serialise to JSON, or the stored one does not deserialise.
    #[error("the guarded result does not (de)serialise: {0}")]
    Result(#[source] serde_json::Error),
}

impl<E> GuardedError<E> {
    /// Whether retrying the delivery later can succeed (an effect error is assumed to be).
    pub fn is_retryable(&self) -> bool {
        match self {
            GuardedError::Inbox(e) => e.is_retryable(),
            GuardedError::Effect(_) => true,
            GuardedError::Result(_) => false,
        }
    }
}

/// The state machine of [`InboxStore::guarded`].
pub(crate) async fn run<S, R, E, F, Fut>(
    store: &S,
    metadata: &EventMetadata,
    payload_hash: &PayloadHash,
    lease_until: DateTime<Utc>,
    effect: F,
) -> Result<Guarded<R>, GuardedError<E>>
where
    S: InboxStore + ?Sized,
    R: Serialize + DeserializeOwned,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<R, E>>,
{
    let lease = match store.begin(metadata, payload_hash, lease_until).await.map_err(GuardedError::Inbox)? {
        Claim::Acquired(lease) => lease,
        Claim::Completed { result } => {
            // Rows completed without a result (`complete(lease, None)`) replay as JSON `null`.
            let stored = result.as_deref().unwrap_or("null");
            return serde_json::from_str(stored).map(Guarded::Replayed).map_err(GuardedError::Result);
        }
    };
    let value = match effect().await {
        Ok(value) => value,
        Err(e) => {
            if let Err(release) = store.release(&lease).await {
                // The lease ends by itself at `lease_until`: the retry waits until then.
                tracing::warn!(event_id = %metadata.id, error = %release, "could not release the claim after a failed effect");
            }
            return Err(GuardedError::Effect(e));
        }
    };
    let stored = serde_json::to_string(&value).map_err(GuardedError::Result)?;
    store.complete(&lease, Some(&stored)).await.map_err(GuardedError::Inbox)?;
    Ok(Guarded::Ran(value))
}
