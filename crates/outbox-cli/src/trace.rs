//! "Where is event X?": one event's path through the stack, answered from the data itself —
//! the outbox item, each consumer's inbox row, and any dead-letter message that holds it.
//! Works against the emulator and, with ordinary AWS configuration, against a deployed stack.
//!
//! What it reads, and what that costs on AWS:
//! * the outbox item, by default ([`Lookup::Index`]) by its event id: one `DescribeTable` (which
//!   index is keyed by `event_id`), one `Query` of that index and one `GetItem` of the item
//!   ([`crate::lookup::by_event_id`]; the templates give the outbox table that index, `KEYS_ONLY`
//!   and sparse). A table without it is reported, not scanned. When the caller knows the key
//!   ([`Lookup::Key`]: `--aggregate`, `--sequence`): one `GetItem` of `pk` = the aggregate, `sk` =
//!   the sequence. [`Lookup::Scan`] (`--scan`) is the last resort for a table without the
//!   index: a `Scan` that reads items until it meets the event
//!   ([Scan](https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html));
//! * each consumer's inbox row (a function with `INBOX_TABLE` and an EventBridge rule delivering
//!   to it, directly or through the queue its SQS event source mapping reads): one
//!   `GetItem` of `<CONSUMER_NAME>#<event id>` in the table its `INBOX_TABLE` names (the key [`outbox::inbox::Inbox::key`] writes);
//!   a parked row by one `DescribeTable` and one `Query` of the inbox table's parked index (the
//!   consumer's parked rows only, [`crate::ordering::parked_by_index`]); in a table without
//!   that index, by its key (`<consumer>#parked#<aggregate>#<sequence − 1>`) once the
//!   aggregate and sequence are known (given, or read from the outbox item), by a filtered
//!   `Scan` of the inbox only with [`Lookup::Scan`];
//! * each webhook subscriber's delivery (a function with `INBOX_TABLE` and
//!   `WEBHOOK_SUBSCRIBERS_TABLE`): a `Scan` of the subscriber table, then one `GetItem` of
//!   `<WEBHOOK_CONSUMER_NAME>#<subscriber>#<event id>` per subscriber of the event's type, and
//!   one of its attempt log `<WEBHOOK_CONSUMER_NAME>#attempts#<subscriber>#<event id>` (every
//!   attempt's status, latency and response excerpt);
//! * every dead-letter queue of the template, read without consuming ([`crate::dlq::peek`]).
//!
//! Whether the relay published the event is not stored anywhere: it is inferred (a consumer
//! applied it, or the relay dead-lettered it). When neither holds, the answer says "not known"
//! and points at the relay's logs (the Logs Insights query of docs/operations.md, "Logs").
//!
//! The answer names the event's W3C trace id (the outbox item's `traceparent`, else a consumer's
//! inbox row's `trace_id`, else a dead letter's body) and orders every stored time into a
//! [`timeline`] with the gaps between stages. The times of publishing and of delivery to each
//! consumer are not stored on AWS; the local runtime records them, and `outbox-local trace`
//! adds them ([`Trace::add_stages`]).

pub mod timeline;

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

use crate::dlq;
use crate::lookup::{self, ById, ScanRequest};
use crate::message::DlqMessage;
use crate::resources::{FunctionInfo, Resources};
use crate::{Error, Result};
use timeline::{Stage, StageKind};

/// How `trace` finds the outbox item and a parked row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// By the outbox table's global secondary index on `event_id` (the default): a `Query`
    /// and a `GetItem`; the parked row then by the item's aggregate and sequence.
    Index,
    /// By key: the event's aggregate (`<aggregate_type>#<aggregate_id>`) and sequence.
    Key {
        /// `<aggregate_type>#<aggregate_id>`, e.g. `Order#o-1001`.
        aggregate: String,
        /// The event's sequence within the aggregate.
        sequence: u64,
    },
    /// By a filtered `Scan` of the outbox tables (and the inbox tables for parked rows): reads
    /// every item.
    Scan,
    /// Not at all: the consumers' inbox rows and the dead letters only.
    Skip,
}

/// The outbox item of the event, as stored.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxRow {
    /// Table name.
    pub table: String,
    /// `pk`: `<aggregate_type>#<aggregate_id>`.
    pub pk: String,
    /// Sequence within the aggregate.
    pub sequence: Option<u64>,
    /// Event type.
    pub event_type: Option<String>,
    /// When the event happened (RFC 3339).
    pub occurred_at: Option<String>,
    /// Correlation id of the request that wrote it.
    pub correlation_id: Option<String>,
    /// Event source.
    pub source: Option<String>,
    /// W3C `traceparent` of the request that wrote it.
    pub traceparent: Option<String>,
}

/// One consumer's view of the event.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerRow {
    /// The consumer function's logical id.
    pub function: String,
    /// Its `CONSUMER_NAME` (`<WEBHOOK_CONSUMER_NAME> → subscriber <id>` for a webhook delivery;
    /// `?` when the function sets none).
    pub consumer: String,
    /// Inbox table name.
    pub table: String,
    /// `applied (<outcome>)` (`delivered` for a webhook subscriber), `parked: …` (waiting for its
    /// predecessor), `absorbed: …` (an ordered consumer's aggregate is past the event's sequence:
    /// a late copy taken as a duplicate, no row), `in progress …`, `absent`, `not subscribed`
    /// (none of its rules match the outbox item's source and type; a subscriber without the type
    /// in its `event_types`), or `not looked up: …` (the function sets no `CONSUMER_NAME`).
    pub state: String,
    /// When it was applied (`processed_at`, as stored).
    pub at: Option<String>,
    /// The event's trace id as the consumer's inbox row stored it (`trace_id`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// A webhook delivery's attempts (status, latency, response excerpt), as the dispatcher
    /// recorded them; empty for consumers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<outbox_webhooks::dispatcher::AttemptRecord>,
}

impl ConsumerRow {
    /// Whether the consumer has the event (applied, parked, absorbed, in progress, delivered).
    pub fn received(&self) -> bool {
        ![ABSENT, NOT_SUBSCRIBED, NO_CONSUMER_NAME].contains(&self.state.as_str())
    }
}

/// [`ConsumerRow::state`] of a consumer none of whose rules match the event.
const NOT_SUBSCRIBED: &str = "not subscribed";

/// Everything known about one event.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    /// The event id asked about.
    pub event_id: String,
    /// Its W3C trace id (32 hex digits): from the outbox item's `traceparent`, else a consumer's
    /// inbox row, else a dead letter's body; `None` when none of them has one.
    pub trace_id: Option<String>,
    /// The outbox item, if it is still in the table (published items expire by TTL).
    pub outbox: Option<OutboxRow>,
    /// How the outbox item was looked for: `index`, `key`, `scan`, `skipped`, or `no index`
    /// (the default lookup on a table without the event-id index: nothing was read).
    pub outbox_lookup: String,
    /// `published` (a consumer applied it), `dead-lettered by the relay`, or `not known`.
    pub relay: String,
    /// One row per consumer of the template (functions with `INBOX_TABLE`).
    pub consumers: Vec<ConsumerRow>,
    /// Dead-letter messages that hold it.
    pub dead_letters: Vec<DlqMessage>,
    /// Each known stage's time, in order, with the gap from the one before ([`timeline`]).
    pub timeline: Vec<Stage>,
}

impl Trace {
    /// Whether the event was found anywhere.
    pub fn found(&self) -> bool {
        self.outbox.is_some() || !self.dead_letters.is_empty() || self.consumers.iter().any(ConsumerRow::received)
    }

    /// Adds `stages` (e.g. what the local runtime recorded) to the timeline, in order.
    pub fn add_stages(&mut self, stages: impl IntoIterator<Item = Stage>) {
        let mut all = std::mem::take(&mut self.timeline);
        all.extend(stages);
        self.timeline = timeline::assemble(all);
    }

    /// The trace id and the timeline from what was read: the outbox item, the consumers' rows
    /// and attempts, the dead letters.
    fn assemble_timeline(&mut self) {
        let from_outbox = self.outbox.as_ref().and_then(|o| o.traceparent.as_deref()).map(|t| outbox::envelope::trace_id(Some(t)).to_owned());
        self.trace_id = from_outbox
            .filter(|id| !id.is_empty())
            .or_else(|| self.consumers.iter().find_map(|c| c.trace_id.clone()))
            .or_else(|| self.dead_letters.iter().find_map(|m| serde_json::from_str(&m.body).ok().as_ref().and_then(timeline::trace_id_in)));
        let mut stages = Vec::new();
        if let Some(at) = self.outbox.as_ref().and_then(|o| o.occurred_at.as_deref()) {
            stages.extend(Stage::parse(StageKind::Committed, None, at));
        }
        for c in &self.consumers {
            let kind = if c.state.starts_with("parked") { StageKind::Parked } else { StageKind::Applied };
            let who = if c.attempts.is_empty() { c.function.clone() } else { c.consumer.clone() };
            let detail =
                c.state.strip_prefix("applied ").or_else(|| c.state.strip_prefix("delivered ")).map(|d| d.trim_matches(['(', ')']).to_owned());
            // A webhook delivery's attempts stand for it; its row only when they are gone.
            if c.attempts.is_empty() || kind == StageKind::Parked {
                if let Some(stage) = c.at.as_deref().and_then(|at| Stage::parse(kind, Some(who.clone()), at)) {
                    stages.push(match detail {
                        Some(d) => stage.with_detail(d),
                        None => stage,
                    });
                }
            }
            for a in &c.attempts {
                if let Some(stage) = Stage::parse(StageKind::WebhookAttempt, Some(who.clone()), &a.at) {
                    stages.push(stage.with_detail(format!("attempt {}, {} in {} ms", a.attempt, a.outcome, a.latency_ms)));
                }
            }
        }
        for m in &self.dead_letters {
            if let Some(stage) = m.sent_at.as_deref().and_then(|at| Stage::parse(StageKind::DeadLettered, Some(m.queue.clone()), at)) {
                stages.push(stage.with_detail(m.cause.clone()));
            }
        }
        self.add_stages(stages);
    }

    /// The answer in lines a person reads.
    pub fn render(&self) -> String {
        let mut out = format!("event {}\n", self.event_id);
        if let Some(id) = &self.trace_id {
            out.push_str(&format!("  trace      {id}\n"));
        }
        match &self.outbox {
            Some(o) => out.push_str(&format!(
                "  outbox     {} in {} (sequence {}), written {} by correlation id {}\n",
                o.event_type.as_deref().unwrap_or("?"),
                o.pk,
                o.sequence.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                o.occurred_at.as_deref().unwrap_or("?"),
                o.correlation_id.as_deref().unwrap_or("?"),
            )),
            None if self.outbox_lookup == "skipped" => out.push_str(
                "  outbox     not looked up: its key is the aggregate and sequence (--aggregate, --sequence); --scan reads the whole table\n",
            ),
            None if self.outbox_lookup == NO_INDEX => out.push_str(
                "  outbox     not looked up: the outbox table has no index on event_id (the templates' OutboxTable has one); \
                 pass --aggregate and --sequence (its key), or --scan (reads the table)\n",
            ),
            None => out.push_str("  outbox     no item (never written, or expired after publishing)\n"),
        }
        out.push_str(&format!("  relay      {}\n", self.relay));
        for c in &self.consumers {
            let at = c.at.as_deref().map(|a| format!(" at {a}")).unwrap_or_default();
            out.push_str(&format!("  consumer   {} ({}): {}{at}\n", c.function, c.consumer, c.state));
            for a in &c.attempts {
                out.push_str(&format!(
                    "             attempt {} at {}: {} in {} ms{}\n",
                    a.attempt,
                    a.at,
                    a.outcome,
                    a.latency_ms,
                    excerpt(&a.excerpt)
                ));
            }
        }
        for m in &self.dead_letters {
            out.push_str(&format!("  dead letter {} in {}: {}\n", m.message_id, m.queue, m.reason));
        }
        if !self.timeline.is_empty() {
            out.push_str("  timeline\n");
            out.push_str(&timeline::render(&self.timeline));
            if !self.timeline.iter().any(|s| s.stage == StageKind::Published) {
                out.push_str(
                    "    (publish and delivery times are not stored on AWS: the relay's logs have them, docs/operations.md \"Logs\"; \
                     the local runtime records them)\n",
                );
            }
        }
        out
    }
}

/// Traces `event_id` through the stack's `resources`, finding its outbox item as `lookup` says.
///
/// # Errors
/// [`Error::Aws`]: the failed AWS call, naming the table or queue.
pub async fn trace(sdk: &aws_config::SdkConfig, resources: &Resources, event_id: &str, lookup: &Lookup) -> Result<Trace> {
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);

    // The outbox: tables whose stream feeds a function.
    let mut outbox = None;
    let mut no_index = false;
    for table in resources.outbox_tables() {
        let found = match find_outbox_item(&dynamodb, &table, event_id, lookup).await? {
            ById::Found(item) => Some(item),
            ById::Absent => None,
            ById::NoIndex => {
                no_index = true;
                None
            }
        };
        if let Some(item) = found {
            let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
            outbox = Some(OutboxRow {
                table: table.clone(),
                pk: text("pk").unwrap_or_default(),
                sequence: item.get("sequence").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()),
                event_type: text("event_type"),
                occurred_at: text("occurred_at"),
                correlation_id: text("correlation_id"),
                source: text("source"),
                traceparent: text("traceparent"),
            });
            break;
        }
    }
    // Found by its event id: its parked rows by key.
    let parked_lookup = match (&outbox, lookup) {
        (Some(OutboxRow { pk, sequence: Some(sequence), .. }), Lookup::Index) => Lookup::Key { aggregate: pk.clone(), sequence: *sequence },
        _ => lookup.clone(),
    };

    // Each consumer's inbox row.
    let mut consumers = Vec::new();
    for f in &resources.functions {
        let env = &f.environment;
        // Consumers of bus events: an inbox and an EventBridge rule delivering to them (HTTP
        // functions with an inbox, e.g. the partner webhooks, record other ids; the webhook
        // dispatcher's rows are per subscriber, below).
        let Some(table) = env.get("INBOX_TABLE") else { continue };
        if f.rule_patterns.is_empty() || env.contains_key("WEBHOOK_SUBSCRIBERS_TABLE") {
            continue;
        }
        // The name the function runs with, read as the function reads it.
        let Ok(consumer) = outbox_lambda::consumer_name(&outbox_lambda::Env::from_map(env.clone())) else {
            consumers.push(ConsumerRow {
                function: f.logical_id.clone(),
                consumer: "?".into(),
                table: table.clone(),
                state: NO_CONSUMER_NAME.into(),
                at: None,
                trace_id: None,
                attempts: Vec::new(),
            });
            continue;
        };
        if let Some(o) = &outbox {
            if !subscribed(f, o) {
                consumers.push(ConsumerRow {
                    function: f.logical_id.clone(),
                    consumer,
                    table: table.clone(),
                    state: NOT_SUBSCRIBED.into(),
                    at: None,
                    trace_id: None,
                    attempts: Vec::new(),
                });
                continue;
            }
        }
        let (mut state, mut at, trace_id) = inbox_state(&dynamodb, table, &format!("{consumer}#{event_id}"), "applied").await?;
        if state == ABSENT {
            if let Some(parked) = parked_state(&dynamodb, table, &consumer, event_id, &parked_lookup).await? {
                (state, at) = parked;
            } else if let Some(absorbed) = absorbed_state(&dynamodb, table, &consumer, &parked_lookup).await? {
                state = absorbed;
            }
        }
        consumers.push(ConsumerRow { function: f.logical_id.clone(), consumer, table: table.clone(), state, at, trace_id, attempts: Vec::new() });
    }

    // Webhook deliveries: a function with a subscriber table records one delivery per
    // subscriber, `<WEBHOOK_CONSUMER_NAME>#<subscriber>#<event id>` in its inbox table.
    for f in &resources.functions {
        let env = &f.environment;
        let (Some(table), Some(subscribers)) = (env.get("INBOX_TABLE"), env.get("WEBHOOK_SUBSCRIBERS_TABLE")) else { continue };
        let consumer = env.get("WEBHOOK_CONSUMER_NAME").cloned().unwrap_or_else(|| "webhook-dispatcher".into());
        let mut pages = dynamodb.scan().table_name(subscribers).into_paginator().items().send();
        while let Some(item) = pages.next().await {
            let item = item.map_err(Error::aws(format!("Scan on {subscribers}")))?;
            let Some(id) = item.get("id").and_then(|v| v.as_s().ok()) else { continue };
            let types: Vec<&str> =
                item.get("event_types").and_then(|v| v.as_l().ok()).into_iter().flatten().filter_map(|t| t.as_s().ok()).map(String::as_str).collect();
            let wanted = outbox.as_ref().and_then(|o| o.event_type.as_deref()).is_none_or(|t| types.iter().any(|w| *w == "*" || *w == t));
            let (state, at, trace_id) = if wanted {
                inbox_state(&dynamodb, table, &format!("{consumer}#{id}#{event_id}"), "delivered").await?
            } else {
                (NOT_SUBSCRIBED.to_owned(), None, None)
            };
            let attempts = outbox_webhooks::dispatcher::read_attempts(&dynamodb, table, &consumer, id, event_id)
                .await
                .map_err(Error::library(format!("reading the attempt log in {table}")))?;
            consumers.push(ConsumerRow {
                function: f.logical_id.clone(),
                consumer: format!("{consumer} → subscriber {id}"),
                table: table.clone(),
                state,
                at,
                trace_id,
                attempts,
            });
        }
    }

    // Dead letters.
    let mut dead_letters = Vec::new();
    for q in &resources.dead_letter_queues() {
        dead_letters.extend(dlq::peek(&sqs, q).await?.into_iter().filter(|m| m.event_id.as_deref() == Some(event_id) || m.body.contains(event_id)));
    }

    let relay = if consumers.iter().any(ConsumerRow::received) {
        "published (a consumer received it)".to_owned()
    } else if dead_letters.iter().any(|m| m.shape == "relay-failure") {
        "dead-lettered by the relay (see the dead letter below)".to_owned()
    } else if outbox.is_some() && !consumers.iter().any(|c| c.state == ABSENT || c.state == NO_CONSUMER_NAME) {
        "not known: no consumer of this stack subscribes to it (see the relay's logs)".to_owned()
    } else if outbox.is_some() {
        "not known: no consumer has it yet (stream lag, or the relay is failing: see its logs)".to_owned()
    } else {
        "not known".to_owned()
    };
    let outbox_lookup = match lookup {
        Lookup::Index if no_index && outbox.is_none() => NO_INDEX,
        Lookup::Index => "index",
        Lookup::Key { .. } => "key",
        Lookup::Scan => "scan",
        Lookup::Skip => "skipped",
    };
    let mut trace = Trace {
        event_id: event_id.to_owned(),
        trace_id: None,
        outbox,
        outbox_lookup: outbox_lookup.into(),
        relay,
        consumers,
        dead_letters,
        timeline: Vec::new(),
    };
    trace.assemble_timeline();
    Ok(trace)
}

/// [`Trace::outbox_lookup`] when the table has no event-id index.
const NO_INDEX: &str = "no index";

/// [`ConsumerRow::state`] when the consumer has no row of the event.
const ABSENT: &str = "absent";

/// [`ConsumerRow::state`] of a consumer function without `CONSUMER_NAME`: its rows' keys are
/// unknown, so nothing was looked up (never "absent": the event may well be applied).
const NO_CONSUMER_NAME: &str = "not looked up: the function sets no CONSUMER_NAME, the prefix of its inbox rows' keys; \
     set it to the name the function's code gives its inbox (outbox_lambda::consumer_name reads it)";

/// ` — "<excerpt>"` on one line, at most 120 characters, or nothing.
fn excerpt(text: &str) -> String {
    let line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).take(120).collect();
    match line.trim() {
        "" => String::new(),
        t => format!(" — \"{t}\""),
    }
}

/// The state of inbox row `key` in `table`: `absent`, `in progress (…)`, or `done` (e.g.
/// `applied`) with its `processed_at`; and the row's trace id ([`outbox::inbox::TRACE_ID`]).
async fn inbox_state(dynamodb: &aws_sdk_dynamodb::Client, table: &str, key: &str, done: &str) -> Result<(String, Option<String>, Option<String>)> {
    let row = dynamodb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .map_err(Error::aws(format!("GetItem on {table}")))?
        .item;
    Ok(match row {
        None => (ABSENT.to_owned(), None, None),
        Some(item) => {
            let text = |k: &str| item.get(k).and_then(|v| v.as_s().or_else(|_| v.as_n()).ok()).cloned();
            let trace_id = text(outbox::inbox::TRACE_ID);
            let (state, at) = match (text("status").as_deref(), text("outcome")) {
                (Some("IN_PROGRESS"), _) => (format!("in progress (lease until {} epoch ms)", text("lease_expires_at").unwrap_or_default()), None),
                // What the event did, as the consumer recorded it (`outbox::inbox::RecordedOutcome`).
                (_, Some(outcome)) => {
                    let reason = text("reason").map(|r| format!(": {r}")).unwrap_or_default();
                    (format!("{done} ({outcome}{reason})"), text("processed_at"))
                }
                _ => (done.to_owned(), text("processed_at")),
            };
            (state, at, trace_id)
        }
    })
}

/// The state of `event_id` when `consumer` parked it (it arrived before its predecessor;
/// [`outbox::ordering::ParkedEvent`]): by the table's parked index, else by key or scan (`lookup`).
async fn parked_state(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    event_id: &str,
    lookup: &Lookup,
) -> Result<Option<(String, Option<String>)>> {
    if *lookup != Lookup::Skip {
        if let Some(index) = crate::ordering::parked_index(dynamodb, table).await? {
            let listed = crate::ordering::parked_by_index(dynamodb, table, &index, &[consumer.to_owned()], None).await?;
            return Ok(listed.parked.into_iter().find(|p| p.event.event_id == event_id).map(|p| parked_line(p.event)));
        }
    }
    let found = match lookup {
        Lookup::Skip | Lookup::Index => return Ok(None),
        Lookup::Key { aggregate, sequence } => {
            let key = format!("{consumer}#parked#{aggregate}#{}", sequence.saturating_sub(1));
            lookup::get(dynamodb, table, [("pk".to_owned(), AttributeValue::S(key))].into()).await?
        }
        Lookup::Scan => scan_parked(dynamodb, table, consumer, event_id).await?,
    };
    Ok(found.and_then(|item| outbox::ordering::parked_from_item(&item)).map(parked_line))
}

/// The state of an event of an ordered consumer that has no inbox row of it but whose aggregate
/// moved past its sequence (`last_sequence` ≥ the event's sequence, one consistent read of the
/// ordering row by [`outbox::ordering::Ordered::last_sequence`]): a late copy, e.g. a predecessor
/// that arrived after an operator released the aggregate past it, which the inbox absorbed as a
/// duplicate without writing a row. Needs the aggregate and sequence (`lookup` is
/// [`Lookup::Key`]: given, or read from the outbox item); `None` otherwise, or when the
/// aggregate has not reached the sequence.
async fn absorbed_state(dynamodb: &aws_sdk_dynamodb::Client, table: &str, consumer: &str, lookup: &Lookup) -> Result<Option<String>> {
    let Lookup::Key { aggregate, sequence } = lookup else { return Ok(None) };
    let Some((aggregate_type, aggregate_id)) = aggregate.split_once('#') else { return Ok(None) };
    // Reads only; the retention concerns claims, which this never writes.
    let inbox = outbox::ordering::Ordered::new(outbox::inbox::Inbox::new(dynamodb.clone(), table, consumer, std::time::Duration::ZERO));
    let last = inbox
        .last_sequence(aggregate_type, aggregate_id)
        .await
        .map_err(Error::library(format!("reading the ordering row of {aggregate} in {table}")))?;
    Ok((last >= *sequence).then(|| {
        format!(
            "absorbed: {aggregate} is at sequence {last} (applied or released past this event's sequence {sequence}), so this late copy was a duplicate and left no row"
        )
    }))
}

/// `trace`'s state of a parked event: what it waits for and since when.
fn parked_line(p: outbox::ordering::ParkedEvent) -> (String, Option<String>) {
    let age = p.age(chrono::Utc::now()).as_secs();
    (
        format!("parked: sequence {} waits for sequence {} of {} (for {age} s; `outbox ordering parked`)", p.sequence, p.waits_for, p.aggregate()),
        Some(p.parked_at),
    )
}

/// The parked row of `event_id` for `consumer`, by a filtered `Scan` of the inbox table that
/// stops at the first match.
async fn scan_parked(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    consumer: &str,
    event_id: &str,
) -> Result<Option<HashMap<String, AttributeValue>>> {
    let values = [(":parked", outbox::ordering::PARKED_KIND), (":id", event_id), (":consumer", consumer)];
    first_match(dynamodb, table, "kind = :parked AND event_id = :id AND consumer = :consumer", &values).await
}

/// The first item of `table` that `filter` (with string `values`) keeps, by a filtered,
/// paginated `Scan` that stops at the first match.
async fn first_match(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    filter: &str,
    values: &[(&str, &str)],
) -> Result<Option<HashMap<String, AttributeValue>>> {
    let values = values.iter().map(|(name, value)| (*name, AttributeValue::S((*value).to_owned()))).collect();
    let request = ScanRequest { table, filter, values, first_only: true, consistent: true, ..Default::default() };
    Ok(lookup::scan(dynamodb, &request, |_, _| {}).await?.items.into_iter().next())
}

/// Whether one of `f`'s EventBridge rules matches the event the relay makes of `o` (its
/// `source` and `detail-type`; patterns on `detail` are not evaluated and count as a match).
fn subscribed(f: &FunctionInfo, o: &OutboxRow) -> bool {
    let event = serde_json::json!({"source": o.source, "detail-type": o.event_type});
    f.rule_patterns.iter().any(|pattern| {
        let mut pattern = pattern.clone();
        if let Some(p) = pattern.as_object_mut() {
            p.retain(|k, _| k == "source" || k == "detail-type");
        }
        crate::filter::matches(&pattern, &event)
    })
}

/// The outbox item whose `event_id` is `event_id`: by the event-id index ([`Lookup::Index`]),
/// by its key ([`Lookup::Key`]; an item of that key with another event id is not it), or by a
/// filtered `Scan` that stops at the first match ([`Lookup::Scan`]).
async fn find_outbox_item(dynamodb: &aws_sdk_dynamodb::Client, table: &str, event_id: &str, lookup: &Lookup) -> Result<ById> {
    let found = match lookup {
        Lookup::Skip => None,
        Lookup::Index => return lookup::by_event_id(dynamodb, table, event_id).await,
        Lookup::Key { aggregate, sequence } => {
            let key = [
                ("pk".to_owned(), AttributeValue::S(aggregate.clone())),
                ("sk".to_owned(), AttributeValue::S(outbox::envelope::OutboxItem::sort_key(*sequence))),
            ];
            lookup::get(dynamodb, table, key.into()).await?.filter(|i| lookup::text(i, lookup::EVENT_ID).as_deref() == Some(event_id))
        }
        Lookup::Scan => first_match(dynamodb, table, "event_id = :id", &[(":id", event_id)]).await?,
    };
    Ok(found.map_or(ById::Absent, ById::Found))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn consumer(function: &str, state: &str, at: Option<&str>) -> ConsumerRow {
        ConsumerRow {
            function: function.into(),
            consumer: function.to_lowercase(),
            table: "inbox".into(),
            state: state.into(),
            at: at.map(Into::into),
            trace_id: None,
            attempts: Vec::new(),
        }
    }

    fn trace(outbox: Option<OutboxRow>, consumers: Vec<ConsumerRow>, dead_letters: Vec<DlqMessage>) -> Trace {
        let mut t = Trace {
            event_id: "e-1".into(),
            trace_id: None,
            outbox,
            outbox_lookup: "index".into(),
            relay: "published (a consumer received it)".into(),
            consumers,
            dead_letters,
            timeline: Vec::new(),
        };
        t.assemble_timeline();
        t
    }

    fn outbox_row() -> OutboxRow {
        OutboxRow {
            table: "outbox".into(),
            pk: "Order#o-1".into(),
            sequence: Some(1),
            event_type: Some("OrderCreated".into()),
            occurred_at: Some("2026-12-04T12:00:00.100Z".into()),
            correlation_id: Some("c-1".into()),
            source: Some("example.orders".into()),
            traceparent: Some(TRACEPARENT.into()),
        }
    }

    fn dead_letter(sent_at: &str, body: &str) -> DlqMessage {
        DlqMessage {
            queue: "consumer-dlq".into(),
            message_id: "m-1".into(),
            sent_at: Some(sent_at.into()),
            age_secs: None,
            receive_count: None,
            shape: "eventbridge-event".into(),
            event_id: Some("e-1".into()),
            reason: "handler failed".into(),
            cause: "Handler".into(),
            permanent: false,
            attributes: Default::default(),
            body: body.into(),
        }
    }

    #[test]
    fn the_timeline_orders_what_was_read_and_names_the_outbox_items_trace() {
        let mut webhook = consumer("WebhookDispatcherFunction", "delivered", Some("2026-12-04T12:00:00.900Z"));
        webhook.consumer = "webhook-dispatcher → subscriber acme".into();
        let attempt = serde_json::json!({"attempt": 1, "at": "2026-12-04T12:00:00.850Z", "status": 204, "latency_ms": 40, "outcome": "delivered (HTTP 204)", "excerpt": ""});
        webhook.attempts = vec![serde_json::from_value(attempt).expect("an attempt record")];
        let t = trace(
            Some(outbox_row()),
            vec![
                consumer("ShippingFunction", "parked: sequence 1 waits for sequence 0 of Order#o-1", Some("2026-12-04T12:00:00.400Z")),
                consumer("InventoryFunction", "applied (reserved)", Some("2026-12-04T12:00:00.250Z")),
                consumer("BillingFunction", "absent", None),
                webhook,
            ],
            Vec::new(),
        );
        assert_eq!(t.trace_id.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        let stages: Vec<(StageKind, Option<&str>, Option<i64>)> = t.timeline.iter().map(|s| (s.stage, s.who.as_deref(), s.gap_ms)).collect();
        assert_eq!(
            stages,
            [
                (StageKind::Committed, None, None),
                (StageKind::Applied, Some("InventoryFunction"), Some(150)),
                (StageKind::Parked, Some("ShippingFunction"), Some(150)),
                (StageKind::WebhookAttempt, Some("webhook-dispatcher → subscriber acme"), Some(450)),
            ],
            "the absent consumer has no stage; the webhook delivery shows as its attempts"
        );
        assert_eq!(t.timeline[1].detail.as_deref(), Some("reserved"));
        let text = t.render();
        assert!(text.starts_with("event e-1\n  trace      4bf92f3577b34da6a3ce929d0e0e4736\n  outbox     OrderCreated"), "{text}");
        assert!(text.contains("  timeline\n    2026-12-04T12:00:00.100Z              committed\n"), "{text}");
        assert!(text.contains("    +150 ms  applied         InventoryFunction: reserved\n"), "{text}");
        assert!(text.contains("not stored on AWS"), "no publish time: the note says where it is\n{text}");
        let json = serde_json::to_value(&t).expect("JSON");
        assert_eq!(json["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            json["timeline"][1],
            serde_json::json!({"stage": "applied", "who": "InventoryFunction", "at": "2026-12-04T12:00:00.250Z", "gap_ms": 150, "detail": "reserved"})
        );
    }

    #[test]
    fn without_the_outbox_item_the_trace_id_comes_from_an_inbox_row_or_a_dead_letter() {
        let body = serde_json::json!({"detail": {"metadata": {"id": "e-1", "traceparent": TRACEPARENT}}}).to_string();
        let t = trace(None, Vec::new(), vec![dead_letter("2026-12-04T12:00:05.000Z", &body)]);
        assert_eq!(t.trace_id.as_deref(), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert_eq!(t.timeline.len(), 1);
        assert_eq!((t.timeline[0].stage, t.timeline[0].who.as_deref(), t.timeline[0].gap_ms), (StageKind::DeadLettered, Some("consumer-dlq"), None));

        let mut row = consumer("InventoryFunction", "applied", Some("2026-12-04T12:00:00.250Z"));
        row.trace_id = Some("0af7651916cd43dd8448eb211c80319c".into());
        let t = trace(None, vec![row], vec![dead_letter("2026-12-04T12:00:05.000Z", &body)]);
        assert_eq!(t.trace_id.as_deref(), Some("0af7651916cd43dd8448eb211c80319c"), "an inbox row before a dead letter");

        let t = trace(None, vec![consumer("InventoryFunction", "absent", None)], Vec::new());
        assert_eq!(t.trace_id, None);
        assert!(t.timeline.is_empty());
        assert!(!t.render().contains("timeline"), "no stage, no timeline");
    }

    #[test]
    fn added_stages_join_the_timeline_in_order() {
        let mut t = trace(Some(outbox_row()), vec![consumer("InventoryFunction", "applied", Some("2026-12-04T12:00:00.250Z"))], Vec::new());
        let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&chrono::Utc);
        t.add_stages([
            Stage::new(StageKind::Delivered, Some("InventoryFunction".into()), at("2026-12-04T12:00:00.180Z")).recorded_by(timeline::LOCAL_RUNTIME),
            Stage::new(StageKind::Published, Some("bus orders".into()), at("2026-12-04T12:00:00.160Z")).recorded_by(timeline::LOCAL_RUNTIME),
        ]);
        let kinds: Vec<StageKind> = t.timeline.iter().map(|s| s.stage).collect();
        assert_eq!(kinds, [StageKind::Committed, StageKind::Published, StageKind::Delivered, StageKind::Applied]);
        let gaps: Vec<Option<i64>> = t.timeline.iter().map(|s| s.gap_ms).collect();
        assert_eq!(gaps, [None, Some(60), Some(20), Some(70)]);
        let text = t.render();
        assert!(text.contains("published       bus orders (recorded by the local runtime)"), "{text}");
        assert!(!text.contains("not stored on AWS"), "{text}");
    }
}
