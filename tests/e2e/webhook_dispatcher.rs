//! The webhook dispatcher on the emulator, the test playing the SQS event source mapping
//! (receive, invoke, delete what is not in `batchItemFailures`): an event fans out to one message
//! per subscriber; a 2xx is delivered once (a redelivery sends nothing); 500 and 429 are retried
//! by a re-enqueued copy for the next attempt until the subscriber answers 200; a 410 disables the
//! subscriber and a 400 dead-letters, both with a readable reason; secrets come from Secrets
//! Manager. A claim-checked event reaches its subscriber with the payload inline (fetched from
//! the emulator's S3 and verified); an altered object is dead-lettered `PayloadCorrupt`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Local;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox::inbox::Inbox;
use outbox_lambda::{Env, DEFAULT_RETENTION};
use outbox_webhooks::dispatcher::{DispatchReport, Dispatcher};
use outbox_webhooks::{Secret, SignedHeaders, Verifier};

/// `(status, Retry-After)` answers, in order.
type Script = Vec<(u16, Option<&'static str>)>;

/// A subscriber endpoint answering a script (the last answer repeats), recording what it got.
#[derive(Clone, Default)]
struct Endpoint {
    script: Arc<Mutex<Script>>,
    seen: Arc<Mutex<Vec<(HeaderMap, String)>>>,
}

impl Endpoint {
    async fn start(script: Script) -> (Self, String) {
        let endpoint = Endpoint { script: Arc::new(Mutex::new(script)), ..Default::default() };
        let state = endpoint.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let state = state.clone();
                async move {
                    state.seen.lock().unwrap().push((headers, body));
                    let (status, retry_after) = {
                        let mut script = state.script.lock().unwrap();
                        if script.len() > 1 {
                            script.remove(0)
                        } else {
                            script[0]
                        }
                    };
                    let mut response: Response = (StatusCode::from_u16(status).unwrap(), "answer body").into_response();
                    if let Some(seconds) = retry_after {
                        response.headers_mut().insert("retry-after", seconds.parse().unwrap());
                    }
                    response
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, url)
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

struct Harness {
    local: Local,
    dispatcher: Dispatcher<Inbox>,
    queue: String,
    dlq: String,
    subscribers: String,
}

impl Harness {
    /// Receives what is visible on `queue` (long-polling up to `wait`), as the ESM would hand it over.
    async fn receive(&self, queue: &str, wait: Duration) -> Vec<aws_sdk_sqs::types::Message> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let out = self
                .local
                .sqs
                .receive_message()
                .queue_url(queue)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
                .expect("ReceiveMessage");
            let messages = out.messages.unwrap_or_default();
            if !messages.is_empty() || tokio::time::Instant::now() >= deadline {
                return messages;
            }
        }
    }

    /// One invocation over `messages`; deletes the messages not reported as failures.
    async fn invoke(&self, messages: Vec<aws_sdk_sqs::types::Message>) -> (DispatchReport, usize) {
        let (report, failed) = self.invoke_until(messages, chrono::Utc::now() + chrono::Duration::seconds(30)).await;
        (report, failed.len())
    }

    /// [`Harness::invoke`] with the invocation's deadline; the ids in `batchItemFailures`.
    async fn invoke_until(
        &self,
        messages: Vec<aws_sdk_sqs::types::Message>,
        deadline: chrono::DateTime<chrono::Utc>,
    ) -> (DispatchReport, Vec<String>) {
        let mut event = SqsEvent::default();
        for m in &messages {
            let mut record = SqsMessage::default();
            record.message_id = m.message_id.clone();
            record.receipt_handle = m.receipt_handle.clone();
            record.body = m.body.clone();
            for (k, v) in m.attributes().into_iter().flatten() {
                record.attributes.insert(k.as_str().to_owned(), v.clone());
            }
            for (k, v) in m.message_attributes().into_iter().flatten() {
                let mut attribute = SqsMessageAttribute::default();
                attribute.string_value = v.string_value.clone();
                attribute.data_type = Some(v.data_type.clone());
                record.message_attributes.insert(k.clone(), attribute);
            }
            event.records.push(record);
        }
        let (response, report) = self.dispatcher.handle(&event, deadline).await;
        let failed: Vec<String> = response.batch_item_failures.iter().map(|f| f.item_identifier.clone()).collect();
        for m in &messages {
            if !failed.contains(m.message_id.as_ref().unwrap()) {
                self.local.sqs.delete_message().queue_url(&self.queue).receipt_handle(m.receipt_handle.clone().unwrap()).send().await.unwrap();
            }
        }
        (report, failed)
    }

    /// A per-subscriber message for `event_id`, as the fan-out sends it (plus `extra` attributes).
    async fn send_copy(&self, subscriber: &str, event_id: &str, extra: &[(&str, &str, String)]) {
        let attribute = |t: &str, v: String| aws_sdk_sqs::types::MessageAttributeValue::builder().data_type(t).string_value(v).build().unwrap();
        let mut send = self
            .local
            .sqs
            .send_message()
            .queue_url(&self.queue)
            .message_body(bus_event(event_id))
            .message_attributes("subscriber", attribute("String", subscriber.into()));
        for (name, data_type, value) in extra {
            send = send.message_attributes(*name, attribute(data_type, value.clone()));
        }
        send.send().await.expect("SendMessage");
    }

    /// Receives until `n` messages are in hand.
    async fn receive_n(&self, n: usize) -> Vec<aws_sdk_sqs::types::Message> {
        let mut got = Vec::new();
        while got.len() < n {
            let more = self.receive(&self.queue, Duration::from_secs(10)).await;
            assert!(!more.is_empty(), "only {} of {n} messages arrived", got.len());
            got.extend(more);
        }
        got
    }

    /// The breaker attributes of `subscriber`'s item.
    async fn breaker(&self, subscriber: &str) -> (Option<String>, Option<String>) {
        let item = self
            .local
            .dynamodb
            .get_item()
            .table_name(&self.subscribers)
            .key("id", AttributeValue::S(subscriber.into()))
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        let n = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).cloned();
        (n("breaker_failures"), n("breaker_open_until"))
    }
}

impl Harness {
    /// The dispatcher as `WebhookDispatcherFunction` builds it from the template's environment
    /// (plain http allowed, retries after 1 s then 2 s), on a fresh stack.
    async fn start() -> (Self, Env) {
        Self::start_with(&[]).await
    }

    /// [`Harness::start`] with more settings.
    async fn start_with(settings: &[(&str, &str)]) -> (Self, Env) {
        let local = Local::start().await;
        let mut env = local.env_of("Webhooks/WebhookDispatcherFunction");
        env.insert("WEBHOOK_ALLOW_HTTP".into(), "true".into());
        env.insert("WEBHOOK_RETRY_SCHEDULE".into(), "1,2,2,2,2,2,2".into());
        for (k, v) in settings {
            env.insert((*k).into(), (*v).into());
        }
        let config = outbox_lambda::webhooks::dispatcher_config(&Env::from_map(env.clone())).expect("the dispatcher's settings");
        let inbox = Inbox::new(local.dynamodb.clone(), env["INBOX_TABLE"].clone(), "webhook-dispatcher", DEFAULT_RETENTION);
        let dispatcher = Dispatcher::new(&local.runtime.sdk, inbox, config).expect("a dispatcher");
        let h = Harness {
            queue: env["WEBHOOK_DELIVERY_QUEUE_URL"].clone(),
            dlq: env["WEBHOOK_DLQ_URL"].clone(),
            subscribers: env["WEBHOOK_SUBSCRIBERS_TABLE"].clone(),
            dispatcher,
            local,
        };
        (h, Env::from_map(env))
    }

    /// Fans `bus_event` out and hands over the `n` per-subscriber messages in one invocation.
    async fn deliver(&self, bus_event: &str, n: usize) -> DispatchReport {
        self.local.sqs.send_message().queue_url(&self.queue).message_body(bus_event).send().await.expect("SendMessage");
        let (report, _) = self.invoke(self.receive(&self.queue, Duration::from_secs(5)).await).await;
        assert_eq!(report.fan_out_messages, n, "{report:?}");
        let mut fanned = Vec::new();
        while fanned.len() < n {
            let got = self.receive(&self.queue, Duration::from_secs(5)).await;
            assert!(!got.is_empty(), "only {} of {n} fanned-out messages arrived", fanned.len());
            fanned.extend(got);
        }
        self.invoke(fanned).await.0
    }

    /// A secret (one `whsec_`) named `<stack>-webhook-<name>` in Secrets Manager.
    async fn secret(&self, name: &str) -> (Secret, String) {
        let secret = Secret::generate();
        let secret_name = format!("{}-webhook-{name}", self.local.stack_name);
        let secrets = aws_sdk_secretsmanager::Client::new(&self.local.runtime.sdk);
        secrets.create_secret().name(&secret_name).secret_string(secret.to_whsec()).send().await.expect("CreateSecret");
        (secret, secret_name)
    }

    /// `(subscriber, ERROR_CODE, ERROR_MESSAGE)` of the dead letters, sorted.
    async fn dead_letters(&self) -> Vec<(String, String, String)> {
        let dead = self.receive(&self.dlq, Duration::from_secs(5)).await;
        let mut reasons: Vec<(String, String, String)> = dead
            .iter()
            .map(|m| {
                let a = m.message_attributes().cloned().unwrap_or_default();
                let text = |k: &str| a.get(k).and_then(|v| v.string_value.clone()).unwrap_or_default();
                (text("subscriber"), text("ERROR_CODE"), text("ERROR_MESSAGE"))
            })
            .collect();
        reasons.sort();
        reasons
    }
}

/// A bus event (the sample's shape) with its own event id.
fn bus_event(event_id: &str) -> String {
    let text = std::fs::read_to_string(crate::common::root().join("events/order-created.json")).expect("events/order-created.json");
    let mut event: serde_json::Value = serde_json::from_str(&text).unwrap();
    event["detail"]["metadata"]["id"] = serde_json::json!(event_id);
    event.to_string()
}

/// An endpoint that accepts connections and never answers; records when each connection was
/// closed by the client (its request's time-out).
async fn black_hole() -> (Arc<Mutex<Vec<std::time::Instant>>>, String) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let closed = Arc::new(Mutex::new(Vec::new()));
    let record = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                record.lock().unwrap().push(std::time::Instant::now());
            });
        }
    });
    (closed, url)
}

/// A batch with black-holed and healthy deliveries: they run concurrently (every healthy
/// request is answered before the first black-holed request times out), and the healthy ones
/// are delivered in the same invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_subscriber_does_not_hold_up_the_others_in_its_batch() {
    let (h, _) = Harness::start_with(&[("WEBHOOK_TIMEOUT_MS", "3000"), ("WEBHOOK_RETRY_SCHEDULE", "60")]).await;
    let (_, secret_name) = h.secret("mixed").await;
    let (closed, hole_url) = black_hole().await;
    let arrived = Arc::new(Mutex::new(Vec::new()));
    let seen = arrived.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(std::time::Instant::now());
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let healthy_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    h.local.add_webhook_subscriber("hole", &hole_url, &secret_name).await;
    h.local.add_webhook_subscriber("healthy", &healthy_url, &secret_name).await;
    // The black-holed copies first in the batch: a one-at-a-time dispatcher would reach the
    // healthy ones only after their time-outs.
    for i in 0..4 {
        h.send_copy("hole", &format!("evt-mixed-h{i}"), &[]).await;
    }
    for i in 0..4 {
        h.send_copy("healthy", &format!("evt-mixed-ok{i}"), &[]).await;
    }
    let batch = h.receive_n(8).await;
    let (report, failed) = h.invoke(batch).await;
    assert_eq!((report.delivered, report.retried, report.not_attempted, failed), (4, 4, 0, 0), "{report:?}");
    let arrived = arrived.lock().unwrap().clone();
    let closed = closed.lock().unwrap().clone();
    assert_eq!((arrived.len(), closed.len()), (4, 4));
    let first_timeout = closed.iter().min().unwrap();
    assert!(arrived.iter().all(|at| at < first_timeout), "every healthy request was answered before any black-holed one timed out");
    h.local.shutdown().await;
}

/// A batch reached with its time budget spent attempts nothing: every message is in
/// `batchItemFailures` as it was (no request, its attempt unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_past_the_time_budget_are_returned_unattempted() {
    let (h, _) = Harness::start().await;
    let (_, secret_name) = h.secret("late").await;
    let (endpoint, url) = Endpoint::start(vec![(204, None)]).await;
    h.local.add_webhook_subscriber("late", &url, &secret_name).await;
    for i in 0..3 {
        h.send_copy("late", &format!("evt-late-{i}"), &[("attempt", "Number", "2".into())]).await;
    }
    let batch = h.receive_n(3).await;
    let receipts: Vec<String> = batch.iter().filter_map(|m| m.receipt_handle.clone()).collect();
    // The deadline is within the batch margin (3 s): no time for any attempt.
    let (report, failed) = h.invoke_until(batch, chrono::Utc::now() + chrono::Duration::seconds(2)).await;
    assert_eq!((report.not_attempted, report.delivered, report.retried, failed.len()), (3, 0, 0, 3), "{report:?}");
    assert_eq!(endpoint.count(), 0, "nothing sent");
    // They come back as they were (after the queue's visibility timeout, here cut short).
    for receipt in receipts {
        h.local.sqs.change_message_visibility().queue_url(&h.queue).receipt_handle(receipt).visibility_timeout(0).send().await.unwrap();
    }
    let again = h.receive_n(3).await;
    for m in &again {
        let attempt = m.message_attributes().and_then(|a| a.get("attempt")).and_then(|v| v.string_value.clone());
        assert_eq!(attempt.as_deref(), Some("2"), "not counted as an attempt");
    }
    let (report, _) = h.invoke(again).await;
    assert_eq!(report.delivered, 3, "{report:?}");
    h.local.shutdown().await;
}

/// Two consecutive failures open the subscriber's circuit: its next message waits without a
/// request; after the cool-down one probe (of two messages in one batch) is sent, its 2xx
/// closes the circuit, and the other message is delivered after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_subscriber_is_circuit_broken_and_one_probe_closes_it() {
    let settings = [("WEBHOOK_BREAKER_FAILURES", "2"), ("WEBHOOK_BREAKER_COOLDOWN_SECONDS", "2"), ("WEBHOOK_RETRY_SCHEDULE", "120")];
    let (h, _) = Harness::start_with(&settings).await;
    let (_, secret_name) = h.secret("breaker").await;
    let (endpoint, url) = Endpoint::start(vec![(503, None), (503, None), (200, None)]).await;
    h.local.add_webhook_subscriber("sick", &url, &secret_name).await;
    for (i, opened) in [(1, 0), (2, 1)] {
        h.send_copy("sick", &format!("evt-cb-{i}"), &[]).await;
        let (report, _) = h.invoke(h.receive_n(1).await).await;
        assert_eq!((report.retried, report.breakers_opened), (1, opened), "{report:?}");
    }
    assert_eq!(h.breaker("sick").await.0.as_deref(), Some("2"));
    assert!(h.breaker("sick").await.1.is_some(), "open");

    // Open: the message waits without a request (held by its visibility timeout).
    h.send_copy("sick", "evt-cb-3", &[]).await;
    let (report, failed) = h.invoke(h.receive_n(1).await).await;
    assert_eq!((report.deferred, report.retried, failed), (1, 0, 1), "{report:?}");
    assert_eq!(endpoint.count(), 2, "no request while the circuit is open");

    // After the cool-down: evt-cb-3 is back; with evt-cb-4 in the same batch, one probe.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    h.send_copy("sick", "evt-cb-4", &[]).await;
    let (report, _) = h.invoke(h.receive_n(2).await).await;
    assert_eq!((report.delivered, report.deferred), (1, 1), "one probe, the other waits: {report:?}");
    assert_eq!(endpoint.count(), 3);
    assert_eq!(h.breaker("sick").await, (Some("0".into()), None), "the probe's 2xx closed the circuit");
    let (report, _) = h.invoke(h.receive_n(1).await).await;
    assert_eq!(report.delivered, 1, "{report:?}");
    assert_eq!(endpoint.count(), 4);
    h.local.shutdown().await;
}

/// A `Retry-After` of a day: the next attempt's copy is delayed (15 minutes, SQS's most) and
/// carries the time it is due; received early, it waits by a visibility timeout SQS accepts
/// (within 12 h of its first receive), without a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_day_long_retry_after_is_honoured_without_an_sqs_error() {
    let (h, _) = Harness::start().await;
    let (_, secret_name) = h.secret("slow").await;
    let (endpoint, url) = Endpoint::start(vec![(429, Some("86400")), (200, None)]).await;
    h.local.add_webhook_subscriber("slow", &url, &secret_name).await;
    h.send_copy("slow", "evt-day-1", &[]).await;
    let before = chrono::Utc::now().timestamp_millis();
    let (report, failed) = h.invoke(h.receive_n(1).await).await;
    assert_eq!((report.retried, report.failed, failed), (1, 0, 0), "{report:?}");
    // The copy is delayed, not visible.
    let attributes = h
        .local
        .sqs
        .get_queue_attributes()
        .queue_url(&h.queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap_or_default();
    let count = |k: aws_sdk_sqs::types::QueueAttributeName| attributes.get(&k).cloned().unwrap_or_default();
    assert_eq!(count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed), "1", "{attributes:?}");
    assert!(h.receive(&h.queue, Duration::from_secs(2)).await.is_empty());

    // The copy as it arrives after its 15 minutes (sent here without the delay): due in 23 h 45 min.
    let due = before + 86_400_000 - 900_000;
    h.send_copy("slow", "evt-day-1", &[("attempt", "Number", "2".into()), ("not_before", "Number", due.to_string())]).await;
    let (report, failed) = h.invoke(h.receive_n(1).await).await;
    assert_eq!((report.deferred, report.failed, failed), (1, 0, 1), "held by a visibility timeout SQS accepted: {report:?}");
    assert!(h.receive(&h.queue, Duration::from_secs(2)).await.is_empty(), "not back early");
    assert_eq!(endpoint.count(), 1, "no request before the day is over");
    h.local.shutdown().await;
}

/// Every dead letter is counted in `WebhooksDeadLettered`: a malformed message (no subscriber:
/// label `none`) and a message for an unknown subscriber as well as a rejected delivery.
#[tokio::test]
async fn every_dead_letter_is_counted_malformed_messages_included() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Thread-local: the current-thread test runtime polls the dispatcher on this thread.
    let _guard = metrics::set_default_local_recorder(&recorder);
    let (h, _) = Harness::start().await;
    let (_, secret_name) = h.secret("counted").await;
    let (_, url) = Endpoint::start(vec![(400, None)]).await;
    h.local.add_webhook_subscriber("refuses", &url, &secret_name).await;
    h.local.sqs.send_message().queue_url(&h.queue).message_body("not an event").send().await.expect("SendMessage");
    h.send_copy("ghost", "evt-ghost-1", &[]).await;
    h.send_copy("refuses", "evt-refused-1", &[]).await;
    let (report, _) = h.invoke(h.receive_n(3).await).await;
    assert_eq!(report.dead_lettered, 3, "{report:?}");
    let mut counted: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "WebhooksDeadLettered")
        .map(|(key, _, _, value)| {
            let label = key.key().labels().map(|l| l.value().to_owned()).collect::<Vec<_>>().join(",");
            (label, if let DebugValue::Counter(n) = value { n } else { 0 })
        })
        .collect();
    counted.sort();
    assert_eq!(counted, [("ghost".to_owned(), 1), ("none".to_owned(), 1), ("refuses".to_owned(), 1)]);
    assert_eq!(
        h.dead_letters().await.iter().map(|d| d.1.clone()).collect::<Vec<_>>(),
        ["WebhookMalformedEvent", "WebhookUnknownSubscriber", "WebhookRejected"]
    );
    h.local.shutdown().await;
}

/// A claim-checked event (`detail.data_ref`, its payload in the template's
/// `OutboxPayloadBucket`) reaches the subscriber with the payload inline, signed over that body,
/// never the S3 reference; a redelivery sends nothing; an object altered after the commit is
/// dead-lettered `PayloadCorrupt`, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_checked_event_is_delivered_with_its_payload_inline() {
    let (h, env) = Harness::start().await;
    let claim_check =
        outbox_lambda::claim_check(&h.local.runtime.sdk, &env).expect("claim check settings").expect("CLAIM_CHECK_BUCKET in the template");
    let h = Harness { dispatcher: h.dispatcher.with_claim_check(claim_check.clone()), ..h };
    let (secret, secret_name) = h.secret("big").await;
    let (endpoint, url) = Endpoint::start(vec![(200, None)]).await;
    h.local.add_webhook_subscriber("big", &url, &secret_name).await;

    let metadata = r#"{"id":"evt-large-1","type":"OrderCreated","version":1,"source":"example.orders","time":"2026-12-01T06:00:00.000Z","subject":"o-l1","aggregate_type":"Order","sequence":1,"correlation_id":"c-l1"}"#;
    let payload = format!(r#"{{"order_id":"o-l1","attachment":"{}"}}"#, "a".repeat(600 * 1024));
    let reference = claim_check.store("evt-large-1", payload.clone().into_bytes()).await.expect("PutObject");
    let bus_event = |metadata: &str, reference: &outbox::envelope::PayloadRef| {
        let detail = format!(r#"{{"metadata":{metadata},"data_ref":{}}}"#, serde_json::to_string(reference).unwrap());
        format!(r#"{{"version":"0","id":"bus-l","detail-type":"OrderCreated","source":"example.orders","detail":{detail}}}"#)
    };
    let report = h.deliver(&bus_event(metadata, &reference), 1).await;
    assert_eq!((report.delivered, report.dead_lettered), (1, 0), "{report:?}");
    let (headers, body) = endpoint.seen.lock().unwrap()[0].clone();
    assert_eq!(body, format!(r#"{{"metadata":{metadata},"data":{payload}}}"#), "the payload inline");
    assert!(!body.contains("data_ref"), "the subscriber never sees the reference");
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (id, ts, sig) = (get("webhook-id").unwrap(), get("webhook-timestamp").unwrap(), get("webhook-signature").unwrap());
    let signed = SignedHeaders::new(Some(&id), Some(&ts), Some(&sig));
    assert_eq!(Verifier::new(vec![secret]).verify(&signed, body.as_bytes(), chrono::Utc::now().timestamp()), Ok("evt-large-1"));
    let report = h.deliver(&bus_event(metadata, &reference), 1).await;
    assert_eq!(report.already_delivered, 1, "{report:?}");
    assert_eq!(endpoint.count(), 1, "no second POST");

    // An object altered after the commit: the SHA-256 no longer matches.
    let metadata = metadata.replace("evt-large-1", "evt-large-2");
    let reference = claim_check.store("evt-large-2", payload.clone().into_bytes()).await.expect("PutObject");
    let s3 = aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(&h.local.runtime.sdk).force_path_style(true).build());
    let tampered = payload.replacen('a', "b", 1);
    s3.put_object().bucket(&reference.bucket).key(&reference.key).body(tampered.into_bytes().into()).send().await.expect("PutObject");
    let report = h.deliver(&bus_event(&metadata, &reference), 1).await;
    assert_eq!((report.delivered, report.dead_lettered), (0, 1), "{report:?}");
    let dead = h.dead_letters().await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].0.as_str(), dead[0].1.as_str()), ("big", "PayloadCorrupt"), "{dead:?}");
    assert_eq!(endpoint.count(), 1, "nothing sent for the altered object");
    h.local.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_fan_out_deliver_once_retry_and_dead_letter() {
    let (h, _) = Harness::start().await;
    // One secret for every subscriber, current and previous (a rotation in progress).
    let (current, previous) = (Secret::generate(), Secret::generate());
    let secret_name = format!("{}-webhook-partners", h.local.stack_name);
    let secrets = aws_sdk_secretsmanager::Client::new(&h.local.runtime.sdk);
    secrets
        .create_secret()
        .name(&secret_name)
        .secret_string(format!("{} {}", current.to_whsec(), previous.to_whsec()))
        .send()
        .await
        .expect("CreateSecret");
    let (good, good_url) = Endpoint::start(vec![(204, None)]).await;
    let (flaky, flaky_url) = Endpoint::start(vec![(500, None), (429, Some("2")), (200, None)]).await;
    let (gone, gone_url) = Endpoint::start(vec![(410, None)]).await;
    let (bad, bad_url) = Endpoint::start(vec![(400, None)]).await;
    for (id, url) in [("good", &good_url), ("flaky", &flaky_url), ("gone", &gone_url), ("bad", &bad_url)] {
        h.local.add_webhook_subscriber(id, url, &secret_name).await;
    }

    // The rule's delivery: the EventBridge event as the message body.
    let bus_event = std::fs::read_to_string(crate::common::root().join("events/order-created.json")).expect("events/order-created.json");
    h.local.sqs.send_message().queue_url(&h.queue).message_body(&bus_event).send().await.expect("SendMessage");
    let (report, failed) = h.invoke(h.receive(&h.queue, Duration::from_secs(5)).await).await;
    assert_eq!((report.fanned_out, report.fan_out_messages, failed), (1, 4, 0), "{report:?}");

    // The four per-subscriber messages.
    let mut fanned = Vec::new();
    while fanned.len() < 4 {
        let got = h.receive(&h.queue, Duration::from_secs(5)).await;
        assert!(!got.is_empty(), "only {} of 4 fanned-out messages arrived", fanned.len());
        fanned.extend(got);
    }
    let (report, failed) = h.invoke(fanned).await;
    // The retry is a new message: the one handled is settled (not in batchItemFailures).
    assert_eq!((report.delivered, report.retried, report.dead_lettered, report.disabled, failed), (1, 1, 2, 1, 0), "{report:?}");

    // The flaky subscriber's next attempt comes after its delay: 429 (Retry-After), then 200.
    let mut rounds = 0;
    while flaky.count() < 3 {
        rounds += 1;
        assert!(rounds <= 10, "the flaky subscriber's message did not come back");
        let got = h.receive(&h.queue, Duration::from_secs(5)).await;
        if !got.is_empty() {
            h.invoke(got).await;
        }
    }
    assert_eq!((good.count(), flaky.count(), gone.count(), bad.count()), (1, 3, 1, 1));

    // What the subscribers got verifies with either current secret; the id is the event's.
    let (headers, body) = good.seen.lock().unwrap()[0].clone();
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (id, ts, sig) = (get("webhook-id").unwrap(), get("webhook-timestamp").unwrap(), get("webhook-signature").unwrap());
    let signed = SignedHeaders::new(Some(&id), Some(&ts), Some(&sig));
    let detail: serde_json::Value = serde_json::from_str(&bus_event).unwrap();
    assert_eq!(id, detail["detail"]["metadata"]["id"].as_str().unwrap());
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap(), detail["detail"], "the body is the event's detail");
    for secret in [&current, &previous] {
        assert!(Verifier::new(vec![secret.clone()]).verify(&signed, body.as_bytes(), chrono::Utc::now().timestamp()).is_ok());
    }

    // The dead letters say why; the 410 subscriber is disabled.
    assert_eq!(
        h.dead_letters().await,
        [
            ("bad".into(), "WebhookRejected".into(), "HTTP 400: answer body".into()),
            ("gone".into(), "WebhookGone".into(), "HTTP 410 Gone: subscriber disabled".into()),
        ]
    );
    let gone_item = h.local.dynamodb.get_item().table_name(&h.subscribers).key("id", AttributeValue::S("gone".into())).send().await.unwrap();
    assert_eq!(gone_item.item.unwrap().get("enabled"), Some(&AttributeValue::Bool(false)));

    // A redelivery of the whole event (e.g. `dlq redrive`) reaches only the two that failed for good… and
    // the delivered ones are not called again: fan-out skips the disabled one, the inbox the delivered.
    h.local.sqs.send_message().queue_url(&h.queue).message_body(&bus_event).send().await.expect("SendMessage");
    let (report, _) = h.invoke(h.receive(&h.queue, Duration::from_secs(5)).await).await;
    assert_eq!(report.fan_out_messages, 3, "good, flaky and bad (gone is disabled): {report:?}");
    let mut again = Vec::new();
    while again.len() < 3 {
        let got = h.receive(&h.queue, Duration::from_secs(5)).await;
        assert!(!got.is_empty());
        again.extend(got);
    }
    let (report, _) = h.invoke(again).await;
    assert_eq!((report.already_delivered, report.dead_lettered), (2, 1), "{report:?}");
    assert_eq!((good.count(), flaky.count()), (1, 3), "no second POST to a subscriber that has the event");
    h.local.shutdown().await;
}
