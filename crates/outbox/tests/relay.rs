//! Integration tests of `outbox::relay::Relay` against EventBridge and SQS clients mocked with
//! `aws-smithy-mocks`: partial `PutEvents` failures, retries, dead-lettering, batching limits,
//! skips, per-aggregate ordering, payload fidelity, the Lambda response shape and the time budget.
//!
//! Every mock records what it was sent, so the tests check what went over the wire, not only
//! what the relay reports about itself.

mod support {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
    use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
    use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};
    use aws_sdk_sqs::operation::send_message::{SendMessageError, SendMessageOutput};
    use aws_sdk_sqs::types::error::QueueDoesNotExist;
    use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
    use outbox::envelope::OutboxItem;
    use outbox::relay::{Relay, RelayConfig, RelayOutcome};
    use serde_json::{json, Value};

    pub const BUS: &str = "test-bus";
    pub const DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/relay-dlq";
    pub const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026-01-01T00:00:00.000";

    /// Outbox item `sequence` of aggregate `Order#<aggregate_id>`; event id `evt-<id>-<seq>`.
    pub fn item(aggregate_id: &str, sequence: u64) -> OutboxItem {
        OutboxItem {
            pk: OutboxItem::partition_key("Order", aggregate_id),
            sk: OutboxItem::sort_key(sequence),
            event_id: format!("evt-{aggregate_id}-{sequence}"),
            event_type: "OrderCreated".into(),
            event_version: 1,
            source: "example.orders".into(),
            aggregate_type: "Order".into(),
            aggregate_id: aggregate_id.into(),
            sequence,
            occurred_at: "2026-11-29T08:00:00.000Z".into(),
            payload: format!(r#"{{"order_id":"{aggregate_id}","n":{sequence}}}"#),
            payload_ref: None,
            correlation_id: "corr-1".into(),
            trace_header: None,
            expires_at: 1_900_000_000,
            previous: Default::default(),
        }
    }

    /// The item as a stream image (DynamoDB JSON).
    pub fn image(item: &OutboxItem) -> Value {
        let attrs: serde_dynamo::Item = item.to_item().expect("an OutboxItem converts");
        serde_json::to_value(attrs).expect("DynamoDB JSON")
    }

    /// Stream sequence number of the record at position `n` (distinct, increasing).
    pub fn seq(n: usize) -> String {
        format!("{:021}", 4_200_000 + n)
    }

    /// One stream record; `new_image` = `Value::Null` leaves `NewImage` out.
    pub fn record(event_name: &str, sequence_number: &str, new_image: Value) -> Value {
        let keys = match &new_image {
            Value::Object(m) => m.iter().filter(|(k, _)| *k == "pk" || *k == "sk").map(|(k, v)| (k.clone(), v.clone())).collect(),
            _ => serde_json::Map::new(),
        };
        let mut dynamodb = json!({
            "ApproximateCreationDateTime": 1_764_403_200.0,
            "Keys": keys,
            "SequenceNumber": sequence_number,
            "SizeBytes": 321,
            "StreamViewType": "NEW_IMAGE",
        });
        if !new_image.is_null() {
            dynamodb["NewImage"] = new_image;
        }
        json!({
            "eventID": format!("event-{sequence_number}"),
            "eventName": event_name,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "eventSourceARN": STREAM_ARN,
            "dynamodb": dynamodb,
        })
    }

    /// An `INSERT` record of `item`.
    pub fn insert(sequence_number: &str, item: &OutboxItem) -> Value {
        record("INSERT", sequence_number, image(item))
    }

    pub fn batch(records: Vec<Value>) -> DynamoDbEvent {
        serde_json::from_value(json!({ "Records": records })).expect("a DynamoDB stream event")
    }

    /// One `INSERT` per item; record `i` has sequence number `seq(i)`.
    pub fn inserts(items: &[OutboxItem]) -> DynamoDbEvent {
        batch(items.iter().enumerate().map(|(i, it)| insert(&seq(i), it)).collect())
    }

    /// Tiny backoffs, no safety margin.
    pub fn config() -> RelayConfig {
        let mut config = RelayConfig::new(BUS, DLQ_URL);
        config.base_backoff = Duration::from_millis(1);
        config.max_backoff = Duration::from_millis(5);
        config.safety_margin = Duration::ZERO;
        config.call_budget = Duration::ZERO;
        config
    }

    /// The mocked EventBridge: answers each entry by `policy` (an error code, or accepted) and
    /// records every request's entries.
    pub struct Bus {
        pub rule: Rule,
        calls: Arc<Mutex<Vec<Vec<PutEventsRequestEntry>>>>,
    }

    impl Bus {
        pub fn new(policy: impl Fn(&PutEventsRequestEntry) -> Option<&'static str> + Send + Sync + 'static) -> Self {
            let calls: Arc<Mutex<Vec<Vec<PutEventsRequestEntry>>>> = Default::default();
            let log = calls.clone();
            let accepted = AtomicUsize::new(0);
            let rule = mock!(aws_sdk_eventbridge::Client::put_events).then_compute_output(move |input| {
                log.lock().unwrap().push(input.entries().to_vec());
                let results: Vec<PutEventsResultEntry> = input
                    .entries()
                    .iter()
                    .map(|entry| match policy(entry) {
                        Some(code) => PutEventsResultEntry::builder().error_code(code).error_message(format!("mock {code}")).build(),
                        None => PutEventsResultEntry::builder().event_id(format!("eb-{}", accepted.fetch_add(1, Ordering::SeqCst))).build(),
                    })
                    .collect();
                let failed = results.iter().filter(|r| r.error_code().is_some()).count();
                PutEventsOutput::builder().failed_entry_count(failed as i32).set_entries(Some(results)).build()
            });
            Self { rule, calls }
        }

        /// Accepts everything.
        pub fn ok() -> Self {
            Self::new(|_| None)
        }

        /// Every request fails as a whole with HTTP 500 (requests are not recorded).
        pub fn http_500() -> Self {
            let rule = mock!(aws_sdk_eventbridge::Client::put_events).sequence().http_status(500, None).repeatedly().build();
            Self { rule, calls: Default::default() }
        }

        /// Entries of every request, in call order.
        pub fn calls(&self) -> Vec<Vec<PutEventsRequestEntry>> {
            self.calls.lock().unwrap().clone()
        }

        pub fn entry_counts(&self) -> Vec<usize> {
            self.calls().iter().map(Vec::len).collect()
        }

        /// Every entry sent, in order, as (aggregate id, sequence).
        pub fn sent(&self) -> Vec<(String, u64)> {
            self.calls().iter().flatten().map(|e| (subject(e), sequence(e))).collect()
        }

        /// How often the entry of (aggregate, sequence) was sent.
        pub fn times_sent(&self, aggregate_id: &str, seq: u64) -> usize {
            self.sent().iter().filter(|(a, s)| a == aggregate_id && *s == seq).count()
        }
    }

    /// The mocked relay dead-letter queue: records each message body, or always fails.
    pub struct Dlq {
        pub rule: Rule,
        messages: Arc<Mutex<Vec<(String, String)>>>,
    }

    impl Dlq {
        pub fn ok() -> Self {
            let messages: Arc<Mutex<Vec<(String, String)>>> = Default::default();
            let log = messages.clone();
            let rule = mock!(aws_sdk_sqs::Client::send_message).then_compute_output(move |input| {
                log.lock().unwrap().push((input.queue_url().unwrap_or_default().to_owned(), input.message_body().unwrap_or_default().to_owned()));
                SendMessageOutput::builder().message_id("msg-1").build()
            });
            Self { rule, messages }
        }

        pub fn failing() -> Self {
            let rule = mock!(aws_sdk_sqs::Client::send_message)
                .then_error(|| SendMessageError::QueueDoesNotExist(QueueDoesNotExist::builder().message("queue is gone").build()));
            Self { rule, messages: Default::default() }
        }

        /// Queue URLs the messages were sent to.
        pub fn queue_urls(&self) -> Vec<String> {
            self.messages.lock().unwrap().iter().map(|(url, _)| url.clone()).collect()
        }

        /// Message bodies, parsed.
        pub fn bodies(&self) -> Vec<Value> {
            self.messages.lock().unwrap().iter().map(|(_, body)| serde_json::from_str(body).expect("JSON body")).collect()
        }
    }

    /// A relay over the two mocks; the SDK's own retries are off so each mock call is one attempt.
    pub fn relay(bus: &Bus, dlq: &Dlq, config: RelayConfig) -> Relay {
        let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&bus.rule], |c| {
            c.retry_config(aws_sdk_eventbridge::config::retry::RetryConfig::disabled())
        });
        let sqs =
            mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&dlq.rule], |c| { c.retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()) });
        Relay::new(events, sqs, config)
    }

    /// Relays with a deadline an hour away.
    pub async fn run(relay: &Relay, batch: &DynamoDbEvent) -> RelayOutcome {
        relay.relay(batch, Instant::now() + Duration::from_secs(3600)).await.expect("the relay answers per record")
    }

    /// `batchItemFailures[*].itemIdentifier`.
    pub fn failures(outcome: &RelayOutcome) -> Vec<String> {
        outcome.response.batch_item_failures.iter().map(|f| f.item_identifier.clone().expect("itemIdentifier is set")).collect()
    }

    pub fn detail(entry: &PutEventsRequestEntry) -> Value {
        serde_json::from_str(entry.detail().expect("Detail is set")).expect("Detail is JSON")
    }

    /// `detail.metadata.subject`: the aggregate id.
    pub fn subject(entry: &PutEventsRequestEntry) -> String {
        detail(entry)["metadata"]["subject"].as_str().expect("subject").to_owned()
    }

    /// `detail.metadata.sequence`.
    pub fn sequence(entry: &PutEventsRequestEntry) -> u64 {
        detail(entry)["metadata"]["sequence"].as_u64().expect("sequence")
    }
}

mod logs;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use outbox::dead_letter::RELAY_FAILURE_KIND;
use outbox::relay::SkipReason;
use serde_json::json;
use support::*;

/// 1. `PutEvents` answers HTTP 200 with `FailedEntryCount` = 1: only that entry is retried, only
/// its record is reported, the others count as published.
#[tokio::test]
async fn partial_failure_with_http_200_reports_only_the_failed_record() {
    let bus = Bus::new(|e| (subject(e) == "b").then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let outcome = run(&relay, &inserts(&[item("a", 1), item("b", 1), item("c", 1)])).await;

    assert_eq!(failures(&outcome), vec![seq(1)]);
    assert_eq!(outcome.report.failed, 1);
    assert_eq!(outcome.report.published, 2);
    assert_eq!(outcome.report.published_event_ids, ["evt-a-1", "evt-c-1"]);
    // All three went in one call; the 1st and 3rd were accepted there and never resent.
    let calls = bus.calls();
    assert_eq!(calls[0].len(), 3);
    assert_eq!(bus.times_sent("a", 1), 1);
    assert_eq!(bus.times_sent("c", 1), 1);
    assert_eq!(bus.times_sent("b", 1), relay.config().max_attempts as usize);
    assert!(calls[1..].iter().all(|c| c.len() == 1 && subject(&c[0]) == "b"), "{:?}", bus.sent());
    assert_eq!(outcome.report.dead_lettered, 0);
    assert_eq!(dlq.rule.num_calls(), 0);
}

/// 2. A throttled entry is resent alone until it succeeds.
#[tokio::test]
async fn throttling_that_clears_after_two_retries_resends_only_the_failed_entry() {
    let throttles_left = AtomicUsize::new(2);
    let bus = Bus::new(move |e| {
        let throttle = subject(e) == "a" && throttles_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        throttle.then_some("ThrottlingException")
    });
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let outcome = run(&relay, &inserts(&[item("a", 1), item("b", 1)])).await;

    assert!(failures(&outcome).is_empty());
    assert_eq!(outcome.report.published, 2);
    assert_eq!(outcome.report.retried, 2);
    assert_eq!(outcome.report.failed, 0);
    assert_eq!(bus.entry_counts(), [2, 1, 1]);
    assert_eq!(bus.sent(), [("a".into(), 1), ("b".into(), 1), ("a".into(), 1), ("a".into(), 1)]);
    assert_eq!(outcome.report.put_events_calls, 3);
}

/// Each published event gets one log line in its span (`event_id`, `event_type`,
/// `aggregate_type`, `aggregate_id`, `correlation_id`), with the `PutEvents` attempt that
/// published it; a failed entry's line is in the same span.
#[tokio::test]
async fn every_event_is_logged_in_its_span_with_the_attempt() {
    let captured = logs::Captured::global();
    let throttles_left = AtomicUsize::new(2);
    let bus = Bus::new(move |e| {
        let throttle = subject(e) == "logged-a" && throttles_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        throttle.then_some("ThrottlingException")
    });
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let outcome = run(&relay, &inserts(&[item("logged-a", 1), item("logged-b", 1)])).await;
    assert_eq!(outcome.report.published, 2);

    let failed = "PutEvents entry failed".to_owned();
    let published = "event published".to_owned();
    assert_eq!(captured.attempts_of("evt-logged-a-1"), [(failed.clone(), 1), (failed, 2), (published.clone(), 3)], "{}", captured.text());
    assert_eq!(captured.attempts_of("evt-logged-b-1"), [(published, 1)], "{}", captured.text());
    let line = captured.lines().into_iter().find(|l| l["span"]["event_id"] == "evt-logged-b-1").expect("a line of evt-logged-b-1");
    let span = &line["span"];
    assert_eq!(
        (&span["event_type"], &span["aggregate_type"], &span["aggregate_id"]),
        (&json!("OrderCreated"), &json!("Order"), &json!("logged-b")),
        "{line}"
    );
    assert!(span["correlation_id"].is_string(), "{line}");
}

/// 3. An entry rejected with a permanent code is dead-lettered with its stream record, not
/// retried and not reported.
#[tokio::test]
async fn permanent_entry_failure_is_dead_lettered_and_not_retried() {
    let bus = Bus::new(|e| (subject(e) == "b").then_some("MalformedDetail"));
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let b = item("b", 1);
    let outcome = run(&relay, &inserts(&[item("a", 1), b.clone(), item("c", 1)])).await;

    assert!(failures(&outcome).is_empty());
    assert_eq!(outcome.report.published_event_ids, ["evt-a-1", "evt-c-1"]);
    assert_eq!(outcome.report.dead_lettered, 1);
    assert_eq!(outcome.report.retried, 0);
    assert_eq!(bus.entry_counts(), [3], "the malformed entry must not be resent");

    assert_eq!(dlq.queue_urls(), [DLQ_URL]);
    let bodies = dlq.bodies();
    assert_eq!(bodies.len(), 1);
    let body = &bodies[0];
    assert_eq!(body["kind"], RELAY_FAILURE_KIND);
    assert_eq!(body["kind"], "outbox-relay-failure");
    assert_eq!(body["error_code"], "MalformedDetail");
    assert_eq!(body["event_id"], "evt-b-1");
    assert_eq!(body["sequence_number"], seq(1));
    assert_eq!(body["event_source_arn"], STREAM_ARN);
    let record = &body["record"];
    assert_eq!(record["eventName"], "INSERT");
    assert_eq!(record["eventSourceARN"], STREAM_ARN);
    assert_eq!(record["dynamodb"]["SequenceNumber"], seq(1));
    assert_eq!(record["dynamodb"]["NewImage"], image(&b));
}

/// 4a. Items that can never become an event are dead-lettered before `PutEvents`.
#[tokio::test]
async fn poison_items_are_dead_lettered_without_reaching_put_events() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let mut config = config();
    config.max_request_bytes = 1024;
    let good = item("a", 1);
    assert!(good.to_bus_event().unwrap().entry_size() < 1024);
    let mut not_json = item("b", 1);
    not_json.payload = "{not json".into();
    let mut no_type = image(&item("c", 1));
    no_type.as_object_mut().unwrap().remove("event_type");
    let mut oversize = item("d", 1);
    oversize.payload = format!("\"{}\"", "x".repeat(2000));
    let relay = relay(&bus, &dlq, config);
    let batch = batch(vec![insert(&seq(0), &good), insert(&seq(1), &not_json), record("INSERT", &seq(2), no_type), insert(&seq(3), &oversize)]);
    let outcome = run(&relay, &batch).await;

    assert!(failures(&outcome).is_empty());
    assert_eq!(outcome.report.dead_lettered, 3);
    assert_eq!(outcome.report.published_event_ids, ["evt-a-1"]);
    assert_eq!(bus.sent(), [("a".into(), 1)], "poison items must never reach PutEvents");
    let bodies = dlq.bodies();
    let codes: Vec<&str> = bodies.iter().map(|b| b["error_code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["MalformedOutboxItem", "MalformedOutboxItem", "EventTooLarge"]);
    let ids: Vec<&str> = bodies.iter().map(|b| b["event_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["evt-b-1", "evt-c-1", "evt-d-1"]);
    let seqs: Vec<&str> = bodies.iter().map(|b| b["sequence_number"].as_str().unwrap()).collect();
    assert_eq!(seqs, [seq(1), seq(2), seq(3)]);
    assert!(bodies.iter().all(|b| b["kind"] == RELAY_FAILURE_KIND && b["record"]["eventName"] == "INSERT"));
}

/// 4b. A poison record whose dead-letter write fails is reported, never lost; records after it
/// are not published (they will be re-delivered).
#[tokio::test]
async fn poison_item_is_reported_when_the_dead_letter_queue_fails_too() {
    let bus = Bus::ok();
    let dlq = Dlq::failing();
    let relay = relay(&bus, &dlq, config());
    let mut not_json = item("b", 1);
    not_json.payload = "{not json".into();
    let outcome = run(&relay, &inserts(&[item("a", 1), not_json, item("c", 1)])).await;

    assert_eq!(failures(&outcome), vec![seq(1)]);
    assert_eq!(outcome.report.failed, 1);
    assert_eq!(outcome.report.dead_lettered, 0);
    assert_eq!(dlq.rule.num_calls(), 1);
    assert_eq!(outcome.report.published_event_ids, ["evt-a-1"]);
    assert_eq!(bus.sent(), [("a".into(), 1)]);
    assert_eq!(outcome.report.deferred, 1);
}

/// 5. Batches are cut into calls of at most 10 entries.
#[tokio::test]
async fn batches_are_cut_into_calls_of_at_most_ten_entries() {
    for (n, expected_calls) in [(0, 0), (1, 1), (10, 1), (11, 2), (1000, 100)] {
        let bus = Bus::ok();
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq, config());
        let items: Vec<_> = (0..n).map(|i| item(&format!("o-{i}"), 1)).collect();
        let outcome = run(&relay, &inserts(&items)).await;

        assert_eq!(bus.rule.num_calls(), expected_calls, "{n} records");
        assert_eq!(outcome.report.put_events_calls, expected_calls, "{n} records");
        assert!(bus.entry_counts().iter().all(|&c| (1..=10).contains(&c)), "{n} records: {:?}", bus.entry_counts());
        assert_eq!(outcome.report.published, n);
        let mut sent: Vec<String> = bus.sent().into_iter().map(|(a, _)| a).collect();
        let mut expected: Vec<String> = (0..n).map(|i| format!("o-{i}")).collect();
        sent.sort();
        expected.sort();
        assert_eq!(sent, expected, "{n} records: each published exactly once");
        assert_eq!(serde_json::to_value(&outcome.response).unwrap(), json!({ "batchItemFailures": [] }));
        assert_eq!(dlq.rule.num_calls(), 0);
    }
}

/// 6. The request byte limit counts UTF-8 bytes and is inclusive.
#[tokio::test]
async fn request_byte_limit_counts_utf8_bytes() {
    let emoji = |id: &str| {
        let mut it = item(id, 1);
        it.payload = format!(r#"{{"text":"{}"}}"#, "🚀".repeat(40));
        it
    };
    let (a, b) = (emoji("a"), emoji("b"));
    let (ea, eb) = (a.to_bus_event().unwrap(), b.to_bus_event().unwrap());
    assert!(ea.detail.len() > ea.detail.chars().count() + 100, "chars and bytes must differ a lot");
    let sum = ea.entry_size() + eb.entry_size();

    for (limit, expected_calls) in [(sum - 1, 2), (sum, 1)] {
        let bus = Bus::ok();
        let dlq = Dlq::ok();
        let mut config = config();
        config.max_request_bytes = limit;
        let relay = relay(&bus, &dlq, config);
        let outcome = run(&relay, &inserts(&[a.clone(), b.clone()])).await;

        assert_eq!(bus.rule.num_calls(), expected_calls, "entries of {sum} bytes, limit {limit}");
        assert_eq!(outcome.report.published, 2);
        assert!(failures(&outcome).is_empty());
        assert_eq!(dlq.rule.num_calls(), 0);
    }
}

/// 7. Records that are not new outbox items are skipped and counted by reason.
#[tokio::test]
async fn non_events_are_skipped_and_counted_by_reason() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let modify = record("MODIFY", &seq(0), image(&item("a", 1)));
    let mut ttl_remove = record("REMOVE", &seq(1), serde_json::Value::Null);
    ttl_remove["dynamodb"]["OldImage"] = image(&item("b", 1));
    ttl_remove["userIdentity"] = json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
    let mut remove = record("REMOVE", &seq(2), serde_json::Value::Null);
    remove["dynamodb"]["OldImage"] = image(&item("c", 1));
    let not_outbox = record("INSERT", &seq(3), json!({ "pk": { "S": "Order#o-9" }, "sk": { "S": "META" }, "status": { "S": "NEW" } }));
    let outcome = run(&relay, &batch(vec![modify, ttl_remove, remove, not_outbox])).await;

    let expected: HashMap<SkipReason, usize> =
        [(SkipReason::Modify, 1), (SkipReason::TtlRemove, 1), (SkipReason::Remove, 1), (SkipReason::NotOutboxItem, 1)].into();
    assert_eq!(outcome.report.skipped, expected);
    assert_eq!(outcome.report.records, 4);
    assert_eq!(outcome.report.published, 0);
    assert_eq!(outcome.report.deferred, 0);
    assert_eq!(bus.rule.num_calls(), 0);
    assert_eq!(dlq.rule.num_calls(), 0);
    assert!(failures(&outcome).is_empty());
}

/// 8. After an aggregate's event fails, its later events are not sent in a later call: the
/// failed entry is resent alone, the rest of the batch waits for re-delivery.
#[tokio::test]
async fn later_events_of_a_failed_aggregate_are_never_sent_after_the_failure() {
    let bus = Bus::new(|e| (subject(e) == "x" && sequence(e) == 1).then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let mut config = config();
    config.max_request_bytes = 3 * item("x", 1).to_bus_event().unwrap().entry_size(); // 3 entries per call
    let relay = relay(&bus, &dlq, config);
    let batch = inserts(&[item("x", 1), item("y", 1), item("z", 1), item("x", 2), item("x", 3)]);
    let outcome = run(&relay, &batch).await;

    assert_eq!(failures(&outcome), vec![seq(0)]);
    let first: Vec<(String, u64)> = bus.calls()[0].iter().map(|e| (subject(e), sequence(e))).collect();
    assert_eq!(first, [("x".into(), 1), ("y".into(), 1), ("z".into(), 1)]);
    // Every later call is the failed entry alone: x2 and x3 were never sent.
    assert!(bus.calls()[1..].iter().all(|c| c.len() == 1 && subject(&c[0]) == "x" && sequence(&c[0]) == 1));
    assert_eq!(bus.times_sent("x", 2), 0);
    assert_eq!(bus.times_sent("x", 3), 0);
    assert_eq!(outcome.report.published_event_ids, ["evt-y-1", "evt-z-1"]);
    assert_eq!(outcome.report.failed, 1);
    assert_eq!(outcome.report.deferred, 2);
    assert_eq!(dlq.rule.num_calls(), 0);
}

/// 9. Events of one aggregate share a call, in sequence order: 100 records of one aggregate
/// take 10 full calls, not 100.
#[tokio::test]
async fn a_hot_aggregate_fills_whole_calls_in_sequence_order() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let items: Vec<_> = (1..=100).map(|s| item("x", s)).collect();
    let outcome = run(&relay, &inserts(&items)).await;

    assert_eq!(bus.entry_counts(), [10; 10]);
    assert_eq!(outcome.report.put_events_calls, 10);
    let expected: Vec<(String, u64)> = (1..=100).map(|s| ("x".into(), s)).collect();
    assert_eq!(bus.sent(), expected, "sent once each, in sequence order, within and across calls");
    assert_eq!(outcome.report.published, 100);
    assert!(failures(&outcome).is_empty());
}

/// 9b. An entry failing in the middle of a hot aggregate's calls: the failed entry is resent
/// alone until the attempts run out, no later call is made, and `batchItemFailures` names the
/// earliest failure, so nothing at or after it is acknowledged.
#[tokio::test]
async fn an_entry_failing_in_the_middle_acknowledges_nothing_after_it() {
    let bus = Bus::new(|e| (sequence(e) == 35).then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let items: Vec<_> = (1..=100).map(|s| item("x", s)).collect();
    let outcome = run(&relay, &inserts(&items)).await;

    // Record 35 is at position 34.
    assert_eq!(failures(&outcome), vec![seq(34)]);
    let calls = bus.calls();
    let max_attempts = relay.config().max_attempts as usize;
    assert_eq!(calls.len(), 4 + max_attempts - 1, "calls 1..=4, then record 35 alone");
    assert!(calls[4..].iter().all(|c| c.len() == 1 && sequence(&c[0]) == 35));
    // Sent: 1..=40 once each (36..=40 shared the failed call), nothing from 41 on.
    for s in 1..=40 {
        assert_eq!(bus.times_sent("x", s), if s == 35 { max_attempts } else { 1 }, "sequence {s}");
    }
    assert!((41..=100).all(|s| bus.times_sent("x", s) == 0));
    assert_eq!(outcome.report.failed, 1);
    assert_eq!(outcome.report.published, 39);
    assert_eq!(outcome.report.deferred, 60);
}

/// 10. The entry carries the payload verbatim, `Time` = `occurred_at` and the trace header.
#[tokio::test]
async fn entry_carries_payload_verbatim_time_and_trace_header() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let payload = r#"{"big":123456789012345678901234567890123456789,"exact":1.234567890123456789,"name":"Zoë 🚀"}"#;
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let mut it = item("o-1", 1);
    it.payload = payload.into();
    it.occurred_at = "2026-11-29T09:00:00.123+01:00".into();
    it.trace_header = Some(trace.into());
    let outcome = run(&relay, &inserts(&[it])).await;

    assert!(failures(&outcome).is_empty());
    let calls = bus.calls();
    let entry = &calls[0][0];
    let detail = entry.detail().unwrap();
    assert!(detail.contains(&format!(r#""data":{payload}"#)), "{detail}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(detail).unwrap()["metadata"]["time"], "2026-11-29T08:00:00.123Z");
    let utc_millis = chrono::DateTime::parse_from_rfc3339("2026-11-29T08:00:00.123Z").unwrap().timestamp_millis();
    assert_eq!(entry.time(), Some(&aws_smithy_types::DateTime::from_millis(utc_millis)));
    assert_eq!(entry.trace_header(), Some(trace));
    assert_eq!(entry.source(), Some("example.orders"));
    assert_eq!(entry.detail_type(), Some("OrderCreated"));
    assert_eq!(entry.event_bus_name(), Some(BUS));
}

/// 11. The Lambda response is exactly the `ReportBatchItemFailures` shape.
#[tokio::test]
async fn response_has_the_batch_item_failures_wire_shape() {
    let dlq = Dlq::ok();
    let failing = Bus::new(|_| Some("InternalFailure"));
    let outcome = run(&relay(&failing, &dlq, config()), &inserts(&[item("a", 1)])).await;
    assert_eq!(serde_json::to_value(&outcome.response).unwrap(), json!({ "batchItemFailures": [{ "itemIdentifier": seq(0) }] }));

    let ok = Bus::ok();
    let outcome = run(&relay(&ok, &dlq, config()), &inserts(&[item("a", 1)])).await;
    assert_eq!(serde_json::to_value(&outcome.response).unwrap(), json!({ "batchItemFailures": [] }));
}

/// 12. Retries stop at the invocation's deadline.
#[tokio::test]
async fn throttled_entry_is_not_retried_past_the_deadline() {
    let bus = Bus::new(|_| Some("ThrottlingException"));
    let dlq = Dlq::ok();
    let mut config = config();
    config.base_backoff = Duration::from_millis(100);
    config.max_backoff = Duration::from_secs(1);
    config.safety_margin = Duration::ZERO;
    // Without the budget, 50 attempts with backoffs of up to 1 s would take many seconds.
    config.max_attempts = 50;
    let relay = relay(&bus, &dlq, config);
    let batch = inserts(&[item("a", 1)]);

    let started = Instant::now();
    let deadline = started + Duration::from_millis(50);
    let outcome = tokio::time::timeout(Duration::from_secs(30), relay.relay(&batch, deadline))
        .await
        .expect("the relay returns")
        .expect("the relay answers per record");
    let elapsed = started.elapsed();

    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");
    assert_eq!(failures(&outcome), vec![seq(0)]);
    assert_eq!(outcome.report.failed, 1);
    assert!(bus.rule.num_calls() >= 1);
}

/// 12b. After the first `PutEvents` call, no call starts without its whole time budget left:
/// the records not sent are reported for re-delivery from the earliest one, none acknowledged.
#[tokio::test]
async fn no_put_events_call_starts_without_its_time_budget() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let mut config = config();
    config.call_budget = Duration::from_secs(600);
    let relay = relay(&bus, &dlq, config);
    // Call 1: the first ten records (the first call always starts); call 2: the last two, out of time.
    let items: Vec<_> = (1..=12u64).map(|n| item(if n % 2 == 0 { "a" } else { "b" }, n.div_ceil(2))).collect();
    let batch = inserts(&items);
    let outcome = relay.relay(&batch, Instant::now() + Duration::from_secs(60)).await.expect("the relay answers per record");
    assert_eq!(bus.rule.num_calls(), 1, "a call that could outlive the invocation is not started");
    assert_eq!(failures(&outcome), vec![seq(10)], "everything from the first unsent record is re-delivered");
    assert_eq!((outcome.report.published, outcome.report.deferred), (10, 2));
    assert!(outcome.report.out_of_time);
}

/// 13. A whole-request error fails every entry transiently: the earliest record is reported,
/// nothing is dead-lettered.
#[tokio::test]
async fn whole_request_error_reports_the_earliest_record_and_dead_letters_nothing() {
    let bus = Bus::http_500();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let outcome = run(&relay, &inserts(&[item("a", 1), item("b", 1), item("c", 1)])).await;

    assert_eq!(failures(&outcome), vec![seq(0)]);
    assert_eq!(outcome.report.failed, 3);
    assert_eq!(outcome.report.published, 0);
    assert_eq!(outcome.report.dead_lettered, 0);
    assert_eq!(dlq.rule.num_calls(), 0);
    // Retried as transient, within max_attempts.
    assert_eq!(bus.rule.num_calls(), relay.config().max_attempts as usize);
}

/// 14. The checkpoint rule: once a failure is known, records after it are not published (they
/// would only be duplicated on re-delivery), even records of other aggregates.
#[tokio::test]
async fn records_after_a_known_failure_are_not_published() {
    // 12 aggregates = calls of 10 and 2; the first record fails in the first call.
    let bus = Bus::new(|e| (subject(e) == "o-0").then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let items: Vec<_> = (0..12).map(|i| item(&format!("o-{i}"), 1)).collect();
    let outcome = run(&relay, &inserts(&items)).await;

    assert_eq!(failures(&outcome), vec![seq(0)]);
    assert_eq!(bus.times_sent("o-10", 1), 0);
    assert_eq!(bus.times_sent("o-11", 1), 0);
    assert_eq!(outcome.report.published, 9);
    assert_eq!(outcome.report.failed, 1);
    assert_eq!(outcome.report.deferred, 2);
    assert_eq!(bus.calls()[0].len(), 10);
    assert!(bus.calls()[1..].iter().all(|c| c.len() == 1 && subject(&c[0]) == "o-0"));
}

/// A table that names contract attributes differently (`OUTBOX_ATTRIBUTE_NAMES`) is relayed
/// like one that does not; without the renaming its items are not outbox items at all.
#[tokio::test]
async fn a_table_with_its_own_attribute_names_is_relayed_through_the_renaming() {
    let mut renamed = image(&item("o-7", 3));
    let object = renamed.as_object_mut().unwrap();
    let event_id = object.remove("event_id").unwrap();
    object.insert("EventId".into(), event_id);
    let payload = object.remove("payload").unwrap();
    object.insert("Body".into(), payload);
    let batch = batch(vec![record("INSERT", &seq(0), renamed)]);

    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let plain = run(&relay(&bus, &dlq, config()), &batch).await;
    assert_eq!(plain.report.published, 0, "without the renaming there is no event_id: not an outbox item");
    assert!(bus.calls().is_empty() && dlq.bodies().is_empty());

    let mut config = config();
    config.rename_attributes("event_id=EventId, payload=Body").unwrap();
    let outcome = run(&relay(&bus, &dlq, config), &batch).await;
    assert!(failures(&outcome).is_empty());
    assert_eq!(bus.sent(), vec![("o-7".to_string(), 3)]);
    let detail = detail(&bus.calls()[0][0]);
    assert_eq!(detail["metadata"]["id"], "evt-o-7-3");
    assert_eq!(detail["data"]["order_id"], "o-7");
}

#[test]
fn a_bad_attribute_renaming_names_the_entry() {
    let mut config = config();
    let err = config.rename_attributes("event_id").unwrap_err();
    assert!(err.to_string().contains("\"event_id\" is not `contract_name=table_name`"), "{err}");
    let err = config.rename_attributes("eventid=EventId").unwrap_err();
    assert!(err.to_string().contains("\"eventid\" is not an outbox attribute"), "{err}");
    let err = config.rename_attributes("event_id=X,payload=X").unwrap_err();
    assert!(err.to_string().contains("\"X\" appears twice"), "{err}");
    let err = config.rename_attributes("event_id=Id,event_id=Id2").unwrap_err();
    assert!(err.to_string().contains("\"event_id\" appears twice"), "{err}");
    assert!(config.attribute_names.is_empty(), "nothing is kept from a rejected renaming");
}

/// The batching benchmark: `PutEvents` calls per event for three mixes of aggregates in a
/// batch of 100 records (the relay's `BatchSize`), nothing failing. Prints the figures:
///
/// ```text
/// cargo test -p outbox --test relay calls_per_event -- --nocapture
/// ```
#[tokio::test]
async fn calls_per_event_by_aggregate_mix() {
    let mixes: [(&str, Vec<_>); 3] = [
        ("100 distinct aggregates x 1 event", (0..100).map(|i| item(&format!("o-{i}"), 1)).collect()),
        // Interleaved the way a busy table's stream interleaves them: 1 of each, then 2 of each, ...
        ("10 aggregates x 10 events", (1..=10).flat_map(|s| (0..10).map(move |i| item(&format!("o-{i}"), s))).collect()),
        ("1 aggregate x 100 events", (1..=100).map(|s| item("o-hot", s)).collect()),
    ];
    for (name, items) in mixes {
        let bus = Bus::ok();
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq, config());
        let outcome = run(&relay, &inserts(&items)).await;
        let per_event = outcome.report.put_events_calls as f64 / items.len() as f64;
        println!("{name:<36} events {:>3}  PutEvents calls {:>3}  calls/event {per_event:.2}", items.len(), outcome.report.put_events_calls);

        assert!(failures(&outcome).is_empty(), "{name}");
        assert_eq!(outcome.report.published, items.len(), "{name}");
        assert!(per_event <= 0.1, "{name}: {per_event} calls per event");
        // Each aggregate's events went out in sequence order.
        let mut last: HashMap<String, u64> = HashMap::new();
        for (aggregate, sequence) in bus.sent() {
            let previous = last.insert(aggregate.clone(), sequence).unwrap_or(0);
            assert_eq!(sequence, previous + 1, "{name}: {aggregate} out of order");
        }
    }
}
