//! `outbox-local dlq practice` makes a real dead letter through the real path: a malformed event
//! on the bus, delivered by the consumer kit's rule and delivery queue to the real
//! reserve-inventory binary, dead-lettered by the consumer library with a readable reason; a
//! redrive of it is refused (its cause is permanent) until forced.

use std::time::Duration;

use crate::common::Local;
use outbox_cli::dlq::{self, RedriveOptions, Selection};
use outbox_local::scenarios::practice;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn practice_puts_one_readable_dead_letter_in_the_consumer_queue() {
    let mut local = Local::start().await;
    local.spawn_pipelines();
    let made = practice::run(&local.runtime.sdk, &local.runtime.stack, Duration::from_secs(60)).await;
    let queue = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the consumer DLQ").clone();
    // Read from the queue itself, not from what the verb returned.
    let held =
        local.sqs.receive_message().queue_url(&queue.url).max_number_of_messages(10).visibility_timeout(0).send().await.expect("ReceiveMessage");
    let bodies: Vec<serde_json::Value> =
        held.messages().iter().filter_map(|m| m.body()).map(|b| serde_json::from_str(b).expect("a JSON dead letter")).collect();
    let practice = made.unwrap_or_else(|e| panic!("dlq practice: {e}"));
    assert_eq!(bodies.len(), 1, "one dead letter: {bodies:?}");
    let body = &bodies[0];
    assert_eq!(body["kind"], "outbox-consumer-failure", "{body}");
    assert_eq!(body["consumer"], "reserve-inventory", "{body}");
    assert_eq!(body["error_type"], "MalformedEvent", "{body}");
    assert_eq!(body["event_id"], practice.event_id.as_str(), "{body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("detail.data") || reason.contains("data"), "the reason names what is malformed: {reason}");
    assert_eq!(
        (practice.function.as_str(), practice.message.cause.as_str(), practice.message.permanent),
        ("ReserveInventoryFunction", "MalformedEvent", true)
    );

    let run = outbox_local::hint::command("outbox-local", None, Some("shop"), Some("http://127.0.0.1:5000"));
    let steps = practice::next_steps(&practice, &run);
    assert!(
        steps.contains(&format!("AWS_ENDPOINT_URL=http://127.0.0.1:5000 outbox-local --stack-name shop dlq redrive --id {}", practice.event_id)),
        "{steps}"
    );

    // What the operator practises: the redrive is refused, the message stays.
    let bus = outbox_cli::republisher::Republisher::Classic { client: local.events.clone(), bus: local.runtime.stack.buses[0].name.clone() };
    let one = Selection { ids: vec![practice.event_id.clone()], ..Default::default() };
    let options = RedriveOptions { bus: &bus, replayer: None, dry_run: false, selection: &one, force: false };
    let report = dlq::redrive(&local.sqs, &queue, &options, |_, _| {}).await.expect("redrive ran");
    assert_eq!((report.redriven.len(), report.left.len()), (0, 1), "a permanent cause is refused without --force: {report:?}");
    local.shutdown().await;
}
