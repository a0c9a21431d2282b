//! The consumer API with the in-memory inbox and dead-letter queue, as a user's own unit tests
//! would drive it: a duplicate absorbed, a payload mismatch and malformed events dead-lettered on
//! the first attempt, retryable failures failing the invocation, the business-condition
//! fallback, and the answers' JSON.

#[cfg(feature = "metrics")]
mod common;
mod logs;

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use outbox::consumer::{Consumer, ConsumerError, Fallback, Handled, HandlerError, Tx};
use outbox::consumer::{ConsumerResponse, DeadLetterSink, MemoryDeadLetters, RawEvent, RetryPolicy};
use outbox::inbox::Injected;
use outbox::inbox::RecordedOutcome;
use outbox::inbox::{InboxStore, MemoryInbox, PayloadHash};
use outbox::ordering::Ordered;
use outbox::{ConditionFailed, Event, OutboxWriter};
use serde_json::{json, Value};

/// An invocation as Lambda hands it over: the payload and the context's deadline (epoch
/// milliseconds, 0: none), as `outbox_lambda::LambdaConsumer::handle` reads them.
struct Invocation {
    payload: RawEvent,
    context: Deadline,
}

#[derive(Default)]
struct Deadline {
    deadline: u64,
}

impl Invocation {
    fn new(payload: RawEvent) -> Self {
        Self { payload, context: Deadline::default() }
    }
}

/// `Consumer::handle_payload_until` bounded by the invocation's deadline (the retry policy's
/// fallback budget when it has none).
trait Handle<O> {
    async fn handle(&self, event: Invocation) -> Result<ConsumerResponse<O>, ConsumerError>;
}

impl<S: InboxStore, D: DeadLetterSink, O: serde::Serialize + Send + 'static> Handle<O> for Consumer<S, D, O> {
    async fn handle(&self, event: Invocation) -> Result<ConsumerResponse<O>, ConsumerError> {
        self.handle_payload_until(&event.payload, deadline(&event, self.retry_policy().fallback_budget)).await
    }
}

fn deadline(event: &Invocation, fallback: Duration) -> Instant {
    if event.context.deadline == 0 {
        return Instant::now() + fallback;
    }
    let at = UNIX_EPOCH + Duration::from_millis(event.context.deadline);
    Instant::now() + at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)
}

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

fn event(event_id: &str, detail_type: &str, data: Value) -> Invocation {
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
    Invocation::new(payload)
}

fn created(event_id: &str, quantity: u32) -> Invocation {
    event(event_id, "OrderCreated", json!({"order_id": "o-1", "quantity": quantity}))
}

/// W3C's example `traceparent`: the producer's trace of [`traced`].
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// [`created`] with the producer's trace context ([`TRACEPARENT`], a `tracestate`) in its metadata.
fn traced(event_id: &str, quantity: u32) -> Invocation {
    let mut value: Value = serde_json::from_str(created(event_id, quantity).payload.get()).expect("JSON");
    value["detail"]["metadata"]["traceparent"] = json!(TRACEPARENT);
    value["detail"]["metadata"]["tracestate"] = json!("k=v");
    Invocation::new(serde_json::value::to_raw_value(&value).expect("JSON"))
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
    assert_eq!(applied[0].payload_hash, PayloadHash::of(r#"{"order_id":"o-1","quantity":2}"#).stored(), "hashed from detail.data as delivered");
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

/// An `OrderCreated` event whose `detail.data` is `data`, embedded as this text (not re-serialised).
fn created_as_text(event_id: &str, data: &str) -> Invocation {
    let event = format!(
        r#"{{"version":"0","id":"envelope-{}","detail-type":"OrderCreated","source":"example.orders","time":"2026-11-29T08:00:00Z","region":"us-east-1","resources":[],"detail":{{"metadata":{{"id":"{event_id}","type":"OrderCreated","version":1,"source":"example.orders","time":"2026-11-29T08:00:00.000Z","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"corr-1"}},"data":{data}}}}}"#,
        uuid::Uuid::new_v4()
    );
    Invocation::new(serde_json::value::RawValue::from_string(event).expect("JSON"))
}

/// A redelivery whose `detail.data` some hop re-serialised (other whitespace, other member order,
/// an escaped character) is the same event: absorbed as a duplicate, nothing
/// written, nothing dead-lettered. Another payload under the same id is still a conflict.
#[tokio::test]
async fn a_redelivery_with_re_serialised_data_is_a_duplicate_and_another_payload_a_conflict() {
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer(&inbox, &dlq);
    let first = consumer.handle(created_as_text("e-1", r#"{"order_id":"o-1","quantity":2}"#)).await.expect("applied");
    assert_eq!(first.outcome, Handled::Applied(Outcome::Reserved));
    for again in [r#"{ "quantity": 2, "order_id": "o-1" }"#, "{\n  \"order_id\" : \"o\\u002d1\",\n  \"quantity\" : 2\n}"] {
        let answer = consumer.handle(created_as_text("e-1", again)).await.expect("duplicate");
        assert_eq!(answer.outcome, Handled::Duplicate, "{again}");
    }
    assert_eq!(inbox.applied().len(), 1, "applied once");
    assert!(dlq.messages().is_empty(), "nothing dead-lettered: {:?}", dlq.messages());

    let conflict = consumer.handle(created_as_text("e-1", r#"{ "quantity": 3, "order_id": "o-1" }"#)).await.expect("dead-lettered");
    assert_eq!(conflict.outcome, Handled::DeadLettered);
    let dead = dlq.messages();
    assert_eq!((dead.len(), dead[0].error_type.as_str(), dead[0].event_id.as_deref()), (1, "PayloadMismatch", Some("e-1")));
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
    let not_json = Invocation::new(serde_json::value::to_raw_value(&json!({"detail": 1})).unwrap());
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
    // Position 1, the outbox put, fails: its sequence is taken, the fallback finds nothing to do.
    inbox.fail_next(Injected::ConditionFailed { index: 1 });
    let response = consumer.handle(created("b-2", 3)).await.unwrap();
    assert_eq!(response.outcome, Handled::NothingToDo(outbox::consumer::SETTLED_ELSEWHERE.into()));
    assert_eq!(serde_json::to_value(&response).unwrap(), json!({"outcome": "nothing_to_do", "event_id": "b-2"}));
    assert!(inbox.contains("b-2"), "the event is recorded");
    let recorded = inbox.applied().into_iter().find(|a| a.event_id == "b-2").unwrap();
    assert!(recorded.writes.is_empty(), "none of the handler's writes");
    assert_eq!(recorded.outcome, Some(RecordedOutcome::nothing_to_do(outbox::consumer::SETTLED_ELSEWHERE)));
    assert_eq!(inbox.outcome("b-1"), Some(RecordedOutcome::new("rejected")), "an applied event records its outcome");
    // A real duplicate stays a duplicate.
    assert_eq!(consumer.handle(created("b-2", 3)).await.unwrap().outcome, Handled::Duplicate);
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
fn ordered_consumer(inbox: &MemoryInbox, types: &[&'static str]) -> Consumer<Ordered<MemoryInbox>, MemoryDeadLetters, u64> {
    consumer_of(Ordered::new(inbox.clone()), types)
}

/// [`ordered_consumer`], ordered by the `types` it handles (`Ordered::by_types`).
fn by_types_consumer(inbox: &MemoryInbox, types: &[&'static str]) -> Consumer<Ordered<MemoryInbox>, MemoryDeadLetters, u64> {
    consumer_of(Ordered::by_types(inbox.clone(), types.iter().copied()), types)
}

fn consumer_of(store: Ordered<MemoryInbox>, types: &[&'static str]) -> Consumer<Ordered<MemoryInbox>, MemoryDeadLetters, u64> {
    let mut builder = Consumer::builder(store, MemoryDeadLetters::new());
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
fn sequenced(detail_type: &str, sequence: u64, previous: Value) -> Invocation {
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
    Invocation::new(raw)
}

/// Deliveries in EventBridge's order 3, 1, 2 (every type handled): 3 is parked (acknowledged,
/// not failed), 1 applies, 2 applies and the same invocation applies the parked 3 — in order
/// 1, 2, 3, each in its own transaction with its inbox claim.
#[tokio::test]
async fn events_delivered_3_1_2_are_applied_1_2_3() {
    let inbox = MemoryInbox::new("ordered");
    let consumer = by_types_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    let one = || sequenced("OrderCreated", 1, json!({}));
    let two = || sequenced("OrderUpdated", 2, json!({"OrderCreated": 1}));
    let three = || sequenced("OrderUpdated", 3, json!({"OrderCreated": 1, "OrderUpdated": 2}));

    let parked = consumer.handle(three()).await.expect("an early event is parked, not failed");
    assert_eq!(parked.outcome, Handled::Parked { waits_for: 2 });
    assert_eq!(serde_json::to_value(&parked).unwrap(), json!({"outcome": "parked", "event_id": "evt-3"}));
    assert_eq!(inbox.parked_events().len(), 1);
    assert_eq!(consumer.handle(three()).await.unwrap().outcome, Handled::Parked { waits_for: 2 }, "a duplicate of a parked event stays parked once");
    consumer.handle(one()).await.expect("1 applies");
    assert_eq!(applied(&inbox), ["evt-1"], "3 still waits for 2");
    assert_eq!(consumer.handle(two()).await.expect("2 applies").outcome, Handled::Applied(2));
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"], "the parked 3 applied right after 2, in the same invocation");
    assert!(inbox.parked_events().is_empty());
    assert!(matches!(consumer.handle(two()).await.unwrap().outcome, Handled::Duplicate), "a late copy of 2 is a duplicate");
    assert!(matches!(consumer.handle(three()).await.unwrap().outcome, Handled::Duplicate), "a late copy of 3 is a duplicate");
    assert_eq!(inbox.last_sequence_of("Order#o-1"), Some(3));
    assert!(consumer.dead_letters().messages().is_empty());
}

/// A consumer of 2 of the aggregate's 3 event types: `OrderShipped` (sequence 2) never reaches
/// it, and `OrderCancelled` (3) does not wait for it; but a cancellation delivered before its
/// creation still waits (parked) for the creation.
#[tokio::test]
async fn a_consumer_of_2_of_3_types_applies_in_order_without_waiting_for_the_third() {
    let types = ["OrderCreated", "OrderCancelled"];
    let inbox = MemoryInbox::new("two-of-three");
    let consumer = by_types_consumer(&inbox, &types);
    let cancelled = || sequenced("OrderCancelled", 3, json!({"OrderCreated": 1, "OrderShipped": 2}));

    assert_eq!(consumer.handle(cancelled()).await.unwrap().outcome, Handled::Parked { waits_for: 1 }, "the cancellation waits for the creation only");
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies, then the parked 3 without 2");
    assert_eq!(applied(&inbox), ["evt-1", "evt-3"]);

    // The same deliveries to a consumer ordered over every sequence (the old rule) would wait
    // for 2 forever.
    let dense = MemoryInbox::new("dense");
    let dense_consumer = ordered_consumer(&dense, &types);
    dense_consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies");
    assert_eq!(dense_consumer.handle(cancelled()).await.unwrap().outcome, Handled::Parked { waits_for: 2 });
}

/// A sequence that never comes: the waiting event stays parked (never dead-lettered) and, after
/// the operator's release through the missing sequence, applies on its next delivery; nothing
/// before it is re-applied.
#[tokio::test]
async fn a_permanently_missing_sequence_is_released_by_the_operator() {
    let inbox = MemoryInbox::new("ordered");
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("1 applies");
    // Sequence 2 was dead-lettered at the relay: it never comes.
    let three = || sequenced("OrderUpdated", 3, json!({}));
    for _ in 0..3 {
        assert_eq!(consumer.handle(three()).await.unwrap().outcome, Handled::Parked { waits_for: 2 });
    }
    assert_eq!(inbox.parked_events().len(), 1);
    assert!(consumer.dead_letters().messages().is_empty(), "a gap is not poison");
    assert_eq!(inbox.release_through_now("Order#o-1", 2), 1);
    consumer.handle(three()).await.expect("3 applies once 2 is released");
    assert_eq!(applied(&inbox), ["evt-1", "evt-3"]);
    assert!(inbox.parked_events().is_empty());
    assert_eq!(inbox.release_through_now("Order#o-1", 2), 3, "a release never moves the sequence back");
    assert_eq!(inbox.last_sequence_of("Order#o-1"), Some(3));
}

/// 100 events of one aggregate, three types repeating, one of them settled by its fallback
/// (`Fallback::Duplicate`: nothing to do): every event is recorded and applied in sequence order,
/// the settled one with its outcome, and nothing waits for it.
#[tokio::test]
async fn a_hot_aggregate_with_a_duplicate_fallback_applies_all_100_in_order() {
    let types = ["OrderCreated", "OrderUpdated", "OrderNoted"];
    let inbox = MemoryInbox::new("hot");
    let dead_letters = MemoryDeadLetters::new();
    let mut builder = Consumer::builder(Ordered::new(inbox.clone()), dead_letters.clone());
    for t in types {
        builder = builder.on::<Value, _, _>(t, |event, tx| async move {
            tx.write(stock_check("SKU-1"));
            tx.on_condition_failed(|_, _| Ok(Fallback::Duplicate));
            Ok::<_, HandlerError>(event.metadata.sequence)
        });
    }
    let consumer = builder.build();
    for sequence in 1..=100u64 {
        if sequence == 3 {
            inbox.fail_next(Injected::ConditionFailed { index: 0 });
        }
        let response = consumer.handle(sequenced(types[(sequence % 3) as usize], sequence, json!({}))).await.expect("handled");
        let expected = if sequence == 3 { Handled::NothingToDo(outbox::consumer::SETTLED_ELSEWHERE.into()) } else { Handled::Applied(sequence) };
        assert_eq!(response.outcome, expected);
    }
    let ids = applied(&inbox);
    assert_eq!(ids, (1..=100).map(|s| format!("evt-{s}")).collect::<Vec<_>>(), "all 100, in sequence order");
    assert_eq!(inbox.outcome("evt-3").map(|o| o.outcome), Some("nothing_to_do".into()));
    assert_eq!(inbox.outcome("evt-4"), Some(RecordedOutcome::new("4")));
    assert_eq!(inbox.last_sequence_of("Order#o-1"), Some(100));
    assert!(dead_letters.messages().is_empty() && inbox.parked_events().is_empty());
}

/// The same 100 events delivered shuffled, each twice: nothing dead-lettered, nothing failed,
/// every event applied exactly once and in sequence order, nothing left parked.
#[tokio::test]
async fn shuffled_duplicated_deliveries_are_applied_once_each_in_order() {
    let types = ["OrderCreated", "OrderUpdated", "OrderNoted"];
    let inbox = MemoryInbox::new("shuffled");
    let consumer = ordered_consumer(&inbox, &types);
    let mut deliveries: Vec<u64> = (1..=100u64).chain(1..=100u64).collect();
    // Fisher–Yates with a fixed xorshift seed: the same shuffle on every run.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for i in (1..deliveries.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        deliveries.swap(i, (state % (i as u64 + 1)) as usize);
    }
    for sequence in deliveries {
        let response = consumer.handle(sequenced(types[(sequence % 3) as usize], sequence, json!({}))).await.expect("never fails");
        assert_ne!(response.outcome, Handled::DeadLettered);
    }
    assert_eq!(applied(&inbox), (1..=100).map(|s| format!("evt-{s}")).collect::<Vec<_>>());
    assert!(inbox.parked_events().is_empty() && consumer.dead_letters().messages().is_empty());
}

/// A budget smaller than the parked backlog: the invocation that applies the predecessor fails
/// with `ParkedPending` (retryable), and the redelivery of that event — a duplicate — applies the rest.
#[tokio::test]
async fn parked_events_beyond_the_budget_are_applied_by_the_redelivery() {
    let types = ["OrderCreated", "OrderUpdated"];
    let inbox = MemoryInbox::new("budget");
    let consumer = Consumer::builder(Ordered::new(inbox.clone()), MemoryDeadLetters::new())
        .parked_budget(2)
        .on::<Value, _, _>(types[0], |event, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) })
        .on::<Value, _, _>(types[1], |event, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) })
        .build();
    for sequence in (2..=6u64).rev() {
        assert_eq!(consumer.handle(sequenced(types[1], sequence, json!({}))).await.unwrap().outcome, Handled::Parked { waits_for: sequence - 1 });
    }
    let err = consumer.handle(sequenced(types[0], 1, json!({}))).await.expect_err("more parked than the budget");
    assert_eq!(err.error_type(), "ParkedPending");
    assert!(err.is_retryable());
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"]);
    let err = consumer.handle(sequenced(types[0], 1, json!({}))).await.expect_err("the redelivery applies two more");
    assert_eq!(err.error_type(), "ParkedPending");
    assert_eq!(consumer.handle(sequenced(types[0], 1, json!({}))).await.unwrap().outcome, Handled::Duplicate);
    assert_eq!(applied(&inbox), (1..=6).map(|s| format!("evt-{s}")).collect::<Vec<_>>());
    assert!(inbox.parked_events().is_empty());
}

/// The invocation that drains parked events fails right after a parked event's transaction (the
/// drain's next read throttled, or a crash there): the event's parked row went with its
/// transaction (no separate `unpark` follows it), so nothing is left parked behind the applied
/// event, and the redelivery (a duplicate of the predecessor) drains the rest. Had the row been
/// deleted by a separate call after the commit, it would stay parked for good: the redelivery
/// drains from the new `last_sequence` and never reads it again.
#[tokio::test]
async fn a_crash_after_a_parked_events_commit_leaves_no_parked_row() {
    let types = ["OrderCreated", "OrderUpdated"];
    let inbox = MemoryInbox::new("crash");
    let consumer = ordered_consumer(&inbox, &types);
    for sequence in [3u64, 2] {
        assert_eq!(consumer.handle(sequenced(types[1], sequence, json!({}))).await.unwrap().outcome, Handled::Parked { waits_for: sequence - 1 });
    }
    inbox.fail_next_parked_reads(1);
    let err = consumer.handle(sequenced(types[0], 1, json!({}))).await.expect_err("the read after 2's commit fails");
    assert_eq!(err.error_type(), "ParkedPending");
    assert_eq!(applied(&inbox), ["evt-1", "evt-2"]);
    assert_eq!(inbox.parked_events().len(), 1, "only 3 still waits: 2's row went with its transaction");
    assert_eq!(consumer.handle(sequenced(types[0], 1, json!({}))).await.unwrap().outcome, Handled::Duplicate, "the redelivery drains 3");
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"]);
    assert!(inbox.parked_events().is_empty());
    assert_eq!(inbox.last_sequence_of("Order#o-1"), Some(3));
}

/// A parked event the drain applies loses its parked row in its own transaction: the drain makes
/// no separate `unpark` (a `DeleteItem` per parked event on the DynamoDB table), so one failing
/// there changes nothing.
#[tokio::test]
async fn a_drained_events_row_goes_with_its_transaction_without_a_separate_unpark() {
    let types = ["OrderCreated", "OrderUpdated"];
    let inbox = MemoryInbox::new("one-delete");
    let consumer = ordered_consumer(&inbox, &types);
    assert_eq!(consumer.handle(sequenced(types[1], 2, json!({}))).await.unwrap().outcome, Handled::Parked { waits_for: 1 });
    inbox.fail_next_unparks(1);
    let response = consumer.handle(sequenced(types[0], 1, json!({}))).await.expect("no separate unpark to fail");
    assert_eq!(response.parked_applied.len(), 1);
    assert_eq!(applied(&inbox), ["evt-1", "evt-2"]);
    assert!(inbox.parked_events().is_empty());
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
    assert_eq!(attempts, [(retried.clone(), 1), (retried, 2), ("invocation handled".to_owned(), 3)], "{text}");
    let bad = of("t-bad");
    assert!(bad.iter().any(|l| l["fields"]["error_type"] == "MalformedEvent"), "the dead-lettering line names the cause: {text}");
}

/// A handler's own events continue the trace of the event it handles: the same trace id and
/// `tracestate`, a parent id of the consumer's own; and every log line of the event carries the
/// trace id.
#[tokio::test]
async fn a_handlers_events_and_log_lines_continue_the_events_trace() {
    let captured = logs::Captured::global();
    let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
    let consumer = consumer_with(&inbox, &dlq, RetryPolicy::default());
    inbox.fail_next(Injected::Conflict);
    consumer.handle(traced("t-traced", 2)).await.expect("applied after a conflict");
    let applied = inbox.applied();
    let put = applied[0].writes.iter().filter_map(|w| w.put()).find(|p| p.item().contains_key("event_type")).expect("the outbox put");
    let text = |name: &str| put.item().get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
    let traceparent = text("traceparent");
    assert!(traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && traceparent.ends_with("-01"), "{traceparent}");
    assert_ne!(traceparent, TRACEPARENT, "the consumer's own parent id");
    assert_eq!(text("tracestate"), "k=v");
    let lines = captured.lines();
    let of_event: Vec<_> = lines.iter().filter(|l| l["span"]["event_id"] == "t-traced").collect();
    assert!(!of_event.is_empty() && of_event.iter().all(|l| l["span"]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"), "{}", captured.text());
    // Without a trace context the handler's event still gets one (the invocation's, or a new trace).
    consumer.handle(created("t-untraced", 2)).await.expect("applied");
    let applied = inbox.applied();
    let put = applied[1].writes.iter().filter_map(|w| w.put()).find(|p| p.item().contains_key("event_type")).expect("the outbox put");
    let traceparent = put.item().get("traceparent").and_then(|v| v.as_s().ok()).expect("a traceparent");
    assert!(outbox::TraceContext::parse(traceparent, None).is_ok(), "{traceparent}");
}

// ----- Behind an SQS queue -----

/// An SQS batch (`Records[]`) whose message bodies are the EventBridge events `bodies`.
fn sqs_batch(bodies: &[Invocation]) -> Box<serde_json::value::RawValue> {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"messageId": format!("m-{i}"), "receiptHandle": "r", "body": e.payload.get(), "eventSource": "aws:sqs"}))
        .collect();
    serde_json::value::to_raw_value(&json!({"Records": records})).expect("JSON")
}

/// A batch in one invocation: its messages in order (the early one parked, then applied after
/// its predecessor), a transient failure reported in `batchItemFailures` (it comes back after
/// the visibility timeout), a malformed body dead-lettered (and deleted), the rest settled.
#[tokio::test]
async fn an_sqs_batch_reports_only_what_may_pass_later_as_item_failures() {
    let inbox = MemoryInbox::new("queued");
    let handler = |event: outbox::consumer::DeliveredEvent<Value>, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) };
    let consumer: Consumer<Ordered<MemoryInbox>, MemoryDeadLetters, u64> = Consumer::builder(Ordered::new(inbox.clone()), MemoryDeadLetters::new())
        .retry(RetryPolicy::none())
        .on::<Value, _, _>("OrderCreated", handler)
        .on::<Value, _, _>("OrderUpdated", handler)
        .build();
    let mut bodies = vec![sequenced("OrderUpdated", 2, json!({})), sequenced("OrderCreated", 1, json!({}))];
    let not_json = Invocation::new(serde_json::value::RawValue::from_string("\"not an event\"".into()).unwrap());
    bodies.push(not_json);
    bodies.push(sequenced("OrderUpdated", 3, json!({})));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    inbox.fail_next(Injected::Conflict); // the first commit that reaches the store: sequence 1's
    let answer = consumer.handle_invocation(&sqs_batch(&bodies), deadline).await.expect("a batch never fails as a whole");
    let outbox::consumer::InvocationAnswer::Batch(answer) = answer else { panic!("an SQS event is a batch") };
    let failures: Vec<&str> = answer.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failures, ["m-1"], "only the conflicted message comes back: {answer:?}");
    let outcomes: Vec<(&str, &str)> = answer.outcomes.iter().map(|o| (o.event_id.as_str(), o.outcome.as_str())).collect();
    assert_eq!(outcomes, [("evt-2", "parked"), ("", "dead_lettered"), ("evt-3", "parked")]);
    assert_eq!(consumer.dead_letters().messages().len(), 1, "the malformed body");
    // SQS brings m-1 back: 1 applies, then the parked 2 and 3, in order.
    let again = consumer.handle_invocation(&sqs_batch(&bodies[1..2]), deadline).await.unwrap();
    let outbox::consumer::InvocationAnswer::Batch(again) = again else { panic!() };
    assert!(again.batch_item_failures.is_empty());
    assert_eq!(again.outcomes.iter().map(|o| o.event_id.as_str()).collect::<Vec<_>>(), ["evt-1", "evt-2", "evt-3"]);
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"]);
    assert_eq!(
        serde_json::to_value(outbox::consumer::InvocationAnswer::<u64>::Batch(outbox::consumer::SqsBatchAnswer::default())).unwrap(),
        json!({"batchItemFailures": [], "outcomes": []}),
        "the shape Lambda's ReportBatchItemFailures reads"
    );
    // An EventBridge event is still one event.
    let single = consumer.handle_invocation(sequenced("OrderUpdated", 3, json!({})).payload.as_ref(), deadline).await.unwrap();
    assert!(matches!(single, outbox::consumer::InvocationAnswer::Event(r) if r.outcome == Handled::Duplicate));
}

/// An SQS batch from the FIFO queue `queue` (`eventSourceARN` ending `.fifo`): message `i` is
/// `bodies[i]` in message group `groups[i]`, id `m-<i>`.
fn fifo_batch(queue: &str, bodies: &[&Invocation], groups: &[&str]) -> Box<serde_json::value::RawValue> {
    let records: Vec<Value> = bodies
        .iter()
        .zip(groups)
        .enumerate()
        .map(|(i, (e, group))| {
            json!({"messageId": format!("m-{i}"), "receiptHandle": "r", "body": e.payload.get(), "eventSource": "aws:sqs",
                   "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:{queue}"),
                   "attributes": {"MessageGroupId": group, "SequenceNumber": format!("{}", 10 + i), "ApproximateReceiveCount": "1"}})
        })
        .collect();
    serde_json::value::to_raw_value(&json!({"Records": records})).expect("JSON")
}

/// Event `sequence` of order `order`, an `OrderCreated` whose quantity decides its fate in
/// [`consumer`]: 0 rejected (dead-lettered), over 1000 a transient failure, else applied.
fn order_event(order: &str, sequence: u64, quantity: u32) -> Invocation {
    let event = json!({
        "version": "0", "id": format!("envelope-{order}-{sequence}"), "detail-type": "OrderCreated", "source": "example.orders",
        "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": format!("evt-{order}-{sequence}"), "type": "OrderCreated", "version": 1, "source": "example.orders",
                         "time": "2026-11-29T08:00:00.000Z", "subject": order, "aggregate_type": "Order", "sequence": sequence,
                         "correlation_id": "corr-1"},
            "data": {"order_id": order, "quantity": quantity}
        }
    });
    Invocation::new(serde_json::value::RawValue::from_string(event.to_string()).expect("JSON"))
}

fn batch_failures(answer: outbox::consumer::InvocationAnswer<Outcome>) -> (Vec<String>, Vec<String>) {
    let outbox::consumer::InvocationAnswer::Batch(answer) = answer else { panic!("an SQS event is a batch") };
    let failed = answer.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
    let settled = answer.outcomes.iter().map(|o| o.event_id.clone()).collect();
    (failed, settled)
}

/// Lambda's rule for a FIFO queue (services-sqs-errorhandling: "stop processing messages after
/// the first failure and return all failed and unprocessed messages"), per message group: the
/// 2nd of 3 messages of one group fails, so the 2nd and the 3rd are reported (the 3rd never
/// attempted: its effect is not in the inbox), the 1st is not; another group's messages in the
/// same batch, before and after the failure, are processed.
#[tokio::test]
async fn a_fifo_batch_stops_a_message_group_at_its_first_failure() {
    let inbox = MemoryInbox::new("fifo");
    let dead_letters = MemoryDeadLetters::new();
    let consumer = consumer(&inbox, &dead_letters);
    let (a1, a2, a3) = (order_event("o-a", 1, 1), order_event("o-a", 2, 5000), order_event("o-a", 3, 1));
    let (b1, b2) = (order_event("o-b", 1, 1), order_event("o-b", 2, 1));
    let batch = fifo_batch("delivery.fifo", &[&a1, &b1, &a2, &a3, &b2], &["Order#o-a", "Order#o-b", "Order#o-a", "Order#o-a", "Order#o-b"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (failed, settled) = batch_failures(consumer.handle_invocation(&batch, deadline).await.expect("a batch never fails as a whole"));
    assert_eq!(failed, ["m-2", "m-3"], "the failed message and the later one of its group come back, in order");
    assert_eq!(settled, ["evt-o-a-1", "evt-o-b-1", "evt-o-b-2"]);
    assert_eq!(applied(&inbox), ["evt-o-a-1", "evt-o-b-1", "evt-o-b-2"], "o-a's 3rd event was not applied before its 2nd");
    assert!(dead_letters.messages().is_empty());

    // The same batch from a standard queue: each message on its own (the 3rd applied).
    let inbox = MemoryInbox::new("standard");
    let standard = consumer_with(&inbox, &dead_letters, RetryPolicy::none());
    let (failed, _) = batch_failures(standard.handle_invocation(&sqs_batch(&[a1, a2, a3]), deadline).await.unwrap());
    assert_eq!(failed, ["m-1"], "a standard queue reports only the failed message");
    assert_eq!(applied(&inbox), ["evt-o-a-1", "evt-o-a-3"]);
}

/// A FIFO message without a `MessageGroupId` that fails stops the whole rest of the batch (every
/// group); a dead-lettered message is settled (deleted) and stops nothing.
#[tokio::test]
async fn a_fifo_failure_without_a_group_stops_the_rest_of_the_batch() {
    let inbox = MemoryInbox::new("fifo");
    let dead_letters = MemoryDeadLetters::new();
    let consumer = consumer(&inbox, &dead_letters);
    let (rejected, a1, failing, b1) = (order_event("o-r", 1, 0), order_event("o-a", 1, 1), order_event("o-x", 1, 5000), order_event("o-b", 1, 1));
    let batch = fifo_batch("delivery.fifo", &[&rejected, &a1, &failing, &b1], &["Order#o-r", "Order#o-a", "", "Order#o-b"]);
    let (failed, settled) = batch_failures(consumer.handle_invocation(&batch, Instant::now() + Duration::from_secs(10)).await.unwrap());
    assert_eq!(failed, ["m-2", "m-3"]);
    assert_eq!(settled, ["evt-o-r-1", "evt-o-a-1"]);
    assert_eq!(dead_letters.messages().len(), 1, "the rejected order, dead-lettered on its first attempt");
    assert_eq!(applied(&inbox), ["evt-o-a-1"]);
}

/// An ordered consumer on a FIFO subscriber's queue (one message group per aggregate): its
/// events arrive in order, so nothing is parked, even when the first one fails (the FIFO rule
/// hands the later ones back behind it instead of letting them park); a redelivery or a replay
/// that brings older events again is absorbed as duplicates (at or below the aggregate's
/// `last_sequence`), applying nothing twice and parking nothing.
#[tokio::test]
async fn an_ordered_consumer_on_a_fifo_queue_parks_nothing_and_absorbs_replays() {
    let inbox = MemoryInbox::new("ordered-fifo");
    let handler = |event: outbox::consumer::DeliveredEvent<Value>, _tx| async move { Ok::<_, HandlerError>(event.metadata.sequence) };
    let consumer: Consumer<Ordered<MemoryInbox>, MemoryDeadLetters, u64> = Consumer::builder(Ordered::new(inbox.clone()), MemoryDeadLetters::new())
        .retry(RetryPolicy::none())
        .on::<Value, _, _>("OrderCreated", handler)
        .on::<Value, _, _>("OrderUpdated", handler)
        .build();
    let events = [sequenced("OrderCreated", 1, json!({})), sequenced("OrderUpdated", 2, json!({})), sequenced("OrderUpdated", 3, json!({}))];
    let all: Vec<&Invocation> = events.iter().collect();
    let groups = ["Order#o-1"; 3];
    let deadline = Instant::now() + Duration::from_secs(10);
    let outcomes = |answer: outbox::consumer::InvocationAnswer<u64>| {
        let outbox::consumer::InvocationAnswer::Batch(answer) = answer else { panic!("an SQS event is a batch") };
        let failed: Vec<String> = answer.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
        (failed, answer.outcomes.iter().map(|o| format!("{}:{}", o.event_id, o.outcome)).collect::<Vec<_>>())
    };

    inbox.fail_next(Injected::Conflict); // event 1's commit
    let (failed, settled) = outcomes(consumer.handle_invocation(&fifo_batch("delivery.fifo", &all, &groups), deadline).await.unwrap());
    assert_eq!(failed, ["m-0", "m-1", "m-2"], "2 and 3 come back behind 1, not parked");
    assert!(settled.is_empty(), "{settled:?}");
    assert!(inbox.parked_events().is_empty());

    let (failed, settled) = outcomes(consumer.handle_invocation(&fifo_batch("delivery.fifo", &all, &groups), deadline).await.unwrap());
    assert!(failed.is_empty());
    assert_eq!(settled, ["evt-1:applied", "evt-2:applied", "evt-3:applied"]);

    // A replay from a point in time (or a redelivery): the older events again, 2 before 1.
    let replay = [&events[1], &events[0], &events[2]];
    let (failed, settled) = outcomes(consumer.handle_invocation(&fifo_batch("delivery.fifo", &replay, &groups), deadline).await.unwrap());
    assert!(failed.is_empty());
    assert_eq!(settled, ["evt-2:duplicate", "evt-1:duplicate", "evt-3:duplicate"]);
    assert_eq!(applied(&inbox), ["evt-1", "evt-2", "evt-3"], "each applied once, in order");
    assert!(inbox.parked_events().is_empty());
}

/// Claim-checked events (`detail.data_ref`): the payload is fetched from S3 only for an event the
/// inbox has not recorded; a duplicate is absorbed without a `GetObject`.
#[cfg(feature = "claim-check")]
mod claim_checked {
    use super::*;
    use aws_sdk_s3::operation::get_object::GetObjectOutput;
    use aws_smithy_mocks::{mock, MockResponseInterceptor, Rule, RuleMode};
    use outbox::claim_check::ClaimCheck;

    const DATA: &str = r#"{"order_id":"o-1","quantity":2}"#;

    /// An S3 client that answers `GetObject` with `DATA` (counted by the rule) and nothing else.
    fn s3(get: &Rule) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::Credentials::new("test", "test", None, None, "test"))
            .http_client(aws_smithy_mocks::create_mock_http_client())
            .interceptor(MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny).with_rule(get))
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }

    fn get_object() -> Rule {
        mock!(aws_sdk_s3::Client::get_object).then_output(|| {
            GetObjectOutput::builder()
                .content_length(DATA.len() as i64)
                .body(aws_sdk_s3::primitives::ByteStream::from_static(DATA.as_bytes()))
                .build()
        })
    }

    fn claim_checked(event_id: &str, claim_check: &ClaimCheck) -> Invocation {
        let reference = claim_check.reference(event_id, DATA.as_bytes()).expect("small enough");
        let event = json!({
            "version": "0", "id": format!("envelope-{}", uuid::Uuid::new_v4()), "detail-type": "OrderCreated", "source": "example.orders",
            "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {
                "metadata": {"id": event_id, "type": "OrderCreated", "version": 1, "source": "example.orders",
                             "time": "2026-11-29T08:00:00.000Z", "subject": "o-1", "aggregate_type": "Order", "sequence": 1, "correlation_id": "corr-1"},
                "data_ref": reference
            }
        });
        Invocation::new(serde_json::value::to_raw_value(&event).expect("a JSON value serialises"))
    }

    fn consumer_with_claim_check(inbox: &MemoryInbox, dlq: &MemoryDeadLetters, claim_check: ClaimCheck) -> TestConsumer {
        Consumer::builder(inbox.clone(), dlq.clone())
            .retry(RetryPolicy::none())
            .claim_check(claim_check)
            .on::<OrderCreated, _, _>("OrderCreated", |event, tx| async move {
                tx.write(stock_check(&event.data.order_id));
                Ok(Outcome::Reserved)
            })
            .build()
    }

    #[tokio::test]
    async fn a_duplicate_is_absorbed_without_fetching_its_payload() {
        let get = get_object();
        let claim_check = ClaimCheck::new(s3(&get), "payloads", "orders");
        let (inbox, dlq) = (MemoryInbox::new("reserve"), MemoryDeadLetters::new());
        let consumer = consumer_with_claim_check(&inbox, &dlq, claim_check.clone());

        let first = consumer.handle(claim_checked("cc-1", &claim_check)).await.expect("applied");
        assert_eq!(first.outcome, Handled::Applied(Outcome::Reserved));
        assert_eq!(get.num_calls(), 1, "a new event's payload is fetched once");
        assert_eq!(inbox.applied()[0].payload_hash, PayloadHash::of(DATA).stored(), "hashed from the fetched bytes");

        for _ in 0..3 {
            let again = consumer.handle(claim_checked("cc-1", &claim_check)).await.expect("duplicate");
            assert_eq!(again.outcome, Handled::Duplicate);
        }
        assert_eq!(get.num_calls(), 1, "a duplicate must not fetch its payload from S3 again");
        assert_eq!(inbox.applied().len(), 1);
        assert!(dlq.messages().is_empty());
    }
}

/// One builder on both sides: an event too large for an outbox item, emitted from a consumer's
/// `Tx`, is offloaded to the claim check of the consumer's writer exactly as the producer's
/// `OutboxTransaction` offloads it, and uploaded before the inbox transaction commits.
#[cfg(feature = "claim-check")]
#[tokio::test]
async fn an_event_too_large_for_an_outbox_item_is_claim_checked_from_a_consumer_as_from_a_producer() {
    use aws_smithy_mocks::{mock, MockResponseInterceptor, RuleMode};
    use outbox::claim_check::ClaimCheck;

    let uploads = mock!(aws_sdk_s3::Client::put_object)
        .match_requests(|req| req.bucket() == Some("payloads"))
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build());
    let s3 = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new("test", "test", None, None, "test"))
        .http_client(aws_smithy_mocks::create_mock_http_client())
        .interceptor(MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny).with_rule(&uploads))
        .build();
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600)).with_claim_check(ClaimCheck::new(
        aws_sdk_s3::Client::from_conf(s3),
        "payloads",
        "events",
    ));
    let big = json!({"order_id": "o-1", "note": "x".repeat(outbox::envelope::MAX_ITEM_BYTES)});
    let reserved = |data: &Value| Event::new("StockReserved", "example.stock", ("Reservation", "o-1"), 1, data).expect("JSON serialises");

    // The producer's transaction.
    let mut producer = writer.transaction();
    let produced = producer.emit(reserved(&big)).expect("offloaded, not refused").clone();
    assert_eq!((produced.payload.as_str(), produced.payload_ref.as_ref().map(|r| r.bucket.as_str())), ("null", Some("payloads")));

    // The same event from a consumer's handler.
    let inbox = MemoryInbox::new("inventory");
    let dead_letters = MemoryDeadLetters::new();
    let data = big.clone();
    let consumer: TestConsumer = Consumer::builder(inbox.clone(), dead_letters.clone())
        .retry(RetryPolicy::none())
        .outbox(writer)
        .on::<OrderCreated, _, _>("OrderCreated", move |_event, tx| {
            let data = data.clone();
            async move {
                tx.emit(Event::new("StockReserved", "example.stock", ("Reservation", "o-1"), 1, &data)?)?;
                Ok(Outcome::Reserved)
            }
        })
        .build();
    consumer.handle(created("e-big", 2)).await.expect("applied, not dead-lettered");
    assert!(dead_letters.messages().is_empty(), "{:?}", dead_letters.messages());
    assert_eq!(uploads.num_calls(), 1, "the payload was uploaded before the commit");
    let applied = inbox.applied();
    let put = applied[0].writes[0].put().expect("the outbox put");
    assert_eq!(put.item().get("payload").and_then(|v| v.as_s().ok()).map(String::as_str), Some("null"));
    let reference = put.item().get("payload_ref").and_then(|v| v.as_m().ok()).expect("a payload_ref");
    assert_eq!(reference.get("bucket").and_then(|v| v.as_s().ok()).map(String::as_str), Some("payloads"));
    assert_eq!(
        reference.get("size").and_then(|v| v.as_n().ok()).map(String::as_str),
        produced.payload_ref.as_ref().map(|r| r.size.to_string()).as_deref(),
        "the same payload size on both sides"
    );
}

/// Several events of one aggregate from one delivery: the consumer's `Tx` numbers them after the
/// aggregate's current sequence, like the producer's transaction.
#[tokio::test]
async fn a_consumer_emits_consecutive_sequences_of_one_aggregate() {
    let tx = Tx::<Outcome>::for_test(Some(OutboxWriter::new("outbox", Duration::from_secs(3600))));
    tx.sequence(outbox::AggregateSequence::new(("Reservation", "o-1"), 3));
    let event = |t: &str| Event::new(t, "example.stock", ("Reservation", "o-1"), 0, &json!({})).expect("JSON serialises");
    let first = tx.emit_next(event("StockReserved")).expect("publishable");
    let second = tx.emit_next(event("StockShipped")).expect("publishable");
    assert_eq!((first.sequence, second.sequence), (4, 5));
    assert!(matches!(
        Tx::<Outcome>::for_test(None).emit(event("StockReserved")),
        Err(outbox::WriteError::NoOutbox(t)) if t == "StockReserved"
    ));
}

// ----- The parked check (a real sequence gap) -----

/// An SQS batch with the kit's scheduled check message among events: the check lists the
/// consumer's parked events, counts the one parked longer than the gap limit, logs one WARN for
/// it naming the event, its aggregate, sequence, what it waits for and its age, and is
/// acknowledged (never in `batchItemFailures`); the events beside it are handled as usual.
#[tokio::test]
async fn the_parked_check_finds_a_real_gap_warns_and_is_acknowledged() {
    let captured = logs::Captured::global();
    let inbox = MemoryInbox::new("gap-check");
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Sequence 2 of o-1 never comes: 3 parks and stays parked; 1 applies.
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("applied");
    consumer.handle(sequenced("OrderUpdated", 3, json!({}))).await.expect("parked");
    assert!(inbox.backdate_parked("evt-3", Duration::from_secs(1_200)), "evt-3 is parked");

    let check = outbox::consumer::ParkedCheck::new(Duration::from_secs(900));
    assert_eq!(outbox::consumer::ParkedCheck::recognise(&check.message()), Some(check));
    let check_message = Invocation::new(serde_json::value::RawValue::from_string(check.message()).unwrap());
    let batch = sqs_batch(&[check_message, sequenced("OrderUpdated", 4, json!({}))]);
    let answer = consumer.handle_invocation(&batch, deadline).await.expect("a batch");
    let outbox::consumer::InvocationAnswer::Batch(answer) = answer else { panic!("a batch") };
    assert!(answer.batch_item_failures.is_empty(), "the check message is acknowledged: {answer:?}");
    let report = answer.parked_check.as_ref().expect("the check ran");
    assert_eq!((report.parked, report.gaps, report.recovered, report.complete), (1, 1, 0, true), "{report:?}");
    assert!(report.oldest_age_seconds >= 1_200, "{report:?}");
    assert_eq!(answer.outcomes.iter().map(|o| (o.event_id.as_str(), o.outcome.as_str())).collect::<Vec<_>>(), [("evt-4", "parked")]);
    let json = serde_json::to_value(outbox::consumer::InvocationAnswer::<u64>::Batch(answer.clone())).unwrap();
    assert_eq!(json["parked_check"]["gaps"], 1, "{json}");

    let lines = captured.lines();
    let ours = |l: &&Value| l["level"] == "WARN" && l["fields"]["consumer"] == "gap-check";
    let warned: Vec<_> = lines.iter().filter(ours).filter(|l| l["fields"]["event_id"] == "evt-3").collect();
    assert_eq!(warned.len(), 1, "one WARN for the gap: {}", captured.text());
    let fields = &warned[0]["fields"];
    assert_eq!((&fields["aggregate"], &fields["sequence"], &fields["waits_for"]), (&json!("Order#o-1"), &json!(3), &json!(2)), "{fields}");
    assert!(fields["age_seconds"].as_u64().is_some_and(|a| a >= 1_200), "{fields}");
    assert!(fields["release"].as_str().is_some_and(|r| r.contains("--aggregate Order#o-1 --through 2")), "{fields}");
    assert_eq!(lines.iter().filter(ours).count(), 1, "evt-4 is young: no WARN for it");

    // Under the limit: listed, no gap. An ordinary event body is not a check.
    let relaxed = outbox::consumer::ParkedCheck::new(Duration::from_secs(7_200));
    let report = consumer.check_parked(&relaxed, deadline).await;
    assert_eq!((report.parked, report.gaps), (2, 0));
    assert_eq!(outbox::consumer::ParkedCheck::recognise(sequenced("OrderCreated", 1, json!({})).payload.get()), None);
    assert_eq!(outbox::consumer::ParkedCheck::recognise(r#"{"outbox":"something-else"}"#), None);
    assert_eq!(
        outbox::consumer::ParkedCheck::recognise(r#"{"outbox":"check-parked"}"#),
        Some(outbox::consumer::ParkedCheck::new(outbox::consumer::DEFAULT_GAP_AFTER))
    );
}

/// The check's safety net: a parked event whose predecessor is already applied (here: released
/// by the operator without re-publishing) is applied by the check, with what waited behind it.
#[tokio::test]
async fn the_parked_check_applies_a_parked_event_whose_predecessor_is_applied() {
    let inbox = MemoryInbox::new("gap-recover");
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    consumer.handle(sequenced("OrderCreated", 1, json!({}))).await.expect("applied");
    consumer.handle(sequenced("OrderUpdated", 3, json!({}))).await.expect("parked");
    consumer.handle(sequenced("OrderUpdated", 4, json!({}))).await.expect("parked");
    inbox.release_through_now("Order#o-1", 2);
    let report = consumer.check_parked(&outbox::consumer::ParkedCheck::default(), Instant::now() + Duration::from_secs(10)).await;
    assert_eq!((report.parked, report.recovered, report.gaps), (0, 1, 0), "{report:?}");
    assert_eq!(applied(&inbox), ["evt-1", "evt-3", "evt-4"], "3 by the check, 4 drained behind it");
    assert!(inbox.parked_events().is_empty());
}

/// The check's gauges, as the kit's alarm reads them: `OldestParkedAgeSeconds` and
/// `EventsParkedNow` (dimension `function` only, added by the EMF recorder).
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_parked_check_emits_the_gauges_the_alarm_reads() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let inbox = MemoryInbox::new("gap-gauge");
    let consumer = ordered_consumer(&inbox, &["OrderCreated", "OrderUpdated"]);
    consumer.handle(sequenced("OrderUpdated", 3, json!({}))).await.expect("parked");
    inbox.backdate_parked("evt-3", Duration::from_secs(600));
    consumer.check_parked(&outbox::consumer::ParkedCheck::default(), Instant::now() + Duration::from_secs(10)).await;
    let values = common::recorded(&snapshotter);
    let gauge = |name: &str| match values.get(name) {
        Some(DebugValue::Gauge(g)) => g.0,
        other => panic!("{name}: {other:?} among {:?}", values.keys().collect::<Vec<_>>()),
    };
    assert!(gauge("OldestParkedAgeSeconds[]") >= 600.0);
    assert_eq!(gauge("EventsParkedNow[]"), 1.0);
}
