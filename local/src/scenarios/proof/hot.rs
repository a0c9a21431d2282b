//! The hot-aggregate scenario (`proof --hot-aggregate N`): N events of ONE aggregate, as the
//! books file's `hot_aggregate` says (the sample's: types repeating, one settled by a
//! `Duplicate` fallback; [`Books::hot_aggregate`]),
//! put on the consumer's bus (classic or Custom) in a shuffled order through `PutEvents` (10 entries a call), as
//! the relay's retries and EventBridge's parallel delivery mix them after a backlog. The
//! ordered consumer must park what arrives early and apply all N in sequence order, with no
//! dead letter and no operator. Judged from the inbox table:
//! - the aggregate's ordering row (`<consumer>#aggregate#<type>#<id>`) has `last_sequence` = N;
//! - each event has its inbox row (`<consumer>#<event id>`) with the outcome the books expect
//!   (the fallback's `nothing_to_do` included: recorded, so nothing waits for it);
//! - nothing of the aggregate is still parked (`<consumer>#parked#<type>#<id>#…`): neither an
//!   event that was never applied nor a parked row left behind by an event applied since (which
//!   `ordering parked` would list, and alarm on, as a gap);
//! - none of its events is in a dead-letter queue.
//!
//! The inbox rows' layout: `outbox::inbox` (`crates/outbox/src/inbox/parked.rs`'s table).
//!
//! [`Books::hot_aggregate`]: crate::scenarios::books::Books::hot_aggregate

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use super::bus::ProofBus;
use super::Invariant;
use crate::scenarios::books::{number, scan, text, HotAggregate};
use outbox_cli::message::DlqMessage as Message;

/// Puts the aggregate's events on `bus` in an order shuffled by `seed` (the plan's), 10 a call;
/// an entry the bus refuses is put again. On a Custom bus, in one event group (the aggregate, as
/// the relay groups them), each event its own deduplication id: the bus keeps the shuffled order.
///
/// # Errors
/// A `PutEvents` call that failed, or an entry refused 5 times.
pub(super) async fn publish(sdk: &aws_config::SdkConfig, bus: &ProofBus, hot: &HotAggregate, seed: u64) -> crate::Result<()> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut order: Vec<usize> = (0..hot.events.len()).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    match bus {
        ProofBus::Classic(bus) => publish_classic(&aws_sdk_eventbridge::Client::new(sdk), bus, hot, &order).await,
        ProofBus::Custom(arn) => publish_custom(&aws_sdk_eventbridgev2::Client::new(sdk), arn, hot, &order).await,
    }
}

async fn publish_classic(events: &aws_sdk_eventbridge::Client, bus: &str, hot: &HotAggregate, order: &[usize]) -> crate::Result<()> {
    for chunk in order.chunks(10) {
        let mut entries: Vec<PutEventsRequestEntry> = chunk
            .iter()
            .map(|i| {
                let e = &hot.events[*i];
                PutEventsRequestEntry::builder()
                    .event_bus_name(bus)
                    .source(&hot.source)
                    .detail_type(&e.detail_type)
                    .detail(e.detail.to_string())
                    .build()
            })
            .collect();
        for _ in 0..5 {
            let out = events.put_events().set_entries(Some(entries.clone())).send().await.map_err(crate::Error::aws("PutEvents"))?;
            // Answers are in request order; an entry without an event id failed.
            entries = entries.into_iter().zip(out.entries()).filter(|(_, r)| r.event_id().is_none()).map(|(e, _)| e).collect();
            if entries.is_empty() {
                break;
            }
        }
        if !entries.is_empty() {
            return Err(crate::Error::expectation(format!("PutEvents refused {} of the hot aggregate's entries 5 times", entries.len())));
        }
    }
    Ok(())
}

async fn publish_custom(bus: &aws_sdk_eventbridgev2::Client, arn: &str, hot: &HotAggregate, order: &[usize]) -> crate::Result<()> {
    use aws_sdk_eventbridgev2::types::{PutEventsRequestEntry as Entry, PutEventsSystemMetadata};
    let group = format!("{}#{}", hot.aggregate_type, hot.aggregate_id);
    for chunk in order.chunks(10) {
        let mut entries = Vec::new();
        for i in chunk {
            let e = &hot.events[*i];
            let system = PutEventsSystemMetadata::builder().event_group_id(&group).deduplication_id(e.id()).build();
            let entry = Entry::builder().source(&hot.source).detail_type(&e.detail_type).detail(e.detail.to_string()).system_metadata(system).build();
            entries.push(entry.map_err(crate::Error::other("a PutEvents entry"))?);
        }
        for _ in 0..5 {
            let out = bus.put_events().event_bus_arn(arn).set_entries(Some(entries.clone())).send().await.map_err(crate::Error::aws("PutEvents"))?;
            // Answers are in request order; an entry with an error code failed.
            entries = entries.into_iter().zip(out.entries()).filter(|(_, r)| r.error_code().is_some()).map(|(e, _)| e).collect();
            if entries.is_empty() {
                break;
            }
        }
        if !entries.is_empty() {
            return Err(crate::Error::expectation(format!("PutEvents refused {} of the hot aggregate's entries 5 times", entries.len())));
        }
    }
    Ok(())
}

/// The scenario's invariant, from the inbox table `inbox` and the dead letters `dead`.
///
/// # Errors
/// A DynamoDB call that failed.
pub(super) async fn verdict(dynamodb: &aws_sdk_dynamodb::Client, inbox: &str, hot: &HotAggregate, dead: &[Message]) -> crate::Result<Invariant> {
    let consumer = &hot.inbox_consumer;
    let aggregate = format!("{}#{}", hot.aggregate_type, hot.aggregate_id);
    let rows = scan(dynamodb, inbox, &["pk", "outcome", "last_sequence", "event_id"]).await?;
    let rows: HashMap<String, &HashMap<String, AttributeValue>> = rows.iter().map(|r| (text(r, "pk"), r)).collect();
    let last = rows.get(&format!("{consumer}#aggregate#{aggregate}")).and_then(|r| r.get("last_sequence")).map(number).unwrap_or(0);
    let mut wrong = Vec::new();
    for (i, e) in hot.events.iter().enumerate() {
        let outcome = rows.get(&format!("{consumer}#{}", e.id())).map(|r| text(r, "outcome"));
        if outcome.as_deref() != Some(e.outcome.as_str()) {
            wrong.push(format!("#{} {}: {} (expected {})", i + 1, e.detail_type, outcome.as_deref().unwrap_or("no inbox row"), e.outcome));
        }
    }
    let parked_prefix = format!("{consumer}#parked#{aggregate}#");
    let parked: Vec<String> = rows
        .iter()
        .filter(|(pk, _)| pk.starts_with(&parked_prefix))
        .map(|(_, r)| {
            let id = text(r, "event_id");
            let applied = rows.contains_key(&format!("{consumer}#{id}"));
            format!("{id}{}", if applied { " (applied: a parked row left behind)" } else { "" })
        })
        .collect();
    let ids: Vec<&str> = hot.events.iter().map(|e| e.id()).collect();
    let dead_lettered = dead.iter().filter(|m| m.event_id.as_deref().is_some_and(|id| ids.contains(&id))).count();
    let n = hot.events.len();
    Ok(Invariant {
        name: "the hot aggregate's events were all applied in sequence order".into(),
        held: last == n as u64 && wrong.is_empty() && parked.is_empty() && dead_lettered == 0,
        detail: format!(
            "{n} events of {aggregate} published shuffled; last_sequence {last} (expected {n}); {} without the expected inbox outcome [{}]; {} parked rows left [{}]; {dead_lettered} dead-lettered",
            wrong.len(),
            wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            parked.len(),
            parked.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        ),
    })
}
