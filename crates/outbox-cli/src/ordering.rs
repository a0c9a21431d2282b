//! `outbox ordering parked|release`: the operator's view of an ordered consumer's waiting
//! events, and the way out of a sequence gap that will never close. An ordered consumer
//! ([`outbox::ordering::Ordered::by_types`]) applies an aggregate's events in sequence order; an
//! event that arrives before its predecessor is **parked** in the inbox table
//! (`outbox::ordering::ParkedEvent`) and applied when the predecessor is. Transient reordering
//! (a backlog drained at once) parks events for milliseconds. When a sequence never comes (the
//! relay dead-lettered that event, or it is skipped on purpose), its successor stays parked:
//! `ordering parked` lists every parked event with its age and flags those parked longer than
//! the gap limit (exit status 1 when there is one). It reads them from the inbox table's sparse
//! parked index ([`outbox::ordering::PARKED_INDEX`]: one `Query` per consumer, reading parked rows
//! only), and falls back to a filtered `Scan` of the whole table only for a table without the
//! index (and says so). Releasing moves the consumer's
//! `last_sequence` for the aggregate up to `N` ([`outbox::ordering::Ordered::release_through`]) and
//! re-publishes the events parked behind it to the bus, so the consumer applies them.
//!
//! It talks to the emulator with `--endpoint`/`AWS_ENDPOINT_URL`, else to AWS with your
//! ordinary configuration (profile, region, credentials).

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox::ordering::{Ordered, ParkedEvent};

use crate::{Error, Result};

/// A consumer's parked event, as `ordering parked` lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Parked {
    /// The consumer name.
    pub consumer: String,
    /// The event.
    pub event: ParkedEvent,
    /// How long it has been parked, seconds.
    pub age_secs: u64,
}

/// Every parked event in the inbox `table` (every consumer's), oldest first, each with its
/// payload: by a `Scan` of the parked index (parked rows only) and a `GetItem` per row when the
/// table has the index, else by a whole-table scan.
///
/// # Errors
/// [`Error::Aws`]: a call failed.
pub async fn parked(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Vec<Parked>> {
    match parked_index(dynamodb, table).await? {
        Some(index) => with_payloads(dynamodb, table, parked_by_index(dynamodb, table, &index, &[], None).await?.parked).await,
        None => Ok(parked_bounded(dynamodb, table, None, |_, _| {}).await?.parked),
    }
}

/// Every parked event of `consumer` in the inbox `table`, oldest first, each with its payload:
/// one `Query` of the parked index and a `GetItem` per row (a whole-table scan without the index).
///
/// # Errors
/// [`Error::Aws`]: a call failed.
pub async fn parked_of(dynamodb: &aws_sdk_dynamodb::Client, table: &str, consumer: &str) -> Result<Vec<Parked>> {
    let Some(index) = parked_index(dynamodb, table).await? else {
        let all = parked_bounded(dynamodb, table, None, |_, _| {}).await?.parked;
        return Ok(all.into_iter().filter(|p| p.consumer == consumer).collect());
    };
    with_payloads(dynamodb, table, parked_by_index(dynamodb, table, &index, &[consumer.to_owned()], None).await?.parked).await
}

/// `listed` (index entries, without payload) with their rows' payloads, read by key
/// (consistently); rows gone meanwhile are left out.
async fn with_payloads(dynamodb: &aws_sdk_dynamodb::Client, table: &str, listed: Vec<Parked>) -> Result<Vec<Parked>> {
    let mut found = Vec::with_capacity(listed.len());
    for p in listed {
        let inbox = Ordered::new(outbox::inbox::Inbox::new(dynamodb.clone(), table, &p.consumer, Duration::ZERO));
        let row = inbox.parked(&p.event.aggregate_type, &p.event.aggregate_id, p.event.waits_for).await;
        let row = row.map_err(Error::library(format!("reading parked event {} in {table}", p.event.event_id)))?;
        if let Some(event) = row.filter(|r| r.event_id == p.event.event_id) {
            found.push(Parked { event, ..p });
        }
    }
    Ok(found)
}

/// The name of the parked index of `table` (partition key
/// [`outbox::ordering::PARKED_CONSUMER`]), if it has one.
///
/// # Errors
/// [`Error::Aws`]: `DescribeTable` failed.
pub async fn parked_index(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Option<String>> {
    crate::lookup::index_keyed_by(dynamodb, table, outbox::ordering::PARKED_CONSUMER).await
}

/// The parked events in `table`'s parked index `index`, oldest first, without their payload:
/// one paginated `Query` per consumer of `consumers` (the index's partition key), or, when no
/// consumer is known, a `Scan` of the index (sparse: it reads parked rows only). At most
/// `limit` rows read in all.
///
/// # Errors
/// [`Error::Aws`]: a call failed.
pub async fn parked_by_index(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    index: &str,
    consumers: &[String],
    limit: Option<u64>,
) -> Result<ParkedScan> {
    let mut items = Vec::new();
    let mut complete = true;
    if consumers.is_empty() {
        let request = crate::lookup::ScanRequest { table, index: Some(index), limit, ..Default::default() };
        let scanned = crate::lookup::scan(dynamodb, &request, |_, _| {}).await?;
        complete = scanned.complete;
        items = scanned.items;
    }
    for consumer in consumers {
        let mut start = None;
        loop {
            let left = limit.map_or(1_000, |l| l.saturating_sub(items.len() as u64).min(1_000));
            if left == 0 {
                complete = false;
                break;
            }
            let answer = dynamodb
                .query()
                .table_name(table)
                .index_name(index)
                .key_condition_expression("#c = :c")
                .expression_attribute_names("#c", outbox::ordering::PARKED_CONSUMER)
                .expression_attribute_values(":c", AttributeValue::S(consumer.clone()))
                .limit(i32::try_from(left).unwrap_or(1_000))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(Error::aws(format!("Query {table} index {index}")))?;
            items.extend(answer.items().iter().cloned());
            start = answer.last_evaluated_key().cloned().filter(|k| !k.is_empty());
            if start.is_none() {
                break;
            }
        }
    }
    let read = items.len() as u64;
    Ok(ParkedScan { parked: listing(&items), read, complete })
}

/// The parked events among `items` (parked rows or index entries), oldest first.
fn listing(items: &[crate::lookup::Item]) -> Vec<Parked> {
    let now = chrono::Utc::now();
    let mut found = Vec::new();
    for item in items {
        let Some(event) = outbox::ordering::parked_from_item(item) else { continue };
        let consumer = [outbox::ordering::PARKED_CONSUMER, "consumer"]
            .iter()
            .find_map(|k| item.get(*k).and_then(|v| v.as_s().ok()).cloned())
            .unwrap_or_default();
        found.push(Parked { consumer, age_secs: event.age(now).as_secs(), event });
    }
    found.sort_by_key(|p| std::cmp::Reverse(p.age_secs));
    found
}

/// What [`parked_bounded`] found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParkedScan {
    /// The parked events, oldest first.
    pub parked: Vec<Parked>,
    /// Inbox items read.
    pub read: u64,
    /// Whether the whole table was read (false: stopped at the limit; more may be parked).
    pub complete: bool,
}

/// The parked events in the inbox `table`, oldest first, among at most `limit` items read, for a
/// table without the parked index ([`parked_by_index`]): a filtered `Scan` (`kind = parked`)
/// that reads every item of the table (claim rows included) up to `limit`, calling
/// `progress(read, parked)` after each page.
///
/// # Errors
/// [`Error::Aws`]: the `Scan` failed.
pub async fn parked_bounded(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    limit: Option<u64>,
    progress: impl FnMut(u64, usize),
) -> Result<ParkedScan> {
    let values = vec![(":parked", AttributeValue::S(outbox::ordering::PARKED_KIND.into()))];
    let request = crate::lookup::ScanRequest { table, filter: "kind = :parked", values, limit, consistent: true, ..Default::default() };
    let scanned = crate::lookup::scan(dynamodb, &request, progress).await?;
    Ok(ParkedScan { parked: listing(&scanned.items), read: scanned.read, complete: scanned.complete })
}

/// The lines `ordering parked` prints: one per parked event, `GAP` when parked longer than `gap_after`.
pub fn format_parked(parked: &[Parked], gap_after: Duration) -> String {
    if parked.is_empty() {
        return "no parked events: every ordered consumer is caught up\n".into();
    }
    let mut out = String::new();
    for p in parked {
        let flag = if p.age_secs >= gap_after.as_secs() { "GAP " } else { "    " };
        out.push_str(&format!(
            "{flag}{} {} {} sequence {} waits for {} — parked {} s; event {}\n",
            p.consumer,
            p.event.aggregate(),
            p.event.event_type,
            p.event.sequence,
            p.event.waits_for,
            p.age_secs,
            p.event.event_id
        ));
    }
    let gaps = parked.iter().filter(|p| p.age_secs >= gap_after.as_secs()).count();
    if gaps > 0 {
        out.push_str(&format!(
            "{gaps} parked longer than {} s: their predecessor may never come (see `dlq list`); release with `outbox ordering release --consumer C --aggregate A --through N`\n",
            gap_after.as_secs()
        ));
    }
    out
}

/// Re-publishes to `bus` the events of `consumer` parked on `aggregate` that a release through
/// `through` unblocks (they wait for `through` or earlier), deleting each parked row first (and
/// putting it back when the bus refuses the event). Returns how many were re-published.
///
/// # Errors
/// [`Error::Refused`] naming the event the bus refused (it and the rest stay parked),
/// [`Error::Record`] for a parked payload that is not an event, [`Error::Aws`] or
/// [`Error::Library`] when a call fails.
pub async fn republish_parked(
    dynamodb: &aws_sdk_dynamodb::Client,
    bus: &crate::republisher::Republisher,
    table: &str,
    consumer: &str,
    aggregate: &str,
    through: u64,
) -> Result<usize> {
    let inbox = Ordered::new(outbox::inbox::Inbox::new(dynamodb.clone(), table, consumer, Duration::ZERO));
    let mut sent = 0;
    for p in parked_of(dynamodb, table, consumer).await? {
        if p.event.aggregate() != aggregate || p.event.waits_for > through {
            continue;
        }
        let entry = crate::dlq::redrive_entry(&p.event.payload, bus.bus()).map_err(Error::record(format!("parked event {}", p.event.event_id)))?;
        inbox.unpark(&p.event).await.map_err(Error::library(format!("unparking event {} in {table}", p.event.event_id)))?;
        let refused = match bus.put(entry).await {
            Ok(Ok(())) => None,
            Ok(Err(reason)) => Some(reason),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = refused {
            let metadata: Option<outbox::envelope::EventMetadata> = serde_json::from_str::<serde_json::Value>(&p.event.payload)
                .ok()
                .and_then(|v| v.pointer("/detail/metadata").cloned())
                .and_then(|m| serde_json::from_value(m).ok());
            if let Some(metadata) = metadata {
                let _ = inbox.park(&metadata, p.event.waits_for, &p.event.payload).await;
            }
            return Err(Error::Refused { what: format!("parked event {}", p.event.event_id), reason: why, left: "it stays parked".into() });
        }
        sent += 1;
    }
    Ok(sent)
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The aggregate's `last_sequence` before (0: no row yet, or a row only parking wrote).
    pub before: u64,
    /// The one after: `max(before, through)`.
    pub after: u64,
}

/// Moves consumer `consumer`'s `last_sequence` of `aggregate` (`<aggregate_type>#<aggregate_id>`,
/// e.g. `Order#o-1001`) in the inbox `table` up to `through` (never down).
///
/// The aggregate's ordering row must exist (the consumer applied an event of it), unless
/// `create`: a mistyped `--consumer` or `--aggregate` would otherwise "succeed" by creating a
/// row nobody reads while the waiting event stays stuck. Parking creates the row (a gap at the
/// aggregate's first event included); `create` is for a row that does not exist: the waiting
/// event has not arrived yet.
///
/// # Errors
/// [`Error::InvalidArgument`] when `aggregate` is not `<type>#<id>` or `through` is 0,
/// [`Error::NotFound`] when the row does not exist (without `create`), [`Error::Aws`] or
/// [`Error::Library`] when DynamoDB fails.
pub async fn release(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    aggregate: &str,
    through: u64,
    create: bool,
) -> Result<Released> {
    match aggregate.split_once('#') {
        Some((kind, id)) if !kind.is_empty() && !id.is_empty() => {}
        _ => return Err(Error::invalid("--aggregate", aggregate, "must be <aggregate_type>#<aggregate_id>, e.g. Order#o-1001")),
    }
    if through == 0 {
        return Err(Error::invalid("--through", "0", "must be the sequence the gap waits for (1 or more)"));
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
            .map_err(Error::aws(format!("GetItem on {table}")))?;
        if found.item.is_none() {
            return Err(Error::NotFound(format!(
                "no ordering row {key:?} in {table}: check --consumer (the function's CONSUMER_NAME) and --aggregate (<aggregate_type>#<aggregate_id>, \
                 case matters, as the gap's log line prints them); if the waiting event has not arrived yet and you mean it, pass --create"
            )));
        }
    }
    // The retention only concerns claim rows, which a release does not write.
    let inbox = Ordered::new(outbox::inbox::Inbox::new(dynamodb.clone(), table, consumer, Duration::ZERO));
    let before = inbox.release_through(aggregate, through).await.map_err(Error::library(format!("releasing {aggregate} in {table}")))?;
    Ok(Released { before, after: before.max(through) })
}
