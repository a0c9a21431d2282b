//! A local webhook subscriber for the demo and the tests: an HTTP server on a loopback port
//! that plays several subscriber endpoints (`POST /hooks/<subscriber>`), verifies each request's
//! `webhook-signature` with the library's own [`Verifier`] against the subscriber's secrets,
//! answers from a script (e.g. 500, then 429 with `Retry-After: 1`, then 204), and records what
//! it got — so what was delivered is counted by the receiving end, not by the sender.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_webhooks::{Secret, SignedHeaders, Verifier, VerifyError};
use tokio::sync::watch;

/// One scripted answer: the status and an optional `Retry-After` in seconds.
pub type Answer = (u16, Option<u64>);

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The subscriber (path segment).
    pub subscriber: String,
    /// `webhook-id`, when sent.
    pub webhook_id: Option<String>,
    /// Whether the signature verified against the subscriber's secrets (and the timestamp was
    /// within 5 minutes); the reason when not.
    pub verified: Result<(), VerifyError>,
    /// The status the server answered.
    pub status: u16,
    /// The body, as received.
    pub body: String,
}

struct Endpoint {
    verifier: Verifier,
    script: Vec<Answer>,
}

#[derive(Default)]
struct Shared {
    endpoints: HashMap<String, Endpoint>,
    received: Vec<Received>,
}

/// The server; it stops when the shutdown signal it was started with becomes true.
#[derive(Clone)]
pub struct SubscriberServer {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for SubscriberServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl SubscriberServer {
    /// Starts the server on a free loopback port.
    ///
    /// # Errors
    /// The port cannot be bound.
    pub async fn start(mut shutdown: watch::Receiver<bool>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = axum::Router::new().route("/hooks/{subscriber}", axum::routing::post(receive)).with_state(shared.clone());
        tokio::spawn(async move {
            let stop = async move {
                while !*shutdown.borrow() {
                    if shutdown.changed().await.is_err() {
                        return;
                    }
                }
            };
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
                tracing::warn!(error = %e, "the local webhook subscriber stopped");
            }
        });
        Ok(Self { addr, shared })
    }

    /// Adds endpoint `subscriber`, verifying with `secrets` and answering `script` in order (the
    /// last answer repeats; an empty script answers 204); returns its URL.
    pub fn add(&self, subscriber: &str, secrets: Vec<Secret>, script: Vec<Answer>) -> String {
        let endpoint = Endpoint { verifier: Verifier::new(secrets), script };
        self.lock().endpoints.insert(subscriber.to_owned(), endpoint);
        format!("http://{}/hooks/{subscriber}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// The requests received for `subscriber`, in order.
    pub fn received_by(&self, subscriber: &str) -> Vec<Received> {
        self.lock().received.iter().filter(|r| r.subscriber == subscriber).cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // A poisoned lock only means a handler panicked mid-update; the records stay usable.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn receive(State(shared): State<Arc<Mutex<Shared>>>, Path(subscriber): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
    let get = |name: &'static str| headers.get(name).and_then(|v| v.to_str().ok());
    let signed = SignedHeaders::from_fn(get);
    let Some(endpoint) = shared.endpoints.get_mut(&subscriber) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let verified = endpoint.verifier.verify(&signed, &body, chrono::Utc::now().timestamp()).map(|_| ());
    // A request that does not verify is refused, as a subscriber must; the script is not used up.
    let (status, retry_after) = match (&verified, endpoint.script.len()) {
        (Err(_), _) => (401, None),
        (Ok(()), 0) => (204, None),
        (Ok(()), 1) => endpoint.script[0],
        (Ok(()), _) => endpoint.script.remove(0),
    };
    let received =
        Received { subscriber, webhook_id: signed.id.map(str::to_owned), verified, status, body: String::from_utf8_lossy(&body).into_owned() };
    shared.received.push(received);
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, format!("local subscriber answered {}", status.as_u16())).into_response();
    if let Some(seconds) = retry_after {
        response.headers_mut().insert("retry-after", HeaderValue::from(seconds));
    }
    response
}
