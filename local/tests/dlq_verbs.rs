//! The dead-letter verbs as an operator uses them, on the emulator: messages grouped by cause,
//! a redrive that refuses permanent causes unless forced and reports per cause, selection by
//! id, cause and age, and archive/purge that delete only what they selected.

use std::path::{Path, PathBuf};
use std::time::Duration;

use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_cli::dlq::{self, RedriveOptions, Selection};
use outbox_local::emulator::Emulator;
use outbox_template::Template;
use serde_json::json;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn consumer_failure(event_id: &str, error_type: &str) -> String {
    let event = json!({
        "version": "0", "id": "env", "detail-type": "OrderCreated", "source": "example.orders",
        "detail": {"metadata": {"id": event_id, "type": "OrderCreated"}, "data": {"order_id": "o-1"}}
    });
    json!({"kind": "outbox-consumer-failure", "consumer": "reserve-inventory", "error_type": error_type,
           "reason": format!("{error_type} of {event_id}"), "event_id": event_id, "failed_at": "2026-12-01T00:00:00Z", "event": event})
    .to_string()
}

#[tokio::test]
async fn dlq_verbs_group_select_refuse_permanent_causes_and_archive() {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let sdk = sdk_config(&Target { endpoint: Some(emulator.endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = outbox_local::provision::provision(&sdk, template, "dlq-test", EMULATOR_ACCOUNT).await.expect("provisioned");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue = stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the consumer DLQ").clone();
    let bus = outbox_cli::republisher::Republisher::Classic { client: aws_sdk_eventbridge::Client::new(&sdk), bus: stack.buses[0].name.clone() };
    for (id, cause) in [("e-1", "MalformedEvent"), ("e-2", "MalformedEvent"), ("e-3", "SequenceGap"), ("e-4", "SequenceGap")] {
        sqs.send_message().queue_url(&queue.url).message_body(consumer_failure(id, cause)).send().await.expect("sent");
    }

    let listed = dlq::peek(&sqs, &queue).await.expect("listed");
    let groups = dlq::group_by_cause(&listed);
    let summary: Vec<(&str, usize, bool)> = groups.iter().map(|g| (g.cause.as_str(), g.count, g.permanent)).collect();
    assert_eq!(summary, [("MalformedEvent", 2, true), ("SequenceGap", 2, false)], "{groups:?}");
    assert!(dlq::format_groups(&groups).contains("permanent"));

    // One SequenceGap by event id; nothing else moves.
    let one = Selection { ids: vec!["e-3".into()], ..Default::default() };
    let report = dlq::redrive(&sqs, &queue, &RedriveOptions { bus: &bus, replayer: None, dry_run: false, selection: &one, force: false }, |_, _| {})
        .await
        .expect("redriven");
    assert_eq!((report.redriven.len(), report.left.len()), (1, 0), "{report:?}");
    assert_eq!(dlq::peek(&sqs, &queue).await.expect("listed").len(), 3, "only the selected message left the queue");

    // Everything: the permanent cause is refused and says why; the rest goes.
    let all = Selection::default();
    let report = dlq::redrive(&sqs, &queue, &RedriveOptions { bus: &bus, replayer: None, dry_run: false, selection: &all, force: false }, |_, _| {})
        .await
        .expect("redriven");
    assert_eq!(report.by_cause.get("SequenceGap"), Some(&(1, 0)), "{report:?}");
    assert_eq!(report.by_cause.get("MalformedEvent"), Some(&(0, 2)), "{report:?}");
    assert!(report.left.iter().all(|(_, why)| why.contains("permanent")), "{report:?}");

    // Forced (dry run): the permanent cause would go too; nothing is sent or deleted.
    let forced = dlq::redrive(&sqs, &queue, &RedriveOptions { bus: &bus, replayer: None, dry_run: true, selection: &all, force: true }, |_, _| {})
        .await
        .expect("checked");
    assert_eq!((forced.redriven.len(), forced.left.len()), (2, 0), "{forced:?}");
    assert_eq!(dlq::peek(&sqs, &queue).await.expect("listed").len(), 2);

    // Nothing is older than a day; archive e-1 by id, then purge the rest of its cause.
    let old = Selection { older_than: Some(Duration::from_secs(86_400)), ..Default::default() };
    assert!(dlq::purge(&sqs, &queue, &old, None).await.expect("purged").deleted.is_empty());
    let dir = std::env::temp_dir().join(format!("dlq-archive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("archive.jsonl");
    let mut file = std::fs::File::create(&path).expect("archive file");
    let e1 = Selection { ids: vec!["e-1".into()], ..Default::default() };
    let archived = dlq::purge(&sqs, &queue, &e1, Some(&mut file)).await.expect("archived");
    assert_eq!(archived.deleted.len(), 1);
    let lines = std::fs::read_to_string(&path).expect("archive written");
    assert_eq!(lines.lines().count(), 1);
    assert!(lines.contains("\"event_id\":\"e-1\"") && lines.contains("outbox-consumer-failure"), "{lines}");
    let malformed = Selection { cause: Some("MalformedEvent".into()), ..Default::default() };
    assert_eq!(dlq::purge(&sqs, &queue, &malformed, None).await.expect("purged").deleted.len(), 1);
    assert!(dlq::peek(&sqs, &queue).await.expect("listed").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
