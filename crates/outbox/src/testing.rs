//! Test support (feature `test-util`): DynamoDB faults the emulator cannot play, for your own
//! producer's tests as for ours.
//!
//! [`LostAnswer`] plays a `TransactWriteItems` whose answer is lost: the first attempt commits
//! but the caller sees HTTP 500 `InternalServerError`, so the SDK retries. DynamoDB answers a
//! retry that carries the `ClientRequestToken` of the committed attempt with success (a
//! transaction is idempotent by its token for 10 minutes: "TransactWriteItems",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>),
//! and any other attempt with a `TransactionCanceledException` whose first reason is
//! `ConditionalCheckFailed` (the item now exists). Writes without a token, or with a new token
//! per attempt, show up as a failed condition although they committed.
//!
//! ```
//! # async fn example() {
//! use outbox::testing::LostAnswer;
//! let lost = LostAnswer::new(1);
//! let client = lost.client(); // aws_sdk_dynamodb::Client answering through `lost`
//! outbox::transact_write(&client, vec![/* your items */]).await.ok();
//! assert!(lost.tokens().len() <= 3);
//! # }
//! ```

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

/// A DynamoDB stand-in at the HTTP level (an SDK interceptor) losing the answer of the first
/// `TransactWriteItems` and answering retries as DynamoDB does (see the module docs). Clones
/// share what they saw.
#[derive(Debug, Clone)]
pub struct LostAnswer {
    items: usize,
    tokens: Arc<Mutex<Vec<Option<String>>>>,
}

impl LostAnswer {
    /// A stand-in for transactions of `items` items (the length of the cancellation reasons:
    /// the first `ConditionalCheckFailed`, the others `None`).
    pub fn new(items: usize) -> Self {
        Self { items: items.max(1), tokens: Arc::default() }
    }

    /// The `ClientRequestToken` of each attempt seen so far, in order (`None`: no token).
    pub fn tokens(&self) -> Vec<Option<String>> {
        self.tokens.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// A DynamoDB client answering through this stand-in only (no network): the SDK's test
    /// defaults, standard retries (3 attempts, 1 ms backoff).
    pub fn client(&self) -> aws_sdk_dynamodb::Client {
        let retry =
            aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(3).with_initial_backoff(std::time::Duration::from_millis(1));
        let config = aws_sdk_dynamodb::Config::builder()
            .with_test_defaults_v2()
            .http_client(aws_smithy_mocks::create_mock_http_client())
            .interceptor(self.clone())
            .retry_config(retry)
            .build();
        aws_sdk_dynamodb::Client::from_conf(config)
    }
}

impl Intercept for LostAnswer {
    fn name(&self) -> &'static str {
        "LostAnswer"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body: serde_json::Value = serde_json::from_slice(context.request().body().bytes().unwrap_or_default()).unwrap_or_default();
        self.tokens.lock().map_err(|_| "LostAnswer: poisoned")?.push(body["ClientRequestToken"].as_str().map(str::to_owned));
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let tokens = self.tokens.lock().map_err(|_| "LostAnswer: poisoned")?;
        let (status, body): (u16, String) = if tokens.len() == 1 {
            (500, r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"answer lost"}"#.to_owned())
        } else if tokens.last().cloned().flatten().is_some() && tokens.last() == tokens.first() {
            (200, "{}".to_owned())
        } else {
            let mut reasons = vec![r#"{"Code":"ConditionalCheckFailed","Message":"The conditional request failed"}"#];
            reasons.resize(self.items, r#"{"Code":"None"}"#);
            let reasons = reasons.join(",");
            (
                400,
                format!(
                    r#"{{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled","CancellationReasons":[{reasons}]}}"#
                ),
            )
        };
        *context.response_mut() = aws_sdk_dynamodb::config::http::HttpResponse::new(status.try_into()?, aws_smithy_types::body::SdkBody::from(body));
        Ok(())
    }
}

/// A sample outbox item (aggregate `Order` `aggregate_id`, sequence 1, type `OrderCreated`,
/// source `example.orders`) whose JSON payload is about `payload_bytes` bytes (at least ~60):
/// the same inputs for benchmarks and tests.
pub fn sample_item(event_id: &str, aggregate_id: &str, payload_bytes: usize) -> crate::envelope::OutboxItem {
    use crate::envelope::OutboxItem;
    let filler = "x".repeat(payload_bytes.saturating_sub(60));
    OutboxItem {
        pk: OutboxItem::partition_key("Order", aggregate_id),
        sk: OutboxItem::sort_key(1),
        event_id: event_id.to_owned(),
        event_type: "OrderCreated".into(),
        event_version: 1,
        source: "example.orders".into(),
        aggregate_type: "Order".into(),
        aggregate_id: aggregate_id.to_owned(),
        sequence: 1,
        occurred_at: "2026-12-01T06:00:00.000Z".into(),
        payload: serde_json::json!({"order_id": aggregate_id, "total": "19.99", "note": filler}).to_string(),
        payload_ref: None,
        correlation_id: "bench".into(),
        trace_header: None,
        // Every event the writer stores has one (TraceContext::current_or_new).
        traceparent: Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01".into()),
        tracestate: None,
        expires_at: 1_900_000_000,
        previous: Default::default(),
    }
}

/// The DynamoDB Streams `INSERT` record of `item` (stream view `NEW_IMAGE`, stream sequence
/// number `sequence_number`), as the relay's event source mapping delivers it in a
/// `DynamoDbEvent`'s `Records` ("Amazon DynamoDB Streams", Lambda developer guide,
/// <https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html>).
///
/// # Errors
/// When `item` does not convert to a DynamoDB item.
pub fn insert_record(item: &crate::envelope::OutboxItem, sequence_number: u64) -> Result<serde_json::Value, serde_dynamo::Error> {
    let image: serde_dynamo::Item = item.to_item()?;
    Ok(serde_json::json!({
        "eventID": format!("e{sequence_number}"), "eventName": "INSERT", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1", "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x",
        "dynamodb": {"ApproximateCreationDateTime": 1.0, "Keys": {}, "NewImage": image,
                     "SequenceNumber": format!("{sequence_number:021}"), "SizeBytes": item.payload.len(), "StreamViewType": "NEW_IMAGE"}
    }))
}
