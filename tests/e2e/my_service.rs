//! `examples/my-service` as a whole service on the local runtime, from its own template: its
//! producer (`RegisterCustomerFunction`), the relay block, the consumer kit's rule → delivery
//! queue → SQS event source mapping, and its consumer (`WelcomeMailFunction`). A customer
//! registered is relayed and welcomed exactly once (one mail row, one inbox claim); the same event
//! published again is absorbed by the inbox; a poison event (an address that is not one) ends in
//! the kit's dead-letter queue and sends nothing. Checked from the tables and queues.
//!
//! The example is a Cargo workspace of its own, outside this one: its binaries are built into
//! this workspace's target directory (`cd examples/my-service && cargo build` with
//! `CARGO_TARGET_DIR` set, as scripts/test's example step does, which then runs this test with
//! `--ignored`; without `OUTBOX_LOCAL_NO_BUILD` the test builds them itself).

use std::path::PathBuf;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use outbox_cli::dlq;
use outbox_local::lambda::binaries;
use outbox_local::runtime::RuntimeOptions;
use outbox_template::Template;
use serde_json::{json, Value};

use crate::common::{self, s, Deadline, Local};

fn example() -> PathBuf {
    common::root().join("examples/my-service")
}

/// The example's function binaries, beside the workspace's (the relay's `outbox-relay`).
fn example_binaries() {
    let target = common::bin_dir().parent().expect("<target>/debug has a parent").to_owned();
    let prebuilt = std::env::var_os("OUTBOX_LOCAL_NO_BUILD").is_some_and(|v| !v.is_empty() && v != "0");
    if !prebuilt {
        binaries::build(&example(), ["my-service", "welcome-mail"], Some(&target)).unwrap_or_else(|e| panic!("examples/my-service: {e}"));
    }
}

/// `detail` as a `CustomerRegistered` entry on `bus`.
fn customer_registered(bus: &str, detail: &Value) -> PutEventsRequestEntry {
    PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source("example.customers")
        .detail_type("CustomerRegistered")
        .detail(detail.to_string())
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs examples/my-service's binaries: scripts/test's example step builds them, then runs it with --ignored"]
async fn a_customer_is_welcomed_once_a_duplicate_is_absorbed_and_poison_is_dead_lettered() {
    example_binaries();
    let template = Template::load(&example().join("template.yaml")).expect("examples/my-service/template.yaml loads");
    // The repository's local/env.json is for the sample's functions, not the example's.
    let options = RuntimeOptions { environment: Default::default(), ..common::fast_options() };
    let mut local = Local::start_with(template, common::endpoint(), options, None).await;
    let bus = local.runtime.stack.buses[0].name.clone();
    // A copy of what the relay publishes, to publish it again.
    let spy = local.spy_on_bus(&bus, "example.customers").await;
    local.spawn_pipelines();
    let (mails, inbox) = (local.table("WelcomeMailsTable"), local.table("ConsumerKit/InboxTable"));
    let delivery = local.runtime.stack.queue("ConsumerKit/DeliveryQueue").cloned().expect("the kit's delivery queue");
    let dead = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("the kit's dead-letter queue");
    let stats = |local: &Local| format!("{:?}", local.runtime.stats.snapshot());

    // Registered → relayed → consumed: one mail, one inbox claim.
    let producer = local.runtime.function("RegisterCustomerFunction").expect("the producer");
    let answer = producer.invoke(r#"{"customer_id": "c-42", "email": "ada@example.com"}"#).await.result.expect("the producer answers");
    assert_eq!(answer["status"], "registered", "{answer}");
    let event_id = answer["event_id"].as_str().expect("the event's id").to_owned();
    let deadline = Deadline::new("c-42's welcome mail sent");
    while local.query_pk(&mails, "CUSTOMER#c-42").await.is_empty() {
        deadline.tick(|| stats(&local)).await;
    }
    let claim = local.query_pk(&inbox, &format!("welcome-mail#{event_id}")).await;
    assert_eq!(claim.len(), 1, "the consumer's inbox claim of the event: {claim:?}");
    // `trace` finds that claim under the name the function runs with (the template's
    // CONSUMER_NAME, which main reads with outbox_lambda::consumer_name).
    let resources = outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("the stack's resources");
    let traced = outbox_cli::trace::trace(&local.runtime.sdk, &resources, &event_id, &outbox_cli::trace::Lookup::Scan).await.expect("trace");
    let row = traced.consumers.iter().find(|c| c.function == "WelcomeMailFunction").unwrap_or_else(|| panic!("{}", traced.render()));
    assert_eq!((row.consumer.as_str(), row.state.starts_with("applied")), ("welcome-mail", true), "{}", traced.render());

    // The same event published again: a second delivery (another envelope id), no second mail.
    let relayed = local.sqs.receive_message().queue_url(&spy).wait_time_seconds(5).send().await.expect("ReceiveMessage spy");
    let relayed = relayed.messages().first().and_then(|m| m.body()).expect("the relayed event on the spy queue");
    let relayed: Value = serde_json::from_str(relayed).expect("a bus event");
    assert_eq!(relayed["detail"]["metadata"]["id"], event_id.as_str(), "{relayed}");
    let out = local.events.put_events().entries(customer_registered(&bus, &relayed["detail"])).send().await.expect("PutEvents");
    assert_eq!(out.failed_entry_count(), 0, "{out:?}");

    // Poison: an address that is not one can never be sent to.
    let poison_id = uuid::Uuid::now_v7().to_string();
    let mut poison = relayed["detail"].clone();
    poison["metadata"]["id"] = json!(poison_id);
    poison["metadata"]["subject"] = json!("c-43");
    poison["data"] = json!({"customer_id": "c-43", "email": "not-an-address"});
    let out = local.events.put_events().entries(customer_registered(&bus, &poison)).send().await.expect("PutEvents");
    assert_eq!(out.failed_entry_count(), 0, "{out:?}");

    // Both settled: the poison dead-lettered, the delivery queue empty (the duplicate deleted).
    let deadline = Deadline::new("the poison event in the kit's dead-letter queue, the delivery queue empty");
    while dlq::depth(&local.sqs, &dead).await.expect("depth") == 0 || dlq::depth(&local.sqs, &delivery).await.expect("depth") > 0 {
        deadline.tick(|| stats(&local)).await;
    }
    let dead_letters = dlq::peek(&local.sqs, &dead).await.expect("peek");
    assert_eq!(dead_letters.len(), 1, "{dead_letters:?}");
    assert_eq!(dead_letters[0].event_id.as_deref(), Some(poison_id.as_str()), "{:?}", dead_letters[0]);
    assert!(dead_letters[0].permanent, "no redrive can fix it: {:?}", dead_letters[0]);

    // Exactly once: one mail in the table for the two deliveries, none for the poison.
    let sent = local.scan(&mails).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!((s(&sent[0], "pk"), s(&sent[0], "event_id")), ("CUSTOMER#c-42", event_id.as_str()));
    let c = local.runtime.stats.snapshot();
    assert!(c.sqs_messages_received >= 3, "the event, its duplicate and the poison were delivered: {c:?}");
    local.shutdown().await;
}
