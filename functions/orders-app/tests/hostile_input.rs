//! A bounded hostile-input run, in process: the order API and the partner webhook endpoint, each
//! behind `lambda_http`'s adapter and the base64 guard exactly as their `main.rs` serve them, get
//! a few thousand generated malformed API Gateway events (payload 2.0): bodies that are not JSON,
//! JSON of the wrong shape or types, empty and oversized bodies, bodies marked base64 that are
//! not, floods of headers, bad `Idempotency-Key`s and content types, missing or forged claims and
//! signatures. Every answer must be a 4xx (or a deliberate 503), never a panic or another 5xx,
//! and nothing may be written: the mocked DynamoDB counts every `TransactWriteItems`, and there
//! must be none.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use axum::Router;
use lambda_http::request::LambdaRequest;
use lambda_http::{Context, LambdaEvent, Service};
use orders_app::http::router as orders_router;
use orders_app::orders::OrdersApi;
use orders_app::partner::{router as partner_router, PartnerWebhooks, Partners, CONSUMER};
use orders_app::serve::Base64Guard;
use outbox::writer::OutboxWriter;
use outbox_webhooks::signature::{signature_header, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use outbox_webhooks::Secret;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

const ORDER_ID: &str = "o-1";

/// A DynamoDB client whose `GetItem` finds order `o-1` (owned by `alice`, already `CANCELLED`, so
/// no request of the run is a valid change) and nothing else, and whose `TransactWriteItems`
/// succeeds; the returned rule counts the transactions.
fn dynamodb() -> (aws_sdk_dynamodb::Client, Rule) {
    let get = mock!(aws_sdk_dynamodb::Client::get_item).then_compute_response(|input| {
        let key = input.key().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        let item: Option<HashMap<String, AttributeValue>> = (key == format!("ORDER#{ORDER_ID}")).then(|| {
            [
                ("pk", AttributeValue::S(key.clone())),
                ("order_id", AttributeValue::S(ORDER_ID.into())),
                ("customer_id", AttributeValue::S("c-1".into())),
                ("currency", AttributeValue::S("EUR".into())),
                ("lines", AttributeValue::L(vec![])),
                ("status", AttributeValue::S("CANCELLED".into())),
                ("version", AttributeValue::N("1".into())),
                ("created_at", AttributeValue::S("2026-11-29T08:00:00.000Z".into())),
                ("owner", AttributeValue::S("alice".into())),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
        });
        aws_smithy_mocks::MockResponse::Output(GetItemOutput::builder().set_item(item).build())
    });
    let transact = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_output(|| TransactWriteItemsOutput::builder().build());
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&get, &transact], |c| {
        c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
    });
    (client, transact)
}

/// Invokes `router` with `event` as Lambda would through `main.rs`; returns the status code.
async fn invoke(router: &Router, event: &Value) -> u16 {
    let request: LambdaRequest = serde_json::from_value(event.clone()).unwrap_or_else(|e| panic!("an API Gateway event ({e}): {event}"));
    let mut service = Base64Guard::new(lambda_http::Adapter::from(router.clone()));
    let answer = service.call(LambdaEvent::new(request, Context::default())).await.unwrap_or_else(|e| match e {});
    let answer = serde_json::to_value(answer).expect("the answer serialises");
    answer["statusCode"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or_else(|| panic!("no statusCode: {answer}"))
}

/// Bodies no valid request has: not JSON, JSON of the wrong shape or types, empty, or one of
/// `oversize` bytes.
fn bad_body(oversize: usize) -> impl Strategy<Value = Option<String>> {
    let scalar = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::from),
    ];
    let wrong_types = (scalar.clone(), scalar.clone(), scalar).prop_map(|(a, b, c)| {
        json!({"customer_id": a, "currency": b, "lines": [{"sku": c, "quantity": "two", "unit_price": 12.5}], "reason": a, "type": b, "data": c})
    });
    prop_oneof![
        4 => Just(None),
        4 => Just(Some(String::new())),
        8 => "\\PC{0,200}".prop_map(Some),
        8 => "[\\[\\]{}:,\"0-9a-z ]{0,120}".prop_map(Some),
        8 => wrong_types.prop_map(|v| Some(v.to_string())),
        2 => Just(Some(r#"{"customer_id":"c-1","currency":"EUR","lines":[]}"#.to_owned())),
        2 => Just(Some(r#"{"customer_id":"c-1","currency":"eur","lines":[{"sku":"A","quantity":1,"unit_price":"1.00"}]}"#.to_owned())),
        2 => Just(Some(r#"{"type":"payment.succeeded","data":{"order_id":"","payment_id":"p","amount":"1","currency":"EUR"}}"#.to_owned())),
        1 => Just(Some(format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(oversize)))),
    ]
}

/// Extra headers: none, a few odd ones, or a flood of hundreds.
fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let pair = ("[a-z][a-z0-9-]{0,20}", "[ -~]{0,40}");
    prop_oneof![3 => prop::collection::vec(pair, 0..4), 1 => prop::collection::vec(pair, 100..200)]
}

/// A payload 2.0 event of `method path` carrying `body` (base64-marked when `base64`), `headers`
/// and the authorizer claims of `sub` (none when `None`).
fn event(method: &str, path: &str, body: Option<String>, base64: bool, headers: Vec<(String, String)>, sub: Option<String>) -> Value {
    let mut header_map = serde_json::Map::new();
    for (name, value) in headers {
        header_map.insert(name, Value::String(value));
    }
    let mut context = json!({"stage": "$default", "requestId": "req-h", "http": {"method": method, "path": path}});
    if let Some(sub) = sub {
        context["authorizer"] = json!({"jwt": {"claims": {"sub": sub}, "scopes": null}});
    }
    json!({"version": "2.0", "rawPath": path, "headers": header_map, "body": body, "isBase64Encoded": base64, "requestContext": context})
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

#[test]
fn the_order_api_answers_thousands_of_malformed_requests_with_4xx_and_writes_nothing() {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let (client, transactions) = dynamodb();
    let router = orders_router(OrdersApi::new(
        client,
        "orders",
        OutboxWriter::new("outbox", Duration::from_secs(3600)),
        "example.orders",
        Duration::from_secs(60),
    ));
    let method = prop_oneof![Just("POST"), Just("GET"), Just("PUT"), Just("DELETE"), Just("post")];
    let path = prop_oneof![
        Just("/orders".to_owned()),
        Just(format!("/orders/{ORDER_ID}")),
        Just(format!("/orders/{ORDER_ID}/cancel")),
        "/orders/[^/?#]{0,70}(/cancel)?",
        "/[a-z/]{0,30}",
    ];
    let content_type = proptest::option::of(prop_oneof![Just("application/json".to_owned()), "[ -~]{0,40}"]);
    let key = proptest::option::of("[ -~]{0,300}");
    let sub = prop_oneof![Just(None), Just(Some(String::new())), Just(Some("alice".to_owned())), "[a-z0-9-]{1,20}".prop_map(Some)];
    // Just over 64 KiB plus the default attachment maximum (4 MiB): a 413.
    let strategy = (method, path, bad_body(64 * 1024 + 4 * 1024 * 1024), any::<bool>(), headers(), content_type, key, sub);
    let statuses: std::cell::RefCell<HashMap<u16, usize>> = Default::default();
    runner(1200)
        .run(&strategy, |(method, path, body, base64, mut headers, content_type, key, sub)| {
            if let Some(content_type) = content_type {
                headers.push(("content-type".into(), content_type));
            }
            if let Some(key) = key {
                headers.push(("idempotency-key".into(), key));
            }
            let before = transactions.num_calls();
            let status = tokio.block_on(invoke(&router, &event(method, &path, body, base64, headers, sub)));
            *statuses.borrow_mut().entry(status).or_default() += 1;
            prop_assert!(status < 500 || status == 503, "{method} {path}: {status}");
            prop_assert_eq!(transactions.num_calls(), before, "{} {}: a malformed request wrote", method, path);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let statuses = statuses.into_inner();
    eprintln!("order API statuses: {statuses:?}");
    assert!(statuses.keys().any(|s| *s == 401) && statuses.keys().any(|s| *s == 400), "the run reached the checks: {statuses:?}");
}

#[test]
fn the_partner_webhook_answers_thousands_of_malformed_and_forged_requests_with_4xx_and_writes_nothing() {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let (client, transactions) = dynamodb();
    let secret = Secret::generate();
    let partners = Partners::Fixed(HashMap::from([("acme".to_owned(), vec![secret.clone()])]));
    let inbox = outbox::inbox::Inbox::new(client.clone(), "inbox", CONSUMER, Duration::from_secs(3600));
    let webhooks = PartnerWebhooks::new(client, "orders", OutboxWriter::new("outbox", Duration::from_secs(3600)), inbox, partners, "example.orders");
    let router = partner_router(webhooks);
    // How a request is signed: not at all, partly, with garbage, or correctly (its body is still malformed).
    let signing = prop_oneof![Just(0u8), Just(1), Just(2), Just(3)];
    let partner = prop_oneof![3 => Just("acme".to_owned()), 1 => "[a-z0-9-]{1,20}"];
    // Just over the webhook limit of 64 KiB: a 413.
    let strategy = (partner, bad_body(64 * 1024), any::<bool>(), headers(), signing, "[ -~]{0,60}", any::<i64>());
    let statuses: std::cell::RefCell<HashMap<u16, usize>> = Default::default();
    runner(800)
        .run(&strategy, |(partner, body, base64, mut headers, signing, junk, timestamp)| {
            let now = chrono::Utc::now().timestamp();
            let raw = body.clone().unwrap_or_default();
            match signing {
                0 => {}
                1 => headers.push((WEBHOOK_ID.into(), "msg_1".into())),
                2 => headers.extend([
                    (WEBHOOK_ID.into(), junk.clone()),
                    (WEBHOOK_TIMESTAMP.into(), timestamp.to_string()),
                    (WEBHOOK_SIGNATURE.into(), junk),
                ]),
                _ if !base64 => headers.extend([
                    (WEBHOOK_ID.into(), "msg_1".into()),
                    (WEBHOOK_TIMESTAMP.into(), now.to_string()),
                    (WEBHOOK_SIGNATURE.into(), signature_header(std::slice::from_ref(&secret), "msg_1", now, raw.as_bytes())),
                ]),
                _ => {}
            }
            let path = format!("/webhooks/{partner}");
            let before = transactions.num_calls();
            let status = tokio.block_on(invoke(&router, &event("POST", &path, body, base64, headers, None)));
            *statuses.borrow_mut().entry(status).or_default() += 1;
            prop_assert!(status < 500 || status == 503, "{path}: {status}");
            prop_assert_eq!(transactions.num_calls(), before, "{}: a malformed webhook wrote", path);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let statuses = statuses.into_inner();
    eprintln!("partner webhook statuses: {statuses:?}");
    assert!([400, 401, 404].iter().all(|s| statuses.contains_key(s)), "the run reached every check: {statuses:?}");
}
