//! The order API over HTTP: an axum [`Router`] that `lambda_http` serves on Lambda (API Gateway
//! HTTP API payload 2.0, REST API payload 1.0, function URLs) and that tests call directly.
//!
//! | route | answer |
//! |---|---|
//! | `POST /orders` | 201 [`CreatedOrder`](crate::orders::CreatedOrder) + `Location`; emits `OrderCreated` |
//! | `GET /orders/{id}` | 200 [`OrderView`](crate::orders::OrderView) |
//! | `POST /orders/{id}/cancel` | 200 [`CancelledOrder`](crate::orders::CancelledOrder); emits `OrderCancelled` |
//! | other paths / methods | 404 / 405 (with `Allow`) |
//!
//! Every answer carries `x-correlation-id`: the request's (1–128 visible ASCII characters), else
//! API Gateway's request id, else a new UUIDv7. It is the `correlation_id` of the events written
//! and of the request's span (`orders_api`); the X-Ray trace header of the invocation (the Lambda
//! context's `xray_trace_id`, else `_X_AMZN_TRACE_ID`) goes on the outbox item, and the W3C
//! trace context continued from the request's `traceparent` (else from that X-Ray header) too:
//! the span's `trace_id`, the events' `traceparent` ([`outbox::trace_context`]).
//!
//! Every route needs an authenticated caller ([`crate::auth`]: the JWT authorizer's `sub`),
//! checked first: 401 without one. An order belongs to the subject that created it; another
//! subject's `GET` or cancel answers 404, as for an order that does not exist. `Idempotency-Key`s
//! are per subject.
//!
//! Errors are RFC 9457 `application/problem+json` ([`Problem`]) naming the field at fault
//! (`lines[0].quantity`, `body`, `reason`, or the `Idempotency-Key` / `content-type` header):
//! 400 malformed or invalid body or key, 401 no authenticated caller, 404 no such order (or
//! another subject's) or route, 405 wrong method (`Allow`),
//! 409 the order exists / is not cancellable / a concurrent change won, 413 body over
//! [`MAX_BODY_BYTES`] (plus the attachment maximum for `POST /orders`), 415 not JSON, 422 key reused for another request, 503 + `Retry-After` when
//! DynamoDB conflicts or throttles. A rejected request writes nothing; bad input is never a 500.
//!
//! What `lambda_http` does before the router sees a request, and what the router does about it
//! (source: `lambda_http` 1.3 `request.rs`; the payloads:
//! <https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html>,
//! <https://docs.aws.amazon.com/apigateway/latest/developerguide/set-up-lambda-proxy-integrations.html>):
//! * `isBase64Encoded` bodies are decoded, so [`MAX_BODY_BYTES`] applies to the decoded body (one
//!   that is not base64 would make `lambda_http` panic: [`crate::serve::Base64Guard`], in front of
//!   it, answers 400 naming `body` instead);
//!   `headers: null` is no headers.
//! * The path keeps the stage of a named stage (payload 2.0's `rawPath` holds it; for payload
//!   1.0 `lambda_http` puts `/{stage}` in front of `path`) unless the function's environment has
//!   `AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH`. The router strips `/{stage}` itself (stage from the
//!   request context; `$default` has none), so its routes work under any stage.
//! * One trailing `/` is ignored and the method is matched case-insensitively, as before.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::handler::Handler;
use axum::http::header::{ALLOW, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{from_fn, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::{Extension, Router};
use lambda_http::request::RequestContext;
use lambda_http::tower::Layer;
use lambda_http::RequestExt;
use serde::Serialize;
use tracing::Instrument;

use crate::auth::{caller, Caller, Identity};
use crate::idempotency::{request_hash, IdempotencyKey, IdempotentRequest, StoredResponse, REPLAYED_HEADER};
use crate::orders::{
    is_valid_order_id, location_of, parse_cancel, parse_create, to_json, Answer, OrderError, OrdersApi, MAX_BODY_BYTES, RETRY_AFTER_SECONDS,
};

/// The correlation id header, read from the request and set on every answer.
pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// An RFC 9457 problem document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// A URI reference naming the problem type (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong with this request, in words.
    pub detail: String,
    /// The request field at fault (JSON path such as `lines[0].quantity`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Correlation id of the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

impl Problem {
    /// A problem with `status`, `title` and `detail`.
    pub fn new(status: u16, title: &str, detail: impl Into<String>) -> Self {
        Self { kind: "about:blank".into(), title: title.into(), status, detail: detail.into(), field: None, correlation_id: None }
    }

    /// 400 naming `field`.
    pub fn bad_field(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::new(400, "Invalid request", detail) }
    }
}

/// The order API's router over `api`: the three routes, problem answers for every other path and
/// method, and (around the routing) stage stripping and the correlation id. Serve it with
/// `lambda_http::run(router(api))`; test it with `tower::ServiceExt::oneshot`.
pub fn router(api: OrdersApi) -> Router {
    let routes = Router::new()
        .route("/orders", only(MethodFilter::POST, "POST", create))
        .route("/orders/{id}", only(MethodFilter::GET, "GET", get))
        .route("/orders/{id}/cancel", only(MethodFilter::POST, "POST", cancel))
        .fallback(not_found)
        // The body is in memory already (Lambda hands it over whole); `check_post` applies the limit.
        .layer(DefaultBodyLimit::disable())
        .with_state(Arc::new(api));
    // Outside the routes, so the path it rewrites is the one routed (a `Router::layer` runs
    // after routing).
    Router::new().fallback_service(from_fn(prepare).layer(routes))
}

/// The handlers' state: the API, built once per cold start.
type Api = State<Arc<OrdersApi>>;
/// The `{id}` of the path, or why axum could not decode it (not UTF-8 once percent-decoded).
type Id = Result<Path<String>, PathRejection>;

/// What the middleware learnt about a request, for the handlers.
#[derive(Debug, Clone)]
struct Meta {
    correlation_id: String,
    trace_header: Option<String>,
    /// The JWT authorizer's claims ([`crate::auth`]).
    identity: Option<Identity>,
}

/// Normalises the path and method, picks the correlation id, runs the request in its span and
/// puts the correlation id on the answer.
async fn prepare(mut request: Request, next: Next) -> Response {
    let (stage, request_id) = match request.extensions().request_context_ref() {
        Some(RequestContext::ApiGatewayV2(c)) => (c.stage.clone(), c.request_id.clone()),
        Some(RequestContext::ApiGatewayV1(c)) => (c.stage.clone(), c.request_id.clone()),
        _ => (None, None),
    };
    normalise(&mut request, stage.as_deref());
    let correlation_id = request
        .headers()
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .map(str::to_owned)
        .or(request_id)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let trace_header =
        request.extensions().lambda_context_ref().and_then(|c| c.xray_trace_id.clone()).or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok());
    let identity = Identity::from_context(request.extensions().request_context_ref());
    // The request's place in its caller's trace (`traceparent`, else X-Ray): the events it
    // writes carry it (`outbox::TraceContext::current`).
    let trace = crate::partner::request_trace(request.headers(), trace_header.as_deref());
    let trace_id = trace.as_ref().map(outbox::TraceContext::trace_id).unwrap_or_default();
    let span =
        tracing::info_span!("orders_api", correlation_id = %correlation_id, trace_id, method = %request.method(), path = %request.uri().path());
    request.extensions_mut().insert(Meta { correlation_id: correlation_id.clone(), trace_header, identity });
    let mut response = outbox::TraceContext::scope(trace, next.run(request)).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&correlation_id) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    response
}

/// Upper-cases the method, drops `/{stage}` (a named stage) and one trailing `/` from the path.
fn normalise(request: &mut Request, stage: Option<&str>) {
    if let Ok(method) = Method::from_bytes(request.method().as_str().to_ascii_uppercase().as_bytes()) {
        *request.method_mut() = method;
    }
    let path = request.uri().path();
    let unstaged =
        stage.filter(|s| *s != "$default").and_then(|s| path.strip_prefix('/')?.strip_prefix(s)).filter(|r| r.is_empty() || r.starts_with('/'));
    let trimmed = unstaged.unwrap_or(path);
    let trimmed = if trimmed.len() > 1 { trimmed.strip_suffix('/').unwrap_or(trimmed) } else { trimmed };
    if trimmed != path {
        let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        let mut parts = request.uri().clone().into_parts();
        parts.path_and_query = format!("{}{query}", if trimmed.is_empty() { "/" } else { trimmed }).parse().ok();
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

/// A route that answers `filter` with `handler` and every other method with a 405 naming `allow`.
fn only<H: Handler<T, Arc<OrdersApi>>, T: 'static>(filter: MethodFilter, allow: &'static str, handler: H) -> MethodRouter<Arc<OrdersApi>> {
    on(filter, handler).fallback(move |Extension(meta): Extension<Meta>, uri: Uri| async move {
        let mut response = refuse(Problem::new(405, "Method not allowed", format!("{} accepts {allow} only", uri.path())), &meta);
        // `allow` is one of this module's method names, a valid header value.
        response.headers_mut().insert(ALLOW, HeaderValue::from_static(allow));
        response
    })
}

async fn not_found(Extension(meta): Extension<Meta>, method: Method, uri: Uri) -> Response {
    let shown: String = uri.path().chars().take(200).collect();
    refuse(Problem::new(404, "Not found", format!("no route for {method} {shown}")), &meta)
}

/// The caller of the request ([`crate::auth::caller`]): 401 before anything else is looked at.
fn authenticate(api: &OrdersApi, meta: &Meta) -> Result<Caller, Problem> {
    caller(api.auth(), meta.identity.as_ref())
}

async fn create(State(api): Api, Extension(meta): Extension<Meta>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let outcome = async {
        let caller = authenticate(&api, &meta)?;
        let idempotent = check_post(&uri, &headers, &body, api.body_limit())?.map(|r| r.scoped_to(caller.subject.as_deref()));
        let answer = api.create_order(parse_create(&body)?, &caller, idempotent.as_ref(), &meta.correlation_id, meta.trace_header.clone()).await?;
        Ok(answer.map(|c| StoredResponse { status: 201, body: to_json(&c), location: Some(location_of(&c.order_id)) }))
    };
    respond(outcome.await, &meta)
}

async fn get(State(api): Api, Extension(meta): Extension<Meta>, id: Id) -> Response {
    let outcome = async {
        let caller = authenticate(&api, &meta)?;
        let order = api.get_order(&order_id(id)?, &caller).await?;
        Ok(Answer::Done(StoredResponse { status: 200, body: to_json(&order), location: None }))
    };
    respond(outcome.await, &meta)
}

async fn cancel(State(api): Api, Extension(meta): Extension<Meta>, id: Id, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let outcome = async {
        let caller = authenticate(&api, &meta)?;
        let id = order_id(id)?;
        let idempotent = check_post(&uri, &headers, &body, MAX_BODY_BYTES)?.map(|r| r.scoped_to(caller.subject.as_deref()));
        let answer =
            api.cancel_order(&id, parse_cancel(&body)?, &caller, idempotent.as_ref(), &meta.correlation_id, meta.trace_header.clone()).await?;
        Ok(answer.map(|c| StoredResponse { status: 200, body: to_json(&c), location: None }))
    };
    respond(outcome.await, &meta)
}

/// The order id of the path: 404 when it cannot be one (never looked up).
fn order_id(id: Id) -> Result<String, Problem> {
    match id {
        Ok(Path(id)) if is_valid_order_id(&id) => Ok(id),
        other => {
            let shown: String = other.map(|Path(id)| id).unwrap_or_default().chars().take(80).collect();
            Err(Problem::new(404, "Order not found", format!("there is no order {shown:?}: order ids are 1-64 of A-Z a-z 0-9 - _")))
        }
    }
}

/// The checks of a POST before its body is parsed: the `Idempotency-Key` header, the content type
/// (JSON, any `+json` type, or absent) of a non-empty body, and the body's size (at most `limit`
/// bytes: [`MAX_BODY_BYTES`], or [`OrdersApi::body_limit`] for `POST /orders`).
///
/// # Errors
/// 400 for a bad key, 415 for a body that is not JSON, 413 for a body over `limit`.
pub fn check_post(uri: &Uri, headers: &HeaderMap, body: &[u8], limit: usize) -> Result<Option<IdempotentRequest>, Problem> {
    let key = IdempotencyKey::from_headers(headers)?;
    if let Some(value) = headers.get(CONTENT_TYPE).filter(|_| !body.is_empty()) {
        let content_type = String::from_utf8_lossy(value.as_bytes());
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if media != "application/json" && !media.ends_with("+json") {
            let detail = format!("content-type {content_type:?} is not supported; send application/json");
            return Err(Problem { field: Some("content-type".into()), ..Problem::new(415, "Unsupported media type", detail) });
        }
    }
    if body.len() > limit {
        let detail = format!("the body is {} bytes; the limit is {limit}", body.len());
        return Err(Problem { field: Some("body".into()), ..Problem::new(413, "Body too large", detail) });
    }
    Ok(key.map(|key| IdempotentRequest { key, request_hash: request_hash("POST", uri.path(), body) }))
}

impl From<OrderError> for Problem {
    /// The refusal's problem; a server-side failure (5xx) is logged with its cause here.
    fn from(e: OrderError) -> Self {
        let problem = e.to_problem();
        if problem.status >= 500 {
            tracing::error!(status = problem.status, error = %e, "request failed");
        }
        problem
    }
}

/// The answer: JSON text (a replay byte for byte, with `idempotent-replayed: true`) or a problem.
fn respond(outcome: Result<Answer<StoredResponse>, Problem>, meta: &Meta) -> Response {
    let (answer, replayed) = match outcome {
        Ok(Answer::Done(answer)) => (answer, false),
        Ok(Answer::Replayed(stored)) => (stored, true),
        Err(problem) => return refuse(problem, meta),
    };
    if replayed {
        tracing::info!(status = answer.status, "idempotent replay");
    }
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let mut response = (status, [(CONTENT_TYPE, "application/json")], answer.body).into_response();
    if let Some(location) = answer.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        response.headers_mut().insert(LOCATION, location);
    }
    if replayed {
        response.headers_mut().insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    response
}

/// The problem as an `application/problem+json` answer (with `Retry-After` when it is a 503).
fn refuse(problem: Problem, meta: &Meta) -> Response {
    if problem.status < 500 {
        tracing::info!(status = problem.status, field = problem.field.as_deref().unwrap_or(""), detail = %problem.detail, "request rejected");
    }
    problem_response(problem, &meta.correlation_id)
}

/// `problem` as an `application/problem+json` answer carrying `correlation_id` (when not empty),
/// with `Retry-After` when it is a 503. Shared by the order API and the partner webhook endpoint.
pub(crate) fn problem_response(mut problem: Problem, correlation_id: &str) -> Response {
    if !correlation_id.is_empty() {
        problem.correlation_id = Some(correlation_id.to_owned());
    }
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, [(CONTENT_TYPE, "application/problem+json")], to_json(&problem)).into_response();
    if problem.status == 503 {
        // RETRY_AFTER_SECONDS is a number, a valid header value.
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
    }
    response
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
    use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsOutput};
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_sdk_dynamodb::types::{AttributeValue, CancellationReason, TransactWriteItem};
    use aws_smithy_mocks::{mock, mock_client, MockResponse, Rule, RuleMode};
    use base64::Engine;
    use lambda_http::request::LambdaRequest;
    use lambda_http::tower::ServiceExt;
    use lambda_http::{Context, LambdaEvent, Service};
    use serde_json::{json, Value};

    use super::*;
    use crate::idempotency::{IdempotencyRecord, DEFAULT_TTL, KEY_PREFIX};
    use crate::orders::{order_key, OrderCancelled, OrderLine, OrderView, DEFAULT_MAX_ATTACHMENT_BYTES, MAX_LINES, STATUS_CANCELLED, STATUS_CREATED};
    use outbox::envelope::OutboxItem;
    use outbox::OutboxWriter;
    use outbox_lambda::DEFAULT_RETENTION;

    const GOOD: &str = r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"A","quantity":2,"unit_price":"12.50"}]}"#;

    type Item = HashMap<String, AttributeValue>;

    /// A mocked orders table: `GetItem` answers from `items`; every `TransactWriteItems` is
    /// recorded and answered by `reasons` (None = commit, Some(codes) = cancelled with those
    /// reasons, the item of a `ConditionalCheckFailed` reason taken from `old`).
    struct Table {
        rules: Vec<Rule>,
        sent: Arc<Mutex<Vec<Vec<TransactWriteItem>>>>,
        gets: Arc<Mutex<usize>>,
    }

    impl Table {
        fn new(items: Vec<Item>, reasons: Option<Vec<&'static str>>, old: Option<Item>) -> Self {
            let gets = Arc::new(Mutex::new(0));
            let counter = gets.clone();
            let get = mock!(aws_sdk_dynamodb::Client::get_item).then_compute_response(move |input| {
                *counter.lock().unwrap() += 1;
                let pk = input.key().and_then(|k| k.get("pk")).cloned();
                let found = items.iter().find(|i| i.get("pk") == pk.as_ref()).cloned();
                MockResponse::<GetItemOutput, GetItemError>::Output(GetItemOutput::builder().set_item(found).build())
            });
            let sent: Arc<Mutex<Vec<Vec<TransactWriteItem>>>> = Default::default();
            let log = sent.clone();
            let transact = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_compute_response(move |input| {
                log.lock().unwrap().push(input.transact_items().to_vec());
                match &reasons {
                    None => MockResponse::Output(TransactWriteItemsOutput::builder().build()),
                    Some(codes) => {
                        let reasons = codes
                            .iter()
                            .map(|code| {
                                let item = (*code == "ConditionalCheckFailed").then(|| old.clone()).flatten();
                                CancellationReason::builder().code(*code).set_item(item).build()
                            })
                            .collect();
                        MockResponse::Error(TransactWriteItemsError::TransactionCanceledException(
                            TransactionCanceledException::builder().message("cancelled").set_cancellation_reasons(Some(reasons)).build(),
                        ))
                    }
                }
            });
            Self { rules: vec![get, transact], sent, gets }
        }

        fn router(&self) -> Router {
            router(self.api())
        }

        fn api(&self) -> OrdersApi {
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, self.rules.iter(), |c| {
                c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            });
            OrdersApi::new(client, "orders", OutboxWriter::new("outbox", DEFAULT_RETENTION), "example.orders", DEFAULT_TTL)
        }

        fn sent(&self) -> Vec<Vec<TransactWriteItem>> {
            self.sent.lock().unwrap().clone()
        }

        fn gets(&self) -> usize {
            *self.gets.lock().unwrap()
        }
    }

    /// An answer of the router: status, headers, body text.
    #[derive(Debug)]
    struct Answer {
        status: u16,
        headers: HeaderMap,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers.get(name).and_then(|v| v.to_str().ok())
        }

        fn json(&self) -> Value {
            serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
        }

        fn field(&self) -> Option<String> {
            self.json()["field"].as_str().map(str::to_owned)
        }
    }

    /// The subject of the test requests (the owner of `order_item`s).
    const ALICE: &str = "alice";

    /// A request context as the JWT authorizer leaves it: the claims of a token of `sub`.
    fn authorized(sub: &str) -> lambda_http::request::RequestContext {
        let context = serde_json::from_value(
            json!({"http": {"method": "GET"}, "authorizer": {"jwt": {"claims": {"sub": sub, "iss": "https://issuer.example"}, "scopes": null}}}),
        );
        lambda_http::request::RequestContext::ApiGatewayV2(context.unwrap())
    }

    /// Sends `method path` as [`ALICE`] with a JSON `body`, `key` as `Idempotency-Key` and `headers` to `router`.
    async fn send(router: &Router, method: &str, path: &str, body: Option<&str>, key: Option<&str>, headers: &[(&str, &str)]) -> Answer {
        send_as(router, Some(ALICE), method, path, body, key, headers).await
    }

    /// [`send`] as `sub` (`None`: no authorizer claims at all).
    async fn send_as(
        router: &Router,
        sub: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&str>,
        key: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut request = axum::http::Request::builder().method(method).uri(path);
        if let Some(sub) = sub {
            request = request.extension(authorized(sub));
        }
        if !headers.iter().any(|(name, _)| *name == CONTENT_TYPE) {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(axum::body::Body::from(body.unwrap_or("").to_owned())).unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        Answer { status: parts.status.as_u16(), headers: parts.headers, body: String::from_utf8(bytes.to_vec()).unwrap() }
    }

    /// Invokes `router` with a Lambda `payload` as `lambda_http::run` does; returns the Lambda
    /// response as JSON.
    async fn invoke(router: &Router, payload: &Value, context: Context) -> Value {
        let event: LambdaRequest = serde_json::from_value(payload.clone()).unwrap();
        let response =
            crate::serve::Base64Guard::new(lambda_http::Adapter::from(router.clone())).call(LambdaEvent::new(event, context)).await.unwrap();
        serde_json::to_value(response).unwrap()
    }

    fn sample(name: &str) -> Value {
        let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
    }

    /// A payload 2.0 event of `method raw_path` on `stage`.
    fn v2(method: &str, raw_path: &str, stage: &str, body: Option<&str>) -> Value {
        json!({"version": "2.0", "rawPath": raw_path, "headers": {"content-type": "application/json"}, "body": body,
               "requestContext": {"stage": stage, "requestId": "req-2", "http": {"method": method, "path": raw_path},
                                  "authorizer": {"jwt": {"claims": {"sub": ALICE}, "scopes": null}}}, "isBase64Encoded": false})
    }

    /// A payload 1.0 (REST API) event of `method path` on `stage`.
    fn v1(method: &str, path: &str, stage: &str, body: Option<&str>) -> Value {
        json!({"resource": path, "path": path, "httpMethod": method, "headers": {"content-type": "application/json"},
               "multiValueHeaders": {"content-type": ["application/json"]}, "body": body, "isBase64Encoded": false,
               "requestContext": {"stage": stage, "requestId": "req-1", "httpMethod": method, "path": format!("/{stage}{path}"),
                                  "authorizer": {"claims": {"sub": ALICE}}}})
    }

    fn order_item(id: &str, status: &str, version: u64) -> Item {
        let view = OrderView {
            order_id: id.into(),
            customer_id: "c-1".into(),
            currency: "EUR".into(),
            lines: vec![OrderLine { sku: "A".into(), quantity: 2, unit_price: "12.50".into() }],
            status: status.into(),
            version,
            created_at: "2026-11-29T08:00:00.000Z".into(),
            attachment_bytes: None,
            owner: None,
        };
        let mut item: Item = serde_dynamo::to_item(view).unwrap();
        item.insert("pk".into(), AttributeValue::S(order_key(id)));
        // `owner` is never answered (skip_serializing): written as the API writes it.
        item.insert("owner".into(), AttributeValue::S(ALICE.into()));
        item
    }

    /// The stored record of [`ALICE`]'s key `key` (keys are per subject).
    fn key_record(key: &str, hash: &str, status: u16, body: &str) -> Item {
        IdempotencyRecord {
            key: format!("{}:{ALICE}#{key}", ALICE.len()),
            request_hash: hash.into(),
            response: StoredResponse { status, body: body.into(), location: None },
            created_at: "2026-11-29T08:00:00.000Z".into(),
            expires_at: chrono::Utc::now().timestamp() + 3600,
        }
        .to_item()
    }

    fn outbox_item(write: &TransactWriteItem) -> OutboxItem {
        OutboxItem::from_item(write.put().unwrap().item().clone().into()).unwrap()
    }

    #[tokio::test]
    async fn unknown_routes_and_methods_are_problems_without_any_call() {
        let table = Table::new(vec![], None, None);
        let router = table.router();
        let r = send(&router, "GET", "/customers", None, None, &[]).await;
        assert_eq!((r.status, r.header("content-type")), (404, Some("application/problem+json")));
        assert!(r.header(CORRELATION_HEADER).is_some_and(|c| Some(c) == r.json()["correlation_id"].as_str()), "{r:?}");
        for (method, path, allow) in [("DELETE", "/orders/o-1", "GET"), ("PUT", "/orders", "POST"), ("GET", "/orders/o-1/cancel", "POST")] {
            let r = send(&router, method, path, None, None, &[]).await;
            assert_eq!(
                (r.status, r.header("allow"), r.header("content-type")),
                (405, Some(allow), Some("application/problem+json")),
                "{method} {path}"
            );
        }
        for path in ["/orders/not%20an%20id", "/orders/%FF", "/orders/a.b/cancel", "/orders//cancel", "/", "/orders/o-1/lines"] {
            let method = if path.ends_with("cancel") { "POST" } else { "GET" };
            assert_eq!(send(&router, method, path, None, None, &[]).await.status, 404, "{path}");
        }
        let r = send(&router, "POST", "/orders", Some(GOOD), Some(""), &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (400, Some("Idempotency-Key")));
        assert!(table.sent().is_empty());
        assert_eq!(table.gets(), 0);
    }

    #[tokio::test]
    async fn methods_ignore_case_and_paths_one_trailing_slash() {
        let table = Table::new(vec![], None, None);
        let r = send(&table.router(), "post", "/orders/", Some(GOOD), None, &[]).await;
        assert_eq!(r.status, 201, "{r:?}");
        assert_eq!(r.header("location"), Some(format!("/orders/{}", r.json()["order_id"].as_str().unwrap()).as_str()));
    }

    /// An attachment rides in the `OrderCreated` event and only its size in the order item; over
    /// the configured maximum it is a 400 naming `attachment`; one too large for the event
    /// without a claim check is a 413; neither writes anything.
    #[tokio::test]
    async fn attachments_travel_in_the_event_and_are_bounded() {
        let with = |attachment: &str| GOOD.replace(r#""lines""#, &format!(r#""attachment":"{attachment}","lines""#));
        let table = Table::new(vec![], None, None);
        let small = "a purchase order, 38 bytes long........";
        let r = send(&table.router(), "POST", "/orders", Some(&with(small)), None, &[]).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let sent = table.sent();
        let put = |i: usize| sent[0][i].put().expect("a put").item().clone();
        assert_eq!(put(0).get("attachment_bytes"), Some(&AttributeValue::N(small.len().to_string())), "the order item keeps the size only");
        assert!(!put(0).contains_key("attachment"));
        let payload: Value = serde_json::from_str(put(1)["payload"].as_s().unwrap()).unwrap();
        assert_eq!(payload["attachment"], small, "the event carries the attachment");

        let table = Table::new(vec![], None, None);
        let router = router(table.api().with_max_attachment_bytes(1024));
        let r = send(&router, "POST", "/orders", Some(&with(&"x".repeat(1025))), None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (400, Some("attachment")), "{}", r.body);
        assert!(r.body.contains("is 1025 bytes; the limit is 1024"), "{}", r.body);
        assert_eq!(send(&router, "POST", "/orders", Some(&with(&"x".repeat(1024))), None, &[]).await.status, 201);
        // 500 KB fits the attachment maximum but not an outbox item (400 KB), and there is no claim check.
        let r = send(&table.router(), "POST", "/orders", Some(&with(&"x".repeat(500_000))), None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (413, Some("body")), "{}", r.body);
        assert_eq!(table.sent().len(), 1, "only the 1024-byte order was written");
    }

    #[tokio::test]
    async fn bad_transport_is_415_413_or_400_and_writes_nothing() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let router = table.router();
        let text = [(CONTENT_TYPE.as_str(), "text/plain")];
        let r = send(&router, "POST", "/orders", Some(GOOD), None, &text).await;
        assert_eq!((r.status, r.field().as_deref()), (415, Some("content-type")));
        let form = [(CONTENT_TYPE.as_str(), "application/x-www-form-urlencoded")];
        assert_eq!(send(&router, "POST", "/orders", Some(GOOD), None, &form).await.status, 415);
        assert_eq!(send(&router, "POST", "/orders/o-1/cancel", Some("please"), None, &text).await.status, 415);
        let big = format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(MAX_BODY_BYTES + DEFAULT_MAX_ATTACHMENT_BYTES));
        let r = send(&router, "POST", "/orders", Some(&big), None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (413, Some("body")));
        let r = send(&router, "POST", "/orders", None, None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (400, Some("body")));
        let r = send(&router, "POST", "/orders", Some(&GOOD.replace(r#""quantity":2"#, r#""quantity":0"#)), None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (400, Some("lines[0].quantity")));
        let r = send(&router, "POST", "/orders/o-1/cancel", Some(r#"{"reason":7}"#), None, &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (400, Some("reason")));
        let line = r#"{"sku":"A","quantity":1,"unit_price":"1"}"#;
        let many = format!(r#"{{"customer_id":"c","currency":"EUR","lines":[{}]}}"#, vec![line; MAX_LINES + 1].join(","));
        assert_eq!(send(&router, "POST", "/orders", Some(&many), None, &[]).await.field().as_deref(), Some("lines"));
        assert!(table.sent().is_empty());
        for content_type in ["application/json; charset=utf-8", "application/vnd.orders+json"] {
            let r = send(&router, "POST", "/orders", Some(GOOD), None, &[(CONTENT_TYPE.as_str(), content_type)]).await;
            assert_eq!(r.status, 201, "{content_type}: {r:?}");
        }
    }

    #[tokio::test]
    async fn a_create_with_a_key_puts_the_key_record_first_in_the_transaction() {
        let table = Table::new(vec![], None, None);
        let r = send(&table.router(), "POST", "/orders", Some(GOOD), Some("k-1"), &[]).await;
        assert_eq!(r.status, 201, "{r:?}");
        let sent = table.sent();
        assert_eq!(sent.len(), 1);
        let items = &sent[0];
        assert_eq!(items.len(), 3);
        let key_put = items[0].put().unwrap();
        assert_eq!(key_put.item()["pk"], AttributeValue::S(format!("{KEY_PREFIX}5:alice#k-1")));
        assert_eq!(key_put.item()["status_code"], AttributeValue::N("201".into()));
        assert_eq!(key_put.item()["response_body"], AttributeValue::S(r.body.clone()), "the stored body is the answer's body");
        assert_eq!(key_put.item()["response_location"], AttributeValue::S(r.header("location").unwrap().into()));
        assert_eq!(key_put.item()["request_hash"], AttributeValue::S(request_hash("POST", "/orders", GOOD.as_bytes())));
        assert_eq!(items[1].put().unwrap().condition_expression(), Some("attribute_not_exists(pk)"));
        assert_eq!(items[2].put().unwrap().table_name(), "outbox");
    }

    #[tokio::test]
    async fn a_key_taken_in_a_race_replays_the_record_returned_with_the_cancellation() {
        let hash = request_hash("POST", "/orders", GOOD.as_bytes());
        let stored = r#"{"order_id":"o-first","status":"CREATED","version":1,"event_id":"e-1"}"#;
        let table = Table::new(vec![], Some(vec!["ConditionalCheckFailed", "None", "None"]), Some(key_record("k-1", &hash, 201, stored)));
        let r = send(&table.router(), "POST", "/orders", Some(GOOD), Some("k-1"), &[]).await;
        assert_eq!((r.status, r.body.as_str(), r.header(REPLAYED_HEADER)), (201, stored, Some("true")));
        // One lookup before the write (absent then), none after: ALL_OLD carried the record.
        assert_eq!(table.gets(), 1);
    }

    #[tokio::test]
    async fn a_key_taken_for_another_body_is_a_422() {
        let table =
            Table::new(vec![], Some(vec!["ConditionalCheckFailed", "ConditionalCheckFailed", "None"]), Some(key_record("k-1", "other", 201, "{}")));
        let r = send(&table.router(), "POST", "/orders", Some(GOOD), Some("k-1"), &[]).await;
        assert_eq!((r.status, r.field().as_deref()), (422, Some("Idempotency-Key")));
    }

    #[tokio::test]
    async fn a_known_key_replays_before_any_write_or_state_check() {
        let path = "/orders/o-1/cancel";
        let stored = r#"{"order_id":"o-1","status":"CANCELLED","version":2,"event_id":"e-2"}"#;
        let items = vec![order_item("o-1", STATUS_CANCELLED, 2), key_record("k-2", &request_hash("POST", path, b""), 200, stored)];
        let table = Table::new(items, None, None);
        let r = send(&table.router(), "POST", path, None, Some("k-2"), &[]).await;
        assert_eq!((r.status, r.body.as_str(), r.header(REPLAYED_HEADER)), (200, stored, Some("true")));
        let r = send(&table.router(), "POST", path, Some(r#"{"reason":"x"}"#), Some("k-2"), &[]).await;
        assert_eq!(r.status, 422);
        assert!(table.sent().is_empty(), "a replay or a 422 writes nothing");
    }

    #[tokio::test]
    async fn a_cancel_updates_on_the_read_version_and_emits_the_next_sequence() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let r = send(&table.router(), "POST", "/orders/o-1/cancel", Some(r#"{"reason":"late"}"#), None, &[("x-correlation-id", "c-9")]).await;
        assert_eq!((r.status, r.header(CORRELATION_HEADER)), (200, Some("c-9")), "{r:?}");
        let answer = r.json();
        assert_eq!((answer["status"].as_str(), answer["version"].as_u64()), (Some("CANCELLED"), Some(2)));
        let sent = table.sent();
        let items = &sent[0];
        assert_eq!(items.len(), 2);
        let update = items[0].update().unwrap();
        assert_eq!(update.condition_expression(), Some("#version = :expected AND #status = :created"));
        let values = update.expression_attribute_values().unwrap();
        assert_eq!(values[":expected"], AttributeValue::N("1".into()));
        assert_eq!(values[":next"], AttributeValue::N("2".into()));
        assert_eq!(values[":reason"], AttributeValue::S("late".into()));
        let outbox = outbox_item(&items[1]);
        assert_eq!((outbox.event_type.as_str(), outbox.sequence, outbox.pk.as_str()), ("OrderCancelled", 2, "Order#o-1"));
        // Ordered consumers of OrderCreated + OrderCancelled wait for the creation only.
        assert_eq!(outbox.previous, [("OrderCreated".to_owned(), 1)].into());
        assert_eq!((outbox.event_id.as_str(), outbox.correlation_id.as_str()), (answer["event_id"].as_str().unwrap(), "c-9"));
        let payload: OrderCancelled = serde_json::from_str(&outbox.payload).unwrap();
        assert_eq!((payload.reason.as_deref(), payload.lines[0].quantity), (Some("late"), 2));
    }

    #[tokio::test]
    async fn cancel_refusals_are_404_and_409_without_a_write() {
        let table = Table::new(vec![order_item("o-2", STATUS_CANCELLED, 2)], None, None);
        assert_eq!(send(&table.router(), "POST", "/orders/o-1/cancel", None, None, &[]).await.status, 404);
        let r = send(&table.router(), "POST", "/orders/o-2/cancel", None, None, &[]).await;
        assert_eq!(r.status, 409);
        assert!(r.json()["detail"].as_str().unwrap().contains("CANCELLED"));
        assert!(table.sent().is_empty());
    }

    #[tokio::test]
    async fn a_lost_race_is_a_409_and_a_conflict_a_503_with_retry_after() {
        let cancel = |reasons: Vec<&'static str>| Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], Some(reasons), None);
        let table = cancel(vec!["ConditionalCheckFailed", "None"]);
        let r = send(&table.router(), "POST", "/orders/o-1/cancel", None, None, &[]).await;
        assert_eq!((r.status, r.json()["title"].as_str()), (409, Some("Concurrent change")));
        let table = cancel(vec!["None", "ConditionalCheckFailed"]);
        assert_eq!(send(&table.router(), "POST", "/orders/o-1/cancel", None, None, &[]).await.status, 409, "sequence 2 taken by another writer");
        let table = cancel(vec!["TransactionConflict", "None"]);
        let r = send(&table.router(), "POST", "/orders/o-1/cancel", None, None, &[]).await;
        assert_eq!((r.status, r.header("retry-after")), (503, Some(RETRY_AFTER_SECONDS)));
        let table = Table::new(vec![], Some(vec!["None", "ThrottlingError", "None"]), None);
        let r = send(&table.router(), "POST", "/orders", Some(GOOD), Some("k"), &[]).await;
        assert_eq!((r.status, r.header("retry-after")), (503, Some(RETRY_AFTER_SECONDS)));
    }

    /// A router whose `TransactWriteItems` is answered HTTP `status` with error `code` (retries off).
    fn failing_router(status: u16, code: &'static str, message: &'static str) -> Router {
        let body = format!(r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"{message}"}}"#);
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| GetItemOutput::builder().build());
        let transact = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_http_response(move || {
            aws_sdk_dynamodb::config::http::HttpResponse::new(status.try_into().unwrap(), aws_smithy_types::body::SdkBody::from(body.clone()))
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&get, &transact], |c| {
            c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        });
        router(OrdersApi::new(client, "orders", OutboxWriter::new("outbox", DEFAULT_RETENTION), "example.orders", DEFAULT_TTL))
    }

    #[tokio::test]
    async fn service_unavailable_and_throttling_are_503_with_retry_after_and_access_denied_a_500() {
        for (status, code) in [(503, "ServiceUnavailable"), (400, "ThrottlingException"), (500, "InternalServerError")] {
            let r = send(&failing_router(status, code, "slow down"), "POST", "/orders", Some(GOOD), Some("k"), &[]).await;
            assert_eq!(
                (r.status, r.header("retry-after"), r.header("content-type")),
                (503, Some(RETRY_AFTER_SECONDS), Some("application/problem+json")),
                "{code}"
            );
            let r = send(&failing_router(status, code, "slow down"), "POST", "/orders", Some(GOOD), None, &[]).await;
            assert_eq!(r.status, 503, "{code} without an Idempotency-Key");
        }
        let r = send(&failing_router(400, "AccessDeniedException", "not authorized"), "POST", "/orders", Some(GOOD), None, &[]).await;
        assert_eq!((r.status, r.header("retry-after")), (500, None));
    }

    #[tokio::test]
    async fn a_create_whose_commit_answer_is_lost_is_a_201_not_a_409() {
        // DynamoDB losing the answer of the first TransactWriteItems (the order and its event: 2 items).
        let fake = outbox::testing::LostAnswer::new(2);
        let api = OrdersApi::new(fake.client(), "orders", OutboxWriter::new("outbox", DEFAULT_RETENTION), "example.orders", DEFAULT_TTL);
        // Without an Idempotency-Key: only the transaction's ClientRequestToken makes the SDK's retry safe.
        let r = send(&router(api), "POST", "/orders", Some(GOOD), None, &[]).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let tokens = fake.tokens();
        assert_eq!(tokens.len(), 2);
        assert!(tokens[0].is_some() && tokens[0] == tokens[1], "{tokens:?}");
    }

    #[tokio::test]
    async fn get_answers_the_stored_order() {
        let table = Table::new(vec![order_item("o-1", STATUS_CANCELLED, 2)], None, None);
        let r = send(&table.router(), "GET", "/orders/o-1", None, None, &[]).await;
        assert_eq!(r.status, 200);
        let view: OrderView = serde_json::from_str(&r.body).unwrap();
        assert_eq!((view.status.as_str(), view.version, view.customer_id.as_str()), ("CANCELLED", 2, "c-1"));
        let mut keys: Vec<String> = r.json().as_object().unwrap().keys().cloned().collect();
        keys.sort_unstable();
        assert_eq!(keys, ["created_at", "currency", "customer_id", "lines", "order_id", "status", "version"]);
        assert_eq!(send(&table.router(), "GET", "/orders/o-404", None, None, &[]).await.status, 404);
    }

    #[tokio::test]
    async fn payload_1_0_and_2_0_answer_alike_with_the_context_trace_header() {
        let table = Table::new(vec![], None, None);
        let mut context = Context::default();
        context.xray_trace_id = Some("Root=1-6b0bdb80-e1a9c3d4e5f60718291c0a93;Sampled=1".into());
        let v2 = invoke(&table.router(), &v2("POST", "/orders", "$default", Some(GOOD)), context.clone()).await;
        let v1 = invoke(&table.router(), &v1("POST", "/orders", "prod", Some(GOOD)), context).await;
        assert_eq!((v2["statusCode"].as_u64(), v1["statusCode"].as_u64()), (Some(201), Some(201)), "{v2}\n{v1}");
        // 2.0 answers with `headers`; 1.0 with `multiValueHeaders` (lambda_http leaves `headers` empty).
        assert!(v2["headers"]["location"].as_str().is_some_and(|l| l.starts_with("/orders/")), "{v2}");
        assert!(v1["multiValueHeaders"]["location"][0].as_str().is_some_and(|l| l.starts_with("/orders/")), "{v1}");
        assert_eq!(
            (v2["headers"]["x-correlation-id"].as_str(), v1["multiValueHeaders"]["x-correlation-id"][0].as_str()),
            (Some("req-2"), Some("req-1"))
        );
        for (answer, write) in [(&v2, &table.sent()[0]), (&v1, &table.sent()[1])] {
            let event = outbox_item(&write[1]);
            let created: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
            assert_eq!(event.event_id, created["event_id"].as_str().unwrap());
            assert_eq!(event.trace_header.as_deref(), Some("Root=1-6b0bdb80-e1a9c3d4e5f60718291c0a93;Sampled=1"));
        }
    }

    #[tokio::test]
    async fn routes_work_under_a_named_stage_in_both_payload_formats() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let router = table.router();
        let status = |answer: Value| answer["statusCode"].as_u64().unwrap_or_default();
        assert_eq!(status(invoke(&router, &v2("GET", "/prod/orders/o-1", "prod", None), Context::default()).await), 200);
        assert_eq!(status(invoke(&router, &v2("GET", "/orders/o-1", "$default", None), Context::default()).await), 200);
        assert_eq!(status(invoke(&router, &v1("GET", "/orders/o-1", "prod", None), Context::default()).await), 200);
        assert_eq!(status(invoke(&router, &v2("POST", "/production/orders", "prod", Some(GOOD)), Context::default()).await), 404);
        let cancelled = invoke(&router, &v2("POST", "/prod/orders/o-1/cancel", "prod", None), Context::default()).await;
        assert_eq!(status(cancelled), 200);
        assert_eq!(table.sent().len(), 1);
    }

    #[tokio::test]
    async fn base64_bodies_are_decoded_before_the_checks_and_null_headers_are_none() {
        let table = Table::new(vec![], None, None);
        let router = table.router();
        let encoded = |body: &str| {
            let mut event = v2("POST", "/orders", "$default", Some(&base64::engine::general_purpose::STANDARD.encode(body)));
            event["isBase64Encoded"] = true.into();
            event
        };
        let answer = invoke(&router, &encoded(GOOD), Context::default()).await;
        assert_eq!(answer["statusCode"], 201, "{answer}");
        let answer = invoke(&router, &encoded(&GOOD.replace(r#""quantity":2"#, r#""quantity":0"#)), Context::default()).await;
        let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
        assert_eq!((answer["statusCode"].as_u64(), problem["field"].as_str()), (Some(400), Some("lines[0].quantity")));
        // Over the limit once decoded, though its base64 text would be under twice the limit.
        let big = format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(MAX_BODY_BYTES + DEFAULT_MAX_ATTACHMENT_BYTES));
        assert_eq!(invoke(&router, &encoded(&big), Context::default()).await["statusCode"], 413);
        let no_headers = json!({"rawPath": "/orders", "headers": null, "body": null,
                                "requestContext": {"http": {"method": "POST"}, "authorizer": {"jwt": {"claims": {"sub": ALICE}}}}});
        let answer = invoke(&router, &no_headers, Context::default()).await;
        let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
        assert_eq!((answer["statusCode"].as_u64(), problem["field"].as_str()), (Some(400), Some("body")), "{answer}");
        assert_eq!(table.sent().len(), 1);
    }

    #[tokio::test]
    async fn a_body_marked_base64_that_is_not_is_a_400_naming_body_in_both_payload_formats() {
        let table = Table::new(vec![], None, None);
        let router = table.router();
        for bad in ["not base64!", "QUJD=", "%%%%", "QQ"] {
            let mut v2 = v2("POST", "/orders", "$default", Some(bad));
            v2["isBase64Encoded"] = true.into();
            v2["headers"]["x-correlation-id"] = "c-64".into();
            let answer = invoke(&router, &v2, Context::default()).await;
            let problem: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
            assert_eq!((answer["statusCode"].as_u64(), problem["field"].as_str()), (Some(400), Some("body")), "{bad}: {answer}");
            assert_eq!((answer["headers"]["x-correlation-id"].as_str(), problem["correlation_id"].as_str()), (Some("c-64"), Some("c-64")));
            let mut v1 = v1("POST", "/orders", "prod", Some(bad));
            v1["isBase64Encoded"] = true.into();
            let answer = invoke(&router, &v1, Context::default()).await;
            assert_eq!(answer["statusCode"].as_u64(), Some(400), "{bad}: {answer}");
            assert_eq!(answer["multiValueHeaders"]["content-type"][0], "application/problem+json");
        }
        assert!(table.sent().is_empty() && table.gets() == 0, "nothing read or written");
    }

    #[tokio::test]
    async fn without_claims_every_route_is_a_401_before_any_read_or_write() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let router = table.router();
        for (method, path, body) in [("POST", "/orders", Some(GOOD)), ("GET", "/orders/o-1", None), ("POST", "/orders/o-1/cancel", None)] {
            let r = send_as(&router, None, method, path, body, Some("k-1"), &[]).await;
            assert_eq!((r.status, r.json()["title"].as_str()), (401, Some("Unauthorized")), "{method} {path}");
        }
        assert!(table.sent().is_empty() && table.gets() == 0, "nothing read or written");
        // Authentication off (ORDER_API_AUTH=none): no claims needed.
        let open = super::router(table.api().with_auth(crate::auth::AuthMode::None));
        assert_eq!(send_as(&open, None, "GET", "/orders/o-1", None, None, &[]).await.status, 200);
    }

    #[tokio::test]
    async fn another_subjects_order_is_not_found_and_admins_see_every_order() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let router = table.router();
        let bob_get = send_as(&router, Some("bob"), "GET", "/orders/o-1", None, None, &[]).await;
        let nobody = send_as(&router, Some("bob"), "GET", "/orders/o-404", None, None, &[]).await;
        assert_eq!((bob_get.status, nobody.status), (404, 404));
        assert_eq!(bob_get.json()["detail"], nobody.json()["detail"].as_str().unwrap().replace("o-404", "o-1"), "the same answer as no order");
        let bob_cancel = send_as(&router, Some("bob"), "POST", "/orders/o-1/cancel", None, Some("k-b"), &[]).await;
        assert_eq!(bob_cancel.status, 404);
        assert!(table.sent().is_empty(), "bob's cancel wrote nothing");
        assert_eq!(send(&router, "GET", "/orders/o-1", None, None, &[]).await.status, 200, "alice owns it");
        let mut admin = axum::http::Request::builder().method("GET").uri("/orders/o-1").body(axum::body::Body::empty()).unwrap();
        let context = serde_json::from_value(
            json!({"http": {"method": "GET"}, "authorizer": {"jwt": {"claims": {"sub": "ops"}, "scopes": [crate::auth::ADMIN_SCOPE]}}}),
        )
        .unwrap();
        admin.extensions_mut().insert(lambda_http::request::RequestContext::ApiGatewayV2(context));
        assert_eq!(router.clone().oneshot(admin).await.unwrap().status(), 200);
    }

    #[tokio::test]
    async fn orders_record_their_owner_and_keys_are_per_subject() {
        let table = Table::new(vec![], None, None);
        let router = table.router();
        assert_eq!(send(&router, "POST", "/orders", Some(GOOD), Some("k-1"), &[]).await.status, 201);
        assert_eq!(send_as(&router, Some("bob"), "POST", "/orders", Some(GOOD), Some("k-1"), &[]).await.status, 201);
        let sent = table.sent();
        let order = sent[0][1].put().unwrap().item();
        assert_eq!(order["owner"], AttributeValue::S(ALICE.into()));
        let key_pk = |items: &Vec<TransactWriteItem>| items[0].put().unwrap().item()["pk"].clone();
        assert_ne!(key_pk(&sent[0]), key_pk(&sent[1]), "the same key of two subjects is two records");
        assert_eq!(key_pk(&sent[0]), AttributeValue::S(format!("{KEY_PREFIX}5:alice#k-1")));
    }

    #[tokio::test]
    async fn the_sample_events_work() {
        let id = "01a22651-6c78-7a2b-89c3-d4e5f6071829";
        let table = Table::new(vec![order_item(id, STATUS_CREATED, 1)], None, None);
        let router = table.router();
        for (name, status, correlation_id) in [
            ("create-order.json", 201, "corr-7f3c9e2a-1b4d-4c8e-9a6f-2d5e8b1c0a93"),
            ("create-order-unicode.json", 201, "corr-2b8d4f6a-9c1e-4e3b-8d7a-5f0c2e9b4a17"),
            ("create-order-rest-v1.json", 201, "corr-5c1a9e3b-7d2f-4b6e-8a0c-3e9f1d5b7a20"),
            ("get-order.json", 200, "corr-7f3c9e2a-1b4d-4c8e-9a6f-2d5e8b1c0a93"),
            ("cancel-order.json", 200, "corr-2b8d4f6a-9c1e-4a3b-8d7f-6e5c4b3a2d10"),
        ] {
            let answer = invoke(&router, &sample(name), Context::default()).await;
            assert_eq!(answer["statusCode"], status, "{name}: {answer}");
            let headers = if name.contains("rest-v1") {
                answer["multiValueHeaders"]["x-correlation-id"][0].clone()
            } else {
                answer["headers"]["x-correlation-id"].clone()
            };
            assert_eq!(headers, correlation_id, "{name}: {answer}");
        }
        let events: Vec<OutboxItem> = table.sent().iter().map(|items| outbox_item(items.last().unwrap())).collect();
        let customers: Vec<String> =
            events[..3].iter().map(|e| serde_json::from_str::<Value>(&e.payload).unwrap()["customer_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(customers, ["c-1001", "c-1002 Zoë 🚀", "c-1003"]);
        assert_eq!(
            (events[3].event_type.as_str(), events[3].correlation_id.as_str()),
            ("OrderCancelled", "corr-2b8d4f6a-9c1e-4a3b-8d7f-6e5c4b3a2d10")
        );
    }
}
