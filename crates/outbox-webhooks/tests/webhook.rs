//! The webhook delivery core against a real local HTTP server: every outcome by status code,
//! the signed request as a partner sees it, timeouts and refused connections, and the crash
//! between the POST and its record.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use outbox::envelope::EventMetadata;
use outbox::inbox::MemoryInbox;
use outbox::inbox::{Claim, InboxError, InboxOutcome, InboxStore, Lease};
use outbox_webhooks::client::{ClientConfig, WebhookClient};
use outbox_webhooks::dispatcher::{Decision, Deliverer, Subscriber, WebhookEvent};
use outbox_webhooks::{RetrySchedule, Secret, SignedHeaders, Verifier};

/// One scripted answer: status, extra headers, body, delay before answering.
#[derive(Clone)]
struct Answer(u16, Vec<(&'static str, &'static str)>, String, Duration);

fn answer(status: u16) -> Answer {
    Answer(status, vec![], String::new(), Duration::ZERO)
}

#[derive(Clone, Default)]
struct Server {
    script: Arc<Mutex<Vec<Answer>>>,
    seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

impl Server {
    /// Serves `script` (the last answer repeats) on a free local port.
    async fn start(script: Vec<Answer>) -> (Self, String) {
        let server = Server { script: Arc::new(Mutex::new(script)), ..Default::default() };
        let app = axum::Router::new().route("/hook", axum::routing::post(handle)).with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, format!("http://{addr}/hook"))
    }

    fn requests(&self) -> Vec<(HeaderMap, Bytes)> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(State(server): State<Server>, headers: HeaderMap, body: Bytes) -> Response {
    server.seen.lock().unwrap().push((headers, body));
    let Answer(status, extra, body, delay) = {
        let mut script = server.script.lock().unwrap();
        if script.len() > 1 {
            script.remove(0)
        } else {
            script[0].clone()
        }
    };
    tokio::time::sleep(delay).await;
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    for (k, v) in extra {
        response.headers_mut().insert(k, v.parse().unwrap());
    }
    response
}

const BODY: &str = r#"{"metadata":{"id":"evt-1","type":"OrderCreated","version":1,"source":"example.orders","time":"2026-12-01T06:00:00.000Z","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"corr-1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"k=v"},"data":{"order_id":"o-1","total_cents":1250}}"#;

fn event() -> WebhookEvent {
    let bus_event = format!(
        r#"{{"version":"0","id":"bus-1","detail-type":"OrderCreated","source":"example.orders","time":"2026-12-01T06:00:00Z","region":"us-east-1","resources":[],"detail":{BODY}}}"#
    );
    WebhookEvent::parse(&bus_event).unwrap()
}

fn subscriber(url: &str) -> Subscriber {
    Subscriber::new("partner-a", url, vec!["OrderCreated".into()], "s")
}

fn deliverer<S: InboxStore>(inbox: S, timeout: Duration) -> Deliverer<S> {
    let mut config = ClientConfig::default();
    config.allow_http = true;
    config.timeout = timeout;
    // 4 attempts: 3 delays, without jitter.
    let mut schedule = RetrySchedule::new([5, 10, 20].map(Duration::from_secs).to_vec());
    schedule.jitter = 0.0;
    Deliverer::new(WebhookClient::new(&config).unwrap(), inbox, schedule)
}

fn lease() -> DateTime<Utc> {
    Utc::now() + chrono::Duration::seconds(60)
}

#[tokio::test]
async fn a_2xx_is_delivered_signed_verbatim_and_recorded_once() {
    let (server, url) = Server::start(vec![answer(204)]).await;
    let d = deliverer(MemoryInbox::new("webhook-dispatcher"), Duration::from_secs(10));
    let secrets = vec![Secret::generate(), Secret::generate()];
    let decision = d.deliver(&subscriber(&url), &secrets, &event(), 1, lease(), Some("Root=1-abc")).await;
    assert!(matches!(decision, Decision::Delivered { status: 204, .. }), "{decision:?}");
    // A redelivery of the same (event, subscriber) sends nothing.
    assert_eq!(d.deliver(&subscriber(&url), &secrets, &event(), 2, lease(), None).await, Decision::AlreadyDelivered);
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    assert_eq!(body.as_ref(), BODY.as_bytes(), "the body is the detail, verbatim");
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    assert_eq!(get("webhook-id").as_deref(), Some("evt-1"));
    assert_eq!(get("content-type").as_deref(), Some("application/json"));
    assert_eq!(get("x-correlation-id").as_deref(), Some("corr-1"));
    assert_eq!(get("x-amzn-trace-id").as_deref(), Some("Root=1-abc"));
    // The event's trace, one hop on: its trace id and tracestate, a parent id for this delivery.
    let traceparent = get("traceparent").expect("a traceparent");
    assert!(traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && traceparent.ends_with("-01"), "{traceparent}");
    assert_ne!(traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    assert_eq!(get("tracestate").as_deref(), Some("k=v"));
    let (id, ts, sig) = (get("webhook-id").unwrap(), get("webhook-timestamp").unwrap(), get("webhook-signature").unwrap());
    assert_eq!(sig.split(' ').count(), 2, "one signature per current secret");
    let now = Utc::now().timestamp();
    for secret in &secrets {
        let signed = SignedHeaders::new(Some(&id), Some(&ts), Some(&sig));
        assert_eq!(Verifier::new(vec![secret.clone()]).verify(&signed, body, now), Ok("evt-1"));
    }
    assert!(d.inbox().contains("partner-a#evt-1"), "the delivery is recorded per (subscriber, event)");
}

#[tokio::test]
async fn retryable_answers_back_off_and_honour_retry_after() {
    let (server, url) = Server::start(vec![
        answer(500),
        Answer(429, vec![("retry-after", "120")], String::new(), Duration::ZERO),
        answer(408),
        answer(503),
        answer(200),
    ])
    .await;
    let d = deliverer(MemoryInbox::new("webhook-dispatcher"), Duration::from_secs(10));
    let s = subscriber(&url);
    let secrets = vec![Secret::generate()];
    let mut decisions = Vec::new();
    for receive in 1..=3 {
        decisions.push(d.deliver(&s, &secrets, &event(), receive, lease(), None).await);
    }
    assert_eq!(
        decisions,
        [
            Decision::Retry { delay: Duration::from_secs(5), reason: "HTTP 500".into() },
            Decision::Retry { delay: Duration::from_secs(120), reason: "HTTP 429".into() },
            Decision::Retry { delay: Duration::from_secs(20), reason: "HTTP 408".into() },
        ]
    );
    // The 4th receive is the last allowed attempt (max 4): a 503 then dead-letters.
    let last = d.deliver(&s, &secrets, &event(), 4, lease(), None).await;
    assert_eq!(
        last,
        Decision::DeadLetter { code: "WebhookRetriesExhausted", reason: "gave up after 4 attempts; last: HTTP 503".into(), disable: false }
    );
    assert!(!d.inbox().contains("partner-a#evt-1"), "nothing is recorded for an undelivered event");
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn permanent_answers_dead_letter_at_once_with_status_and_one_kib_of_body() {
    let long = "x".repeat(3000);
    let (_server, url) = Server::start(vec![Answer(422, vec![], long, Duration::ZERO)]).await;
    let d = deliverer(MemoryInbox::new("w"), Duration::from_secs(10));
    let decision = d.deliver(&subscriber(&url), &[Secret::generate()], &event(), 1, lease(), None).await;
    let Decision::DeadLetter { code, reason, disable } = decision else { panic!("{decision:?}") };
    assert_eq!((code, disable), ("WebhookRejected", false));
    assert_eq!(reason, format!("HTTP 422: {}", "x".repeat(1024)));

    let (_server, url) = Server::start(vec![Answer(410, vec![], "unsubscribed".into(), Duration::ZERO)]).await;
    let decision = d.deliver(&subscriber(&url), &[Secret::generate()], &event(), 1, lease(), None).await;
    assert!(matches!(decision, Decision::DeadLetter { code: "WebhookGone", disable: true, .. }), "{decision:?}");

    // A redirect is not followed (to this host or another): the signed body stays with the subscriber.
    let (target, target_url) = Server::start(vec![answer(200)]).await;
    let (_server, url) = Server::start(vec![Answer(307, vec![("location", "http://127.0.0.1:9/elsewhere")], String::new(), Duration::ZERO)]).await;
    let decision = d.deliver(&subscriber(&url), &[Secret::generate()], &event(), 1, lease(), None).await;
    assert!(matches!(decision, Decision::DeadLetter { code: "WebhookRejected", ref reason, .. } if reason.starts_with("HTTP 307")), "{decision:?}");
    assert!(target.requests().is_empty(), "{target_url} was never called");
}

#[tokio::test]
async fn timeouts_refused_connections_and_plain_http_on_aws() {
    let (_server, url) = Server::start(vec![Answer(200, vec![], String::new(), Duration::from_secs(5))]).await;
    let d = deliverer(MemoryInbox::new("w"), Duration::from_millis(200));
    let decision = d.deliver(&subscriber(&url), &[Secret::generate()], &event(), 1, lease(), None).await;
    assert!(matches!(decision, Decision::Retry { ref reason, .. } if reason.starts_with("timeout")), "{decision:?}");

    // A port nothing listens on (bound, then closed).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/hook", listener.local_addr().unwrap());
    drop(listener);
    let decision = d.deliver(&subscriber(&closed), &[Secret::generate()], &event(), 1, lease(), None).await;
    assert!(matches!(decision, Decision::Retry { ref reason, .. } if reason.starts_with("connection error")), "{decision:?}");

    let strict = Deliverer::new(WebhookClient::new(&ClientConfig::default()).unwrap(), MemoryInbox::new("w"), RetrySchedule::default());
    let decision = strict.deliver(&subscriber(&url), &[Secret::generate()], &event(), 1, lease(), None).await;
    assert!(matches!(decision, Decision::DeadLetter { code: "WebhookRejected", ref reason, .. } if reason.contains("only https")), "{decision:?}");
}

/// A store whose first `complete` fails as if the invocation died right after the POST.
struct CrashBeforeRecord {
    inner: MemoryInbox,
    crashed: Mutex<bool>,
}

impl InboxStore for CrashBeforeRecord {
    fn consumer(&self) -> &str {
        self.inner.consumer()
    }
    fn apply(
        &self,
        metadata: &EventMetadata,
        payload_hash: &outbox::inbox::PayloadHash,
        writes: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> impl std::future::Future<Output = Result<InboxOutcome, InboxError>> + Send {
        self.inner.apply(metadata, payload_hash, writes)
    }
    fn begin(
        &self,
        metadata: &EventMetadata,
        payload_hash: &outbox::inbox::PayloadHash,
        lease_until: DateTime<Utc>,
    ) -> impl std::future::Future<Output = Result<Claim, InboxError>> + Send {
        self.inner.begin(metadata, payload_hash, lease_until)
    }
    async fn complete(&self, lease: &Lease, result: Option<&str>) -> Result<(), InboxError> {
        let first = std::mem::replace(&mut *self.crashed.lock().unwrap(), true);
        if !first {
            let died = outbox::AwsError::new("UpdateItem", outbox::AwsErrorKind::Dispatch, true, "the invocation died");
            return Err(InboxError::Sdk { action: "complete", error: died });
        }
        self.inner.complete(lease, result).await
    }
    fn release(&self, lease: &Lease) -> impl std::future::Future<Output = Result<(), InboxError>> + Send {
        self.inner.release(lease)
    }
}

#[tokio::test]
async fn a_crash_between_post_and_record_costs_at_most_one_extra_post_and_one_record() {
    let (server, url) = Server::start(vec![answer(200)]).await;
    let store = CrashBeforeRecord { inner: MemoryInbox::new("webhook-dispatcher"), crashed: Mutex::new(false) };
    let d = deliverer(store, Duration::from_secs(10));
    let s = subscriber(&url);
    let secrets = vec![Secret::generate()];
    // The crashed invocation's lease ended (its deadline passed): the redelivery takes the claim over.
    let ended = Utc::now() - chrono::Duration::seconds(1);
    let first = d.deliver(&s, &secrets, &event(), 1, ended, None).await;
    assert!(matches!(first, Decision::Retry { .. }), "{first:?}");
    let second = d.deliver(&s, &secrets, &event(), 2, lease(), None).await;
    assert!(matches!(second, Decision::Delivered { status: 200, .. }), "{second:?}");
    assert_eq!(d.deliver(&s, &secrets, &event(), 3, lease(), None).await, Decision::AlreadyDelivered);
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "one extra POST, no more");
    let ids: Vec<_> = seen.iter().map(|(h, _)| h.get("webhook-id").cloned()).collect();
    assert_eq!(ids[0], ids[1], "both carry the same webhook-id, so the receiver dedupes");
}

#[test]
fn messages_that_are_not_bus_events_are_named() {
    assert!(WebhookEvent::parse("not json").is_err());
    let err = WebhookEvent::parse(r#"{"detail":{"data":{}}}"#).unwrap_err();
    assert!(err.to_string().contains("metadata"), "{err}");
    let s = subscriber("https://x");
    assert!(s.wants("OrderCreated") && !s.wants("OrderPaid"));
    let mut all = s.clone();
    all.event_types = vec!["*".into()];
    assert!(all.wants("OrderPaid"));
    all.enabled = false;
    assert!(!all.wants("OrderPaid"));
}

const BIG_METADATA: &str = r#"{"id":"evt-big","type":"OrderCreated","version":1,"source":"example.orders","time":"2026-12-01T06:00:00.000Z","subject":"o-9","aggregate_type":"Order","sequence":1,"correlation_id":"corr-9"}"#;

/// The bus event of a claim-checked payload: `detail.data_ref`, no `detail.data`.
fn claim_checked() -> WebhookEvent {
    let data_ref = r#"{"bucket":"payloads","key":"outbox/evt-big","size":27,"sha256":"00"}"#;
    let bus_event =
        format!(r#"{{"version":"0","id":"bus-9","detail-type":"OrderCreated","detail":{{"metadata":{BIG_METADATA},"data_ref":{data_ref}}}}}"#);
    WebhookEvent::parse(&bus_event).unwrap()
}

/// A claim-checked event is an event, not a malformed message; with its payload put inline the
/// subscriber's body is the metadata as the producer wrote it and the payload as `data`, never
/// the S3 reference. `"data": null` is a payload; a detail with neither or both is named.
#[test]
fn a_claim_checked_event_is_read_and_its_payload_put_inline() {
    let event = claim_checked();
    let reference = event.data_ref.clone().expect("the reference is kept");
    assert_eq!((reference.key.as_str(), reference.size), ("outbox/evt-big", 27));
    assert_eq!(event.metadata.id, "evt-big");

    let inline = event.with_payload(br#"{"order_id":"o-9","n":[1,2]}"#).unwrap();
    assert_eq!(inline.data_ref, None);
    assert_eq!(inline.body, format!(r#"{{"metadata":{BIG_METADATA},"data":{{"order_id":"o-9","n":[1,2]}}}}"#));
    assert!(!inline.body.contains("data_ref") && !inline.body.contains("payloads"), "{}", inline.body);
    let err = event.with_payload(b"not json").unwrap_err();
    assert!(err.to_string().contains("not JSON"), "{err}");

    let detail = |d: &str| WebhookEvent::parse(&format!(r#"{{"detail":{d}}}"#));
    let null = detail(&format!(r#"{{"metadata":{BIG_METADATA},"data":null}}"#)).expect("a null payload is a payload");
    assert_eq!(null.data_ref, None);
    let err = detail(&format!(r#"{{"metadata":{BIG_METADATA}}}"#)).unwrap_err();
    assert!(err.to_string().contains("neither `data` nor `data_ref`"), "{err}");
    let both = format!(r#"{{"metadata":{BIG_METADATA},"data":{{}},"data_ref":{{"bucket":"b","key":"k","size":2,"sha256":"00"}}}}"#);
    let err = detail(&both).unwrap_err();
    assert!(err.to_string().contains("both `data` and `data_ref`"), "{err}");
    assert_eq!(self::event().data_ref, None, "an inline event stays as it was");
}

/// Delivering a claim-checked event: the payload is fetched only when a request is about to be
/// sent (a delivery the inbox holds reads nothing), the subscriber gets it inline and signed; a
/// transient fetch failure backs off like a 5xx and gives up after the last attempt; a
/// permanent one dead-letters with its code, sending nothing; without a fetcher, the event is
/// dead-lettered `WebhookClaimCheckUnavailable`.
#[tokio::test]
async fn a_claim_checked_delivery_fetches_only_to_send_and_fails_like_any_attempt() {
    use outbox_webhooks::dispatcher::Unresolved;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (server, url) = Server::start(vec![answer(200)]).await;
    let d = deliverer(MemoryInbox::new("webhook-dispatcher"), Duration::from_secs(10));
    let secrets = vec![Secret::generate()];
    let event = claim_checked();
    let payload = br#"{"order_id":"o-9","attachment":"xyz"}"#;
    let fetches = AtomicUsize::new(0);
    let fetch = || async {
        fetches.fetch_add(1, Ordering::SeqCst);
        event.with_payload(payload).map_err(Unresolved::from)
    };
    let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, fetch, 1, lease(), None).await;
    assert!(matches!(decision, Decision::Delivered { status: 200, .. }), "{decision:?}");
    let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, fetch, 2, lease(), None).await;
    assert_eq!(decision, Decision::AlreadyDelivered);
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "a redelivery of a recorded delivery reads nothing from S3");
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let (headers, body) = &seen[0];
    let expected = format!(r#"{{"metadata":{BIG_METADATA},"data":{}}}"#, std::str::from_utf8(payload).unwrap());
    assert_eq!(body.as_ref(), expected.as_bytes(), "the payload inline, never the reference");
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (id, ts, sig) = (get("webhook-id").unwrap(), get("webhook-timestamp").unwrap(), get("webhook-signature").unwrap());
    let signed = SignedHeaders::new(Some(&id), Some(&ts), Some(&sig));
    assert_eq!(Verifier::new(secrets.clone()).verify(&signed, body, Utc::now().timestamp()), Ok("evt-big"), "signed over the inline body");

    let (server, url) = Server::start(vec![answer(200)]).await;
    let d = deliverer(MemoryInbox::new("webhook-dispatcher"), Duration::from_secs(10));
    #[cfg(feature = "claim-check")]
    {
        use outbox::claim_check::ClaimCheckError;
        // S3 unavailable: retried with the backoff, then given up with a reason; nothing recorded, nothing sent.
        let cut = || ClaimCheckError::Read { bucket: "payloads".into(), key: "outbox/evt-big".into(), reason: "connection reset".into() };
        let reason = cut().to_string();
        let unavailable = || async { Err(Unresolved::from(cut())) };
        let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, unavailable, 1, lease(), None).await;
        assert_eq!(decision, Decision::Retry { delay: Duration::from_secs(5), reason: reason.clone() });
        let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, unavailable, 4, lease(), None).await;
        assert_eq!(
            decision,
            Decision::DeadLetter { code: "WebhookRetriesExhausted", reason: format!("gave up after 4 attempts; last: {reason}"), disable: false }
        );
        // The object is gone: dead-lettered at once with its code, the claim check's error kept, typed.
        let gone = || ClaimCheckError::Missing { bucket: "payloads".into(), key: "outbox/evt-big".into() };
        let error = Unresolved::from(gone());
        assert!(!error.is_retryable() && error.code() == "PayloadMissing");
        assert!(matches!(error, Unresolved::Fetch(ClaimCheckError::Missing { .. })), "the claim check's error, typed: {error:?}");
        let missing = || async { Err(Unresolved::from(gone())) };
        let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, missing, 1, lease(), None).await;
        assert_eq!(decision, Decision::DeadLetter { code: "PayloadMissing", reason: gone().to_string(), disable: false });
    }
    // The payload fetched is not JSON: dead-lettered at once `PayloadCorrupt`, the JSON error kept as the source.
    let corrupt = event.with_payload(b"not json").map_err(Unresolved::from).unwrap_err();
    assert!(!corrupt.is_retryable() && corrupt.code() == "PayloadCorrupt");
    assert!(std::error::Error::source(&corrupt).is_some_and(|e| e.is::<serde_json::Error>()), "{corrupt:?}");
    let reason = corrupt.to_string();
    assert!(reason.contains("the claim-checked payload is not JSON"), "{reason}");
    let not_json = || async { event.with_payload(b"not json").map_err(Unresolved::from) };
    let decision = d.deliver_resolved(&subscriber(&url), &secrets, &event, not_json, 1, lease(), None).await;
    assert_eq!(decision, Decision::DeadLetter { code: "PayloadCorrupt", reason, disable: false });
    // No claim check configured.
    let decision = d.deliver(&subscriber(&url), &secrets, &event, 1, lease(), None).await;
    assert!(
        matches!(decision, Decision::DeadLetter { code: "WebhookClaimCheckUnavailable", ref reason, .. } if reason.contains("s3://payloads/outbox/evt-big")),
        "{decision:?}"
    );
    assert!(server.requests().is_empty(), "nothing is sent without the payload");
    assert!(!d.inbox().contains("webhook-dispatcher#evt-big") && !d.inbox().contains("partner-a#evt-big"), "nothing recorded");
}

/// A subscriber that answers every request with `status` and a body that never ends (chunked,
/// 16 KiB chunks, stopped only when the client goes away or after 1 GiB); counts the bytes it
/// managed to send.
async fn endless_subscriber(status: u16, sent: Arc<std::sync::atomic::AtomicUsize>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let sent = sent.clone();
            tokio::spawn(async move {
                // The request: its head, then as many body bytes as its content-length says.
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                let body_end = loop {
                    let Ok(n) = socket.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let Some(head_end) = request.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4) else { continue };
                    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
                    let length: usize = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
                    if request.len() >= head_end + length {
                        break head_end + length;
                    }
                };
                assert!(request.len() >= body_end);
                let head = format!("HTTP/1.1 {status} Whatever\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n");
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("4000\r\n{}\r\n", "e".repeat(0x4000));
                while sent.load(std::sync::atomic::Ordering::SeqCst) < 1 << 30 {
                    if socket.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                    sent.fetch_add(0x4000, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    format!("http://{addr}/hook")
}

/// The client reads at most `READ_LIMIT_BYTES` of a subscriber's answer and drops the connection:
/// an endless body neither holds the attempt until its timeout nor fills the dispatcher's memory.
#[tokio::test]
async fn an_endless_answer_body_is_read_only_up_to_the_cap() {
    use outbox_webhooks::client::{SignedPost, READ_LIMIT_BYTES};
    use std::sync::atomic::{AtomicUsize, Ordering};
    for status in [200u16, 500] {
        let sent = Arc::new(AtomicUsize::new(0));
        let url = endless_subscriber(status, sent.clone()).await;
        let mut config = ClientConfig::default();
        config.allow_http = true;
        config.timeout = Duration::from_secs(60);
        let client = WebhookClient::new(&config).unwrap();
        let secrets = [Secret::generate()];
        let post = SignedPost::new(&url, "evt-1", BODY, &secrets);
        let attempt = client.post(&post, Utc::now().timestamp(), None).await;
        // The answer's status, not a time-out: the body was not read to its (non-existent) end.
        assert_eq!(attempt.status, status, "{attempt:?}");
        assert!(attempt.excerpt.len() <= 1024 && attempt.excerpt.starts_with("eeee"), "{:?}", attempt.excerpt);
        // Once the client dropped the connection, the subscriber's writes fail: what it sent stays
        // bounded by the cap plus the socket buffers, far from the 1 GiB it would send to a reader.
        let mut last = sent.load(Ordering::SeqCst);
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = sent.load(Ordering::SeqCst);
            if now == last {
                break;
            }
            last = now;
        }
        assert!(last < 64 << 20, "the subscriber sent {last} bytes; the client reads {READ_LIMIT_BYTES}");
    }
}

/// A subscriber URL that is not a URL is refused with the parser's error kept as the source; a
/// plain `http` one is refused by its scheme.
#[test]
fn a_url_that_is_not_one_keeps_the_parse_error() {
    use outbox_webhooks::client::UrlError;
    let client = WebhookClient::new(&ClientConfig::default()).unwrap();
    let err = client.check_url("not a url").unwrap_err();
    assert!(matches!(err, UrlError::Invalid { ref url, .. } if url == "not a url"), "{err:?}");
    assert!(std::error::Error::source(&err).is_some(), "{err:?}");
    assert!(err.to_string().starts_with("not a URL: not a url: "), "{err}");
    assert!(matches!(client.check_url("http://localhost/"), Err(UrlError::Scheme(ref s)) if s == "http"));
}
