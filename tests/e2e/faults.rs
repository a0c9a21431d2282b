//! Fault injection ([`outbox_local::faults`]) against the emulator: each fault answers what AWS
//! answers, only where and as often as the plan says, and what the plan says took effect did
//! (read back from the tables and the stream); the local HTTP API answers slow and half-closed
//! clients.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::Local;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use outbox_cli::aws::{sdk_config, Target};
use outbox_local::faults::{Attached, Fault, FaultKind, FaultPlan, Injector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An injector for `faults` in front of the test emulator, and clients of one "instance"
/// (function `Probe`) behind it; the counter is how often the instance was killed.
struct Clients {
    dynamodb: aws_sdk_dynamodb::Client,
    events: aws_sdk_eventbridge::Client,
}

async fn behind(faults: Vec<Fault>) -> (Arc<Injector>, Attached, Clients, Arc<AtomicUsize>) {
    let injector = Injector::new(FaultPlan { seed: 1, faults, ..FaultPlan::default() }, crate::common::endpoint());
    let killed = Arc::new(AtomicUsize::new(0));
    let k = killed.clone();
    let attached = injector
        .attach(
            "Probe",
            Box::new(move || {
                k.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .await
        .expect("a proxy port");
    let sdk = sdk_config(&Target { endpoint: Some(attached.endpoint.clone()), region: "us-east-1".into() }).await;
    let clients = Clients { dynamodb: aws_sdk_dynamodb::Client::new(&sdk), events: aws_sdk_eventbridge::Client::new(&sdk) };
    (injector, attached, clients, killed)
}

fn fault(kind: FaultKind, op: &str, code: Option<&str>) -> Fault {
    let mut f = Fault::new(kind, op);
    f.code = code.map(str::to_owned);
    f
}

fn put(table: &str, pk: &str) -> TransactWriteItem {
    let put = Put::builder()
        .table_name(table)
        .item("pk", AttributeValue::S(pk.into()))
        .item("sk", AttributeValue::S("1".into()))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .expect("table, item and condition are set");
    TransactWriteItem::builder().put(put).build()
}

async fn exists(local: &Local, table: &str, pk: &str) -> bool {
    !local.query_pk(table, pk).await.is_empty()
}

#[tokio::test]
async fn a_transaction_conflict_cancels_with_its_reason_and_writes_nothing() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let (injector, _proxy, sdk, _) = behind(vec![fault(FaultKind::Error, "dynamodb:TransactWriteItems", Some("TransactionConflict"))]).await;
    let dynamodb = sdk.dynamodb.clone();
    let err = dynamodb.transact_write_items().transact_items(put(&table, "conflict-a")).transact_items(put(&table, "conflict-b")).send().await;
    let err = err.expect_err("the transaction is cancelled").into_service_error();
    let aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(cancelled) = err else {
        panic!("not a cancellation: {err:?}")
    };
    let codes: Vec<&str> = cancelled.cancellation_reasons().iter().filter_map(|r| r.code()).collect();
    assert_eq!(codes, ["TransactionConflict", "None"]);
    assert!(!exists(&local, &table, "conflict-a").await && !exists(&local, &table, "conflict-b").await, "nothing was written");
    assert_eq!(injector.injected()[0].count, 1, "not retried by the SDK");
}

#[tokio::test]
async fn throttling_within_the_sdks_retries_is_absorbed_and_counted() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let mut throttle = fault(FaultKind::Error, "dynamodb:TransactWriteItems", Some("ThrottlingException"));
    throttle.limit = Some(2);
    let (injector, _proxy, sdk, _) = behind(vec![throttle]).await;
    let dynamodb = sdk.dynamodb.clone();
    dynamodb.transact_write_items().transact_items(put(&table, "throttled")).send().await.expect("the third attempt commits");
    assert!(exists(&local, &table, "throttled").await);
    assert_eq!(injector.injected()[0].count, 2);
}

#[tokio::test]
async fn an_outage_window_fails_every_call_inside_it_only() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let mut outage = fault(FaultKind::Error, "dynamodb:*", Some("ServiceUnavailable"));
    outage.until_s = Some(3600.0);
    let (injector, _proxy, sdk, _) = behind(vec![outage]).await;
    let dynamodb = sdk.dynamodb.clone();
    let err = dynamodb.transact_write_items().transact_items(put(&table, "in-outage")).send().await.expect_err("inside the outage");
    assert_eq!(err.raw_response().map(|r| r.status().as_u16()), Some(503));
    assert_eq!(injector.injected()[0].count, 3, "every SDK attempt failed");
    assert!(!exists(&local, &table, "in-outage").await);
    // Events are not DynamoDB: untouched.
    let events = sdk.events.clone();
    events.list_event_buses().send().await.expect("EventBridge is not in the outage");
}

#[tokio::test]
async fn put_events_fails_some_entries_and_publishes_the_others() {
    let local = Local::start().await;
    let bus = local.runtime.stack.buses[0].name.clone();
    let mut entries = fault(FaultKind::PutEventsEntries, "events:PutEvents", Some("InternalFailure"));
    entries.rate = 0.5;
    let (injector, _proxy, sdk, _) = behind(vec![entries]).await;
    let events = sdk.events.clone();
    let mut request = events.put_events();
    for i in 0..8 {
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&bus)
            .source("test.faults")
            .detail_type("Probe")
            .detail(format!("{{\"i\":{i}}}"))
            .build();
        request = request.entries(entry);
    }
    let out = request.send().await.expect("PutEvents answers 200");
    let injected = injector.injected()[0].count;
    assert_eq!(out.entries().len(), 8, "one result per entry, in order");
    assert_eq!(out.failed_entry_count() as u64, injected);
    let failed = out.entries().iter().filter(|e| e.error_code() == Some("InternalFailure")).count() as u64;
    let published = out.entries().iter().filter(|e| e.event_id().is_some()).count() as u64;
    assert_eq!((failed, published), (injected, 8 - injected));
}

#[tokio::test]
async fn a_lost_answer_took_effect_and_a_retry_with_the_same_token_is_idempotent() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let mut lose = fault(FaultKind::LostAnswer, "dynamodb:TransactWriteItems", None);
    lose.limit = Some(1);
    let (injector, _proxy, sdk, _) = behind(vec![lose]).await;
    let dynamodb = sdk.dynamodb.clone();
    // The SDK fills in a ClientRequestToken (an idempotency token) and retries the lost answer
    // with it: the proxy answers the retry as DynamoDB does, with the first commit's success.
    dynamodb.transact_write_items().transact_items(put(&table, "lost-1")).send().await.expect("the retry is answered as the first commit");
    assert!(exists(&local, &table, "lost-1").await, "the first attempt committed");
    // With a token the retry is answered as the first commit.
    let mut lose = fault(FaultKind::LostAnswer, "dynamodb:TransactWriteItems", None);
    lose.limit = Some(1);
    let (injector2, _proxy2, sdk2, _) = behind(vec![lose]).await;
    let dynamodb = sdk2.dynamodb.clone();
    dynamodb
        .transact_write_items()
        .transact_items(put(&table, "lost-2"))
        .client_request_token("token-lost-2")
        .send()
        .await
        .expect("the retry with the same token succeeds");
    assert!(exists(&local, &table, "lost-2").await);
    let other = dynamodb.transact_write_items().transact_items(put(&table, "lost-3")).client_request_token("token-lost-2").send().await;
    assert!(format!("{:?}", other.expect_err("another request with the token")).contains("IdempotentParameterMismatch"));
    assert_eq!((injector.injected()[0].count, injector2.injected()[0].count), (1, 1));
}

#[tokio::test]
async fn a_crash_kills_the_instance_after_its_kth_call_took_effect() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let mut crash = fault(FaultKind::Crash, "dynamodb:TransactWriteItems", None);
    crash.after_calls = Some(2);
    crash.limit = Some(1);
    let (injector, _proxy, sdk, killed) = behind(vec![crash]).await;
    let dynamodb = sdk.dynamodb.clone();
    dynamodb.transact_write_items().transact_items(put(&table, "before-crash")).send().await.expect("the first call is not hit");
    assert_eq!(killed.load(Ordering::SeqCst), 0);
    let _ = dynamodb.transact_write_items().transact_items(put(&table, "at-crash")).send().await;
    assert_eq!(killed.load(Ordering::SeqCst), 1, "the instance was killed once");
    assert!(exists(&local, &table, "at-crash").await, "its call took effect first: half done");
    assert_eq!(injector.injected()[0].count, 1);
}

#[tokio::test]
async fn ttl_deletes_expired_items_with_service_remove_records_on_the_stream() {
    let local = Local::start().await;
    let spec = local.runtime.stack.table("OutboxTable").expect("the outbox table").clone();
    let now = chrono::Utc::now().timestamp();
    for (pk, expires) in [("expired", now - 10), ("alive", now + 3600)] {
        local
            .dynamodb
            .put_item()
            .table_name(&spec.name)
            .item("pk", AttributeValue::S(pk.into()))
            .item("sk", AttributeValue::S("1".into()))
            .item("expires_at", AttributeValue::N(expires.to_string()))
            .send()
            .await
            .expect("PutItem");
    }
    let deleted = outbox_local::faults::ttl::delete_expired(&local.dynamodb, &spec, "expires_at", now).await.expect("a sweep");
    assert_eq!(deleted, 1);
    assert!(!exists(&local, &spec.name, "expired").await && exists(&local, &spec.name, "alive").await);
    local
        .dynamodb
        .delete_item()
        .table_name(&spec.name)
        .key("pk", AttributeValue::S("alive".into()))
        .key("sk", AttributeValue::S("1".into()))
        .send()
        .await
        .expect("a user's DeleteItem");
    let streams = aws_sdk_dynamodbstreams::Client::new(&local.runtime.sdk);
    let arn = local.runtime.stack.stream_arns["OutboxTable"].clone();
    let description = streams.describe_stream().stream_arn(&arn).send().await.expect("DescribeStream");
    let shard = description.stream_description().and_then(|d| d.shards().first()).and_then(|s| s.shard_id()).expect("a shard").to_owned();
    let iterator = streams.get_shard_iterator().stream_arn(&arn).shard_id(shard).shard_iterator_type(ShardIteratorType::TrimHorizon).send().await;
    let records =
        streams.get_records().shard_iterator(iterator.expect("an iterator").shard_iterator.expect("an iterator")).send().await.expect("GetRecords");
    let removes: Vec<_> = records.records().iter().filter(|r| r.event_name().map(|n| n.as_str()) == Some("REMOVE")).collect();
    assert_eq!(removes.len(), 2, "{removes:?}");
    let by_ttl = removes[0].user_identity().expect("the TTL deletion is marked");
    assert_eq!((by_ttl.r#type(), by_ttl.principal_id()), (Some("Service"), Some("dynamodb.amazonaws.com")));
    assert!(removes[1].user_identity().is_none(), "a user's deletion is not");
}

/// Sends `head` (and `body`) raw, then reads the whole answer (bounded by `WAIT`).
async fn raw(addr: SocketAddr, head: &str, body: &str, half_close: bool) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
    stream.write_all(head.as_bytes()).await.expect("writes");
    stream.write_all(body.as_bytes()).await.expect("writes");
    if half_close {
        stream.shutdown().await.expect("half-closes");
    }
    let mut answer = Vec::new();
    tokio::time::timeout(crate::common::WAIT, stream.read_to_end(&mut answer)).await.expect("an answer, not a hang").expect("reads");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn the_http_api_answers_a_short_body_with_408_and_a_half_closed_client_with_its_answer() {
    let local = Local::start().await;
    let limits = outbox_local::runtime::http_api::Limits { body_timeout: Duration::from_millis(500) };
    let (addr, _server) =
        outbox_local::runtime::http_api::serve_with(&local.runtime, SocketAddr::from(([127, 0, 0, 1], 0)), local.shutdown_signal(), limits)
            .await
            .expect("binds");
    let token = local.token("alice");
    let short =
        format!("POST /orders HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n");
    let short = raw(addr, &short, "{\"customer", false).await;
    assert!(short.starts_with("HTTP/1.1 408"), "{short}");
    assert!(short.contains("Request Timeout"), "{short}");
    let order = r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"SKU-RED-MUG","quantity":1,"unit_price":"12.50"}]}"#;
    let head =
        format!("POST /orders HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", order.len());
    let answer = raw(addr, &head, order, true).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let order_id = serde_json::from_str::<serde_json::Value>(body).ok().and_then(|v| v["order_id"].as_str().map(str::to_owned)).unwrap_or_default();
    let orders = local.env_of("CreateOrderFunction")["ORDERS_TABLE"].clone();
    assert!(!order_id.is_empty() && exists_any(&local, &orders, &order_id).await, "the order is committed: {answer}");
}

async fn exists_any(local: &Local, table: &str, order_id: &str) -> bool {
    local.scan(table).await.iter().any(|item| item.values().any(|v| v.as_s().is_ok_and(|s| s.contains(order_id))))
}

/// The order API (`CreateOrderFunction` as its binary, behind `fault` through the local HTTP
/// API): its runtime and injector, a signed-in client and the URL of `POST /orders`.
struct OrderApi {
    runtime: outbox_local::runtime::Runtime,
    injector: Arc<Injector>,
    client: reqwest::Client,
    orders_url: String,
    stop: tokio::sync::watch::Sender<bool>,
}

impl OrderApi {
    async fn behind(fault: Fault) -> Self {
        use outbox_cli::aws::EMULATOR_ACCOUNT;
        use outbox_local::runtime::{Runtime, RuntimeOptions};
        use outbox_template::Template;
        let sdk = sdk_config(&Target { endpoint: Some(crate::common::endpoint().to_owned()), region: "us-east-1".into() }).await;
        let template = Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml loads");
        let stack = outbox_local::provision::provision(&sdk, template, &crate::common::stack_name(), EMULATOR_ACCOUNT).await.expect("a stack");
        let injector = Injector::new(FaultPlan { faults: vec![fault], ..FaultPlan::default() }, crate::common::endpoint());
        let options = RuntimeOptions { faults: Some(injector.clone()), ..crate::common::fast_options() };
        let runtime = Runtime::new(sdk, stack, options, crate::common::bin_dir()).expect("the functions");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let (api, _server) = outbox_local::runtime::http_api::serve(&runtime, SocketAddr::from(([127, 0, 0, 1], 0)), stopped).await.expect("binds");
        let client = outbox_local::runtime::authorizer::client_as(&runtime.issuer, "alice").build().expect("a client");
        Self { runtime, injector, client, orders_url: format!("http://{api}/orders"), stop }
    }

    async fn post_order(&self) -> reqwest::Response {
        let order = r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"SKU-RED-MUG","quantity":1,"unit_price":"12.50"}]}"#;
        self.client.post(&self.orders_url).header("content-type", "application/json").body(order).send().await.expect("an answer")
    }

    fn orders_table(&self) -> String {
        self.runtime.stack.environment(&self.runtime.function("CreateOrderFunction").expect("the producer").spec).expect("its environment")
            ["ORDERS_TABLE"]
            .clone()
    }
}

impl Drop for OrderApi {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[tokio::test]
async fn a_function_killed_after_its_commit_fails_the_request_but_the_commit_stands() {
    let mut crash = fault(FaultKind::Crash, "dynamodb:TransactWriteItems", None);
    crash.function = Some("CreateOrderFunction".into());
    crash.limit = Some(1);
    let api = OrderApi::behind(crash).await;
    let orders = api.orders_table();
    assert_eq!(api.post_order().await.status().as_u16(), 500, "the instance died before answering");
    assert_eq!(api.injector.injected()[0].count, 1);
    let dynamodb = aws_sdk_dynamodb::Client::new(&api.runtime.sdk);
    let count = |items: Option<Vec<std::collections::HashMap<String, AttributeValue>>>| {
        items.unwrap_or_default().iter().filter(|i| i.get("pk").and_then(|v| v.as_s().ok()).is_some_and(|pk| pk.starts_with("ORDER#"))).count()
    };
    assert_eq!(count(dynamodb.scan().table_name(&orders).send().await.expect("Scan").items), 1, "its transaction committed: half done");
    assert_eq!(api.post_order().await.status().as_u16(), 201, "a fresh instance serves the next request");
    assert_eq!(count(dynamodb.scan().table_name(&orders).send().await.expect("Scan").items), 2);
}

/// A DynamoDB outage the SDK's retries ride out still shows in the function's own EMF metrics:
/// `AwsCallsFailed` with `service` = `DynamoDB`, one per failed attempt.
#[tokio::test]
async fn a_functions_failed_dynamodb_attempts_are_in_its_emf_metrics_by_service() {
    let mut outage = fault(FaultKind::Error, "dynamodb:TransactWriteItems", Some("ServiceUnavailable"));
    outage.function = Some("CreateOrderFunction".into());
    outage.limit = Some(2);
    let api = OrderApi::behind(outage).await;
    assert_eq!(api.post_order().await.status().as_u16(), 201, "the third attempt commits");
    assert_eq!(api.injector.injected()[0].count, 2);
    let deadline = std::time::Instant::now() + crate::common::WAIT;
    let failed = |name: &str| api.runtime.stats.snapshot().metric("CreateOrderFunction", name);
    // The EMF line is read from the function's output after its answer: wait for it.
    while failed("AwsCallsFailed") < 2.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!((failed("AwsCallsFailed{service=DynamoDB}"), failed("AwsCallsFailed")), (2.0, 2.0), "{:?}", api.runtime.stats.snapshot().metrics);
}
