//! The runtime's one AWS endpoint: Custom Event Bus operations answered by [`CustomBus`], every
//! other request forwarded to moto unchanged (method, path, query, headers, body).
//!
//! The endpoint and the bus's deliveries run on a runtime of their own (a thread with two
//! workers), so a caller that blocks its own thread (a test waiting on a child process that
//! calls the endpoint) never stalls them, as it never stalled moto's process.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::wire::{self, WireError};
use super::CustomBus;

/// Largest request body read, bytes (moto's answers are streamed back as they are).
const MAX_BODY: usize = 64 * 1024 * 1024;

struct Front {
    bus: Arc<CustomBus>,
    upstream: String,
    client: reqwest::Client,
}

/// The served endpoint and its bus; both stop when dropped.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The bus it plays.
    pub bus: Arc<CustomBus>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
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
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("custom-bus").enable_all().build()?;
    std::thread::Builder::new().name("custom-bus".into()).spawn(move || {
        runtime.block_on(async move {
            let bus = CustomBus::new(&upstream, &region, &account).await;
            let front = Arc::new(Front { bus: bus.clone(), upstream, client: reqwest::Client::new() });
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
    Ok(Served { endpoint, bus, stop: Some(stop) })
}

async fn handle(State(front): State<Arc<Front>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => return WireError::invalid(format!("the request body could not be read: {e}")).into_response(),
    };
    if let Some(op) = wire::operation_of(parts.uri.path()) {
        return answer_custom_bus(&front.bus, op, &body);
    }
    match forward(&front, &parts, body.to_vec()).await {
        Ok(response) => response,
        Err(e) => {
            tracing::warn!(error = %e, "the runtime's AWS endpoint: moto did not answer");
            let mut r = Response::new(Body::from(format!("moto did not answer: {e}")));
            *r.status_mut() = StatusCode::BAD_GATEWAY;
            r
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

async fn forward(front: &Front, parts: &axum::http::request::Parts, body: Vec<u8>) -> Result<Response, reqwest::Error> {
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
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    Ok(response)
}
