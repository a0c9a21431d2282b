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

#[test]
fn events_serialise_their_payload_and_take_the_builders_settings() {
    #[derive(serde::Serialize)]
    struct Shipped<'a> {
        order_id: &'a str,
        total: rust_decimal_free::Decimal,
    }
    mod rust_decimal_free {
        /// A decimal kept as text, as a money type would serialise it.
        pub struct Decimal(pub &'static str);
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

    let (item, put) = OutboxWriter::new("outbox", Duration::from_secs(60)).transact_item(event).expect("publishable");
    assert_eq!((item.pk.as_str(), item.sk.as_str()), ("Order#o-9", "00000000000000000003"));
    let put = put.put().expect("a Put");
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
