//! The webhook operator's verbs (`outbox webhooks …`), on the emulator or a deployed stack:
//!
//! * `attempts <event-id> --subscriber S`: the delivery's attempts (status, latency, response
//!   excerpt), from the dispatcher's attempt log in the inbox table
//!   ([`outbox_webhooks::dispatcher::AttemptLog`], kept for its retention);
//! * `resend <event-id> --subscriber S`: forgets the delivery's record (its inbox row) and puts
//!   one message for that subscriber on the delivery queue: the subscriber gets the event again,
//!   signed with the same `webhook-id`;
//! * `recover --subscriber S --since T`: everything S should have received since T that it has
//!   not acknowledged, re-sent;
//! * `enable S [--recover] [--since T]`: re-enables a disabled subscriber (its circuit breaker
//!   reset) and, with `--recover`, recovers from one retry span before it started failing.
//!
//! **Where `recover` reads from: the outbox table.** It holds every event the services wrote, for
//! `OUTBOX_RETENTION_SECONDS` (7 days; the subscriber lifecycle disables an endpoint after 3, so
//! what a disabled endpoint missed is still there), with its type, time and payload, exactly as
//! the relay published it; one paginated `Scan` filtered on `occurred_at` reads it (an
//! EventBridge archive would also do, but a replay goes to every rule of the bus — each consumer
//! and every subscriber — while this sends only to S). The table has no key by time, so the
//! scan reads every item (a filter drops items after they were read): it is bounded
//! ([`Bound::limit`] items read per table, `--limit`), reports its progress, and says when it
//! stopped before the end ([`Recovery::complete`]). `resend` finds its one event by the outbox
//! table's event-id index ([`crate::lookup::by_event_id`]), a scan only on a table without it.
//! **What it skips: what S acknowledged**:
//! the dispatcher's inbox row `<WEBHOOK_CONSUMER_NAME>#<S>#<event id>` is `COMPLETED` exactly
//! when S answered 2xx (one `GetItem` per event). A message recovered twice, or recovered while
//! its retry is still queued, is still POSTed once: the dispatcher's inbox guard replays it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use outbox::envelope::OutboxItem;
use outbox_webhooks::dispatcher::{read_attempts, AttemptRecord, Subscriber, SUBSCRIBER_ATTRIBUTE};
use outbox_webhooks::RetrySchedule;
use serde::Serialize;

use crate::lookup::{self, ById, ScanRequest};
use crate::resources::Resources;
use crate::{Error, Result};

/// Where the webhook dispatcher of a stack keeps things.
#[derive(Debug, Clone)]
pub struct WebhookStack {
    /// The subscriber table.
    pub subscribers_table: String,
    /// The inbox table (delivery records and attempt logs).
    pub inbox_table: String,
    /// `WEBHOOK_CONSUMER_NAME`.
    pub consumer: String,
    /// The delivery queue's URL.
    pub delivery_queue_url: String,
    /// Tables whose stream feeds a function: the outbox.
    pub outbox_tables: Vec<String>,
    /// How long the dispatcher retries a message (the sum of `WEBHOOK_RETRY_SCHEDULE`).
    pub retry_span: std::time::Duration,
}

impl WebhookStack {
    /// The stack's webhook dispatcher: the function with `WEBHOOK_SUBSCRIBERS_TABLE`.
    ///
    /// # Errors
    /// [`Error::Missing`] when the stack has none, or its environment lacks a table or queue;
    /// [`Error::Record`] when its `WEBHOOK_RETRY_SCHEDULE` cannot be read.
    pub fn of(resources: &Resources) -> Result<Self> {
        for f in &resources.functions {
            let env = &f.environment;
            let Some(subscribers) = env.get("WEBHOOK_SUBSCRIBERS_TABLE") else { continue };
            let var = |name: &str| env.get(name).cloned().ok_or_else(|| Error::missing(format!("function {}", f.logical_id), name, ""));
            let outbox_tables = resources.outbox_tables();
            return Ok(Self {
                subscribers_table: subscribers.clone(),
                inbox_table: var("INBOX_TABLE")?,
                consumer: env.get("WEBHOOK_CONSUMER_NAME").cloned().unwrap_or_else(|| "webhook-dispatcher".into()),
                delivery_queue_url: var("WEBHOOK_DELIVERY_QUEUE_URL")?,
                outbox_tables,
                retry_span: match env.get("WEBHOOK_RETRY_SCHEDULE").filter(|s| !s.is_empty()) {
                    Some(text) => {
                        RetrySchedule::parse_delays(text).map_err(Error::record(format!("{}: WEBHOOK_RETRY_SCHEDULE", f.logical_id)))?.iter().sum()
                    }
                    None => RetrySchedule::default().span(),
                },
            });
        }
        Err(Error::missing(&resources.source, "webhook dispatcher (a function with WEBHOOK_SUBSCRIBERS_TABLE)", ""))
    }
}

/// What `recover` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Events of the subscriber's types since the time asked.
    pub events: usize,
    /// Of those, acknowledged already (skipped).
    pub acknowledged: usize,
    /// Of those, being delivered right now (skipped: the delivery in flight decides).
    pub in_flight: usize,
    /// Sent to the delivery queue for the subscriber.
    pub sent: usize,
    /// Outbox items read (what the scan cost).
    pub read: u64,
    /// Whether every outbox table was read to its end (false: stopped at the limit; what was
    /// sent is sent, a second run with a larger limit sends the rest).
    pub complete: bool,
}

/// Called after each page of a scan: (table, items read, items kept).
pub type Progress<'a> = Box<dyn FnMut(&str, u64, usize) + Send + 'a>;

/// How far `recover` scans, and who hears of its progress.
pub struct Bound<'a> {
    /// Outbox items read per table at most (`None`: every item).
    pub limit: Option<u64>,
    /// Called after each page: (table, items read, items since the time asked).
    pub progress: Progress<'a>,
}

impl std::fmt::Debug for Bound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound").field("limit", &self.limit).finish_non_exhaustive()
    }
}

impl Bound<'_> {
    /// Every item, quietly.
    pub fn whole() -> Self {
        Self { limit: None, progress: Box::new(|_, _, _| {}) }
    }
}

/// The operator's view of one stack's webhooks.
pub struct Operator {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    stack: WebhookStack,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("stack", &self.stack).finish_non_exhaustive()
    }
}

impl Operator {
    /// The operator of `stack`.
    pub fn new(sdk: &aws_config::SdkConfig, stack: WebhookStack) -> Self {
        Self { dynamodb: aws_sdk_dynamodb::Client::new(sdk), sqs: aws_sdk_sqs::Client::new(sdk), stack }
    }

    /// Subscriber `id` as stored.
    async fn subscriber(&self, id: &str) -> Result<(Subscriber, HashMap<String, AttributeValue>)> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(&self.stack.subscribers_table)
            .key("id", AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(Error::aws(format!("GetItem on {}", self.stack.subscribers_table)))?
            .item
            .ok_or_else(|| Error::NotFound(format!("no subscriber {id} in {}", self.stack.subscribers_table)))?;
        let subscriber = serde_dynamo::from_item(item.clone()).map_err(Error::record(format!("subscriber {id}")))?;
        Ok((subscriber, item))
    }

    /// The attempts of the delivery of `event_id` to `subscriber`.
    ///
    /// # Errors
    /// [`Error::Library`]: the failed read.
    pub async fn attempts(&self, subscriber: &str, event_id: &str) -> Result<Vec<AttemptRecord>> {
        read_attempts(&self.dynamodb, &self.stack.inbox_table, &self.stack.consumer, subscriber, event_id)
            .await
            .map_err(Error::library(format!("reading the attempt log in {}", self.stack.inbox_table)))
    }

    /// The delivery state of `event_id` for `subscriber`: `Some("COMPLETED")`, `Some("IN_PROGRESS")` or `None`.
    async fn delivery(&self, subscriber: &str, event_id: &str) -> Result<Option<String>> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(&self.stack.inbox_table)
            .key("pk", AttributeValue::S(format!("{}#{subscriber}#{event_id}", self.stack.consumer)))
            .consistent_read(true)
            .send()
            .await
            .map_err(Error::aws(format!("GetItem on {}", self.stack.inbox_table)))?
            .item;
        Ok(item.map(|i| i.get("status").and_then(|s| s.as_s().ok()).cloned().unwrap_or_else(|| "COMPLETED".into())))
    }

    /// The outbox item of `event_id`: by the event-id index; on a table without one, by a
    /// `Scan` that stops at the first match (with a warning that it scans).
    async fn outbox_item(&self, event_id: &str) -> Result<Option<OutboxItem>> {
        for table in &self.stack.outbox_tables {
            let item = match lookup::by_event_id(&self.dynamodb, table, event_id).await? {
                ById::Found(item) => Some(item),
                ById::Absent => None,
                ById::NoIndex => {
                    tracing::warn!(table = %table, "the outbox table has no index on event_id: scanning it for the event");
                    let values = vec![(":id", AttributeValue::S(event_id.to_owned()))];
                    let request = ScanRequest { table, filter: "event_id = :id", values, first_only: true, consistent: true, ..Default::default() };
                    lookup::scan(&self.dynamodb, &request, |_, _| {}).await?.items.into_iter().next()
                }
            };
            if let Some(item) = item {
                return OutboxItem::from_item(item.into()).map(Some).map_err(Error::record(format!("the outbox item of event {event_id}")));
            }
        }
        Ok(None)
    }

    /// The outbox items written since `since`, oldest first: a bounded `Scan` of each outbox
    /// table; returns them with the items read and whether every table was read to its end.
    async fn outbox_items_since(&self, since: &str, bound: &mut Bound<'_>) -> Result<(Vec<OutboxItem>, u64, bool)> {
        let (mut items, mut read, mut complete) = (Vec::new(), 0, true);
        for table in &self.stack.outbox_tables {
            let values = vec![(":since", AttributeValue::S(since.to_owned()))];
            // Only outbox items (the table may hold business items too).
            let filter = "attribute_exists(event_id) AND attribute_exists(event_type) AND occurred_at >= :since";
            let request = ScanRequest { table, filter, values, limit: bound.limit, ..Default::default() };
            let scanned = lookup::scan(&self.dynamodb, &request, |n, kept| (bound.progress)(table.as_str(), n, kept)).await?;
            read += scanned.read;
            complete &= scanned.complete;
            for item in scanned.items {
                match OutboxItem::from_item(item.into()) {
                    Ok(o) => items.push(o),
                    Err(e) => tracing::warn!(error = %e, table = %table, "an outbox item cannot be read; skipped"),
                }
            }
        }
        items.sort_by(|a, b| a.occurred_at.cmp(&b.occurred_at));
        Ok((items, read, complete))
    }

    /// Puts one message for `subscriber` with `item`'s event on the delivery queue, as the
    /// fan-out would.
    async fn send(&self, subscriber: &str, item: &OutboxItem) -> Result<()> {
        let event = item.to_bus_event().map_err(Error::record(format!("event {}", item.event_id)))?;
        let detail: serde_json::Value = serde_json::from_str(&event.detail).map_err(Error::record(format!("event {}", item.event_id)))?;
        let body = serde_json::json!({
            "version": "0",
            "id": uuid::Uuid::new_v4().to_string(),
            "detail-type": event.detail_type,
            "source": event.source,
            "time": event.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "resources": [],
            "detail": detail,
        });
        let attribute = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("String")
            .string_value(subscriber)
            .build()
            .map_err(Error::aws("MessageAttributeValue"))?;
        self.sqs
            .send_message()
            .queue_url(&self.stack.delivery_queue_url)
            .message_body(body.to_string())
            .message_attributes(SUBSCRIBER_ATTRIBUTE, attribute)
            .send()
            .await
            .map_err(Error::aws(format!("SendMessage to {}", self.stack.delivery_queue_url)))?;
        Ok(())
    }

    /// Sends `event_id` to `subscriber` again: its delivery record is removed first, so the
    /// dispatcher POSTs it (same `webhook-id`).
    ///
    /// # Errors
    /// [`Error::NotFound`]: no such event in the outbox (expired, or never written), no such
    /// subscriber; [`Error::Aws`]: an AWS call failed.
    pub async fn resend(&self, subscriber: &str, event_id: &str) -> Result<()> {
        self.subscriber(subscriber).await?;
        let item = self
            .outbox_item(event_id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("event {event_id} is not in the outbox (never written, or older than its retention)")))?;
        self.dynamodb
            .delete_item()
            .table_name(&self.stack.inbox_table)
            .key("pk", AttributeValue::S(format!("{}#{subscriber}#{event_id}", self.stack.consumer)))
            .send()
            .await
            .map_err(Error::aws(format!("DeleteItem of the delivery record in {}", self.stack.inbox_table)))?;
        self.send(subscriber, &item).await
    }

    /// Sends `subscriber` every event of its types written since `since` that it has not
    /// acknowledged, among the outbox items `bound` lets it read.
    ///
    /// # Errors
    /// [`Error::NotFound`]: no such subscriber; [`Error::Aws`]: an AWS call failed (what was
    /// sent before stays sent; run it again).
    pub async fn recover(&self, subscriber: &str, since: DateTime<Utc>, mut bound: Bound<'_>) -> Result<Recovery> {
        let (s, _) = self.subscriber(subscriber).await?;
        let since = since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (items, read, complete) = self.outbox_items_since(&since, &mut bound).await?;
        let mut recovery = Recovery { read, complete, ..Default::default() };
        for item in items.iter().filter(|i| s.event_types.iter().any(|t| t == "*" || *t == i.event_type)) {
            recovery.events += 1;
            match self.delivery(subscriber, &item.event_id).await?.as_deref() {
                Some("IN_PROGRESS") => recovery.in_flight += 1,
                Some(_) => recovery.acknowledged += 1,
                None => {
                    self.send(subscriber, item).await?;
                    recovery.sent += 1;
                }
            }
        }
        Ok(recovery)
    }

    /// Re-enables `subscriber` (circuit breaker reset); returns where a recovery of what it
    /// missed starts: one retry span (the schedule's length) before it started failing
    /// (`disabled_failing_since`). An event older than that had finished its schedule before
    /// the failures began: it was acknowledged (skipped anyway) or refused for another reason.
    ///
    /// # Errors
    /// [`Error::NotFound`]: no such subscriber; [`Error::Aws`]: the update failed.
    pub async fn enable(&self, subscriber: &str) -> Result<Option<DateTime<Utc>>> {
        let (_, item) = self.subscriber(subscriber).await?;
        self.dynamodb
            .update_item()
            .table_name(&self.stack.subscribers_table)
            .key("id", AttributeValue::S(subscriber.to_owned()))
            .update_expression(
                "SET enabled = :yes, breaker_failures = :zero REMOVE disabled_reason, disabled_at, disabled_failing_since, breaker_open_until, breaker_probe_until, failing_since",
            )
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send()
            .await
            .map_err(Error::aws(format!("UpdateItem (enable subscriber {subscriber}) on {}", self.stack.subscribers_table)))?;
        let since = item.get("disabled_failing_since").and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
        let span = chrono::Duration::from_std(self.stack.retry_span).unwrap_or_default();
        Ok(since.and_then(DateTime::<Utc>::from_timestamp_millis).map(|t| t - span))
    }
}

/// Reads a time: RFC 3339 (`2026-12-01T06:00:00Z`) or an age before now (`90m`, `2d`).
///
/// # Errors
/// [`Error::InvalidArgument`] naming the value.
pub fn parse_since(text: &str) -> Result<DateTime<Utc>> {
    parse_time("--since", text)
}

/// Reads the time given to `option`: RFC 3339 (`2026-12-01T06:00:00Z`) or an age before now
/// (`90m`, `2d`).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `option` and the value.
pub fn parse_time(option: &'static str, text: &str) -> Result<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let bad = || Error::invalid(option, text, "neither an RFC 3339 time nor an age such as 90m or 2d");
    let age = crate::dlq::parse_age(text).map_err(|_| bad())?;
    chrono::Duration::from_std(age).ok().and_then(|age| Utc::now().checked_sub_signed(age)).ok_or_else(bad)
}

/// The attempts as lines.
pub fn render_attempts(subscriber: &str, event_id: &str, attempts: &[AttemptRecord]) -> String {
    if attempts.is_empty() {
        return format!("no attempts recorded for event {event_id} to subscriber {subscriber} (none yet, or past the log's retention)\n");
    }
    let mut out = format!("event {event_id} → subscriber {subscriber}\n");
    for a in attempts {
        let excerpt: String = a.excerpt.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect();
        out.push_str(&format!("  attempt {} at {}: {} (status {}, {} ms) {}\n", a.attempt, a.at, a.outcome, a.status, a.latency_ms, excerpt.trim()));
    }
    out
}
