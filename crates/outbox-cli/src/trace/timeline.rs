//! One event's timeline: each stage's time, ordered, with the gap from the stage before.
//!
//! The stages and where their times come from:
//!
//! | stage | time | stored on AWS |
//! |---|---|---|
//! | `committed` | the outbox item's `occurred_at` (written in the producer's transaction) | yes, until the item expires |
//! | `published` | the bus accepted the relay's `PutEvents` entry | no: the relay's logs have it (docs/operations.md, "Logs") |
//! | `delivered` | the event reached a consumer function (or its queue) | no (a consumer's logs) |
//! | `applied`, `parked` | the consumer's inbox row (`processed_at`), its parked row (`parked_at`) | yes, for the inbox retention |
//! | `webhook-attempt` | each attempt of a webhook delivery (the dispatcher's attempt log, `at`) | yes |
//! | `dead-lettered` | when the dead-letter queue received the message (`SentTimestamp`) | yes, for the queue's retention |
//!
//! `published` and `delivered` appear only when something recorded them: the local runtime does
//! ([`Stage::recorded_by`] = `local runtime`; `published` = when the `PutEvents` call carrying
//! the accepted entry reached its endpoint); on AWS nothing stores them, and reading them would
//! mean querying logs, which `trace` does not do.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// What happened to the event at a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageKind {
    /// Written to the outbox table, in the producer's transaction.
    Committed,
    /// Accepted by the bus (the relay's `PutEvents` entry).
    Published,
    /// Handed to a consumer function or its queue.
    Delivered,
    /// Applied by a consumer (its inbox row).
    Applied,
    /// Parked by an ordered consumer, waiting for its predecessor.
    Parked,
    /// One attempt of a webhook delivery to a subscriber.
    WebhookAttempt,
    /// Received by a dead-letter queue.
    DeadLettered,
}

impl StageKind {
    /// The stage's name as printed and serialised.
    pub fn name(self) -> &'static str {
        match self {
            Self::Committed => "committed",
            Self::Published => "published",
            Self::Delivered => "delivered",
            Self::Applied => "applied",
            Self::Parked => "parked",
            Self::WebhookAttempt => "webhook-attempt",
            Self::DeadLettered => "dead-lettered",
        }
    }
}

/// One stage of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// What happened.
    pub stage: StageKind,
    /// To whom, when it concerns one: a consumer function, a webhook subscriber, a queue, a bus.
    pub who: Option<String>,
    /// When: RFC 3339 UTC with milliseconds.
    pub at: String,
    /// Milliseconds since the stage before it in the timeline (`None` for the first).
    pub gap_ms: Option<i64>,
    /// More about it (the consumer's outcome, the attempt's result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Who recorded a time AWS does not store (`local runtime`); `None`: read from the stack's data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_by: Option<String>,
    #[serde(skip)]
    time: DateTime<Utc>,
}

/// [`Stage::recorded_by`] of the stages the local runtime records.
pub const LOCAL_RUNTIME: &str = "local runtime";

impl Stage {
    /// A stage at `time`.
    pub fn new(stage: StageKind, who: Option<String>, time: DateTime<Utc>) -> Self {
        Self { stage, who, at: time.to_rfc3339_opts(SecondsFormat::Millis, true), gap_ms: None, detail: None, recorded_by: None, time }
    }

    /// A stage at `at` (RFC 3339), `None` when `at` does not parse.
    pub fn parse(stage: StageKind, who: Option<String>, at: &str) -> Option<Self> {
        DateTime::parse_from_rfc3339(at).ok().map(|t| Self::new(stage, who, t.with_timezone(&Utc)))
    }

    /// This stage with `detail`.
    #[must_use]
    pub fn with_detail(self, detail: impl Into<String>) -> Self {
        Self { detail: Some(detail.into()), ..self }
    }

    /// This stage as recorded by `by` (e.g. [`LOCAL_RUNTIME`]).
    #[must_use]
    pub fn recorded_by(self, by: impl Into<String>) -> Self {
        Self { recorded_by: Some(by.into()), ..self }
    }

    /// When it happened.
    pub fn time(&self) -> DateTime<Utc> {
        self.time
    }
}

/// `stages` in time order (a tie in the pipeline's order: committed, published, delivered,
/// applied or parked, attempts, dead-lettered), each with its gap from the one before.
pub fn assemble(mut stages: Vec<Stage>) -> Vec<Stage> {
    stages.sort_by_key(|s| (s.time, s.stage));
    let mut previous: Option<DateTime<Utc>> = None;
    for s in &mut stages {
        s.gap_ms = previous.map(|p| (s.time - p).num_milliseconds());
        previous = Some(s.time);
    }
    stages
}

/// The timeline's lines as `trace` prints them (indented by four spaces), e.g.
/// `    2026-12-04T12:00:00.135Z    +12 ms  published        classic bus orders-bus (local runtime)`.
pub fn render(stages: &[Stage]) -> String {
    let mut out = String::new();
    for s in stages {
        let gap = s.gap_ms.map(|g| format!("+{g} ms")).unwrap_or_default();
        let mut line = format!("    {}  {gap:>10}  {:<15}", s.at, s.stage.name());
        if let Some(who) = &s.who {
            line.push(' ');
            line.push_str(who);
        }
        if let Some(detail) = &s.detail {
            line.push_str(&format!(": {detail}"));
        }
        if let Some(by) = &s.recorded_by {
            line.push_str(&format!(" (recorded by the {by})"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The trace id (32 hex digits) of the first `traceparent` string anywhere in `value` (a dead
/// letter's body: an EventBridge event's `detail.metadata`, a relay failure's item).
pub fn trace_id_in(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Object(map) => map
            .get("traceparent")
            .and_then(|t| t.as_str())
            .map(|t| outbox::envelope::trace_id(Some(t)).to_owned())
            .filter(|id| !id.is_empty())
            .or_else(|| map.values().find_map(trace_id_in)),
        serde_json::Value::Array(items) => items.iter().find_map(trace_id_in),
        // A body nested as a JSON string (an SQS message in a record, a stringified detail).
        serde_json::Value::String(text) if text.contains("traceparent") => {
            serde_json::from_str::<serde_json::Value>(text).ok().as_ref().and_then(trace_id_in)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("a time").with_timezone(&Utc)
    }

    #[test]
    fn stages_are_ordered_by_time_with_gaps_from_the_one_before() {
        let stages = assemble(vec![
            Stage::new(StageKind::Applied, Some("InventoryFunction".into()), at("2026-12-04T12:00:00.190Z")),
            Stage::new(StageKind::Delivered, Some("InventoryFunction".into()), at("2026-12-04T12:00:00.140Z")).recorded_by(LOCAL_RUNTIME),
            Stage::new(StageKind::Committed, None, at("2026-12-04T12:00:00.123Z")),
            Stage::new(StageKind::Published, None, at("2026-12-04T12:00:00.135Z")).recorded_by(LOCAL_RUNTIME),
        ]);
        let kinds: Vec<StageKind> = stages.iter().map(|s| s.stage).collect();
        assert_eq!(kinds, [StageKind::Committed, StageKind::Published, StageKind::Delivered, StageKind::Applied]);
        let gaps: Vec<Option<i64>> = stages.iter().map(|s| s.gap_ms).collect();
        assert_eq!(gaps, [None, Some(12), Some(5), Some(50)]);
    }

    #[test]
    fn a_tie_keeps_the_pipelines_order() {
        let t = at("2026-12-04T12:00:00.100Z");
        let stages = assemble(vec![
            Stage::new(StageKind::Delivered, None, t),
            Stage::new(StageKind::Published, None, t),
            Stage::new(StageKind::Committed, None, t),
        ]);
        let kinds: Vec<StageKind> = stages.iter().map(|s| s.stage).collect();
        assert_eq!(kinds, [StageKind::Committed, StageKind::Published, StageKind::Delivered]);
        assert_eq!(stages[1].gap_ms, Some(0));
    }

    #[test]
    fn missing_stages_leave_gaps_between_the_known_ones() {
        // On AWS: no published or delivered time; the gap is from commit to the inbox row.
        let stages = assemble(vec![
            Stage::new(StageKind::Committed, None, at("2026-12-04T12:00:00.000Z")),
            Stage::new(StageKind::Applied, Some("ShippingFunction".into()), at("2026-12-04T12:00:01.250Z")),
        ]);
        assert_eq!(stages[1].gap_ms, Some(1250));
        assert!(assemble(Vec::new()).is_empty());
        assert_eq!(Stage::parse(StageKind::Applied, None, "yesterday"), None, "an unparsable time is no stage");
        let parsed = Stage::parse(StageKind::Applied, None, "2026-12-04T13:00:00+01:00").expect("RFC 3339");
        assert_eq!(parsed.at, "2026-12-04T12:00:00.000Z", "UTC, milliseconds");
    }

    #[test]
    fn rendering_prints_each_stage_with_its_gap_who_and_recorder() {
        let stages = assemble(vec![
            Stage::new(StageKind::Committed, None, at("2026-12-04T12:00:00.123Z")),
            Stage::new(StageKind::Published, Some("bus orders".into()), at("2026-12-04T12:00:00.135Z")).recorded_by(LOCAL_RUNTIME),
            Stage::new(StageKind::Applied, Some("InventoryFunction".into()), at("2026-12-04T12:00:00.190Z")).with_detail("reserved"),
        ]);
        assert_eq!(
            render(&stages),
            "    2026-12-04T12:00:00.123Z              committed\n\
             \x20   2026-12-04T12:00:00.135Z      +12 ms  published       bus orders (recorded by the local runtime)\n\
             \x20   2026-12-04T12:00:00.190Z      +55 ms  applied         InventoryFunction: reserved\n"
        );
    }

    #[test]
    fn the_trace_id_is_found_anywhere_in_a_dead_letters_body() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let event = serde_json::json!({"detail": {"metadata": {"id": "e-1", "traceparent": tp}}});
        assert_eq!(trace_id_in(&event).as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        let nested = serde_json::json!({"requestContext": {}, "body": event.to_string()});
        assert_eq!(trace_id_in(&nested).as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!(trace_id_in(&serde_json::json!({"detail": {"metadata": {"traceparent": "bogus"}}})), None);
    }
}
