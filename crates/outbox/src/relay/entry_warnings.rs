//! One WARN line per failed `PutEvents` entry, bounded per batch, so an entry that keeps failing
//! is visible at the deployed log level (INFO) with the event it is, not only as a count in the
//! batch summary. Nothing is written for a batch whose entries all succeed.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::EntryFailure;
use crate::envelope::OutboxItem;

/// Most WARN lines for failed entries one batch writes ([`Relay::relay`](super::Relay::relay));
/// the failures after them are counted in one further WARN line at the end of the batch.
pub const MAX_FAILED_ENTRY_WARNINGS: usize = 10;

/// What the relay does next with a failed entry (the `action` field of its WARN line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Resent alone after a backoff, within this invocation: `retry`.
    Retry,
    /// Out of attempts or time: its record fails, and the event source mapping re-delivers the
    /// batch from it: `fail_record`.
    FailRecord,
    /// A permanent error code: the record goes to the relay's dead-letter queue: `dead_letter`.
    DeadLetter,
}

impl Next {
    fn as_str(self) -> &'static str {
        match self {
            Next::Retry => "retry",
            Next::FailRecord => "fail_record",
            Next::DeadLetter => "dead_letter",
        }
    }
}

/// The WARN lines of one batch's failed entries (shared by the batch's concurrent calls).
#[derive(Debug, Default)]
pub(crate) struct EntryWarnings {
    /// Failed entries seen so far in the batch (each attempt of each entry counts once).
    seen: AtomicUsize,
}

impl EntryWarnings {
    /// Logs the failure of `item`'s entry at `attempt` (from 1), or counts it when the batch has
    /// written [`MAX_FAILED_ENTRY_WARNINGS`] lines already. Fields: `event_id`, `event_type`,
    /// `aggregate_type`, `aggregate_id`, `error_code`, `error_message`, `attempt`, `action`.
    pub(crate) fn failed(&self, item: &OutboxItem, failure: &EntryFailure, attempt: u32, next: Next) {
        if self.seen.fetch_add(1, Ordering::Relaxed) >= MAX_FAILED_ENTRY_WARNINGS {
            return;
        }
        tracing::warn!(
            event_id = %item.event_id,
            event_type = %item.event_type,
            aggregate_type = %item.aggregate_type,
            aggregate_id = %item.aggregate_id,
            error_code = %failure.code,
            error_message = %failure.message,
            attempt,
            action = next.as_str(),
            "PutEvents entry failed"
        );
    }

    /// At the end of the batch: one WARN line with the count of the failures not logged
    /// (`not_logged`), when there were any.
    pub(crate) fn finish(&self) {
        let seen = self.seen.load(Ordering::Relaxed);
        if seen > MAX_FAILED_ENTRY_WARNINGS {
            tracing::warn!(
                logged = MAX_FAILED_ENTRY_WARNINGS,
                not_logged = seen - MAX_FAILED_ENTRY_WARNINGS,
                "more PutEvents entries failed in this batch than are logged one by one"
            );
        }
    }
}
