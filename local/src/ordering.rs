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
/// The aggregate's ordering row must exist (the consumer applied an event of it), unless
/// `create`: a mistyped `--consumer` or `--aggregate` would otherwise "succeed" by creating a
/// row nobody reads while the waiting event stays stuck. `create` is for a gap at the
/// aggregate's very first event.
///
/// # Errors
/// A message when `aggregate` is not `<type>#<id>`, `through` is 0, the row does not exist
/// (without `create`), or DynamoDB fails.
pub async fn release(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    aggregate: &str,
    through: u64,
    create: bool,
) -> Result<Released, String> {
    match aggregate.split_once('#') {
        Some((kind, id)) if !kind.is_empty() && !id.is_empty() => {}
        _ => return Err(format!("--aggregate {aggregate:?} must be <aggregate_type>#<aggregate_id>, e.g. Order#o-1001")),
    }
    if through == 0 {
        return Err("--through must be the sequence the gap waits for (1 or more)".into());
    }
    if !create {
        let key = format!("{consumer}#aggregate#{aggregate}");
        let found = dynamodb
            .get_item()
            .table_name(table)
            .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| format!("GetItem on {table}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        if found.item.is_none() {
            return Err(format!(
                "no ordering row {key:?} in {table}: check --consumer (the function's CONSUMER_NAME) and --aggregate (<aggregate_type>#<aggregate_id>, \
                 case matters, as the gap's log line prints them); if the aggregate's first event itself never came, pass --create"
            ));
        }
    }
    // The retention only concerns claim rows, which a release does not write.
    let inbox = outbox::Inbox::new(dynamodb.clone(), table, consumer, Duration::ZERO);
    let before = inbox.release_through(aggregate, through).await.map_err(|e| e.to_string())?;
    Ok(Released { before, after: before.max(through) })
}
