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

    use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
    use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};
    use aws_sdk_sqs::operation::send_message::{SendMessageError, SendMessageOutput};
    use aws_sdk_sqs::types::error::QueueDoesNotExist;
    use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
    use outbox::envelope::OutboxItem;
    use outbox::relay::stream::StreamBatch;
    use outbox::relay::{Relay, RelayConfig, RelayOutcome};
    use serde_json::{json, Value};

    pub(crate) const BUS: &str = "test-bus";
    pub(crate) const DLQ_URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/relay-dlq";
    pub(crate) const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/outbox/stream/2026-01-01T00:00:00.000";

    /// Outbox item `sequence` of aggregate `Order#<aggregate_id>`; event id `evt-<id>-<seq>`.
    pub(crate) fn item(aggregate_id: &str, sequence: u64) -> OutboxItem {
        let payload = format!(r#"{{"order_id":"{aggregate_id}","n":{sequence}}}"#);
        let mut item = OutboxItem::new(
            format!("evt-{aggregate_id}-{sequence}"),
            "OrderCreated",
            "example.orders",
            ("Order", aggregate_id),
            sequence,
            "2026-11-29T08:00:00.000Z",
            payload,
        );
        item.correlation_id = "corr-1".into();
        item.expires_at = 1_900_000_000;
        item
    }

    /// The item as a stream image (DynamoDB JSON).
    pub(crate) fn image(item: &OutboxItem) -> Value {
        let attrs: serde_dynamo::Item = item.to_item().expect("an OutboxItem converts");
        serde_json::to_value(attrs).expect("DynamoDB JSON")
    }

    /// Stream sequence number of the record at position `n` (distinct, increasing).
    pub(crate) fn seq(n: usize) -> String {
        format!("{:021}", 4_200_000 + n)
    }

    /// One stream record; `new_image` = `Value::Null` leaves `NewImage` out.
    pub(crate) fn record(event_name: &str, sequence_number: &str, new_image: Value) -> Value {
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
    pub(crate) fn insert(sequence_number: &str, item: &OutboxItem) -> Value {
        record("INSERT", sequence_number, image(item))
    }

    /// The batch as the relay function reads Lambda's payload: decoded from its text.
    pub(crate) fn batch(records: Vec<Value>) -> StreamBatch {
        serde_json::from_str(&json!({ "Records": records }).to_string()).expect("a DynamoDB stream event")
    }

    /// One `INSERT` per item; record `i` has sequence number `seq(i)`.
    pub(crate) fn inserts(items: &[OutboxItem]) -> StreamBatch {
        batch(items.iter().enumerate().map(|(i, it)| insert(&seq(i), it)).collect())
    }

    /// Tiny backoffs, no safety margin.
    pub(crate) fn config() -> RelayConfig {
        let mut config = RelayConfig::new(BUS, DLQ_URL);
        config.base_backoff = Duration::from_millis(1);
        config.max_backoff = Duration::from_millis(5);
        config.safety_margin = Duration::ZERO;
        config.call_budget = Duration::ZERO;
        config
    }

    /// The mocked EventBridge: answers each entry by `policy` (an error code, or accepted) and
    /// records every request's entries.
    pub(crate) struct Bus {
        pub rule: Rule,
        calls: Arc<Mutex<Vec<Vec<PutEventsRequestEntry>>>>,
    }

    impl Bus {
        pub(crate) fn new(policy: impl Fn(&PutEventsRequestEntry) -> Option<&'static str> + Send + Sync + 'static) -> Self {
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
        pub(crate) fn ok() -> Self {
            Self::new(|_| None)
        }

        /// Every request fails as a whole with HTTP 500 (requests are not recorded).
        pub(crate) fn http_500() -> Self {
            let rule = mock!(aws_sdk_eventbridge::Client::put_events).sequence().http_status(500, None).repeatedly().build();
            Self { rule, calls: Default::default() }
        }

        /// Entries of every request, in call order.
        pub(crate) fn calls(&self) -> Vec<Vec<PutEventsRequestEntry>> {
            self.calls.lock().unwrap().clone()
        }

        pub(crate) fn entry_counts(&self) -> Vec<usize> {
            self.calls().iter().map(Vec::len).collect()
        }

        /// Every entry sent, in order, as (aggregate id, sequence).
        pub(crate) fn sent(&self) -> Vec<(String, u64)> {
            self.calls().iter().flatten().map(|e| (subject(e), sequence(e))).collect()
        }

        /// How often the entry of (aggregate, sequence) was sent.
        pub(crate) fn times_sent(&self, aggregate_id: &str, seq: u64) -> usize {
            self.sent().iter().filter(|(a, s)| a == aggregate_id && *s == seq).count()
        }
    }

    /// The mocked relay dead-letter queue: records each message body, or always fails.
    pub(crate) struct Dlq {
        pub rule: Rule,
        messages: Arc<Mutex<Vec<(String, String)>>>,
    }

    impl Dlq {
        pub(crate) fn ok() -> Self {
            let messages: Arc<Mutex<Vec<(String, String)>>> = Default::default();
            let log = messages.clone();
            let rule = mock!(aws_sdk_sqs::Client::send_message).then_compute_output(move |input| {
                log.lock().unwrap().push((input.queue_url().unwrap_or_default().to_owned(), input.message_body().unwrap_or_default().to_owned()));
                SendMessageOutput::builder().message_id("msg-1").build()
            });
            Self { rule, messages }
        }

        pub(crate) fn failing() -> Self {
            let rule = mock!(aws_sdk_sqs::Client::send_message)
                .then_error(|| SendMessageError::QueueDoesNotExist(QueueDoesNotExist::builder().message("queue is gone").build()));
            Self { rule, messages: Default::default() }
        }

        /// Queue URLs the messages were sent to.
        pub(crate) fn queue_urls(&self) -> Vec<String> {
            self.messages.lock().unwrap().iter().map(|(url, _)| url.clone()).collect()
        }

        /// Message bodies, as sent.
        pub(crate) fn texts(&self) -> Vec<String> {
            self.messages.lock().unwrap().iter().map(|(_, body)| body.clone()).collect()
        }

        /// Message bodies, parsed.
        pub(crate) fn bodies(&self) -> Vec<Value> {
            self.messages.lock().unwrap().iter().map(|(_, body)| serde_json::from_str(body).expect("JSON body")).collect()
        }
    }

    /// A relay over the two mocks; the SDK's own retries are off so each mock call is one attempt.
    pub(crate) fn relay(bus: &Bus, dlq: &Dlq, config: RelayConfig) -> Relay {
        let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&bus.rule], |c| {
            c.retry_config(aws_sdk_eventbridge::config::retry::RetryConfig::disabled())
        });
        let sqs =
            mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&dlq.rule], |c| { c.retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()) });
        Relay::new(events, sqs, config)
    }

    /// Relays with a deadline an hour away.
    pub(crate) async fn run(relay: &Relay, batch: &StreamBatch) -> RelayOutcome {
        relay.relay_batch(batch.clone(), Instant::now() + Duration::from_secs(3600)).await.expect("the relay answers per record")
    }

    /// `batchItemFailures[*].itemIdentifier`.
    pub(crate) fn failures(outcome: &RelayOutcome) -> Vec<String> {
        outcome.response.batch_item_failures.iter().map(|f| f.item_identifier.clone().expect("itemIdentifier is set")).collect()
    }

    pub(crate) fn detail(entry: &PutEventsRequestEntry) -> Value {
        serde_json::from_str(entry.detail().expect("Detail is set")).expect("Detail is JSON")
    }

    /// `detail.metadata.subject`: the aggregate id.
    pub(crate) fn subject(entry: &PutEventsRequestEntry) -> String {
        detail(entry)["metadata"]["subject"].as_str().expect("subject").to_owned()
    }

    /// `detail.metadata.sequence`.
    pub(crate) fn sequence(entry: &PutEventsRequestEntry) -> u64 {
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

/// At DEBUG, each published event gets one log line in its span (`event_id`, `event_type`,
/// `aggregate_type`, `aggregate_id`, `correlation_id`), with the `PutEvents` attempt that
/// published it; a failed entry's line is in the same span.
#[tokio::test]
async fn every_event_is_logged_in_its_span_with_the_attempt() {
    let captured = logs::Captured::global_at(tracing::Level::DEBUG);
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
/// failed entry is resent alone, the aggregate's next call is never sent, and the other
/// aggregates' call (in flight beside it) is published.
#[tokio::test]
async fn later_events_of_a_failed_aggregate_are_never_sent_after_the_failure() {
    let bus = Bus::new(|e| (subject(e) == "x" && sequence(e) == 1).then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let mut config = config();
    config.max_request_bytes = 3 * item("x", 1).to_bus_event().unwrap().entry_size(); // 3 entries per call
    let relay = relay(&bus, &dlq, config);
    let batch = inserts(&[item("x", 1), item("y", 1), item("z", 1), item("x", 2), item("x", 3), item("x", 4), item("x", 5)]);
    let outcome = run(&relay, &batch).await;

    assert_eq!(failures(&outcome), vec![seq(0)]);
    let calls: Vec<Vec<(String, u64)>> = bus.calls().iter().map(|c| c.iter().map(|e| (subject(e), sequence(e))).collect()).collect();
    let x_first = vec![("x".to_string(), 1), ("x".into(), 2), ("x".into(), 3)];
    let at = calls.iter().position(|c| *c == x_first).unwrap_or_else(|| panic!("x's first call: {calls:?}"));
    assert!(calls.contains(&vec![("y".to_string(), 1), ("z".into(), 1)]), "{calls:?}");
    // Every call after x's first one that carries x is the failed entry alone: x4 and x5 (x's
    // second call) were never sent.
    assert!(calls[at + 1..].iter().filter(|c| c.iter().any(|(a, _)| a == "x")).all(|c| *c == [("x".to_string(), 1)]), "{calls:?}");
    assert_eq!(bus.times_sent("x", 4), 0);
    assert_eq!(bus.times_sent("x", 5), 0);
    let mut published = outcome.report.published_event_ids.clone();
    published.sort();
    assert_eq!(published, ["evt-x-2", "evt-x-3", "evt-y-1", "evt-z-1"]);
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
    assert_eq!(outcome.report.max_calls_in_flight, 1, "one aggregate's calls never overlap");
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
    let outcome = tokio::time::timeout(Duration::from_secs(30), relay.relay_batch(batch, deadline))
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
    let items: Vec<_> = (0..12).map(|i| item(&format!("t-{i}"), 1)).collect();
    let batch = inserts(&items);
    let outcome = relay.relay_batch(batch, Instant::now() + Duration::from_secs(60)).await.expect("the relay answers per record");
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

/// 14. The checkpoint rule: once a failure is known, calls whose records all lie after it are
/// not started (they would only be duplicated on re-delivery), even calls of other aggregates.
#[tokio::test]
async fn records_after_a_known_failure_are_not_published() {
    // 12 aggregates = calls of 10 and 2; the first record fails in the first call, which
    // settles before the second could start (one call in flight).
    let bus = Bus::new(|e| (subject(e) == "o-0").then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let mut config = config();
    config.max_calls_in_flight = 1;
    let relay = relay(&bus, &dlq, config);
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

/// 15. Calls in flight together, the middle one failing: the three calls of 30 distinct
/// aggregates start before any has settled; an entry of the middle call fails for good. Nothing
/// is lost (every record before it was accepted), `batchItemFailures` names it, so nothing at or
/// after it is acknowledged; the calls beside it count as published (duplicates on re-delivery).
#[tokio::test]
async fn a_failure_in_the_middle_call_of_several_in_flight_loses_nothing_and_acknowledges_nothing_after_it() {
    let bus = Bus::new(|e| (subject(e) == "m-15").then_some("InternalFailure"));
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let items: Vec<_> = (0..30).map(|i| item(&format!("m-{i}"), 1)).collect();
    let outcome = run(&relay, &inserts(&items)).await;

    assert_eq!(outcome.report.max_calls_in_flight, 3, "the three calls were in flight together");
    assert_eq!(failures(&outcome), vec![seq(15)], "the checkpoint is the failed record");
    let calls = bus.calls();
    let first_wave: Vec<Vec<String>> = calls[..3].iter().map(|c| c.iter().map(subject).collect()).collect();
    let mut sent_first: Vec<String> = first_wave.concat();
    sent_first.sort();
    let mut all: Vec<String> = (0..30).map(|i| format!("m-{i}")).collect();
    all.sort();
    assert_eq!(sent_first, all, "the first three calls carry every record once: {first_wave:?}");
    assert!(calls[3..].iter().all(|c| c.len() == 1 && subject(&c[0]) == "m-15"), "only the failed entry is resent");
    // Nothing lost: every record before the checkpoint was accepted.
    let published: std::collections::HashSet<&str> = outcome.report.published_event_ids.iter().map(String::as_str).collect();
    for i in 0..15 {
        assert!(published.contains(format!("evt-m-{i}-1").as_str()), "record {i} before the checkpoint was not published");
    }
    assert_eq!((outcome.report.published, outcome.report.failed, outcome.report.deferred), (29, 1, 0));
    assert_eq!(dlq.rule.num_calls(), 0);
}

/// 16. With nothing failing, every aggregate's events reach the bus once each and in sequence
/// order, hot aggregates and cold ones interleaved, several calls in flight.
#[tokio::test]
async fn each_aggregate_reaches_the_bus_in_sequence_order_with_calls_in_flight() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    // Three hot aggregates with 25, 14 and 11 events, interleaved with 40 single events.
    let mut next: HashMap<String, u64> = HashMap::new();
    let mut items = Vec::new();
    for i in 0..90 {
        let aggregate = match i % 9 {
            0 | 3 | 6 => "hot-a".to_string(),
            1 | 5 if next.get("hot-b").copied().unwrap_or(0) < 14 => "hot-b".to_string(),
            2 if next.get("hot-c").copied().unwrap_or(0) < 11 => "hot-c".to_string(),
            _ => format!("cold-{i}"),
        };
        let sequence = next.entry(aggregate.clone()).or_default();
        *sequence += 1;
        items.push(item(&aggregate, *sequence));
    }
    let outcome = run(&relay, &inserts(&items)).await;

    assert!(failures(&outcome).is_empty());
    assert_eq!(outcome.report.published, 90);
    assert!(outcome.report.max_calls_in_flight > 1, "calls of different aggregates overlap");
    assert!(bus.entry_counts().iter().all(|&n| (1..=10).contains(&n)));
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    for (aggregate, sequence) in bus.sent() {
        seen.entry(aggregate).or_default().push(sequence);
    }
    for (aggregate, sequences) in &seen {
        let expected: Vec<u64> = (1..=next[aggregate]).collect();
        assert_eq!(*sequences, expected, "{aggregate} on the bus");
    }
    assert_eq!(seen.len(), next.len());
}

/// 17. `max_calls_in_flight` bounds the calls in flight; 1 is the sequential relay.
#[tokio::test]
async fn calls_in_flight_are_bounded() {
    for (bound, expected) in [(1, 1), (2, 2), (10, 5)] {
        let bus = Bus::ok();
        let dlq = Dlq::ok();
        let mut config = config();
        config.max_calls_in_flight = bound;
        let relay = relay(&bus, &dlq, config);
        let items: Vec<_> = (0..50).map(|i| item(&format!("b-{i}"), 1)).collect();
        let outcome = run(&relay, &inserts(&items)).await;
        assert_eq!(outcome.report.max_calls_in_flight, expected, "bound {bound}");
        assert_eq!((outcome.report.published, outcome.report.put_events_calls), (50, 5), "bound {bound}");
    }
}

/// At INFO a batch writes one line (the summary, with its counts), not one per event; the
/// per-event lines are DEBUG.
#[tokio::test]
async fn a_batch_logs_one_summary_line_at_info() {
    let captured = logs::Captured::global_at(tracing::Level::DEBUG);
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let items: Vec<_> = (0..37).map(|i| item(&format!("quiet-{i}"), 1)).collect();
    let outcome = run(&relay, &inserts(&items)).await;
    assert_eq!(outcome.report.published, 37);

    let lines = captured.lines();
    let ours = |l: &&serde_json::Value| l["span"]["aggregate_id"].as_str().is_some_and(|a| a.starts_with("quiet-"));
    assert!(lines.iter().filter(ours).all(|l| l["level"] == "DEBUG"), "per-event lines are DEBUG");
    assert_eq!(lines.iter().filter(ours).count(), 37, "one DEBUG line per event and attempt");
    let summaries: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["fields"]["message"] == "relay batch done" && l["fields"]["records"] == 37).collect();
    assert_eq!(summaries.len(), 1, "{}", captured.text());
    let fields = &summaries[0]["fields"];
    assert_eq!(summaries[0]["level"], "INFO");
    assert_eq!(
        (&fields["events"], &fields["published"], &fields["put_events_calls"], &fields["failed"]),
        (&json!(37), &json!(37), &json!(4), &json!(0))
    );
    assert!(fields["duration_ms"].is_u64() && fields["retried"] == 0, "{fields}");
}

/// At INFO (the template's level), each failed `PutEvents` entry is one WARN line naming the
/// event, its aggregate, the error and what happens next (`retry`, `fail_record` when out of
/// attempts, `dead_letter` for a permanent code); at most `MAX_FAILED_ENTRY_WARNINGS` such lines
/// a batch, then one line counting the rest. A batch without failures writes only its summary.
#[tokio::test]
async fn failed_entries_are_logged_at_warn_at_info_level_bounded_per_batch() {
    use outbox::relay::MAX_FAILED_ENTRY_WARNINGS;
    const REST: &str = "more PutEvents entries failed in this batch than are logged one by one";
    let warnings = |captured: &logs::Captured| -> Vec<serde_json::Value> {
        captured.lines().into_iter().filter(|l| l["level"] == "WARN").map(|l| l["fields"].clone()).collect()
    };
    let dlq = Dlq::ok();

    // No failure: the summary alone.
    let (at_info, scope) = logs::Captured::this_thread_at(tracing::Level::INFO);
    run(&relay(&Bus::ok(), &dlq, config()), &inserts(&[item("warn-ok", 1)])).await;
    drop(scope);
    let lines = at_info.lines();
    assert_eq!(lines.len(), 1, "{}", at_info.text());
    assert_eq!((&lines[0]["level"], &lines[0]["fields"]["message"]), (&json!("INFO"), &json!("relay batch done")));

    // One entry failing transiently until out of attempts, one rejected for good, one published.
    let bus = Bus::new(|e| match subject(e).as_str() {
        "warn-a" => Some("InternalFailure"),
        "warn-b" => Some("MalformedDetail"),
        _ => None,
    });
    let relay_a = relay(&bus, &dlq, config());
    let max_attempts = u64::from(relay_a.config().max_attempts);
    let (at_info, scope) = logs::Captured::this_thread_at(tracing::Level::INFO);
    let outcome = run(&relay_a, &inserts(&[item("warn-a", 1), item("warn-b", 1), item("warn-c", 1)])).await;
    drop(scope);
    assert_eq!((outcome.report.failed, outcome.report.dead_lettered, outcome.report.published), (1, 1, 1));
    let warned = warnings(&at_info);
    let entry_lines: Vec<&serde_json::Value> = warned.iter().filter(|f| f["message"] == "PutEvents entry failed").collect();
    let of = |aggregate: &str| -> Vec<(u64, String)> {
        entry_lines
            .iter()
            .filter(|f| f["aggregate_id"] == aggregate)
            .map(|f| (f["attempt"].as_u64().unwrap_or(0), f["action"].as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    let mut expected: Vec<(u64, String)> = (1..max_attempts).map(|a| (a, "retry".to_owned())).collect();
    expected.push((max_attempts, "fail_record".to_owned()));
    assert_eq!(of("warn-a"), expected, "{}", at_info.text());
    assert_eq!(of("warn-b"), [(1, "dead_letter".to_owned())]);
    assert!(of("warn-c").is_empty(), "a published entry is not warned about");
    let b = entry_lines.iter().find(|f| f["aggregate_id"] == "warn-b").expect("warn-b's line");
    assert_eq!(
        (&b["event_id"], &b["event_type"], &b["aggregate_type"], &b["error_code"], &b["error_message"]),
        (&json!("evt-warn-b-1"), &json!("OrderCreated"), &json!("Order"), &json!("MalformedDetail"), &json!("mock MalformedDetail"))
    );
    assert_eq!(entry_lines.len() as u64, max_attempts + 1);
    assert!(warned.iter().all(|f| f["message"] != REST));
    assert!(at_info.lines().iter().all(|l| l["level"] != "DEBUG"), "INFO writes no DEBUG line");

    // More failures than the bound: that many lines, then one with the count of the rest.
    let bus = Bus::new(|_| Some("MalformedDetail"));
    let failing = MAX_FAILED_ENTRY_WARNINGS + 7;
    let items: Vec<_> = (0..failing).map(|i| item(&format!("bound-{i}"), 1)).collect();
    let (at_info, scope) = logs::Captured::this_thread_at(tracing::Level::INFO);
    let outcome = run(&relay(&bus, &dlq, config()), &inserts(&items)).await;
    drop(scope);
    assert_eq!(outcome.report.dead_lettered, failing);
    let warned = warnings(&at_info);
    assert_eq!(warned.iter().filter(|f| f["message"] == "PutEvents entry failed").count(), MAX_FAILED_ENTRY_WARNINGS, "{}", at_info.text());
    let rest: Vec<&serde_json::Value> = warned.iter().filter(|f| f["message"] == REST).collect();
    assert_eq!(rest.len(), 1, "{}", at_info.text());
    assert_eq!((&rest[0]["logged"], &rest[0]["not_logged"]), (&json!(MAX_FAILED_ENTRY_WARNINGS), &json!(7)));
}

/// The relay's batching, ordering and checkpoint as properties of any batch: events of random
/// aggregates and sizes, some failing for good, random request limits and bounds on calls in
/// flight.
mod properties {
    use std::collections::{HashMap, HashSet};

    use proptest::prelude::*;

    use super::support::*;

    /// One generated record: aggregate (0..8), payload padding, whether its entry always fails.
    fn records() -> impl Strategy<Value = Vec<(u8, usize, bool)>> {
        prop::collection::vec((0u8..8, 0usize..700, prop::bool::weighted(0.08)), 0..70)
    }

    fn entry_size(e: &aws_sdk_eventbridge::types::PutEventsRequestEntry) -> usize {
        14 + e.source().unwrap_or_default().len() + e.detail_type().unwrap_or_default().len() + e.detail().unwrap_or_default().len()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn any_batch_is_cut_into_valid_calls_loses_nothing_keeps_order_and_checkpoints_at_the_earliest_failure(
            generated in records(),
            max_request_bytes in 900usize..4000,
            max_in_flight in 1usize..12,
        ) {
            let mut next: HashMap<String, u64> = HashMap::new();
            let mut items = Vec::new();
            let mut failing: HashSet<String> = HashSet::new();
            for (aggregate, padding, fails) in &generated {
                let aggregate = format!("p-{aggregate}");
                let sequence = next.entry(aggregate.clone()).or_default();
                *sequence += 1;
                let mut it = item(&aggregate, *sequence);
                it.payload = format!(r#"{{"order_id":"{aggregate}","pad":"{}"}}"#, "x".repeat(*padding));
                if *fails {
                    failing.insert(it.event_id.clone());
                }
                items.push(it);
            }
            let fits: Vec<bool> = items.iter().map(|it| it.to_bus_event().unwrap().entry_size() <= max_request_bytes).collect();
            let failing_ids = failing.clone();
            let bus = Bus::new(move |e| failing_ids.contains(detail(e)["metadata"]["id"].as_str().unwrap_or_default()).then_some("InternalFailure"));
            let dlq = Dlq::ok();
            let mut config = config();
            config.max_request_bytes = max_request_bytes;
            config.max_calls_in_flight = max_in_flight;
            config.max_attempts = 2;
            let relay = relay(&bus, &dlq, config);
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            let outcome = runtime.block_on(run(&relay, &inserts(&items)));

            // Calls of at most 10 entries and at most the request limit, never more in flight
            // than the bound.
            let calls = bus.calls();
            for call in &calls {
                prop_assert!((1..=10).contains(&call.len()));
                prop_assert!(call.iter().map(entry_size).sum::<usize>() <= max_request_bytes);
            }
            prop_assert!(outcome.report.max_calls_in_flight <= max_in_flight);

            // The checkpoint is the earliest record that failed (entries too large for a
            // request are dead-lettered, not failed).
            let earliest_failure = items.iter().enumerate().position(|(i, it)| fits[i] && failing.contains(&it.event_id));
            let expected: Vec<String> = earliest_failure.map(seq).into_iter().collect();
            prop_assert_eq!(failures(&outcome), expected);
            let checkpoint = earliest_failure.unwrap_or(usize::MAX);

            // Nothing lost: every record before the checkpoint was accepted by the bus or
            // dead-lettered.
            let accepted: HashSet<String> = calls
                .iter()
                .flatten()
                .map(|e| detail(e)["metadata"]["id"].as_str().unwrap_or_default().to_owned())
                .filter(|id| !failing.contains(id))
                .collect();
            let dead_lettered: HashSet<String> = dlq.bodies().iter().map(|b| b["event_id"].as_str().unwrap_or_default().to_owned()).collect();
            for (i, it) in items.iter().enumerate().take_while(|(i, _)| *i < checkpoint) {
                if fits[i] {
                    prop_assert!(accepted.contains(&it.event_id), "record {} ({}) before the checkpoint was not accepted", i, it.event_id);
                } else {
                    prop_assert!(dead_lettered.contains(&it.event_id), "oversize record {} was not dead-lettered", i);
                }
            }

            // Each aggregate's order: first sends in sequence order; after a call in which one of
            // its events failed, no later call carries the aggregate except that event's resends.
            let mut first_sends: HashMap<String, Vec<u64>> = HashMap::new();
            let mut sent_ids: HashSet<String> = HashSet::new();
            // Aggregate → (the call of its first failure, the sequences that failed in it).
            let mut failed_in: HashMap<String, (usize, HashSet<u64>)> = HashMap::new();
            for (n, call) in calls.iter().enumerate() {
                for e in call {
                    let (aggregate, sequence, id) = (subject(e), sequence(e), detail(e)["metadata"]["id"].as_str().unwrap_or_default().to_owned());
                    if let Some((at, failed)) = failed_in.get(&aggregate) {
                        prop_assert!(n == *at || failed.contains(&sequence), "{} #{} sent in call {} after its failure in call {}", aggregate, sequence, n, at);
                    }
                    if sent_ids.insert(id.clone()) {
                        first_sends.entry(aggregate.clone()).or_default().push(sequence);
                    }
                }
                for e in call.iter().filter(|e| failing.contains(detail(e)["metadata"]["id"].as_str().unwrap_or_default())) {
                    let (at, failed) = failed_in.entry(subject(e)).or_insert((n, HashSet::new()));
                    if *at == n {
                        failed.insert(sequence(e));
                    }
                }
            }
            for (aggregate, sequences) in &first_sends {
                prop_assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{} first sent out of order: {:?}", aggregate, sequences);
            }
            if failing.is_empty() {
                for (aggregate, sequences) in &first_sends {
                    let expected: Vec<u64> = (1..=next[aggregate]).filter(|s| {
                        let i = items.iter().position(|it| &it.aggregate_id == aggregate && it.sequence == *s).unwrap();
                        fits[i]
                    }).collect();
                    prop_assert_eq!(sequences, &expected, "{} on the bus", aggregate);
                }
            }
        }
    }
}

/// With `outbox_table` set, records from another table's stream are skipped and counted, never
/// published; the outbox table's own records are relayed (by table name or ARN).
#[tokio::test]
async fn records_of_another_tables_stream_are_skipped_and_counted() {
    for table in ["outbox", "arn:aws:dynamodb:us-east-1:123456789012:table/outbox", STREAM_ARN] {
        let bus = Bus::ok();
        let dlq = Dlq::ok();
        let mut config = config();
        config.outbox_table = Some(table.into());
        let relay = relay(&bus, &dlq, config);
        let mut foreign = insert(&seq(1), &item("f", 1));
        foreign["eventSourceARN"] = json!("arn:aws:dynamodb:us-east-1:123456789012:table/outbox-other/stream/2026-01-01T00:00:00.000");
        let mut no_arn = insert(&seq(2), &item("g", 1));
        no_arn.as_object_mut().unwrap().remove("eventSourceARN");
        let outcome = run(&relay, &batch(vec![insert(&seq(0), &item("a", 1)), foreign, no_arn])).await;

        assert_eq!(bus.sent(), [("a".to_string(), 1)], "{table}");
        assert_eq!(outcome.report.skipped, HashMap::from([(SkipReason::ForeignStream, 2)]), "{table}");
        assert!(failures(&outcome).is_empty());
        assert_eq!(dlq.rule.num_calls(), 0);
    }
    // Unset: every record of the attached stream is relayed.
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let mut foreign = insert(&seq(0), &item("f", 1));
    foreign["eventSourceARN"] = json!("arn:aws:dynamodb:us-east-1:123456789012:table/outbox-other/stream/x");
    run(&relay(&bus, &dlq, config()), &batch(vec![foreign])).await;
    assert_eq!(bus.sent().len(), 1);
}

/// A poison record's reason names the attribute that breaks the contract.
#[tokio::test]
async fn a_poison_records_reason_names_the_attribute() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let mut huge = image(&item("h", 1));
    huge["sequence"] = json!({ "N": "123456789012345678901234567890" });
    let outcome = run(&relay, &batch(vec![record("INSERT", &seq(0), huge)])).await;

    assert_eq!(outcome.report.dead_lettered, 1);
    let body = &dlq.bodies()[0];
    assert_eq!(body["error_code"], "MalformedOutboxItem");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("attribute `sequence`: "), "{reason}");
}

/// The dead-letter copy is the stream record exactly as delivered: not decoded and written
/// again, so a field the record lacks (here `ApproximateCreationDateTime`) stays missing and
/// numbers keep their text.
#[tokio::test]
async fn the_dead_letter_copy_is_the_record_as_delivered() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let mut poison = item("p", 1);
    poison.payload = "{not json".into();
    let mut delivered = insert(&seq(0), &poison);
    delivered["dynamodb"].as_object_mut().unwrap().remove("ApproximateCreationDateTime");
    let text = delivered.to_string().replace("\"SizeBytes\":321", "\"SizeBytes\":3.21E2");
    let batch: outbox::relay::stream::StreamBatch = serde_json::from_str(&format!(r#"{{"Records":[{text}]}}"#)).unwrap();
    let outcome = run(&relay, &batch).await;

    assert_eq!(outcome.report.dead_lettered, 1);
    let sent = &dlq.texts()[0];
    assert!(sent.contains(&format!(r#""record":{text}"#)), "the record verbatim:\n{sent}\n{text}");
    let body = &dlq.bodies()[0];
    assert!(body["record"]["dynamodb"].get("ApproximateCreationDateTime").is_none(), "{body}");
    assert_eq!(body["sequence_number"], seq(0));
}

/// A record that is not a stream record at all does not fail the batch: it is dead-lettered
/// verbatim (`MalformedRecord`) and the records beside it are relayed.
#[tokio::test]
async fn an_unreadable_record_is_dead_lettered_and_the_batch_goes_on() {
    let bus = Bus::ok();
    let dlq = Dlq::ok();
    let relay = relay(&bus, &dlq, config());
    let mut broken = insert(&seq(1), &item("b", 1));
    broken["eventName"] = json!(["INSERT"]);
    let outcome = run(&relay, &batch(vec![insert(&seq(0), &item("a", 1)), broken, insert(&seq(2), &item("c", 1))])).await;

    assert!(failures(&outcome).is_empty());
    assert_eq!(outcome.report.published, 2);
    assert_eq!(outcome.report.dead_lettered, 1);
    let body = &dlq.bodies()[0];
    assert_eq!(body["error_code"], "MalformedRecord");
    assert_eq!(body["sequence_number"], seq(1));
    assert_eq!(body["record"]["eventName"], json!(["INSERT"]));
}

#[cfg(feature = "custom-bus")]
#[path = "../benches/support/held.rs"]
mod held;

/// The relay on the Custom Event Bus (feature `custom-bus`): 100 entries a call, each aggregate
/// an event group whose calls never overlap, the event id as deduplication id, per-entry
/// failures handled as on the classic bus, `DEDUPLICATED` a success, an event group id over 128
/// characters dead-lettered, whole-call throttling retried.
#[cfg(feature = "custom-bus")]
mod custom_bus {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use aws_sdk_eventbridgev2::operation::put_events::{PutEventsError, PutEventsOutput};
    use aws_sdk_eventbridgev2::types::error::ThrottlingException;
    use aws_sdk_eventbridgev2::types::{PutEventsRequestEntry, PutEventsResultEntry, SuccessCode};
    use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
    use outbox::relay::{BusType, Relay, RelayConfig};
    use serde_json::Value;

    use super::held::Held;
    use super::support::{failures, inserts, item, run, seq, Dlq};

    const ARN: &str = "arn:aws:events:us-east-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno";

    fn config() -> RelayConfig {
        let mut config = super::support::config();
        config.event_bus_name = ARN.into();
        config
    }

    /// What an entry's policy answers.
    #[derive(Clone, Copy)]
    enum Answer {
        Published,
        Deduplicated,
        Fail(&'static str),
    }

    /// Each request's `EventBusArn` and entries, in call order.
    type Requests = Arc<Mutex<Vec<(Option<String>, Vec<PutEventsRequestEntry>)>>>;

    /// The mocked Custom bus: answers each entry by `policy` and records every request.
    struct Bus {
        rule: Rule,
        calls: Requests,
    }

    impl Bus {
        fn new(policy: impl Fn(&PutEventsRequestEntry) -> Answer + Send + Sync + 'static) -> Self {
            let calls: Requests = Default::default();
            let log = calls.clone();
            let n = AtomicUsize::new(0);
            let rule = mock!(aws_sdk_eventbridgev2::Client::put_events).then_compute_output(move |input| {
                log.lock().unwrap().push((input.event_bus_arn().map(str::to_owned), input.entries().to_vec()));
                let results: Vec<PutEventsResultEntry> = input
                    .entries()
                    .iter()
                    .map(|entry| {
                        let id = format!("ev-{}", n.fetch_add(1, Ordering::SeqCst));
                        match policy(entry) {
                            Answer::Published => PutEventsResultEntry::builder().event_id(id).success_code(SuccessCode::Published).build(),
                            Answer::Deduplicated => PutEventsResultEntry::builder().event_id(id).success_code(SuccessCode::Deduplicated).build(),
                            Answer::Fail(code) => PutEventsResultEntry::builder().error_code(code).error_message(format!("mock {code}")).build(),
                        }
                    })
                    .collect();
                let failed = results.iter().filter(|r| r.error_code().is_some()).count() as i32;
                PutEventsOutput::builder().failed_entry_count(failed).set_entries(Some(results)).build()
            });
            Self { rule, calls }
        }

        fn ok() -> Self {
            Self::new(|_| Answer::Published)
        }

        fn entries(&self) -> Vec<Vec<PutEventsRequestEntry>> {
            self.calls.lock().unwrap().iter().map(|(_, e)| e.clone()).collect()
        }

        fn entry_counts(&self) -> Vec<usize> {
            self.entries().iter().map(Vec::len).collect()
        }

        /// Every entry sent, in order, as (aggregate id, sequence).
        fn sent(&self) -> Vec<(String, u64)> {
            self.entries()
                .iter()
                .flatten()
                .map(|e| (meta(e)["subject"].as_str().unwrap().to_owned(), meta(e)["sequence"].as_u64().unwrap()))
                .collect()
        }
    }

    fn meta(entry: &PutEventsRequestEntry) -> Value {
        let detail: Value = serde_json::from_str(entry.detail().unwrap()).unwrap();
        detail["metadata"].clone()
    }

    fn group(entry: &PutEventsRequestEntry) -> String {
        entry.system_metadata().and_then(|m| m.event_group_id()).unwrap_or_default().to_owned()
    }

    /// Calls in flight, overall and per event group, as the transport sees them.
    #[derive(Default)]
    struct Overlap {
        now: Mutex<(usize, HashMap<String, usize>)>,
        most: Mutex<(usize, HashMap<String, usize>)>,
    }

    impl Overlap {
        /// The event groups of a Custom bus `PutEvents` request (Smithy RPC v2 CBOR).
        fn groups(body: &[u8]) -> Vec<String> {
            let value: ciborium::Value = ciborium::from_reader(body).expect("a CBOR request");
            let get = |v: &ciborium::Value, key: &str| -> Option<ciborium::Value> {
                v.as_map()?.iter().find(|(k, _)| k.as_text() == Some(key)).map(|(_, v)| v.clone())
            };
            let entries = get(&value, "Entries").and_then(|e| e.into_array().ok()).unwrap_or_default();
            let mut groups: Vec<String> = entries
                .iter()
                .filter_map(|e| get(e, "SystemMetadata").and_then(|m| get(&m, "EventGroupId")).and_then(|g| g.into_text().ok()))
                .collect();
            groups.sort();
            groups.dedup();
            groups
        }

        fn transport(self: &Arc<Self>, delay: Duration) -> Held {
            let overlap = self.clone();
            Held::watched(
                delay,
                Arc::new(move |body: &[u8]| {
                    let groups = Self::groups(body);
                    {
                        let (mut now, mut most) = (overlap.now.lock().unwrap(), overlap.most.lock().unwrap());
                        now.0 += 1;
                        most.0 = most.0.max(now.0);
                        for g in &groups {
                            let n = now.1.entry(g.clone()).or_default();
                            *n += 1;
                            let m = most.1.entry(g.clone()).or_default();
                            *m = (*m).max(*n);
                        }
                    }
                    let overlap = overlap.clone();
                    Box::new(move || {
                        let mut now = overlap.now.lock().unwrap();
                        now.0 -= 1;
                        for g in &groups {
                            *now.1.get_mut(g).expect("counted when sent") -= 1;
                        }
                    })
                }),
            )
        }

        fn most_overall(&self) -> usize {
            self.most.lock().unwrap().0
        }

        fn most_per_group(&self) -> usize {
            self.most.lock().unwrap().1.values().copied().max().unwrap_or(0)
        }
    }

    /// A Custom-bus relay over the mocks, the SDK's own retries off, each call held `delay`.
    fn relay_held(bus: &Bus, dlq: &Dlq, config: RelayConfig, transport: Option<Held>) -> Relay {
        let events = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus.rule], |c| {
            let c = c.retry_config(aws_sdk_eventbridgev2::config::retry::RetryConfig::disabled());
            match &transport {
                Some(t) => c.http_client(t.clone().shared()),
                None => c,
            }
        });
        let sqs =
            mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&dlq.rule], |c| { c.retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()) });
        Relay::custom(events, sqs, config).expect("an event-busv2 ARN")
    }

    fn relay(bus: &Bus, dlq: &Dlq) -> Relay {
        relay_held(bus, dlq, config(), None)
    }

    #[tokio::test]
    async fn calls_carry_up_to_100_entries_with_the_group_and_deduplication_ids() {
        let (bus, dlq) = (Bus::ok(), Dlq::ok());
        let overlap = Arc::new(Overlap::default());
        let relay = relay_held(&bus, &dlq, config(), Some(overlap.transport(Duration::from_millis(20))));
        assert_eq!(relay.bus_type(), BusType::Custom);
        let items: Vec<_> = (0..250).map(|i| item(&format!("o-{i}"), 1)).collect();
        let outcome = run(&relay, &inserts(&items)).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.put_events_calls, outcome.report.deduplicated), (250, 3, 0));
        assert_eq!(bus.entry_counts(), [100, 100, 50]);
        assert_eq!(overlap.most_overall(), 3, "distinct aggregates' calls run concurrently");
        assert!(bus.calls.lock().unwrap().iter().all(|(arn, _)| arn.as_deref() == Some(ARN)), "EventBusArn on every request");
        for entry in bus.entries().iter().flatten() {
            let m = meta(entry);
            let metadata = entry.system_metadata().expect("SystemMetadata is set");
            assert_eq!(metadata.event_group_id(), Some(format!("Order#{}", m["subject"].as_str().unwrap()).as_str()));
            assert_eq!(metadata.deduplication_id(), m["id"].as_str(), "the event id deduplicates");
            assert_eq!((entry.source(), entry.detail_type()), ("example.orders", "OrderCreated"));
            assert!(entry.time().is_some());
        }
    }

    #[tokio::test]
    async fn a_hot_aggregate_of_250_goes_in_calls_of_100_100_50_that_never_overlap() {
        let (bus, dlq) = (Bus::ok(), Dlq::ok());
        let overlap = Arc::new(Overlap::default());
        let relay = relay_held(&bus, &dlq, config(), Some(overlap.transport(Duration::from_millis(20))));
        // The hot aggregate's 250 events, with 20 single events of others among them.
        let mut items: Vec<_> = (1..=250).map(|s| item("hot", s)).collect();
        for i in 0..20 {
            items.insert(i * 12, item(&format!("cold-{i}"), 1));
        }
        let outcome = run(&relay, &inserts(&items)).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!(outcome.report.published, 270);
        let hot_calls: Vec<usize> = bus.entries().iter().map(|c| c.iter().filter(|e| group(e) == "Order#hot").count()).filter(|&n| n > 0).collect();
        assert_eq!(hot_calls, [100, 100, 50]);
        assert_eq!(overlap.most_per_group(), 1, "one event group's calls never overlap");
        assert!(overlap.most_overall() > 1, "the other aggregates' call runs beside the chain");
        let hot: Vec<u64> = bus.sent().into_iter().filter(|(a, _)| a == "hot").map(|(_, s)| s).collect();
        assert_eq!(hot, (1..=250).collect::<Vec<_>>(), "in sequence order within and across calls");
    }

    /// Overlap must be seen when it happens: without the chain (two calls of one group at once)
    /// the recorder reports 2. Guards the test above against a recorder that sees nothing.
    #[tokio::test]
    async fn the_overlap_recorder_sees_concurrent_calls_of_one_group() {
        let overlap = Arc::new(Overlap::default());
        let rule = mock!(aws_sdk_eventbridgev2::Client::put_events).then_output(|| PutEventsOutput::builder().failed_entry_count(0).build());
        let transport = overlap.transport(Duration::from_millis(20));
        let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&rule], |c| c.http_client(transport.clone().shared()));
        let entry = outbox::envelope::OutboxItem::new("e", "T", "s", ("Order", "g"), 1, "2026-11-29T08:00:00Z", "{}")
            .to_bus_event()
            .unwrap()
            .to_custom_entry("Order#g", "e");
        let call = || client.put_events().event_bus_arn(ARN).entries(entry.clone()).send();
        let (a, b) = tokio::join!(call(), call());
        assert!(a.is_ok() && b.is_ok());
        assert_eq!(overlap.most_per_group(), 2);
    }

    #[tokio::test]
    async fn a_transient_entry_failure_is_resent_alone_and_reported_as_on_the_classic_bus() {
        let failed_once = Mutex::new(false);
        let bus = Bus::new(move |e| {
            let m = meta(e);
            if m["subject"] == "a" && m["sequence"] == 2 && !std::mem::replace(&mut *failed_once.lock().unwrap(), true) {
                Answer::Fail("ThrottlingException")
            } else {
                Answer::Published
            }
        });
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq);
        let outcome = run(&relay, &inserts(&[item("a", 1), item("a", 2), item("a", 3), item("b", 1)])).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.retried, outcome.report.put_events_calls), (4, 1, 2));
        assert_eq!(bus.entry_counts(), [4, 1], "the failed entry alone");
        assert_eq!(bus.sent()[4], ("a".to_owned(), 2));
    }

    #[tokio::test]
    async fn an_entry_that_keeps_failing_reports_its_record_and_nothing_after_it_is_acknowledged() {
        let bus = Bus::new(|e| if meta(e)["subject"] == "b" { Answer::Fail("InternalException") } else { Answer::Published });
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq);
        let outcome = run(&relay, &inserts(&[item("a", 1), item("b", 1), item("c", 1)])).await;

        assert_eq!(failures(&outcome), [seq(1)], "the earliest failed record is the checkpoint");
        assert_eq!((outcome.report.published, outcome.report.failed, outcome.report.dead_lettered), (2, 1, 0));
        assert_eq!(bus.rule.num_calls(), relay.config().max_attempts as usize);
    }

    #[tokio::test]
    async fn a_permanent_entry_failure_is_dead_lettered() {
        let bus = Bus::new(|e| if meta(e)["subject"] == "b" { Answer::Fail("InvalidArgument") } else { Answer::Published });
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq);
        let outcome = run(&relay, &inserts(&[item("a", 1), item("b", 1)])).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.dead_lettered, bus.rule.num_calls()), (1, 1, 1));
        assert_eq!(dlq.bodies()[0]["error_code"], "InvalidArgument");
    }

    #[tokio::test]
    async fn a_deduplicated_entry_counts_as_published() {
        let bus = Bus::new(|e| if meta(e)["subject"] == "a" { Answer::Deduplicated } else { Answer::Published });
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq);
        let outcome = run(&relay, &inserts(&[item("a", 1), item("a", 2), item("b", 1)])).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.deduplicated, outcome.report.retried, outcome.report.failed), (3, 2, 0, 0));
        assert_eq!(outcome.report.published_event_ids.len(), 3);
        assert_eq!(bus.rule.num_calls(), 1, "never resent");
    }

    #[tokio::test]
    async fn an_aggregate_whose_group_id_sqs_would_refuse_is_grouped_by_its_hash_in_order() {
        let (bus, dlq) = (Bus::ok(), Dlq::ok());
        let relay = relay(&bus, &dlq);
        // "Order#" + 122 = 128 characters: as is; + 123 = 129, or a space: by hash, never truncated.
        let (fits, long, spaced) = ("x".repeat(122), "y".repeat(123), "o 1".to_owned());
        // Event ids within the 128 characters of a DeduplicationId.
        let short_id = |mut i: outbox::envelope::OutboxItem| {
            i.event_id = format!("evt-{}-{}-{}", i.aggregate_id.len(), i.aggregate_id.contains(" "), i.sequence);
            i
        };
        let items = [item(&fits, 1), item(&long, 1), item(&long, 2), item(&spaced, 1), item(&spaced, 2)].map(short_id);
        let outcome = run(&relay, &inserts(&items)).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.dead_lettered), (5, 0));
        assert!(dlq.bodies().is_empty(), "nothing dead-lettered");
        let entries: Vec<PutEventsRequestEntry> = bus.entries().into_iter().flatten().collect();
        let group_of = |id: &str| entries.iter().filter(|e| meta(e)["subject"] == id).map(group).collect::<std::collections::BTreeSet<_>>();
        assert_eq!(group_of(&fits), [format!("Order#{fits}")].into());
        for odd in [&long, &spaced] {
            let groups = group_of(odd);
            assert_eq!(groups.len(), 1, "one group per aggregate: {groups:?}");
            let g = groups.first().unwrap();
            assert!(g.starts_with("sha256:") && g.len() == 71 && g.bytes().all(|b| b.is_ascii_graphic()), "{g}");
        }
        let sequences = |id: &str| bus.sent().into_iter().filter(|(a, _)| a == id).map(|(_, s)| s).collect::<Vec<_>>();
        assert_eq!((sequences(&long), sequences(&spaced)), (vec![1, 2], vec![1, 2]), "in order");
    }

    #[tokio::test]
    async fn whole_call_throttling_is_retried() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let rule = mock!(aws_sdk_eventbridgev2::Client::put_events)
            .sequence()
            .error(|| PutEventsError::ThrottlingException(ThrottlingException::builder().message("slow down").build()))
            .times(2)
            .output(move || {
                seen.fetch_add(1, Ordering::SeqCst);
                let ok = |i: usize| PutEventsResultEntry::builder().event_id(format!("ev-{i}")).success_code(SuccessCode::Published).build();
                PutEventsOutput::builder().failed_entry_count(0).set_entries(Some((0..2).map(ok).collect())).build()
            })
            .build();
        let bus = Bus { rule, calls: Default::default() };
        let dlq = Dlq::ok();
        let relay = relay(&bus, &dlq);
        let outcome = run(&relay, &inserts(&[item("a", 1), item("a", 2)])).await;

        assert!(failures(&outcome).is_empty());
        assert_eq!((outcome.report.published, outcome.report.put_events_calls, outcome.report.retried), (2, 3, 4));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(dlq.rule.num_calls(), 0);
    }

    #[tokio::test]
    async fn a_bus_that_is_not_an_event_busv2_arn_is_refused() {
        let (bus, dlq) = (Bus::ok(), Dlq::ok());
        let events = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus.rule]);
        let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&dlq.rule]);
        let err = Relay::custom(events, sqs, super::support::config()).unwrap_err();
        assert!(err.to_string().starts_with(r#""test-bus" is not a Custom Event Bus ARN"#), "{err}");
    }
}
