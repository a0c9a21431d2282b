//! One trace id from the request to every hop, end to end on the emulator (issue 36): a
//! `POST /orders` carrying a W3C `traceparent` ends with the same trace id
//!
//! * on its outbox item (`traceparent`, a new parent id: the request's own span) and so in the
//!   bus event's `detail.metadata.traceparent`;
//! * in the log lines the inventory consumer (`ReserveInventoryFunction`, the real binary) writes
//!   while it handles the event (the `event` span's `trace_id` beside its `event_id`);
//! * on the consumer's own outbox event (`InventoryRejected` or `InventoryReserved`): the chain is one trace;
//! * in the `traceparent` header of the signed webhook delivery to a subscriber;
//! * and in `outbox trace`'s answer (from the outbox item, and on the consumer's inbox row).
//!
//! The context lives in the event, not in EventBridge's `TraceHeader`: a replayed event keeps it
//! (`replay.rs`, what the consumer writes for it joins the order's trace), and so does one
//! redriven from the relay's failed batches (`relay_outage.rs`, the bus carries the outbox
//! item's `traceparent`).
//!
//! Every check reads the tables, the captured log lines and what the subscriber received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{s, Local, WAIT};
use axum::http::{HeaderMap, StatusCode};
use outbox::envelope::OutboxItem;

/// The caller's trace: W3C's example `traceparent`.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A webhook subscriber that answers 204 and keeps each delivery's (`webhook-id`, `traceparent`).
async fn subscriber() -> (Arc<Mutex<Vec<(String, String)>>>, String) {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let state = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap| {
            let state = state.clone();
            async move {
                let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                state.lock().unwrap().push((header("webhook-id"), header("traceparent")));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (seen, url)
}

/// The trace id of a `traceparent` (its second field).
fn trace_id_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or_default()
}

/// Waits until `check` answers `Some`, at most [`WAIT`].
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> F) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "waited {WAIT:?} for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_requests_traceparent_is_followed_through_the_outbox_the_consumer_its_events_and_the_webhook() {
    // The consumer logs each event at DEBUG ("event handled"; INFO has one line per batch), as
    // an operator sets `ApplicationLogLevel: DEBUG` for the library's lines (`RUST_LOG` directive).
    let mut options = crate::common::fast_options();
    options.environment.entry("ReserveInventoryFunction".into()).or_default().insert("RUST_LOG".into(), "outbox=debug".into());
    let template = outbox_template::Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml");
    let mut local = Local::start_with(template, crate::common::endpoint(), options, None).await;
    local.runtime.stats.capture_logs();
    let (seen, url) = subscriber().await;
    let secret = format!("{}-webhook-traced", local.stack_name);
    aws_sdk_secretsmanager::Client::new(&local.runtime.sdk)
        .create_secret()
        .name(&secret)
        .secret_string(outbox_webhooks::Secret::generate().to_whsec())
        .send()
        .await
        .expect("CreateSecret");
    local.add_webhook_subscriber("traced", &url, &secret).await;
    local.spawn_pipelines();
    let addr = local.serve_http().await;

    let order_id = format!("o-trace-{}", crate::common::short_id());
    let body = serde_json::json!({
        "order_id": order_id, "customer_id": "c-1", "currency": "EUR",
        "lines": [{"sku": "SKU-RED-MUG", "quantity": 1, "unit_price": "12.50"}]
    });
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/orders"))
        .bearer_auth(local.token("alice"))
        .header("traceparent", TRACEPARENT)
        .header("tracestate", "vendor=abc")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /orders");
    assert_eq!(answer.status().as_u16(), 201, "{:?}", answer.text().await);

    // The outbox item: the caller's trace id, a parent id of its own (the request's span).
    let outbox = local.table("OutboxTable");
    let created = local.query_pk(&outbox, &format!("Order#{order_id}")).await;
    let created = OutboxItem::from_item(created[0].clone().into()).expect("an outbox item");
    let stored = created.traceparent.clone().expect("the outbox item has a traceparent");
    assert_eq!(trace_id_of(&stored), TRACE_ID, "{stored}");
    assert_ne!(stored, TRACEPARENT, "the item's parent is the request's span, not the caller's");
    assert_eq!(created.tracestate.as_deref(), Some("vendor=abc"));
    let detail: serde_json::Value = serde_json::from_str(&created.to_bus_event().expect("a bus event").detail).unwrap();
    assert_eq!(detail["metadata"]["traceparent"], stored.as_str());

    // The consumer's own event continues the trace.
    let reservation = eventually("the consumer's InventoryReserved", || {
        let local = &local;
        let pk = format!("Reservation#{order_id}");
        let outbox = outbox.clone();
        async move { local.query_pk(&outbox, &pk).await.into_iter().next() }
    })
    .await;
    let chained = s(&reservation, "traceparent").to_owned();
    // Reserved or rejected (this stack's inventory is empty): either is the consumer's event.
    assert!(s(&reservation, "event_type").starts_with("Inventory"), "{reservation:?}");
    assert_eq!(trace_id_of(&chained), TRACE_ID, "the consumer's event joins the trace: {chained}");
    assert_ne!(chained, stored);

    // The consumer's log lines of the event carry the trace id beside the event id.
    let lines = local.runtime.stats.log_lines("ReserveInventoryFunction");
    let of_event: Vec<&String> = lines.iter().filter(|l| l.contains(&created.event_id)).collect();
    assert!(!of_event.is_empty(), "no log line of event {} in {lines:#?}", created.event_id);
    for line in &of_event {
        assert!(line.contains(&format!("\"trace_id\":\"{TRACE_ID}\"")), "a line of the event without its trace id: {line}");
    }

    // The webhook delivery carries the trace, one hop on.
    let delivered = eventually("the webhook delivery", || {
        let seen = seen.clone();
        let id = created.event_id.clone();
        async move { seen.lock().unwrap().iter().find(|(webhook_id, _)| *webhook_id == id).map(|(_, t)| t.clone()) }
    })
    .await;
    assert_eq!(trace_id_of(&delivered), TRACE_ID, "webhook traceparent {delivered:?}");
    assert_ne!(delivered, stored);

    // `outbox trace` names the trace: from the outbox item, and on the consumer's inbox row.
    let resources = outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("resources");
    let trace = outbox_cli::trace::trace(&local.runtime.sdk, &resources, &created.event_id, &outbox_cli::trace::Lookup::Index).await.expect("trace");
    assert_eq!(trace.trace_id.as_deref(), Some(TRACE_ID), "{}", trace.render());
    assert!(trace.render().contains(TRACE_ID), "{}", trace.render());
    let consumer = trace.consumers.iter().find(|c| c.function == "ReserveInventoryFunction").expect("the inventory consumer's row");
    assert_eq!(consumer.trace_id.as_deref(), Some(TRACE_ID), "{}", trace.render());
    eprintln!(
        "trace {TRACE_ID} followed: request traceparent {TRACEPARENT}\n  outbox item {stored}\n  consumer's log line {}\n  consumer's own event {chained}\n  webhook traceparent {delivered}\n{}",
        of_event[0],
        trace.render()
    );
    local.shutdown().await;
}
