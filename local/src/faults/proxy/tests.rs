//! The proxy's answers: AWS's wire shapes for injected errors, `PutEvents` entry failures,
//! `BatchGetItem` unprocessed keys.

use super::*;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs.iter().map(|(k, v)| (axum::http::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
}

async fn body_of(response: Response) -> (u16, Value, Option<String>) {
    let status = response.status().as_u16();
    let error_type = response.headers().get("x-amzn-errortype").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = axum::body::to_bytes(response.into_body(), MAX_BODY).await.expect("a body");
    (status, serde_json::from_slice(&bytes).expect("JSON"), error_type)
}

#[test]
fn the_operation_comes_from_the_target_header_or_the_query_action() {
    assert_eq!(operation(&headers(&[("x-amz-target", "DynamoDB_20120810.TransactWriteItems")]), b""), "dynamodb:TransactWriteItems");
    assert_eq!(operation(&headers(&[("x-amz-target", "DynamoDBStreams_20120810.GetRecords")]), b""), "streams:GetRecords");
    assert_eq!(operation(&headers(&[("x-amz-target", "AWSEvents.PutEvents")]), b""), "events:PutEvents");
    assert_eq!(operation(&headers(&[("x-amz-target", "AmazonSQS.SendMessage")]), b""), "sqs:SendMessage");
    let signed = headers(&[("authorization", "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host")]);
    assert_eq!(operation(&signed, b"Action=SendMessage&Version=2012-11-05"), "sqs:SendMessage");
}

#[tokio::test]
async fn errors_have_the_services_wire_shape() {
    let (status, body, kind) = body_of(error_answer("dynamodb:PutItem", ErrorCode::ThrottlingException, b"")).await;
    assert_eq!((status, kind.as_deref()), (400, Some("ThrottlingException")));
    assert_eq!(body["__type"], "com.amazonaws.dynamodb.v20120810#ThrottlingException");
    let (status, body, _) = body_of(error_answer("dynamodb:Query", ErrorCode::ProvisionedThroughputExceeded, b"")).await;
    assert_eq!((status, body["__type"].as_str()), (400, Some("com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException")));
    let (status, _, kind) = body_of(error_answer("dynamodb:GetItem", ErrorCode::ServiceUnavailable, b"")).await;
    assert_eq!((status, kind.as_deref()), (503, Some("ServiceUnavailable")));
    let (status, body, _) = body_of(error_answer("events:PutEvents", ErrorCode::InternalServerError, b"")).await;
    assert_eq!((status, body["__type"].as_str()), (500, Some("InternalException")));
    let (status, body, _) = body_of(error_answer("sqs:SendMessage", ErrorCode::RequestLimitExceeded, b"")).await;
    assert_eq!((status, body["__type"].as_str()), (400, Some("com.amazonaws.sqs#RequestLimitExceeded")));
}

#[tokio::test]
async fn a_conflict_cancels_a_transaction_with_one_reason_per_item() {
    let request = br#"{"TransactItems":[{"Put":{}},{"Put":{}},{"Update":{}}]}"#;
    let (status, body, kind) = body_of(error_answer("dynamodb:TransactWriteItems", ErrorCode::TransactionConflict, request)).await;
    assert_eq!((status, kind.as_deref()), (400, Some("TransactionCanceledException")));
    let codes: Vec<&str> = body["CancellationReasons"].as_array().expect("reasons").iter().filter_map(|r| r["Code"].as_str()).collect();
    assert_eq!(codes, ["TransactionConflict", "None", "None"]);
    assert!(body["Message"].as_str().is_some_and(|m| m.ends_with("[TransactionConflict, None, None]")), "{body}");
    let (_, body, _) = body_of(error_answer("dynamodb:PutItem", ErrorCode::TransactionConflict, b"")).await;
    assert_eq!(body["__type"], "com.amazonaws.dynamodb.v20120810#TransactionConflictException");
}

#[test]
fn windows_limits_and_functions_select_the_calls_a_fault_applies_to() {
    let mut fault = Fault::new(FaultKind::Error, "dynamodb:*");
    fault.function = Some("RelayFunction".into());
    fault.limit = Some(1);
    let injector = Injector::new(FaultPlan { faults: vec![fault], ..FaultPlan::default() }, "http://127.0.0.1:1");
    assert!(injector.applies(&injector.plan.faults[0], "dynamodb:PutItem", "RelayFunction", 0));
    assert!(!injector.applies(&injector.plan.faults[0], "dynamodb:PutItem", "OtherFunction", 0), "another function");
    assert!(!injector.applies(&injector.plan.faults[0], "events:PutEvents", "RelayFunction", 0), "another service");
    injector.fired[0].fetch_add(1, Ordering::SeqCst);
    assert!(!injector.applies(&injector.plan.faults[0], "dynamodb:PutItem", "RelayFunction", 0), "the limit is reached");
}

#[tokio::test]
async fn unprocessed_keys_return_every_requested_key_and_no_item() {
    let request = br#"{"RequestItems":{"inbox":{"Keys":[{"pk":{"S":"a"}},{"pk":{"S":"b"}}],"ConsistentRead":true}}}"#;
    let (status, body, kind) = body_of(unprocessed_answer(request)).await;
    assert_eq!((status, kind), (200, None));
    assert_eq!(body["Responses"], json!({"inbox": []}));
    assert_eq!(body["UnprocessedKeys"]["inbox"]["Keys"], json!([{"pk": {"S": "a"}}, {"pk": {"S": "b"}}]));
    assert_eq!(body["UnprocessedKeys"]["inbox"]["ConsistentRead"], json!(true));
}
