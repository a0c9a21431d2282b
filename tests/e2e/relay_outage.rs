//! The relay's stream mapping under a broker outage, and across a restart of the local runtime.
//!
//! * An outage longer than every retry (PutEvents failing at the HTTP level, behind a proxy in
//!   front of the emulator) with the mapping's record age scaled down from 23 h to 2 s: the
//!   mapping skips the batches to its S3 on-failure bucket with their records, and after the
//!   operator's `dlq redrive` (replay through the relay) every event of the outbox table is on
//!   the bus and the bucket is empty.
//! * A pointer-only record (SQS destination) is replayed from the outbox table: by the stream's
//!   keys while the stream holds the range, by `occurred_at` once it does not.
//! * A runtime restarted with the same state directory resumes after its checkpoint: it reads
//!   only the records written since, and no event reaches the bus twice.
//! * A broker outage during orders and cancellations drains with no operator step: every
//!   cancellation released, nothing in the consumer's dead-letter queue.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Deadline, Local};
use outbox::{Event, OutboxWriter};
use outbox_cli::failed_batch::{self, Replayer};
use outbox_template::Template;
use serde_json::json;

const RELAY: &str = "Relay/RelayFunction";

/// A proxy in front of the emulator that answers every `PutEvents` with HTTP 500 while `down`
/// is set (EventBridge's `InternalException`), and forwards everything else.
async fn broker_outage_proxy(upstream: String, down: Arc<AtomicBool>) -> String {
    use axum::body::{to_bytes, Body};
    use axum::http::{Request, Response, StatusCode};
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (client, upstream, down) = (client.clone(), upstream.clone(), down.clone());
        async move {
            let target = request.headers().get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            if down.load(Ordering::SeqCst) && target == "AWSEvents.PutEvents" {
                let body = json!({"__type": "InternalException", "message": "injected broker outage"}).to_string();
                return Response::builder()
                    .status(StatusCode::INTERNAL_SERVER_ERROR)
                    .header("content-type", "application/x-amz-json-1.1")
                    .body(Body::from(body))
                    .unwrap_or_default();
            }
            let (parts, body) = request.into_parts();
            let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
            let url = format!("{upstream}{}", parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
            let mut forward = client.request(parts.method, url).body(body);
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name, value);
                }
            }
            let Ok(answer) = forward.send().await else {
                return Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).unwrap_or_default();
            };
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    response = response.header(name, value);
                }
            }
            response.body(Body::from(answer.bytes().await.unwrap_or_default())).unwrap_or_default()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port for the proxy");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// Receives what the spy queue holds now (deleting it): `detail.metadata.id` → times received.
pub(crate) async fn drain_spy(local: &Local, url: &str, seen: &mut BTreeMap<String, usize>) {
    drain_spy_traced(local, url, seen, &mut BTreeMap::new()).await;
}

/// [`drain_spy`], also keeping each event's `detail.metadata.traceparent` by event id.
async fn drain_spy_traced(local: &Local, url: &str, seen: &mut BTreeMap<String, usize>, traces: &mut BTreeMap<String, String>) {
    loop {
        let out = local.sqs.receive_message().queue_url(url).max_number_of_messages(10).wait_time_seconds(1).send().await.expect("ReceiveMessage");
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return;
        }
        for m in messages {
            let body: serde_json::Value = serde_json::from_str(m.body().unwrap_or("")).expect("an EventBridge event");
            let id = body.pointer("/detail/metadata/id").and_then(|v| v.as_str()).expect("detail.metadata.id").to_owned();
            if let Some(traceparent) = body.pointer("/detail/metadata/traceparent").and_then(|v| v.as_str()) {
                traces.insert(id.clone(), traceparent.to_owned());
            }
            *seen.entry(id).or_default() += 1;
            local.sqs.delete_message().queue_url(url).receipt_handle(m.receipt_handle().unwrap_or("")).send().await.expect("DeleteMessage");
        }
    }
}

/// Commits `n` events of `source` (one aggregate each) to the outbox table; their ids.
async fn emit(local: &Local, source: &str, n: usize) -> BTreeSet<String> {
    let writer = OutboxWriter::new(local.table("OutboxTable"), Duration::from_secs(3600));
    let mut tx = writer.transaction();
    for _ in 0..n {
        tx.emit(
            Event::from_json("ThingHappened", source, ("Thing", crate::common::short_id()), 1, r#"{"n":1}"#)
                .correlation_id("relay-outage-test")
                .trace_header(None),
        )
        .expect("a publishable event");
    }
    tx.execute(&local.dynamodb).await.expect("the outbox transaction commits").into_iter().map(|i| i.event_id).collect()
}

/// The event ids of `source` in the outbox table: what must reach the bus.
async fn outbox_ids(local: &Local, source: &str) -> BTreeSet<String> {
    local
        .scan(&local.table("OutboxTable"))
        .await
        .iter()
        .filter(|i| crate::common::s(i, "source") == source)
        .map(|i| crate::common::s(i, "event_id").to_owned())
        .collect()
}

fn bucket_of(local: &Local) -> String {
    local.runtime.stack.buckets.iter().find(|b| b.logical_id == "Relay/FailedBatchesBucket").expect("the template's failed-batch bucket").name.clone()
}

async fn bucket_keys(s3: &aws_sdk_s3::Client, bucket: &str) -> Vec<String> {
    let out = s3.list_objects_v2().bucket(bucket).send().await.expect("ListObjectsV2");
    out.contents().iter().filter_map(|o| o.key().map(str::to_owned)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_longer_than_every_retry_loses_nothing_after_dlq_redrive() {
    // The relay block's mapping, its record age scaled down from 23 h to 2 s (retries stay unlimited).
    let relay = "blocks/relay/template.yaml";
    let template = crate::common::sample_template_with(&[
        (relay, "MaximumRecordAgeInSeconds: 82800", "MaximumRecordAgeInSeconds: 2"),
        (relay, "MaximumRetryAttempts: -1", "MaximumRetryAttempts: -1"),
    ]);
    let down = Arc::new(AtomicBool::new(true));
    let proxy = broker_outage_proxy(crate::common::endpoint().to_owned(), down.clone()).await;
    let mut local = Local::start_with(template, &proxy, crate::common::fast_options(), None).await;
    let bus = local.env_of(RELAY).remove("EVENT_BUS_NAME").expect("EVENT_BUS_NAME");
    let source = format!("test.outage.{}", crate::common::short_id());
    let spy_url = local.spy_on_bus(&bus, &source).await;
    let s3 = aws_sdk_s3::Client::new(&local.runtime.sdk);
    let bucket = bucket_of(&local);

    let ids = emit(&local, &source, 5).await;
    local.spawn_pipelines();

    // Every record ages out during the outage: the mapping skips it to the bucket, with its record.
    let deadline = Deadline::new("the outage's batches in the S3 on-failure bucket");
    let mut recorded = BTreeSet::new();
    while recorded != ids {
        for key in bucket_keys(&s3, &bucket).await {
            assert!(key.starts_with("aws/lambda/Relay-RelayFunction-OutboxStream/"), "Lambda's key layout: {key}");
            let object = s3.get_object().bucket(&bucket).key(&key).send().await.expect("GetObject");
            let body = object.body.collect().await.expect("the body").into_bytes();
            let batch = failed_batch::parse(&String::from_utf8_lossy(&body)).expect("a stream batch record");
            assert_eq!(batch.condition, "RecordAgeExceeded");
            for record in batch.payload.expect("S3 records hold the payload").records {
                if let Some(serde_dynamo::AttributeValue::S(id)) = record.change.new_image.get("event_id") {
                    recorded.insert(id.clone());
                }
            }
        }
        deadline.tick(|| format!("recorded {recorded:?} of {ids:?}, stats {:?}", local.runtime.stats.snapshot())).await;
    }
    let counts = local.runtime.stats.snapshot();
    assert!(counts.relay_failed_invocations >= 1 && counts.metric(RELAY, "EventsPublished") == 0.0, "the relay tried and failed: {counts:?}");
    // The relay's own EMF shows the outage: its failed PutEvents attempts, by service.
    assert!(counts.metric(RELAY, "AwsCallsFailed{service=EventBridge}") >= 1.0, "the relay's AwsCallsFailed: {counts:?}");

    // The broker is back; the skipped records are not retried by the mapping.
    down.store(false, Ordering::SeqCst);
    let mut seen = BTreeMap::new();
    drain_spy(&local, &spy_url, &mut seen).await;
    assert!(seen.is_empty(), "nothing reached the bus during the outage: {seen:?}");

    // `dlq list` shows them, with the records.
    let listed = failed_batch::peek_bucket(&s3, &bucket).await.expect("the bucket is listed");
    assert!(
        !listed.is_empty() && listed.iter().all(|m| m.shape == "stream-batch-records" && m.reason.starts_with("RecordAgeExceeded: ")),
        "{listed:?}"
    );

    // The operator's step: `dlq redrive` replays the bucket's batches through the relay.
    let replayer = Replayer::new(&local.runtime.sdk, local.env_of(RELAY)).expect("the relay's configuration");
    let report = failed_batch::redrive_bucket(&s3, &replayer, &bucket, false, |_, _| {}).await.expect("the redrive runs");
    assert!(report.left.is_empty(), "{report:?}");
    assert_eq!(report.replayed.iter().map(|(_, n)| n).sum::<usize>(), ids.len(), "{report:?}");
    assert!(bucket_keys(&s3, &bucket).await.is_empty(), "replayed objects are deleted");

    // Nothing lost: every event of the outbox table is on the bus.
    let deadline = Deadline::new("every outbox event on the bus");
    let mut traces = BTreeMap::new();
    while seen.keys().cloned().collect::<BTreeSet<_>>() != ids {
        drain_spy_traced(&local, &spy_url, &mut seen, &mut traces).await;
        deadline.tick(|| format!("{seen:?}")).await;
    }
    assert_eq!(outbox_ids(&local, &source).await, ids, "the outbox table holds exactly the emitted events");
    assert!(seen.values().all(|n| *n == 1), "each once: {seen:?}");
    // A redriven event keeps its trace: the bus carries the outbox item's traceparent.
    let stored: BTreeMap<String, String> = local
        .scan(&local.table("OutboxTable"))
        .await
        .iter()
        .filter(|i| crate::common::s(i, "source") == source)
        .map(|i| (crate::common::s(i, "event_id").to_owned(), crate::common::s(i, "traceparent").to_owned()))
        .collect();
    assert!(stored.values().all(|t| t.len() == 55), "every outbox item has a traceparent: {stored:?}");
    assert_eq!(traces, stored, "the redriven events kept their traceparent");
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pointer_only_record_is_replayed_from_the_outbox_table() {
    let local = Local::start().await;
    let bus = local.env_of(RELAY).remove("EVENT_BUS_NAME").expect("EVENT_BUS_NAME");
    let source = format!("test.pointer.{}", crate::common::short_id());
    let spy_url = local.spy_on_bus(&bus, &source).await;
    let ids = emit(&local, &source, 3).await;

    // The pointer Lambda sends to an SQS destination, for the range of the 3 records (no pipelines run).
    let table = local.table("OutboxTable");
    let stream_arn = local.runtime.stack.stream_arns.get("OutboxTable").expect("the outbox stream").clone();
    let streams = aws_sdk_dynamodbstreams::Client::new(&local.runtime.sdk);
    let description = streams.describe_stream().stream_arn(&stream_arn).send().await.expect("DescribeStream");
    let shard = description.stream_description().and_then(|d| d.shards().first()).and_then(|s| s.shard_id()).expect("a shard").to_owned();
    let iterator = streams
        .get_shard_iterator()
        .stream_arn(&stream_arn)
        .shard_id(&shard)
        .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("GetShardIterator")
        .shard_iterator
        .expect("an iterator");
    let records = streams.get_records().shard_iterator(iterator).send().await.expect("GetRecords").records.unwrap_or_default();
    let seqs: Vec<String> = records.iter().filter_map(|r| r.dynamodb().and_then(|d| d.sequence_number()).map(str::to_owned)).collect();
    assert_eq!(seqs.len(), 3, "the stream holds the 3 INSERTs of {table}");
    let now = chrono::Utc::now();
    let pointer = |shard: &str| {
        json!({
            "requestContext": {"condition": "RetryAttemptsExhausted"},
            "DDBStreamBatchInfo": {
                "shardId": shard, "startSequenceNumber": seqs[0], "endSequenceNumber": seqs[2],
                "approximateArrivalOfFirstRecord": (now - chrono::Duration::seconds(60)).to_rfc3339(),
                "approximateArrivalOfLastRecord": now.to_rfc3339(), "batchSize": 3, "streamArn": stream_arn,
            },
        })
        .to_string()
    };
    let replayer = Replayer::new(&local.runtime.sdk, local.env_of(RELAY)).expect("the relay's configuration");

    // While the stream holds the range: its keys, the items from the table.
    let replayed = replayer.replay(&failed_batch::parse(&pointer(&shard)).expect("a pointer")).await.expect("replayed");
    assert_eq!((replayed.source.as_str(), replayed.records, replayed.published, replayed.failed), ("stream keys → outbox table", 3, 3, 0));
    let mut seen = BTreeMap::new();
    let deadline = Deadline::new("the 3 events on the bus");
    while seen.keys().cloned().collect::<BTreeSet<_>>() != ids {
        drain_spy(&local, &spy_url, &mut seen).await;
        deadline.tick(|| format!("{seen:?}")).await;
    }

    // Once the stream no longer has the shard: the outbox items of the pointer's time window.
    let replayed = replayer.replay(&failed_batch::parse(&pointer("shardId-trimmed")).expect("a pointer")).await.expect("replayed");
    assert_eq!(replayed.source, "outbox table by time");
    assert!(replayed.published >= 3 && replayed.failed == 0, "a superset of the batch: {replayed:?}");
    let deadline = Deadline::new("the 3 events on the bus again");
    while seen.values().any(|n| *n < 2) {
        drain_spy(&local, &spy_url, &mut seen).await;
        deadline.tick(|| format!("{seen:?}")).await;
    }
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), ids, "only the outbox table's events: {seen:?}");
    local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_runtime_resumes_after_its_checkpoint() {
    let state_dir = std::env::temp_dir().join(format!("outbox-checkpoint-test-{}", crate::common::short_id()));
    let options = outbox_local::runtime::RuntimeOptions { state_dir: Some(state_dir.clone()), ..crate::common::fast_options() };
    let template = || Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml");

    let mut first = Local::start_with(template(), crate::common::endpoint(), options.clone(), None).await;
    let stack_name = first.stack_name.clone();
    let bus = first.env_of(RELAY).remove("EVENT_BUS_NAME").expect("EVENT_BUS_NAME");
    let source = format!("test.restart.{}", crate::common::short_id());
    let spy_url = first.spy_on_bus(&bus, &source).await;
    let before = emit(&first, &source, 3).await;
    first.spawn_pipelines();
    let mut seen = BTreeMap::new();
    let deadline = Deadline::new("the first runtime publishing 3 events");
    while seen.len() < 3 {
        drain_spy(&first, &spy_url, &mut seen).await;
        deadline.tick(|| format!("{seen:?}")).await;
    }
    first.shutdown().await;
    assert!(state_dir.join("checkpoints/Relay/RelayFunction.OutboxStream.json").is_file(), "the checkpoint is kept");

    // The restart: a new runtime on the same stack and state directory.
    let mut second = Local::start_with(template(), crate::common::endpoint(), options, Some(stack_name.clone())).await;
    let after = emit(&second, &source, 2).await;
    second.spawn_pipelines();
    let deadline = Deadline::new("the second runtime publishing the 2 new events");
    while seen.len() < 5 {
        drain_spy(&second, &spy_url, &mut seen).await;
        deadline.tick(|| format!("{seen:?} stats {:?}", second.runtime.stats.snapshot())).await;
    }
    let counts = second.runtime.stats.snapshot();
    assert_eq!(counts.stream_records, 2, "only the records written since the checkpoint are read: {counts:?}");
    drain_spy(&second, &spy_url, &mut seen).await;
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), before.union(&after).cloned().collect(), "{seen:?}");
    assert!(seen.values().all(|n| *n == 1), "no event reached the bus twice: {seen:?}");
    second.shutdown().await;

    // Without the checkpoint (control), a new runtime reads the stream from TRIM_HORIZON again.
    let mut fresh = Local::start_with(template(), crate::common::endpoint(), crate::common::fast_options(), Some(stack_name)).await;
    fresh.spawn_pipelines();
    let deadline = Deadline::new("a runtime without a checkpoint re-reading the stream");
    while fresh.runtime.stats.snapshot().stream_records < 5 {
        deadline.tick(|| format!("{:?}", fresh.runtime.stats.snapshot())).await;
    }
    fresh.shutdown().await;
    let _ = std::fs::remove_dir_all(&state_dir);
}

/// Commits one order event (`OrderCreated` sequence 1, or `OrderCancelled` sequence 2 naming
/// its creation in `previous`) in its own transaction, as the order API does.
pub(crate) async fn order_event(local: &Local, order_id: &str, cancelled: bool) {
    let writer = OutboxWriter::new(local.table("OutboxTable"), Duration::from_secs(3600));
    let mut tx = writer.transaction();
    let (event_type, sequence, payload, previous) = if cancelled {
        ("OrderCancelled", 2, json!({"order_id": order_id}), BTreeMap::from([("OrderCreated".to_owned(), 1)]))
    } else {
        let lines = json!([{"sku": "SKU-OUTAGE", "quantity": 1, "unit_price": "1.00"}]);
        ("OrderCreated", 1, json!({"order_id": order_id, "customer_id": "c", "currency": "EUR", "lines": lines}), BTreeMap::new())
    };
    tx.emit({
        let mut event = Event::from_json(event_type, "example.orders", ("Order", order_id), sequence, payload.to_string())
            .correlation_id("outage-orders-test")
            .trace_header(None);
        event.previous = previous;
        event
    })
    .expect("a publishable event");
    tx.execute(&local.dynamodb).await.expect("the outbox transaction commits");
}

/// A broker outage during orders and cancellations — every `PutEvents` failing until the relay
/// has failed whole invocations (its in-invocation retries spent), the mapping retrying without
/// a count limit, the local waits compressed (`fast_options`) — ends with every cancellation released and nothing in the consumer's dead-letter queue, with
/// no operator step: when the bus is back the backlog drains with each order's `OrderCreated`
/// and `OrderCancelled` close together, and the ordered consumer parks whichever arrives early.
/// Checked from the inventory table, the inbox table and the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_during_orders_and_cancellations_needs_no_operator() {
    let template = Template::load(&crate::common::root().join("template.yaml")).expect("template.yaml");
    let down = Arc::new(AtomicBool::new(true));
    let proxy = broker_outage_proxy(crate::common::endpoint().to_owned(), down.clone()).await;
    let mut local = Local::start_with(template, &proxy, crate::common::fast_options(), None).await;
    let inventory = local.table("InventoryTable");
    let inbox = local.table("ConsumerKit/InboxTable");
    orders_app::inventory::put_stock(&local.dynamodb, &inventory, "SKU-OUTAGE", 1000).await.expect("stock");
    local.spawn_pipelines();

    let orders: Vec<String> = (0..20).map(|i| format!("outage-{i}-{}", crate::common::short_id())).collect();
    for (i, order) in orders.iter().enumerate() {
        order_event(&local, order, false).await;
        if i % 2 == 0 {
            order_event(&local, order, true).await;
        }
    }
    // The outage lasts at least 5 s and until the relay failed whole invocations twice (each
    // spends its in-invocation retries first): the backlog of creations and cancellations waits.
    let started = std::time::Instant::now();
    let deadline = Deadline::new("the relay failing during the outage");
    while started.elapsed() < Duration::from_secs(5) || local.runtime.stats.snapshot().relay_failed_invocations < 2 {
        deadline.tick(|| format!("{:?}", local.runtime.stats.snapshot())).await;
    }
    let counts = local.runtime.stats.snapshot();
    assert_eq!(counts.metric(RELAY, "EventsPublished"), 0.0, "nothing published during the outage: {counts:?}");
    down.store(false, Ordering::SeqCst);

    // 20 reserved, 10 released: 10 units reserved, 990 available; every event claimed once.
    let deadline = Deadline::new("every order reserved and every cancellation released");
    loop {
        let stock = orders_app::inventory::stock(&local.dynamodb, &inventory, "SKU-OUTAGE").await.expect("stock");
        let rows = local.scan(&inbox).await;
        let claim = |pk: &str| pk.starts_with("reserve-inventory#") && !pk.contains("#aggregate#") && !pk.contains("#parked#");
        let claimed = rows.iter().filter(|r| claim(crate::common::s(r, "pk"))).count();
        if stock == Some((990, 10)) && claimed >= 30 {
            break;
        }
        deadline.tick(|| format!("stock {stock:?}, {claimed} claims, stats {:?}", local.runtime.stats.snapshot())).await;
    }
    let rows = local.scan(&inbox).await;
    let parked = rows.iter().filter(|r| crate::common::s(r, "kind") == "parked").count();
    assert_eq!(parked, 0, "nothing left parked");
    let released = local.scan(&inventory).await.iter().filter(|r| crate::common::s(r, "status") == "RELEASED").count();
    assert_eq!(released, 10, "every cancellation released");
    let dlq = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("ConsumerKit/ConsumerDeadLetterQueue");
    assert_eq!(outbox_cli::dlq::depth(&local.sqs, &dlq).await.expect("depth"), 0, "nothing dead-lettered");
    let counts = local.runtime.stats.snapshot();
    eprintln!(
        "outage during orders: {} parked then applied, {} consumer invocations failed, {} messages back to the delivery queue, 0 dead-lettered",
        counts.outcome_count("parked"),
        counts.sqs_invocation_errors,
        counts.sqs_messages_failed
    );
    local.shutdown().await;
}
