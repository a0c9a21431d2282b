//! A real sequence gap on the emulator (issue 24): the consumer kit's inbox table with its
//! sparse parked index, and its parked check. The stack is examples/my-service's (a consumer on
//! the kit's delivery queue, so the kit schedules the check), provisioned without running its
//! functions; an ordered consumer runs in the test against the kit's DynamoDB inbox. An event
//! whose predecessor never comes is parked; the check message, as the kit's schedule rule sends
//! it, finds it through the index (a `Query`, no scan) and counts it as a gap; `ordering parked`
//! lists it from the index; unparking removes the index entry.

use std::time::{Duration, Instant};

use outbox::consumer::{Consumer, Handled, HandlerError, InvocationAnswer, MemoryDeadLetters, ParkedCheck};
use outbox::inbox::Inbox;
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_template::Template;
use serde_json::{json, Value};

use crate::common;

/// An ordered consumer named `name` on `table`, whose handler answers the event's sequence.
fn ordered_consumer(dynamodb: &aws_sdk_dynamodb::Client, table: &str, name: &str) -> (Inbox, Consumer<Inbox, MemoryDeadLetters, u64>) {
    let inbox = Inbox::new(dynamodb.clone(), table, name, Duration::from_secs(3600)).ordered();
    let handler = |event: outbox::consumer::DeliveredEvent<Value>, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) };
    let consumer = Consumer::builder(inbox.clone(), MemoryDeadLetters::new())
        .on::<Value, _, _>("OrderCreated", handler)
        .on::<Value, _, _>("OrderPaid", handler)
        .on::<Value, _, _>("OrderCancelled", handler)
        .build();
    (inbox, consumer)
}

fn raw(value: &Value) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(value).expect("JSON")
}

/// Event `sequence` of order `order`, as EventBridge delivers it.
fn order_event(order: &str, event_type: &str, sequence: u64) -> Value {
    json!({
        "version": "0", "id": format!("envelope-{}", common::short_id()), "detail-type": event_type, "source": "example.orders",
        "time": "2026-12-02T06:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": format!("{order}-{sequence}"), "type": event_type, "version": 1, "source": "example.orders",
                         "time": "2026-12-02T06:00:00.000Z", "subject": order, "aggregate_type": "Order", "sequence": sequence,
                         "correlation_id": "gap"},
            "data": {"order_id": order}
        }
    })
}

#[tokio::test]
async fn a_real_gap_is_found_by_the_parked_check_and_listed_from_the_index_without_a_scan() {
    let template = Template::load(&common::root().join("examples/my-service/template.yaml")).expect("examples/my-service/template.yaml loads");
    let sdk = sdk_config(&Target { endpoint: Some(common::endpoint().to_owned()), region: "us-east-1".into() }).await;
    let stack_name = common::stack_name();
    let stack = outbox_local::provision::provision(&sdk, template, &stack_name, EMULATOR_ACCOUNT).await.expect("provisioned");

    // The kit schedules the check to its delivery queue, as the local runtime plays it.
    let [check] = stack.schedules.as_slice() else { panic!("one schedule: {:?}", stack.schedules) };
    let delivery = stack.queues.iter().find(|q| q.logical_id == "ConsumerKit/DeliveryQueue").expect("the kit's delivery queue");
    assert_eq!((check.name.as_str(), check.period, &check.queue), ("ConsumerKit/ParkedCheckRule.parked-check", Duration::from_secs(300), delivery));
    assert_eq!(ParkedCheck::recognise(&check.input), Some(ParkedCheck::new(Duration::from_secs(900))), "{}", check.input);
    assert!(stack.pipelines().iter().any(|p| p.starts_with("schedule ConsumerKit/ParkedCheckRule.parked-check every 300 s")));

    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = stack.tables.iter().find(|t| t.logical_id == "ConsumerKit/InboxTable").expect("the kit's inbox table").name.clone();
    let consumer_name = "ordered-gap";
    let (inbox, consumer) = ordered_consumer(&dynamodb, &table, consumer_name);
    let deadline = || Instant::now() + Duration::from_secs(20);

    // o-1: 1 applies, 3 arrives, 2 never comes. o-2: 2 arrives before 1 (transient), then 1.
    for (order, event_type, sequence) in [("o-1", "OrderCreated", 1), ("o-1", "OrderCancelled", 3), ("o-2", "OrderPaid", 2)] {
        consumer.handle_payload_until(&raw(&order_event(order, event_type, sequence)), deadline()).await.expect("handled");
    }
    let two = consumer.handle_payload_until(&raw(&order_event("o-2", "OrderCreated", 1)), deadline()).await.expect("applied");
    assert_eq!(two.parked_applied.len(), 1, "o-2's parked 2 applied after 1: {two:?}");

    // The check, as the kit's rule sends it (gap limit 0 here: anything parked is a gap).
    let message = ParkedCheck::new(Duration::ZERO).message();
    let batch = json!({"Records": [{"messageId": "m-check", "receiptHandle": "r", "body": message, "eventSource": "aws:sqs"}]});
    let InvocationAnswer::Batch(answer) = consumer.handle_invocation(&raw(&batch), deadline()).await.expect("a batch") else { panic!("a batch") };
    assert!(answer.batch_item_failures.is_empty() && answer.outcomes.is_empty(), "acknowledged, not an event: {answer:?}");
    let report = answer.parked_check.expect("the check ran");
    assert_eq!((report.parked, report.gaps, report.recovered, report.complete, report.error.as_deref()), (1, 1, 0, true, None), "{report:?}");

    // `ordering parked` from the index: one Query, which reads the one parked row (the claim
    // and ordering rows are not in the sparse index).
    let index = outbox_cli::ordering::parked_index(&dynamodb, &table).await.expect("DescribeTable").expect("the kit's table has the index");
    assert_eq!(index, outbox::inbox::PARKED_INDEX);
    let listed = outbox_cli::ordering::parked_by_index(&dynamodb, &table, &index, &[consumer_name.to_owned()], Some(100)).await.expect("Query");
    assert_eq!((listed.read, listed.complete), (1, true), "{listed:?}");
    let gap = &listed.parked[0];
    assert_eq!((gap.consumer.as_str(), gap.event.event_id.as_str(), gap.event.sequence, gap.event.waits_for), (consumer_name, "o-1-3", 3, 2));
    assert!(gap.event.payload.is_empty(), "the index does not project the payload");
    assert!(outbox_cli::ordering::format_parked(&listed.parked, Duration::ZERO)
        .starts_with("GAP ordered-gap Order#o-1 OrderCancelled sequence 3 waits for 2"));
    let with_payload = outbox_cli::ordering::parked_of(&dynamodb, &table, consumer_name).await.expect("parked_of");
    assert!(with_payload[0].event.payload.contains("o-1-3"), "read from the row by key");

    // Unparked (settled), it leaves the index: the next check finds nothing.
    inbox.unpark(&with_payload[0].event).await.expect("unparked");
    let report = consumer.check_parked(&ParkedCheck::new(Duration::ZERO), deadline()).await;
    assert_eq!((report.parked, report.gaps, report.oldest_age_seconds), (0, 0, 0), "{report:?}");
    let consumed = consumer.handle_payload_until(&raw(&order_event("o-1", "OrderCancelled", 3)), deadline()).await;
    assert!(matches!(consumed.expect("parked again").outcome, Handled::Parked { waits_for: 2 }), "still waiting for 2");
}

/// A row parked by a version before the ordering row counted parked rows (no `counted`, no
/// count) is one the count cannot see: the predecessor's commit proves "nothing parked" past
/// it. The kit's parked check then applies it (its predecessor is applied) and removes the row,
/// so it is neither stranded nor listed again; the count stays exact.
#[tokio::test]
async fn a_row_parked_before_the_count_is_applied_and_removed_by_the_parked_check() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let local = common::Local::start().await;
    let table = local.table("ConsumerKit/InboxTable");
    let consumer_name = "legacy-parked";
    let (_, consumer) = ordered_consumer(&local.dynamodb, &table, consumer_name);
    let deadline = || Instant::now() + Duration::from_secs(20);
    consumer.handle_payload_until(&raw(&order_event("o-L", "OrderCreated", 1)), deadline()).await.expect("applied");

    // Sequence 3, parked waiting for 2 the way the version before the count wrote it.
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: u64| AttributeValue::N(v.to_string());
    let three = order_event("o-L", "OrderCancelled", 3);
    let put = local.dynamodb.put_item().table_name(&table);
    put.item("pk", s(&format!("{consumer_name}#parked#Order#o-L#2")))
        .item("kind", s(outbox::inbox::PARKED_KIND))
        .item(outbox::inbox::PARKED_CONSUMER, s(consumer_name))
        .item("consumer", s(consumer_name))
        .item("event_id", s("o-L-3"))
        .item("event_type", s("OrderCancelled"))
        .item("aggregate_type", s("Order"))
        .item("subject", s("o-L"))
        .item("sequence", n(3))
        .item("waits_for", n(2))
        .item("payload", s(&three.to_string()))
        .item(outbox::inbox::PARKED_AT, s("2026-12-02T06:00:00.000Z"))
        .send()
        .await
        .expect("the old row written");

    // Sequence 2: the count (0) says nothing is parked, so its commit does not drain 3.
    let two = consumer.handle_payload_until(&raw(&order_event("o-L", "OrderPaid", 2)), deadline()).await.expect("applied");
    assert!(two.parked_applied.is_empty(), "the count cannot see an uncounted row: {two:?}");

    // The check applies 3 (its predecessor is applied) and removes its row; the next finds nothing.
    let report = consumer.check_parked(&ParkedCheck::new(Duration::ZERO), deadline()).await;
    assert_eq!((report.parked, report.recovered, report.error.as_deref()), (0, 1, None), "none left parked, one recovered: {report:?}");
    let rows = local.scan(&table).await;
    let pk = |row: &std::collections::HashMap<String, AttributeValue>| common::s(row, "pk").to_owned();
    assert!(rows.iter().any(|r| pk(r) == format!("{consumer_name}#o-L-3")), "3 applied: its inbox claim");
    assert!(!rows.iter().any(|r| pk(r).starts_with(&format!("{consumer_name}#parked#"))), "its parked row removed");
    let ordering = rows.iter().find(|r| pk(r) == format!("{consumer_name}#aggregate#Order#o-L")).expect("the ordering row");
    assert_eq!(
        (ordering.get("last_sequence"), ordering.get(outbox::inbox::PARKED_COUNT)),
        (Some(&n(3)), Some(&AttributeValue::N("0".into()))),
        "{ordering:?}"
    );
    let again = consumer.check_parked(&ParkedCheck::new(Duration::ZERO), deadline()).await;
    assert_eq!((again.parked, again.recovered), (0, 0), "{again:?}");
    local.shutdown().await;
}
