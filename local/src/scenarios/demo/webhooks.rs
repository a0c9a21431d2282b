//! The demo's webhooks, both ends, set up the way a user would (docs/webhooks.md, "Signed
//! webhooks, out and in"): a subscriber's secret in Secrets Manager (`<stack>-webhook-demo`) and its item in the
//! subscriber table; the partner's secrets in `<stack>-partner-webhook-secrets`.
//!
//! * **In**: a signed `payment.succeeded` for one order through `POST /webhooks/acme-payments` on
//!   the local HTTP API, the same request again (a replay), and one signed with a secret that is
//!   not the partner's (forged). Checked from the tables: the order `PAID` once (its version moved
//!   by one), one inbox row for the webhook, none for the forged one.
//! * **Out**: the `OrderPaid` that payment produced goes relay → bus → `WebhookDeliveryRule` →
//!   `WebhookDeliveryQueue` → the dispatcher (the local SQS mapping) → three subscribers of the
//!   local [`SubscriberServer`]: `demo-healthy` (204), `demo-flaky` (500, then 429 with
//!   `Retry-After: 1`, then 200) and `demo-failing` (400: dead-lettered). Counted from what the
//!   subscriber server got and from `WebhookDeadLetterQueue`.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_webhooks::{signature_header, Secret};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::subscriber::{Answer, SubscriberServer};
use crate::runtime::Runtime;
use outbox_cli::dlq;
use outbox_template::stack::QueueInfo;

/// The partner of the demo's inbound webhook.
pub(super) const PARTNER: &str = "acme-payments";
/// The event type the demo's subscribers subscribe to (produced by the partner's payment).
pub(super) const EVENT_TYPE: &str = "OrderPaid";
/// Inbox consumer name of the sample's partner webhook receiver (`orders_app::partner::CONSUMER`).
const PARTNER_CONSUMER: &str = "partner-webhooks";

/// The demo subscribers: id and scripted answers.
fn subscribers() -> [(&'static str, Vec<Answer>); 3] {
    [("demo-healthy", vec![(204, None)]), ("demo-flaky", vec![(500, None), (429, Some(1)), (200, None)]), ("demo-failing", vec![(400, None)])]
}

/// Both ends, set up.
pub(crate) struct Webhooks {
    server: SubscriberServer,
    _stop: watch::Sender<bool>,
    partner_secret: Secret,
    orders_table: String,
    inbox_table: String,
    dead_letter_queue: QueueInfo,
}

/// What the inbound part saw.
pub(crate) struct Inbound {
    pub(crate) order_id: String,
    pub(crate) webhook_id: String,
    /// Inbox rows for the webhook id (1: received once).
    pub(crate) received: usize,
    /// The replay answered 200 with `duplicate: true` and changed nothing.
    pub(crate) replay_absorbed: bool,
    /// Forged requests answered 401 with nothing written.
    pub(crate) rejected: usize,
    pub(crate) status: String,
    pub(crate) versions: (u64, u64, u64),
}

/// What the outbound part saw.
pub(crate) struct Outbound {
    /// (subscriber, webhook-id) pairs answered 2xx, each request verified.
    pub(crate) delivered: usize,
    /// Verified requests answered 408, 429 or 5xx.
    pub(crate) retries: usize,
    /// Messages in `WebhookDeadLetterQueue`.
    pub(crate) dead_lettered: Vec<outbox_cli::message::DlqMessage>,
    /// Requests whose signature did not verify.
    pub(crate) unverified: usize,
    /// Per subscriber, the statuses it answered, in order.
    pub(crate) answers: Vec<(String, Vec<u16>)>,
}

fn aws<E: std::error::Error + Send + Sync + 'static>(action: &str) -> impl FnOnce(E) -> crate::Error + '_ {
    crate::Error::aws(action)
}

/// Creates secret `name` with `value`, or sets its value when it exists (a stack reused with
/// `--endpoint`).
async fn put_secret(client: &aws_sdk_secretsmanager::Client, name: &str, value: &str) -> crate::Result<()> {
    if client.create_secret().name(name).secret_string(value).send().await.is_ok() {
        return Ok(());
    }
    client.put_secret_value().secret_id(name).secret_string(value).send().await.map_err(aws("PutSecretValue"))?;
    Ok(())
}

impl Webhooks {
    /// Starts the subscriber server and registers the subscribers and the partner; `None` when
    /// the template has no webhook dispatcher (a function with `WEBHOOK_SUBSCRIBERS_TABLE`) and
    /// partner webhook receiver (one with `PARTNER_SECRETS_ID`).
    ///
    /// # Errors
    /// A message saying which step failed.
    pub(crate) async fn set_up(runtime: &Runtime) -> crate::Result<Option<Self>> {
        let with = |vars: &[&str]| super::sample::function_with(runtime, vars);
        let (Some((_, dispatcher_env)), Some((_, partner_env))) = (with(&["WEBHOOK_SUBSCRIBERS_TABLE"])?, with(&["PARTNER_SECRETS_ID"])?) else {
            return Ok(None);
        };
        let var = |env: &HashMap<String, String>, name: &str| {
            env.get(name).cloned().ok_or_else(|| crate::Error::invalid(format!("no {name} in the webhook functions' environment")))
        };
        let (stop, stopped) = watch::channel(false);
        let server = SubscriberServer::start(stopped).await.map_err(crate::Error::other("the local webhook subscriber"))?;
        let secrets = aws_sdk_secretsmanager::Client::new(&runtime.sdk);
        let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);

        // Subscribers: one secret (the dispatcher may read `<stack>-webhook-*`), one item each.
        let secret = Secret::generate();
        let secret_id = format!("{}-webhook-demo", runtime.stack.resolver.stack_name);
        put_secret(&secrets, &secret_id, &secret.to_whsec()).await?;
        let table = var(&dispatcher_env, "WEBHOOK_SUBSCRIBERS_TABLE")?;
        for (id, script) in subscribers() {
            let url = server.add(id, vec![secret.clone()], script);
            dynamodb
                .put_item()
                .table_name(&table)
                .item("id", AttributeValue::S(id.into()))
                .item("url", AttributeValue::S(url))
                .item("event_types", AttributeValue::L(vec![AttributeValue::S(EVENT_TYPE.into())]))
                .item("secret_id", AttributeValue::S(secret_id.clone()))
                .item("enabled", AttributeValue::Bool(true))
                .send()
                .await
                .map_err(aws("PutItem subscriber"))?;
        }

        // The partner: its secrets, a JSON object by partner name.
        let partner_secret = Secret::generate();
        let partners = json!({ PARTNER: partner_secret.to_whsec() }).to_string();
        put_secret(&secrets, &var(&partner_env, "PARTNER_SECRETS_ID")?, &partners).await?;
        let dead_letter_queue = runtime
            .stack
            .queue("Webhooks/WebhookDeadLetterQueue")
            .cloned()
            .ok_or_else(|| crate::Error::invalid("the template has no Webhooks/WebhookDeadLetterQueue"))?;
        Ok(Some(Self {
            server,
            _stop: stop,
            partner_secret,
            orders_table: var(&partner_env, "ORDERS_TABLE")?,
            inbox_table: var(&partner_env, "INBOX_TABLE")?,
            dead_letter_queue,
        }))
    }

    /// A subscriber's URL line for people: `demo-healthy → http://127.0.0.1:PORT/hooks/demo-healthy`.
    pub(crate) fn endpoints(&self) -> String {
        format!("http://{}/hooks/{{demo-healthy,demo-flaky,demo-failing}}", self.server.addr)
    }

    /// Sends the partner's webhook for `order_id`, its replay and a forged one through `api`.
    ///
    /// # Errors
    /// A message when a request fails or an answer is not what the API promises.
    pub(crate) async fn inbound(&self, runtime: &Runtime, api: SocketAddr, order_id: &str) -> crate::Result<Inbound> {
        let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
        let client = reqwest::Client::new();
        let url = format!("http://{api}/webhooks/{PARTNER}");
        let body =
            json!({"type": "payment.succeeded", "data": {"order_id": order_id, "payment_id": "pay-demo-1", "amount": "12.50", "currency": "EUR"}})
                .to_string();
        let webhook_id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let post = |id: String, secret: Secret| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            async move {
                let timestamp = chrono::Utc::now().timestamp();
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("webhook-id", &id)
                    .header("webhook-timestamp", timestamp.to_string())
                    .header("webhook-signature", signature_header(&[secret], &id, timestamp, body.as_bytes()))
                    .body(body)
                    .send()
                    .await
                    .map_err(crate::Error::other(format!("POST {url}")))?;
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                Ok::<(u16, Value), crate::Error>((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
            }
        };
        let before = self.order_version(&dynamodb, order_id).await?.1;
        let (status, answer) = post(webhook_id.clone(), self.partner_secret.clone()).await?;
        if status != 200 || answer["duplicate"] != json!(false) {
            return Err(crate::Error::expectation(format!("the partner's webhook was answered {status}: {answer}")));
        }
        let (state, paid) = self.order_version(&dynamodb, order_id).await?;
        let (status, answer) = post(webhook_id.clone(), self.partner_secret.clone()).await?;
        let after_replay = self.order_version(&dynamodb, order_id).await?.1;
        let replay_absorbed = status == 200 && answer["duplicate"] == json!(true) && after_replay == paid;
        let forged_id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let (status, answer) = post(forged_id.clone(), Secret::generate()).await?;
        let forged_rows = self.inbox_rows(&dynamodb, &forged_id).await?;
        let rejected = usize::from(status == 401 && forged_rows == 0 && self.order_version(&dynamodb, order_id).await?.1 == paid);
        if status != 401 {
            tracing::warn!(status, %answer, "the forged webhook was not refused");
        }
        Ok(Inbound {
            order_id: order_id.to_owned(),
            received: self.inbox_rows(&dynamodb, &webhook_id).await?,
            webhook_id,
            replay_absorbed,
            rejected,
            status: state,
            versions: (before, paid, after_replay),
        })
    }

    /// `(status, version)` of the order.
    async fn order_version(&self, dynamodb: &aws_sdk_dynamodb::Client, order_id: &str) -> crate::Result<(String, u64)> {
        let out = dynamodb
            .get_item()
            .table_name(&self.orders_table)
            .key("pk", AttributeValue::S(format!("ORDER#{order_id}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws("GetItem order"))?;
        let item = out.item.ok_or_else(|| crate::Error::expectation(format!("order {order_id} is not in {}", self.orders_table)))?;
        let status = item.get("status").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        let version = item.get("version").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(0);
        Ok((status, version))
    }

    /// Inbox rows of the partner's webhook `webhook_id`.
    async fn inbox_rows(&self, dynamodb: &aws_sdk_dynamodb::Client, webhook_id: &str) -> crate::Result<usize> {
        let out = dynamodb
            .query()
            .table_name(&self.inbox_table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(format!("{PARTNER_CONSUMER}#{PARTNER}#{webhook_id}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(aws("Query inbox"))?;
        Ok(out.items().len())
    }

    /// Waits until the healthy and flaky subscribers answered 2xx and the failing one's delivery
    /// is in `WebhookDeadLetterQueue` (or `timeout`), then counts.
    ///
    /// # Errors
    /// A message when that does not happen within `timeout`.
    pub(crate) async fn outbound(&self, runtime: &Runtime, timeout: Duration) -> crate::Result<Outbound> {
        let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
        let started = Instant::now();
        let succeeded = |id: &str| self.server.received_by(id).iter().any(|r| (200..300).contains(&r.status));
        loop {
            let dead = dlq::depth(&sqs, &self.dead_letter_queue).await.map_err(crate::Error::Operator)?;
            if succeeded("demo-healthy") && succeeded("demo-flaky") && dead >= 1 {
                break;
            }
            if started.elapsed() > timeout {
                return Err(crate::Error::expectation(format!(
                    "the webhooks were not delivered in {} s: the subscriber got {:?}; {} dead letter(s)",
                    timeout.as_secs(),
                    self.server.received().iter().map(|r| (&r.subscriber, r.status)).collect::<Vec<_>>(),
                    dead
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The invocations that made those answers settle their messages (and report their
        // figures) after the answer: wait until the delivery queue holds nothing in flight.
        if let Some(queue) = runtime.stack.queue("Webhooks/WebhookDeliveryQueue") {
            while dlq::depth(&sqs, queue).await.map_err(crate::Error::Operator)? > 0 && started.elapsed() < timeout {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let received = self.server.received();
        let delivered: BTreeSet<(&str, Option<&str>)> = received
            .iter()
            .filter(|r| r.verified.is_ok() && (200..300).contains(&r.status))
            .map(|r| (r.subscriber.as_str(), r.webhook_id.as_deref()))
            .collect();
        let retries = received.iter().filter(|r| r.verified.is_ok() && matches!(r.status, 408 | 429 | 500..=599)).count();
        let answers =
            subscribers().iter().map(|(id, _)| ((*id).to_owned(), self.server.received_by(id).iter().map(|r| r.status).collect())).collect();
        Ok(Outbound {
            delivered: delivered.len(),
            retries,
            dead_lettered: dlq::peek(&sqs, &self.dead_letter_queue).await.map_err(crate::Error::Operator)?,
            unverified: received.iter().filter(|r| r.verified.is_err()).count(),
            answers,
        })
    }
}
