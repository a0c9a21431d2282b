//! The claim check end to end on the emulator (DynamoDB + S3): a payload too large for the
//! outbox item or one `PutEvents` entry is stored in S3 before the transaction, the outbox item
//! holds the reference, the relay (run on the item's stream record, publishing to the emulator's
//! bus) delivers `detail.data_ref` to the consumer kit's delivery queue (never the bytes), and
//! the consumer fetches, verifies and applies it with the inbox hash over the real payload. A
//! tampered or missing object is dead-lettered with the reason. Exactly at the computed inline
//! limit the payload stays inline; one byte over, it goes to S3.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{endpoint, root, short_id};
use aws_sdk_dynamodb::types::AttributeValue;
use outbox::claim_check::{sha256_hex, ClaimCheck};
use outbox::consumer::{Consumer, Handled};
use outbox::consumer::{MemoryDeadLetters, RetryPolicy};
use outbox::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES;
use outbox::envelope::{OutboxItem, PayloadRef};
use outbox::inbox::Inbox;
use outbox::relay::{Relay, RelayConfig};
use outbox::{Event, OutboxWriter};
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_template::Template;
use serde_json::value::RawValue;

/// What the consumer's handler saw.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct Seen {
    order_id: String,
    blob_bytes: usize,
}

struct Setup {
    dynamodb: aws_sdk_dynamodb::Client,
    s3: aws_sdk_s3::Client,
    outbox_table: String,
    inbox_table: String,
    bucket: String,
    claim_check: ClaimCheck,
    /// The producer function's resolved environment.
    producer_env: HashMap<String, String>,
    events: aws_sdk_eventbridge::Client,
    sqs: aws_sdk_sqs::Client,
    bus: String,
    relay_dlq: String,
    /// The consumer kit's delivery queue: its rule routes `OrderCreated` (and `OrderCancelled`)
    /// there, reserve-inventory's SQS event source mapping reads it.
    delivery_queue: String,
}

/// A fresh stack's tables on the shared emulator, and a payload bucket of its own.
async fn setup() -> Setup {
    let target = Target { endpoint: Some(endpoint().to_owned()), region: "us-east-1".into() };
    let sdk = sdk_config(&target).await;
    let template = Template::load(&root().join("template.yaml")).expect("template.yaml loads");
    let stack_name = format!("t-{}", short_id());
    let stack = outbox_local::provision::provision(&sdk, template, &stack_name, EMULATOR_ACCOUNT).await.unwrap_or_else(|e| panic!("stack: {e}"));
    let table = |id: &str| stack.table(id).unwrap_or_else(|| panic!("no table {id}")).name.clone();
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build());
    // The template's payload bucket, provisioned by the local runtime; the producer and the
    // consumer are configured with it.
    let bucket =
        stack.buckets.iter().find(|b| b.logical_id == "OutboxPayloadBucket").expect("the template declares OutboxPayloadBucket").name.clone();
    s3.head_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("the bucket {bucket} exists: {}", aws_sdk_s3::error::DisplayErrorContext(e)));
    let mut producer_env = HashMap::new();
    for function in ["CreateOrderFunction", "ReserveInventoryFunction"] {
        let spec = stack.functions.iter().find(|f| f.logical_id == function).unwrap_or_else(|| panic!("no {function}"));
        let env = stack.environment(spec).unwrap_or_else(|e| panic!("{function}: {e}"));
        assert_eq!(env.get("CLAIM_CHECK_BUCKET"), Some(&bucket), "{function}");
        if function == "CreateOrderFunction" {
            producer_env = env;
        }
    }
    Setup {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        outbox_table: table("OutboxTable"),
        inbox_table: table("ConsumerKit/InboxTable"),
        claim_check: ClaimCheck::new(s3.clone(), &bucket, "orders"),
        s3,
        bucket,
        producer_env,
        events: aws_sdk_eventbridge::Client::new(&sdk),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        bus: stack.buses.first().expect("the template's bus").name.clone(),
        relay_dlq: stack.queue("Relay/RelayDeadLetterQueue").expect("Relay/RelayDeadLetterQueue").url.clone(),
        delivery_queue: stack.queue("ConsumerKit/DeliveryQueue").expect("the consumer kit's ConsumerKit/DeliveryQueue").url.clone(),
    }
}

impl Setup {
    /// The producer; `max_event_bytes` is the bus's `PutEvents` limit it checks against.
    fn writer(&self, max_event_bytes: usize) -> OutboxWriter {
        OutboxWriter::new(&self.outbox_table, Duration::from_secs(3600))
            .with_max_event_bytes(max_event_bytes)
            .with_claim_check(self.claim_check.clone())
    }

    fn consumer(&self, dead_letters: &MemoryDeadLetters) -> Consumer<Inbox, MemoryDeadLetters, Seen> {
        let inbox = Inbox::new(self.dynamodb.clone(), &self.inbox_table, "claim-check-test", Duration::from_secs(3600));
        Consumer::builder(inbox, dead_letters.clone())
            .retry(RetryPolicy::none())
            .claim_check(self.claim_check.clone())
            .on::<serde_json::Value, _, _>("OrderCreated", |event, _tx| async move {
                let text = |field: &str| event.data[field].as_str().unwrap_or_default().to_owned();
                Ok(Seen { order_id: text("order_id"), blob_bytes: text("blob").len() })
            })
            .build()
    }

    /// Commits one event of `order_id` whose payload is exactly `payload_bytes` long; returns
    /// the outbox item as stored in the table.
    async fn produce(&self, writer: &OutboxWriter, order_id: &str, payload_bytes: usize) -> (OutboxItem, String) {
        let payload = payload_of(order_id, payload_bytes);
        let mut tx = writer.transaction();
        tx.emit(event(order_id, &payload)).expect("a payload up to the claim check's maximum is accepted");
        tx.execute(&self.dynamodb).await.unwrap_or_else(|e| panic!("commit: {e}"));
        let stored = self
            .dynamodb
            .get_item()
            .table_name(&self.outbox_table)
            .key("pk", AttributeValue::S(OutboxItem::partition_key("Order", order_id)))
            .key("sk", AttributeValue::S(OutboxItem::sort_key(1)))
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem")
            .item
            .expect("the outbox item was written");
        assert!(outbox::envelope::is_outbox_item(&stored), "a claim-checked item keeps the outbox contract");
        (OutboxItem::from_item(stored.into()).expect("the stored item decodes as the relay decodes it"), payload)
    }

    /// Runs the relay on `item`'s stream record (an `INSERT` with the stored image) and returns
    /// what the bus delivered to the consumer kit's delivery queue: the event a consumer receives.
    async fn relay_and_receive(&self, item: &OutboxItem) -> Box<RawValue> {
        let image: serde_dynamo::Item = item.to_item().expect("an OutboxItem converts");
        let record = serde_json::json!({
            "eventID": "1", "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026-01-01T00:00:00.000",
            "dynamodb": {"ApproximateCreationDateTime": 1_764_403_200.0, "Keys": {"pk": {"S": item.pk}, "sk": {"S": item.sk}},
                         "NewImage": serde_json::to_value(image).expect("DynamoDB JSON"), "SequenceNumber": "100", "SizeBytes": 300, "StreamViewType": "NEW_IMAGE"},
        });
        let batch: aws_lambda_events::dynamodb::Event = serde_json::from_value(serde_json::json!({ "Records": [record] })).expect("a stream event");
        let relay = Relay::new(self.events.clone(), self.sqs.clone(), RelayConfig::new(&self.bus, &self.relay_dlq));
        let outcome = relay.relay(&batch, std::time::Instant::now() + Duration::from_secs(30)).await.expect("relayed");
        assert_eq!((outcome.report.published, outcome.report.dead_lettered, outcome.report.failed), (1, 0, 0));
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.delivery_queue)
            .max_number_of_messages(10)
            .wait_time_seconds(5)
            .send()
            .await
            .expect("ReceiveMessage")
            .messages
            .unwrap_or_default();
        assert_eq!(received.len(), 1, "one event on the consumer's delivery queue");
        RawValue::from_string(received[0].body().expect("a body").to_owned()).expect("the delivered event is JSON")
    }

    /// The EventBridge event a rule delivers for `item` (the relay's `PutEvents` entry).
    fn delivered(&self, item: &OutboxItem) -> Box<RawValue> {
        let bus = item.to_bus_event().expect("publishable");
        let event = format!(
            r#"{{"version":"0","id":"env-{}","detail-type":"{}","source":"{}","account":"{EMULATOR_ACCOUNT}","time":"{}","region":"us-east-1","resources":[],"detail":{}}}"#,
            item.event_id, bus.detail_type, bus.source, item.occurred_at, bus.detail
        );
        RawValue::from_string(event).expect("a JSON event")
    }

    async fn object(&self, reference: &PayloadRef) -> Option<Vec<u8>> {
        let answer = self.s3.get_object().bucket(&reference.bucket).key(&reference.key).send().await.ok()?;
        Some(answer.body.collect().await.expect("object body").into_bytes().to_vec())
    }

    /// The `payload_sha256` of the event's inbox row: the SHA-256 of the payload bytes applied
    /// (its `payload_hash` is over their RFC 8785 canonical form).
    async fn inbox_sha256(&self, event_id: &str) -> Option<String> {
        let items = self.dynamodb.scan().table_name(&self.inbox_table).consistent_read(true).send().await.expect("Scan").items.unwrap_or_default();
        let row: Option<HashMap<String, AttributeValue>> =
            items.into_iter().find(|i| i.get("event_id").and_then(|v| v.as_s().ok()) == Some(&event_id.to_owned()));
        row.and_then(|r| r.get("payload_sha256").and_then(|v| v.as_s().ok()).cloned())
    }
}

fn event(order_id: &str, payload: &str) -> Event {
    Event::from_json("OrderCreated", "example.orders", ("Order", order_id), 1, payload).correlation_id("c-1").trace_header(None)
}

/// `{"order_id": …, "blob": "xx…"}` (a big text field stands for any large document) of exactly
/// `bytes` bytes.
fn payload_of(order_id: &str, bytes: usize) -> String {
    let payload = format!(r#"{{"order_id":"{order_id}","blob":"{}"}}"#, "x".repeat(bytes - empty_len(order_id)));
    assert_eq!(payload.len(), bytes);
    payload
}

/// Store → item → bus event → consumer for one large payload.
async fn large_payload_end_to_end(payload_bytes: usize) {
    let setup = setup().await;
    let order_id = format!("big-{payload_bytes}");
    let (item, payload) = setup.produce(&setup.writer(DEFAULT_MAX_PUT_EVENTS_BYTES), &order_id, payload_bytes).await;

    // The item holds the reference, not the bytes; the object holds the bytes.
    let reference = item.payload_ref.clone().expect("a large payload is claim-checked");
    assert_eq!(item.payload, "null");
    assert_eq!(
        reference,
        PayloadRef::new(setup.bucket.clone(), format!("orders/{}", item.event_id), payload_bytes as u64, sha256_hex(payload.as_bytes()))
    );
    assert_eq!(setup.object(&reference).await.as_deref(), Some(payload.as_bytes()), "uploaded before the transaction, byte for byte");

    // The relay publishes `detail.data_ref`, no `detail.data`: a small entry.
    let bus = item.to_bus_event().expect("publishable");
    assert!(bus.entry_size() < 2048, "the entry is {} bytes", bus.entry_size());
    let delivered = setup.relay_and_receive(&item).await;
    let event: serde_json::Value = serde_json::from_str(delivered.get()).expect("JSON");
    assert!(event["detail"].get("data").is_none(), "the bytes never travel through the bus");
    assert_eq!(serde_json::from_value::<PayloadRef>(event["detail"]["data_ref"].clone()).expect("data_ref is a PayloadRef"), reference);

    // The consumer fetches, verifies and applies; the inbox hash is the real payload's.
    let dead_letters = MemoryDeadLetters::new();
    let consumer = setup.consumer(&dead_letters);
    let answer = consumer.handle_payload(&delivered).await.unwrap_or_else(|e| panic!("handled: {e}"));
    assert_eq!(answer.outcome, Handled::Applied(Seen { order_id: order_id.clone(), blob_bytes: payload_bytes - empty_len(&order_id) }));
    assert_eq!(setup.inbox_sha256(&item.event_id).await.as_deref(), Some(reference.sha256.as_str()));
    // A redelivery is a duplicate (same hash), not a payload mismatch.
    assert_eq!(consumer.handle_payload(&delivered).await.expect("duplicate").outcome, Handled::Duplicate);
    assert!(dead_letters.messages().is_empty());
}

fn empty_len(order_id: &str) -> usize {
    format!(r#"{{"order_id":"{order_id}","blob":""}}"#).len()
}

#[tokio::test]
async fn a_1_mib_payload_goes_through_s3_end_to_end() {
    large_payload_end_to_end(1024 * 1024).await;
}

#[tokio::test]
async fn a_5_mib_payload_goes_through_s3_end_to_end() {
    large_payload_end_to_end(5 * 1024 * 1024).await;
}

#[tokio::test]
async fn exactly_at_the_inline_limit_stays_inline_one_byte_over_goes_to_s3() {
    let setup = setup().await;
    // With the bus at the old 256 KiB `PutEvents` limit, the entry is the smaller limit. (With
    // the 1 MiB default the item's 400 KB is, but moto refuses items above 405,000 bytes where
    // DynamoDB takes 409,600: the writer's unit tests cover that limit.)
    let writer = setup.writer(256 * 1024);
    let limit = writer.inline_limit(&event("at", "{}"));
    assert!(limit < 256 * 1024, "the PutEvents entry is the smaller limit here: {limit}");

    let (at, payload) = setup.produce(&writer, "at", limit).await;
    assert_eq!((at.payload_ref.as_ref(), at.payload.len()), (None, limit), "exactly at the limit: inline");
    let (over, _) = setup.produce(&writer, "over", limit + 1).await;
    let reference = over.payload_ref.clone().expect("one byte over the limit: claim-checked");
    assert_eq!(reference.size, limit as u64 + 1);
    assert!(setup.object(&reference).await.is_some());

    let dead_letters = MemoryDeadLetters::new();
    let consumer = setup.consumer(&dead_letters);
    for (item, id) in [(&at, "at"), (&over, "over")] {
        let answer = consumer.handle_payload(&setup.delivered(item)).await.unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(matches!(answer.outcome, Handled::Applied(Seen { ref order_id, .. }) if order_id == id), "{id}: {:?}", answer.outcome);
    }
    assert_eq!(setup.inbox_sha256(&at.event_id).await, Some(sha256_hex(payload.as_bytes())));
}

#[tokio::test]
async fn a_tampered_object_is_dead_lettered_with_the_reason() {
    let setup = setup().await;
    let (item, payload) = setup.produce(&setup.writer(DEFAULT_MAX_PUT_EVENTS_BYTES), "tampered", 512 * 1024).await;
    let reference = item.payload_ref.clone().expect("claim-checked");
    // Same size, one byte changed: only the SHA-256 can tell.
    let tampered = payload.replacen("xxx", "xyx", 1);
    assert_eq!(tampered.len(), payload.len());
    setup.s3.put_object().bucket(&reference.bucket).key(&reference.key).body(tampered.into_bytes().into()).send().await.expect("PutObject");

    let dead_letters = MemoryDeadLetters::new();
    let answer = setup.consumer(&dead_letters).handle_payload(&setup.delivered(&item)).await.expect("dead-lettered, not failed");
    assert_eq!(answer.outcome, Handled::DeadLettered);
    let messages = dead_letters.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].error_type, "PayloadCorrupt");
    assert!(messages[0].reason.contains(&format!("s3://{}/{} is corrupt: SHA-256", reference.bucket, reference.key)), "{}", messages[0].reason);
    assert_eq!(messages[0].event_id.as_deref(), Some(item.event_id.as_str()));
    assert_eq!(setup.inbox_sha256(&item.event_id).await, None, "nothing applied");
}

#[tokio::test]
async fn a_missing_object_is_dead_lettered_with_the_reason() {
    let setup = setup().await;
    let (item, _) = setup.produce(&setup.writer(DEFAULT_MAX_PUT_EVENTS_BYTES), "missing", 512 * 1024).await;
    let reference = item.payload_ref.clone().expect("claim-checked");
    setup.s3.delete_object().bucket(&reference.bucket).key(&reference.key).send().await.expect("DeleteObject");

    let dead_letters = MemoryDeadLetters::new();
    let answer = setup.consumer(&dead_letters).handle_payload(&setup.delivered(&item)).await.expect("dead-lettered, not failed");
    assert_eq!(answer.outcome, Handled::DeadLettered);
    let messages = dead_letters.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].error_type, "PayloadMissing");
    assert!(messages[0].reason.contains("does not exist"), "{}", messages[0].reason);
    assert_eq!(setup.inbox_sha256(&item.event_id).await, None, "nothing applied");
}

#[tokio::test]
async fn an_unreachable_store_fails_the_invocation_for_a_retry_instead_of_dead_lettering() {
    let setup = setup().await;
    let (item, _) = setup.produce(&setup.writer(DEFAULT_MAX_PUT_EVENTS_BYTES), "unreachable", 512 * 1024).await;
    // Nothing listens on port 1: a dispatch failure, which crate::aws_error classifies retryable.
    let sdk = sdk_config(&Target { endpoint: Some("http://127.0.0.1:1".into()), region: "us-east-1".into() }).await;
    let config =
        aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled()).build();
    let unreachable = ClaimCheck::new(aws_sdk_s3::Client::from_conf(config), &setup.bucket, "orders");
    let dead_letters = MemoryDeadLetters::new();
    let inbox = Inbox::new(setup.dynamodb.clone(), &setup.inbox_table, "claim-check-test", Duration::from_secs(3600));
    let consumer: Consumer<_, _, ()> = Consumer::builder(inbox, dead_letters.clone())
        .retry(RetryPolicy::none())
        .claim_check(unreachable)
        .on::<serde_json::Value, _, _>("OrderCreated", |_event, _tx| async move { Ok(()) })
        .build();
    let err = consumer.handle_payload(&setup.delivered(&item)).await.expect_err("a transient S3 failure fails the invocation");
    assert!(err.is_retryable() && err.is_transient(), "{err}");
    assert_eq!(err.error_type(), "Retryable");
    assert!(dead_letters.messages().is_empty());
}

#[tokio::test]
async fn a_consumer_without_a_claim_check_dead_letters_a_reference_naming_it() {
    let setup = setup().await;
    let (item, _) = setup.produce(&setup.writer(DEFAULT_MAX_PUT_EVENTS_BYTES), "no-claim-check", 512 * 1024).await;
    let dead_letters = MemoryDeadLetters::new();
    let inbox = Inbox::new(setup.dynamodb.clone(), &setup.inbox_table, "claim-check-test", Duration::from_secs(3600));
    let consumer: Consumer<_, _, ()> =
        Consumer::builder(inbox, dead_letters.clone()).on::<serde_json::Value, _, _>("OrderCreated", |_event, _tx| async move { Ok(()) }).build();
    assert_eq!(consumer.handle_payload(&setup.delivered(&item)).await.expect("dead-lettered").outcome, Handled::DeadLettered);
    let messages = dead_letters.messages();
    assert_eq!(messages[0].error_type, "MalformedEvent");
    assert!(messages[0].reason.contains("no claim check (ConsumerBuilder::claim_check)"), "{}", messages[0].reason);
}

#[tokio::test]
async fn the_payload_lifecycle_outlives_the_outbox_retention_and_the_longest_redelivery_window() {
    let template = Template::load(&root().join("template.yaml")).expect("template.yaml loads");
    let (_, bucket) = template.resources_of("AWS::S3::Bucket").into_iter().find(|(id, _)| id == "OutboxPayloadBucket").expect("OutboxPayloadBucket");
    let rule = &bucket["LifecycleConfiguration"]["Rules"][0];
    let days = rule["ExpirationInDays"].as_u64().expect("ExpirationInDays is a number");
    let retention: u64 = setup().await.producer_env["OUTBOX_RETENTION_SECONDS"].parse().expect("seconds");
    // DeadLetterRetentionSeconds at its maximum (SQS's 14 days) plus the inbox's redrive margin.
    let redelivery = outbox_lambda::DEFAULT_DEAD_LETTER_RETENTION.as_secs() + outbox_lambda::DEFAULT_REDRIVE_MARGIN.as_secs();
    assert!(days * 86_400 >= retention + redelivery, "{days} days < {retention} s + {redelivery} s");
}
