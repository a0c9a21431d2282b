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
use outbox::ordering::Ordered;
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_template::Template;
use serde_json::{json, Value};

use crate::common;

/// An ordered consumer named `name` on `table`, whose handler answers the event's sequence.
fn ordered_consumer(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    name: &str,
) -> (Ordered<Inbox>, Consumer<Ordered<Inbox>, MemoryDeadLetters, u64>) {
    let inbox = Ordered::new(Inbox::new(dynamodb.clone(), table, name, Duration::from_secs(3600)));
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
    assert_eq!(index, outbox::ordering::PARKED_INDEX);
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
