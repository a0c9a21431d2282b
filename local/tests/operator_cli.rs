//! The `outbox` binary as an operator runs it, on the emulator with the sample template: a
//! consumer's dead letters redriven given the queue's URL, its name, its ARN or its logical id;
//! a poison message refused without `--force`, its cause named; a wrong queue answered with the
//! candidates; a destructive verb refused without `--yes` when nobody can answer; an event traced
//! by its id alone; a replay on the Custom Event Bus (a replay subscriber, then `--cleanup`). (Here, not in the operator's crate: the emulator and the provisioner are the
//! local runtime's, and the operator's crate depends on nothing above it.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::emulator::Emulator;
use outbox_local::provision::provision;
use outbox_template::stack::QueueInfo;
use outbox_template::Template;

const STACK: &str = "operator-cli";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `outbox` binary, beside this package's `outbox-local` in cargo's target directory: built
/// here (once per test process) unless scripts/test built every workspace binary before the tests
/// (OUTBOX_LOCAL_NO_BUILD=1).
fn outbox_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(build_outbox)
}

fn build_outbox() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_outbox-local"));
    let debug = exe.parent().expect("the binary is in <target>/debug");
    if !std::env::var_os("OUTBOX_LOCAL_NO_BUILD").is_some_and(|v| !v.is_empty() && v != "0") {
        let target = debug.parent().expect("<target>/debug is in <target>");
        let built = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "outbox-cli", "--bin", "outbox", "--target-dir"])
            .arg(target)
            .current_dir(root())
            .status()
            .expect("cargo runs");
        assert!(built.success(), "building the outbox binary: {built}");
    }
    let outbox = debug.join("outbox");
    assert!(outbox.is_file(), "the outbox binary is built in {}", debug.display());
    outbox
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
    outbox_as(endpoint, STACK, args)
}

/// The `outbox` binary on the sample template as stack `stack`.
fn outbox_as(endpoint: &str, stack: &str, args: &[&str]) -> Output {
    Command::new(outbox_binary())
        .arg("--template")
        .arg(root().join("template.yaml"))
        .args(["--stack-name", stack, "--endpoint-url", endpoint])
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

// Two workers: the `outbox` binary runs (blocking) while the runtime's endpoint, served in this
// process (the Custom Event Bus in front of moto), answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_takes_the_queue_by_url_name_arn_or_logical_id_and_refuses_poison() {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let endpoint = emulator.endpoint.clone();
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = provision(&sdk, template, STACK, EMULATOR_ACCOUNT).await.expect("provisioned");
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

/// `trace` finds a consumer's rows under the name the function runs with (`CONSUMER_NAME`, read
/// by `outbox_lambda::consumer_name`, as the function reads it): an applied event is `applied`;
/// for a function without `CONSUMER_NAME` nothing is looked up and it says so, never `absent`; a
/// late predecessor the ordered inbox absorbed (its aggregate already past its sequence, so no
/// row was written) is `absorbed`; an event not arrived yet is `absent`.
#[tokio::test]
async fn trace_reads_rows_by_the_consumer_name_and_reports_an_absorbed_late_predecessor() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use outbox_cli::trace::{trace, Lookup, Trace};
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let sdk = sdk_config(&Target { endpoint: Some(emulator.endpoint.clone()), region: "us-east-1".into() }).await;
    let template = Template::load(&root().join("template.yaml")).expect("the sample template");
    let stack = provision(&sdk, template, "operator-trace", EMULATOR_ACCOUNT).await.expect("provisioned");
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let outbox_table = stack.table("OutboxTable").expect("the outbox table").name.clone();
    let inbox_table = stack.table("ConsumerKit/InboxTable").expect("the inbox table").name.clone();
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let n = |v: u64| AttributeValue::N(v.to_string());
    for (event_id, aggregate_id, sequence) in [("e-applied", "o-applied", 1), ("e-late", "o-late", 2), ("e-missing", "o-late", 4)] {
        dynamodb
            .put_item()
            .table_name(&outbox_table)
            .item("pk", s(&format!("Order#{aggregate_id}")))
            .item("sk", s(&outbox::envelope::OutboxItem::sort_key(sequence)))
            .item("event_id", s(event_id))
            .item("event_type", s("OrderCreated"))
            .item("source", s("example.orders"))
            .item("sequence", n(sequence))
            .send()
            .await
            .expect("an outbox item");
    }
    // Applied by reserve-inventory (the template's CONSUMER_NAME).
    let row = [
        ("pk", s("reserve-inventory#e-applied")),
        ("consumer", s("reserve-inventory")),
        ("event_id", s("e-applied")),
        ("outcome", s("reserved")),
        ("processed_at", s("2026-12-03T10:00:00.000Z")),
    ];
    dynamodb.put_item().table_name(&inbox_table).set_item(Some(row.map(|(k, v)| (k.to_owned(), v)).into())).send().await.expect("an inbox row");
    // Order o-late was released through 3 (its sequence 2 had not come): the late sequence 2
    // is a duplicate to the ordered inbox, which writes no row for it.
    let ordering = [("pk", s("reserve-inventory#aggregate#Order#o-late")), ("last_sequence", n(3)), ("released_through", n(3))];
    dynamodb
        .put_item()
        .table_name(&inbox_table)
        .set_item(Some(ordering.map(|(k, v)| (k.to_owned(), v)).into()))
        .send()
        .await
        .expect("an ordering row");

    let resources = outbox_cli::resources::Resources::from_stack(&stack).expect("the stack's resources");
    let state = |traced: &Trace| -> String {
        let row = traced.consumers.iter().find(|c| c.function == "ReserveInventoryFunction").unwrap_or_else(|| panic!("{}", traced.render()));
        row.state.clone()
    };
    let applied = trace(&sdk, &resources, "e-applied", &Lookup::Index).await.expect("trace");
    assert_eq!(state(&applied), "applied (reserved)", "{}", applied.render());
    let late = trace(&sdk, &resources, "e-late", &Lookup::Index).await.expect("trace");
    assert!(state(&late).starts_with("absorbed: Order#o-late is at sequence 3"), "{}", late.render());
    assert!(late.relay.starts_with("published"), "{}", late.render());
    let missing = trace(&sdk, &resources, "e-missing", &Lookup::Index).await.expect("trace");
    assert_eq!(state(&missing), "absent", "{}", missing.render());

    // The function without CONSUMER_NAME: its rows' keys are unknown; nothing is claimed absent.
    let mut unnamed = resources.clone();
    for f in unnamed.functions.iter_mut().filter(|f| f.logical_id == "ReserveInventoryFunction") {
        assert!(f.environment.remove("CONSUMER_NAME").is_some(), "the template sets CONSUMER_NAME");
    }
    let traced = trace(&sdk, &unnamed, "e-applied", &Lookup::Index).await.expect("trace");
    assert!(state(&traced).starts_with("not looked up: the function sets no CONSUMER_NAME"), "{}", traced.render());
    assert!(!traced.relay.starts_with("published") && traced.relay.contains("no consumer has it yet"), "{}", traced.render());
    drop(emulator);
}

/// Reads (and deletes) `n` messages of FIFO queue `url`: their events' `detail.metadata.id`, in
/// the order received. Deleting them is what lets a replayed copy in: the emulator's FIFO queue
/// deduplicates against the messages it holds (SQS's 5-minute window would drop a copy sent so soon).
async fn take(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ids.len() < n {
        assert!(std::time::Instant::now() < deadline, "{} of {n} messages in {url}: {ids:?}", ids.len());
        let out = sqs.receive_message().queue_url(url).max_number_of_messages(10).wait_time_seconds(1).send().await.expect("ReceiveMessage");
        for m in out.messages() {
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap_or_default()).expect("a JSON body");
            ids.push(body.pointer("/detail/metadata/id").and_then(serde_json::Value::as_str).expect("an event of the outbox").to_owned());
            sqs.delete_message().queue_url(url).receipt_handle(m.receipt_handle().unwrap_or_default()).send().await.expect("DeleteMessage");
        }
    }
    ids
}

/// `replay` on the Custom Event Bus, as an operator runs it on the sample provisioned with
/// `EventBusType=Custom`: the `outbox` binary with `--template --parameter-overrides` (a stack
/// looked up from its template: the subscriber and the bus's ARN found by name) makes a replay
/// subscriber beside the consumer kit's, which delivers the window's events again to the kit's
/// FIFO delivery queue in the aggregate's order; `--cleanup` leaves it while its retries may run
/// and `--force` removes it; a window beyond the bus's retention is refused before anything is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_on_the_custom_bus_redelivers_the_window_through_a_replay_subscriber_and_cleanup_removes_it() {
    use aws_sdk_eventbridgev2::types::{PutEventsRequestEntry, PutEventsSystemMetadata};
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    emulator.custom_bus.configure(outbox_local::custom_bus::BusOptions::default().compressed());
    let endpoint = emulator.endpoint.clone();
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: "us-east-1".into() }).await;
    let custom = [("EventBusType".to_owned(), "Custom".to_owned())];
    let template = Template::load_with_overrides(&root().join("template.yaml"), &custom).expect("the sample on the Custom bus");
    let stack = provision(&sdk, template, "operator-custom", EMULATOR_ACCOUNT).await.expect("provisioned");
    let kit = stack.subscribers.iter().find(|s| s.logical_id.starts_with("ConsumerKit/")).expect("the consumer kit's subscriber").clone();
    let delivery = kit.target_queue_url.clone().expect("its target: the kit's delivery queue");
    let (bus, sqs) = (aws_sdk_eventbridgev2::Client::new(&sdk), aws_sdk_sqs::Client::new(&sdk));

    // One order's three events, as the relay publishes them: the aggregate as event group.
    let since = chrono::Utc::now() - chrono::Duration::seconds(2);
    let ids: Vec<String> = (1..=3).map(|n| format!("e-custom-{n}-{}", uuid::Uuid::new_v4())).collect();
    let entries: Vec<PutEventsRequestEntry> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let kind = if i == 0 { "OrderCreated" } else { "OrderCancelled" };
            let detail = serde_json::json!({"metadata": {"id": id, "type": kind, "aggregate_type": "Order", "subject": "o-9", "sequence": i + 1}, "data": {"order_id": "o-9"}});
            let system = PutEventsSystemMetadata::builder().event_group_id("Order#o-9").deduplication_id(id).build();
            PutEventsRequestEntry::builder().source("example.orders").detail_type(kind).detail(detail.to_string()).system_metadata(system).build().expect("an entry")
        })
        .collect();
    let put = bus.put_events().event_bus_arn(&kit.bus_arn).set_entries(Some(entries)).send().await.expect("PutEvents");
    assert_eq!(put.failed_entry_count(), 0, "{put:?}");
    assert_eq!(take(&sqs, &delivery, 3).await, ids, "delivered once, in the aggregate's order");

    // The window again, to reserve-inventory (its CONSUMER_NAME), through the binary.
    let replay = |args: &[&str]| {
        let mut all = vec!["--parameter-overrides", "EventBusType=Custom", "--yes", "replay", "--consumer", "reserve-inventory"];
        all.extend_from_slice(args);
        outbox_as(&endpoint, "operator-custom", &all)
    };
    let since_text = since.to_rfc3339();
    let out = replay(&["--since", &since_text]);
    assert!(out.status.success(), "{}", text(&out));
    let printed = text(&out);
    assert!(printed.contains(&format!("consumer reserve-inventory: subscriber {} (FIFO, target ", kit.name)), "{printed}");
    let prefix = outbox_cli::replay::subscriber::replay_prefix(&kit.name);
    assert!(printed.contains(&format!("replay subscriber {prefix}")) && printed.contains("--cleanup"), "{printed}");
    assert_eq!(take(&sqs, &delivery, 3).await, ids, "the replay delivered the window again, in the aggregate's order");

    // The replay subscriber copies the kit's and reads the window from a point in time.
    let listed = bus.list_subscribers().event_bus_arn(&kit.bus_arn).name_prefix(&prefix).send().await.expect("ListSubscribers");
    let [made] = listed.subscribers() else { panic!("one replay subscriber: {listed:?}") };
    let made = bus.describe_subscriber().subscriber_arn(made.subscriber_arn().unwrap_or_default()).send().await.expect("DescribeSubscriber");
    let original = bus.describe_subscriber().subscriber_arn(kit.arn.clone().unwrap_or_default()).send().await.expect("DescribeSubscriber");
    let (made_sqs, original_sqs) =
        (made.invoke_configuration().and_then(|c| c.sqs_parameters()), original.invoke_configuration().and_then(|c| c.sqs_parameters()));
    assert_eq!(made.invoke_configuration().map(|c| c.target_arn()), original.invoke_configuration().map(|c| c.target_arn()), "the same target");
    assert_eq!(made_sqs.and_then(|p| p.message_group_id()), original_sqs.and_then(|p| p.message_group_id()), "the same message group");
    assert_eq!((made.r#type(), made.filter_configuration()), (original.r#type(), original.filter_configuration()));
    assert_eq!(made.starting_position().map(|p| p.as_str()), Some("POINT_IN_TIME"));

    // --cleanup: its retries may still run (the kit's MaxEventAgeInSeconds is a day): left, exit 2.
    let out = replay(&["--cleanup"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("left, its deliveries may still be retried until"), "{}", text(&out));
    let out = replay(&["--cleanup", "--force"]);
    assert!(out.status.success() && text(&out).contains("deleted "), "{}", text(&out));
    let listed = bus.list_subscribers().event_bus_arn(&kit.bus_arn).name_prefix(&prefix).send().await.expect("ListSubscribers");
    assert!(listed.subscribers().is_empty(), "removed: {listed:?}");
    assert!(bus.describe_subscriber().subscriber_arn(kit.arn.clone().unwrap_or_default()).send().await.is_ok(), "the kit's own subscriber stays");

    // Beyond the bus's retention (before it was created): refused, nothing made.
    let out = replay(&["--since", "2020-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is beyond what bus") && text(&out).contains("give --since"), "{}", text(&out));
    let listed = bus.list_subscribers().event_bus_arn(&kit.bus_arn).name_prefix(&prefix).send().await.expect("ListSubscribers");
    assert!(listed.subscribers().is_empty(), "nothing made: {listed:?}");
    drop(emulator);
}

/// `dlq redrive` on a stack whose consumers are fed by the Custom Event Bus re-publishes there
/// (on the classic bus the event would reach no consumer: accepted, deleted, lost), in the
/// event's aggregate group, with a new `DeduplicationId`: the original was published with the
/// event id as `DeduplicationId` moments ago, inside the bus's 300 s window, and the redrive is
/// still delivered. An event without an aggregate cannot be grouped: it stays, with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_on_a_custom_bus_stack_republishes_to_the_custom_bus_in_the_aggregate_s_group() {
    use aws_sdk_eventbridgev2::types::{PutEventsRequestEntry, PutEventsSystemMetadata};
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    let endpoint = emulator.endpoint.clone();
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: "us-east-1".into() }).await;
    let custom = [("EventBusType".to_owned(), "Custom".to_owned())];
    let template = Template::load_with_overrides(&root().join("template.yaml"), &custom).expect("the sample on the Custom bus");
    let stack = provision(&sdk, template, "operator-custom-dlq", EMULATOR_ACCOUNT).await.expect("provisioned");
    let kit = stack.subscribers.iter().find(|s| s.logical_id.starts_with("ConsumerKit/")).expect("the consumer kit's subscriber").clone();
    let delivery = kit.target_queue_url.clone().expect("its target: the kit's delivery queue");
    let dlq = stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the consumer DLQ").clone();
    let (bus, sqs) = (aws_sdk_eventbridgev2::Client::new(&sdk), aws_sdk_sqs::Client::new(&sdk));
    assert!(delivery.ends_with(".fifo") && dlq.url.ends_with(".fifo"), "the kit's queues are FIFO on the Custom bus: {delivery}, {}", dlq.url);

    // The original, as the relay publishes it, delivered once.
    let id = format!("e-redrive-{}", uuid::Uuid::new_v4());
    let detail = serde_json::json!({"metadata": {"id": id, "type": "OrderCreated", "version": 1, "source": "example.orders",
        "time": "2026-12-04T00:00:00Z", "subject": "o-7", "aggregate_type": "Order", "sequence": 1, "correlation_id": "c"}, "data": {"order_id": "o-7"}});
    let system = PutEventsSystemMetadata::builder().event_group_id("Order#o-7").deduplication_id(&id).build();
    let entry =
        PutEventsRequestEntry::builder().source("example.orders").detail_type("OrderCreated").detail(detail.to_string()).system_metadata(system);
    let put = bus.put_events().event_bus_arn(&kit.bus_arn).entries(entry.build().expect("an entry")).send().await.expect("PutEvents");
    assert_eq!(put.failed_entry_count(), 0, "{put:?}");
    assert_eq!(take(&sqs, &delivery, 1).await, std::slice::from_ref(&id));

    // Its dead letter (the consumer gave up), and one whose event names no aggregate.
    let event = serde_json::json!({"version": "0", "id": "env", "detail-type": "OrderCreated", "source": "example.orders", "detail": detail});
    let failure = serde_json::json!({"kind": "outbox-consumer-failure", "consumer": "reserve-inventory", "error_type": "HandlerFailed",
        "reason": "HandlerFailed", "event_id": id, "failed_at": "2026-12-04T00:00:00Z", "event": event});
    for (n, body) in [failure.to_string(), consumer_failure("e-no-aggregate", "HandlerFailed")].iter().enumerate() {
        let send = sqs.send_message().queue_url(&dlq.url).message_body(body).message_group_id("Order#o-7").message_deduplication_id(format!("d-{n}"));
        send.send().await.expect("SendMessage to the DLQ");
    }

    let out =
        outbox_as(&endpoint, "operator-custom-dlq", &["--parameter-overrides", "EventBusType=Custom", "--yes", "dlq", "redrive", "--watch", "0"]);
    let printed = text(&out);
    assert!(printed.contains(&format!("to bus {}", kit.bus_arn)), "the Custom bus, by ARN: {printed}");
    assert!(printed.contains("re-published and deleted 1 message(s)") && printed.contains("1 left"), "{printed}");
    assert!(printed.contains("no aggregate to group it by"), "why the other stays: {printed}");
    assert_eq!(take(&sqs, &delivery, 1).await, [id], "delivered again to the consumer's delivery queue, not deduplicated");
    assert_eq!(depth(&sqs, &dlq).await, 1, "the ungroupable one stays in the DLQ");
    drop(emulator);
}
