//! The Lambda Runtime API, served to ONE function instance on a loopback port, as Lambda serves
//! it inside each execution environment. The instance (any custom runtime, e.g. the Rust
//! `lambda_runtime` crate) finds it through `AWS_LAMBDA_RUNTIME_API=127.0.0.1:PORT` and:
//!
//! * `GET /2018-06-01/runtime/invocation/next` — long-polls for the next event. The answer's body
//!   is the event; its headers are `Lambda-Runtime-Aws-Request-Id`,
//!   `Lambda-Runtime-Deadline-Ms` (the deadline as Unix epoch milliseconds: now + the function's
//!   `Timeout`), `Lambda-Runtime-Invoked-Function-Arn`, `Lambda-Runtime-Trace-Id` (an X-Ray
//!   header `Root=1-<8 hex epoch s>-<24 hex>;Parent=<16 hex>;Sampled=0`) and
//!   `Content-Type: application/json`.
//! * `POST /2018-06-01/runtime/invocation/{id}/response` — the invocation's result (202). A
//!   response over 6 MB (Lambda's synchronous payload limit) is answered 413 and the invocation
//!   fails with `Function.ResponseSizeTooLarge`.
//! * `POST /2018-06-01/runtime/invocation/{id}/error` — the invocation failed; the body
//!   `{"errorType", "errorMessage"}` is the invocation's error (202).
//! * `POST /2018-06-01/runtime/init/error` — initialisation failed (202); the runtime then exits.
//!
//! An unknown request id is answered 400 `InvalidRequestID`, as Lambda does. Source:
//! <https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>.
//!
//! One instance handles one invocation at a time (Lambda's execution model), so the API holds at
//! most one invocation in flight; concurrency comes from more instances (see
//! the function's pool, `lambda::function`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Largest response payload of a synchronous invocation, bytes (Lambda quotas: 6 MB).
pub const MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;

/// An invocation's error, as the Runtime API carries it (`POST …/error`, `POST /init/error`)
/// and as Lambda reports it to the invoker: `{"errorType": …, "errorMessage": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionError {
    /// E.g. `Sandbox.Timedout`, `Runtime.ExitError`, or the function's own type.
    #[serde(default)]
    pub error_type: String,
    /// Human-readable message.
    #[serde(default)]
    pub error_message: String,
}

impl FunctionError {
    /// An error of `error_type` with `error_message`.
    pub fn new(error_type: impl Into<String>, error_message: impl Into<String>) -> Self {
        Self { error_type: error_type.into(), error_message: error_message.into() }
    }
}

/// What an invocation ends with: the response (JSON; a non-JSON body as a JSON string) or the
/// error.
pub type Outcome = Result<Value, FunctionError>;

/// An event waiting for the instance's `GET …/next`.
struct Event {
    request_id: String,
    payload: String,
    timeout: Duration,
}

/// The invocation in flight: where its outcome goes, and who waits for the instance to fetch it.
struct Inflight {
    request_id: String,
    outcome: oneshot::Sender<Outcome>,
    fetched: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Slot {
    inflight: Option<Inflight>,
    init_error: Option<FunctionError>,
}

struct Shared {
    function_arn: String,
    events: tokio::sync::Mutex<mpsc::Receiver<Event>>,
    slot: Mutex<Slot>,
    polled: AtomicBool,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // A poisoned lock only means a handler panicked mid-update; the slot stays usable.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An invocation handed to the instance; see [`RuntimeApi::begin`].
pub struct Pending {
    /// The request id (`Lambda-Runtime-Aws-Request-Id`).
    pub request_id: String,
    /// Completes with the outcome.
    pub outcome: oneshot::Receiver<Outcome>,
    /// Completes when the instance fetched the event with `GET …/next`.
    pub fetched: oneshot::Receiver<()>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("request_id", &self.request_id).finish_non_exhaustive()
    }
}

/// The Runtime API of one instance; the server stops when this is dropped.
pub struct RuntimeApi {
    /// Where it listens (`AWS_LAMBDA_RUNTIME_API`).
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    events: mpsc::Sender<Event>,
    server: JoinHandle<()>,
}

impl std::fmt::Debug for RuntimeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeApi").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RuntimeApi {
    /// Serves the API on a free port of 127.0.0.1 for a function whose ARN is `function_arn`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn bind(function_arn: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (events, receiver) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            function_arn: function_arn.to_owned(),
            events: tokio::sync::Mutex::new(receiver),
            slot: Mutex::new(Slot::default()),
            polled: AtomicBool::new(false),
        });
        let app = axum::Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            // Sizes are checked by the handlers, which answer as Lambda does.
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "a Runtime API server stopped");
            }
        });
        Ok(Self { addr, shared, events, server })
    }

    /// Hands `payload` (the event, JSON text) to the instance, to run within `timeout` from the
    /// moment the instance fetches it. The instance's init error, if it reported one, is
    /// returned at once instead.
    ///
    /// # Errors
    /// The init error the instance reported through `POST /init/error`.
    pub fn begin(&self, payload: String, timeout: Duration) -> Result<Pending, FunctionError> {
        let request_id = uuid::Uuid::new_v4().to_string();
        let (outcome_tx, outcome) = oneshot::channel();
        let (fetched_tx, fetched) = oneshot::channel();
        {
            let mut slot = self.shared.slot();
            if let Some(e) = slot.init_error.clone() {
                return Err(e);
            }
            slot.inflight = Some(Inflight { request_id: request_id.clone(), outcome: outcome_tx, fetched: Some(fetched_tx) });
        }
        // Capacity 1 and one invocation at a time: the channel always has room. Should it not
        // (the server is gone), the event is dropped and the caller's timeout ends the wait.
        let _ = self.events.try_send(Event { request_id: request_id.clone(), payload, timeout });
        Ok(Pending { request_id, outcome, fetched })
    }

    /// Ends the invocation in flight, if any, with `error` (the instance exited or timed out);
    /// true if there was one.
    pub fn fail_current(&self, error: FunctionError) -> bool {
        match self.shared.slot().inflight.take() {
            Some(inflight) => inflight.outcome.send(Err(error)).is_ok(),
            None => false,
        }
    }

    /// Forgets the invocation in flight (its caller stopped waiting).
    pub fn abandon(&self, request_id: &str) {
        let mut slot = self.shared.slot();
        if slot.inflight.as_ref().is_some_and(|i| i.request_id == request_id) {
            slot.inflight = None;
        }
    }

    /// Whether the instance has asked for an event at least once (it finished its init).
    pub fn polled(&self) -> bool {
        self.shared.polled.load(Ordering::SeqCst)
    }

    /// The init error the instance reported, if any.
    pub fn init_error(&self) -> Option<FunctionError> {
        self.shared.slot().init_error.clone()
    }
}

fn now_epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// An X-Ray trace header for a new, unsampled trace.
pub fn trace_header() -> String {
    let root = uuid::Uuid::new_v4().simple().to_string();
    let parent = uuid::Uuid::new_v4().simple().to_string();
    format!("Root=1-{:08x}-{};Parent={};Sampled=0", now_epoch_ms() / 1000, &root[..24], &parent[..16])
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, [("content-type", "application/json")], body.to_string()).into_response()
}

fn api_error(status: StatusCode, error_type: &str, message: &str) -> Response {
    json_response(status, &json!({"errorType": error_type, "errorMessage": message}))
}

fn accepted() -> Response {
    json_response(StatusCode::ACCEPTED, &json!({"status": "OK"}))
}

fn header(value: &str) -> HeaderValue {
    // Every value here is ASCII we built (uuids, digits, ARNs, trace headers); an impossible
    // failure degrades to an empty header rather than a panic.
    HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

async fn next(State(shared): State<Arc<Shared>>) -> Response {
    shared.polled.store(true, Ordering::SeqCst);
    let event = { shared.events.lock().await.recv().await };
    let Some(event) = event else {
        return api_error(StatusCode::INTERNAL_SERVER_ERROR, "ServiceException", "the local runtime is stopping");
    };
    let deadline_ms = now_epoch_ms() + event.timeout.as_millis() as u64;
    if let Some(inflight) = shared.slot().inflight.as_mut().filter(|i| i.request_id == event.request_id) {
        if let Some(fetched) = inflight.fetched.take() {
            let _ = fetched.send(());
        }
    }
    let mut response = Response::new(axum::body::Body::from(event.payload));
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("lambda-runtime-aws-request-id", header(&event.request_id));
    headers.insert("lambda-runtime-deadline-ms", header(&deadline_ms.to_string()));
    headers.insert("lambda-runtime-invoked-function-arn", header(&shared.function_arn));
    headers.insert("lambda-runtime-trace-id", header(&trace_header()));
    response
}

/// Takes the invocation in flight if its id is `id`.
fn take(shared: &Shared, id: &str) -> Option<Inflight> {
    let mut slot = shared.slot();
    if slot.inflight.as_ref().is_some_and(|i| i.request_id == id) {
        slot.inflight.take()
    } else {
        None
    }
}

async fn response(State(shared): State<Arc<Shared>>, Path(id): Path<String>, body: Bytes) -> Response {
    let Some(inflight) = take(&shared, &id) else {
        return api_error(StatusCode::BAD_REQUEST, "InvalidRequestID", &format!("no invocation {id} in flight"));
    };
    if body.len() > MAX_RESPONSE_BYTES {
        let message = format!("Response payload size ({} bytes) exceeded maximum allowed payload size ({MAX_RESPONSE_BYTES} bytes).", body.len());
        let _ = inflight.outcome.send(Err(FunctionError::new("Function.ResponseSizeTooLarge", message.clone())));
        return api_error(StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge", &message);
    }
    let value = serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let _ = inflight.outcome.send(Ok(value));
    accepted()
}

/// The error of an `…/error` or `/init/error` body; the `Lambda-Runtime-Function-Error-Type`
/// header or `Runtime.Unknown` when the body does not say.
fn error_of(headers: &HeaderMap, body: &[u8]) -> FunctionError {
    let header_type = headers.get("lambda-runtime-function-error-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    match serde_json::from_slice::<FunctionError>(body) {
        Ok(mut e) => {
            if e.error_type.is_empty() {
                e.error_type = header_type.unwrap_or_else(|| "Runtime.Unknown".into());
            }
            e
        }
        Err(_) => FunctionError::new(header_type.unwrap_or_else(|| "Runtime.Unknown".into()), String::from_utf8_lossy(body)),
    }
}

async fn error(State(shared): State<Arc<Shared>>, Path(id): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(inflight) = take(&shared, &id) else {
        return api_error(StatusCode::BAD_REQUEST, "InvalidRequestID", &format!("no invocation {id} in flight"));
    };
    let _ = inflight.outcome.send(Err(error_of(&headers, &body)));
    accepted()
}

async fn init_error(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let error = error_of(&headers, &body);
    let mut slot = shared.slot();
    slot.init_error = Some(error.clone());
    if let Some(inflight) = slot.inflight.take() {
        let _ = inflight.outcome.send(Err(error));
    }
    accepted()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:s-EchoFunction";

    fn url(api: &RuntimeApi, path: &str) -> String {
        format!("http://{}/2018-06-01/runtime/{path}", api.addr)
    }

    /// `GET …/next` as a runtime does: `(request id, deadline ms, headers, body)`.
    async fn next(client: &reqwest::Client, api: &RuntimeApi) -> (String, u64, reqwest::header::HeaderMap, String) {
        let response = client.get(url(api, "invocation/next")).send().await.expect("GET next");
        assert_eq!(response.status(), 200);
        let headers = response.headers().clone();
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("no {name} header: {headers:?}")).to_owned();
        let id = get("lambda-runtime-aws-request-id");
        let deadline: u64 = get("lambda-runtime-deadline-ms").parse().expect("the deadline is a number");
        let body = response.text().await.expect("the event");
        (id, deadline, headers, body)
    }

    #[tokio::test]
    async fn next_then_response_completes_the_invocation_with_lambdas_headers() {
        let api = RuntimeApi::bind(ARN).await.expect("a loopback port");
        let client = reqwest::Client::new();
        let pending = api.begin(r#"{"ping": 1}"#.into(), Duration::from_secs(30)).expect("no init error");
        let before = now_epoch_ms();
        let (id, deadline, headers, body) = next(&client, &api).await;
        assert_eq!(id, pending.request_id);
        assert_eq!(body, r#"{"ping": 1}"#);
        assert!(
            deadline > before && deadline >= before + 29_000 && deadline <= now_epoch_ms() + 30_000,
            "the deadline is epoch ms, now + Timeout: {deadline} (now {before})"
        );
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["lambda-runtime-invoked-function-arn"], ARN);
        let trace = headers["lambda-runtime-trace-id"].to_str().expect("ASCII");
        let parts: Vec<&str> = trace.split(';').collect();
        assert!(parts.len() == 3 && parts[0].starts_with("Root=1-") && parts[0].len() == "Root=1-".len() + 8 + 1 + 24, "{trace}");
        assert!(parts[1].starts_with("Parent=") && parts[1].len() == "Parent=".len() + 16 && parts[2] == "Sampled=0", "{trace}");

        let wrong = client.post(url(&api, "invocation/not-this-one/response")).body("{}").send().await.expect("POST response");
        assert_eq!(wrong.status(), 400, "an unknown request id is InvalidRequestID");
        let posted = client.post(url(&api, &format!("invocation/{id}/response"))).body(r#"{"pong": 2}"#).send().await.expect("POST response");
        assert_eq!(posted.status(), 202);
        assert_eq!(pending.outcome.await.expect("an outcome"), Ok(json!({"pong": 2})));
        assert!(pending.fetched.await.is_ok(), "the event was fetched");
    }

    #[tokio::test]
    async fn next_then_error_fails_the_invocation_with_the_posted_error() {
        let api = RuntimeApi::bind(ARN).await.expect("a loopback port");
        let client = reqwest::Client::new();
        let pending = api.begin("{}".into(), Duration::from_secs(3)).expect("no init error");
        let (id, deadline, _, _) = next(&client, &api).await;
        assert!(deadline > now_epoch_ms(), "the deadline is in the future: {deadline}");
        let body = r#"{"errorType": "SequenceGap", "errorMessage": "expected sequence 2, got 5"}"#;
        let posted = client
            .post(url(&api, &format!("invocation/{id}/error")))
            .header("lambda-runtime-function-error-type", "Unhandled")
            .body(body)
            .send()
            .await
            .expect("POST error");
        assert_eq!(posted.status(), 202);
        assert_eq!(pending.outcome.await.expect("an outcome"), Err(FunctionError::new("SequenceGap", "expected sequence 2, got 5")));
    }

    #[tokio::test]
    async fn an_init_error_fails_the_invocation_and_every_later_one() {
        let api = RuntimeApi::bind(ARN).await.expect("a loopback port");
        let client = reqwest::Client::new();
        let pending = api.begin("{}".into(), Duration::from_secs(3)).expect("no init error yet");
        let body = r#"{"errorType": "ConfigError", "errorMessage": "EVENT_BUS_NAME is required"}"#;
        let posted = client.post(url(&api, "init/error")).body(body).send().await.expect("POST init/error");
        assert_eq!(posted.status(), 202);
        let expected = FunctionError::new("ConfigError", "EVENT_BUS_NAME is required");
        assert_eq!(pending.outcome.await.expect("an outcome"), Err(expected.clone()));
        assert_eq!(api.begin("{}".into(), Duration::from_secs(3)).err(), Some(expected));
    }

    #[tokio::test]
    async fn an_oversized_response_fails_like_lambda() {
        let api = RuntimeApi::bind(ARN).await.expect("a loopback port");
        let client = reqwest::Client::new();
        let pending = api.begin("{}".into(), Duration::from_secs(3)).expect("no init error");
        let (id, ..) = next(&client, &api).await;
        let big = format!("\"{}\"", "x".repeat(MAX_RESPONSE_BYTES));
        let posted = client.post(url(&api, &format!("invocation/{id}/response"))).body(big).send().await.expect("POST response");
        assert_eq!(posted.status(), 413);
        let error = pending.outcome.await.expect("an outcome").expect_err("too large");
        assert_eq!(error.error_type, "Function.ResponseSizeTooLarge");
    }
}
