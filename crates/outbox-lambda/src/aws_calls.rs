//! Failed AWS call attempts per service, as the function's own metric `AwsCallsFailed` (feature
//! `metrics`): [`FailedCallsClient`].

use std::borrow::Cow;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::{RuntimeComponents, RuntimeComponentsBuilder};
use aws_smithy_runtime_api::client::runtime_plugin::RuntimePlugin;
use aws_smithy_runtime_api::shared::IntoShared;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;
use aws_smithy_types::config_bag::ConfigBag;

use outbox::contract::{dimension, metric};

/// An [`HttpClient`] that counts the failed attempts of the calls it carries in the metric
/// `AwsCallsFailed` (dimensions `function`, `service`; feature `metrics`); the calls themselves
/// go through the inner client unchanged. [`load_sdk_config`](crate::load_sdk_config) wraps the
/// SDK's default HTTP client in it, so every client built from the function's configuration
/// (`aws_sdk_dynamodb::Client::new(&sdk)`, the S3 client of the claim check, …) counts. An
/// operator on AWS then sees a DynamoDB, EventBridge, SQS or S3 outage in the function's own
/// metrics, and can alarm on it.
///
/// An attempt (each SDK retry is one) failed when it got
/// * no answer: a connect error, an I/O error, or a time-out (the SDK's attempt or operation
///   time-out drops the attempt before it answered: a dropped attempt counts);
/// * HTTP 5xx or 429;
/// * a throttling error answer: the error code is one of the SDK's own throttling or transient
///   codes ([`aws_runtime::retries::classifiers::THROTTLING_ERRORS`] and `TRANSIENT_ERRORS`,
///   e.g. DynamoDB's `ProvisionedThroughputExceededException`, `ThrottlingException`,
///   `RequestLimitExceeded`, EventBridge's `ThrottlingException`: HTTP 400 on the wire). The
///   code is read as the SDK reads it for the JSON protocols: the `x-amzn-ErrorType` header, else
///   the body's `__type` (or `code`), without its namespace (`…#`) and suffix (`:…`)
///   ("Error response", <https://smithy.io/2.0/aws/protocols/aws-json-1_0-protocol.html>).
///
/// Not failed: every other answer, client errors included (`ConditionalCheckFailedException`,
/// `TransactionCanceledException`: the outbox and the inbox working as designed). A partly failed
/// `PutEvents` is HTTP 200: the relay counts its failed entries itself (`EntriesRetried`,
/// `RecordsFailed`).
///
/// The service is the signing name of the request's SigV4 credential scope
/// (`Authorization: AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request`,
/// "Create a signed AWS API request",
/// <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html>):
/// `dynamodb` → `DynamoDB` (`DynamoDBStreams` when `X-Amz-Target` says so), `events` →
/// `EventBridge`, `sqs` → `SQS`, `s3` → `S3`, `secretsmanager` → `SecretsManager`; any other
/// signing name as it is, `unsigned` without one. It holds for every protocol and endpoint (the
/// local emulator's one endpoint included).
///
/// Nothing is written when nothing failed: the EMF recorder leaves a counter without a delta out
/// of the invocation's document.
///
/// To count the calls of an `SdkConfig` built otherwise:
/// `builder.http_client(FailedCallsClient::around_sdk_default().expect("…"))`.
#[derive(Debug, Clone)]
pub struct FailedCallsClient {
    inner: SharedHttpClient,
}

impl FailedCallsClient {
    /// Counts the failed attempts of `inner`'s calls.
    pub fn new(inner: SharedHttpClient) -> Self {
        Self { inner }
    }

    /// Around the HTTPS client the SDK would choose by itself for the latest behavior version
    /// (`aws_smithy_runtime::client::defaults::default_http_client_plugin_v2`: hyper 1, rustls
    /// with aws-lc, the `HTTPS_PROXY`/`NO_PROXY` settings); `None` if this build has none.
    pub fn around_sdk_default() -> Option<Self> {
        let plugin = aws_smithy_runtime::client::defaults::default_http_client_plugin_v2(aws_config::BehaviorVersion::latest())?;
        let components = plugin.runtime_components(&RuntimeComponentsBuilder::new("outbox-lambda failed calls"));
        components.http_client().map(Self::new)
    }
}

impl HttpClient for FailedCallsClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        Counting { inner: self.inner.http_connector(settings, components) }.into_shared()
    }

    fn validate_base_client_config(
        &self,
        runtime_components: &RuntimeComponentsBuilder,
        cfg: &ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.inner.validate_base_client_config(runtime_components, cfg)
    }

    fn validate_final_config(
        &self,
        runtime_components: &RuntimeComponents,
        cfg: &ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        self.inner.validate_final_config(runtime_components, cfg)
    }

    fn connector_metadata(&self) -> Option<aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata> {
        self.inner.connector_metadata()
    }
}

/// The connector of one [`HttpClient::http_connector`] call, counting.
#[derive(Debug)]
struct Counting {
    inner: SharedHttpConnector,
}

impl HttpConnector for Counting {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let attempt = Attempt { service: Some(service_of(&request)) };
        let answer = self.inner.call(request);
        HttpConnectorFuture::new(async move {
            match answer.await {
                Ok(response) => {
                    let (failed, response) = judge(response).await;
                    attempt.settle(failed);
                    response
                }
                Err(e) => {
                    attempt.settle(true);
                    Err(e)
                }
            }
        })
    }
}

/// One attempt in flight: dropped before it was settled (a time-out cancelled it), it counts
/// as failed.
struct Attempt {
    service: Option<Cow<'static, str>>,
}

impl Attempt {
    fn settle(mut self, failed: bool) {
        if let (Some(service), true) = (self.service.take(), failed) {
            record(service);
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if let Some(service) = self.service.take() {
            record(service);
        }
    }
}

fn record(service: Cow<'static, str>) {
    metrics::counter!(metric::AWS_CALLS_FAILED, dimension::SERVICE => service).increment(1);
}

/// The service a signed request calls (see [`FailedCallsClient`]).
fn service_of(request: &HttpRequest) -> Cow<'static, str> {
    let headers = request.headers();
    let signing_name = headers
        .get("authorization")
        .and_then(|auth| auth.split("Credential=").nth(1))
        .and_then(|credential| credential.split(['/', ',', ' ']).nth(3))
        .unwrap_or_default();
    let target = headers.get("x-amz-target").unwrap_or_default();
    match signing_name {
        "dynamodb" if target.starts_with("DynamoDBStreams") => "DynamoDBStreams".into(),
        "dynamodb" => "DynamoDB".into(),
        "events" => "EventBridge".into(),
        "sqs" => "SQS".into(),
        "s3" => "S3".into(),
        "secretsmanager" => "SecretsManager".into(),
        "" => "unsigned".into(),
        other => Cow::Owned(other.to_owned()),
    }
}

/// Whether `response` is a failed attempt, and the response to hand on. A JSON client error
/// without `x-amzn-ErrorType` is read into memory to find its `__type` (the SDK reads an error
/// answer whole anyway); a body that cannot be read is a failed attempt, handed on as the
/// connector error it is.
async fn judge(mut response: HttpResponse) -> (bool, Result<HttpResponse, ConnectorError>) {
    let status = response.status();
    if status.is_server_error() || status.as_u16() == 429 {
        return (true, Ok(response));
    }
    if !status.is_client_error() {
        return (false, Ok(response));
    }
    if let Some(code) = response.headers().get("x-amzn-errortype") {
        return (is_throttling(code), Ok(response));
    }
    if !response.headers().get("content-type").is_some_and(|t| t.contains("json")) {
        return (false, Ok(response));
    }
    let body = match ByteStream::new(response.take_body()).collect().await {
        Ok(body) => body.into_bytes(),
        Err(e) => return (true, Err(ConnectorError::io(e.into()))),
    };
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("__type").or_else(|| v.get("code")).and_then(serde_json::Value::as_str).map(str::to_owned));
    *response.body_mut() = SdkBody::from(body);
    (code.is_some_and(|c| is_throttling(&c)), Ok(response))
}

/// Whether an error code (`com.amazonaws.dynamodb.v20120810#ThrottlingException`,
/// `ThrottlingException:http://internal.amazon.com/…`) is one the SDK retries as throttling or
/// transient.
fn is_throttling(code: &str) -> bool {
    use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
    let code = code.split(':').next().unwrap_or_default();
    let code = code.rsplit('#').next().unwrap_or_default();
    THROTTLING_ERRORS.contains(&code) || TRANSIENT_ERRORS.contains(&code)
}

#[cfg(test)]
mod tests;
