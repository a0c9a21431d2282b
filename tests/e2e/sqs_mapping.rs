//! The local runtime's SQS event source mapping, with the real `WebhookDispatcherFunction`
//! binary on the emulator: a bus event reaches `WebhookDeliveryQueue` through the standalone
//! `WebhookDeliveryRule`; the mapping invokes the dispatcher with `SqsEvent`s and deletes only
//! what the invocation settled (`ReportBatchItemFailures`): a subscriber answering 500 gets its
//! next attempt from the copy the dispatcher re-enqueued and is then delivered, every handled
//! message is deleted at once; an invocation that fails deletes nothing, and the queue's `maxReceiveCount`
//! moves the message to its dead-letter queue (SQS — moto — does that on receive).

use crate::common::{Deadline, Local};
use outbox_cli::dlq;
use outbox_local::scenarios::demo::subscriber::SubscriberServer;
use outbox_webhooks::Secret;

/// The sample bus event (`events/order-created.json`) as a PutEvents entry on the stack's bus.
fn order_created(bus: &str) -> aws_sdk_eventbridge::types::PutEventsRequestEntry {
    let text = std::fs::read_to_string(crate::common::root().join("events/order-created.json")).expect("events/order-created.json");
    let event: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source("example.orders")
        .detail_type("OrderCreated")
        .detail(event["detail"].to_string())
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_items_come_back_after_their_visibility_and_settled_ones_are_deleted() {
    let mut local = Local::start().await;
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let server = SubscriberServer::start(stopped).await.expect("a loopback port");
    let secret = Secret::generate();
    let secret_name = format!("{}-webhook-local", local.stack_name);
    aws_sdk_secretsmanager::Client::new(&local.runtime.sdk)
        .create_secret()
        .name(&secret_name)
        .secret_string(secret.to_whsec())
        .send()
        .await
        .expect("CreateSecret");
    let good = server.add("good", vec![secret.clone()], vec![(204, None)]);
    let flaky = server.add("flaky", vec![secret.clone()], vec![(500, None), (200, None)]);
    local.add_webhook_subscriber("good", &good, &secret_name).await;
    local.add_webhook_subscriber("flaky", &flaky, &secret_name).await;
    local.spawn_pipelines();

    let bus = local.runtime.stack.buses[0].name.clone();
    let out = local.events.put_events().entries(order_created(&bus)).send().await.expect("PutEvents");
    assert_eq!(out.failed_entry_count(), 0, "{out:?}");

    let deadline = Deadline::new("good delivered once, flaky after one 500");
    while !(server.received_by("good").len() == 1 && server.received_by("flaky").len() == 2) {
        deadline.tick(|| format!("{:?}", server.received())).await;
    }
    let queue = local.runtime.stack.queue("Webhooks/WebhookDeliveryQueue").cloned().expect("the delivery queue");
    let deadline = Deadline::new("the delivery queue empty (every message settled and deleted)");
    while dlq::depth(&local.sqs, &queue).await.expect("depth") > 0 {
        deadline.tick(|| format!("{:?}", local.runtime.stats.snapshot())).await;
    }

    let received = server.received();
    assert!(received.iter().all(|r| r.verified.is_ok()), "every request verifies: {received:?}");
    let flaky = server.received_by("flaky");
    assert_eq!((flaky[0].status, flaky[1].status), (500, 200));
    assert_eq!(flaky[0].webhook_id, flaky[1].webhook_id, "a retry carries the same webhook-id");
    let c = local.runtime.stats.snapshot();
    // Every receive was deleted (settled): flaky's retry is a new message, sent before its
    // failed one was settled; no invocation failed. (The consumer's own InventoryRejected goes
    // through the rule and mapping too.)
    assert_eq!((c.sqs_messages_failed, c.sqs_invocation_errors), (0, 0), "{c:?}");
    assert_eq!(c.sqs_messages_received, c.sqs_messages_deleted + c.sqs_messages_failed, "{c:?}");
    assert!(c.sqs_messages_received >= 4, "the event, good's and flaky's twice: {c:?}");
    let dead = local.runtime.stack.queue("Webhooks/WebhookDeadLetterQueue").cloned().expect("the webhook DLQ");
    assert_eq!(dlq::depth(&local.sqs, &dead).await.expect("depth"), 0);

    // `trace` shows each subscriber's delivery, from the dispatcher's inbox rows.
    let trace = outbox_cli::trace::trace(
        &local.runtime.sdk,
        &outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("resources"),
        "01a22651-6c7b-7e1a-89c3-d4e5f6071830",
        &outbox_cli::trace::Lookup::Scan,
    )
    .await
    .expect("trace");
    let mut deliveries: Vec<(String, String)> =
        trace.consumers.iter().filter(|c| c.consumer.contains("subscriber")).map(|c| (c.consumer.clone(), c.state.clone())).collect();
    deliveries.sort();
    assert_eq!(
        deliveries,
        [
            ("webhook-dispatcher → subscriber flaky".to_owned(), "delivered".to_owned()),
            ("webhook-dispatcher → subscriber good".to_owned(), "delivered".to_owned())
        ],
        "{}",
        trace.render()
    );
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_invocation_deletes_nothing_and_max_receive_count_dead_letters() {
    // The queue hands a message back after 3 s and gives up after 2 receives; the dispatcher
    // cannot start (an invalid setting), so every invocation fails.
    let webhooks = "blocks/webhooks/template.yaml";
    let template = crate::common::sample_template_with(&[
        (webhooks, "VisibilityTimeout: 180", "VisibilityTimeout: 3"),
        (webhooks, "maxReceiveCount: 5", "maxReceiveCount: 2"),
    ]);
    let mut options = crate::common::fast_options();
    options.environment.entry("Webhooks/WebhookDispatcherFunction".into()).or_default().insert("WEBHOOK_RETRY_SCHEDULE".into(), "many".into());
    let mut local = Local::start_with(template, crate::common::endpoint(), options, None).await;
    local.spawn_pipelines();

    let bus = local.runtime.stack.buses[0].name.clone();
    local.events.put_events().entries(order_created(&bus)).send().await.expect("PutEvents");
    // The event, and the consumer's InventoryRejected that followed it through the same rule.
    let dead = local.runtime.stack.queue("Webhooks/WebhookDeadLetterQueue").cloned().expect("the webhook DLQ");
    let deadline = Deadline::new("both events in WebhookDeadLetterQueue after 2 receives each");
    while dlq::depth(&local.sqs, &dead).await.expect("depth") < 2 {
        deadline.tick(|| format!("{:?}", local.runtime.stats.snapshot())).await;
    }
    let c = local.runtime.stats.snapshot();
    // The counters are every SQS mapping's: the consumer's (reserve-inventory on the consumer
    // kit's queue) took the OrderCreated once and settled it (rejected: no stock).
    let consumer = c.outcome_count("rejected");
    assert_eq!(consumer, 1, "the consumer's one delivery: {c:?}");
    assert_eq!(c.sqs_invocation_errors, c.sqs_invocations - consumer, "every dispatcher invocation failed: {c:?}");
    assert_eq!(
        (c.sqs_messages_deleted, c.sqs_messages_failed),
        (consumer, c.sqs_messages_received - consumer),
        "nothing of the dispatcher's deleted: {c:?}"
    );
    assert_eq!(
        c.sqs_messages_received - consumer,
        4,
        "each of the 2 events received maxReceiveCount = 2 times by the dispatcher, then moved by SQS: {c:?}"
    );
    let messages = dlq::peek(&local.sqs, &dead).await.expect("peek");
    let ids: Vec<serde_json::Value> = messages
        .iter()
        .map(|m| serde_json::from_str::<serde_json::Value>(&m.body).expect("a bus event")["detail"]["metadata"]["type"].clone())
        .collect();
    assert!(ids.contains(&serde_json::json!("OrderCreated")), "the event itself, as SQS moved it: {ids:?}");
    // `dlq list` says why it is there, and that a redrive may help.
    for m in &messages {
        assert_eq!((m.cause.as_str(), m.permanent), ("MaxReceiveCountExceeded", false), "{m:?}");
        assert!(m.reason.contains("maxReceiveCount receives"), "{}", m.reason);
    }
    let queue = local.runtime.stack.queue("Webhooks/WebhookDeliveryQueue").cloned().expect("the delivery queue");
    assert_eq!(dlq::depth(&local.sqs, &queue).await.expect("depth"), 0);
    local.shutdown().await;
}
