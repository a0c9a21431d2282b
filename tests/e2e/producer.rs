//! The producer through the real HTTP API (`POST /orders`, played locally like API Gateway):
//! the order and its `OrderCreated` outbox item are written in one transaction, a second create of
//! the same order id is cancelled (409, nothing written), and a bad body is a 400 naming the
//! field that writes nothing.

use std::net::SocketAddr;

use crate::common::{s, Local};
use serde_json::{json, Value};

#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("the answer is not JSON ({e}): {self:?}"))
    }
}

async fn post_order(api: SocketAddr, token: &str, body: &str) -> Answer {
    let response = reqwest::Client::new()
        .post(format!("http://{api}/orders"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST /orders: {e}"));
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = response.text().await.unwrap_or_else(|e| panic!("reading the answer: {e}"));
    Answer { status, content_type, body }
}

fn order(order_id: &str, customer_id: &str, quantity: i64) -> String {
    json!({
        "order_id": order_id,
        "customer_id": customer_id,
        "currency": "EUR",
        "lines": [{"sku": "SKU-RED-MUG", "quantity": quantity, "unit_price": "12.50"}]
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_create_of_the_same_order_id_is_a_409_and_writes_nothing() {
    let mut local = Local::start().await;
    let api = local.serve_http().await;
    let token = local.token("alice");
    let orders_table = local.table("OrdersTable");
    let outbox_table = local.table("OutboxTable");
    let order_id = format!("o-{}", crate::common::short_id());

    let first = post_order(api, &token, &order(&order_id, "c-first", 2)).await;
    assert_eq!(first.status, 201, "first create: {first:?}");
    let created = first.json();
    assert_eq!(created["order_id"], order_id.as_str(), "{created}");
    let event_id = created["event_id"].as_str().unwrap_or_else(|| panic!("no event_id in {created}")).to_owned();

    // Same order id, different content: the transaction is cancelled as a whole.
    let second = post_order(api, &token, &order(&order_id, "c-second", 5)).await;
    assert_eq!(second.status, 409, "second create of {order_id}: {second:?}");
    assert!(second.content_type.starts_with("application/problem+json"), "content-type of the 409: {second:?}");
    let problem = second.json();
    assert_eq!(problem["status"], 409, "{problem}");
    assert!(problem["detail"].as_str().unwrap_or("").contains(&order_id), "the problem does not name order {order_id}: {problem}");

    // ONE order item, the first one, untouched.
    let orders: Vec<_> = local.scan(&orders_table).await.into_iter().filter(|i| s(i, "order_id") == order_id).collect();
    assert_eq!(orders.len(), 1, "order items for {order_id}: {orders:?}");
    assert_eq!(s(&orders[0], "customer_id"), "c-first", "the 409 overwrote the order: {:?}", orders[0]);

    // ONE outbox item for the aggregate: the first create's OrderCreated.
    let outbox = local.query_pk(&outbox_table, &format!("Order#{order_id}")).await;
    assert_eq!(outbox.len(), 1, "outbox items for Order#{order_id}: {outbox:?}");
    assert_eq!(s(&outbox[0], "event_id"), event_id);
    assert_eq!(s(&outbox[0], "event_type"), "OrderCreated");
    assert!(s(&outbox[0], "payload").contains("c-first"), "{:?}", outbox[0]);

    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_body_is_a_400_naming_the_field_and_writes_nothing() {
    let mut local = Local::start().await;
    let api = local.serve_http().await;
    let token = local.token("alice");
    let orders_table = local.table("OrdersTable");
    let outbox_table = local.table("OutboxTable");

    // One good order first, so "unchanged" is not just "still empty".
    let good = post_order(api, &token, &order(&format!("o-{}", crate::common::short_id()), "c-1", 1)).await;
    assert_eq!(good.status, 201, "{good:?}");
    let outbox_before = local.scan(&outbox_table).await.len();
    let orders_before = local.scan(&orders_table).await.len();
    assert_eq!((outbox_before, orders_before), (1, 1));

    let bad_id = format!("o-{}", crate::common::short_id());
    let bad = post_order(api, &token, &order(&bad_id, "c-1", 0)).await;
    assert_eq!(bad.status, 400, "quantity 0: {bad:?}");
    assert!(bad.content_type.starts_with("application/problem+json"), "content-type of the 400: {bad:?}");
    let problem = bad.json();
    assert_eq!(problem["field"], "lines[0].quantity", "{problem}");
    assert_eq!(problem["status"], 400, "{problem}");

    let outbox_after = local.scan(&outbox_table).await;
    assert_eq!(outbox_after.len(), outbox_before, "the 400 wrote to the outbox: {outbox_after:?}");
    let orders_after = local.scan(&orders_table).await;
    assert_eq!(orders_after.len(), orders_before, "the 400 wrote an order: {orders_after:?}");
    assert!(orders_after.iter().all(|i| s(i, "order_id") != bad_id));

    local.shutdown().await;
}

/// Several events of one aggregate in one transaction, numbered by the library from the
/// aggregate's current sequence; two writers that read the same current sequence cannot both
/// commit: the outbox put's condition on (aggregate, sequence) refuses the second, which writes
/// nothing (checked in the outbox table, not from the error alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_writer_of_the_same_aggregate_sequence_is_refused_not_duplicated() {
    use outbox::{AggregateSequence, CommitError, ConditionFailed, Event, OutboxWriter};
    let local = Local::start().await;
    let outbox_table = local.table("OutboxTable");
    let writer = OutboxWriter::new(outbox_table.clone(), std::time::Duration::from_secs(3600));
    let account = format!("a-{}", crate::common::short_id());
    let event =
        |event_type: &str| Event::new(event_type, "example.accounts", ("Account", account.as_str()), 0, &json!({"account": account})).unwrap();

    // Both writers read the aggregate's current sequence (none yet: 0) once.
    let read = || AggregateSequence::read(&local.dynamodb, &writer, ("Account", account.as_str()));
    let (seen_first, seen_second) = (read().await.unwrap(), read().await.unwrap());
    assert_eq!((seen_first.current(), seen_second.current()), (0, 0));

    let mut first = writer.transaction();
    first.sequence(seen_first);
    first.emit_next(event("AccountOpened")).unwrap();
    first.emit_next(event("AccountCredited")).unwrap();
    let mut second = writer.transaction();
    second.sequence(seen_second);
    second.emit_next(event("AccountOpened")).unwrap();

    let committed = first.execute(&local.dynamodb).await.expect("the first writer commits");
    assert_eq!(committed.iter().map(|e| e.sequence).collect::<Vec<_>>(), [1, 2], "consecutive sequences in one transaction");
    let refused = second.execute(&local.dynamodb).await.expect_err("the second writer read a stale sequence");
    assert!(
        matches!(&refused, CommitError::ConditionFailed(ConditionFailed::SequenceTaken { sequence: 1, aggregate_id, .. }) if *aggregate_id == account),
        "{refused:?}"
    );

    let stored = local
        .dynamodb
        .query()
        .table_name(&outbox_table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", aws_sdk_dynamodb::types::AttributeValue::S(format!("Account#{account}")))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let ids: Vec<String> = stored.items().iter().map(|i| s(i, "event_id").to_owned()).collect();
    assert_eq!(ids, committed.iter().map(|e| e.event_id.clone()).collect::<Vec<_>>(), "only the first writer's events, once each");

    // A writer that reads again continues after them.
    let mut third = writer.transaction();
    third.sequence(read().await.unwrap());
    assert_eq!(third.emit_next(event("AccountDebited")).unwrap().sequence, 3);
    third.execute(&local.dynamodb).await.expect("commits after the latest");
}
