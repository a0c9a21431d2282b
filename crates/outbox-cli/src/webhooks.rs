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
//! and every subscriber — while this sends only to S). **What it skips: what S acknowledged**:
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

use crate::resources::Resources;

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
    /// When the template has none, or its environment lacks a table or queue.
    pub fn of(resources: &Resources) -> Result<Self, String> {
        for f in &resources.functions {
            let env = &f.environment;
            let Some(subscribers) = env.get("WEBHOOK_SUBSCRIBERS_TABLE") else { continue };
            let var = |name: &str| env.get(name).cloned().ok_or(format!("{} has no {name}", f.logical_id));
            let outbox_tables = resources.outbox_tables();
            return Ok(Self {
                subscribers_table: subscribers.clone(),
                inbox_table: var("INBOX_TABLE")?,
                consumer: env.get("WEBHOOK_CONSUMER_NAME").cloned().unwrap_or_else(|| "webhook-dispatcher".into()),
                delivery_queue_url: var("WEBHOOK_DELIVERY_QUEUE_URL")?,
                outbox_tables,
                retry_span: match env.get("WEBHOOK_RETRY_SCHEDULE").filter(|s| !s.is_empty()) {
                    Some(text) => {
                        RetrySchedule::parse_delays(text).map_err(|e| format!("{}: WEBHOOK_RETRY_SCHEDULE: {e}", f.logical_id))?.iter().sum()
                    }
                    None => RetrySchedule::default().span(),
                },
            });
        }
        Err(format!("{} has no webhook dispatcher (a function with WEBHOOK_SUBSCRIBERS_TABLE)", resources.source))
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
}

fn aws<E: std::error::Error + 'static>(action: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{action}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e))
}

/// The operator's view of one stack's webhooks.
pub struct Operator {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    stack: WebhookStack,
}

impl Operator {
    /// The operator of `stack`.
    pub fn new(sdk: &aws_config::SdkConfig, stack: WebhookStack) -> Self {
        Self { dynamodb: aws_sdk_dynamodb::Client::new(sdk), sqs: aws_sdk_sqs::Client::new(sdk), stack }
    }

    /// Subscriber `id` as stored.
    async fn subscriber(&self, id: &str) -> Result<(Subscriber, HashMap<String, AttributeValue>), String> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(&self.stack.subscribers_table)
            .key("id", AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws("GetItem on the subscriber table"))?
            .item
            .ok_or(format!("no subscriber {id} in {}", self.stack.subscribers_table))?;
        let subscriber = serde_dynamo::from_item(item.clone()).map_err(|e| format!("subscriber {id}: {e}"))?;
        Ok((subscriber, item))
    }

    /// The attempts of the delivery of `event_id` to `subscriber`.
    ///
    /// # Errors
    /// The failed AWS call.
    pub async fn attempts(&self, subscriber: &str, event_id: &str) -> Result<Vec<AttemptRecord>, String> {
        read_attempts(&self.dynamodb, &self.stack.inbox_table, &self.stack.consumer, subscriber, event_id).await.map_err(|e| e.to_string())
    }

    /// The delivery state of `event_id` for `subscriber`: `Some("COMPLETED")`, `Some("IN_PROGRESS")` or `None`.
    async fn delivery(&self, subscriber: &str, event_id: &str) -> Result<Option<String>, String> {
        let item = self
            .dynamodb
            .get_item()
            .table_name(&self.stack.inbox_table)
            .key("pk", AttributeValue::S(format!("{}#{subscriber}#{event_id}", self.stack.consumer)))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws("GetItem on the inbox table"))?
            .item;
        Ok(item.map(|i| i.get("status").and_then(|s| s.as_s().ok()).cloned().unwrap_or_else(|| "COMPLETED".into())))
    }

    /// Outbox items matching `filter` (`:a`/`:b` values in `values`).
    async fn outbox_items(&self, filter: &str, values: &[(&str, AttributeValue)]) -> Result<Vec<OutboxItem>, String> {
        let mut items = Vec::new();
        for table in &self.stack.outbox_tables {
            let mut scan = self.dynamodb.scan().table_name(table).filter_expression(filter);
            for (k, v) in values {
                scan = scan.expression_attribute_values(*k, v.clone());
            }
            let mut pages = scan.into_paginator().items().send();
            while let Some(item) = pages.next().await {
                let item = item.map_err(aws("Scan on the outbox table"))?;
                // Only outbox items (the table may hold business items too).
                if item.contains_key("event_id") && item.contains_key("event_type") {
                    match OutboxItem::from_item(item.into()) {
                        Ok(o) => items.push(o),
                        Err(e) => tracing::warn!(error = %e, "an outbox item cannot be read; skipped"),
                    }
                }
            }
        }
        items.sort_by(|a, b| a.occurred_at.cmp(&b.occurred_at));
        Ok(items)
    }

    /// Puts one message for `subscriber` with `item`'s event on the delivery queue, as the
    /// fan-out would.
    async fn send(&self, subscriber: &str, item: &OutboxItem) -> Result<(), String> {
        let event = item.to_bus_event().map_err(|e| format!("event {}: {e}", item.event_id))?;
        let detail: serde_json::Value = serde_json::from_str(&event.detail).map_err(|e| format!("event {}: {e}", item.event_id))?;
        let body = serde_json::json!({
            "version": "0",
            "id": uuid::Uuid::new_v4().to_string(),
            "detail-type": event.detail_type,
            "source": event.source,
            "time": event.time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "resources": [],
            "detail": detail,
        });
        let attribute =
            aws_sdk_sqs::types::MessageAttributeValue::builder().data_type("String").string_value(subscriber).build().map_err(|e| e.to_string())?;
        self.sqs
            .send_message()
            .queue_url(&self.stack.delivery_queue_url)
            .message_body(body.to_string())
            .message_attributes(SUBSCRIBER_ATTRIBUTE, attribute)
            .send()
            .await
            .map_err(aws("SendMessage to the delivery queue"))?;
        Ok(())
    }

    /// Sends `event_id` to `subscriber` again: its delivery record is removed first, so the
    /// dispatcher POSTs it (same `webhook-id`).
    ///
    /// # Errors
    /// No such event in the outbox (expired, or never written), no such subscriber, or an AWS call failed.
    pub async fn resend(&self, subscriber: &str, event_id: &str) -> Result<(), String> {
        self.subscriber(subscriber).await?;
        let items = self.outbox_items("event_id = :id", &[(":id", AttributeValue::S(event_id.to_owned()))]).await?;
        let item = items.first().ok_or(format!("event {event_id} is not in the outbox (never written, or older than its retention)"))?;
        self.dynamodb
            .delete_item()
            .table_name(&self.stack.inbox_table)
            .key("pk", AttributeValue::S(format!("{}#{subscriber}#{event_id}", self.stack.consumer)))
            .send()
            .await
            .map_err(aws("DeleteItem of the delivery record"))?;
        self.send(subscriber, item).await
    }

    /// Sends `subscriber` every event of its types written since `since` that it has not
    /// acknowledged.
    ///
    /// # Errors
    /// No such subscriber, or an AWS call failed (what was sent before stays sent; run it again).
    pub async fn recover(&self, subscriber: &str, since: DateTime<Utc>) -> Result<Recovery, String> {
        let (s, _) = self.subscriber(subscriber).await?;
        let since = since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let items = self.outbox_items("occurred_at >= :since", &[(":since", AttributeValue::S(since))]).await?;
        let mut recovery = Recovery::default();
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
    /// No such subscriber, or the update failed.
    pub async fn enable(&self, subscriber: &str) -> Result<Option<DateTime<Utc>>, String> {
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
            .map_err(aws("UpdateItem (enable the subscriber)"))?;
        let since = item.get("disabled_failing_since").and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok());
        let span = chrono::Duration::from_std(self.stack.retry_span).unwrap_or_default();
        Ok(since.and_then(DateTime::<Utc>::from_timestamp_millis).map(|t| t - span))
    }
}

/// Reads a time: RFC 3339 (`2026-12-01T06:00:00Z`) or an age before now (`90m`, `2d`).
///
/// # Errors
/// A message naming the value.
pub fn parse_since(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let age = crate::dlq::parse_age(text).map_err(|_| format!("{text:?} is neither an RFC 3339 time nor an age such as 90m or 2d"))?;
    Ok(Utc::now() - chrono::Duration::from_std(age).map_err(|e| e.to_string())?)
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
