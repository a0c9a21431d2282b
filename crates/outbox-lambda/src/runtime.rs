//! Glue between Lambda and the library: the SDK configuration, the claim check and the metrics
//! recorder of a function, its run loop and its deadline.

use std::time::{Duration, Instant, SystemTime};

use crate::config::{ConfigError, Env, SdkTimeouts};

/// The AWS configuration of a function: `aws_config`'s environment chain (region, credentials,
/// endpoint overrides such as `AWS_ENDPOINT_URL`) with the time-outs of [`SdkTimeouts`] read from
/// `env`, so every client built from it (`aws_sdk_dynamodb::Client::new(&sdk)`, …) gives up on a
/// stalled call. Load it once per cold start.
///
/// With feature `metrics` its HTTP client is the SDK's default one wrapped in a
/// [`FailedCallsClient`](crate::FailedCallsClient): every client built from it counts its failed
/// attempts (no answer, 5xx, 429, throttling) per service in the metric `AwsCallsFailed`.
///
/// # Errors
/// [`ConfigError`] for an invalid time-out variable.
pub async fn load_sdk_config(env: &Env) -> Result<aws_config::SdkConfig, ConfigError> {
    let timeouts = SdkTimeouts::from_env(env)?;
    let loader = aws_config::from_env().timeout_config(timeouts.timeout_config());
    #[cfg(feature = "metrics")]
    let loader = match crate::aws_calls::FailedCallsClient::around_sdk_default() {
        Some(client) => loader.http_client(client),
        None => loader,
    };
    Ok(loader.load().await)
}

/// The claim check the function's environment configures (feature `claim-check`):
/// [`CLAIM_CHECK_BUCKET`](BUCKET_ENV), [`CLAIM_CHECK_PREFIX`](PREFIX_ENV) (default
/// [`outbox::claim_check::DEFAULT_PREFIX`]) and [`CLAIM_CHECK_MAX_BYTES`](MAX_BYTES_ENV)
/// (default [`outbox::claim_check::DEFAULT_MAX_BYTES`]) over an S3 client built from `sdk`;
/// `None` without a bucket. When `sdk` has an endpoint override (`AWS_ENDPOINT_URL`, e.g. the moto
/// emulator) the client addresses buckets by path (`http://host/<bucket>/<key>`): a local
/// endpoint has no DNS for `<bucket>.host`. Against AWS (no override) S3's virtual-hosted style
/// is kept ("Virtual hosting of buckets",
/// <https://docs.aws.amazon.com/AmazonS3/latest/userguide/VirtualHosting.html>).
///
/// # Errors
/// [`ConfigError`] when `CLAIM_CHECK_MAX_BYTES` is not a positive number.
#[cfg(feature = "claim-check")]
pub fn claim_check(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Option<outbox::claim_check::ClaimCheck>, ConfigError> {
    let s3 = aws_sdk_s3::config::Builder::from(sdk).force_path_style(sdk.endpoint_url().is_some()).build();
    claim_check_from_env(aws_sdk_s3::Client::from_conf(s3), env)
}

/// Environment variable naming the claim check's payload bucket (`template.yaml` sets it on
/// producers and consumers); unset means no claim check.
#[cfg(feature = "claim-check")]
pub const BUCKET_ENV: &str = "CLAIM_CHECK_BUCKET";
/// Environment variable with the claim check's key prefix.
#[cfg(feature = "claim-check")]
pub const PREFIX_ENV: &str = "CLAIM_CHECK_PREFIX";
/// Environment variable with the claim check's largest payload in bytes.
#[cfg(feature = "claim-check")]
pub const MAX_BYTES_ENV: &str = "CLAIM_CHECK_MAX_BYTES";

#[cfg(feature = "claim-check")]
fn claim_check_from_env(client: aws_sdk_s3::Client, env: &Env) -> Result<Option<outbox::claim_check::ClaimCheck>, ConfigError> {
    use outbox::claim_check::{ClaimCheck, DEFAULT_MAX_BYTES, DEFAULT_PREFIX};
    let bucket = env.optional(BUCKET_ENV, "");
    if bucket.trim().is_empty() {
        return Ok(None);
    }
    let prefix = env.optional(PREFIX_ENV, DEFAULT_PREFIX);
    let max_bytes = env.bytes(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)?;
    Ok(Some(ClaimCheck::new(client, bucket, prefix).with_max_bytes(max_bytes)))
}

/// The Embedded Metric Format recorder of a function (feature `metrics`): installed as the
/// `metrics` facade's global recorder, CloudWatch namespace `METRICS_NAMESPACE` (default
/// `default_namespace`), one dimension `function` = `AWS_LAMBDA_FUNCTION_NAME`, a `ColdStart`
/// count and the request id as a property. Lambda turns the EMF JSON the function prints into
/// CloudWatch metrics without an API call
/// (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>).
/// Serve the handler with [`run`] (or `metrics_cloudwatch_embedded::lambda::service::run_http`
/// for `lambda_http`), which flushes the figures after every invocation.
///
/// When the application already installed a global recorder (its own exporter, a test's
/// debugging recorder), that recorder is kept: this logs a warning and answers `None`, and the
/// function runs without EMF. Installing is never a reason for the function not to start, with
/// or without feature `metrics`.
#[cfg(feature = "metrics")]
pub fn emf_metrics(env: &Env, default_namespace: &str) -> Option<&'static metrics_cloudwatch_embedded::Collector> {
    let function_name = env.optional(outbox::contract::env::AWS_LAMBDA_FUNCTION_NAME, "local");
    let installed = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(env.optional(outbox::contract::env::METRICS_NAMESPACE, default_namespace))
        .with_dimension(outbox::contract::dimension::FUNCTION, function_name)
        .lambda_cold_start_metric("ColdStart")
        .with_lambda_request_id("RequestId")
        .init();
    match installed {
        Ok(collector) => Some(collector),
        Err(e) => {
            tracing::warn!(error = %e, "a metrics recorder is already installed: it is kept, and no CloudWatch EMF is written");
            None
        }
    }
}

/// Runs `handler` until the runtime stops, like [`lambda_runtime::run`]; with feature `metrics`
/// first installs [`emf_metrics`] (unless the application installed a recorder of its own) and
/// flushes the figures after every invocation. With feature `opentelemetry`, once
/// [`telemetry::init`](crate::telemetry::init) has installed its exporter, each invocation runs
/// in the runtime's `OpenTelemetryLayer` span, made the child of the invocation's X-Ray trace
/// header, and the spans are exported (force-flushed) after every invocation.
///
/// # Errors
/// `lambda_runtime`'s.
pub async fn run<A, F, R, B, S, D, E>(env: &Env, default_namespace: &str, handler: F) -> Result<(), lambda_runtime::Error>
where
    F: lambda_runtime::Service<lambda_runtime::LambdaEvent<A>, Response = R>,
    F::Future: std::future::Future<Output = Result<R, F::Error>>,
    F::Error: Into<lambda_runtime::Diagnostic> + std::fmt::Debug,
    A: for<'de> serde::Deserialize<'de>,
    R: lambda_runtime::IntoFunctionResponse<B, S>,
    B: serde::Serialize,
    S: futures_core::Stream<Item = Result<D, E>> + Unpin + Send + 'static,
    D: Into<bytes::Bytes> + Send,
    E: Into<lambda_runtime::Error> + Send + std::fmt::Debug,
{
    #[cfg(feature = "opentelemetry")]
    if crate::telemetry::installed() {
        let runtime = lambda_runtime::Runtime::new(handler).layer(lambda_runtime::layers::TracingLayer::new());
        #[cfg(feature = "metrics")]
        let runtime = runtime.layer(lambda_runtime::tower::util::option_layer(
            emf_metrics(env, default_namespace).map(metrics_cloudwatch_embedded::lambda::MetricsLayer::new),
        ));
        return Box::pin(crate::telemetry::traced(runtime).run()).await;
    }
    #[cfg(feature = "metrics")]
    if let Some(metrics) = emf_metrics(env, default_namespace) {
        // Boxed: the runtime's future is deep enough to exceed the compiler's layout depth limit
        // inside a caller's `main`.
        return Box::pin(metrics_cloudwatch_embedded::lambda::service::run(metrics, handler)).await;
    }
    let _ = (env, default_namespace);
    Box::pin(lambda_runtime::run(handler)).await
}

/// When the invocation must have answered, as an [`Instant`]: the Lambda context's
/// [`deadline`](lambda_runtime::Context::deadline) (the `Lambda-Runtime-Deadline-Ms` header of
/// the Runtime API, epoch milliseconds), or `fallback` from now when the context has none
/// (`deadline` 0, e.g. a context built in a test).
///
/// Source: the Lambda Runtime API reference, "Next invocation",
/// <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>.
pub fn deadline(context: &lambda_runtime::Context, fallback: Duration) -> Instant {
    if context.deadline == 0 {
        return Instant::now() + fallback;
    }
    let left = context.deadline().duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
    Instant::now() + left
}

/// The lease end for guarded mode (`outbox::inbox::InboxStore::guarded`):
/// the invocation's deadline as a UTC time, or `fallback` from now when the context has none.
/// A crashed invocation then blocks its event no longer than its own timeout.
pub fn lease_until(context: &lambda_runtime::Context, fallback: Duration) -> chrono::DateTime<chrono::Utc> {
    let now = chrono::Utc::now();
    let fallback = now + chrono::Duration::from_std(fallback).unwrap_or(chrono::Duration::MAX);
    if context.deadline == 0 {
        return fallback;
    }
    chrono::DateTime::<chrono::Utc>::from(context.deadline())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_without_deadline_gets_the_fallback_and_a_past_one_none() {
        let mut context = lambda_runtime::Context::default();
        let before = Instant::now();
        assert!(deadline(&context, Duration::from_secs(60)) >= before + Duration::from_secs(59));
        context.deadline = 1_000; // 1970
        assert!(deadline(&context, Duration::from_secs(60)) <= Instant::now());
        assert_eq!(lease_until(&context, Duration::from_secs(60)).timestamp_millis(), 1_000);
        context.deadline = 0;
        assert!(lease_until(&context, Duration::from_secs(60)) > chrono::Utc::now() + chrono::Duration::seconds(59));
    }

    /// A stalled service (it accepts the connection and never answers) fails the call with a
    /// retryable time-out after the configured attempt/operation time-outs, instead of hanging
    /// until the Lambda timeout.
    #[tokio::test]
    async fn a_stalled_call_times_out_retryably() {
        use outbox::{AwsError, AwsErrorKind};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket); // held open, never answered
            }
        });
        let env = Env::from_map([("SDK_ATTEMPT_TIMEOUT_MS", "100"), ("SDK_OPERATION_TIMEOUT_MS", "300")].map(|(k, v)| (k.into(), v.into())).into());
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new("id", "secret", None, None, "test"))
            .endpoint_url(format!("http://{address}"))
            .timeout_config(SdkTimeouts::from_env(&env).unwrap().timeout_config())
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let sent = tokio::time::timeout(Duration::from_secs(30), client.get_item().table_name("t").send()).await.expect("the SDK gave up by itself");
        let error = AwsError::from_sdk("GetItem", &sent.unwrap_err());
        assert_eq!(error.kind, AwsErrorKind::Timeout, "{error}");
        assert!(error.is_retryable());
        held.abort();
    }
}
