//! The producer API against a DynamoDB client mocked with `aws-smithy-mocks`: the request shape
//! of one transaction (the caller's writes and the outbox put, in order), which write a
//! `TransactionCanceledException` names, and the trace header taken from `_X_AMZN_TRACE_ID`.

#[cfg(feature = "metrics")]
mod common;

use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsOutput};
use aws_sdk_dynamodb::types::error::TransactionCanceledException;
use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, ConditionCheck, TransactWriteItem};
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use outbox::{CommitError, ConditionFailed, Event, OutboxWriter};

fn client(rule: &Rule) -> aws_sdk_dynamodb::Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [rule], |c| c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()))
}

fn cancelled(codes: &[&str]) -> TransactWriteItemsError {
    let reasons = codes.iter().map(|c| CancellationReason::builder().code(*c).build()).collect();
    TransactWriteItemsError::TransactionCanceledException(
        TransactionCanceledException::builder().set_cancellation_reasons(Some(reasons)).message("Transaction cancelled").build(),
    )
}

fn check(table: &str) -> TransactWriteItem {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key("pk", AttributeValue::S("ORDER#o-1".into()))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .expect("table_name, key and condition_expression are set");
    TransactWriteItem::builder().condition_check(check).build()
}

fn event(sequence: u64) -> Event {
    Event::new("OrderShipped", "example.orders", ("Order", "o-1"), sequence, &serde_json::json!({"order_id": "o-1", "total": "19.99"}))
        .expect("a JSON value serialises")
        .trace_header(None)
}

/// Request: write 0, the outbox put, write 1. Answers `codes` as the cancellation reasons.
async fn execute_cancelled(codes: &'static [&'static str]) -> CommitError {
    let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .match_requests(|req| {
            let items = req.transact_items();
            items.len() == 3
                && items[0].condition_check().is_some()
                && items[1].put().is_some_and(|p| p.table_name() == "outbox" && p.condition_expression() == Some("attribute_not_exists(pk)"))
                && items[2].condition_check().is_some()
        })
        .then_error(move || cancelled(codes));
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    tx.write(check("orders"));
    tx.emit(event(4)).expect("publishable");
    tx.write(check("customers"));
    assert!(tx.is_outbox_position(1) && !tx.is_outbox_position(0) && !tx.is_outbox_position(2));
    let err = tx.execute(&client(&rule)).await.expect_err("the mock cancels the transaction");
    assert_eq!(rule.num_calls(), 1, "the request did not have the expected shape");
    err
}

#[tokio::test]
async fn a_failed_caller_write_is_named_by_its_index_among_the_callers_writes() {
    let err = execute_cancelled(&["None", "None", "ConditionalCheckFailed"]).await;
    assert!(matches!(err, CommitError::ConditionFailed(ConditionFailed::Write { index: 1, .. })), "{err:?}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_failed_outbox_put_names_the_aggregate_and_the_sequence_taken() {
    let err = execute_cancelled(&["None", "ConditionalCheckFailed", "None"]).await;
    let CommitError::ConditionFailed(ConditionFailed::SequenceTaken { event_type, aggregate_type, aggregate_id, sequence }) = &err else {
        panic!("expected SequenceTaken, got {err:?}")
    };
    assert_eq!((event_type.as_str(), aggregate_type.as_str(), aggregate_id.as_str(), *sequence), ("OrderShipped", "Order", "o-1", 4));
    assert!(err.to_string().contains("sequence 4 of Order#o-1 is already taken"), "{err}");
}

#[tokio::test]
async fn conflicts_and_throttling_are_retryable() {
    let err = execute_cancelled(&["TransactionConflict", "None", "None"]).await;
    assert!(matches!(err, CommitError::Retryable { .. }) && err.is_retryable(), "{err:?}");
    let err = execute_cancelled(&["None", "ThrottlingError", "None"]).await;
    assert!(err.is_retryable(), "{err:?}");
}

#[tokio::test]
async fn the_trace_header_comes_from_the_lambda_environment_unless_given() {
    // The only test of this binary that reads or writes the variable.
    std::env::set_var(outbox::TRACE_HEADER_ENV, "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1");
    let picked = Event::new("OrderShipped", "example.orders", ("Order", "o-1"), 2, &()).expect("unit serialises");
    let given = picked.clone().trace_header(Some("Root=1-given".into()));
    std::env::remove_var(outbox::TRACE_HEADER_ENV);
    assert_eq!(picked.trace_header.as_deref(), Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"));
    assert_eq!(given.trace_header.as_deref(), Some("Root=1-given"));
    assert_eq!(Event::new("E", "s", ("A", "a"), 1, &()).expect("unit serialises").trace_header, None);

    // It is stored with the outbox item, for the relay's `PutEvents` entry.
    let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .match_requests(|req| {
            req.transact_items()[0].put().and_then(|p| p.item().get("trace_header")).and_then(|v| v.as_s().ok()).map(String::as_str)
                == Some("Root=1-given")
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    tx.emit(given).expect("publishable");
    let stored = tx.execute(&client(&rule)).await.expect("the mock accepts it");
    assert_eq!(rule.num_calls(), 1);
    assert_eq!(stored[0].payload, "null");
}

#[tokio::test]
async fn events_serialise_their_payload_and_take_the_builders_settings() {
    #[derive(serde::Serialize)]
    struct Shipped<'a> {
        order_id: &'a str,
        total: rust_decimal_free::Decimal,
    }
    mod rust_decimal_free {
        /// A decimal kept as text, as a money type would serialise it.
        pub(crate) struct Decimal(pub &'static str);
        impl serde::Serialize for Decimal {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.0)
            }
        }
    }
    let event = Event::new(
        "OrderShipped",
        "example.orders",
        ("Order", String::from("o-9")),
        3,
        &Shipped { order_id: "o-9", total: rust_decimal_free::Decimal("19.99") },
    )
    .expect("serialises")
    .version(2)
    .correlation_id("req-1");
    assert_eq!(event.payload, r#"{"order_id":"o-9","total":"19.99"}"#);
    assert_eq!((event.event_version, event.correlation_id.as_str(), event.aggregate_id.as_str(), event.sequence), (2, "req-1", "o-9", 3));
    let not_json = std::collections::HashMap::from([((1, 2), "a map with non-string keys")]);
    assert!(matches!(Event::new("E", "s", ("A", "a"), 1, &not_json), Err(outbox::WriteError::Serialize { .. })));

    let writer = OutboxWriter::new("outbox", Duration::from_secs(60));
    let mut tx = writer.transaction();
    let item = tx.emit(event).expect("publishable").clone();
    assert_eq!((item.pk.as_str(), item.sk.as_str()), ("Order#o-9", "00000000000000000003"));
    // For a committer of the caller's own: the request items, unsent.
    let items = tx.into_items().await.expect("nothing to upload");
    let put = items[0].put().expect("a Put");
    assert_eq!(put.condition_expression(), Some("attribute_not_exists(pk)"));
    assert_eq!(put.item().get("event_id").and_then(|v| v.as_s().ok()), Some(&item.event_id));
}

/// Every producer's transaction figures come from the library: committed, events written (the
/// outbox puts only), cancelled (alarmable, and by cause), and the call's latency.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_transaction_counts_events_written_and_cancellations_as_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _guard = metrics::set_default_local_recorder(&recorder);

    let ok = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    tx.write(check("orders"));
    tx.emit(event(1)).expect("publishable");
    tx.emit(event(2)).expect("publishable");
    tx.execute(&client(&ok)).await.expect("committed");
    execute_cancelled(&["None", "ConditionalCheckFailed", "None"]).await;
    execute_cancelled(&["None", "None", "TransactionConflict"]).await;

    let values = common::recorded(&snapshotter);
    let counter = |name: &str| common::counter(&values, name);
    assert_eq!(counter("TransactionsCommitted[]"), 1);
    assert_eq!(counter("EventsWritten[]"), 2, "two outbox puts; the condition check is not an event");
    assert_eq!(counter("TransactionsCancelled[]"), 2);
    assert_eq!(counter("TransactionsCancelledByCause[\"cause=ConditionFailed\"]"), 1);
    assert_eq!(counter("TransactionsCancelledByCause[\"cause=Retryable\"]"), 1);
    assert!(matches!(values.get("TransactionMilliseconds[]"), Some(DebugValue::Histogram(h)) if h.len() == 3));
}

/// A `TransactWriteItems` answered with HTTP `status` and the awsJson error `code`.
fn answered(status: u16, code: &'static str, message: &'static str) -> Rule {
    mock!(aws_sdk_dynamodb::Client::transact_write_items).then_http_response(move || {
        let body = format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}"#);
        aws_sdk_dynamodb::config::http::HttpResponse::new(status.try_into().expect("a valid status"), aws_smithy_types::body::SdkBody::from(body))
    })
}

#[tokio::test]
async fn a_caller_tells_access_denied_from_a_validation_error_on_a_failed_commit() {
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut codes = Vec::new();
    for (code, message) in [
        ("AccessDeniedException", "not authorized to perform: dynamodb:TransactWriteItems on resource: table/outbox"),
        ("ValidationException", "One or more parameter values were invalid"),
    ] {
        let rule = answered(400, code, message);
        let mut tx = writer.transaction();
        tx.emit(event(1)).expect("publishable");
        let err = tx.execute(&client(&rule)).await.expect_err("the mock refuses the call");
        assert!(!err.is_retryable(), "{err}");
        assert_eq!(err.to_string(), format!("TransactWriteItems failed: {code}: {message} (HTTP 400)"), "the message is kept");
        // The classified error, by accessor and as the error's source.
        let aws = err.aws_error().expect("an AWS failure");
        assert_eq!((aws.code(), aws.status, aws.retryable), (Some(code), Some(400), false));
        let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<outbox::AwsError>()).expect("AwsError is the source");
        codes.push(source.code().map(str::to_owned));
    }
    assert_eq!(codes, [Some("AccessDeniedException".to_owned()), Some("ValidationException".to_owned())]);

    // A throttle is retryable and keeps its code too.
    let rule = answered(400, "ThrottlingException", "slow down");
    let mut tx = writer.transaction();
    tx.emit(event(1)).expect("publishable");
    let err = tx.execute(&client(&rule)).await.expect_err("throttled");
    assert!(matches!(&err, CommitError::Retryable { source } if source.code() == Some("ThrottlingException")), "{err:?}");
}

#[tokio::test]
async fn a_cancelled_commit_keeps_the_cancellation_as_its_source() {
    let err = execute_cancelled(&["TransactionConflict", "None", "None"]).await;
    let aws = err.aws_error().expect("an AWS failure");
    assert_eq!((aws.code(), aws.retryable), (Some("TransactionCanceledException"), true));
    assert!(err.to_string().contains("transaction cancelled: TransactionConflict"), "{err}");
}

fn typed(event_type: &str) -> Event {
    Event::new(event_type, "example.orders", ("Order", "o-1"), 0, &serde_json::json!({"order_id": "o-1"}))
        .expect("JSON serialises")
        .trace_header(None)
}

fn sequences_of(items: &[TransactWriteItem]) -> Vec<String> {
    items.iter().filter_map(|i| i.put()).filter_map(|p| p.item().get("sk")).filter_map(|v| v.as_s().ok().cloned()).collect()
}

#[tokio::test]
async fn two_events_of_one_aggregate_in_one_transaction_get_consecutive_sequences() {
    let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items)
        .match_requests(|req| sequences_of(req.transact_items()) == ["00000000000000000005", "00000000000000000006"])
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    tx.sequence(outbox::AggregateSequence::new(("Order", "o-1"), 4));
    tx.write(check("orders"));
    assert_eq!(tx.emit_next(typed("OrderPaid")).expect("publishable").sequence, 5);
    assert_eq!(tx.emit_next(typed("OrderShipped")).expect("publishable").sequence, 6);
    let stored = tx.execute(&client(&rule)).await.expect("committed");
    assert_eq!(rule.num_calls(), 1, "the request carried sequences 5 and 6");
    assert_eq!(stored.iter().map(|e| (e.event_type.as_str(), e.sequence)).collect::<Vec<_>>(), [("OrderPaid", 5), ("OrderShipped", 6)]);
}

#[test]
fn a_repeated_or_unknown_sequence_is_refused_before_any_write() {
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    let err = tx.emit_next(typed("OrderPaid")).expect_err("no sequence known for the aggregate");
    assert!(matches!(&err, outbox::WriteError::SequenceUnknown { aggregate, .. } if aggregate == "Order#o-1"), "{err:?}");
    tx.emit(event(4)).expect("publishable");
    let err = tx.emit(event(4)).expect_err("sequence 4 twice");
    assert!(err.to_string().contains("already holds sequence 4 of Order#o-1"), "{err}");
    // After an explicit sequence, the next follows it.
    assert_eq!(tx.emit_next(typed("OrderPaid")).expect("publishable").sequence, 5);
    assert_eq!(tx.len(), 2);
}

#[tokio::test]
async fn the_current_sequence_is_read_from_the_aggregates_latest_outbox_item() {
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    let latest = mock!(aws_sdk_dynamodb::Client::query)
        .match_requests(|req| {
            req.scan_index_forward() == Some(false)
                && req.limit() == Some(1)
                && req.consistent_read() == Some(true)
                && req.expression_attribute_values().and_then(|v| v.get(":pk")).and_then(|v| v.as_s().ok()).map(String::as_str) == Some("Order#o-1")
        })
        .then_output(|| {
            let item = std::collections::HashMap::from([("sk".to_owned(), AttributeValue::S("00000000000000000007".into()))]);
            QueryOutput::builder().items(item).build()
        });
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let sequence = outbox::AggregateSequence::read(&client(&latest), &writer, ("Order", "o-1")).await.expect("read");
    assert_eq!(sequence.current(), 7);
    let none = mock!(aws_sdk_dynamodb::Client::query).then_output(|| QueryOutput::builder().build());
    assert_eq!(outbox::AggregateSequence::read(&client(&none), &writer, ("Order", "o-2")).await.expect("read").current(), 0);
}
