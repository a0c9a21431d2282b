//! A function's tracing subscriber ([`init`]), and with feature `opentelemetry` its spans
//! exported over OTLP to the AWS Distro for OpenTelemetry (ADOT) collector Lambda layer.
//!
//! Without the feature, [`init`] is `lambda_runtime::tracing::init_default_subscriber`: the log
//! format of `AWS_LAMBDA_LOG_FORMAT` (`JSON` or text) at the level of `AWS_LAMBDA_LOG_LEVEL`
//! (else `RUST_LOG`, else `INFO`), and nothing else is compiled.
//!
//! With feature `opentelemetry`, [`init`] installs the same log layer and beside it a
//! `tracing-opentelemetry` layer whose spans go, in batches, to an OTLP/HTTP (protobuf)
//! exporter: the collector the ADOT Lambda layer runs inside the execution environment, which
//! listens on `localhost:4318` (HTTP) and forwards to X-Ray by default. Span and trace ids come
//! from the X-Ray id generator of `opentelemetry-aws` (a trace id begins with its epoch seconds,
//! as X-Ray requires). [`run`](crate::run) then serves each invocation in the runtime's
//! `OpenTelemetryLayer` span — made the child of the invocation's X-Ray trace header (Lambda's
//! `Lambda-Runtime-Trace-Id`, read with `opentelemetry-aws`'s X-Ray propagator), which the
//! runtime's own layer does not do (aws-lambda-rust-runtime issue 849) — and force-flushes the
//! exporter after every invocation: Lambda freezes the environment between invocations, so spans
//! still buffered would leave late or never. The consumer's event spans continue each event's
//! own trace (`outbox` feature `opentelemetry`: a child of the event's `traceparent`, linked to
//! the invocation's span).
//!
//! What the layer spans export: spans at `INFO` and above (the runtime's `Lambda runtime invoke`
//! span excepted, the invocation span standing for it), and events at `WARN` and above as span
//! events; whatever the log level is.
//!
//! Sources: "Using AWS Distro for OpenTelemetry in Lambda",
//! <https://docs.aws.amazon.com/lambda/latest/dg/lambda-otel.html> and the ADOT Lambda layer's
//! page, <https://aws-otel.github.io/docs/getting-started/lambda>; the OTLP exporter's
//! environment variables, <https://opentelemetry.io/docs/specs/otel/protocol/exporter/>.

use crate::config::{ConfigError, Env};

/// The OTLP endpoint's environment variable (the OpenTelemetry standard's): the collector's base
/// URL, to which `/v1/traces` is added. Default [`DEFAULT_ENDPOINT`].
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// The traces endpoint's environment variable (the standard's): the full URL, used as it is;
/// it takes precedence over [`ENDPOINT_ENV`].
pub const TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The service name's environment variable (the standard's); default the function's name
/// (`AWS_LAMBDA_FUNCTION_NAME`).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// Where the ADOT collector Lambda layer listens for OTLP over HTTP.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// Installs the function's tracing subscriber; call it first in `main`, once.
///
/// Without feature `opentelemetry`: exactly `lambda_runtime::tracing::init_default_subscriber`
/// (and never an error). With it: the same log output plus the OpenTelemetry layer and its OTLP
/// exporter (module docs), configured from `env`: [`TRACES_ENDPOINT_ENV`], else
/// [`ENDPOINT_ENV`] + `/v1/traces`, else [`DEFAULT_ENDPOINT`] + `/v1/traces`; the service name of
/// [`SERVICE_NAME_ENV`], else `AWS_LAMBDA_FUNCTION_NAME`. The exporter's other standard
/// variables (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, …) are read by
/// `opentelemetry-otlp` itself.
///
/// # Errors
/// With feature `opentelemetry`, [`ConfigError::Invalid`] naming the variable when the endpoint
/// is not an `http://` or `https://` URL, or the exporter cannot be built with it. The log
/// subscriber is installed all the same, so the caller can log the error; return it from `main`
/// and the cold start fails with it.
pub fn init(env: &Env) -> Result<(), ConfigError> {
    #[cfg(feature = "opentelemetry")]
    return otel::init(env);
    #[cfg(not(feature = "opentelemetry"))]
    {
        let _ = env;
        lambda_runtime::tracing::init_default_subscriber();
        Ok(())
    }
}

/// The OTLP traces URL `env` configures (see [`init`]).
///
/// # Errors
/// [`ConfigError::Invalid`] when it is not an `http://` or `https://` URL with a host.
pub fn traces_endpoint(env: &Env) -> Result<String, ConfigError> {
    let traces = env.optional(TRACES_ENDPOINT_ENV, "");
    let (name, value, url) = if !traces.trim().is_empty() {
        (TRACES_ENDPOINT_ENV, traces.clone(), traces.trim().to_owned())
    } else {
        let base = env.optional(ENDPOINT_ENV, "");
        let base = if base.trim().is_empty() { DEFAULT_ENDPOINT.to_owned() } else { base };
        let url = format!("{}/v1/traces", base.trim().trim_end_matches('/'));
        (ENDPOINT_ENV, base, url)
    };
    let host =
        url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match host {
        Some(host) if !host.is_empty() && !url.contains(char::is_whitespace) => Ok(url),
        _ => Err(ConfigError::Invalid { name, value, reason: format!("expected an http:// or https:// URL, e.g. {DEFAULT_ENDPOINT}") }),
    }
}

/// Exports the spans still buffered now, waiting for the collector's answer (feature
/// `opentelemetry`; a no-op without it, or before [`init`]). [`run`](crate::run) calls it after
/// every invocation; call it yourself before a process that did not start through `run` ends.
/// A failed export is logged at WARN, never returned: tracing must not fail the function.
pub fn flush() {
    #[cfg(feature = "opentelemetry")]
    otel::flush();
}

#[cfg(feature = "opentelemetry")]
pub(crate) use otel::{installed, traced};

#[cfg(feature = "opentelemetry")]
mod otel {
    use std::sync::OnceLock;
    use std::task::{Context, Poll};

    use lambda_runtime::layers::OpenTelemetryLayer;
    use lambda_runtime::tower::{Layer, Service};
    use lambda_runtime::tracing::subscriber::filter::{filter_fn, EnvFilter, LevelFilter};
    use lambda_runtime::tracing::subscriber::layer::SubscriberExt as _;
    use lambda_runtime::tracing::subscriber::util::SubscriberInitExt as _;
    use lambda_runtime::tracing::subscriber::{fmt, Layer as _};
    use lambda_runtime::{LambdaInvocation, Runtime};
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use opentelemetry_otlp::WithExportConfig as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::Resource;

    use super::{traces_endpoint, ENDPOINT_ENV, SERVICE_NAME_ENV, TRACES_ENDPOINT_ENV};
    use crate::config::{ConfigError, Env};

    /// The tracer provider [`init`] installed (flushed after every invocation).
    static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

    /// The name of `lambda_runtime`'s own per-invocation span (its `TracingLayer`): kept in the
    /// logs (it carries `requestId`), not exported (the invocation span stands for it).
    const RUNTIME_SPAN: &str = "Lambda runtime invoke";

    pub(super) fn init(env: &Env) -> Result<(), ConfigError> {
        let provider = match provider(env) {
            Ok(provider) => provider,
            Err(e) => {
                lambda_runtime::tracing::init_default_subscriber();
                return Err(e);
            }
        };
        let tracer = provider.tracer("outbox-lambda");
        // Spans at INFO and above (the runtime's own excepted), events at WARN and above.
        let exported =
            filter_fn(
                |m| if m.is_span() { *m.level() <= tracing::Level::INFO && m.name() != RUNTIME_SPAN } else { *m.level() <= tracing::Level::WARN },
            );
        let spans = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(exported);
        // The log layer of `init_default_subscriber`, with its filter on it alone.
        let level = env.optional("AWS_LAMBDA_LOG_LEVEL", "");
        let level = if level.is_empty() { env.optional("RUST_LOG", "INFO") } else { level };
        let level = level.parse::<LevelFilter>().unwrap_or(LevelFilter::INFO);
        let filter = EnvFilter::builder().with_default_directive(level.into()).from_env_lossy();
        let logs = fmt::layer().with_target(false).without_time();
        let logs = if env.optional("AWS_LAMBDA_LOG_FORMAT", "").eq_ignore_ascii_case("json") { logs.json().boxed() } else { logs.boxed() };
        if let Err(e) = lambda_runtime::tracing::subscriber::registry().with(logs.with_filter(filter)).with(spans).try_init() {
            // Another subscriber was installed first (a test's, the application's): it is kept.
            tracing::warn!(error = %e, "a tracing subscriber is already installed: it is kept, and its spans are not exported");
        }
        opentelemetry::global::set_tracer_provider(provider.clone());
        let _ = PROVIDER.set(provider);
        Ok(())
    }

    /// The provider: X-Ray ids, the OTLP/HTTP exporter in batches, the service name.
    fn provider(env: &Env) -> Result<SdkTracerProvider, ConfigError> {
        let endpoint = traces_endpoint(env)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(endpoint.clone())
            .build()
            .map_err(|e| {
                let name = if env.optional(TRACES_ENDPOINT_ENV, "").trim().is_empty() { ENDPOINT_ENV } else { TRACES_ENDPOINT_ENV };
                ConfigError::Invalid { name, value: endpoint, reason: e.to_string() }
            })?;
        let service = env.optional(SERVICE_NAME_ENV, &env.optional(outbox::contract::env::AWS_LAMBDA_FUNCTION_NAME, ""));
        let resource = Resource::builder();
        let resource = if service.is_empty() { resource } else { resource.with_service_name(service) };
        Ok(SdkTracerProvider::builder()
            .with_id_generator(opentelemetry_aws::trace::XrayIdGenerator::default())
            .with_resource(resource.build())
            .with_batch_exporter(exporter)
            .build())
    }

    /// Whether [`init`] installed a tracer provider ([`crate::run`] then adds the layers).
    pub(crate) fn installed() -> bool {
        PROVIDER.get().is_some()
    }

    /// Exports the spans still buffered (the runtime's `OpenTelemetryLayer` calls it after
    /// every invocation, before Lambda may freeze the environment).
    pub(crate) fn flush() {
        if let Some(Err(e)) = PROVIDER.get().map(SdkTracerProvider::force_flush) {
            tracing::warn!(error = %e, "the invocation's spans could not be exported");
        }
    }

    /// The service of [`traced`]: the runtime's `OpenTelemetryLayer` (flushing with [`flush`]),
    /// in [`ContinueXRay`].
    pub(crate) type Traced<S> = ContinueXRay<<OpenTelemetryLayer<fn()> as Layer<S>>::Service>;

    /// `runtime` with each invocation in an OpenTelemetry span that continues the invocation's
    /// X-Ray trace header, flushed after each invocation.
    pub(crate) fn traced<S>(runtime: Runtime<S>) -> Runtime<Traced<S>>
    where
        S: Service<LambdaInvocation, Response = (), Error = lambda_runtime::Error>,
    {
        runtime.layer(OpenTelemetryLayer::new(flush as fn())).layer(ContinueXRayLayer)
    }

    /// Makes the span the runtime's `OpenTelemetryLayer` opens for an invocation the child of
    /// the invocation's X-Ray trace header (`Context::xray_trace_id`), as the ADOT layers of
    /// other languages do: the invocation's OpenTelemetry context is current while that span is
    /// made.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct ContinueXRayLayer;

    impl<S> Layer<S> for ContinueXRayLayer {
        type Service = ContinueXRay<S>;

        fn layer(&self, inner: S) -> Self::Service {
            ContinueXRay { inner }
        }
    }

    /// The service of [`ContinueXRayLayer`].
    #[derive(Debug, Clone)]
    pub(crate) struct ContinueXRay<S> {
        inner: S,
    }

    impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for ContinueXRay<S> {
        type Response = S::Response;
        type Error = S::Error;
        type Future = S::Future;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
            let parent = invocation.context.xray_trace_id.as_deref().and_then(opentelemetry_aws::trace::xray_propagator::span_context_from_str);
            let _attached = parent.map(|p| opentelemetry::Context::new().with_remote_span_context(p).attach());
            self.inner.call(invocation)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_map(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn the_endpoint_is_the_standard_variables_else_the_adot_collectors() {
        assert_eq!(traces_endpoint(&env(&[])).unwrap(), "http://localhost:4318/v1/traces");
        assert_eq!(traces_endpoint(&env(&[(ENDPOINT_ENV, "http://127.0.0.1:4318/")])).unwrap(), "http://127.0.0.1:4318/v1/traces");
        let both = env(&[(ENDPOINT_ENV, "http://a:4318"), (TRACES_ENDPOINT_ENV, "https://b/traces")]);
        assert_eq!(traces_endpoint(&both).unwrap(), "https://b/traces");
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_refused_naming_its_variable() {
        for (name, value) in
            [(ENDPOINT_ENV, "localhost:4318"), (ENDPOINT_ENV, "http://"), (TRACES_ENDPOINT_ENV, "grpc://x"), (ENDPOINT_ENV, "http://a b")]
        {
            let error = traces_endpoint(&env(&[(name, value)])).unwrap_err();
            assert!(matches!(&error, ConfigError::Invalid { name: n, .. } if *n == name), "{value}: {error}");
        }
    }
}
