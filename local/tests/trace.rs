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

/// `outbox-local up` on the sample template, stopped (SIGINT, then killed) when dropped.
struct Up {
    child: std::process::Child,
    endpoint: String,
    api: String,
}

impl Drop for Up {
    fn drop(&mut self) {
        let pid = self.child.id();
        // Ctrl-C, to the child this test started (by its id): `up` stops its functions and emulator.
        let _ = std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `outbox-local --template <sample> --stack-name <stack> <args…>` with cargo's target
/// directory (the functions' binaries are built there, or found built).
fn outbox_local(stack: &str) -> std::process::Command {
    let exe = Path::new(env!("CARGO_BIN_EXE_outbox-local"));
    let target = exe.parent().and_then(Path::parent).expect("<target>/debug/outbox-local");
    let mut command = std::process::Command::new(exe);
    command.arg("--template").arg(root().join("template.yaml")).args(["--stack-name", stack, "--target-dir"]).arg(target);
    command.env("AWS_REGION", "us-east-1").env_remove("AWS_ENDPOINT_URL").current_dir(root());
    command
}

/// Starts `up` for `stack` on a free port and waits until it says where it is.
fn up(stack: &str) -> Up {
    use std::io::BufRead;
    let mut child = outbox_local(stack)
        .args(["up", "--port", "0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("outbox-local up starts");
    let stdout = child.stdout.take().expect("piped");
    let (mut endpoint, mut api) = (None, None);
    let mut lines = std::io::BufReader::new(stdout).lines();
    while let Some(Ok(line)) = lines.next() {
        if let Some(rest) = line.split_once(" is up on ").map(|(_, r)| r) {
            endpoint = rest.split_whitespace().next().map(str::to_owned);
        }
        if let Some(url) = line.trim().strip_prefix("HTTP API:") {
            api = Some(url.trim().to_owned());
        }
        if line.starts_with("Ctrl-C stops") {
            break;
        }
    }
    // The rest of its output, drained so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let up = Up { child, endpoint: endpoint.unwrap_or_default(), api: api.unwrap_or_default() };
    assert!(up.endpoint.starts_with("http://") && up.api.starts_with("http://"), "outbox-local up did not say where it is");
    up
}

/// The first time of `stage` in a `trace --json` timeline (RFC 3339 UTC with milliseconds, so
/// they compare as text).
fn first_at(timeline: &[serde_json::Value], stage: &str) -> Option<String> {
    timeline.iter().filter(|s| s["stage"] == stage).filter_map(|s| s["at"].as_str().map(str::to_owned)).min()
}

/// After an order flows through `up`, `outbox-local trace --json` names the trace id of the
/// outbox item's `traceparent` and times it committed ≤ published ≤ delivered ≤ applied, the
/// publish and delivery times recorded by the local runtime's journal.
#[tokio::test]
async fn outbox_local_trace_times_an_event_from_commit_to_applied() {
    const STACK: &str = "trace-timeline";
    let state_dir = root().join(".local").join(STACK);
    let _ = std::fs::remove_file(state_dir.join(outbox_local::journal::FILE));
    let up = up(STACK);

    let issuer = outbox_local::runtime::authorizer::LocalIssuer::load_or_create(&state_dir).expect("the stack's issuer");
    let client = outbox_local::runtime::authorizer::client_as(&issuer, "trace-customer").build().expect("a client");
    let order = serde_json::json!({"customer_id": "c-1", "currency": "EUR", "lines": [{"sku": "SKU-RED-MUG", "quantity": 1, "unit_price": "9.50"}]});
    let response = client
        .post(format!("{}/orders", up.api))
        .header("content-type", "application/json")
        .body(order.to_string())
        .send()
        .await
        .expect("POST /orders");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    assert_eq!(status, 201, "{text}");
    let created: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let event_id = created["event_id"].as_str().expect("the order's event id").to_owned();

    // Until a consumer applied it (the relay polls the stream, the consumers their queues).
    let mut trace = serde_json::Value::Null;
    for _ in 0..120 {
        let output = outbox_local(STACK).args(["--endpoint", &up.endpoint, "trace", &event_id, "--json"]).output().expect("trace runs");
        trace = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
        let timeline = trace["timeline"].as_array().cloned().unwrap_or_default();
        if first_at(&timeline, "applied").is_some() && first_at(&timeline, "delivered").is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let timeline = trace["timeline"].as_array().cloned().unwrap_or_default();

    // The trace id is the outbox item's traceparent's.
    let sdk = sdk_config(&Target { endpoint: Some(up.endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = outbox_template::stack::Stack::look_up(&sdk, template, STACK, EMULATOR_ACCOUNT).await.expect("the stack");
    let outbox_table = stack.table("OutboxTable").expect("the outbox table").name.clone();
    let items = aws_sdk_dynamodb::Client::new(&sdk)
        .scan()
        .table_name(&outbox_table)
        .filter_expression("event_id = :id")
        .expression_attribute_values(":id", s(&event_id))
        .send()
        .await
        .expect("scanned");
    let traceparent = items.items()[0].get("traceparent").and_then(|v| v.as_s().ok()).expect("the outbox item's traceparent").clone();
    assert_eq!(trace["trace_id"].as_str(), Some(outbox::envelope::trace_id(Some(&traceparent))), "{trace:#}");

    let at = |stage: &str| first_at(&timeline, stage).unwrap_or_else(|| panic!("no {stage} stage in {trace:#}"));
    let (committed, published, delivered, applied) = (at("committed"), at("published"), at("delivered"), at("applied"));
    assert!(committed <= published && published <= delivered && delivered <= applied, "out of order: {trace:#}");
    for s in timeline.iter().filter(|s| s["stage"] == "published" || s["stage"] == "delivered") {
        assert_eq!(s["recorded_by"], "local runtime", "{s}");
    }
    let gaps: Vec<i64> = timeline.iter().skip(1).filter_map(|s| s["gap_ms"].as_i64()).collect();
    assert_eq!(gaps.len(), timeline.len() - 1, "every stage after the first has a gap: {trace:#}");
    assert!(gaps.iter().all(|g| *g >= 0), "{trace:#}");

    // The lines a person reads: the trace id and the timeline.
    let output = outbox_local(STACK).args(["--endpoint", &up.endpoint, "trace", &event_id]).output().expect("trace runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains(&format!("  trace      {}", outbox::envelope::trace_id(Some(&traceparent)))), "{text}");
    assert!(text.contains("  timeline\n") && text.contains(" ms  published") && text.contains("(recorded by the local runtime)"), "{text}");
}
