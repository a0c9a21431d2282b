//! The `outbox` binary as an operator runs it, on the emulator with the sample template: a
//! consumer's dead letters redriven given the queue's URL, its name, its ARN or its logical id;
//! a poison message refused without `--force`, its cause named; a wrong queue answered with the
//! candidates; a destructive verb refused without `--yes` when nobody can answer; an event traced
//! by its id alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_cli::stack::{Mode, QueueInfo, Stack};
use outbox_cli::template::Template;
use outbox_local::emulator::Emulator;

const STACK: &str = "operator-cli";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn consumer_failure(event_id: &str, error_type: &str) -> String {
    let event = serde_json::json!({
        "version": "0", "id": "env", "detail-type": "OrderCreated", "source": "example.orders",
        "detail": {"metadata": {"id": event_id, "type": "OrderCreated"}, "data": {"order_id": "o-1"}}
    });
    serde_json::json!({"kind": "outbox-consumer-failure", "consumer": "reserve-inventory", "error_type": error_type,
           "reason": format!("{error_type} of {event_id}"), "event_id": event_id, "failed_at": "2026-12-01T00:00:00Z", "event": event})
    .to_string()
}

fn outbox(endpoint: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("--template")
        .arg(root().join("template.yaml"))
        .args(["--stack-name", STACK, "--endpoint-url", endpoint])
        .args(args)
        .env("AWS_REGION", "us-east-1")
        .stdin(Stdio::null())
        .output()
        .expect("the outbox binary runs")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

async fn depth(sqs: &aws_sdk_sqs::Client, queue: &QueueInfo) -> u64 {
    outbox_cli::dlq::depth(sqs, queue).await.expect("the queue's depth")
}

#[tokio::test]
async fn redrive_takes_the_queue_by_url_name_arn_or_logical_id_and_refuses_poison() {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let endpoint = emulator.endpoint.clone();
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = Stack::set_up(&sdk, template, STACK, EMULATOR_ACCOUNT, Mode::Provision).await.expect("provisioned");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue = stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the consumer DLQ").clone();

    for (i, form) in [queue.url.clone(), queue.name.clone(), queue.arn.clone(), queue.logical_id.clone()].iter().enumerate() {
        let id = format!("e-{i}");
        sqs.send_message().queue_url(&queue.url).message_body(consumer_failure(&id, "SequenceGap")).send().await.expect("sent");
        let out = outbox(&endpoint, &["--yes", "dlq", "redrive", "--queue", form, "--watch", "0"]);
        assert!(out.status.success(), "redrive --queue {form}: {}", text(&out));
        assert!(text(&out).contains("re-published and deleted 1 message(s)"), "{}", text(&out));
        assert_eq!(depth(&sqs, &queue).await, 0, "--queue {form}: the dead letter left the queue");
    }

    // A poison message: refused without --force, its cause named; nothing leaves the queue.
    sqs.send_message().queue_url(&queue.url).message_body(consumer_failure("e-poison", "MalformedEvent")).send().await.expect("sent");
    let out = outbox(&endpoint, &["--yes", "dlq", "redrive", "--queue", &queue.name, "--watch", "0"]);
    assert_eq!(out.status.code(), Some(2), "something was left: {}", text(&out));
    assert!(text(&out).contains("MalformedEvent: a permanent cause") && text(&out).contains("--force"), "{}", text(&out));
    assert_eq!(depth(&sqs, &queue).await, 1);

    // Without --yes and without a terminal: nothing is done, and it says how to do it.
    let out = outbox(&endpoint, &["dlq", "purge", "--queue", &queue.name]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("pass --yes"), "{}", text(&out));
    assert_eq!(depth(&sqs, &queue).await, 1, "nothing deleted");

    // A wrong queue: a clear error listing the candidates.
    let out = outbox(&endpoint, &["--yes", "dlq", "redrive", "--queue", "no-such-queue"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = text(&out);
    assert!(err.contains("no dead-letter queue of template") && err.contains("matches \"no-such-queue\""), "{err}");
    assert!(err.contains(&format!("  {}  {}  {}", queue.logical_id, queue.name, queue.url)), "{err}");

    // The list says what it read, and counts causes.
    let out = outbox(&endpoint, &["dlq", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed["groups"][0]["cause"], "MalformedEvent", "{listed}");

    // Redrive and purge report in JSON for scripts: what was left and why, what was deleted.
    let out = outbox(&endpoint, &["--yes", "dlq", "redrive", "--queue", &queue.name, "--watch", "0", "--json"]);
    assert_eq!(out.status.code(), Some(2), "the poison is left: {}", text(&out));
    let redriven: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(redriven["queues"][0]["report"]["left"].as_array().map(Vec::len), Some(1), "{redriven}");
    let out = outbox(&endpoint, &["--yes", "dlq", "purge", "--queue", &queue.name, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let purged: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(purged["queues"][0]["report"]["deleted"].as_array().map(Vec::len), Some(1), "{purged}");
    assert_eq!(depth(&sqs, &queue).await, 0, "purged");

    // An event traced by its id alone: the outbox table's event-id index, no scan.
    let outbox_table = stack.table("OutboxTable").expect("the outbox table").name.clone();
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    aws_sdk_dynamodb::Client::new(&sdk)
        .put_item()
        .table_name(&outbox_table)
        .item("pk", s("Order#o-7"))
        .item("sk", s(&format!("{:020}", 3)))
        .item("event_id", s("e-traced"))
        .item("event_type", s("OrderCancelled"))
        .item("source", s("example.orders"))
        .item("sequence", aws_sdk_dynamodb::types::AttributeValue::N("3".into()))
        .send()
        .await
        .expect("an outbox item");
    let out = outbox(&endpoint, &["trace", "e-traced", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let traced: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((traced["outbox_lookup"].as_str(), traced["outbox"]["pk"].as_str()), (Some("index"), Some("Order#o-7")), "{traced}");
    assert!(!text(&out).contains("scanning"), "{}", text(&out));
}

#[test]
fn help_names_every_verb_and_the_stack_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_outbox")).arg("--help").output().expect("runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for word in ["dlq", "trace", "webhooks", "ordering", "--stack", "--template", "--endpoint-url", "--yes"] {
        assert!(help.contains(word), "{word} in {help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_outbox")).args(["dlq", "list"]).env_remove("OUTBOX_STACK").output().expect("runs");
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --stack NAME"), "{}", String::from_utf8_lossy(&out.stderr));
}
