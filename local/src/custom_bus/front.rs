//! The runtime's one AWS endpoint: Custom Event Bus operations answered by [`CustomBus`], every
//! other request forwarded to moto unchanged (method, path, query, headers, body).

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

/// The served endpoint; stops when dropped.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `bus` in front of moto at `upstream` on a free loopback port.
///
/// # Errors
/// When no loopback port can be bound.
pub async fn serve(bus: Arc<CustomBus>, upstream: &str) -> std::io::Result<Served> {
    let front = Arc::new(Front { bus, upstream: upstream.trim_end_matches('/').to_owned(), client: reqwest::Client::new() });
    let app = axum::Router::new().fallback(handle).with_state(front);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the runtime's AWS endpoint stopped");
        }
    });
    Ok(Served { endpoint, task })
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
