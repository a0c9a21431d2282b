//! [`FailedCallsClient`] under a fake HTTP client: what counts as a failed attempt, and for which
//! service, through real SDK clients built from an `SdkConfig` (as `Client::new(&sdk)` builds them).

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_smithy_runtime_api::client::http::{http_client_fn, HttpConnector, HttpConnectorFuture, SharedHttpConnector};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_runtime_api::shared::IntoShared;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use super::*;

/// What the fake service answers to every attempt.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// This status, with an awsJson error body of this `__type` (and the `x-amzn-ErrorType`
    /// header when `header`).
    Error { status: u16, error_type: &'static str, header: bool },
    /// `200 {}`.
    Ok,
    /// Connection refused.
    Refused,
    /// Never: the attempt time-out drops the attempt.
    Never,
}

#[derive(Debug)]
struct Fake(Answer);

impl HttpConnector for Fake {
    fn call(&self, _request: HttpRequest) -> HttpConnectorFuture {
        let answer = self.0;
        HttpConnectorFuture::new(async move {
            let json = |status: u16, body: String| {
                let mut response = HttpResponse::new(StatusCode::try_from(status).expect("a valid status"), SdkBody::from(body));
                response.headers_mut().insert("content-type", "application/x-amz-json-1.0");
                response
            };
            match answer {
                Answer::Ok => Ok(json(200, "{}".into())),
                Answer::Error { status, error_type, header } => {
                    let mut response = json(status, format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"m"}}"#));
                    if header {
                        response.headers_mut().insert("x-amzn-errortype", error_type);
                    }
                    Ok(response)
                }
                Answer::Refused => Err(ConnectorError::io("connection refused".into())),
                Answer::Never => std::future::pending().await,
            }
        })
    }
}

/// An `SdkConfig` whose HTTP client is a [`FailedCallsClient`] around [`Fake`]: 2 attempts per
/// call, 1 ms back-off, 100 ms per attempt.
fn sdk(answer: Answer) -> aws_config::SdkConfig {
    let fake = http_client_fn(move |_, _| -> SharedHttpConnector { Fake(answer).into_shared() });
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(aws_sdk_dynamodb::config::Credentials::new(
            "id", "secret", None, None, "test",
        )))
        .endpoint_url("http://127.0.0.1:1")
        .retry_config(RetryConfig::standard().with_max_attempts(2).with_initial_backoff(Duration::from_millis(1)))
        .timeout_config(TimeoutConfig::builder().operation_attempt_timeout(Duration::from_millis(100)).build())
        .http_client(FailedCallsClient::new(fake))
        .build()
}

/// `AwsCallsFailed` by `service` after `calls` ran under a recorder of this thread (the test's
/// current-thread runtime polls every attempt on it).
async fn failed_during<F: std::future::Future<Output = ()>>(calls: F) -> BTreeMap<String, u64> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    {
        let _local = metrics::set_default_local_recorder(&recorder);
        calls.await;
    }
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == metric::AWS_CALLS_FAILED)
        .map(|(key, _, _, value)| {
            let service = key.key().labels().find(|l| l.key() == dimension::SERVICE).map(|l| l.value().to_owned()).unwrap_or_default();
            let DebugValue::Counter(n) = value else { panic!("a counter: {value:?}") };
            (service, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `GetItem` against `answer`: the call's error code (`None`: it succeeded) and the failed
/// attempts by service.
async fn get_item(answer: Answer) -> (Option<String>, BTreeMap<String, u64>) {
    let client = aws_sdk_dynamodb::Client::new(&sdk(answer));
    let mut code = None;
    let failed =
        failed_during(async {
            code =
                client.get_item().table_name("t").key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into())).send().await.err().map(|e| {
                    e.code().map(str::to_owned).unwrap_or_else(|| format!("{:?}", aws_smithy_types::error::display::DisplayErrorContext(&e)))
                });
        })
        .await;
    (code, failed)
}

fn dynamodb(n: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("DynamoDB".to_owned(), n)])
}

#[tokio::test]
async fn a_5xx_a_429_and_a_throttling_answer_are_failed_attempts_and_the_sdk_still_reads_the_error() {
    let (code, failed) = get_item(Answer::Error { status: 500, error_type: "InternalServerError", header: true }).await;
    assert_eq!((code.as_deref(), failed), (Some("InternalServerError"), dynamodb(2)), "both attempts");
    // A 429 whose code is not a throttling one: the SDK does not retry it; its one attempt failed.
    let (_, failed) = get_item(Answer::Error { status: 429, error_type: "SomethingElse", header: false }).await;
    assert_eq!(failed, dynamodb(1));
    let (code, failed) = get_item(Answer::Error { status: 400, error_type: "ThrottlingException", header: true }).await;
    assert_eq!((code.as_deref(), failed), (Some("ThrottlingException"), dynamodb(2)), "by the x-amzn-ErrorType header");
    // DynamoDB names the error in the body only: read, and handed on to the SDK intact.
    let (code, failed) = get_item(Answer::Error { status: 400, error_type: "ProvisionedThroughputExceededException", header: false }).await;
    assert_eq!((code.as_deref(), failed), (Some("ProvisionedThroughputExceededException"), dynamodb(2)), "by the body's __type");
}

#[tokio::test]
async fn no_answer_fails_a_refused_connection_and_a_dropped_attempt_alike() {
    let (code, failed) = get_item(Answer::Refused).await;
    assert!(code.is_some_and(|c| c.contains("refused")));
    assert_eq!(failed, dynamodb(2));
    let (code, failed) = get_item(Answer::Never).await;
    assert!(code.is_some_and(|c| c.to_lowercase().contains("timeout")));
    assert_eq!(failed, dynamodb(2), "each attempt the time-out dropped");
}

#[tokio::test]
async fn a_failed_condition_and_a_success_are_not_failures() {
    let (code, failed) = get_item(Answer::Error { status: 400, error_type: "ConditionalCheckFailedException", header: false }).await;
    assert_eq!((code.as_deref(), failed), (Some("ConditionalCheckFailedException"), BTreeMap::new()), "the pattern working: not counted");
    let (code, failed) = get_item(Answer::Error { status: 400, error_type: "TransactionCanceledException", header: true }).await;
    assert_eq!((code.as_deref(), failed), (Some("TransactionCanceledException"), BTreeMap::new()));
    let (code, failed) = get_item(Answer::Ok).await;
    assert_eq!((code, failed), (None, BTreeMap::new()));
}

#[tokio::test]
async fn the_service_is_the_signing_name_of_the_request() {
    let sdk = sdk(Answer::Error { status: 503, error_type: "ServiceUnavailable", header: true });
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&sdk).force_path_style(true).build());
    let failed = failed_during(async {
        let _ = sqs.send_message().queue_url("http://127.0.0.1:1/123456789012/q").message_body("m").send().await;
        let _ = s3.get_object().bucket("b").key("k").send().await;
    })
    .await;
    assert_eq!(failed, BTreeMap::from([("S3".to_owned(), 2), ("SQS".to_owned(), 2)]));
}

#[test]
fn error_codes_lose_their_namespace_and_suffix() {
    assert!(is_throttling("com.amazonaws.dynamodb.v20120810#ThrottlingException"));
    assert!(is_throttling("RequestLimitExceeded"));
    assert!(is_throttling("ThrottlingException:http://internal.amazon.com/coral/com.amazon.coral.availability/"));
    assert!(!is_throttling("com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"));
    assert!(!is_throttling("ValidationException"));
}

#[tokio::test]
async fn load_sdk_config_counts_through_the_sdks_default_client() {
    let sdk = crate::load_sdk_config(&crate::Env::from_map(std::collections::HashMap::new())).await.expect("no time-out variables");
    let client = format!("{:?}", sdk.http_client());
    assert!(client.contains("FailedCallsClient"), "{client}");
}
