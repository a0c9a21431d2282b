//! Partner webhooks in (`orders_app::partner`) on the emulator's tables: a signed payment
//! confirmation moves the order to PAID and writes `OrderPaid` in one transaction; a replay and
//! racing duplicates take effect once; stale, forged, unsigned, oversized, malformed webhooks and
//! unknown partners are refused and write nothing.

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{s, Local};
use axum::http::HeaderMap;
use orders_app::orders::{Answer, CreateOrderRequest, OrdersApi};
use orders_app::partner::{Accepted, PartnerWebhooks, Partners, CONSUMER, STATUS_PAID};
use outbox::inbox::Inbox;
use outbox::OutboxWriter;
use outbox_lambda::{Env, DEFAULT_RETENTION};
use outbox_webhooks::Secret;
use serde_json::json;

struct Fixture {
    local: Local,
    orders: OrdersApi,
    webhooks: Arc<PartnerWebhooks>,
    old: Secret,
    new: Secret,
}

impl Fixture {
    async fn start() -> Self {
        let local = Local::start().await;
        let env = local.env_of("CreateOrderFunction");
        let orders = OrdersApi::from_env(&local.runtime.sdk, &Env::from_map(env.clone())).expect("the order API's settings");
        let (old, new) = (Secret::generate(), Secret::generate());
        // The partner is rotating: both secrets are current.
        let partners = Partners::Fixed(HashMap::from([("acme".to_owned(), vec![new.clone(), old.clone()])]));
        let inbox = Inbox::new(local.dynamodb.clone(), local.table("ConsumerKit/InboxTable"), CONSUMER, DEFAULT_RETENTION);
        let webhooks = PartnerWebhooks::new(
            local.dynamodb.clone(),
            env["ORDERS_TABLE"].clone(),
            OutboxWriter::new(env["OUTBOX_TABLE"].clone(), DEFAULT_RETENTION),
            inbox,
            partners,
            "example.orders",
        );
        Self { local, orders, webhooks: Arc::new(webhooks), old, new }
    }

    async fn order(&self, order_id: &str) {
        let request: CreateOrderRequest = serde_json::from_value(json!({
            "order_id": order_id, "customer_id": "c-1", "currency": "EUR",
            "lines": [{"sku": "SKU-1", "quantity": 1, "unit_price": "12.50"}]
        }))
        .expect("a create request");
        let owner = orders_app::auth::Caller { subject: Some("alice".into()), admin: false };
        let answer = self.orders.create_order(request, &owner, None, "corr-test", None).await.expect("the order is created");
        assert!(matches!(answer, Answer::Done(_)));
    }

    /// `(status, version)` of the order.
    async fn state(&self, order_id: &str) -> (String, String) {
        let items = self.local.query_pk(&self.local.table("OrdersTable"), &format!("ORDER#{order_id}")).await;
        let item = &items[0];
        (s(item, "status").to_owned(), item.get("version").and_then(|v| v.as_n().ok()).cloned().unwrap_or_default())
    }

    /// `OrderPaid` outbox items of the order.
    async fn order_paid_events(&self, order_id: &str) -> usize {
        let outbox = self.local.scan(&self.local.table("OutboxTable")).await;
        outbox.iter().filter(|i| s(i, "event_type") == "OrderPaid" && s(i, "aggregate_id") == order_id).count()
    }

    async fn inbox_rows(&self, webhook_id: &str) -> usize {
        self.local.query_pk(&self.local.table("ConsumerKit/InboxTable"), &format!("{CONSUMER}#acme#{webhook_id}")).await.len()
    }
}

fn body(order_id: &str) -> String {
    json!({"type": "payment.succeeded", "data": {"order_id": order_id, "payment_id": "pay-1", "amount": "12.50", "currency": "EUR"}}).to_string()
}

fn signed(secrets: &[Secret], id: &str, timestamp: i64, body: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
    headers.insert("webhook-signature", outbox_webhooks::signature_header(secrets, id, timestamp, body.as_bytes()).parse().unwrap());
    headers
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_payment_takes_effect_once_and_replays_are_absorbed() {
    let f = Fixture::start().await;
    f.order("o-paid").await;
    let text = body("o-paid");
    // Signed with the old secret only: still current during the rotation.
    let headers = signed(std::slice::from_ref(&f.old), "wh-1", now(), &text);
    let first = f.webhooks.receive("acme", &headers, text.as_bytes(), "corr-1").await.expect("accepted");
    assert_eq!((first.duplicate, first.status.as_deref()), (false, Some(STATUS_PAID)));
    assert_eq!(f.state("o-paid").await, (STATUS_PAID.to_owned(), "2".to_owned()));
    // The same webhook again (the partner's retry, or a replay within the window).
    let again = f.webhooks.receive("acme", &headers, text.as_bytes(), "corr-2").await.expect("accepted");
    assert_eq!(again, Accepted { webhook_id: "wh-1".into(), duplicate: true, status: None, event_id: None });
    // Redelivered later with a fresh timestamp, signed with the new secret: still the same webhook.
    let later = signed(std::slice::from_ref(&f.new), "wh-1", now() + 60, &text);
    assert!(f.webhooks.receive("acme", &later, text.as_bytes(), "corr-3").await.expect("accepted").duplicate);
    assert_eq!(f.state("o-paid").await, (STATUS_PAID.to_owned(), "2".to_owned()), "one effect");
    assert_eq!(f.order_paid_events("o-paid").await, 1, "one OrderPaid event");
    // The event matches its published schema.
    for attrs in f.local.scan(&f.local.table("OutboxTable")).await.into_iter().filter(|i| s(i, "event_type") == "OrderPaid") {
        let item = outbox::envelope::OutboxItem::from_item(serde_dynamo::Item::from(attrs)).expect("an outbox item");
        let detail: serde_json::Value = serde_json::from_str(&item.to_bus_event().expect("publishable").detail).expect("JSON");
        assert_eq!(crate::common::schema_violations("OrderPaid", 1, &detail), Vec::<String>::new(), "{detail}");
    }
    assert_eq!(f.inbox_rows("wh-1").await, 1);
    // Another order paid by a webhook carrying the partner's W3C traceparent: its event joins the
    // partner's trace (the same trace id, a parent id of our own).
    f.order("o-traced").await;
    let traced = body("o-traced");
    let mut headers = signed(std::slice::from_ref(&f.new), "wh-t", now(), &traced);
    headers.insert("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap());
    f.webhooks.receive("acme", &headers, traced.as_bytes(), "corr-t").await.expect("accepted");
    let paid = f.local.scan(&f.local.table("OutboxTable")).await;
    let paid = paid.iter().find(|i| s(i, "event_type") == "OrderPaid" && s(i, "aggregate_id") == "o-traced").expect("its OrderPaid");
    let traceparent = s(paid, "traceparent");
    assert!(traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && !traceparent.contains("00f067aa0ba902b7"), "{traceparent}");
    // Another webhook for an order already paid: refused as a conflict, nothing written.
    let other = signed(std::slice::from_ref(&f.new), "wh-2", now(), &text);
    let refused = f.webhooks.receive("acme", &other, text.as_bytes(), "corr-4").await.unwrap_err();
    assert_eq!(refused.status, 409);
    assert_eq!((f.order_paid_events("o-paid").await, f.inbox_rows("wh-2").await), (1, 0));
    f.local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_duplicates_take_effect_once() {
    let f = Fixture::start().await;
    f.order("o-race").await;
    let text = body("o-race");
    let headers = signed(std::slice::from_ref(&f.new), "wh-race", now(), &text);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (webhooks, headers, text) = (f.webhooks.clone(), headers.clone(), text.clone());
        tasks.push(tokio::spawn(async move { webhooks.receive("acme", &headers, text.as_bytes(), &format!("corr-{i}")).await }));
    }
    let mut applied = 0;
    for task in tasks {
        match task.await.expect("the task ran") {
            Ok(accepted) if !accepted.duplicate => applied += 1,
            Ok(_) => {}
            // A loser that read the order before the winner committed and lost on the version:
            // refused, nothing written (the partner's retry then finds the claim).
            Err(problem) => assert!([409, 503].contains(&problem.status), "{problem:?}"),
        }
    }
    assert_eq!(applied, 1);
    assert_eq!(f.state("o-race").await, (STATUS_PAID.to_owned(), "2".to_owned()));
    assert_eq!(f.order_paid_events("o-race").await, 1);
    assert_eq!(f.inbox_rows("wh-race").await, 1);
    f.local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_webhooks_name_the_reason_and_write_nothing() {
    let f = Fixture::start().await;
    f.order("o-safe").await;
    let text = body("o-safe");
    let current = [f.new.clone()];
    let cases: Vec<(&str, HeaderMap, String, u16, Option<&str>)> = vec![
        ("unknown partner", signed(&current, "wh-a", now(), &text), "nobody".into(), 404, None),
        ("stale", signed(&current, "wh-b", now() - 400, &text), "acme".into(), 401, Some("webhook-timestamp")),
        ("future", signed(&current, "wh-c", now() + 400, &text), "acme".into(), 401, Some("webhook-timestamp")),
        ("forged", signed(&[Secret::generate()], "wh-d", now(), &text), "acme".into(), 401, Some("webhook-signature")),
        ("unsigned", HeaderMap::new(), "acme".into(), 401, Some("webhook-id")),
    ];
    for (what, headers, partner, status, field) in cases {
        let problem = f.webhooks.receive(&partner, &headers, text.as_bytes(), "corr").await.unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (status, field), "{what}: {problem:?}");
    }
    // A body signed for another body (tampered in transit).
    let mut tampered = signed(&current, "wh-e", now(), &text);
    tampered.remove("webhook-signature");
    tampered.insert("webhook-signature", outbox_webhooks::signature_header(&current, "wh-e", now(), b"{}").parse().unwrap());
    let problem = f.webhooks.receive("acme", &tampered, text.as_bytes(), "corr").await.unwrap_err();
    assert_eq!((problem.status, problem.field.as_deref()), (401, Some("webhook-signature")));
    // Oversized, before any signature work.
    let big = "x".repeat(orders_app::partner::MAX_WEBHOOK_BODY_BYTES + 1);
    let problem = f.webhooks.receive("acme", &signed(&current, "wh-f", now(), &big), big.as_bytes(), "corr").await.unwrap_err();
    assert_eq!((problem.status, problem.field.as_deref()), (413, Some("body")));
    // Correctly signed but malformed: 400 naming the field.
    let malformed = json!({"type": "payment.succeeded", "data": {"payment_id": "p", "amount": "1", "currency": "EUR"}}).to_string();
    let problem = f.webhooks.receive("acme", &signed(&current, "wh-g", now(), &malformed), malformed.as_bytes(), "corr").await.unwrap_err();
    assert_eq!((problem.status, problem.field.as_deref()), (400, Some("data.order_id")));
    let unknown_order = body("o-nowhere");
    let problem = f.webhooks.receive("acme", &signed(&current, "wh-h", now(), &unknown_order), unknown_order.as_bytes(), "corr").await.unwrap_err();
    assert_eq!((problem.status, problem.field.as_deref()), (422, Some("data.order_id")));
    // Nothing was written by any of them.
    assert_eq!(f.state("o-safe").await, ("CREATED".to_owned(), "1".to_owned()));
    assert_eq!(f.order_paid_events("o-safe").await, 0);
    for id in ["wh-a", "wh-b", "wh-c", "wh-d", "wh-e", "wh-f", "wh-g", "wh-h"] {
        assert_eq!(f.inbox_rows(id).await, 0, "{id}");
    }
    f.local.shutdown().await;
}
