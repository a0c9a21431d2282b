//! The order API through the real HTTP port (the template's `HttpApi` routes served locally like
//! API Gateway, payload format 2.0) on the emulator: every rejected request answers its status as
//! `application/problem+json` naming the field and writes nothing; an `Idempotency-Key` retry
//! answers the same and writes once, the same key for another request is a 422, an expired key
//! is a new key; of 8 concurrent cancels of one order exactly one wins and emits the only
//! `OrderCancelled`; `GET` shows the result. The events written are checked against `schemas/`.
//! Every request carries a token of the local issuer (the template's JWT authorizer, played by the
//! local HTTP API): without one, or with an expired, foreign or unsigned one, the answer is 401
//! and nothing is written; another subject's order is a 404. API Gateway's HTTP API quotas hold:
//! a request whose request line and headers exceed 10,240 bytes (a 12 KB token) is a 431 and a
//! body over 10 MB a 413, with nothing written; a token signed after the issuer's key file was
//! rotated is accepted without a restart.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{s, Local};
use aws_sdk_dynamodb::types::AttributeValue;
use outbox::envelope::OutboxItem;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    content_type: String,
    replayed: Option<String>,
    location: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("the answer is not JSON ({e}): {self:?}"))
    }

    fn is_problem(&self) -> bool {
        self.content_type.starts_with("application/problem+json") && self.json()["status"] == self.status
    }
}

/// The subject of the tests' requests.
const ALICE: &str = "alice";

/// The HTTP API's address and the bearer token its requests carry (`None`: no `Authorization`).
#[derive(Debug, Clone)]
struct Api {
    addr: SocketAddr,
    token: Option<String>,
}

impl Api {
    /// Serves the HTTP API of `local`; requests carry a token of [`ALICE`].
    async fn serve(local: &mut Local) -> Self {
        let addr = local.serve_http().await;
        Self { addr, token: Some(local.token(ALICE)) }
    }

    /// The same API, requests carrying `token` instead.
    fn with_token(&self, token: Option<String>) -> Self {
        Self { addr: self.addr, token }
    }
}

async fn send(api: &Api, method: &str, path: &str, headers: &[(&str, &[u8])], body: Option<Vec<u8>>) -> Answer {
    let method_ = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or_else(|e| panic!("method {method}: {e}"));
    let mut request = reqwest::Client::new().request(method_, format!("http://{}{path}", api.addr)).timeout(Duration::from_secs(30));
    if let Some(token) = &api.token {
        request = request.bearer_auth(token);
    }
    for (name, value) in headers {
        let value = reqwest::header::HeaderValue::from_bytes(value).unwrap_or_else(|e| panic!("header {name}: {e}"));
        request = request.header(*name, value);
    }
    if let Some(body) = body {
        request = request.body(body);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, content_type, replayed, location) =
        (response.status().as_u16(), header("content-type").unwrap_or_default(), header("idempotent-replayed"), header("location"));
    let body = response.text().await.unwrap_or_else(|e| panic!("reading the answer to {method} {path}: {e}"));
    Answer { status, content_type, replayed, location, body }
}

const JSON: (&str, &[u8]) = ("content-type", b"application/json");

async fn create(api: &Api, body: &str, key: Option<&str>) -> Answer {
    let mut headers = vec![JSON];
    if let Some(key) = key {
        headers.push(("idempotency-key", key.as_bytes()));
    }
    send(api, "POST", "/orders", &headers, Some(body.as_bytes().to_vec())).await
}

async fn cancel(api: &Api, order_id: &str, body: Option<&str>, key: Option<&str>) -> Answer {
    let mut headers = vec![JSON];
    if let Some(key) = key {
        headers.push(("idempotency-key", key.as_bytes()));
    }
    send(api, "POST", &format!("/orders/{order_id}/cancel"), &headers, body.map(|b| b.as_bytes().to_vec())).await
}

async fn get(api: &Api, order_id: &str) -> Answer {
    send(api, "GET", &format!("/orders/{order_id}"), &[], None).await
}

fn order(order_id: Option<&str>, quantity: i64) -> String {
    let mut body = json!({
        "customer_id": "c-1001",
        "currency": "EUR",
        "lines": [{"sku": "SKU-RED-MUG", "quantity": quantity, "unit_price": "12.50"},
                  {"sku": "SKU-BLUE-TEE", "quantity": 1, "unit_price": "19.99"}]
    });
    if let Some(id) = order_id {
        body["order_id"] = id.into();
    }
    body.to_string()
}

/// Item counts of the orders and outbox tables (consistent scans).
async fn counts(local: &Local) -> (usize, usize) {
    (local.scan(&local.table("OrdersTable")).await.len(), local.scan(&local.table("OutboxTable")).await.len())
}

/// The outbox items of order `order_id`, in sequence order.
async fn events_of(local: &Local, order_id: &str) -> Vec<OutboxItem> {
    let items = local.query_pk(&local.table("OutboxTable"), &format!("Order#{order_id}")).await;
    items.into_iter().map(|i| OutboxItem::from_item(i.into()).unwrap_or_else(|e| panic!("outbox item of {order_id}: {e}"))).collect()
}

/// Asserts that the event's bus `detail` matches `schemas/<type>.v<version>.json`.
fn assert_matches_schema(event: &OutboxItem) {
    let path = crate::common::root().join(format!("schemas/{}.v{}.json", event.event_type, event.event_version));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let detail: Value = serde_json::from_str(&event.to_bus_event().expect("a publishable event").detail).expect("detail is JSON");
    let errors: Vec<String> = validator.iter_errors(&detail).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{} does not match its schema: {errors:?}\n{detail}", event.event_type);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rejected_request_answers_its_status_names_the_field_and_writes_nothing() {
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    // One order first, so "unchanged" is not just "still empty", and there is one to cancel.
    let order_id = format!("o-{}", crate::common::short_id());
    let first = create(&api, &order(Some(&order_id), 2), None).await;
    assert_eq!(first.status, 201, "{first:?}");
    let before = counts(&local).await;
    assert_eq!(before, (1, 1));

    let too_many_lines = json!({
        "customer_id": "c", "currency": "EUR",
        "lines": (0..51).map(|i| json!({"sku": format!("S-{i}"), "quantity": 1, "unit_price": "1.00"})).collect::<Vec<_>>()
    })
    .to_string();
    // POST /orders takes 64 KiB plus the attachment maximum (the template's
    // ORDER_ATTACHMENT_MAX_BYTES, 4 MiB): one byte-string 70 KiB over that.
    let too_large = format!(r#"{{"customer_id":"{}","currency":"EUR","lines":[]}}"#, "x".repeat(4 * 1024 * 1024 + 70 * 1024));
    // "Zoë" in ISO-8859-1: not UTF-8, so the HTTP API hands it over base64-encoded.
    let latin1: Vec<u8> = order(None, 1).replace("c-1001", "Zo#").into_bytes().into_iter().map(|b| if b == b'#' { 0xeb } else { b }).collect();
    let long_key = "k".repeat(256);
    let cancel_path = format!("/orders/{order_id}/cancel");
    let text: (&str, &[u8]) = ("content-type", b"text/plain");

    #[rustfmt::skip]
    #[allow(clippy::type_complexity)]
    let cases: Vec<(&str, &str, String, Vec<(&str, &[u8])>, Option<Vec<u8>>, u16, Option<&str>)> = vec![
        ("null body", "POST", "/orders".into(), vec![JSON], Some(b"null".to_vec()), 400, Some("body")),
        ("no body", "POST", "/orders".into(), vec![JSON], None, 400, Some("body")),
        ("not JSON", "POST", "/orders".into(), vec![JSON], Some(b"{\"customer_id\":".to_vec()), 400, Some("body")),
        ("text/plain", "POST", "/orders".into(), vec![text], Some(order(None, 1).into_bytes()), 415, Some("content-type")),
        ("over 64 KiB + the attachment maximum", "POST", "/orders".into(), vec![JSON], Some(too_large.into_bytes()), 413, Some("body")),
        ("51 lines", "POST", "/orders".into(), vec![JSON], Some(too_many_lines.into_bytes()), 400, Some("lines")),
        ("quantity 0", "POST", "/orders".into(), vec![JSON], Some(order(None, 0).into_bytes()), 400, Some("lines[0].quantity")),
        ("quantity -3", "POST", "/orders".into(), vec![JSON], Some(order(None, -3).into_bytes()), 400, Some("lines[0].quantity")),
        ("not UTF-8 (sent base64-encoded)", "POST", "/orders".into(), vec![JSON], Some(latin1), 400, Some("body")),
        ("key of 256 characters", "POST", "/orders".into(), vec![JSON, ("idempotency-key", long_key.as_bytes())], Some(order(None, 1).into_bytes()), 400, Some("Idempotency-Key")),
        ("key with non-ASCII", "POST", "/orders".into(), vec![JSON, ("idempotency-key", "café".as_bytes())], Some(order(None, 1).into_bytes()), 400, Some("Idempotency-Key")),
        ("cancel of no order", "POST", "/orders/o-nope/cancel".into(), vec![JSON], None, 404, None),
        ("cancel of an impossible id", "POST", "/orders/a.b/cancel".into(), vec![JSON], None, 404, None),
        ("get of no order", "GET", "/orders/o-nope".into(), vec![], None, 404, None),
        ("cancel reason not a string", "POST", cancel_path.clone(), vec![JSON], Some(br#"{"reason":7}"#.to_vec()), 400, Some("reason")),
        ("cancel with an unknown field", "POST", cancel_path.clone(), vec![JSON], Some(br#"{"why":"x"}"#.to_vec()), 400, Some("why")),
        ("cancel body text/plain", "POST", cancel_path.clone(), vec![text], Some(b"please".to_vec()), 415, Some("content-type")),
        ("cancel with a bad key", "POST", cancel_path.clone(), vec![JSON, ("idempotency-key", b"")], None, 400, Some("Idempotency-Key")),
    ];
    for (what, method, path, headers, body, status, field) in cases {
        let answer = send(&api, method, &path, &headers, body).await;
        assert_eq!(answer.status, status, "{what}: {answer:?}");
        assert!(answer.is_problem(), "{what}: not a problem+json document: {answer:?}");
        if let Some(field) = field {
            assert_eq!(answer.json()["field"], field, "{what}: {answer:?}");
        }
        assert_eq!(counts(&local).await, before, "{what} wrote something");
    }

    // The order is untouched: still CREATED at version 1, with only its OrderCreated event.
    let view = get(&api, &order_id).await.json();
    assert_eq!((view["status"].as_str(), view["version"].as_u64()), (Some("CREATED"), Some(1)), "{view}");
    assert_eq!(events_of(&local, &order_id).await.len(), 1);
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_the_same_key_answers_the_same_and_writes_once() {
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    let key = format!("key-{}", uuid::Uuid::new_v4());
    // No order_id in the body: a retry that were executed again would create a second order.
    let body = order(None, 2);

    let first = create(&api, &body, Some(&key)).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert_eq!(first.replayed, None);
    let order_id = first.json()["order_id"].as_str().expect("an order id").to_owned();
    let after_first = counts(&local).await;
    assert_eq!(after_first, (2, 1), "the order and its key record; one event");

    let retry = create(&api, &body, Some(&key)).await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.body, first.body, "the replay's body differs");
    assert_eq!(retry.location, first.location);
    assert_eq!(retry.replayed.as_deref(), Some("true"));
    assert_eq!(counts(&local).await, after_first, "the retry wrote something");

    // Same key, another body or another route: 422, nothing written.
    let other = create(&api, &order(None, 3), Some(&key)).await;
    assert_eq!(other.status, 422, "{other:?}");
    assert!(other.is_problem());
    assert_eq!(other.json()["field"], "Idempotency-Key");
    let elsewhere = cancel(&api, &order_id, None, Some(&key)).await;
    assert_eq!(elsewhere.status, 422, "the key of a create reused for a cancel: {elsewhere:?}");
    assert_eq!(counts(&local).await, after_first);

    // A cancel retried after it succeeded replays its 200 (the order is CANCELLED by then).
    let cancel_key = format!("key-{}", uuid::Uuid::new_v4());
    let cancelled = cancel(&api, &order_id, Some(r#"{"reason":"changed my mind"}"#), Some(&cancel_key)).await;
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    let again = cancel(&api, &order_id, Some(r#"{"reason":"changed my mind"}"#), Some(&cancel_key)).await;
    assert_eq!((again.status, again.body.as_str(), again.replayed.as_deref()), (200, cancelled.body.as_str(), Some("true")), "{again:?}");
    let without_key = cancel(&api, &order_id, Some(r#"{"reason":"changed my mind"}"#), None).await;
    assert_eq!(without_key.status, 409, "a new cancel of a cancelled order: {without_key:?}");

    let events = events_of(&local, &order_id).await;
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["OrderCreated", "OrderCancelled"]);
    assert_eq!(events[0].event_id, first.json()["event_id"].as_str().unwrap_or_default());
    assert_eq!(events[1].event_id, cancelled.json()["event_id"].as_str().unwrap_or_default());
    let orders = local.scan(&local.table("OrdersTable")).await;
    let keys: Vec<&str> = orders.iter().map(|i| s(i, "pk")).filter(|pk| pk.starts_with("IDEMPOTENCY#")).collect();
    assert_eq!(keys.len(), 2, "one record per key: {keys:?}");
    assert_eq!(orders.iter().filter(|i| s(i, "pk").starts_with("ORDER#")).count(), 1);
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_counts_as_a_new_key() {
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    let key = format!("key-{}", uuid::Uuid::new_v4());
    let first = create(&api, &order(None, 1), Some(&key)).await;
    assert_eq!(first.status, 201, "{first:?}");

    // Age the record past its expiry (DynamoDB TTL may take days to delete it; moto never does).
    let past = chrono::Utc::now().timestamp() - 10;
    local
        .dynamodb
        .update_item()
        .table_name(local.table("OrdersTable"))
        .key("pk", AttributeValue::S(format!("IDEMPOTENCY#{}:{ALICE}#{key}", ALICE.len())))
        .update_expression("SET expires_at = :past")
        .expression_attribute_values(":past", AttributeValue::N(past.to_string()))
        .send()
        .await
        .expect("UpdateItem on the key record");

    let second = create(&api, &order(None, 5), Some(&key)).await;
    assert_eq!(second.status, 201, "another body under an expired key is a new request: {second:?}");
    assert_eq!(second.replayed, None);
    assert_ne!(second.json()["order_id"], first.json()["order_id"]);
    let record = local.query_pk(&local.table("OrdersTable"), &format!("IDEMPOTENCY#{}:{ALICE}#{key}", ALICE.len())).await;
    assert_eq!(record.len(), 1);
    let expires: i64 = record[0].get("expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(expires > chrono::Utc::now().timestamp() + 23 * 3600, "the record was renewed for 24 h: {:?}", record[0]);
    assert_eq!(s(&record[0], "response_body"), second.body);
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_eight_concurrent_cancels_exactly_one_wins_and_emits_the_only_order_cancelled() {
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    let order_id = format!("o-{}", crate::common::short_id());
    let created = create(&api, &order(Some(&order_id), 4), None).await;
    assert_eq!(created.status, 201, "{created:?}");

    let view = get(&api, &order_id).await;
    assert_eq!(view.status, 200, "{view:?}");
    let view = view.json();
    assert_eq!(view["status"], "CREATED");
    assert_eq!(view["version"], 1);
    assert_eq!(view["customer_id"], "c-1001");
    assert_eq!(view["currency"], "EUR");
    assert_eq!(view["lines"][0], json!({"sku": "SKU-RED-MUG", "quantity": 4, "unit_price": "12.50"}));
    assert!(view["created_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{view}");

    let racers: Vec<_> = (0..8)
        .map(|i| {
            let (order_id, api) = (order_id.clone(), api.clone());
            tokio::spawn(async move { cancel(&api, &order_id, Some(&format!(r#"{{"reason":"racer {i}"}}"#)), None).await })
        })
        .collect();
    let mut answers = Vec::new();
    for racer in racers {
        answers.push(racer.await.expect("a racer finished"));
    }
    let winners: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    assert_eq!(winners.len(), 1, "exactly one cancel wins: {answers:#?}");
    for loser in answers.iter().filter(|a| a.status != 200) {
        assert_eq!(loser.status, 409, "{loser:?}");
        assert!(loser.is_problem(), "{loser:?}");
    }
    let won = winners[0].json();
    assert_eq!((won["status"].as_str(), won["version"].as_u64(), won["order_id"].as_str()), (Some("CANCELLED"), Some(2), Some(order_id.as_str())));

    let events = events_of(&local, &order_id).await;
    assert_eq!(events.len(), 2, "OrderCreated and ONE OrderCancelled: {events:#?}");
    let cancelled = &events[1];
    assert_eq!((cancelled.event_type.as_str(), cancelled.sequence), ("OrderCancelled", 2));
    assert_eq!(cancelled.event_id, won["event_id"].as_str().unwrap_or_default());
    let payload: Value = serde_json::from_str(&cancelled.payload).expect("payload is JSON");
    assert_eq!(payload["order_id"], order_id.as_str());
    assert!(payload["reason"].as_str().is_some_and(|r| r.starts_with("racer ")), "{payload}");
    assert_eq!(payload["lines"], view["lines"], "the lines to release");
    for event in &events {
        assert_matches_schema(event);
    }

    let view = get(&api, &order_id).await.json();
    assert_eq!((view["status"].as_str(), view["version"].as_u64()), (Some("CANCELLED"), Some(2)), "{view}");
    let late = cancel(&api, &order_id, None, None).await;
    assert_eq!(late.status, 409, "{late:?}");
    assert!(late.json()["detail"].as_str().unwrap_or_default().contains("CANCELLED"), "{late:?}");
    assert_eq!(events_of(&local, &order_id).await.len(), 2);
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_token_every_route_is_a_401_and_another_subjects_order_a_404() {
    use base64::Engine as _;
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    let order_id = format!("o-{}", crate::common::short_id());
    let created = create(&api, &order(Some(&order_id), 2), None).await;
    assert_eq!(created.status, 201, "{created:?}");
    let before = counts(&local).await;

    let issuer = &local.runtime.issuer;
    let now = chrono::Utc::now().timestamp();
    let claims = json!({"iss": outbox_local::runtime::authorizer::LOCAL_ISSUER, "aud": outbox_local::runtime::authorizer::LOCAL_AUDIENCE, "sub": ALICE, "iat": now - 60, "exp": now + 600});
    let with = |key: &str, value: Value| {
        let mut c = claims.clone();
        c[key] = value;
        c
    };
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let unsigned = format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(&claims));
    let tokens = [
        ("no token", None),
        ("expired", Some(issuer.sign(&with("exp", (now - 1).into())))),
        ("expiring this second", Some(issuer.sign(&with("exp", now.into())))),
        ("another issuer", Some(issuer.sign(&with("iss", "https://issuer.example".into())))),
        ("another audience", Some(issuer.sign(&with("aud", "other-api".into())))),
        ("alg none", Some(unsigned)),
        ("garbage", Some("not.a.token".to_owned())),
    ];
    for (what, token) in tokens {
        let api = api.with_token(token);
        let answers = [
            create(&api, &order(None, 1), None).await,
            create(&api, &order(None, 1), Some("k-401")).await,
            get(&api, &order_id).await,
            cancel(&api, &order_id, None, None).await,
        ];
        for answer in answers {
            assert_eq!((answer.status, answer.body.as_str()), (401, r#"{"message":"Unauthorized"}"#), "{what}: {answer:?}");
        }
        assert_eq!(counts(&local).await, before, "{what}: something was written");
    }

    // Bob, authenticated, cannot tell Alice's order from one that does not exist.
    let bob = api.with_token(Some(local.token("bob")));
    let bob_get = get(&bob, &order_id).await;
    let no_order = get(&bob, "o-does-not-exist").await;
    assert_eq!((bob_get.status, no_order.status), (404, 404), "{bob_get:?}");
    assert_eq!(bob_get.json()["title"], no_order.json()["title"]);
    let bob_cancel = cancel(&bob, &order_id, Some(r#"{"reason":"not mine"}"#), Some("bob-key")).await;
    assert_eq!(bob_cancel.status, 404, "{bob_cancel:?}");
    assert_eq!(counts(&local).await, before, "bob's cancel wrote something");
    assert_eq!(events_of(&local, &order_id).await.len(), 1, "no OrderCancelled");
    let view = get(&api, &order_id).await;
    assert_eq!((view.status, view.json()["status"].as_str()), (200, Some("CREATED")), "{view:?}");
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_api_gateways_size_quotas_is_refused_and_one_within_them_is_served() {
    use outbox_local::runtime::authorizer::{LOCAL_AUDIENCE, LOCAL_ISSUER};
    use outbox_local::runtime::http_api::{MAX_BODY_BYTES, MAX_REQUEST_LINE_AND_HEADER_BYTES};
    let mut local = Local::start().await;
    let api = Api::serve(&mut local).await;
    let before = counts(&local).await;
    let now = chrono::Utc::now().timestamp();
    // A token of `padding` claim bytes, signed by the issuer: valid in every other way.
    let padded = |padding: usize| {
        let claims =
            json!({"iss": LOCAL_ISSUER, "aud": LOCAL_AUDIENCE, "sub": ALICE, "iat": now - 60, "exp": now + 600, "groups": "g".repeat(padding)});
        local.runtime.issuer.sign(&claims)
    };

    let big = padded(9_000);
    assert!(big.len() > 12 * 1024, "a 12 KB token: {} bytes", big.len());
    let refused = create(&api.with_token(Some(big)), &order(None, 1), Some("k-431")).await;
    assert_eq!((refused.status, refused.body.as_str()), (431, r#"{"message":"Request Header Fields Too Large"}"#), "{refused:?}");
    assert_eq!(counts(&local).await, before, "the refused request wrote something");

    // Under the limit (the token ~8 KB, the request's other headers a few hundred bytes): served.
    let within = padded(5_800);
    assert!(within.len() < MAX_REQUEST_LINE_AND_HEADER_BYTES - 1_000, "{} bytes", within.len());
    let served = create(&api.with_token(Some(within)), &order(None, 1), None).await;
    assert_eq!(served.status, 201, "{served:?}");

    // The body: 10 MB is API Gateway's payload quota; one byte more is refused before the function.
    let after = counts(&local).await;
    let huge = vec![b' '; MAX_BODY_BYTES + 1];
    let too_large = send(&api, "POST", "/orders", &[JSON], Some(huge)).await;
    assert_eq!((too_large.status, too_large.body.as_str()), (413, r#"{"message":"Request Entity Too Large"}"#), "{too_large:?}");
    assert_eq!(counts(&local).await, after, "the refused body wrote something");
    local.shutdown().await;
}

/// `outbox-local token` signs with the key file of `.local/<stack>/`; when that file is replaced
/// while `up` runs, `up` picks the new key up at the first token naming it (no 401 until a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_signed_with_a_rotated_issuer_key_is_accepted_without_a_restart() {
    use outbox_local::runtime::authorizer::{LocalIssuer, KEY_FILE};
    let state = std::env::temp_dir().join(format!("outbox-local-state-{}", crate::common::short_id()));
    let options = outbox_local::runtime::RuntimeOptions { state_dir: Some(state.clone()), ..crate::common::fast_options() };
    let template = outbox_template::Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml loads");
    let mut local = Local::start_with(template, crate::common::endpoint(), options, None).await;
    let api = Api::serve(&mut local).await;
    let (orders_before, _) = counts(&local).await;
    // What `outbox-local token --sub alice` prints: a token of the key file's key.
    let token_command = || LocalIssuer::load_or_create(&state).expect("the key file").token(ALICE, &[], 600);
    let first = create(&api.with_token(Some(token_command())), &order(None, 1), None).await;
    assert_eq!(first.status, 201, "{first:?}");
    let old_token = token_command();

    std::fs::remove_file(state.join(KEY_FILE)).expect("the key file exists");
    let rotated = token_command();
    let after_rotation = create(&api.with_token(Some(rotated)), &order(None, 1), None).await;
    assert_eq!(after_rotation.status, 201, "the rotated key is picked up without a restart: {after_rotation:?}");
    let old = create(&api.with_token(Some(old_token)), &order(None, 1), None).await;
    assert_eq!(old.status, 201, "a token of the previous key verifies until it expires: {old:?}");
    let jwks = send(&api.with_token(None), "GET", outbox_local::runtime::authorizer::JWKS_PATH, &[], None).await;
    let jwks = jwks.json();
    assert_eq!(jwks["keys"].as_array().map(Vec::len), Some(2), "both keys served: {jwks}");
    assert_eq!(counts(&local).await.0, orders_before + 3, "three orders written");
    local.shutdown().await;
    let _ = std::fs::remove_dir_all(&state);
}
