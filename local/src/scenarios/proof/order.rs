//! The invariant **each aggregate's effects in order**: every consumer applied each aggregate's
//! events in the aggregate's sequence order. Judged from the tables, never from counters:
//!
//! * what an event is: the outbox stream's `INSERT` images give its aggregate (the outbox item's
//!   `pk`, `<aggregate_type>#<aggregate_id>`) and its `sequence`;
//! * when a consumer applied it: the consumer's inbox claim row (`<consumer>#<event id>`), which
//!   is written in the effect's own transaction (`outbox::inbox::Inbox::claim`), records
//!   `processed_at` (RFC 3339, milliseconds); a parked event has no claim until it is applied.
//!
//! For each consumer and aggregate, the claims sorted by `processed_at` must carry increasing
//! sequences: an event applied after a later one of its aggregate breaks it. Two claims of one
//! aggregate in the same millisecond cannot be told apart: they are counted, not judged. A claim
//! whose `processed_at` cannot be read breaks it (nothing is skipped silently). Claims of events
//! the stream did not carry (the hot-aggregate scenario's, put on the bus directly) are not
//! judged here (`hot` judges those).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::reads::Carried;
use super::Invariant;

/// One claim row of a consumer's inbox: the consumer's logical id, the event id, `processed_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claim {
    pub(super) consumer: String,
    pub(super) event_id: String,
    pub(super) processed_at: String,
}

/// One applied event: when (`processed_at`), its sequence, its id.
type Applied<'a> = (DateTime<Utc>, u64, &'a str);

/// The invariant over `claims`, the events' aggregates and sequences from `carried`.
pub(super) fn verdict(carried: &[Carried], claims: &[Claim]) -> Invariant {
    let events: HashMap<&str, (&str, u64)> = carried.iter().filter_map(|c| Some((c.id.as_str(), (c.aggregate.as_str(), c.sequence?)))).collect();
    let mut by_aggregate: BTreeMap<(&str, &str), Vec<Applied<'_>>> = BTreeMap::new();
    let mut unreadable = Vec::new();
    let mut judged = 0usize;
    for claim in claims {
        let Some(&(aggregate, sequence)) = events.get(claim.event_id.as_str()) else { continue };
        match DateTime::parse_from_rfc3339(&claim.processed_at) {
            Ok(at) => {
                judged += 1;
                by_aggregate.entry((claim.consumer.as_str(), aggregate)).or_default().push((at.with_timezone(&Utc), sequence, &claim.event_id));
            }
            Err(_) => unreadable.push(format!("{} {} (processed_at {:?})", claim.consumer, claim.event_id, claim.processed_at)),
        }
    }
    let mut out_of_order = Vec::new();
    let mut same_millisecond = 0usize;
    for ((consumer, aggregate), applied) in &mut by_aggregate {
        applied.sort();
        for pair in applied.windows(2) {
            let ((at, sequence, id), (next_at, next_sequence, next_id)) = (pair[0], pair[1]);
            if at == next_at {
                same_millisecond += 1;
            } else if next_sequence <= sequence {
                out_of_order.push(format!(
                    "{consumer} {aggregate}: sequence {next_sequence} ({next_id}) applied at {} after sequence {sequence} ({id}) at {}",
                    next_at.to_rfc3339(),
                    at.to_rfc3339()
                ));
            }
        }
    }
    let first = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    Invariant {
        name: "each aggregate's effects in order (per consumer, the inbox claims' processed_at follow the events' sequence)".into(),
        held: out_of_order.is_empty() && unreadable.is_empty(),
        detail: format!(
            "{judged} effects of {} aggregate(s) and consumer(s) judged; {} out of order [{}]; {} unreadable [{}]; {same_millisecond} pair(s) in the same millisecond (not judged)",
            by_aggregate.len(),
            out_of_order.len(),
            first(&out_of_order),
            unreadable.len(),
            first(&unreadable)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried(id: &str, aggregate: &str, sequence: u64) -> Carried {
        Carried { id: id.into(), event_type: "OrderCreated".into(), aggregate: aggregate.into(), sequence: Some(sequence) }
    }

    fn claim(consumer: &str, id: &str, at: &str) -> Claim {
        Claim { consumer: consumer.into(), event_id: id.into(), processed_at: at.into() }
    }

    fn stream() -> Vec<Carried> {
        vec![carried("a1", "Order#o-1", 1), carried("a2", "Order#o-1", 2), carried("a3", "Order#o-1", 3), carried("b1", "Order#o-2", 1)]
    }

    #[test]
    fn effects_applied_in_sequence_order_hold_whatever_the_other_aggregates_do() {
        let claims = [
            claim("Reserve", "b1", "2026-12-03T10:00:00.000Z"),
            claim("Reserve", "a1", "2026-12-03T10:00:00.001Z"),
            claim("Reserve", "a3", "2026-12-03T10:00:00.300Z"),
            claim("Reserve", "a2", "2026-12-03T10:00:00.020Z"),
            // Another consumer, its own order; an event the stream did not carry is not judged.
            claim("Audit", "a2", "2026-12-03T09:00:00.000Z"),
            claim("Audit", "hot-1", "not a time"),
        ];
        let held = verdict(&stream(), &claims);
        assert!(held.held, "{}", held.detail);
        assert!(held.detail.starts_with("5 effects of 3 aggregate(s) and consumer(s) judged; 0 out of order"), "{}", held.detail);
    }

    #[test]
    fn an_event_applied_after_a_later_one_of_its_aggregate_breaks_it_and_is_named() {
        let claims = [
            claim("Reserve", "a1", "2026-12-03T10:00:00.000Z"),
            claim("Reserve", "a3", "2026-12-03T10:00:00.100Z"),
            claim("Reserve", "a2", "2026-12-03T10:00:00.200Z"),
        ];
        let broken = verdict(&stream(), &claims);
        assert!(!broken.held);
        assert!(
            broken.detail.contains(
                "1 out of order [Reserve Order#o-1: sequence 2 (a2) applied at 2026-12-03T10:00:00.200+00:00 after sequence 3 (a3) at 2026-12-03T10:00:00.100+00:00]"
            ),
            "{}",
            broken.detail
        );
    }

    #[test]
    fn the_same_millisecond_is_counted_not_judged_and_an_unreadable_time_breaks_it() {
        let tie = [claim("Reserve", "a2", "2026-12-03T10:00:00.000Z"), claim("Reserve", "a1", "2026-12-03T10:00:00.000Z")];
        let held = verdict(&stream(), &tie);
        assert!(held.held && held.detail.ends_with("1 pair(s) in the same millisecond (not judged)"), "{}", held.detail);
        let unreadable = verdict(&stream(), &[claim("Reserve", "a1", "")]);
        assert!(!unreadable.held && unreadable.detail.contains("1 unreadable [Reserve a1 (processed_at \"\")]"), "{}", unreadable.detail);
    }
}
