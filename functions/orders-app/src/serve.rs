//! Serving a router on Lambda, with the one check `lambda_http` does not make.
//!
//! `lambda_http` turns the API Gateway event into an `http::Request` before any of our code
//! runs, and a body marked `isBase64Encoded: true` that is not base64 makes it panic
//! (`aws_lambda_events` 1.2 `Body::from_maybe_encoded`: "failed to decode aws base64 encoded
//! body"): the invocation fails and API Gateway answers 500/502 instead of a 400. [`Base64Guard`]
//! sits in front of `lambda_http`'s adapter and answers such a request itself: 400, an
//! `application/problem+json` [`Problem`] naming `body`; the router never runs, nothing is
//! written. Every other request goes through unchanged.
//!
//! The guard decodes with the engine `lambda_http` uses (standard alphabet, padded), so what it
//! lets through is exactly what decodes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use aws_lambda_events::apigw::{ApiGatewayProxyResponse, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue};
use axum::Router;
use base64::Engine as _;
use lambda_http::request::LambdaRequest;
use lambda_http::{Adapter, LambdaEvent, Service};
use serde::Serialize;

use crate::http::{Problem, CORRELATION_HEADER};
use crate::orders::to_json;

/// Serves `router` on Lambda (`lambda_http::run`) behind a [`Base64Guard`] through
/// `outbox_lambda::run`: the EMF recorder of `outbox_lambda::emf_metrics` (namespace
/// `METRICS_NAMESPACE`, default `OutboxProducer`: the library's transaction figures, the failed
/// AWS calls of the clients built from `outbox_lambda::load_sdk_config`), flushed after every
/// request; built with outbox-lambda's feature `opentelemetry` (and `telemetry::init` called),
/// each request in an exported invocation span, flushed after it.
///
/// # Errors
/// The runtime's (it returns only when the Runtime API fails).
pub async fn run(env: &outbox_lambda::Env, router: Router) -> Result<(), lambda_http::Error> {
    let service = Base64Guard::new(Adapter::from(router));
    outbox_lambda::run(env, outbox_lambda::outbox::contract::namespace::PRODUCER, service).await
}

/// The answer of a guarded service: the inner service's, or the guard's own 400.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Guarded<R> {
    /// The inner service answered.
    Handled(R),
    /// The guard refused the request (payload 2.0 answer).
    RefusedV2(ApiGatewayV2httpResponse),
    /// The guard refused the request (payload 1.0 answer).
    RefusedV1(ApiGatewayProxyResponse),
}

/// A `Service<LambdaEvent<LambdaRequest>>` (e.g. `lambda_http::Adapter::from(router)`) that
/// answers a request whose base64 body does not decode with a 400 naming `body`, without calling
/// the inner service.
#[derive(Debug, Clone)]
pub struct Base64Guard<S> {
    inner: S,
}

impl<S> Base64Guard<S> {
    /// Guards `inner`.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }
}

impl<S> Service<LambdaEvent<LambdaRequest>> for Base64Guard<S>
where
    S: Service<LambdaEvent<LambdaRequest>>,
    S::Future: Unpin,
{
    type Response = Guarded<S::Response>;
    type Error = S::Error;
    type Future = GuardFuture<S::Future, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, event: LambdaEvent<LambdaRequest>) -> Self::Future {
        match refusal(&event.payload) {
            Some(refused) => GuardFuture::Refused(Some(Box::new(refused))),
            None => GuardFuture::Inner(self.inner.call(event)),
        }
    }
}

/// The future of [`Base64Guard`].
#[derive(Debug)]
pub enum GuardFuture<F, R> {
    /// The inner service's answer, pending.
    Inner(F),
    /// The guard's own answer (taken when polled).
    Refused(Option<Box<Guarded<R>>>),
}

impl<F, R, E> Future for GuardFuture<F, R>
where
    F: Future<Output = Result<R, E>> + Unpin,
{
    type Output = Result<Guarded<R>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // `GuardFuture` is Unpin: F is, and the boxed answer is never pinned.
        match Pin::into_inner(self) {
            GuardFuture::Inner(future) => Pin::new(future).poll(cx).map(|r| r.map(Guarded::Handled)),
            // Polled again after it completed: stays pending, as the Future contract allows.
            GuardFuture::Refused(answer) => answer.take().map_or(Poll::Pending, |a| Poll::Ready(Ok(*a))),
        }
    }
}

impl<F: Unpin, R> Unpin for GuardFuture<F, R> {}

/// The 400 for `request` when it is marked base64 and its body does not decode; `None` otherwise.
pub fn refusal<R>(request: &LambdaRequest) -> Option<Guarded<R>> {
    let (marked, body, headers, request_id) = match request {
        LambdaRequest::ApiGatewayV2(r) => (r.is_base64_encoded, r.body.as_deref(), &r.headers, r.request_context.request_id.as_deref()),
        LambdaRequest::ApiGatewayV1(r) => (r.is_base64_encoded, r.body.as_deref(), &r.headers, r.request_context.request_id.as_deref()),
        _ => return None,
    };
    let body = body.filter(|_| marked)?;
    let error = base64::engine::general_purpose::STANDARD.decode(body).err()?;
    let correlation_id = headers
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .or(request_id)
        .unwrap_or_default()
        .to_owned();
    let mut problem = Problem::bad_field("body", format!("the body is marked isBase64Encoded but is not base64: {error}"));
    if !correlation_id.is_empty() {
        problem.correlation_id = Some(correlation_id.clone());
    }
    tracing::info!(status = 400, field = "body", detail = %problem.detail, "request rejected");
    let mut answer_headers = HeaderMap::new();
    answer_headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    if let Ok(value) = HeaderValue::from_str(&correlation_id) {
        answer_headers.insert(CORRELATION_HEADER, value);
    }
    let body = Some(Body::Text(to_json(&problem)));
    Some(match request {
        LambdaRequest::ApiGatewayV2(_) => {
            let mut answer = ApiGatewayV2httpResponse::default();
            answer.status_code = 400;
            answer.headers = answer_headers;
            answer.body = body;
            Guarded::RefusedV2(answer)
        }
        _ => {
            let mut answer = ApiGatewayProxyResponse::default();
            answer.status_code = 400;
            // Payload 1.0 answers carry their headers as multiValueHeaders (as lambda_http's do).
            answer.multi_value_headers = answer_headers;
            answer.body = body;
            Guarded::RefusedV1(answer)
        }
    })
}
