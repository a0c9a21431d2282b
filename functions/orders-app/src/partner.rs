//! Partner webhooks in (`PartnerWebhookFunction`, `POST /webhooks/{partner}`): a payment
//! provider tells us an order was paid, signed by the Standard Webhooks scheme
//! ([`outbox_webhooks::Verifier`]).
//!
//! | check, in order | answer when it fails | written |
//! |---|---|---|
//! | `webhook-id`, `webhook-timestamp`, `webhook-signature` are present | 401 naming the header (no secret is read) | nothing |
//! | `{partner}` is known and its secrets are valid | 404; 503 when its secrets are unreadable or invalid | nothing |
//! | `webhook-timestamp` is epoch seconds within ±5 min | 401 problem naming the header | nothing |
//! | body at most [`MAX_WEBHOOK_BODY_BYTES`] (the verifier's limit, before any hashing) | 413 naming `body` | nothing |
//! | `webhook-signature` (any current secret, constant-time, one HMAC per secret) | 401 problem naming the header | nothing |
//! | body `{"type": "payment.succeeded", "data": {"order_id", "payment_id", "amount", "currency"}}` | 400 naming the field (`data.order_id`) | nothing |
//! | the order exists | 422 naming `data.order_id` | nothing |
//!
//! Then ONE `TransactWriteItems` ([`outbox::inbox::Inbox::apply`]): the inbox claim of
//! `<partner>#<webhook-id>` (consumer `partner-webhooks`), the order `CREATED → PAID` with its
//! version condition (`version + 1`), and the outbox put of `OrderPaid` (sequence = the new
//! version). A replayed or redelivered webhook finds its claim: 200 with `"duplicate": true`,
//! no second effect. An order no longer `CREATED` (paid by another webhook, cancelled) or a
//! concurrent change is a 409; a `webhook-id` reused with another body a 422; DynamoDB
//! conflicts and throttling a 503 with `Retry-After` (the partner retries; the claim dedupes).
//!
//! Partners' secrets: Secrets Manager secret `PARTNER_SECRETS_ID` whose string is a JSON object
//! `{"<partner>": "whsec_… [whsec_…]"}` (two secrets while one is rotated), cached for
//! `PARTNER_SECRETS_TTL_SECONDS` (default 300). Each secret must decode to at least 24 bytes (the
//! Standard Webhooks minimum, [`outbox_webhooks::Secret::parse`]). A partner whose entry does not
//! parse is disabled alone (its webhooks answer 503 and the error is logged); every other partner
//! keeps working.
//!
//! This route has no JWT authorizer (template: `Auth: Authorizer: NONE`): partners are not users
//! of the order API, and each request is authenticated by its signature instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::http::{problem_response, Problem, CORRELATION_HEADER};
use crate::orders::{order_event, order_key, to_json, OrderView, STATUS_CREATED};
use outbox::envelope::EventMetadata;
use outbox::inbox::{Inbox, InboxError, InboxOutcome, PayloadHash};
use outbox::OutboxWriter;
use outbox_lambda::{ConfigError, Env, DEFAULT_RETENTION};
use outbox_webhooks::{Secret, SignedHeaders, Verifier, VerifyError};

/// Largest accepted webhook body: 64 KiB.
pub const MAX_WEBHOOK_BODY_BYTES: usize = 64 * 1024;
/// `status` of a paid order.
pub const STATUS_PAID: &str = "PAID";
/// The only webhook type handled.
pub const PAYMENT_SUCCEEDED: &str = "payment.succeeded";
/// Inbox consumer name of partner webhooks.
pub const CONSUMER: &str = "partner-webhooks";

/// A partner's webhook body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PartnerWebhook {
    /// Webhook type; only [`PAYMENT_SUCCEEDED`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The payment.
    pub data: Payment,
}

/// `data` of `payment.succeeded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// Our order id.
    pub order_id: String,
    /// The partner's payment id.
    pub payment_id: String,
    /// Amount paid, a decimal string (`"12.50"`).
    pub amount: String,
    /// ISO 4217 code.
    pub currency: String,
}

/// The `OrderPaid` event payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPaid {
    /// Order id.
    pub order_id: String,
    /// Partner that confirmed the payment.
    pub partner: String,
    /// The partner's payment id.
    pub payment_id: String,
    /// Amount paid, decimal string.
    pub amount: String,
    /// ISO 4217 code.
    pub currency: String,
}

/// The answer to an accepted webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The `webhook-id`.
    pub webhook_id: String,
    /// `true` when the webhook was received before: nothing was written now.
    pub duplicate: bool,
    /// The order's status after this webhook (when applied now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The `OrderPaid` event id (when applied now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// Partner name → current secrets.
pub type SecretMap = HashMap<String, Vec<Secret>>;
/// Partner name → its secrets, or why its entry was refused (that partner alone is disabled).
type LoadedSecrets = HashMap<String, Result<Vec<Secret>, String>>;

/// Where partners' secrets come from.
#[derive(Debug)]
pub enum Partners {
    /// A fixed map (tests, local runs).
    Fixed(HashMap<String, Vec<Secret>>),
    /// A Secrets Manager secret holding `{"<partner>": "whsec_… …"}`, cached for `ttl`.
    SecretsManager {
        /// The client.
        client: aws_sdk_secretsmanager::Client,
        /// Secret id or ARN.
        secret_id: String,
        /// Cache lifetime.
        ttl: Duration,
        /// The cached map and when it was read.
        cache: Mutex<Option<(Instant, LoadedSecrets)>>,
    },
}

impl Partners {
    /// The current secrets of `partner` (`None`: unknown partner).
    ///
    /// # Errors
    /// The Secrets Manager call, the secret's text, or this partner's entry, in words (a 503).
    pub async fn secrets(&self, partner: &str) -> Result<Option<Vec<Secret>>, String> {
        match self {
            Partners::Fixed(map) => Ok(map.get(partner).cloned()),
            Partners::SecretsManager { client, secret_id, ttl, cache } => {
                {
                    let guard = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some((_, map)) = guard.as_ref().filter(|(at, _)| at.elapsed() < *ttl) {
                        return map.get(partner).cloned().transpose();
                    }
                }
                let out = client
                    .get_secret_value()
                    .secret_id(secret_id)
                    .send()
                    .await
                    .map_err(|e| format!("GetSecretValue {secret_id}: {}", aws_sdk_secretsmanager::error::DisplayErrorContext(e)))?;
                let text: HashMap<String, String> = serde_json::from_str(out.secret_string().unwrap_or("{}"))
                    .map_err(|e| format!("secret {secret_id} is not a JSON object of strings: {e}"))?;
                let map: LoadedSecrets = text
                    .into_iter()
                    .map(|(name, secrets)| {
                        let parsed = Secret::parse_list(&secrets).map_err(|e| format!("secret {secret_id}, partner {name}: {e}"));
                        if let Err(e) = &parsed {
                            tracing::error!(partner = %name, error = %e, "partner secret refused: this partner is disabled until it is fixed");
                        }
                        (name, parsed)
                    })
                    .collect();
                let found = map.get(partner).cloned().transpose();
                *cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((Instant::now(), map));
                found
            }
        }
    }
}

/// The partner webhook receiver, built once per cold start.
#[derive(Debug)]
pub struct PartnerWebhooks {
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
    writer: OutboxWriter,
    inbox: Inbox,
    partners: Partners,
    source: String,
    tolerance: Duration,
}

impl PartnerWebhooks {
    /// A receiver over explicit parts.
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        orders_table: impl Into<String>,
        writer: OutboxWriter,
        inbox: Inbox,
        partners: Partners,
        source: impl Into<String>,
    ) -> Self {
        Self {
            dynamodb,
            orders_table: orders_table.into(),
            writer,
            inbox,
            partners,
            source: source.into(),
            tolerance: outbox_webhooks::DEFAULT_TOLERANCE,
        }
    }

    /// Sets the timestamp tolerance (default 5 minutes).
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Reads `ORDERS_TABLE`, `OUTBOX_TABLE`, `INBOX_TABLE`, `PARTNER_SECRETS_ID`,
    /// `PARTNER_SECRETS_TTL_SECONDS` (300), `WEBHOOK_TOLERANCE_SECONDS` (300), `EVENT_SOURCE`
    /// (`example.orders`), `OUTBOX_RETENTION_SECONDS` (7 days) and the inbox retention rule ([`outbox_lambda::inbox_retention`]).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let partners = Partners::SecretsManager {
            client: aws_sdk_secretsmanager::Client::new(sdk),
            secret_id: env.required("PARTNER_SECRETS_ID")?,
            ttl: env.seconds("PARTNER_SECRETS_TTL_SECONDS", Duration::from_secs(300))?,
            cache: Mutex::new(None),
        };
        let inbox = Inbox::new(dynamodb.clone(), env.required("INBOX_TABLE")?, CONSUMER, outbox_lambda::inbox_retention(env)?);
        let writer = OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.retention("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?);
        Ok(Self::new(dynamodb, env.required("ORDERS_TABLE")?, writer, inbox, partners, env.optional("EVENT_SOURCE", "example.orders"))
            .with_tolerance(env.seconds("WEBHOOK_TOLERANCE_SECONDS", outbox_webhooks::DEFAULT_TOLERANCE)?))
    }

    /// Handles one webhook: the checks and the transaction of the module docs. The event it
    /// writes continues the partner's trace: a child of the request's `traceparent` (W3C Trace
    /// Context) when it has a valid one, else of the invocation's X-Ray header ([`request_trace`]).
    ///
    /// # Errors
    /// The [`Problem`] to answer; nothing was written.
    pub async fn receive(&self, partner: &str, headers: &HeaderMap, body: &[u8], correlation_id: &str) -> Result<Accepted, Problem> {
        let xray = std::env::var(outbox::TRACE_HEADER_ENV).ok();
        outbox::TraceContext::scope(request_trace(headers, xray.as_deref()), self.receive_traced(partner, headers, body, correlation_id)).await
    }

    /// [`PartnerWebhooks::receive`] inside its trace context.
    async fn receive_traced(&self, partner: &str, headers: &HeaderMap, body: &[u8], correlation_id: &str) -> Result<Accepted, Problem> {
        let signed = SignedHeaders::from_fn(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        // An unsigned request is refused before any secret is read (no Secrets Manager call, no
        // cache refresh for anonymous traffic).
        if let Some(missing) = signed.missing() {
            return Err(Problem {
                field: Some(missing.to_owned()),
                ..Problem::new(401, "Invalid webhook signature", format!("missing header {missing}"))
            });
        }
        let secrets = match self.partners.secrets(partner).await {
            Ok(Some(secrets)) => secrets,
            Ok(None) => return Err(Problem::new(404, "Unknown partner", format!("no partner named {partner}"))),
            Err(e) => {
                tracing::error!(error = %e, "partner secrets unavailable");
                return Err(Problem::new(503, "Service unavailable", "partner secrets are unavailable; retry later"));
            }
        };
        let now = chrono::Utc::now();
        // The verifier refuses a body over the limit before hashing it (413), then checks the
        // headers and the signature (401).
        let webhook_id = Verifier::new(secrets)
            .with_tolerance(self.tolerance)
            .with_max_body_bytes(MAX_WEBHOOK_BODY_BYTES)
            .verify(&signed, body, now.timestamp())
            .map_err(|e| match e {
                VerifyError::BodyTooLarge { .. } => Problem { field: Some("body".into()), ..Problem::new(413, "Body too large", e.to_string()) },
                e => Problem { field: Some(e.header().to_owned()), ..Problem::new(401, "Invalid webhook signature", e.to_string()) },
            })?;
        let webhook: PartnerWebhook = parse(body)?;
        if webhook.kind != PAYMENT_SUCCEEDED {
            return Err(Problem::bad_field("type", format!("unsupported webhook type {:?}; expected {PAYMENT_SUCCEEDED}", webhook.kind)));
        }
        let payment = webhook.data;
        if payment.order_id.is_empty() {
            return Err(Problem::bad_field("data.order_id", "must not be empty"));
        }
        let order = self.read_order(&payment.order_id).await?;
        let Some(order) = order else {
            return Err(Problem {
                field: Some("data.order_id".into()),
                ..Problem::new(422, "Unknown order", format!("no order {}", payment.order_id))
            });
        };
        let next = order.version + 1;
        let paid = OrderPaid {
            order_id: payment.order_id.clone(),
            partner: partner.to_owned(),
            payment_id: payment.payment_id.clone(),
            amount: payment.amount.clone(),
            currency: payment.currency.clone(),
        };
        let event = order_event("OrderPaid", &payment.order_id, next, to_json(&paid), &self.source, correlation_id, None);
        let update = Update::builder()
            .table_name(&self.orders_table)
            .key("pk", AttributeValue::S(order_key(&payment.order_id)))
            .update_expression("SET #status = :paid, #version = :next, paid_at = :at, payment_id = :payment")
            .condition_expression("#version = :expected AND #status = :created")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":paid", AttributeValue::S(STATUS_PAID.into()))
            .expression_attribute_values(":created", AttributeValue::S(STATUS_CREATED.into()))
            .expression_attribute_values(":expected", AttributeValue::N(order.version.to_string()))
            .expression_attribute_values(":next", AttributeValue::N(next.to_string()))
            .expression_attribute_values(":at", AttributeValue::S(now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)))
            .expression_attribute_values(":payment", AttributeValue::S(payment.payment_id.clone()))
            .build()
            // table_name, key and update_expression, the builder's required fields, are set above.
            .expect("Update has its required fields");
        let mut metadata =
            EventMetadata::new(format!("{partner}#{webhook_id}"), webhook.kind.clone(), partner, ("Order", payment.order_id.clone()), 0);
        metadata.time = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        metadata.correlation_id = correlation_id.to_owned();
        let body_text = String::from_utf8_lossy(body);
        // The order's update and the event in one transaction, committed by the inbox with its claim.
        let mut tx = self.writer.transaction();
        tx.write(TransactWriteItem::builder().update(update).build());
        let item = tx.emit(event).map_err(|e| Problem::new(500, "Internal error", e.to_string()))?.clone();
        let writes = tx.into_items().await.map_err(|e| {
            tracing::warn!(error = %e, "storing the event's payload failed");
            if e.is_retryable() {
                Problem::new(503, "Service unavailable", "storing the event failed; retry later")
            } else {
                Problem::new(500, "Internal error", "storing the event failed")
            }
        })?;
        match self.inbox.apply(&metadata, &PayloadHash::of(&body_text), writes).await {
            Ok(InboxOutcome::Applied) => {
                // In the span of the event it emitted (outbox::envelope::event_span).
                item.span().in_scope(|| tracing::info!(partner, webhook_id, order_id = %payment.order_id, version = next, "order paid"));
                Ok(Accepted { webhook_id: webhook_id.to_owned(), duplicate: false, status: Some(STATUS_PAID.into()), event_id: Some(item.event_id) })
            }
            Ok(InboxOutcome::Duplicate) => {
                tracing::info!(partner, webhook_id, "webhook received before; no second effect");
                Ok(Accepted { webhook_id: webhook_id.to_owned(), duplicate: true, status: None, event_id: None })
            }
            Ok(_) => Err(Problem::new(
                409,
                "Order not payable",
                format!("order {} is {} (version {}), or changed meanwhile", payment.order_id, order.status, order.version),
            )),
            Err(InboxError::PayloadMismatch { .. }) => Err(Problem {
                field: Some(outbox_webhooks::WEBHOOK_ID.into()),
                ..Problem::new(422, "Webhook id reused", format!("webhook {webhook_id} was received before with another body"))
            }),
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "webhook transaction failed; the partner retries");
                Err(Problem::new(503, "Service unavailable", "the write conflicted or was throttled; retry later"))
            }
            Err(e) => {
                tracing::error!(error = %e, "webhook transaction failed");
                Err(Problem::new(500, "Internal error", "the write failed"))
            }
        }
    }

    /// The order (strongly consistent read); a transient failure is a 503 (the partner retries),
    /// any other a 500.
    async fn read_order(&self, order_id: &str) -> Result<Option<OrderView>, Problem> {
        crate::orders::read_order(&self.dynamodb, &self.orders_table, order_id).await.map_err(|e| {
            tracing::warn!(error = %e, "reading the order failed");
            Problem::from(e)
        })
    }
}

/// The body, or a 400 naming the field at fault (`data.order_id`, or `body` when not JSON).
fn parse(body: &[u8]) -> Result<PartnerWebhook, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "body".to_owned(),
            _ if inner.to_string().starts_with("missing field") => {
                let missing = inner.to_string().split('`').nth(1).unwrap_or_default().to_owned();
                if path == "." {
                    missing
                } else {
                    format!("{path}.{missing}")
                }
            }
            _ if path == "." => "body".to_owned(),
            _ => path,
        };
        Problem::bad_field(field, inner.to_string())
    })
}

/// The router: `POST /webhooks/{partner}` (problem answers elsewhere). Serve it with
/// `lambda_http::run(partner_router(webhooks))`; test it with `tower::ServiceExt::oneshot`.
pub fn router(webhooks: PartnerWebhooks) -> Router {
    Router::new()
        .route("/webhooks/{partner}", post(handle))
        .with_state(Arc::new(webhooks))
        .fallback(|| async { problem_response(Problem::new(404, "Not found", "no such route"), "") })
}

async fn handle(State(webhooks): State<Arc<PartnerWebhooks>>, Path(partner): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    let correlation_id = headers
        .get(CORRELATION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let mut response = match webhooks.receive(&partner, &headers, &body, &correlation_id).await {
        Ok(accepted) => (StatusCode::OK, [(CONTENT_TYPE, "application/json")], to_json(&accepted)).into_response(),
        Err(problem) => {
            tracing::info!(partner, status = problem.status, field = problem.field.as_deref().unwrap_or(""), detail = %problem.detail, "webhook refused");
            problem_response(problem, &correlation_id)
        }
    };
    if let Ok(value) = HeaderValue::from_str(&correlation_id) {
        response.headers_mut().insert(CORRELATION_HEADER, value);
    }
    response
}

/// The request's place in its caller's trace ([`outbox::TraceContext::continued`]): its
/// `traceparent` and `tracestate` headers, else `xray_header` (the invocation's X-Ray header).
pub fn request_trace(headers: &HeaderMap, xray_header: Option<&str>) -> Option<outbox::TraceContext> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    outbox::TraceContext::continued(header(outbox::trace_context::TRACEPARENT), header(outbox::trace_context::TRACESTATE), xray_header)
}

#[cfg(test)]
mod tests {
    use aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueOutput;
    use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
    use outbox_webhooks::{signature_header, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

    use super::*;

    /// A receiver whose partners' secrets are the Secrets Manager secret `text` (the rule counts
    /// the GetSecretValue calls) and whose DynamoDB answers nothing (every test here stops before it).
    fn receiver(text: &'static str) -> (PartnerWebhooks, Rule) {
        let rule =
            mock!(aws_sdk_secretsmanager::Client::get_secret_value).then_output(move || GetSecretValueOutput::builder().secret_string(text).build());
        let secrets = mock_client!(aws_sdk_secretsmanager, RuleMode::MatchAny, [&rule]);
        let unused =
            mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| aws_sdk_dynamodb::operation::get_item::GetItemOutput::builder().build());
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&unused]);
        let partners =
            Partners::SecretsManager { client: secrets, secret_id: "partners".into(), ttl: Duration::from_secs(300), cache: Mutex::new(None) };
        let inbox = Inbox::new(dynamodb.clone(), "inbox", CONSUMER, Duration::from_secs(3600));
        (PartnerWebhooks::new(dynamodb, "orders", OutboxWriter::new("outbox", DEFAULT_RETENTION), inbox, partners, "example.orders"), rule)
    }

    const GOOD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn signed(secret: &str, body: &[u8]) -> HeaderMap {
        let now = chrono::Utc::now().timestamp();
        let mut headers = HeaderMap::new();
        headers.insert(WEBHOOK_ID, HeaderValue::from_static("msg_1"));
        headers.insert(WEBHOOK_TIMESTAMP, HeaderValue::from_str(&now.to_string()).unwrap());
        let signature = signature_header(&[Secret::parse(secret).unwrap()], "msg_1", now, body);
        headers.insert(WEBHOOK_SIGNATURE, HeaderValue::from_str(&signature).unwrap());
        headers
    }

    #[tokio::test]
    async fn an_unsigned_request_is_a_401_before_any_secret_is_read() {
        let (webhooks, rule) = receiver(r#"{"acme": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}"#);
        let full = signed(GOOD_SECRET, b"{}");
        for missing in [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE] {
            let mut headers = full.clone();
            headers.remove(missing);
            for partner in ["acme", "nobody"] {
                let problem = webhooks.receive(partner, &headers, b"{}", "c").await.unwrap_err();
                assert_eq!((problem.status, problem.field.as_deref()), (401, Some(missing)), "{partner} without {missing}");
            }
        }
        assert_eq!(rule.num_calls(), 0, "no GetSecretValue for unsigned requests");
    }

    #[tokio::test]
    async fn a_bad_or_short_secret_disables_only_its_own_partner() {
        let text = r#"{"acme": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "tiny": "whsec_AA==", "broken": "whsec_%%%"}"#;
        let (webhooks, rule) = receiver(text);
        let body = br#"{"type":"payment.succeeded"}"#;
        // acme's signature verifies; its body is then refused for a missing field (400), not a 503.
        let problem = webhooks.receive("acme", &signed(GOOD_SECRET, body), body, "c").await.unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (400, Some("data")), "{problem:?}");
        for disabled in ["tiny", "broken"] {
            let problem = webhooks.receive(disabled, &signed(GOOD_SECRET, body), body, "c").await.unwrap_err();
            assert_eq!(problem.status, 503, "{disabled}: {problem:?}");
        }
        assert_eq!(webhooks.receive("nobody", &signed(GOOD_SECRET, body), body, "c").await.unwrap_err().status, 404);
        assert_eq!(rule.num_calls(), 1, "one read, cached, for all partners");
    }

    #[test]
    fn malformed_bodies_name_the_field() {
        let field = |body: &str| parse(body.as_bytes()).unwrap_err().field;
        assert_eq!(field("not json"), Some("body".into()));
        assert_eq!(field(r#"{"data":{"order_id":"o","payment_id":"p","amount":"1","currency":"EUR"}}"#), Some("type".into()));
        assert_eq!(field(r#"{"type":"payment.succeeded"}"#), Some("data".into()));
        assert_eq!(field(r#"{"type":"payment.succeeded","data":{"payment_id":"p","amount":"1","currency":"EUR"}}"#), Some("data.order_id".into()));
        assert_eq!(
            field(r#"{"type":"payment.succeeded","data":{"order_id":5,"payment_id":"p","amount":"1","currency":"EUR"}}"#),
            Some("data.order_id".into())
        );
        assert_eq!(field("[]"), Some("body".into()));
        let ok = parse(br#"{"type":"payment.succeeded","data":{"order_id":"o","payment_id":"p","amount":"1.00","currency":"EUR"}}"#).unwrap();
        assert_eq!(ok.data.order_id, "o");
    }
}
