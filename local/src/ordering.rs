//! `outbox-local ordering release`: the operator's way out of a sequence gap that will never
//! close. An ordered consumer ([`outbox::Inbox::ordered_by_types`]) applies an aggregate's
//! events in sequence order; when a sequence it waits for never comes (the relay dead-lettered
//! that event, or it is skipped on purpose), the waiting event is retried, logged with this
//! command line, counted (`SequenceGaps`) and finally dead-lettered with the reason
//! `SequenceGap … waits for sequence N`. Releasing moves the consumer's `last_sequence` for the
//! aggregate up to `N` ([`outbox::Inbox::release_through`]); the waiting event then applies on
//! its next retry, or with `outbox-local dlq redrive` once it was dead-lettered.
//!
//! It talks to the emulator with `--endpoint`/`AWS_ENDPOINT_URL`, else to AWS with your
//! ordinary configuration (profile, region, credentials).

use std::time::Duration;

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The aggregate's `last_sequence` before (0: no row yet).
    pub before: u64,
    /// The one after: `max(before, through)`.
    pub after: u64,
}

/// Moves consumer `consumer`'s `last_sequence` of `aggregate` (`<aggregate_type>#<aggregate_id>`,
/// e.g. `Order#o-1001`) in the inbox `table` up to `through` (never down).
///
/// # Errors
/// A message when `aggregate` is not `<type>#<id>` or DynamoDB fails.
pub async fn release(dynamodb: &aws_sdk_dynamodb::Client, table: &str, consumer: &str, aggregate: &str, through: u64) -> Result<Released, String> {
    match aggregate.split_once('#') {
        Some((kind, id)) if !kind.is_empty() && !id.is_empty() => {}
        _ => return Err(format!("--aggregate {aggregate:?} must be <aggregate_type>#<aggregate_id>, e.g. Order#o-1001")),
    }
    // The retention only concerns claim rows, which a release does not write.
    let inbox = outbox::Inbox::new(dynamodb.clone(), table, consumer, Duration::ZERO);
    let before = inbox.release_through(aggregate, through).await.map_err(|e| e.to_string())?;
    Ok(Released { before, after: before.max(through) })
}
