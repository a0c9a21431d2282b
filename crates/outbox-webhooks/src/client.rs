//! One delivery attempt: a signed `POST` of the event's `detail` to a subscriber (feature
//! `webhook-dispatcher`).
//!
//! * headers `webhook-id`, `webhook-timestamp` (this attempt's time), `webhook-signature` (one
//!   signature per current secret), `content-type: application/json`, `x-correlation-id`,
//!   when the invocation has one, `x-amzn-trace-id`, and when the event has one, the W3C
//!   `traceparent` (the event's trace id, a new parent id per delivery) and `tracestate`;
//! * a connect timeout and a timeout on the whole request (both count as retryable);
//! * redirects are never followed (a 3xx is a rejection: a subscriber cannot send our signed
//!   body to another host);
//! * only `https` URLs, unless [`ClientConfig::allow_http`] is set (local runs and tests);
//! * at most [`READ_LIMIT_BYTES`] (4 KiB) of an answer's body is read: the rest is never
//!   downloaded (a subscriber cannot make the dispatcher read megabytes), and the attempt keeps
//!   an excerpt of [`super::outcome::BODY_EXCERPT_BYTES`] (1 KiB).

use std::time::{Duration, Instant};

use super::outcome::Outcome;
use super::signature::{signature_header, Secret, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

/// Settings of the HTTP client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Time to establish the connection (TCP + TLS). Default 3 s.
    pub connect_timeout: Duration,
    /// Time for the whole request, connection to last byte of the answer. Default 10 s.
    pub timeout: Duration,
    /// Accept `http://` URLs. Default `false`; set only locally and in tests.
    pub allow_http: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self { connect_timeout: Duration::from_secs(3), timeout: Duration::from_secs(10), allow_http: false }
    }
}

/// A subscriber URL that may not be called.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not a URL.
    #[error("not a URL: {url}: {source}")]
    Invalid {
        /// The text given.
        url: String,
        /// Why it is not a URL.
        #[source]
        source: UrlParseError,
    },
    /// Not `https` (and `http` not allowed).
    #[error("only https URLs are accepted, not {0} (plain http needs WEBHOOK_ALLOW_HTTP, for local runs only)")]
    Scheme(String),
}

/// Why a URL could not be parsed (the `url` crate's `ParseError`, which reqwest's [`reqwest::Url`] is).
pub type UrlParseError = <reqwest::Url as std::str::FromStr>::Err;

/// Building the client failed (TLS setup).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the webhook HTTP client: {0}")]
pub struct ClientBuildError(#[source] reqwest::Error);

/// What one attempt sends.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct SignedPost<'a> {
    /// Subscriber URL.
    pub url: &'a str,
    /// `webhook-id`: the event id.
    pub id: &'a str,
    /// The body, verbatim (the event's `detail`).
    pub body: &'a str,
    /// The subscriber's current secrets (each signs).
    pub secrets: &'a [Secret],
    /// `x-correlation-id`.
    pub correlation_id: Option<&'a str>,
    /// `x-amzn-trace-id`.
    pub trace_header: Option<&'a str>,
    /// `traceparent` (W3C Trace Context: the event's trace, a new parent id per delivery), so the
    /// partner's tracing continues the producer's trace.
    pub traceparent: Option<&'a str>,
    /// `tracestate`, verbatim beside `traceparent`.
    pub tracestate: Option<&'a str>,
}

impl<'a> SignedPost<'a> {
    /// A post of `body` to `url` as event `id`, signed with each of `secrets`, without
    /// correlation id or trace headers (the public fields take them).
    pub fn new(url: &'a str, id: &'a str, body: &'a str, secrets: &'a [Secret]) -> Self {
        Self { url, id, body, secrets, correlation_id: None, trace_header: None, traceparent: None, tracestate: None }
    }
}

/// The most of an answer's body the client reads: 4 KiB.
pub const READ_LIMIT_BYTES: usize = 4096;

/// What one attempt got.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The answer's meaning.
    pub outcome: Outcome,
    /// Time from sending to the end of the answer (or the error).
    pub latency: Duration,
    /// The `webhook-timestamp` sent, epoch seconds.
    pub timestamp: i64,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// The first 1 KiB of the answer's body, or the transport error.
    pub excerpt: String,
}

/// The HTTP client of webhook deliveries (cheap to clone; share one per function).
#[derive(Debug, Clone)]
pub struct WebhookClient {
    http: reqwest::Client,
    allow_http: bool,
    timeout: Duration,
}

impl WebhookClient {
    /// Builds the client.
    ///
    /// # Errors
    /// [`ClientBuildError`] when the TLS backend cannot start.
    pub fn new(config: &ClientConfig) -> Result<Self, ClientBuildError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("outbox-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ClientBuildError)?;
        Ok(Self { http, allow_http: config.allow_http, timeout: config.timeout })
    }

    /// Checks that `url` may be called.
    ///
    /// # Errors
    /// [`UrlError`].
    pub fn check_url(&self, url: &str) -> Result<reqwest::Url, UrlError> {
        let parsed = reqwest::Url::parse(url).map_err(|source| UrlError::Invalid { url: url.to_owned(), source })?;
        match parsed.scheme() {
            "https" => Ok(parsed),
            "http" if self.allow_http => Ok(parsed),
            other => Err(UrlError::Scheme(other.to_owned())),
        }
    }

    /// Sends one signed attempt, timestamped `now` (epoch seconds), and classifies the answer.
    /// A URL that may not be called is a [`Outcome::Rejected`] with status 0. `timeout`, when
    /// given, shortens the client's whole-request timeout for this attempt (the invocation's
    /// time left).
    pub async fn post(&self, request: &SignedPost<'_>, now: i64, timeout: Option<Duration>) -> Attempt {
        let started = Instant::now();
        let url = match self.check_url(request.url) {
            Ok(url) => url,
            Err(e) => {
                let body = e.to_string();
                return Attempt {
                    outcome: Outcome::Rejected { status: 0, body: body.clone() },
                    latency: Duration::ZERO,
                    timestamp: now,
                    status: 0,
                    excerpt: body,
                };
            }
        };
        let mut builder = self
            .http
            .post(url)
            .header(WEBHOOK_ID, request.id)
            .header(WEBHOOK_TIMESTAMP, now.to_string())
            .header(WEBHOOK_SIGNATURE, signature_header(request.secrets, request.id, now, request.body.as_bytes()))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(request.body.to_owned());
        if let Some(correlation_id) = request.correlation_id {
            builder = builder.header("x-correlation-id", correlation_id);
        }
        if let Some(trace) = request.trace_header {
            builder = builder.header("x-amzn-trace-id", trace);
        }
        if let Some(traceparent) = request.traceparent {
            builder = builder.header("traceparent", traceparent);
            if let Some(tracestate) = request.tracestate {
                builder = builder.header("tracestate", tracestate);
            }
        }
        if let Some(timeout) = timeout {
            // A request timeout replaces the client's: the shorter of the two.
            builder = builder.timeout(timeout.min(self.timeout));
        }
        let (outcome, status, excerpt) = match builder.send().await {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| super::backoff::parse_retry_after(v, chrono::Utc::now()));
                // At most READ_LIMIT_BYTES; a body that fails to arrive still has its status.
                let mut body = Vec::new();
                while body.len() < READ_LIMIT_BYTES {
                    match response.chunk().await {
                        Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(READ_LIMIT_BYTES - body.len())]),
                        Ok(None) | Err(_) => break,
                    }
                }
                (Outcome::from_status(status, retry_after, &body), status, super::outcome::excerpt(&body))
            }
            Err(e) => {
                let reason = describe(&e);
                (Outcome::Retry { reason: reason.clone(), retry_after: None }, 0, reason)
            }
        };
        Attempt { outcome, latency: started.elapsed(), timestamp: now, status, excerpt }
    }
}

/// A transport error in a few words, with its innermost cause (e.g. `connection refused`).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection error"
    } else {
        "request error"
    };
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut innermost = None;
    while let Some(s) = source {
        innermost = Some(s.to_string());
        source = s.source();
    }
    match innermost {
        Some(cause) => format!("{kind}: {cause}"),
        None => kind.to_owned(),
    }
}
