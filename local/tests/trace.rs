//! `outbox-local trace <event-id>` answers from the tables and queues themselves: the outbox
//! item (by its event id through the outbox table's index, by key, or by a scan), each
//! subscribed consumer's inbox row, and the dead letters that hold the event.

use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_cli::trace::{trace, Lookup};
use outbox_local::emulator::Emulator;
use outbox_template::Template;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

#[tokio::test]
async fn trace_follows_one_event_through_outbox_inbox_and_dead_letters() {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let sdk = sdk_config(&Target { endpoint: Some(emulator.endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = outbox_local::provision::provision(&sdk, template, "trace-test", EMULATOR_ACCOUNT).await.expect("provisioned");
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = |id: &str| stack.table(id).expect("a table of the template").name.clone();

    // e-applied: written and applied by reserve-inventory. e-waiting: written, no inbox row yet.
    // e-other: a type no consumer subscribes to. e-dead: only in the consumer DLQ.
    for (id, event_type, seq) in [("e-applied", "OrderCreated", 1), ("e-waiting", "OrderCancelled", 2), ("e-other", "OrderShipped", 3)] {
        dynamodb
            .put_item()
            .table_name(table("OutboxTable"))
            .item("pk", s("Order#o-1"))
            .item("sk", s(&format!("{seq:020}")))
            .item("event_id", s(id))
            .item("event_type", s(event_type))
            .item("source", s("example.orders"))
            .item("sequence", AttributeValue::N(seq.to_string()))
            .item("occurred_at", s("2026-12-01T00:00:00.000Z"))
            .item("correlation_id", s("corr-1"))
            .send()
            .await
            .expect("outbox item written");
    }
    dynamodb
        .put_item()
        .table_name(table("ConsumerKit/InboxTable"))
        .item("pk", s("reserve-inventory#e-applied"))
        .item("processed_at", s("2026-12-01T00:00:01.000Z"))
        .send()
        .await
        .expect("inbox row written");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dlq = stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the consumer DLQ");
    let body = serde_json::json!({"source": "example.orders", "detail-type": "OrderCreated", "detail": {"id": "e-dead", "type": "OrderCreated"}});
    sqs.send_message().queue_url(&dlq.url).message_body(body.to_string()).send().await.expect("dead letter sent");

    let resources = outbox_cli::resources::Resources::from_stack(&stack).expect("the stack's resources");
    let key = |sequence: u64| Lookup::Key { aggregate: "Order#o-1".into(), sequence };
    let applied = trace(&sdk, &resources, "e-applied", &key(1)).await.expect("traced");
    let outbox = applied.outbox.as_ref().expect("the outbox item is found by its key");
    assert_eq!((outbox.pk.as_str(), outbox.sequence, outbox.correlation_id.as_deref()), ("Order#o-1", Some(1), Some("corr-1")));
    assert_eq!(applied.consumers.len(), 1, "{applied:?}");
    assert_eq!(applied.consumers[0].state, "applied");
    assert_eq!(applied.consumers[0].at.as_deref(), Some("2026-12-01T00:00:01.000Z"));
    assert!(applied.relay.starts_with("published"), "{}", applied.relay);
    assert!(applied.found() && applied.dead_letters.is_empty());

    // The event id alone: the outbox table's event-id index (a Query and a GetItem, no Scan).
    let by_id = trace(&sdk, &resources, "e-applied", &Lookup::Index).await.expect("traced");
    assert_eq!(by_id.outbox_lookup, "index");
    assert_eq!(by_id.outbox.as_ref().map(|o| (o.pk.as_str(), o.sequence)), Some(("Order#o-1", Some(1))), "{by_id:?}");
    assert_eq!(by_id.consumers[0].state, "applied");
    let unknown = trace(&sdk, &resources, "e-unknown", &Lookup::Index).await.expect("traced");
    assert!(unknown.outbox.is_none() && !unknown.found(), "{unknown:?}");

    let wrong = trace(&sdk, &resources, "e-applied", &key(2)).await.expect("traced");
    assert!(wrong.outbox.is_none(), "the item of that key holds another event: {wrong:?}");
    let unlooked = trace(&sdk, &resources, "e-applied", &Lookup::Skip).await.expect("traced");
    assert!(unlooked.outbox.is_none() && unlooked.render().contains("not looked up"), "{}", unlooked.render());

    let waiting = trace(&sdk, &resources, "e-waiting", &key(2)).await.expect("traced");
    assert_eq!(waiting.consumers[0].state, "absent", "OrderCancelled is subscribed, not applied yet: {waiting:?}");
    assert!(waiting.relay.contains("no consumer has it yet"), "{}", waiting.relay);

    let other = trace(&sdk, &resources, "e-other", &Lookup::Scan).await.expect("traced");
    assert!(other.outbox.is_some(), "found by a scan: {other:?}");
    assert_eq!(other.consumers[0].state, "not subscribed", "{other:?}");

    let dead = trace(&sdk, &resources, "e-dead", &Lookup::Skip).await.expect("traced");
    assert!(dead.outbox.is_none());
    assert_eq!(dead.dead_letters.len(), 1, "{dead:?}");
    assert!(dead.found());
    assert!(dead.render().contains("dead letter"), "{}", dead.render());

    let nowhere = trace(&sdk, &resources, "e-unknown", &Lookup::Scan).await.expect("traced");
    assert!(!nowhere.found(), "{nowhere:?}");
}
