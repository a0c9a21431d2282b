//! The consumer (ReserveInventoryFunction) on the emulator: the inbox turns repeated and racing
//! deliveries of one event into exactly one effect; an event no retry can fix (malformed, an id
//! reused with another payload) goes to the ConsumerDeadLetterQueue on the first attempt; one
//! whose predecessor never comes (a sequence gap) is parked, not dead-lettered. Events reach it
//! as they do on AWS: the consumer kit's rule → its delivery queue → the SQS event source mapping.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{s, Deadline, Local};
use orders_app::inventory;
use outbox_local::lambda::function::LocalFunction;
use serde_json::{json, Value};

const CONSUMER: &str = "ReserveInventoryFunction";

/// `events/order-created.json` with a new event id, order id and EventBridge envelope id.
fn order_created(event_id: &str, order_id: &str, envelope_id: &str) -> String {
    let path = crate::common::root().join("events/order-created.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut event: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    event["id"] = json!(envelope_id);
    event["detail"]["metadata"]["id"] = json!(event_id);
    event["detail"]["metadata"]["subject"] = json!(order_id);
    event["detail"]["data"]["order_id"] = json!(order_id);
    event.to_string()
}

/// `(sku, quantity)` of the sample event's lines.
fn sample_lines() -> Vec<(String, u64)> {
    let event: Value = serde_json::from_str(&order_created("e", "o", "env")).expect("JSON");
    event["detail"]["data"]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| (l["sku"].as_str().expect("sku").to_owned(), l["quantity"].as_u64().expect("quantity")))
        .collect()
}

async fn outcome(function: &LocalFunction, payload: &str) -> String {
    let invocation = function.invoke(payload).await;
    let response = invocation.result.unwrap_or_else(|d| panic!("{CONSUMER} failed: {}: {}", d.error_type, d.error_message));
    response["outcome"].as_str().unwrap_or_else(|| panic!("no outcome in {response}")).to_owned()
}

const STOCK: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn duplicate_and_racing_deliveries_take_effect_once() {
    let local = Local::start().await;
    let function: Arc<LocalFunction> = local.runtime.function(CONSUMER).unwrap_or_else(|e| panic!("{e}"));
    let env = local.env_of(CONSUMER);
    let inventory_table = env["INVENTORY_TABLE"].clone();
    let inbox_table = env["INBOX_TABLE"].clone();
    let outbox_table = env["OUTBOX_TABLE"].clone();
    let consumer_name = env["CONSUMER_NAME"].clone();
    let lines = sample_lines();
    for (sku, _) in &lines {
        inventory::put_stock(&local.dynamodb, &inventory_table, sku, STOCK).await.expect("seeding stock");
    }
    let check_stock = |times: u64| {
        let dynamodb = local.dynamodb.clone();
        let table = inventory_table.clone();
        let lines = lines.clone();
        async move {
            for (sku, qty) in &lines {
                let stock = inventory::stock(&dynamodb, &table, sku).await.expect("reading stock");
                assert_eq!(stock, Some((STOCK - times * qty, times * qty)), "stock of {sku} after {times} order(s) of {qty} (available, reserved)");
            }
        }
    };

    // 1. The same event twice, with two EventBridge envelope ids.
    let event_id = uuid::Uuid::now_v7().to_string();
    let order_id = format!("o-{}", crate::common::short_id());
    assert_eq!(outcome(&function, &order_created(&event_id, &order_id, "envelope-a")).await, "reserved");
    assert_eq!(outcome(&function, &order_created(&event_id, &order_id, "envelope-b")).await, "duplicate");
    check_stock(1).await;
    let inbox = local.query_pk(&inbox_table, &format!("{consumer_name}#{event_id}")).await;
    assert_eq!(inbox.len(), 1, "inbox rows for {event_id}: {inbox:?}");
    assert_eq!(s(&inbox[0], "event_id"), event_id);
    let emitted = local.query_pk(&outbox_table, &format!("Reservation#{order_id}")).await;
    assert_eq!(emitted.len(), 1, "the consumer's own events for {order_id}: {emitted:?}");
    assert_eq!(s(&emitted[0], "event_type"), "InventoryReserved");

    // 2. One new event delivered 8 times at once.
    let event_id = uuid::Uuid::now_v7().to_string();
    let order_id = format!("o-{}", crate::common::short_id());
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let function = function.clone();
            let payload = order_created(&event_id, &order_id, &format!("envelope-race-{i}"));
            tokio::spawn(async move { outcome(&function, &payload).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("a racing delivery panicked"));
    }
    outcomes.sort();
    let reserved = outcomes.iter().filter(|o| *o == "reserved").count();
    let duplicate = outcomes.iter().filter(|o| *o == "duplicate").count();
    assert_eq!((reserved, duplicate), (1, 7), "outcomes of 8 racing deliveries: {outcomes:?}");
    check_stock(2).await;
    let inbox = local.query_pk(&inbox_table, &format!("{consumer_name}#{event_id}")).await;
    assert_eq!(inbox.len(), 1, "inbox rows for {event_id}: {inbox:?}");
    let emitted = local.query_pk(&outbox_table, &format!("Reservation#{order_id}")).await;
    assert_eq!(emitted.len(), 1, "the consumer's own events for {order_id}: {emitted:?}");

    // 3. The same event id with different data (another order): never applied. No retry can fix
    //    it, so the consumer sends it to its dead-letter queue on the first attempt.
    let other_order = format!("o-{}", crate::common::short_id());
    assert_eq!(outcome(&function, &order_created(&event_id, &other_order, "envelope-c")).await, "dead_lettered");
    check_stock(2).await;
    assert!(local.query_pk(&outbox_table, &format!("Reservation#{other_order}")).await.is_empty());
    let dlq = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("ConsumerKit/ConsumerDeadLetterQueue");
    let dead = outbox_cli::dlq::peek(&local.sqs, &dlq).await.expect("peeking the DLQ");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].event_id.as_deref(), Some(event_id.as_str()), "{dead:?}");
    assert!(dead[0].reason.starts_with("PayloadMismatch"), "reason: {}", dead[0].reason);

    local.shutdown().await;
}

/// Puts one event on the stack's bus, as a producer's relay would.
async fn put_event(local: &Local, bus: &str, detail_type: &str, detail: &Value) {
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source("example.orders")
        .detail_type(detail_type)
        .detail(detail.to_string())
        .build();
    let out = local.events.put_events().entries(entry).send().await.expect("PutEvents");
    assert_eq!(out.failed_entry_count(), 0, "{out:?}");
}

/// Waits until the runtime's counters satisfy `settled` (the delivery of the event is over).
async fn settle(local: &Local, what: &str, settled: impl Fn(&outbox_local::stats::Counts) -> bool) -> outbox_local::stats::Counts {
    let deadline = Deadline::new(what);
    loop {
        let counts = local.runtime.stats.snapshot();
        if settled(&counts) {
            return counts;
        }
        deadline.tick(|| format!("{counts:?}")).await;
    }
}

/// The consumer dead-letter queue's message about `event_id` (waits for it, bounded).
async fn dead_letter_of(local: &Local, event_id: &str) -> outbox_cli::message::DlqMessage {
    let dlq = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("ConsumerKit/ConsumerDeadLetterQueue");
    let deadline = Deadline::new(format!("event {event_id} in {}", dlq.name));
    loop {
        let dead = outbox_cli::dlq::peek(&local.sqs, &dlq).await.expect("peeking the DLQ");
        if let Some(m) = dead.iter().find(|m| m.event_id.as_deref() == Some(event_id)) {
            return m.clone();
        }
        deadline.tick(|| format!("{dead:?}")).await;
    }
}

/// The bus the consumer's events come from (the consumer kit's rule is on it).
fn bus_of(local: &Local) -> String {
    local.runtime.consumer_delivery(CONSUMER).unwrap_or_else(|e| panic!("{e}")).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_event_is_dead_lettered_on_the_first_attempt() {
    let mut local = Local::start().await;
    let bus = bus_of(&local);
    local.spawn_pipelines();

    let poison_id = format!("poison-{}", uuid::Uuid::now_v7());
    let detail = json!({
        "metadata": {"id": poison_id, "type": "OrderCreated", "version": 1, "source": "example.orders",
                     "time": "2026-11-29T08:00:00.000Z", "subject": "poison-order", "aggregate_type": "Order",
                     "sequence": 1, "correlation_id": "poison-test"},
        "data": {"order_id": "poison-order", "customer_id": "c-0", "currency": "EUR", "lines": "three red mugs, please"}
    });
    put_event(&local, &bus, "OrderCreated", &detail).await;

    let settled = |c: &outbox_local::stats::Counts| c.recent.iter().any(|d| d.event_id == poison_id) || c.sqs_messages_failed > 0;
    let counts = settle(&local, "the delivery of the malformed event", settled).await;
    // No retry can fix it: one invocation, which dead-letters it itself and settles the message
    // (it does not come back from the delivery queue).
    assert_eq!(counts.sqs_invocations, 1, "{counts:?}");
    assert_eq!(counts.sqs_invocation_errors, 0, "{counts:?}");
    assert_eq!(counts.sqs_messages_failed, 0, "the message went back to the delivery queue: {counts:?}");
    let outcomes: Vec<&str> = counts.recent.iter().filter(|d| d.event_id == poison_id).map(|d| d.outcome.as_str()).collect();
    assert_eq!(outcomes, ["dead_lettered"], "{counts:?}");
    let message = dead_letter_of(&local, &poison_id).await;

    assert_eq!(message.shape, "consumer-failure", "{message:?}");
    assert!(message.reason.contains("MalformedEvent"), "reason: {}", message.reason);
    assert!(message.reason.contains("detail.data.lines"), "reason: {}", message.reason);
    let record: Value = serde_json::from_str(&message.body).expect("the consumer failure record is JSON");
    assert_eq!(record.pointer("/event/detail/metadata/id").and_then(Value::as_str), Some(poison_id.as_str()), "{record}");
    assert_eq!(record.pointer("/event/detail/data/lines"), Some(&json!("three red mugs, please")), "{record}");
    assert_eq!(record.pointer("/event/detail-type").and_then(Value::as_str), Some("OrderCreated"), "{record}");

    local.shutdown().await;
}

/// Sequence 2 of an order whose sequence 1 never arrives (a real gap): parked on the first
/// attempt, acknowledged, never dead-lettered among poison; `trace` and `ordering parked` show
/// it; `ordering release` moves the order past 1 and re-publishes it, and it applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_whose_predecessor_never_comes_is_parked_not_dead_lettered() {
    let mut local = Local::start().await;
    let bus = bus_of(&local);
    local.spawn_pipelines();

    let gap_id = format!("gap-{}", uuid::Uuid::now_v7());
    let order_id = format!("never-created-{}", crate::common::short_id());
    let detail = json!({
        "metadata": {"id": gap_id, "type": "OrderCancelled", "version": 1, "source": "example.orders",
                     "time": "2026-11-29T08:00:00.000Z", "subject": order_id, "aggregate_type": "Order",
                     "sequence": 2, "correlation_id": "gap-test"},
        "data": {"order_id": order_id, "reason": "its OrderCreated never happened"}
    });
    put_event(&local, &bus, "OrderCancelled", &detail).await;

    let settled = |c: &outbox_local::stats::Counts| c.recent.iter().any(|d| d.event_id == gap_id) || c.sqs_messages_failed > 0;
    let counts = settle(&local, "the delivery of the sequence-gap event", settled).await;
    assert_eq!((counts.sqs_invocations, counts.sqs_invocation_errors, counts.sqs_messages_failed), (1, 0, 0), "{counts:?}");
    let outcomes: Vec<&str> = counts.recent.iter().filter(|d| d.event_id == gap_id).map(|d| d.outcome.as_str()).collect();
    assert_eq!(outcomes, ["parked"], "{counts:?}");

    let inbox = local.table("ConsumerKit/InboxTable");
    let parked = outbox_cli::ordering::parked(&local.dynamodb, &inbox).await.expect("ordering parked");
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!((parked[0].event.event_id.as_str(), parked[0].event.sequence, parked[0].event.waits_for), (gap_id.as_str(), 2, 1));
    assert!(outbox_cli::ordering::format_parked(&parked, Duration::ZERO).starts_with("GAP reserve-inventory"), "past the gap limit: flagged");
    let trace = outbox_cli::trace::trace(
        &local.runtime.sdk,
        &outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("resources"),
        &gap_id,
        &outbox_cli::trace::Lookup::Scan,
    )
    .await
    .expect("trace");
    assert!(trace.consumers.iter().any(|c| c.state.starts_with("parked: sequence 2 waits for sequence 1")), "{}", trace.render());
    let dlq = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("ConsumerKit/ConsumerDeadLetterQueue");
    assert_eq!(outbox_cli::dlq::depth(&local.sqs, &dlq).await.expect("depth"), 0, "a gap is not poison");

    // The operator releases the order through 1: the parked event is re-published and applies.
    let aggregate = format!("Order#{order_id}");
    outbox_cli::ordering::release(&local.dynamodb, &inbox, "reserve-inventory", &aggregate, 1, true).await.expect("release");
    let bus = outbox_cli::republisher::Republisher::Classic { client: local.events.clone(), bus: bus.clone() };
    let sent = outbox_cli::ordering::republish_parked(&local.dynamodb, &bus, &inbox, "reserve-inventory", &aggregate, 1).await.expect("re-published");
    assert_eq!(sent, 1);
    let applied = |c: &outbox_local::stats::Counts| c.recent.iter().any(|d| d.event_id == gap_id && d.outcome == "nothing_to_release");
    settle(&local, "the released event applied", applied).await;
    assert!(outbox_cli::ordering::parked(&local.dynamodb, &inbox).await.expect("parked").is_empty());
    local.shutdown().await;
}
