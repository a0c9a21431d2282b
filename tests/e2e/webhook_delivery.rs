//! The webhook delivery promise on the local runtime, end to end (outbox → relay → bus →
//! `WebhookDeliveryRule` → `WebhookDeliveryQueue` → the real `WebhookDispatcherFunction` binary
//! through the local SQS mapping → a local subscriber), with time compressed by configuration
//! (`local/env.json`: the retry schedule `1,1,1,2,5,10,10` seconds plays Svix's day, each second
//! about an hour of the long delays; the circuit's cool-down 2 s):
//!
//! * a subscriber down for the equivalent of a day while events keep coming gets every event
//!   exactly once per `webhook-id` afterwards, none dead-lettered;
//! * a healthy subscriber sharing batches with a black-holed one gets its deliveries without
//!   waiting for the black-holed time-outs (figures printed: its delivery delay alone and beside
//!   the black hole);
//! * a subscriber failing every attempt is disabled (a `WebhookEndpointDisabled` event on the
//!   bus); re-enabled and recovered, it gets exactly what it missed, once.
//!
//! Every check is read from what the subscriber received and from the queues and tables.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::Local;
use aws_sdk_dynamodb::types::AttributeValue;
use axum::http::{HeaderMap, StatusCode};
use outbox::{Event, OutboxWriter};
use outbox_cli::dlq;
use outbox_template::Template;
use outbox_webhooks::Secret;

const DISPATCHER: &str = "Webhooks/WebhookDispatcherFunction";

/// A subscriber endpoint: answers 204 while up, 503 while down; records every request.
#[derive(Clone, Default)]
struct Endpoint {
    down: Arc<AtomicBool>,
    /// (webhook-id, status answered, when).
    seen: Arc<Mutex<Vec<(String, u16, Instant)>>>,
}

impl Endpoint {
    async fn start() -> (Self, String) {
        let endpoint = Endpoint::default();
        let state = endpoint.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap| {
                let state = state.clone();
                async move {
                    let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                    let status = if state.down.load(Ordering::SeqCst) { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::NO_CONTENT };
                    state.seen.lock().unwrap().push((id, status.as_u16(), Instant::now()));
                    status
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, url)
    }

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Per webhook-id, the number of 2xx answers.
    fn delivered(&self) -> BTreeMap<String, usize> {
        let mut by_id = BTreeMap::new();
        for (id, status, _) in self.seen.lock().unwrap().iter() {
            if *status < 300 {
                *by_id.entry(id.clone()).or_default() += 1;
            }
        }
        by_id
    }

    /// When `id` was first answered 2xx.
    fn delivered_at(&self, id: &str) -> Option<Instant> {
        self.seen.lock().unwrap().iter().find(|(i, s, _)| i == id && *s < 300).map(|(_, _, at)| *at)
    }
}

/// An endpoint that accepts connections and never answers.
async fn black_hole() -> String {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
            });
        }
    });
    url
}

/// A stack with the local settings plus `settings` for the dispatcher, its pipelines running.
async fn start(settings: &[(&str, &str)]) -> Local {
    let template = Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml");
    let mut options = crate::common::fast_options();
    let env = options.environment.entry(DISPATCHER.into()).or_default();
    for (k, v) in settings {
        env.insert((*k).into(), (*v).into());
    }
    let mut local = Local::start_with(template, crate::common::endpoint(), options, None).await;
    local.spawn_pipelines();
    local
}

/// A secret `<stack>-webhook-<name>` and a subscriber `id` of `OrderPaid` events at `url`.
async fn subscribe(local: &Local, id: &str, url: &str) {
    let secret_name = format!("{}-webhook-{id}", local.stack_name);
    aws_sdk_secretsmanager::Client::new(&local.runtime.sdk)
        .create_secret()
        .name(&secret_name)
        .secret_string(Secret::generate().to_whsec())
        .send()
        .await
        .expect("CreateSecret");
    local
        .dynamodb
        .put_item()
        .table_name(local.env_of(DISPATCHER)["WEBHOOK_SUBSCRIBERS_TABLE"].clone())
        .item("id", AttributeValue::S(id.into()))
        .item("url", AttributeValue::S(url.into()))
        .item("event_types", AttributeValue::L(vec![AttributeValue::S("OrderPaid".into())]))
        .item("secret_id", AttributeValue::S(secret_name))
        .item("enabled", AttributeValue::Bool(true))
        .send()
        .await
        .expect("PutItem subscriber");
}

/// Commits `n` `OrderPaid` events to the outbox in one transaction (the relay publishes them);
/// their ids.
async fn emit(local: &Local, n: usize) -> Vec<String> {
    let writer = OutboxWriter::new(local.table("OutboxTable"), Duration::from_secs(3600));
    let mut tx = writer.transaction();
    for _ in 0..n {
        let order = format!("o-{}", crate::common::short_id());
        let event =
            Event::new("OrderPaid", "example.orders", ("Order", order.as_str()), 2, &serde_json::json!({"order_id": order, "payment_id": "p-1"}))
                .expect("an event");
        tx.emit(event).expect("publishable");
    }
    tx.execute(&local.dynamodb).await.expect("the outbox transaction commits").into_iter().map(|i| i.event_id).collect()
}

/// Waits until every id in `ids` was answered 2xx, at most `limit`.
async fn wait_delivered(endpoint: &Endpoint, ids: &[String], limit: Duration, what: &str) {
    let started = Instant::now();
    loop {
        let delivered = endpoint.delivered();
        if ids.iter().all(|id| delivered.contains_key(id)) {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {} of {} delivered after {limit:?}",
            ids.iter().filter(|i| delivered.contains_key(*i)).count(),
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn webhook_dlq_depth(local: &Local) -> u64 {
    let dead = local.runtime.stack.queue("Webhooks/WebhookDeadLetterQueue").cloned().expect("the webhook DLQ");
    dlq::depth(&local.sqs, &dead).await.expect("depth")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_down_for_a_compressed_day_gets_every_event_exactly_once() {
    let local = start(&[]).await;
    let (endpoint, url) = Endpoint::start().await;
    subscribe(&local, "partner", &url).await;
    endpoint.set_down(true);
    // Events keep coming while it is down: one every 2 s for 24 s (a day, compressed).
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.extend(emit(&local, 1).await);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let failures_while_down = endpoint.seen.lock().unwrap().len();
    endpoint.set_down(false);
    wait_delivered(&endpoint, &ids, Duration::from_secs(120), "after the outage").await;
    // Late duplicates would come within a retry interval or two.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let delivered = endpoint.delivered();
    let twice: Vec<_> = delivered.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "each webhook-id answered 2xx exactly once: {twice:?}");
    assert_eq!(delivered.len(), ids.len(), "every event delivered");
    assert_eq!(webhook_dlq_depth(&local).await, 0, "none dead-lettered");
    println!(
        "down 24 s (a compressed day): {} events, {failures_while_down} requests failed while down, every event delivered once afterwards",
        ids.len()
    );
    local.shutdown().await;
}

/// Delivery delay: from the commit of each event to its 2xx at the subscriber; (p50, max) in ms.
fn delays(endpoint: &Endpoint, committed: &[(String, Instant)]) -> (u128, u128) {
    let mut ms: Vec<u128> = committed.iter().map(|(id, at)| endpoint.delivered_at(id).expect("delivered").duration_since(*at).as_millis()).collect();
    ms.sort();
    (ms[ms.len() / 2], ms[ms.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_subscriber_does_not_delay_a_healthy_one_sharing_its_batches() {
    let local = start(&[]).await;
    let (healthy, url) = Endpoint::start().await;
    subscribe(&local, "healthy", &url).await;
    // Alone.
    let at = Instant::now();
    let alone: Vec<(String, Instant)> = emit(&local, 10).await.into_iter().map(|id| (id, at)).collect();
    let ids: Vec<String> = alone.iter().map(|(id, _)| id.clone()).collect();
    wait_delivered(&healthy, &ids, Duration::from_secs(60), "alone").await;
    // Beside a black-holed subscriber (requests time out after WEBHOOK_TIMEOUT_MS, 10 s).
    subscribe(&local, "black-hole", &black_hole().await).await;
    // The dispatcher's subscriber cache (5 s locally) sees it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let at = Instant::now();
    let mixed: Vec<(String, Instant)> = emit(&local, 10).await.into_iter().map(|id| (id, at)).collect();
    let ids: Vec<String> = mixed.iter().map(|(id, _)| id.clone()).collect();
    // Long enough for a dispatcher that waits for each time-out in turn (to measure it).
    wait_delivered(&healthy, &ids, Duration::from_secs(400), "beside the black hole").await;
    let (alone, mixed) = (delays(&healthy, &alone), delays(&healthy, &mixed));
    println!(
        "healthy subscriber's delivery delay (commit → 2xx): alone p50 {} ms, max {} ms; beside a black-holed subscriber p50 {} ms, max {} ms",
        alone.0, alone.1, mixed.0, mixed.1
    );
    // No healthy delivery waited for a black-holed request's time-out (10 s).
    assert!(mixed.1 < 10_000, "a healthy delivery waited for the black hole: {mixed:?} (alone {alone:?})");
    assert_eq!(healthy.delivered().values().filter(|n| **n != 1).count(), 0, "each once");
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_disabled_endpoint_re_enabled_and_recovered_gets_exactly_what_it_missed() {
    let local = start(&[("WEBHOOK_DISABLE_AFTER_SECONDS", "4")]).await;
    let bus = local.runtime.stack.buses[0].name.clone();
    let spy = local.spy_on_bus(&bus, "outbox.webhooks").await;
    let (endpoint, url) = Endpoint::start().await;
    subscribe(&local, "fading", &url).await;
    let before = emit(&local, 1).await;
    wait_delivered(&endpoint, &before, Duration::from_secs(60), "before the outage").await;

    // Down: every attempt fails; after 4 s of that the subscriber is disabled.
    endpoint.set_down(true);
    let mut missed = emit(&local, 2).await;
    let table = local.env_of(DISPATCHER)["WEBHOOK_SUBSCRIBERS_TABLE"].clone();
    let started = Instant::now();
    loop {
        let item = local.dynamodb.get_item().table_name(&table).key("id", AttributeValue::S("fading".into())).send().await.unwrap().item.unwrap();
        if item.get("enabled") == Some(&AttributeValue::Bool(false)) {
            assert!(item.contains_key("disabled_failing_since"), "{item:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "not disabled: {item:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The event on the bus.
    let mut announced = Vec::new();
    let started = Instant::now();
    while announced.is_empty() && started.elapsed() < Duration::from_secs(30) {
        let out = local.sqs.receive_message().queue_url(&spy).wait_time_seconds(1).send().await.expect("ReceiveMessage spy");
        announced.extend(out.messages.unwrap_or_default().into_iter().filter_map(|m| m.body));
    }
    assert_eq!(announced.len(), 1, "one WebhookEndpointDisabled event: {announced:?}");
    let event: serde_json::Value = serde_json::from_str(&announced[0]).unwrap();
    assert_eq!((event["detail-type"].as_str(), event["detail"]["subscriber"].as_str()), (Some("WebhookEndpointDisabled"), Some("fading")));

    // While disabled, more events (the fan-out skips it).
    missed.extend(emit(&local, 2).await);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Back up; one operator command: enable, recover.
    endpoint.set_down(false);
    let operator = outbox_cli::webhooks::Operator::new(
        &local.runtime.sdk,
        outbox_cli::webhooks::WebhookStack::of(&outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("resources")).unwrap(),
    );
    let since = operator.enable("fading").await.expect("enable").expect("it has a failing-since");
    let recovery = operator.recover("fading", since, outbox_cli::webhooks::Bound::whole()).await.expect("recover");
    // The events it missed are sent, or already being delivered by a retry that came back once
    // it was enabled; the one it acknowledged before is skipped.
    assert_eq!(recovery.events, missed.len() + 1, "{recovery:?}");
    assert!(recovery.acknowledged >= 1 && recovery.sent + recovery.in_flight + recovery.acknowledged == missed.len() + 1, "{recovery:?}");
    wait_delivered(&endpoint, &missed, Duration::from_secs(60), "after the recovery").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let delivered = endpoint.delivered();
    assert_eq!(delivered.get(&before[0]), Some(&1), "what it had is not sent again");
    for id in &missed {
        assert_eq!(delivered.get(id), Some(&1), "{id}: exactly once");
    }
    assert_eq!(delivered.len(), missed.len() + 1, "nothing else");

    // Its attempts are recorded: the failed ones, then the 2xx.
    let attempts = operator.attempts("fading", &missed[0]).await.expect("attempts");
    assert!(attempts.iter().any(|a| a.status == 503) && attempts.last().map(|a| a.status) == Some(204), "{attempts:?}");
    local.shutdown().await;
}
