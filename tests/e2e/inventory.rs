//! The inventory consumer's effectively-once behaviour on the emulator: business rejection,
//! release on cancellation, per-order ordering (an early cancellation is parked, then applied
//! after its creation, with no operator step), and payload conflicts and malformed envelopes
//! dead-lettered on the first attempt.

use crate::common::{Deadline, Local};
use orders_app::inventory;
use outbox_cli::dlq;
use serde_json::{json, Value};

fn event(envelope_id: &str, detail_type: &str, event_id: &str, order_id: &str, sequence: u64, data: Value) -> String {
    json!({
        "version": "0", "id": envelope_id, "detail-type": detail_type, "source": "example.orders",
        "account": "123456789012", "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": event_id, "type": detail_type, "version": 1, "source": "example.orders",
                         "time": "2026-11-29T08:00:00.000Z", "subject": order_id, "aggregate_type": "Order",
                         "sequence": sequence, "correlation_id": "test"},
            "data": data
        }
    })
    .to_string()
}

fn created(event_id: &str, order_id: &str, sku: &str, quantity: u32) -> String {
    let data =
        json!({"order_id": order_id, "customer_id": "c", "currency": "EUR", "lines": [{"sku": sku, "quantity": quantity, "unit_price": "1.00"}]});
    event(&format!("env-{event_id}"), "OrderCreated", event_id, order_id, 1, data)
}

fn cancelled(event_id: &str, order_id: &str, sequence: u64) -> String {
    event(&format!("env-{event_id}"), "OrderCancelled", event_id, order_id, sequence, json!({"order_id": order_id}))
}

async fn invoke(local: &Local, payload: &str) -> Value {
    let f = local.runtime.function("ReserveInventoryFunction").unwrap();
    f.invoke(payload).await.result.unwrap_or_else(|d| panic!("{}: {}", d.error_type, d.error_message))
}

fn consumer_dlq(local: &Local) -> outbox_template::stack::QueueInfo {
    local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().unwrap()
}

#[tokio::test]
async fn insufficient_stock_is_a_business_outcome_not_an_error() {
    let local = Local::start().await;
    let table = local.table("InventoryTable");
    inventory::put_stock(&local.dynamodb, &table, "SKU-B", 1).await.unwrap();
    let response = invoke(&local, &created("e-rej", "o-rej", "SKU-B", 2)).await;
    assert_eq!(response["outcome"], "rejected");
    assert_eq!(inventory::stock(&local.dynamodb, &table, "SKU-B").await.unwrap(), Some((1, 0)), "no stock moved");
    let events = local.query_pk(&local.table("OutboxTable"), "Reservation#o-rej").await;
    assert_eq!(events.len(), 1);
    assert_eq!(crate::common::s(&events[0], "event_type"), "InventoryRejected");
    assert!(crate::common::s(&events[0], "payload").contains("insufficient stock for SKU-B"));
    assert_eq!(dlq::depth(&local.sqs, &consumer_dlq(&local)).await.unwrap(), 0, "no dead letter for a business outcome");
    // Delivered again: absorbed.
    assert_eq!(invoke(&local, &created("e-rej", "o-rej", "SKU-B", 2)).await["outcome"], "duplicate");
    local.shutdown().await;
}

#[tokio::test]
async fn a_cancellation_releases_the_reserved_stock_exactly_once() {
    let local = Local::start().await;
    let table = local.table("InventoryTable");
    inventory::put_stock(&local.dynamodb, &table, "SKU-A", 10).await.unwrap();
    assert_eq!(invoke(&local, &created("e-c1", "o-c", "SKU-A", 3)).await["outcome"], "reserved");
    assert_eq!(inventory::stock(&local.dynamodb, &table, "SKU-A").await.unwrap(), Some((7, 3)));
    assert_eq!(invoke(&local, &cancelled("e-c2", "o-c", 2)).await["outcome"], "released");
    assert_eq!(invoke(&local, &cancelled("e-c2", "o-c", 2)).await["outcome"], "duplicate");
    assert_eq!(inventory::stock(&local.dynamodb, &table, "SKU-A").await.unwrap(), Some((10, 0)));
    let events: Vec<String> =
        local.query_pk(&local.table("OutboxTable"), "Reservation#o-c").await.iter().map(|i| crate::common::s(i, "event_type").to_owned()).collect();
    assert_eq!(events, ["InventoryReserved", "InventoryReleased"]);
    local.shutdown().await;
}

/// `event` with its `detail.data` replaced by `data`, embedded as this very text.
fn with_data_text(event: &str, data: &str) -> String {
    let mut value: Value = serde_json::from_str(event).expect("an event");
    value["detail"]["data"] = json!("__DATA__");
    value.to_string().replace(r#""__DATA__""#, data)
}

/// The same event again with `detail.data` re-serialised by some hop (other whitespace, other
/// member order, an escaped character) is a duplicate, from the
/// function's own inbox row; the id reused for another payload is dead-lettered on the first
/// attempt.
#[tokio::test]
async fn an_event_id_reused_with_another_payload_is_dead_lettered_on_the_first_attempt() {
    let local = Local::start().await;
    let table = local.table("InventoryTable");
    inventory::put_stock(&local.dynamodb, &table, "SKU-A", 10).await.unwrap();
    assert_eq!(invoke(&local, &created("e-p", "o-p", "SKU-A", 1)).await["outcome"], "reserved");
    let reserialised = "{\n  \"order_id\": \"o-p\",\n  \"lines\": [ { \"unit_price\": \"1.00\", \"sku\": \"SKU\\u002dA\", \"quantity\": 1 } ],\n  \"currency\": \"EUR\", \"customer_id\": \"c\"\n}";
    assert_eq!(invoke(&local, &with_data_text(&created("e-p", "o-p", "SKU-A", 1), reserialised)).await["outcome"], "duplicate");
    assert_eq!(inventory::stock(&local.dynamodb, &table, "SKU-A").await.unwrap(), Some((9, 1)), "reserved once");
    assert_eq!(dlq::depth(&local.sqs, &consumer_dlq(&local)).await.unwrap(), 0, "a re-serialised copy is no conflict");
    let response = invoke(&local, &created("e-p", "o-p", "SKU-A", 5)).await;
    assert_eq!(response["outcome"], "dead_lettered");
    let dead = dlq::peek(&local.sqs, &consumer_dlq(&local)).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].shape, "consumer-failure");
    assert_eq!(dead[0].event_id.as_deref(), Some("e-p"));
    assert!(dead[0].reason.starts_with("PayloadMismatch"), "{}", dead[0].reason);
    local.shutdown().await;
}

/// A cancellation delivered before its order's creation is parked (acknowledged, nothing
/// dead-lettered, no operator step); the creation's invocation reserves the stock and then applies
/// the parked cancellation, which gives it back. Checked from the tables and the queue.
#[tokio::test]
async fn a_cancellation_before_its_creation_is_parked_then_applied_after_it() {
    let mut local = Local::start().await;
    local.spawn_pipelines();
    let table = local.table("InventoryTable");
    let inbox = local.table("ConsumerKit/InboxTable");
    inventory::put_stock(&local.dynamodb, &table, "SKU-A", 10).await.unwrap();
    let bus = local.runtime.stack.buses[0].name.clone();
    let put = |detail_type: &'static str, body: String| {
        let events = local.events.clone();
        let bus = bus.clone();
        async move {
            let event: Value = serde_json::from_str(&body).unwrap();
            let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(bus)
                .source("example.orders")
                .detail_type(detail_type)
                .detail(event["detail"].to_string())
                .build();
            let out = events.put_events().entries(entry).send().await.unwrap();
            assert_eq!(out.failed_entry_count(), 0);
        }
    };
    put("OrderCancelled", cancelled("e-g2", "o-g", 2)).await;
    let wait = Deadline::new("the early cancellation parked");
    while !local.runtime.stats.snapshot().recent.iter().any(|d| d.event_id == "e-g2" && d.outcome == "parked") {
        wait.tick(|| format!("{:?}", local.runtime.stats.snapshot().recent)).await;
    }
    let parked = outbox_cli::ordering::parked(&local.dynamodb, &inbox).await.unwrap();
    assert_eq!(parked.iter().map(|p| (p.event.event_id.as_str(), p.event.waits_for)).collect::<Vec<_>>(), [("e-g2", 1)]);
    let counts = local.runtime.stats.snapshot();
    assert_eq!((counts.sqs_invocation_errors, counts.sqs_messages_failed), (0, 0), "parking is not a failure: {counts:?}");

    put("OrderCreated", created("e-g1", "o-g", "SKU-A", 4)).await;
    let wait = Deadline::new("the order reserved and the parked cancellation released");
    loop {
        let released = inventory::stock(&local.dynamodb, &table, "SKU-A").await.unwrap() == Some((10, 0));
        let claimed = local
            .dynamodb
            .get_item()
            .table_name(&inbox)
            .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("reserve-inventory#e-g2".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .is_some();
        if released && claimed {
            break;
        }
        wait.tick(|| format!("{:?}", local.runtime.stats.snapshot().recent)).await;
    }
    assert!(outbox_cli::ordering::parked(&local.dynamodb, &inbox).await.unwrap().is_empty(), "nothing left parked");
    // `trace` shows what each event did, as the consumer recorded it.
    for (id, state) in [("e-g1", "applied (reserved)"), ("e-g2", "applied (released)")] {
        let trace = outbox_cli::trace::trace(
            &local.runtime.sdk,
            &outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("resources"),
            id,
            &outbox_cli::trace::Lookup::Scan,
        )
        .await
        .unwrap();
        let consumer = trace.consumers.iter().find(|c| c.consumer == "reserve-inventory").expect("the consumer's row");
        assert_eq!(consumer.state, state, "{}", trace.render());
    }
    assert_eq!(dlq::depth(&local.sqs, &consumer_dlq(&local)).await.unwrap(), 0, "nothing dead-lettered");
    let counts = local.runtime.stats.snapshot();
    assert_eq!((counts.sqs_invocation_errors, counts.sqs_messages_failed), (0, 0), "{counts:?}");
    local.shutdown().await;
}

#[tokio::test]
async fn malformed_envelopes_are_dead_lettered_on_the_first_attempt_with_the_reason() {
    let local = Local::start().await;
    let good: Value = serde_json::from_str(&created("e-m", "o-m", "SKU-A", 1)).unwrap();
    let mut no_detail_type = good.clone();
    no_detail_type.as_object_mut().unwrap().remove("detail-type");
    let mut string_detail = good.clone();
    string_detail["detail"] = Value::String(good["detail"].to_string());
    let mut no_metadata = good.clone();
    no_metadata["detail"].as_object_mut().unwrap().remove("metadata");
    let cases = [(no_detail_type, "detail-type"), (string_detail, "detail must be a JSON object"), (no_metadata, "detail.metadata is missing")];
    for (event, _) in &cases {
        assert_eq!(invoke(&local, &event.to_string()).await["outcome"], "dead_lettered", "{event}");
    }
    let dead = dlq::peek(&local.sqs, &consumer_dlq(&local)).await.unwrap();
    assert_eq!(dead.len(), cases.len());
    for (_, reason) in &cases {
        assert!(
            dead.iter().any(|m| m.shape == "consumer-failure" && m.reason.starts_with("MalformedEvent") && m.reason.contains(reason)),
            "no dead letter saying {reason:?}: {dead:#?}"
        );
    }
    local.shutdown().await;
}
