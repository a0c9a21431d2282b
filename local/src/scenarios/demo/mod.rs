//! `demo`: the whole pipeline on the sample inputs, reported stage by stage.
//!
//! 1. seeds stock for the SKUs the orders use (one SKU with a single unit, to show a rejection);
//! 2. sends the sample orders of `events/` (HTTP API requests for `POST /orders`), `--orders N`
//!    generated ones and one order over stock, through the local HTTP API with a real HTTP client;
//! 3. waits until every order took effect in the consumer (its response to the delivery) and
//!    the relay's metrics (`EventsPublished` + `RecordsDeadLettered`, from the relay binary's
//!    CloudWatch EMF lines) cover every item of the outbox table (a progress line on stderr);
//! 4. injects a duplicate delivery: the first order's event published again (a new EventBridge
//!    envelope id, the same `detail.metadata.id`) — the inbox must absorb it;
//! 5. cancels one order through `POST /orders/{id}/cancel` — its stock must come back once;
//!    then sends one order with a 1 MiB attachment, carried by claim check ([`large`]);
//! 6. injects a poison event the consumer can never accept — dead-lettered on the first try;
//! 7. injects an event whose predecessor never comes (a real sequence gap) — the ordered
//!    consumer parks it (acknowledged, not dead-lettered among poison) and `ordering parked`
//!    lists it;
//! 8. a partner's signed webhook (`POST /webhooks/{partner}`) pays one order: received once,
//!    its replay absorbed, a forged one refused with 401 (the `webhooks` submodule);
//! 9. the `OrderPaid` it produced is delivered as signed webhooks to a local subscriber server:
//!    one healthy subscriber, one failing twice (500, 429 with `Retry-After`) before it
//!    succeeds, one refusing for good (400, dead-lettered);
//! 10. checks the books: every committed order consumed exactly once, stock reserved equals the
//!     quantities of the reserved, uncancelled orders, nothing lost, the webhooks as expected —
//!     and lists the dead-letter queue;
//! 11. follows one event, the first order's `OrderCreated`, through the pipeline: what
//!     `outbox-local trace <event id>` prints, its timeline with the stages the runtime
//!     recorded ([`crate::journal`]).

mod inputs;
pub mod large;
pub mod sample;
pub mod stock;
pub mod subscriber;
mod webhooks;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox::envelope::OutboxItem;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

use crate::runtime::Runtime;
use crate::stats::{percentile, Counts};
use outbox_cli::dlq;
use outbox_template::FunctionEvent;
use sample::{order_event, outbox_pk};
pub use sample::{Sample, SAMPLE_SKUS, SCARCE_SKU};

pub use inputs::sample_orders;
use inputs::{entry, put_event};

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Generated orders on top of the samples.
    pub orders: usize,
    /// Print only the JSON report.
    pub json: bool,
    /// Where the sample events are.
    pub events_dir: std::path::PathBuf,
    /// Longest wait for the pipeline to go quiet.
    pub timeout: Duration,
}

/// The demo's figures (`demo --json`).
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// Orders the API answered 201 for.
    pub orders_committed: usize,
    /// Items in the outbox table (orders' and the consumer's own events).
    pub outbox_items: usize,
    /// Events the relay published (each outbox item at least once).
    pub events_published: usize,
    /// `PutEvents` calls the relay made.
    pub put_events_calls: usize,
    /// Orders that took effect in the consumer (reserved or rejected).
    pub events_consumed: usize,
    /// Orders with stock reserved.
    pub reservations: usize,
    /// Orders rejected for insufficient stock.
    pub rejections: usize,
    /// Cancellations whose stock was given back.
    pub releases: usize,
    /// Duplicate deliveries the inbox absorbed.
    pub duplicates_absorbed: usize,
    /// Events in the consumer dead-letter queue.
    pub dead_lettered: usize,
    /// Units reserved across all SKUs (from the inventory table).
    pub stock_reserved: u64,
    /// Units the reserved, uncancelled orders asked for.
    pub stock_expected: u64,
    /// Commit → consumer effect, median, milliseconds.
    pub latency_ms_p50: Option<i64>,
    /// Commit → consumer effect, 99th percentile, milliseconds.
    pub latency_ms_p99: Option<i64>,
    /// Committed orders that never took effect.
    pub lost: usize,
    /// Orders that took effect more than once.
    pub applied_twice: usize,
    /// Webhooks the local subscriber server answered 2xx, each signature verified (distinct
    /// subscriber and `webhook-id`).
    pub webhooks_delivered: usize,
    /// Webhook requests the local subscriber server answered 408, 429 or 5xx (retried by the
    /// dispatcher).
    pub webhook_retries: usize,
    /// Messages in `WebhookDeadLetterQueue`.
    pub webhooks_dead_lettered: usize,
    /// Partner webhooks that took effect (inbox rows of the webhook ids sent; its replay adds none).
    pub webhooks_received: usize,
    /// Forged partner webhooks answered 401 with nothing written.
    pub webhooks_rejected: usize,
    /// Per function, the figures it reported through its EMF metrics (totals): the producer's
    /// events written, the relay's published and retried, the consumer's applied, duplicates
    /// and dead-lettered ([`crate::stats::status::stage_figures`]).
    pub stages: BTreeMap<String, BTreeMap<String, u64>>,
    /// The order too large for an outbox item, carried by claim check ([`large::LargeEvents`]).
    pub large_events: large::LargeEvents,
    /// The first order's `OrderCreated`, followed through the pipeline (`outbox-local trace`;
    /// `None` when it could not be read).
    pub first_event: Option<outbox_cli::trace::Trace>,
    /// Whether everything adds up.
    pub ok: bool,
}

struct Order {
    order_id: String,
    event_id: String,
    quantity: u64,
}

/// Prints the report's lines for people on stdout (nothing in `--json` mode, whose stdout is the
/// one JSON object) and a progress line on stderr in every mode. The progress line is redrawn in
/// place on a terminal; elsewhere (CI logs, `--json` piped) it is printed when it changes, at
/// most every 5 seconds.
pub(crate) struct Say {
    pub(crate) quiet: bool,
    pub(crate) terminal: bool,
    pub(crate) last: std::sync::Mutex<(String, Option<Instant>)>,
}

impl Say {
    pub(crate) fn line(&self, text: impl AsRef<str>) {
        if !self.quiet {
            println!("{}", text.as_ref());
        }
    }
    pub(crate) fn progress(&self, text: impl AsRef<str>) {
        let text = text.as_ref();
        if self.terminal {
            eprint!("\r\x1b[2K  … {text}");
            let _ = std::io::stderr().flush();
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let due = last.1.is_none_or(|t| t.elapsed() >= Duration::from_secs(5));
        if last.0 != text && due {
            eprintln!("  … {text}");
            *last = (text.to_owned(), Some(Instant::now()));
        }
    }
    pub(crate) fn end_progress(&self) {
        if self.terminal {
            eprint!("\r\x1b[2K");
        }
    }
}

/// The sum of metric `name` over the stack's stream-triggered functions (the relay), from their
/// EMF lines.
fn relay_figure(runtime: &Runtime, counts: &Counts, name: &str) -> usize {
    let relays = runtime.functions.values().filter(|f| f.spec.events.iter().any(|e| matches!(e, FunctionEvent::DynamoDb(_))));
    relays.map(|f| counts.metric(&f.spec.logical_id, name)).sum::<f64>() as usize
}

/// The subject (`sub`) of the demo's tokens: the owner of its orders.
pub const DEMO_SUBJECT: &str = "demo-customer";

/// Runs the demo against a runtime whose pipelines and HTTP API (at `api`) are running.
///
/// # Errors
/// A message saying which stage did not complete.
pub async fn run(runtime: Arc<Runtime>, api: SocketAddr, options: &DemoOptions) -> crate::Result<DemoReport> {
    use std::io::IsTerminal;
    let say = Say { quiet: options.json, terminal: std::io::stderr().is_terminal(), last: Default::default() };
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
    let events = aws_sdk_eventbridge::Client::new(&runtime.sdk);
    // The sample's inventory consumer (another service's template stops here, saying so).
    let books = Sample::of(&runtime)?;
    let outbox_table = books.var("OUTBOX_TABLE")?;
    let consumer_dlq = runtime
        .stack
        .queue("ConsumerKit/ConsumerDeadLetterQueue")
        .cloned()
        .ok_or_else(|| crate::Error::invalid("the template has no ConsumerKit/ConsumerDeadLetterQueue"))?;
    let (bus, _) = runtime.consumer_delivery(&books.consumer)?;
    // The books need every order's deliveries (bounded by the orders the demo commits).
    runtime.stats.record_every_event();
    // Webhook subscribers and the partner, registered before any event can reach them.
    let webhooks = webhooks::Webhooks::set_up(&runtime).await?;

    // 1. Stock.
    for sku in SAMPLE_SKUS {
        books.put_stock(&dynamodb, sku, 10_000).await.map_err(crate::Error::other("seeding stock"))?;
    }
    books.put_stock(&dynamodb, SCARCE_SKU, 1).await.map_err(crate::Error::other("seeding stock"))?;

    // 2. Orders through the HTTP API.
    let samples = sample_orders(&options.events_dir)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut requests: Vec<(String, Option<String>)> = samples.clone();
    for i in 0..options.orders {
        let lines: Vec<Value> = (0..rng.random_range(1..=3))
            .map(|_| {
                json!({"sku": SAMPLE_SKUS[rng.random_range(0..SAMPLE_SKUS.len())], "quantity": rng.random_range(1..=3), "unit_price": format!("{}.{:02}", rng.random_range(1..100), rng.random_range(0..100))})
            })
            .collect();
        requests.push((json!({"customer_id": format!("c-{}", 2000 + i), "currency": "EUR", "lines": lines}).to_string(), None));
    }
    requests.push((
        json!({"customer_id": "c-9999", "currency": "EUR", "lines": [{"sku": SCARCE_SKU, "quantity": 2, "unit_price": "99.00"}]}).to_string(),
        Some("demo-over-stock".into()),
    ));
    // The demo's customer signs every order API request (the template's JWT authorizer).
    let client = crate::runtime::authorizer::client_as(&runtime.issuer, DEMO_SUBJECT).build().map_err(crate::Error::other("the HTTP client"))?;
    let url = format!("http://{api}/orders");
    let mut orders = Vec::new();
    for (i, (body, correlation)) in requests.iter().enumerate() {
        let mut request = client.post(&url).header("content-type", "application/json").body(body.clone());
        if let Some(c) = correlation {
            request = request.header("x-correlation-id", c);
        }
        let response = request.send().await.map_err(crate::Error::other(format!("POST {url}")))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if status.as_u16() != 201 {
            return Err(crate::Error::expectation(format!("POST /orders answered {status} for order {}: {text}", i + 1)));
        }
        let created: Value = serde_json::from_str(&text).map_err(crate::Error::other("POST /orders answered non-JSON"))?;
        let quantity = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|b| b.get("lines").and_then(Value::as_array).map(|l| l.iter().filter_map(|x| x["quantity"].as_u64()).sum()))
            .unwrap_or(0);
        orders.push(Order {
            order_id: created["order_id"].as_str().unwrap_or_default().to_owned(),
            event_id: created["event_id"].as_str().unwrap_or_default().to_owned(),
            quantity,
        });
        say.progress(format!("POST /orders {}/{}", i + 1, requests.len()));
    }
    say.end_progress();
    say.line(format!(
        "1. producer   {} orders committed through POST /orders on http://{api} ({} samples from {}, {} generated, 1 over stock): order + OrderCreated outbox item in one TransactWriteItems each",
        orders.len(),
        samples.len(),
        options.events_dir.display(),
        options.orders
    ));

    // 3. Wait until quiet.
    let started = Instant::now();
    let order_events: HashSet<String> = orders.iter().map(|o| o.event_id.clone()).collect();
    loop {
        let counts = runtime.stats.snapshot();
        let consumed = order_events.iter().filter(|id| counts.effects(id) > 0).count();
        // The outbox is scanned only once every order took effect: until then the pipeline is
        // not quiet anyway. Every outbox item is settled by the relay once: published, or
        // dead-lettered (none are, here).
        let mut unpublished = None;
        if consumed == orders.len() {
            let items = outbox_event_ids(&dynamodb, &outbox_table).await?.len();
            let settled = relay_figure(&runtime, &counts, "EventsPublished") + relay_figure(&runtime, &counts, "RecordsDeadLettered");
            if settled >= items && items >= 2 * orders.len() {
                break;
            }
            unpublished = Some(items.saturating_sub(settled));
        }
        say.progress(format!(
            "waiting for the pipeline: {consumed}/{} orders consumed, {} events published in {} PutEvents calls",
            orders.len(),
            relay_figure(&runtime, &counts, "EventsPublished"),
            relay_figure(&runtime, &counts, "PutEventsCalls")
        ));
        if started.elapsed() > options.timeout {
            say.end_progress();
            return Err(crate::Error::expectation(format!(
                "the pipeline did not go quiet in {} s: {consumed}/{} orders consumed, {} outbox items unpublished (run with -v to see the functions' logs)",
                options.timeout.as_secs(),
                orders.len(),
                unpublished.map_or_else(|| "not yet counted".to_owned(), |n| n.to_string())
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    say.end_progress();
    let counts = runtime.stats.snapshot();
    say.line(format!(
        "2. relay      so far {} outbox items (orders' and the consumer's own events) → {} events published in {} PutEvents calls; {} stream records read, {} filtered out by the mapping",
        outbox_event_ids(&dynamodb, &outbox_table).await?.len(),
        relay_figure(&runtime, &counts, "EventsPublished"),
        relay_figure(&runtime, &counts, "PutEventsCalls"),
        counts.stream_records,
        counts.stream_records_filtered
    ));
    let reserved = order_events.iter().filter(|id| has_outcome(&counts, id, "reserved")).count();
    let rejected = order_events.iter().filter(|id| has_outcome(&counts, id, "rejected")).count();
    say.line(format!(
        "3. consumer   {} orders took effect exactly once through the inbox: {reserved} reserved, {rejected} rejected (insufficient stock for {SCARCE_SKU}); each emitted InventoryReserved/InventoryRejected through the same outbox",
        reserved + rejected
    ));

    // 4. A duplicate delivery of the first order's event.
    let first = orders.first().ok_or_else(|| crate::Error::expectation("no order was committed"))?;
    let item = dynamodb
        .get_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(outbox_pk(&first.order_id)))
        .key("sk", AttributeValue::S(OutboxItem::sort_key(1)))
        .consistent_read(true)
        .send()
        .await
        .map_err(crate::Error::aws("GetItem outbox"))?
        .item
        .ok_or_else(|| crate::Error::expectation("the first order's outbox item is missing"))?;
    let item = OutboxItem::from_item(serde_dynamo::Item::from(item)).map_err(crate::Error::other("the outbox item"))?;
    let bus_event = item.to_bus_event().map_err(crate::Error::other("the outbox item's bus event"))?;
    put_event(&events, bus_event.to_entry(&bus)).await?;
    wait_until(options.timeout, || {
        let c = runtime.stats.snapshot();
        has_outcome(&c, &first.event_id, "duplicate")
    })
    .await
    .map_err(|_| crate::Error::expectation(format!("the duplicate of event {} was not absorbed in time", first.event_id)))?;
    say.line(format!(
        "4. duplicate  event {} published again (new EventBridge envelope id, same detail.metadata.id) → absorbed by the inbox, no second reservation",
        first.event_id
    ));

    // 5. A cancellation: the order's stock goes back, exactly once.
    let cancelled = orders
        .iter()
        .find(|o| o.event_id != first.event_id && has_outcome(&runtime.stats.snapshot(), &o.event_id, "reserved"))
        .ok_or_else(|| crate::Error::expectation("no reserved order to cancel"))?;
    let response = client
        .post(format!("http://{api}/orders/{}/cancel", cancelled.order_id))
        .header("content-type", "application/json")
        .body(r#"{"reason":"customer changed their mind"}"#)
        .send()
        .await
        .map_err(crate::Error::other("POST /orders/{id}/cancel"))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if status.as_u16() != 200 {
        return Err(crate::Error::expectation(format!("POST /orders/{}/cancel answered {status}: {text}", cancelled.order_id)));
    }
    let cancel_event = serde_json::from_str::<Value>(&text).ok().and_then(|v| v["event_id"].as_str().map(str::to_owned)).unwrap_or_default();
    wait_until(options.timeout, || has_outcome(&runtime.stats.snapshot(), &cancel_event, "released"))
        .await
        .map_err(|_| crate::Error::expectation(format!("the cancellation of order {} was not applied in time", cancelled.order_id)))?;
    say.line(format!(
        "5. cancel     POST /orders/{}/cancel → OrderCancelled (sequence 2, optimistic concurrency on the order version) → relay → consumer released {} units (InventoryReleased)",
        cancelled.order_id, cancelled.quantity
    ));

    let large_events = large::run(&runtime, api, &say, options.timeout).await?;

    // 6. A poison event: no retry can fix it, so the consumer dead-letters it on the first try.
    let poison_id = format!("poison-{}", uuid::Uuid::now_v7());
    let poison = order_event(
        "OrderCreated",
        &poison_id,
        "poison-order",
        1,
        "demo-poison",
        json!({"order_id": "poison-order", "customer_id": "c-0", "currency": "EUR", "lines": "three red mugs, please"}),
    );
    put_event(&events, entry(&bus, "OrderCreated", &poison)).await?;
    // 7. An event whose predecessor never comes: parked by the ordered consumer, not dead-lettered.
    let gap_id = format!("gap-{}", uuid::Uuid::now_v7());
    let gap = order_event(
        "OrderCancelled",
        &gap_id,
        &first.order_id,
        5,
        "demo-gap",
        json!({"order_id": first.order_id, "reason": "sequence 2 to 4 never happened"}),
    );
    put_event(&events, entry(&bus, "OrderCancelled", &gap)).await?;
    dlq::wait_for_depth(&sqs, &consumer_dlq, 1, options.timeout).await.map_err(crate::Error::Operator)?;
    let inbox_table = books.var("INBOX_TABLE")?;
    let parked_gap = {
        let started = std::time::Instant::now();
        loop {
            let parked = outbox_cli::ordering::parked(&dynamodb, &inbox_table).await.map_err(crate::Error::Operator)?;
            if let Some(p) = parked.into_iter().find(|p| p.event.event_id == gap_id) {
                break Some(p);
            }
            if started.elapsed() > options.timeout {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let dead = dlq::peek(&sqs, &consumer_dlq).await.map_err(crate::Error::Operator)?;
    let poison = dead.iter().find(|m| m.event_id.as_deref() == Some(poison_id.as_str()));
    let gap = parked_gap.as_ref().filter(|_| !dead.iter().any(|m| m.event_id.as_deref() == Some(gap_id.as_str())));
    let reason = |m: Option<&outbox_cli::message::DlqMessage>| m.map(|m| m.reason.clone()).unwrap_or_else(|| "(not found)".into());
    say.line(format!(
        "6. poison     event {poison_id} (detail.data.lines is a string) → dead-lettered by the consumer on the first attempt → {}: {}",
        consumer_dlq.name,
        reason(poison)
    ));
    say.line(match gap {
        Some(p) => format!(
            "7. gap        event {gap_id} (OrderCancelled sequence 5 of an order at sequence 1) → parked by the ordered consumer, waiting for sequence {} (acknowledged, not dead-lettered; `outbox-local ordering parked` lists it)",
            p.event.waits_for
        ),
        None => format!("7. gap        event {gap_id} was NOT parked (or was dead-lettered)"),
    });

    // 8. and 9. Webhooks in and out.
    let (inbound, outbound) = match &webhooks {
        Some(w) => {
            let inbound = w.inbound(&runtime, api, &first.order_id).await?;
            say.line(format!(
                "8. webhook in POST /webhooks/{} signed by the partner (webhook-id {}) → 200: order {} {} (version {} → {}) with its OrderPaid event in one transaction; the same request replayed → 200 duplicate, version still {}, {} inbox row; signed with a wrong secret → {}",
                webhooks::PARTNER,
                inbound.webhook_id,
                inbound.order_id,
                inbound.status,
                inbound.versions.0,
                inbound.versions.1,
                inbound.versions.2,
                inbound.received,
                if inbound.rejected == 1 { "401, nothing written" } else { "NOT refused" }
            ));
            let outbound = w.outbound(&runtime, options.timeout).await?;
            let answers: Vec<String> = outbound
                .answers
                .iter()
                .map(|(id, statuses)| format!("{id} {}", statuses.iter().map(u16::to_string).collect::<Vec<_>>().join(" → ")))
                .collect();
            let reasons: Vec<String> = outbound
                .dead_lettered
                .iter()
                .map(|m| {
                    let a = |k: &str| m.attributes.get(k).cloned().unwrap_or_default();
                    format!("{} {}: {}", a("subscriber"), a("ERROR_CODE"), a("ERROR_MESSAGE"))
                })
                .collect();
            say.line(format!(
                "9. webhooks   {} → Webhooks/WebhookDeliveryRule → Webhooks/WebhookDeliveryQueue → Webhooks/WebhookDispatcherFunction (local SQS mapping) → signed POSTs to {}: {}; {} delivered with valid signatures, {} retried (each a re-enqueued message for the next attempt), dead-lettered: {}",
                webhooks::EVENT_TYPE,
                w.endpoints(),
                answers.join(", "),
                outbound.delivered,
                outbound.retries,
                if reasons.is_empty() { "none".to_owned() } else { reasons.join("; ") }
            ));
            (Some(inbound), Some(outbound))
        }
        None => (None, None),
    };
    let webhooks_ok = match (&inbound, &outbound) {
        (Some(i), Some(o)) => {
            i.received == 1
                && i.rejected == 1
                && i.replay_absorbed
                && i.versions.1 == i.versions.0 + 1
                && o.delivered == 2
                && o.retries == 2
                && o.dead_lettered.len() == 1
                && o.unverified == 0
        }
        _ => true,
    };

    // 10. The books.
    let counts = runtime.stats.snapshot();
    let stock_reserved = books.reserved(&dynamodb, SAMPLE_SKUS.into_iter().chain([SCARCE_SKU])).await?;
    let stock_expected: u64 =
        orders.iter().filter(|o| has_outcome(&counts, &o.event_id, "reserved") && o.order_id != cancelled.order_id).map(|o| o.quantity).sum();
    let effects: BTreeMap<&str, usize> = orders.iter().map(|o| (o.event_id.as_str(), counts.effects(&o.event_id))).collect();
    let lost = effects.values().filter(|n| **n == 0).count();
    let applied_twice = effects.values().filter(|n| **n > 1).count();
    // Commit → effect of the orders (exact: every order's first effect).
    let mut latencies: Vec<i64> =
        orders.iter().filter_map(|o| counts.deliveries(&o.event_id).iter().find(|d| crate::stats::has_effect(&d.outcome))?.latency_ms).collect();
    latencies.sort_unstable();
    let report = DemoReport {
        orders_committed: orders.len(),
        outbox_items: outbox_event_ids(&dynamodb, &outbox_table).await?.len(),
        events_published: relay_figure(&runtime, &counts, "EventsPublished"),
        put_events_calls: relay_figure(&runtime, &counts, "PutEventsCalls"),
        events_consumed: reserved + rejected,
        reservations: reserved,
        rejections: rejected,
        releases: counts.outcome_count("released"),
        duplicates_absorbed: counts.outcome_count("duplicate"),
        dead_lettered: dead.len(),
        stock_reserved,
        stock_expected,
        latency_ms_p50: percentile(&latencies, 0.5),
        latency_ms_p99: percentile(&latencies, 0.99),
        lost,
        applied_twice,
        webhooks_delivered: outbound.as_ref().map_or(0, |o| o.delivered),
        webhook_retries: outbound.as_ref().map_or(0, |o| o.retries),
        webhooks_dead_lettered: outbound.as_ref().map_or(0, |o| o.dead_lettered.len()),
        webhooks_received: inbound.as_ref().map_or(0, |i| i.received),
        webhooks_rejected: inbound.as_ref().map_or(0, |i| i.rejected),
        large_events: large_events.clone(),
        stages: crate::stats::status::stage_figures(&counts),
        first_event: None,
        ok: webhooks_ok
            && lost == 0
            && large_events.ok()
            && applied_twice == 0
            && stock_reserved == stock_expected
            && poison.is_some()
            && gap.is_some()
            && counts.outcome_count("released") == 1
            && counts.outcome_count("duplicate") >= 1,
    };
    say.line(format!(
        "10. books     stock reserved {stock_reserved} units = {stock_expected} ordered by reserved, uncancelled orders; lost {lost}, applied twice {applied_twice}; commit → effect latency p50 {} ms, p99 {} ms",
        report.latency_ms_p50.unwrap_or(0),
        report.latency_ms_p99.unwrap_or(0)
    ));
    say.line("\nper stage, as each function reported it (EMF metrics):");
    say.line(crate::stats::status::format_stage_figures(&report.stages).trim_end());
    say.line(format!("\n{} holds {} message(s) (what `outbox-local dlq list` shows):", consumer_dlq.name, dead.len()));
    say.line(dlq::format_listing(&dead).trim_end());

    // 11. One event's timeline.
    let mut report = report;
    match trace_event(&runtime, &first.event_id).await {
        Ok(trace) => {
            say.line(format!(
                "\n11. one event  the first order's OrderCreated, followed through the pipeline (`outbox-local trace {}`):",
                first.event_id
            ));
            say.line(trace.render().trim_end());
            say.line("               (a second `published`: step 4's duplicate, absorbed by the inbox; publish and delivery times are recorded by the local runtime, not kept on AWS)");
            report.first_event = Some(trace);
        }
        Err(e) => say.line(format!("\n11. one event  could not trace {}: {e}", first.event_id)),
    }
    say.line(if report.ok {
        "\nresult: every committed order took effect exactly once; the cancellation released its stock once; the 1 MiB order went by claim check and was applied once; the duplicate was absorbed; the poison and the never-succeeding events are in the dead-letter queue; the webhooks were delivered, retried and dead-lettered as their subscribers answered, the partner's received once; nothing lost."
    } else {
        "\nresult: MISMATCH — see the figures above."
    });
    Ok(report)
}

/// What `outbox-local trace <event_id>` prints of the running stack: the stack's data, and the
/// stages the runtime recorded in its journal (flushed first).
async fn trace_event(runtime: &Runtime, event_id: &str) -> crate::Result<outbox_cli::trace::Trace> {
    let resources = outbox_cli::resources::Resources::from_stack(&runtime.stack).map_err(crate::Error::other("the stack's resources"))?;
    let mut trace = outbox_cli::trace::trace(&runtime.sdk, &resources, event_id, &outbox_cli::trace::Lookup::Index)
        .await
        .map_err(crate::Error::other(format!("tracing event {event_id}")))?;
    if let (Some(journal), Some(dir)) = (&runtime.options.journal, &runtime.options.state_dir) {
        journal.flush();
        trace.add_stages(crate::journal::Journal::stages_of(dir, event_id));
    }
    Ok(trace)
}

fn has_outcome(counts: &Counts, event_id: &str, outcome: &str) -> bool {
    counts.has_outcome(event_id, outcome)
}

async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > timeout {
            return Err(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The event ids of every item in the outbox table.
async fn outbox_event_ids(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> crate::Result<Vec<String>> {
    let mut ids = Vec::new();
    let mut pages = dynamodb.scan().table_name(table).projection_expression("event_id").into_paginator().items().send();
    while let Some(item) = pages.next().await {
        let item = item.map_err(crate::Error::aws(format!("Scan {table}")))?;
        if let Some(AttributeValue::S(id)) = item.get("event_id") {
            ids.push(id.clone());
        }
    }
    Ok(ids)
}
