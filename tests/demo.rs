//! The demo end to end, wired as `outbox-local demo --orders 5 --json` wires it (HTTP API +
//! pipelines + `demo::run`), on a fresh stack: every committed order takes effect exactly once,
//! the injected duplicate is absorbed, the cancelled order's stock comes back once, the poison
//! event and the event failing every attempt are dead-lettered, nothing is lost; the 1 MiB order
//! goes by claim check (the outbox item and the bus carry the reference, S3 the bytes) and is
//! applied exactly once; the partner's webhook is received once (its replay absorbed, a forged
//! one refused) and the `OrderPaid` it produced reaches the local subscribers: two delivered (one
//! after a 500 and a 429), one dead-lettered.

mod common;

use std::time::Duration;

use common::Local;
use outbox_local::scenarios::demo::{self, DemoOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_adds_up() {
    let mut local = Local::start().await;
    let api = local.serve_http().await;
    local.spawn_pipelines();
    let events_dir = common::root().join("events");
    let samples = demo::sample_orders(&events_dir).expect("the sample orders of events/").len();
    assert_eq!(samples, 2, "POST /orders samples in events/");

    let options = DemoOptions { orders: 5, json: true, events_dir, timeout: Duration::from_secs(60) };
    let result = demo::run(local.runtime.clone(), api, &options).await;
    let counts = local.runtime.stats.snapshot();
    // Every event the demo published (each outbox item, as the relay builds it) matches the
    // schema of its type and version.
    let outbox = local.scan(&local.table("OutboxTable")).await;
    let mut checked = std::collections::BTreeSet::new();
    let s3 = aws_sdk_s3::Client::new(&local.runtime.sdk);
    let mut claim_checked = 0;
    for attrs in outbox {
        let item = outbox::envelope::OutboxItem::from_item(serde_dynamo::Item::from(attrs)).expect("an outbox item");
        let event = item.to_bus_event().expect("a publishable event");
        let mut detail: serde_json::Value = serde_json::from_str(&event.detail).expect("detail is JSON");
        // A claim-checked event carries the reference alone; its schema is checked on the stored payload.
        if let Some(reference) = &item.payload_ref {
            assert!(detail.get("data").is_none() && detail["data_ref"]["key"] == reference.key.as_str(), "{detail}");
            let object = s3.get_object().bucket(&reference.bucket).key(&reference.key).send().await.expect("the payload object");
            let bytes = object.body.collect().await.expect("its body").into_bytes();
            assert_eq!(outbox::claim_check::sha256_hex(&bytes), reference.sha256);
            detail["data"] = serde_json::from_slice(&bytes).expect("the payload is JSON");
            detail.as_object_mut().expect("an object").remove("data_ref");
            claim_checked += 1;
        }
        let errors = common::schema_violations(&item.event_type, u64::from(item.event_version), &detail);
        assert!(errors.is_empty(), "{} v{} published by the demo breaks its schema: {errors:?}\n{detail}", item.event_type, item.event_version);
        checked.insert(item.event_type);
    }
    assert_eq!(
        checked.into_iter().collect::<Vec<_>>(),
        ["InventoryRejected", "InventoryReleased", "InventoryReserved", "OrderCancelled", "OrderCreated", "OrderPaid"],
        "the demo publishes every event type"
    );
    assert_eq!(claim_checked, 1, "the large order, and only it, went by claim check");
    local.shutdown().await;
    let report = result.unwrap_or_else(|e| panic!("the demo did not complete: {e}\nstats: {counts:?}"));

    let shown = format!("{report:#?}");
    assert_eq!(report.orders_committed, samples + 5 + 1, "{shown}");
    assert_eq!(report.events_consumed, report.orders_committed, "{shown}");
    assert_eq!(report.reservations + report.rejections, report.events_consumed, "{shown}");
    assert_eq!(report.rejections, 1, "the over-stock order is rejected: {shown}");
    assert_eq!(report.duplicates_absorbed, 1, "{shown}");
    assert_eq!(report.releases, 1, "the cancelled order's stock comes back once: {shown}");
    // The poison event (dead-lettered by the consumer at once); the sequence gap is parked, not
    // dead-lettered.
    assert_eq!(report.dead_lettered, 1, "{shown}");
    assert_eq!(report.lost, 0, "{shown}");
    assert_eq!(report.applied_twice, 0, "{shown}");
    assert_eq!(report.stock_reserved, report.stock_expected, "{shown}");
    assert!(report.stock_expected > 0, "{shown}");
    assert!(report.outbox_items >= 2 * report.orders_committed, "orders' and the consumer's events: {shown}");
    assert!(report.events_published >= report.outbox_items, "{shown}");
    // Counted by the local subscriber server, WebhookDeadLetterQueue and the inbox table.
    assert_eq!(
        (report.webhooks_delivered, report.webhook_retries, report.webhooks_dead_lettered, report.webhooks_received, report.webhooks_rejected),
        (2, 2, 1, 1, 1),
        "{shown}"
    );
    assert_eq!((report.large_events.sent, report.large_events.applied, report.large_events.verified), (1, 1, true), "{shown}");
    assert!(report.large_events.bus_event_bytes.is_some_and(|b| b < 4096), "the bus carried the reference, not 1 MiB: {shown}");
    assert!(report.ok, "{shown}");
}
