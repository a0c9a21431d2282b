//! The injector: an HTTP proxy between one function instance and the emulator. Each instance
//! gets its own loopback port as `AWS_ENDPOINT_URL`, so the proxy knows which function calls
//! (and can kill that instance); the operation is read from the `X-Amz-Target` header (the JSON
//! protocols of DynamoDB, DynamoDB Streams, EventBridge and SQS) or the `Action` form field
//! (query protocol).
//!
//! Wire shapes (what the SDK parses, so its retry classification sees real AWS answers):
//! awsJson errors are `{"__type": "...#Code", "message": "..."}` with the `x-amzn-ErrorType`
//! header; a cancelled transaction is HTTP 400 `TransactionCanceledException` whose
//! `CancellationReasons` has one entry per `TransactItems` entry; a partly failed `PutEvents` is
//! HTTP 200 with `FailedEntryCount` and per-entry `ErrorCode`/`ErrorMessage`.
//!
//! The emulator ignores `TransactWriteItems`' `ClientRequestToken`; the proxy plays it, so a
//! retried transaction whose first answer was lost behaves as on AWS: the same token with the
//! same request within 10 minutes answers the first call's success without writing again; with
//! another request, `IdempotentParameterMismatchException`.
//!
//! Sources: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html>,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>,
//! <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html>.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::plan::{ErrorCode, Fault, FaultKind, FaultPlan};

/// Largest request or answer body the proxy carries, bytes.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// Applies a [`FaultPlan`] to the AWS calls of function instances.
pub struct Injector {
    plan: FaultPlan,
    upstream: String,
    client: reqwest::Client,
    rng: Mutex<rand::rngs::StdRng>,
    armed: Mutex<Instant>,
    fired: Vec<AtomicU64>,
    ttl_deleted: AtomicU64,
    calls: AtomicU64,
    tokens: Mutex<std::collections::HashMap<String, SeenToken>>,
    health: Mutex<BTreeMap<String, Health>>,
}

/// Calls to one service and how they went.
#[derive(Debug, Default)]
struct Health {
    calls: u64,
    failed: u64,
    /// When the current run of failed calls began (`None`: the last call succeeded).
    failing_since: Option<Instant>,
}

/// One service's calls as the functions saw them through the proxies ([`Injector::health`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServiceHealth {
    /// `dynamodb`, `events`, `sqs`, `streams`, `s3`, …
    pub service: String,
    /// Calls made.
    pub calls: u64,
    /// Calls that failed: HTTP 5xx, 429, throttling (`ThrottlingException`,
    /// `ProvisionedThroughputExceededException`, `RequestLimitExceeded`), or no answer.
    pub failed: u64,
    /// How long the current run of failed calls has lasted, seconds (`None`: the last call
    /// succeeded).
    pub failing_for_secs: Option<f64>,
}

/// Whether an answer counts as a failed call: 5xx, 429 or a throttling error type.
fn is_failure(response: &Response) -> bool {
    let status = response.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return true;
    }
    let error_type = response.headers().get("x-amzn-errortype").and_then(|v| v.to_str().ok()).unwrap_or_default();
    status.is_client_error()
        && ["ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded"].iter().any(|t| error_type.contains(t))
}

/// A `ClientRequestToken` of a committed transaction: a digest of its request (the proof keeps
/// ten minutes of tokens; whole requests would be kilobytes each) and its answer.
#[derive(Clone)]
struct SeenToken {
    request: u64,
    at: Instant,
    answer: Vec<u8>,
}

/// How long DynamoDB keeps a `ClientRequestToken` (10 minutes).
const TOKEN_LIFETIME: Duration = Duration::from_secs(600);

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector").field("upstream", &self.upstream).field("faults", &self.plan.faults.len()).finish_non_exhaustive()
    }
}

/// One row of the injected-faults table.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Injected {
    /// [`Fault::label`], or `ttl_delete <table>`.
    pub fault: String,
    /// Calls hit (`put_events_entries`: entries failed; TTL: items deleted).
    pub count: u64,
}

/// An instance's proxy; stops when dropped.
#[derive(Debug)]
pub struct Attached {
    /// `http://127.0.0.1:PORT`, the instance's `AWS_ENDPOINT_URL`.
    pub endpoint: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Instance {
    injector: Arc<Injector>,
    function: String,
    calls: AtomicU64,
    kill: Box<dyn Fn() + Send + Sync>,
}

/// What the injector decided for one call.
enum Decision {
    Forward,
    Fail(ErrorCode),
    /// `PutEvents` entry faults that apply: `(fault index, code, rate)`, rolled per entry.
    FailEntries(Vec<(usize, String, f64)>),
    /// `BatchGetItem`: every key unprocessed.
    Unprocessed,
    LoseAnswer,
    Crash,
}

impl Injector {
    /// An injector applying `plan` in front of the emulator at `upstream`; its clock starts now
    /// (see [`Injector::arm`]).
    pub fn new(plan: FaultPlan, upstream: &str) -> Arc<Self> {
        let fired = plan.faults.iter().map(|_| AtomicU64::new(0)).collect();
        Arc::new(Self {
            rng: Mutex::new(rand::rngs::StdRng::seed_from_u64(plan.seed)),
            plan,
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            armed: Mutex::new(Instant::now()),
            fired,
            ttl_deleted: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            tokens: Mutex::new(std::collections::HashMap::new()),
            health: Mutex::new(BTreeMap::new()),
        })
    }

    /// Per service (`dynamodb`, `events`, …): calls, failed calls, and how long the current run
    /// of failures has lasted — what `up`'s status line shows.
    pub fn health(&self) -> Vec<ServiceHealth> {
        let health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        health
            .iter()
            .map(|(service, h)| ServiceHealth {
                service: service.clone(),
                calls: h.calls,
                failed: h.failed,
                failing_for_secs: h.failing_since.map(|t| t.elapsed().as_secs_f64()),
            })
            .collect()
    }

    fn observe(&self, op: &str, failed: bool) {
        let service = op.split(':').next().unwrap_or("unknown").to_owned();
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let h = health.entry(service).or_default();
        h.calls += 1;
        if failed {
            h.failed += 1;
            h.failing_since.get_or_insert_with(Instant::now);
        } else {
            h.failing_since = None;
        }
    }

    /// The plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// Restarts the clock of the faults' windows (`from_s`, `until_s`).
    pub fn arm(&self) {
        *self.armed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Seconds since [`Injector::arm`].
    pub fn elapsed_s(&self) -> f64 {
        self.armed.lock().unwrap_or_else(|p| p.into_inner()).elapsed().as_secs_f64()
    }

    /// AWS calls the instances made through the proxies.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Counts `n` items deleted by a TTL sweep.
    pub fn add_ttl_deleted(&self, n: u64) {
        self.ttl_deleted.fetch_add(n, Ordering::SeqCst);
    }

    /// What was injected so far, one row per fault of the plan (in plan order), then TTL.
    pub fn injected(&self) -> Vec<Injected> {
        let mut rows: Vec<Injected> =
            self.plan.faults.iter().zip(&self.fired).map(|(f, n)| Injected { fault: f.label(), count: n.load(Ordering::SeqCst) }).collect();
        if !self.plan.ttl.is_empty() {
            let tables: Vec<&str> = self.plan.ttl.iter().map(|t| t.table.as_str()).collect();
            rows.push(Injected { fault: format!("ttl_delete {}", tables.join(",")), count: self.ttl_deleted.load(Ordering::SeqCst) });
        }
        rows
    }

    /// Totals by fault kind (`error`, `lost_answer`, …, `ttl_delete`).
    pub fn injected_by_kind(&self) -> BTreeMap<String, u64> {
        let mut kinds = BTreeMap::new();
        for (f, n) in self.plan.faults.iter().zip(&self.fired) {
            let kind = f.label().split(' ').next().unwrap_or_default().to_owned();
            *kinds.entry(kind).or_insert(0) += n.load(Ordering::SeqCst);
        }
        if !self.plan.ttl.is_empty() {
            kinds.insert("ttl_delete".into(), self.ttl_deleted.load(Ordering::SeqCst));
        }
        kinds
    }

    /// Starts a proxy for one instance of `function`; `kill` kills that instance (a crash).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn attach(self: &Arc<Self>, function: &str, kill: Box<dyn Fn() + Send + Sync>) -> std::io::Result<Attached> {
        let instance = Arc::new(Instance { injector: self.clone(), function: function.to_owned(), calls: AtomicU64::new(0), kill });
        let app = axum::Router::new().fallback(handle).with_state(instance);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "fault proxy stopped");
            }
        });
        Ok(Attached { endpoint, task })
    }

    /// The decision for call number `nth` (1-based, of this instance) of `function` to `op`,
    /// after any latency faults have been waited.
    async fn decide(&self, op: &str, function: &str, nth: u64) -> Decision {
        let mut entry_faults = Vec::new();
        for (i, fault) in self.plan.faults.iter().enumerate() {
            if !self.applies(fault, op, function, i) {
                continue;
            }
            if fault.kind == FaultKind::PutEventsEntries {
                // Decided per entry once the body is read, if no other fault decides the call.
                entry_faults.push((i, fault.code.clone().unwrap_or_default(), fault.rate));
                continue;
            }
            if fault.kind == FaultKind::Crash && nth < fault.after_calls.unwrap_or(1) {
                continue;
            }
            if !self.roll(fault.rate) {
                continue;
            }
            self.fired[i].fetch_add(1, Ordering::SeqCst);
            match fault.kind {
                FaultKind::Latency => {
                    tokio::time::sleep(Duration::from_millis(fault.ms.unwrap_or(0))).await;
                }
                FaultKind::Error => {
                    return Decision::Fail(fault.code.as_deref().and_then(ErrorCode::parse).unwrap_or(ErrorCode::InternalServerError))
                }
                FaultKind::LostAnswer => return Decision::LoseAnswer,
                FaultKind::UnprocessedKeys => return Decision::Unprocessed,
                FaultKind::Crash => return Decision::Crash,
                FaultKind::PutEventsEntries => {}
            }
        }
        if entry_faults.is_empty() {
            Decision::Forward
        } else {
            Decision::FailEntries(entry_faults)
        }
    }

    fn applies(&self, fault: &Fault, op: &str, function: &str, i: usize) -> bool {
        fault.matches_op(op)
            && fault.function.as_deref().is_none_or(|f| f == function)
            && fault.in_window(self.elapsed_s())
            && fault.limit.is_none_or(|l| self.fired[i].load(Ordering::SeqCst) < l)
    }

    fn roll(&self, rate: f64) -> bool {
        rate >= 1.0 || self.rng.lock().unwrap_or_else(|p| p.into_inner()).random::<f64>() < rate
    }

    /// Forwards a call; a `TransactWriteItems` with a `ClientRequestToken` seen before is
    /// answered as DynamoDB would (see the module doc).
    async fn forward(&self, parts: &axum::http::request::Parts, body: Vec<u8>) -> crate::Result<(StatusCode, HeaderMap, Vec<u8>)> {
        let token = (operation(&parts.headers, &body) == "dynamodb:TransactWriteItems")
            .then(|| serde_json::from_slice::<Value>(&body).ok()?.get("ClientRequestToken")?.as_str().map(str::to_owned))
            .flatten();
        let Some(token) = token else { return self.send(parts, body).await };
        let seen = {
            let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
            tokens.retain(|_, seen| seen.at.elapsed() < TOKEN_LIFETIME);
            tokens.get(&token).cloned()
        };
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/x-amz-json-1.0"));
        match seen {
            Some(seen) if seen.request == digest(&body) => return Ok((StatusCode::OK, headers, seen.answer)),
            Some(_) => {
                let body = json!({
                    "__type": "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                    "message": "Request token is already used with different parameters",
                });
                headers.insert("x-amzn-errortype", HeaderValue::from_static("IdempotentParameterMismatchException"));
                return Ok((StatusCode::BAD_REQUEST, headers, body.to_string().into_bytes()));
            }
            None => {}
        }
        let request = digest(&body);
        let (status, headers, answer) = self.send(parts, body).await?;
        if status.is_success() {
            self.tokens.lock().unwrap_or_else(|p| p.into_inner()).insert(token, SeenToken { request, at: Instant::now(), answer: answer.clone() });
        }
        Ok((status, headers, answer))
    }

    async fn send(&self, parts: &axum::http::request::Parts, body: Vec<u8>) -> crate::Result<(StatusCode, HeaderMap, Vec<u8>)> {
        let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut request = self.client.request(parts.method.clone(), format!("{}{path}", self.upstream));
        for (name, value) in &parts.headers {
            if !matches!(name.as_str(), "host" | "content-length" | "connection" | "transfer-encoding") {
                request = request.header(name, value);
            }
        }
        let answer = request.body(body).send().await.map_err(crate::Error::other("forwarding to the emulator"))?;
        let status = answer.status();
        let mut headers = answer.headers().clone();
        for hop in ["content-length", "connection", "transfer-encoding"] {
            headers.remove(hop);
        }
        let bytes = answer.bytes().await.map_err(crate::Error::other("reading the emulator's answer"))?;
        Ok((status, headers, bytes.to_vec()))
    }
}

/// A digest of a request body (SipHash with fixed keys: the same body, the same digest).
fn digest(body: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

/// `service:Operation` of a request: `X-Amz-Target` (`DynamoDB_20120810.PutItem`,
/// `AWSEvents.PutEvents`, `AmazonSQS.SendMessage`, `DynamoDBStreams_20120810.GetRecords`), else
/// the query protocol's `Action` with the service from the signature's credential scope.
pub fn operation(headers: &HeaderMap, body: &[u8]) -> String {
    if let Some((prefix, op)) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()).and_then(|t| t.split_once('.')) {
        let service = match prefix {
            p if p.starts_with("DynamoDBStreams") => "streams",
            p if p.starts_with("DynamoDB") => "dynamodb",
            "AWSEvents" => "events",
            "AmazonSQS" => "sqs",
            other => other,
        };
        return format!("{service}:{op}");
    }
    let service = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .and_then(|c| c.split('/').nth(3))
        .unwrap_or("unknown")
        .to_owned();
    let action = String::from_utf8_lossy(body).split('&').find_map(|kv| kv.strip_prefix("Action=").map(str::to_owned)).unwrap_or_default();
    format!("{service}:{action}")
}

/// The answer AWS gives for `code` to `op` (see the module doc); `request` is the call's body
/// (a transaction's cancellation reasons have one entry per item).
pub fn error_answer(op: &str, code: ErrorCode, request: &[u8]) -> Response {
    let service = op.split(':').next().unwrap_or_default();
    let (status, name, message) = match code {
        ErrorCode::InternalServerError if service == "events" => (500, "InternalException", "Internal service error"),
        ErrorCode::InternalServerError => (500, "InternalServerError", "Internal server error"),
        ErrorCode::ServiceUnavailable => (503, "ServiceUnavailable", "Service Unavailable"),
        ErrorCode::ThrottlingException => (400, "ThrottlingException", "Rate of requests exceeds the allowed throughput."),
        ErrorCode::ProvisionedThroughputExceeded => (
            400,
            "ProvisionedThroughputExceededException",
            "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API.",
        ),
        ErrorCode::RequestLimitExceeded => (400, "RequestLimitExceeded", "Throughput exceeds the current throughput limit for your account."),
        ErrorCode::TransactionConflict if op == "dynamodb:TransactWriteItems" => {
            let items = serde_json::from_slice::<Value>(request).ok().and_then(|v| v["TransactItems"].as_array().map(Vec::len)).unwrap_or(1).max(1);
            let mut reasons = vec![json!({"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"})];
            reasons.extend((1..items).map(|_| json!({"Code": "None"})));
            let codes: Vec<&str> = std::iter::once("TransactionConflict").chain((1..items).map(|_| "None")).collect();
            let body = json!({
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "Message": format!("Transaction cancelled, please refer cancellation reasons for specific reasons [{}]", codes.join(", ")),
                "CancellationReasons": reasons,
            });
            return json_answer(400, "TransactionCanceledException", &body);
        }
        ErrorCode::TransactionConflict => (400, "TransactionConflictException", "Transaction is ongoing for the item"),
        ErrorCode::InternalFailure => (500, "InternalFailure", "Internal service error"),
    };
    let type_name = match service {
        "dynamodb" | "streams" => format!("com.amazonaws.dynamodb.v20120810#{name}"),
        "sqs" => format!("com.amazonaws.sqs#{name}"),
        _ => name.to_owned(),
    };
    json_answer(status, name, &json!({"__type": type_name, "message": message}))
}

fn json_answer(status: u16, error_type: &str, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/x-amz-json-1.0"));
    if let Ok(v) = HeaderValue::from_str(error_type) {
        response.headers_mut().insert("x-amzn-errortype", v);
    }
    response
}

fn answer(status: StatusCode, headers: HeaderMap, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

async fn handle(State(instance): State<Arc<Instance>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        return error_answer("unknown:unknown", ErrorCode::InternalServerError, b"");
    };
    let body = body.to_vec();
    let injector = &instance.injector;
    injector.calls.fetch_add(1, Ordering::SeqCst);
    // A Custom Event Bus call (`/service/AWSEventsV2/operation/<Op>`) is `events:<Op>`: the two
    // buses share the `events:` IAM namespace, so a plan's `events:PutEvents` faults hit both.
    let op = custom_bus::operation_of(&parts).map_or_else(|| operation(&parts.headers, &body), |op| format!("events:{op}"));
    let nth = instance.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let response = decided(&instance, &op, nth, parts, body).await;
    injector.observe(&op, is_failure(&response));
    response
}

async fn decided(instance: &Arc<Instance>, op: &str, nth: u64, parts: axum::http::request::Parts, body: Vec<u8>) -> Response {
    let injector = &instance.injector;
    let op = op.to_owned();
    let v2 = custom_bus::operation_of(&parts).is_some();
    let error_answer = |op: &str, code: ErrorCode, request: &[u8]| if v2 { custom_bus::error_answer(code) } else { error_answer(op, code, request) };
    let upstream_failed = |e: crate::Error| {
        tracing::warn!(error = %e, %op, "fault proxy: the emulator did not answer");
        error_answer(&op, ErrorCode::ServiceUnavailable, b"")
    };
    match injector.decide(&op, &instance.function, nth).await {
        Decision::Forward => match injector.forward(&parts, body).await {
            Ok((status, headers, body)) => answer(status, headers, body),
            Err(e) => upstream_failed(e),
        },
        Decision::Fail(code) => error_answer(&op, code, &body),
        Decision::Unprocessed => unprocessed_answer(&body),
        Decision::LoseAnswer => {
            if let Err(e) = injector.forward(&parts, body).await {
                return upstream_failed(e);
            }
            error_answer(&op, ErrorCode::InternalServerError, b"")
        }
        Decision::Crash => {
            let _ = injector.forward(&parts, body).await;
            tracing::info!(function = %instance.function, %op, call = nth, "fault: crashing the instance after its call took effect");
            (instance.kill)();
            error_answer(&op, ErrorCode::InternalServerError, b"")
        }
        Decision::FailEntries(faults) if v2 => custom_bus::put_events_in_part(injector, &parts, body, &faults).await.unwrap_or_else(upstream_failed),
        Decision::FailEntries(faults) => put_events_in_part(injector, &parts, body, &faults).await.unwrap_or_else(upstream_failed),
    }
}

/// `BatchGetItem` answered with no item and every requested key (`RequestItems`, table by
/// table, with its `ConsistentRead` and projection) in `UnprocessedKeys`: HTTP 200, as DynamoDB
/// answers when it reads none of the keys (e.g. their partitions exceed their throughput).
/// Source: <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>.
pub fn unprocessed_answer(request: &[u8]) -> Response {
    let requested = serde_json::from_slice::<Value>(request).ok().and_then(|v| v.get("RequestItems").cloned()).unwrap_or_else(|| json!({}));
    let responses: serde_json::Map<String, Value> =
        requested.as_object().map(|tables| tables.keys().map(|t| (t.clone(), json!([]))).collect()).unwrap_or_default();
    let mut response = json_answer(200, "", &json!({"Responses": responses, "UnprocessedKeys": requested}));
    response.headers_mut().remove("x-amzn-errortype");
    response
}

/// `PutEvents` with some entries failed: each entry is failed by the first of `faults`
/// (`(index, code, rate)`) whose roll hits it; the others are forwarded, and the answer lists
/// every entry in request order, as EventBridge does.
async fn put_events_in_part(
    injector: &Injector,
    parts: &axum::http::request::Parts,
    body: Vec<u8>,
    faults: &[(usize, String, f64)],
) -> crate::Result<Response> {
    let mut request: Value = serde_json::from_slice(&body).map_err(crate::Error::other("PutEvents body"))?;
    let entries = request["Entries"].as_array().cloned().unwrap_or_default();
    let failed: Vec<Option<&str>> = entries
        .iter()
        .map(|_| {
            let (index, code, _) = faults.iter().find(|(i, _, rate)| {
                injector.plan.faults[*i].limit.is_none_or(|l| injector.fired[*i].load(Ordering::SeqCst) < l) && injector.roll(*rate)
            })?;
            injector.fired[*index].fetch_add(1, Ordering::SeqCst);
            Some(code.as_str())
        })
        .collect();
    let n_failed = failed.iter().filter(|f| f.is_some()).count();
    if n_failed == 0 {
        let (status, headers, body) = injector.forward(parts, body).await?;
        return Ok(answer(status, headers, body));
    }
    let kept: Vec<Value> = entries.iter().zip(&failed).filter(|(_, f)| f.is_none()).map(|(e, _)| e.clone()).collect();
    let mut upstream_entries = Vec::new().into_iter();
    let mut upstream_failed = 0;
    if !kept.is_empty() {
        request["Entries"] = Value::Array(kept);
        let (status, _, answer_body) = injector.forward(parts, request.to_string().into_bytes()).await?;
        if !status.is_success() {
            return Ok(answer(status, HeaderMap::new(), answer_body));
        }
        let answer: Value = serde_json::from_slice(&answer_body).map_err(crate::Error::other("PutEvents answer"))?;
        upstream_failed = answer["FailedEntryCount"].as_u64().unwrap_or(0);
        upstream_entries = answer["Entries"].as_array().cloned().unwrap_or_default().into_iter();
    }
    let message = |code: &str| if code == "ThrottlingException" { "Rate exceeded" } else { "Internal service error" };
    let merged: Vec<Value> = failed
        .iter()
        .map(|f| match f {
            Some(code) => json!({"ErrorCode": code, "ErrorMessage": message(code)}),
            None => upstream_entries.next().unwrap_or_else(|| json!({})),
        })
        .collect();
    let body = json!({"FailedEntryCount": upstream_failed + n_failed as u64, "Entries": merged});
    let mut response = json_answer(200, "", &body);
    response.headers_mut().remove("x-amzn-errortype");
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/x-amz-json-1.1"));
    Ok(response)
}

mod custom_bus;
#[cfg(test)]
mod tests;
