//! The demo's large event: one order with a ~1 MiB attachment through `POST /orders`, too large
//! for an outbox item (DynamoDB's 400 KB), so the producer stores its payload in the template's
//! `OutboxPayloadBucket` before the transaction (the claim check, `outbox::claim_check`), the
//! relay publishes only `detail.data_ref`, and the consumer fetches and verifies the payload
//! before applying it once.
//!
//! What is shown is read from where it lives, not assumed: the outbox item's `payload_ref` (bucket,
//! key, size, SHA-256), the object (`HeadObject`), what the bus carried (a tap: a temporary rule
//! on the bus matching the order's correlation id, with an SQS queue as its target, removed
//! afterwards), the consumer's answer to its delivery, its inbox row (`payload_sha256` = the
//! reference's SHA-256, so it hashed the fetched bytes), and the stock reserved for the order's
//! own SKU (its quantity, once).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox::envelope::{OutboxItem, PayloadRef};
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

pub use super::sample::LARGE_SKU;
use super::sample::{outbox_pk, Sample};
use super::stock;
use super::Say;
use crate::runtime::Runtime;

/// Size of the demo order's attachment, bytes: 1 MiB, well over the 400 KB an outbox item holds.
pub const ATTACHMENT_BYTES: usize = 1024 * 1024;
const QUANTITY: u64 = 1;

/// The large events of the demo (`demo --json`: `large_events`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LargeEvents {
    /// Orders sent whose event went by claim check.
    pub sent: usize,
    /// Deliveries of those events that took effect in the consumer (1 per event when all is well).
    pub applied: usize,
    /// Whether the consumer's inbox hash equals the reference's SHA-256 and the stock reserved
    /// for [`LARGE_SKU`] equals the order's quantity.
    pub verified: bool,
    /// The reference the outbox item carried.
    pub payload_ref: Option<PayloadRef>,
    /// Size of the event the bus delivered to the tap (its JSON), bytes.
    pub bus_event_bytes: Option<usize>,
}

impl LargeEvents {
    /// The demo's invariant for them: one sent, applied exactly once, verified.
    pub fn ok(&self) -> bool {
        self.sent == 1 && self.applied == 1 && self.verified
    }
}

/// A temporary rule on the bus delivering the events of one correlation id to a queue of its own.
struct Tap {
    events: aws_sdk_eventbridge::Client,
    sqs: aws_sdk_sqs::Client,
    bus: String,
    rule: String,
    queue_url: String,
}

fn sdk_error(action: &str, e: impl std::error::Error + Send + Sync + 'static) -> crate::Error {
    crate::Error::aws(action)(e)
}

impl Tap {
    async fn open(runtime: &Runtime, bus: &str, correlation_id: &str) -> crate::Result<Self> {
        let events = aws_sdk_eventbridge::Client::new(&runtime.sdk);
        let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
        let name = format!("demo-large-tap-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let queue_url = sqs.create_queue().queue_name(&name).send().await.map_err(|e| sdk_error("CreateQueue", e))?.queue_url.unwrap_or_default();
        let tap = Self { events, sqs, bus: bus.to_owned(), rule: name, queue_url };
        let arn = tap
            .sqs
            .get_queue_attributes()
            .queue_url(&tap.queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| sdk_error("GetQueueAttributes", e))?
            .attributes
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn).cloned())
            .ok_or_else(|| crate::Error::invalid("the tap queue has no ARN"))?;
        let pattern = json!({"detail": {"metadata": {"correlation_id": [correlation_id]}}});
        tap.events
            .put_rule()
            .name(&tap.rule)
            .event_bus_name(&tap.bus)
            .event_pattern(pattern.to_string())
            .send()
            .await
            .map_err(|e| sdk_error("PutRule", e))?;
        let target = aws_sdk_eventbridge::types::Target::builder().id("tap").arn(arn).build().map_err(crate::Error::other("the rule\'s target"))?;
        tap.events.put_targets().rule(&tap.rule).event_bus_name(&tap.bus).targets(target).send().await.map_err(|e| sdk_error("PutTargets", e))?;
        Ok(tap)
    }

    /// The first event the bus delivered to the tap, as JSON text.
    async fn receive(&self, timeout: Duration) -> Option<String> {
        let started = Instant::now();
        while started.elapsed() < timeout {
            let answer = self.sqs.receive_message().queue_url(&self.queue_url).wait_time_seconds(1).send().await.ok()?;
            if let Some(body) = answer.messages.unwrap_or_default().into_iter().find_map(|m| m.body) {
                return Some(body);
            }
        }
        None
    }

    /// Removes the rule before its queue (a rule whose target queue is gone fails every
    /// `PutEvents` on the emulator).
    async fn close(self) {
        let _ = self.events.remove_targets().rule(&self.rule).event_bus_name(&self.bus).ids("tap").send().await;
        let _ = self.events.delete_rule().name(&self.rule).event_bus_name(&self.bus).send().await;
        let _ = self.sqs.delete_queue().queue_url(&self.queue_url).send().await;
    }
}

/// A 1 MiB attachment: base64 of seeded random bytes (a scanned purchase order, say).
fn attachment() -> String {
    use base64::Engine;
    let mut bytes = vec![0u8; ATTACHMENT_BYTES / 4 * 3];
    rand::rngs::StdRng::seed_from_u64(7).fill_bytes(&mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Sends the large order and follows it to its effect, printing one line per stage.
///
/// # Errors
/// A message when the order is refused, is not claim-checked (the producer has no
/// `CLAIM_CHECK_BUCKET`), or does not take effect within `timeout`.
pub(crate) async fn run(runtime: &Runtime, api: SocketAddr, say: &Say, timeout: Duration) -> crate::Result<LargeEvents> {
    let sample = Sample::of(runtime)?;
    let (inventory_table, outbox_table, inbox_table) = (sample.var("INVENTORY_TABLE")?, sample.var("OUTBOX_TABLE")?, sample.var("INBOX_TABLE")?);
    let (bus, _) = runtime.consumer_delivery(&sample.consumer)?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    stock::put(&dynamodb, &inventory_table, LARGE_SKU, 10).await.map_err(crate::Error::other("seeding stock"))?;

    let correlation_id = format!("demo-large-{}", uuid::Uuid::now_v7());
    let tap = Tap::open(runtime, &bus, &correlation_id).await?;
    let outcome = follow(runtime, api, say, timeout, &correlation_id, &tap, [&outbox_table, &inbox_table, &inventory_table]).await;
    tap.close().await;
    outcome
}

async fn follow(
    runtime: &Runtime,
    api: SocketAddr,
    say: &Say,
    timeout: Duration,
    correlation_id: &str,
    tap: &Tap,
    [outbox_table, inbox_table, inventory_table]: [&str; 3],
) -> crate::Result<LargeEvents> {
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    let body = json!({
        "customer_id": "c-large", "currency": "EUR",
        "lines": [{"sku": LARGE_SKU, "quantity": QUANTITY, "unit_price": "250.00"}],
        "attachment": attachment(),
    })
    .to_string();
    let url = format!("http://{api}/orders");
    let client =
        crate::runtime::authorizer::client_as(&runtime.issuer, super::DEMO_SUBJECT).build().map_err(crate::Error::other("the HTTP client"))?;
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .header("x-correlation-id", correlation_id)
        .body(body.clone())
        .send()
        .await
        .map_err(crate::Error::other(format!("POST {url}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if status.as_u16() != 201 {
        return Err(crate::Error::expectation(format!("POST /orders answered {status} for the large order: {text}")));
    }
    let created: Value = serde_json::from_str(&text).map_err(crate::Error::other("POST /orders answered non-JSON"))?;
    let (order_id, event_id) = (created["order_id"].as_str().unwrap_or_default(), created["event_id"].as_str().unwrap_or_default());

    // The producer: the outbox item holds the reference, the bucket the bytes.
    let item = dynamodb
        .get_item()
        .table_name(outbox_table)
        .key("pk", AttributeValue::S(outbox_pk(order_id)))
        .key("sk", AttributeValue::S(OutboxItem::sort_key(1)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| sdk_error("GetItem outbox", e))?
        .item
        .ok_or_else(|| crate::Error::expectation("the large order's outbox item is missing"))?;
    let item = OutboxItem::from_item(serde_dynamo::Item::from(item)).map_err(crate::Error::other("the outbox item"))?;
    let reference = item.payload_ref.clone().ok_or_else(|| {
        crate::Error::invalid(
            "the large order's outbox item carries its payload inline, not by claim check: is CLAIM_CHECK_BUCKET set on the order API's function?",
        )
    })?;
    let s3 = aws_sdk_s3::Client::new(&runtime.sdk);
    let head = s3.head_object().bucket(&reference.bucket).key(&reference.key).send().await.map_err(|e| sdk_error("HeadObject", e))?;
    say.line(format!(
        "5b. large     POST /orders with a {} KiB attachment ({} bytes of request) → the producer stored the event's payload in s3://{}/{} ({} bytes, SHA-256 {}…) before the transaction; the outbox item holds only the reference ({} bytes of payload_ref)",
        ATTACHMENT_BYTES / 1024,
        body.len(),
        reference.bucket,
        reference.key,
        head.content_length().unwrap_or_default(),
        &reference.sha256[..12],
        serde_json::to_string(&reference).map(|s| s.len()).unwrap_or_default()
    ));

    // The bus: what the tap received.
    let delivered = tap.receive(timeout).await;
    let bus_event_bytes = delivered.as_ref().map(String::len);
    let detail = delivered.as_deref().and_then(|b| serde_json::from_str::<Value>(b).ok()).map(|v| v["detail"].clone()).unwrap_or(Value::Null);
    let carried_ref = detail.get("data_ref").and_then(|r| serde_json::from_value::<PayloadRef>(r.clone()).ok());
    say.line(match (bus_event_bytes, &carried_ref, detail.get("data")) {
        (Some(bytes), Some(r), None) if *r == reference => {
            format!("               the relay published it: the bus carried a {bytes}-byte event with detail.data_ref (that reference) and no detail.data")
        }
        (Some(bytes), _, _) => format!("               MISMATCH: the bus carried a {bytes}-byte event whose detail is not the reference alone: {detail}"),
        (None, _, _) => format!("               MISMATCH: nothing reached the tap on the bus in {} s", timeout.as_secs()),
    });

    // The consumer: applied once, from the fetched and verified bytes.
    let started = Instant::now();
    while runtime.stats.snapshot().effects(event_id) == 0 && started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts = runtime.stats.snapshot();
    let applied = counts.effects(event_id);
    let outcome = counts.deliveries(event_id).iter().find(|d| d.outcome != "duplicate").map(|d| d.outcome.clone()).unwrap_or("none".into());
    let inbox_hash = inbox_payload_sha256(&dynamodb, inbox_table, event_id).await?;
    let reserved = stock::get(&dynamodb, inventory_table, LARGE_SKU).await?.map(|(_, r)| r).unwrap_or(0);
    let verified = inbox_hash.as_deref() == Some(reference.sha256.as_str()) && reserved == QUANTITY && carried_ref.as_ref() == Some(&reference);
    say.line(format!(
        "               the consumer fetched the object, verified its size and SHA-256 (inbox payload_sha256 {}), and applied it {applied} time(s): {outcome}, {reserved} unit(s) of {LARGE_SKU} reserved",
        match &inbox_hash {
            Some(h) if *h == reference.sha256 => "= the reference's".to_owned(),
            Some(h) => format!("{}… ≠ the reference's", &h[..h.len().min(12)]),
            None => "absent".to_owned(),
        }
    ));
    Ok(LargeEvents { sent: 1, applied, verified, payload_ref: Some(reference), bus_event_bytes })
}

/// The `payload_sha256` of the inbox row of `event_id` (the consumer's, the only one in the demo):
/// the SHA-256 of the payload bytes it applied (`payload_hash` is over their canonical form).
async fn inbox_payload_sha256(dynamodb: &aws_sdk_dynamodb::Client, table: &str, event_id: &str) -> crate::Result<Option<String>> {
    let mut pages = dynamodb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .filter_expression("event_id = :id")
        .expression_attribute_values(":id", AttributeValue::S(event_id.to_owned()))
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.map_err(|e| sdk_error(&format!("Scan {table}"), e))?;
        if let Some(AttributeValue::S(hash)) = item.get("payload_sha256") {
            return Ok(Some(hash.clone()));
        }
    }
    Ok(None)
}
