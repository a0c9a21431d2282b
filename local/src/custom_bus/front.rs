//! The runtime's one AWS endpoint: Custom Event Bus operations answered by [`CustomBus`], every
//! other request forwarded to moto unchanged (method, path, query, headers, body). With a
//! timeline journal ([`Served::set_journal`]), each accepted `PutEvents` entry of either bus is
//! recorded as published ([`crate::journal`]).
//!
//! The endpoint and the bus's deliveries run on a runtime of their own (a thread with two
//! workers), so a caller that blocks its own thread (a test waiting on a child process that
//! calls the endpoint) never stalls them, as it never stalled moto's process.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::wire::{self, WireError};
use super::CustomBus;
use crate::journal::Journal;

/// Largest request body read, bytes (moto's answers are streamed back as they are).
const MAX_BODY: usize = 64 * 1024 * 1024;

struct Front {
    bus: Arc<CustomBus>,
    upstream: String,
    client: reqwest::Client,
    journal: Arc<OnceLock<Arc<Journal>>>,
}

/// The served endpoint and its bus; both stop when dropped.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The bus it plays.
    pub bus: Arc<CustomBus>,
    journal: Arc<OnceLock<Arc<Journal>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    /// Records each `PutEvents` entry the buses accept in `journal` from now on (the first
    /// journal set stays).
    pub fn set_journal(&self, journal: Arc<Journal>) {
        let _ = self.journal.set(journal);
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts a Custom Event Bus in `region` and `account` and serves it in front of moto at
/// `upstream` on a free loopback port, on a runtime of its own.
///
/// # Errors
/// When the thread or its runtime cannot start, or no loopback port can be bound.
pub async fn serve(upstream: &str, region: &str, account: &str) -> std::io::Result<Served> {
    let (ready, started) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (upstream, region, account) = (upstream.trim_end_matches('/').to_owned(), region.to_owned(), account.to_owned());
    let journal = Arc::new(OnceLock::new());
    let front_journal = journal.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("custom-bus").enable_all().build()?;
    std::thread::Builder::new().name("custom-bus".into()).spawn(move || {
        runtime.block_on(async move {
            let bus = CustomBus::new(&upstream, &region, &account).await;
            let front = Arc::new(Front { bus: bus.clone(), upstream, client: reqwest::Client::new(), journal: front_journal });
            let app = axum::Router::new().fallback(handle).with_state(front);
            let bound = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.and_then(|l| Ok((l.local_addr()?, l)));
            let listener = match bound {
                Ok((address, listener)) => {
                    let _ = ready.send(Ok((format!("http://{address}"), bus)));
                    listener
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            tokio::select! {
                served = axum::serve(listener, app) => {
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the runtime's AWS endpoint stopped");
                    }
                }
                _ = stopped => {}
            }
        });
        // The runtime drops here: the bus's delivery tasks end with it.
    })?;
    let (endpoint, bus) = started.await.map_err(|_| std::io::Error::other("the Custom Event Bus thread ended before serving"))??;
    Ok(Served { endpoint, bus, journal, stop: Some(stop) })
}

async fn handle(State(front): State<Arc<Front>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return WireError::invalid(format!("the request body could not be read: {e}")).into_response(),
    };
    if let Some(op) = wire::operation_of(parts.uri.path()) {
        if let (Some(journal), "PutEvents") = (front.journal.get(), op) {
            return put_events_journaled(&front.bus, journal, &body);
        }
        return answer_custom_bus(&front.bus, op, &body);
    }
    let classic_put_events = front.journal.get().filter(|_| parts.headers.get("x-amz-target").is_some_and(|t| t == "AWSEvents.PutEvents"));
    let received = chrono::Utc::now();
    match forward(&front, &parts, body.to_vec()).await {
        Ok((response, answer)) => {
            if let (Some(journal), Some(answer)) = (classic_put_events, answer.filter(|_| response.status().is_success())) {
                if let (Ok(request), Ok(answer)) = (serde_json::from_slice(&body), serde_json::from_slice(&answer)) {
                    journal.record_put_events("classic bus", received, &request, &answer);
                }
            }
            response
        }
        Err(e) => {
            tracing::warn!(error = %e, "the runtime's AWS endpoint: moto did not answer");
            let mut r = Response::new(Body::from(format!("moto did not answer: {e}")));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
        }
    }
}

/// A Custom Event Bus `PutEvents` answered, its accepted entries recorded in `journal`.
fn put_events_journaled(bus: &Arc<CustomBus>, journal: &Journal, body: &[u8]) -> Response {
    let received = chrono::Utc::now();
    let result = wire::decode(body).and_then(|request| bus.call("PutEvents", &request).map(|answer| (request, answer)));
    match result {
        Ok((request, answer)) => {
            journal.record_put_events("Custom bus", received, &request, &answer);
            wire::ok(&answer)
        }
        Err(e) => {
            tracing::debug!(error = %e, "custom bus: PutEvents refused");
            e.into_response()
        }
    }
}

/// A Custom Event Bus call's answer.
pub(crate) fn answer_custom_bus(bus: &Arc<CustomBus>, op: &str, body: &[u8]) -> Response {
    let result = wire::decode(body).and_then(|request| bus.call(op, &request));
    match result {
        Ok(value) => wire::ok(&value),
        Err(e) => {
            tracing::debug!(%op, error = %e, "custom bus: refused");
            e.into_response()
        }
    }
}

/// Forwards a request to moto; the answer, and its body again when the request is a classic
/// `PutEvents` to journal.
async fn forward(front: &Front, parts: &axum::http::request::Parts, body: Vec<u8>) -> Result<(Response, Option<axum::body::Bytes>), reqwest::Error> {
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut request = front.client.request(parts.method.clone(), format!("{}{path}", front.upstream));
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection" | "transfer-encoding") {
            request = request.header(name, value);
        }
    }
    let answer = request.body(body).send().await?;
    let status = answer.status();
    let mut headers = answer.headers().clone();
    for hop in ["content-length", "connection", "transfer-encoding"] {
        headers.remove(hop);
    }
    let bytes = answer.bytes().await?;
    let kept =
        (front.journal.get().is_some() && parts.headers.get("x-amz-target").is_some_and(|t| t == "AWSEvents.PutEvents")).then(|| bytes.clone());
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok((response, kept))
}
