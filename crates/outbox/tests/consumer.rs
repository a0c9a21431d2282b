//! The consumer API with the in-memory inbox and dead-letter queue, as a user's own unit tests
//! would drive it: a duplicate absorbed, a payload mismatch and malformed events dead-lettered on
//! the first attempt, retryable failures failing the invocation, the business-condition
//! fallback, and the answers' JSON.

#[cfg(feature = "metrics")]
mod common;
mod logs;

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem};
use lambda_runtime::{Context, LambdaEvent};
use outbox::consumer::{ConsumerResponse, MemoryDeadLetters, RawEvent, RetryPolicy};
use outbox::inbox::memory::Injected;
use outbox::{ConditionFailed, Consumer, ConsumerError, Event, Fallback, Handled, HandlerError, MemoryInbox, OutboxWriter};
use serde_json::{json, Value};

#[derive(Debug, serde::Deserialize)]
struct OrderCreated {
    order_id: String,
    quantity: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Reserved,
    Rejected,
}

fn stock_check(sku: &str) -> TransactWriteItem {
    let check = ConditionCheck::builder()
        .table_name("inventory")
        .key("pk", AttributeValue::S(format!("SKU#{sku}")))
        .condition_expression("available >= :q")
        .expression_attribute_values(":q", AttributeValue::N("1".into()))
        .build()
        .expect("table_name, key and condition_expression are set");
    TransactWriteItem::builder().condition_check(check).build()
}

type TestConsumer = Consumer<MemoryInbox, MemoryDeadLetters, Outcome>;

/// Reserves `quantity` of one SKU: write 0 is the stock check, then `StockReserved`; when the
/// check fails, the fallback emits `StockRejected` (and answers `duplicate` for anything else).
fn consumer(inbox: &MemoryInbox, dead_letters: &MemoryDeadLetters) -> TestConsumer {
    consumer_with(inbox, dead_letters, RetryPolicy::none())
}

/// [`consumer`] with an in-invocation retry policy (backoffs of at most 1 ms).
fn consumer_with(inbox: &MemoryInbox, dead_letters: &MemoryDeadLetters, mut retry: RetryPolicy) -> TestConsumer {
    retry.base_backoff = Duration::from_millis(1);
    retry.max_backoff = Duration::from_millis(1);
    retry.margin = Duration::ZERO;
    Consumer::builder(inbox.clone(), dead_letters.clone())
        .retry(retry)
        .outbox(OutboxWriter::new("outbox", Duration::from_secs(3600)))
        .on::<OrderCreated, _, _>("OrderCreated", |event, tx| async move {
            let order = event.data;
            if order.quantity == 0 {
                return Err(HandlerError::reject(format!("order {} has no quantity", order.order_id)));
            }
            if order.quantity > 1000 {
                return Err(HandlerError::retry("the pricing service is down"));
            }
            tx.write(stock_check("SKU-1"));
            let data = json!({"order_id": order.order_id});
            tx.emit(
                Event::new("StockReserved", "example.stock", ("Reservation", order.order_id.as_str()), 1, &data)?
                    .correlation_id(&event.metadata.correlation_id),
            )?;
            tx.on_condition_failed(move |failed, tx| match failed {
                ConditionFailed::Write { index: 0, .. } => {
                    tx.emit(Event::new("StockRejected", "example.stock", ("Reservation", order.order_id.as_str()), 1, &data)?)?;
                    Ok(Fallback::Commit(Outcome::Rejected))
                }
                _ => Ok(Fallback::Duplicate),
            });
            Ok(Outcome::Reserved)
        })
        .build()
}

fn event(event_id: &str, detail_type: &str, data: Value) -> LambdaEvent<RawEvent> {
    let event = json!({
        "version": "0", "id": format!("envelope-{}", uuid::Uuid::new_v4()), "detail-type": detail_type, "source": "example.orders",
        "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": event_id, "type": detail_type, "version": 1, "source": "example.orders",
                         "time": "2026-11-29T08:00:00.000Z", "subject": "o-1", "aggregate_type": "Order", "sequence": 1, "correlation_id": "corr-1"},
            "data": data
        }
    });
    let payload = serde_json::value::to_raw_value(&event).expect("a JSON value serialises");
    LambdaEvent::new(payload, Context::default())
}

fn created(event_id: &str, quantity: u32) -> LambdaEvent<RawEvent> {
    event(event_id, "OrderCreated", json!({"order_id": "o-1", "quantity": quantity}))
}

fn event_types(inbox: &MemoryInbox, n: usize) -> Vec<String> {
    let applied = &inbox.applied()[n];
    applied.writes.iter().filter_map(|w| w.put()).filter_map(|p| p.item().get("event_type")).filter_map(|v| v.as_s().ok().cloned()).collect()
}

#[tokio::test]
async fn a_duplicate_is_absorbed_with_nothing_written() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    let first = consumer.handle(created("e-1", 2)).await.expect("applied");
    assert_eq!(first.outcome, Handled::Applied(Outcome::Reserved));
    // The same event again (another envelope id): the inbox absorbs it.
    let again = consumer.handle(created("e-1", 2)).await.expect("duplicate");
    assert_eq!(again.outcome, Handled::Duplicate);
    assert_eq!(serde_json::to_value(&first).unwrap(), json!({"outcome": "reserved", "event_id": "e-1"}));
    assert_eq!(serde_json::to_value(&again).unwrap(), json!({"outcome": "duplicate", "event_id": "e-1"}));
    let applied = inbox.applied();
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].writes.len(), 2, "the stock check and the outbox put");
    assert_eq!(applied[0].payload_hash, outbox::inbox::payload_hash(r#"{"order_id":"o-1","quantity":2}"#), "hashed from detail.data as delivered");
    assert_eq!(event_types(&inbox, 0), ["StockReserved"]);
    assert!(dlq.messages().is_empty());
}

#[tokio::test]
async fn a_payload_mismatch_is_dead_lettered_on_the_first_attempt() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    consumer.handle(created("e-1", 2)).await.expect("applied");
    let response = consumer.handle(created("e-1", 5)).await.expect("dead-lettered, not failed");
    assert_eq!(response.outcome, Handled::DeadLettered);
    let dead = dlq.messages();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].error_type.as_str(), dead[0].event_id.as_deref()), ("PayloadMismatch", Some("e-1")));
    assert!(dead[0].event.contains(r#""quantity":5"#), "the event verbatim: {}", dead[0].event);
    assert_eq!(inbox.applied().len(), 1);
}

#[tokio::test]
async fn malformed_events_and_rejections_are_dead_lettered_naming_the_reason() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    let cases = [
        (event("m-1", "OrderCreated", json!({"order_id": "o-1", "quantity": "two"})), "MalformedEvent", "detail.data.quantity"),
        (event("m-2", "OrderShipped", json!({})), "MalformedEvent", "detail-type \"OrderShipped\" is not handled here (OrderCreated)"),
        (created("m-3", 0), "Rejected", "order o-1 has no quantity"),
    ];
    for (event, error_type, reason) in cases {
        let response = consumer.handle(event).await.expect("dead-lettered");
        assert_eq!(response.outcome, Handled::DeadLettered);
        let last = dlq.messages().pop().expect("a dead letter");
        assert_eq!(last.error_type, error_type);
        assert!(last.reason.contains(reason), "{reason:?} not in {:?}", last.reason);
    }
    let not_json = LambdaEvent::new(serde_json::value::to_raw_value(&json!({"detail": 1})).unwrap(), Context::default());
    assert_eq!(consumer.handle(not_json).await.expect("dead-lettered").outcome, Handled::DeadLettered);
    assert!(inbox.applied().is_empty());
}

#[tokio::test]
async fn what_may_pass_later_fails_the_invocation() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    inbox.fail_next(Injected::Conflict);
    let err = consumer.handle(created("r-1", 1)).await.expect_err("a conflict fails the invocation");
    assert!(err.is_retryable() && err.error_type() == "Retryable", "{err}");
    let err = consumer.handle(created("r-2", 5000)).await.expect_err("a handler's retry fails the invocation");
    assert!(matches!(err, ConsumerError::Handler(HandlerError::Retry(_))) && err.is_retryable(), "{err}");
    let diagnostic = lambda_runtime::Diagnostic::from(err);
    assert_eq!(diagnostic.error_type, "Retryable");
    assert!(dlq.messages().is_empty());
    // The retry succeeds once the conflict is gone.
    assert_eq!(consumer.handle(created("r-1", 1)).await.unwrap().outcome, Handled::Applied(Outcome::Reserved));
}

#[tokio::test]
async fn conflicts_and_throttles_are_retried_within_the_invocation_then_fail_it() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer_with(&inbox, &dlq, RetryPolicy::default());
    // Two conflicts, then the transaction commits: one invocation, applied once, nothing dead-lettered.
    inbox.fail_next(Injected::Conflict).fail_next(Injected::Conflict);
    assert_eq!(consumer.handle(created("t-1", 1)).await.expect("retried inside").outcome, Handled::Applied(Outcome::Reserved));
    assert_eq!(inbox.applied().len(), 1);
    // As many conflicts as attempts: the invocation fails (Lambda retries it), nothing dead-lettered.
    for _ in 0..consumer.retry_policy().max_attempts {
        inbox.fail_next(Injected::Conflict);
    }
    let err = consumer.handle(created("t-2", 1)).await.expect_err("attempts exhausted");
    assert!(err.is_retryable() && err.error_type() == "Retryable", "{err}");
    assert!(!inbox.contains("t-2") && dlq.messages().is_empty());
}

#[tokio::test]
async fn no_retry_starts_past_the_deadline() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer_with(&inbox, &dlq, RetryPolicy::default());
    inbox.fail_next(Injected::Conflict).fail_next(Injected::Conflict);
    let mut event = created("d-1", 1);
    event.context.deadline = 1_000; // long past
    let err = consumer.handle(event).await.expect_err("no time left to retry");
    assert!(err.is_retryable(), "{err}");
    assert!(!inbox.contains("d-1") && dlq.messages().is_empty());
    // The second injected conflict was never consumed: exactly one attempt ran.
    let once = self::consumer(&inbox, &dlq);
    assert!(once.handle(created("d-1", 1)).await.is_err_and(|e| e.is_retryable()));
    assert_eq!(once.handle(created("d-1", 1)).await.unwrap().outcome, Handled::Applied(Outcome::Reserved));
}

#[tokio::test]
async fn without_a_dead_letter_queue_what_can_never_succeed_fails_the_invocation() {
    let inbox = MemoryInbox::new("reserve");
    let consumer: Consumer<_, Option<MemoryDeadLetters>, Outcome> =
        Consumer::builder(inbox, None).on::<OrderCreated, _, _>("OrderCreated", |_, _| async { Ok::<_, HandlerError>(Outcome::Reserved) }).build();
    let err = consumer.handle(event("x-1", "OrderCreated", json!({"order_id": 1}))).await.expect_err("nowhere to dead-letter");
    assert_eq!(err.error_type(), "MalformedEvent");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_failed_business_condition_runs_the_fallback_in_a_new_transaction() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    // Write 0, the stock check, fails: the rejection is committed instead.
    inbox.fail_next(Injected::ConditionFailed { index: 0 });
    let response: ConsumerResponse<Outcome> = consumer.handle(created("b-1", 3)).await.expect("a business outcome");
    assert_eq!(response.outcome, Handled::Applied(Outcome::Rejected));
    assert_eq!(inbox.applied().len(), 1);
    assert_eq!(event_types(&inbox, 0), ["StockRejected"], "only the fallback's writes");
    // Position 1, the outbox put, fails: its sequence is taken, the fallback answers duplicate.
    inbox.fail_next(Injected::ConditionFailed { index: 1 });
    assert_eq!(consumer.handle(created("b-2", 3)).await.unwrap().outcome, Handled::Duplicate);
    assert!(!inbox.contains("b-2"), "nothing written, not even the claim");
    assert!(dlq.messages().is_empty());
}

#[tokio::test]
async fn a_failed_condition_without_a_fallback_is_retried() {
    let inbox = MemoryInbox::new("reserve");
    let checks = |retry: RetryPolicy| -> TestConsumer {
        Consumer::builder(inbox.clone(), MemoryDeadLetters::new())
            .retry(retry)
            .on::<OrderCreated, _, _>("OrderCreated", |_, tx| async move {
                tx.write(stock_check("SKU-1")).write(stock_check("SKU-2"));
                Ok(Outcome::Reserved)
            })
            .build()
    };
    inbox.fail_next(Injected::ConditionFailed { index: 1 });
    let err = checks(RetryPolicy::none()).handle(created("n-1", 1)).await.expect_err("no fallback");
    let ConsumerError::ConditionFailed { failed: ConditionFailed::Write { index: 1, .. }, .. } = &err else { panic!("{err:?}") };
    assert!(err.is_retryable() && err.is_transient());
    // With in-invocation retries, the handler runs again (reading the data afresh) and commits.
    inbox.fail_next(Injected::ConditionFailed { index: 1 });
    assert_eq!(checks(RetryPolicy::default()).handle(created("n-1", 1)).await.unwrap().outcome, Handled::Applied(Outcome::Reserved));
    // Emitting without an outbox is a bug, reported before anything is written.
    let no_outbox: TestConsumer = Consumer::builder(inbox.clone(), MemoryDeadLetters::new())
        .on::<OrderCreated, _, _>("OrderCreated", |_, tx| async move {
            tx.emit(Event::new("E", "s", ("A", "a"), 1, &())?)?;
            Ok(Outcome::Reserved)
        })
        .build();
    assert_eq!(no_outbox.handle(created("n-2", 1)).await.unwrap().outcome, Handled::DeadLettered);
    assert_eq!(no_outbox.dead_letters().messages()[0].error_type, "WriteError");
}

/// Every consumer's figures come from the library: applied (with commit → effect latency),
/// duplicates absorbed, dead-lettered (alarmed metric without extra dimensions, and by reason),
/// and invocations failed.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_consumer_counts_its_outcomes_as_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Thread-local: the current-thread test runtime polls everything on this thread.
    let _guard = metrics::set_default_local_recorder(&recorder);

    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    consumer.handle(created("e-1", 2)).await.expect("applied");
    consumer.handle(created("e-1", 2)).await.expect("duplicate");
    consumer.handle(created("e-2", 0)).await.expect("dead-lettered (rejected by the handler)");
    consumer.handle(created("e-3", 5000)).await.expect_err("the handler asks for a retry: the invocation fails");

    let values = common::recorded(&snapshotter);
    let counter = |name: &str| common::counter(&values, name);
    assert_eq!(counter("EventsApplied[]"), 1);
    assert_eq!(counter("DuplicatesAbsorbed[]"), 1);
    assert_eq!(counter("EventsDeadLettered[]"), 1);
    assert_eq!(counter("DeadLetteredByReason[\"reason=Rejected\"]"), 1);
    assert_eq!(counter("EventsFailed[]"), 1);
    assert!(
        matches!(values.get("CommitToEffectMilliseconds[]"), Some(DebugValue::Histogram(h)) if h.len() == 1),
        "one latency per applied event: {:?}",
        values.keys().collect::<Vec<_>>()
    );
}

// ----- Ordered consumers -----

/// An ordered consumer that handles `types` (its handlers write nothing: the inbox's
/// committed transactions are the record of what was applied).
fn ordered_consumer(inbox: &MemoryInbox, types: &[&'static str]) -> Consumer<MemoryInbox, MemoryDeadLetters, u64> {
    let mut builder = Consumer::builder(inbox.clone(), MemoryDeadLetters::new());
    for &t in types {
        builder = builder.on::<Value, _, _>(t, |event, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) });
    }
    builder.build()
}

/// Event ids of the committed transactions, in commit order.
fn applied(inbox: &MemoryInbox) -> Vec<String> {
    inbox.applied().into_iter().map(|a| a.event_id).collect()
}

/// Event `sequence` of order `o-1`, of `detail_type`, with the producer's `previous` map.
fn sequenced(detail_type: &str, sequence: u64, previous: Value) -> LambdaEvent<RawEvent> {
    let event = json!({
        "version": "0", "id": format!("envelope-{}", uuid::Uuid::new_v4()), "detail-type": detail_type, "source": "example.orders",
        "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": format!("evt-{sequence}"), "type": detail_type, "version": 1, "source": "example.orders",
                         "time": "2026-11-29T08:00:00.000Z", "subject": "o-1", "aggregate_type": "Order", "sequence": sequence,
                         "correlation_id": "corr-1", "previous": previous},
            "data": {"order_id": "o-1"}
        }
    });
    let raw = serde_json::value::RawValue::from_string(event.to_string()).expect("JSON");
    LambdaEvent::new(raw, Context::default())
}

/// Deliveries in EventBridge's order 3, 1, 2 (every type handled): 3 waits (a retryable
/// `SequenceGap`, reported), then 1, 2 and the retried 3 apply — in order 1, 2, 3.
#[tokio::test]
async fn events_delivered_3_1_2_are_applied_1_2_3() {
    let inbox = MemoryInbox::new("ordered").ordered_by_types(["OrderCreated", "OrderUpdated"]);
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    let one = || sequenced("OrderCreated", 1, json!({}));
    let two = || sequenced("OrderUpdated", 2, json!({"OrderCreated": 1}));
    let three = || sequenced("OrderUpdated", 3, json!({"OrderCreated": 1, "OrderUpdated": 2}));

    let err = consumer.handle(three()).await.unwrap_err();
    assert_eq!(err.error_type(), "SequenceGap");
    assert!(err.is_retryable(), "a gap waits: Lambda retries it");
    assert!(err.to_string().contains("sequence 3 waits for sequence 2"), "{err}");
    consumer.handle(one()).await.expect("1 applies");
    consumer.handle(two()).await.expect("2 applies");
    consumer.handle(three()).await.expect("the retried 3 applies");
    assert!(matches!(consumer.handle(two()).await.unwrap().outcome, Handled::Duplicate), "a late copy of 2 is a duplicate");
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"], "committed in sequence order");
    assert_eq!(inbox.last_sequence("Order#o-1"), Some(3));
}

/// A consumer of 2 of the aggregate's 3 event types: `OrderShipped` (sequence 2) never reaches
/// it, and `OrderCancelled` (3) does not wait for it; but a cancellation delivered before its
/// creation still waits for the creation.
#[tokio::test]
async fn a_consumer_of_2_of_3_types_applies_in_order_without_waiting_for_the_third() {
    let types = ["OrderCreated", "OrderCancelled"];
    let inbox = MemoryInbox::new("two-of-three").ordered_by_types(types);
    let consumer = ordered_consumer(&inbox, &types);
    let cancelled = || sequenced("OrderCancelled", 3, json!({"OrderCreated": 1, "OrderShipped": 2}));

    let err = consumer.handle(cancelled()).await.unwrap_err();
    assert!(err.to_string().contains("waits for sequence 1"), "the cancellation waits for the creation only: {err}");
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies");
    consumer.handle(cancelled()).await.expect("3 applies without 2, a type this consumer never receives");
    assert_eq!(applied(&inbox), ["evt-1", "evt-3"]);

    // The same deliveries to a consumer ordered over every sequence (the old rule) would wait
    // for 2 forever.
    let dense = MemoryInbox::new("dense").ordered();
    let dense_consumer = ordered_consumer(&dense, &types);
    dense_consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies");
    assert!(dense_consumer.handle(cancelled()).await.unwrap_err().to_string().contains("waits for sequence 2"));
}

/// A sequence that never comes: the waiting event is reported on every attempt and, after the
/// operator's release through the missing sequence, applies; nothing before it is re-applied.
#[tokio::test]
async fn a_permanently_missing_sequence_is_released_by_the_operator() {
    let inbox = MemoryInbox::new("ordered").ordered();
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies");
    // Sequence 2 was dead-lettered at the relay: it never comes.
    let three = || sequenced("OrderUpdated", 3, json!({}));
    for _ in 0..3 {
        let err = consumer.handle(three()).await.unwrap_err();
        assert!(err.is_retryable() && err.to_string().contains("waits for sequence 2 (last applied 1)"), "{err}");
    }
    assert_eq!(inbox.release_through("Order#o-1", 2), 1);
    consumer.handle(three()).await.expect("3 applies once 2 is released");
    assert_eq!(applied(&inbox), ["evt-1", "evt-3"]);
    assert_eq!(inbox.release_through("Order#o-1", 2), 3, "a release never moves the sequence back");
    assert_eq!(inbox.last_sequence("Order#o-1"), Some(3));
}

/// Every line the consumer logs about an event carries the event's fields, as Lambda's JSON log
/// format writes them (`lambda_runtime::tracing::init_default_subscriber` with
/// `AWS_LAMBDA_LOG_FORMAT=JSON`: `tracing_subscriber::fmt().json()`, the current span under
/// `span`), so one Logs Insights filter on `span.event_id` finds them all; `attempt` follows the
/// retries within the invocation.
#[tokio::test]
async fn every_log_line_of_an_event_carries_its_fields() {
    let captured = logs::Captured::global();
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer_with(&inbox, &dlq, RetryPolicy::default());
    inbox.fail_next(Injected::Conflict).fail_next(Injected::Conflict);
    consumer.handle(created("t-log", 1)).await.expect("applied after two conflicts");
    consumer.handle(event("t-bad", "OrderCreated", json!({"order_id": 7}))).await.expect("dead-lettered");

    let (text, lines) = (captured.text(), captured.lines());
    let of = |id: &str| lines.iter().filter(|l| l["span"]["event_id"] == id).collect::<Vec<_>>();
    for line in of("t-log") {
        let span = &line["span"];
        assert_eq!(
            (&span["name"], &span["event_type"], &span["aggregate_type"], &span["aggregate_id"], &span["correlation_id"]),
            (&json!("event"), &json!("OrderCreated"), &json!("Order"), &json!("o-1"), &json!("corr-1")),
            "{line}"
        );
    }
    let attempts = captured.attempts_of("t-log");
    let retried = "transient failure; retrying within the invocation".to_owned();
    assert_eq!(attempts, [(retried.clone(), 1), (retried, 2), ("event handled".to_owned(), 3)], "{text}");
    let bad = of("t-bad");
    assert!(bad.iter().any(|l| l["fields"]["error_type"] == "MalformedEvent"), "the dead-lettering line names the cause: {text}");
}
