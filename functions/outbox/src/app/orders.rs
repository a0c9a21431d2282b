//! The order API (producer): `POST /orders` on an API Gateway HTTP API (payload format 2.0).
//!
//! The order item and its `OrderCreated` outbox item are written in ONE `TransactWriteItems`
//! call, the order conditioned on `attribute_not_exists(pk)` so an order id is never
//! overwritten (a second create of the same id is a 409 and writes nothing).
//!
//! Request body (`application/json`):
//! `{"order_id"?: string, "customer_id": string, "currency": "EUR", "lines": [{"sku": string,
//! "quantity": 1..=1000, "unit_price": "12.50"}]}` — amounts are decimal *strings*, never JSON
//! numbers, so no client or server ever rounds them. `order_id` is generated (UUIDv7) when absent.
//!
//! Answers: 201 with `{"order_id", "status", "version", "event_id"}`; 400/413/415 as
//! `application/problem+json` naming the field; 409 when the order id exists; 503 with
//! `Retry-After` when DynamoDB conflicts or throttles after the SDK's retries.

use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use base64::Engine;
use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};

use super::http::{json_response, problem_response, Problem};
use crate::config::{ConfigError, Env, DEFAULT_RETENTION};
use crate::outbox::{NewEvent, OutboxWriter, DEFAULT_MAX_PUT_EVENTS_BYTES};
use crate::transaction::TransactionError;

/// Largest accepted request body, bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most line items in one order.
pub const MAX_LINES: usize = 50;
/// Largest quantity of one line.
pub const MAX_QUANTITY: u32 = 1000;
/// Aggregate type of orders in the outbox.
pub const AGGREGATE_TYPE: &str = "Order";

/// `POST /orders` request body.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateOrderRequest {
    /// Client-chosen order id; generated when absent.
    #[serde(default)]
    pub order_id: Option<String>,
    /// Customer id.
    pub customer_id: String,
    /// ISO 4217 currency code, three capital letters.
    pub currency: String,
    /// Line items, 1 to [`MAX_LINES`].
    pub lines: Vec<OrderLine>,
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderLine {
    /// Stock keeping unit.
    pub sku: String,
    /// Units, 1 to [`MAX_QUANTITY`].
    pub quantity: u32,
    /// Unit price as a decimal string, e.g. `"12.50"`.
    pub unit_price: String,
}

/// `OrderCreated` event data (version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCreated {
    /// Order id.
    pub order_id: String,
    /// Customer id.
    pub customer_id: String,
    /// Currency code.
    pub currency: String,
    /// Line items.
    pub lines: Vec<OrderLine>,
}

/// What `create_order` stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatedOrder {
    /// Order id.
    pub order_id: String,
    /// `CREATED`.
    pub status: String,
    /// Order version (1).
    pub version: u64,
    /// Id of the `OrderCreated` event.
    pub event_id: String,
}

/// Why an order was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreateOrderError {
    /// The request is invalid; `field` names the culprit.
    #[error("{field}: {message}")]
    Invalid {
        /// JSON path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// An order with this id exists.
    #[error("order {0} already exists")]
    AlreadyExists(String),
    /// The write failed.
    #[error(transparent)]
    Transaction(#[from] TransactionError),
    /// The event could not be built (e.g. too large).
    #[error(transparent)]
    Write(#[from] crate::outbox::WriteError),
}

/// The create-order function: DynamoDB client and configuration, built once per cold start.
#[derive(Debug, Clone)]
pub struct OrdersApi {
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
    writer: OutboxWriter,
    source: String,
}

impl OrdersApi {
    /// Reads `ORDERS_TABLE`, `OUTBOX_TABLE`, `EVENT_SOURCE` (default `example.orders`),
    /// `OUTBOX_RETENTION_SECONDS` (default 7 days) and `PUT_EVENTS_MAX_REQUEST_BYTES`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let writer = OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.seconds("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?)
            .with_max_event_bytes(env.bytes("PUT_EVENTS_MAX_REQUEST_BYTES", DEFAULT_MAX_PUT_EVENTS_BYTES)?);
        Ok(Self {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            orders_table: env.required("ORDERS_TABLE")?,
            writer,
            source: env.optional("EVENT_SOURCE", "example.orders"),
        })
    }

    /// Lambda handler: one HTTP API request, one response. Never fails for bad input.
    ///
    /// # Errors
    /// None: every failure is an HTTP status.
    pub async fn handle(&self, event: LambdaEvent<ApiGatewayV2httpRequest>) -> Result<ApiGatewayV2httpResponse, lambda_runtime::Error> {
        let (request, context) = event.into_parts();
        let correlation_id = header(&request, "x-correlation-id")
            .filter(|c| !c.is_empty() && c.len() <= 128)
            .map(str::to_owned)
            .or_else(|| request.request_context.request_id.clone())
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let trace_header = context.xray_trace_id.clone().or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok());
        let span = tracing::info_span!("create_order", correlation_id = %correlation_id);
        let _guard = span.enter();

        let parsed = match parse_request(&request) {
            Ok(p) => p,
            Err(problem) => {
                tracing::info!(status = problem.status, detail = %problem.detail, "request rejected");
                return Ok(problem_response(problem, &correlation_id, &[]));
            }
        };
        match self.create_order(parsed, &correlation_id, trace_header).await {
            Ok(created) => {
                tracing::info!(order_id = %created.order_id, event_id = %created.event_id, "order created");
                let location = format!("/orders/{}", created.order_id);
                Ok(json_response(201, "application/json", &created, &[("location", &location), ("x-correlation-id", &correlation_id)]))
            }
            Err(CreateOrderError::Invalid { field, message }) => {
                Ok(problem_response(Problem::bad_field(field, message), &correlation_id, &[]))
            }
            Err(CreateOrderError::AlreadyExists(id)) => {
                let problem = Problem::new(409, "Order already exists", format!("order {id} already exists; nothing was written"));
                Ok(problem_response(problem, &correlation_id, &[]))
            }
            Err(CreateOrderError::Transaction(e)) if e.is_retryable() => {
                tracing::warn!(error = %e, "order write conflicted or was throttled");
                let problem = Problem::new(503, "Try again", "the order store is busy; nothing was written");
                Ok(problem_response(problem, &correlation_id, &[("retry-after", "1")]))
            }
            Err(e) => {
                tracing::error!(error = %e, "order write failed");
                let problem = Problem::new(500, "Internal error", "the order could not be stored; nothing was written");
                Ok(problem_response(problem, &correlation_id, &[]))
            }
        }
    }

    /// Validates `request` and writes the order and its `OrderCreated` event atomically.
    ///
    /// # Errors
    /// [`CreateOrderError`].
    pub async fn create_order(
        &self,
        request: CreateOrderRequest,
        correlation_id: &str,
        trace_header: Option<String>,
    ) -> Result<CreatedOrder, CreateOrderError> {
        validate(&request)?;
        let order_id = request.order_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let data = OrderCreated {
            order_id: order_id.clone(),
            customer_id: request.customer_id,
            currency: request.currency,
            lines: request.lines,
        };
        // A struct of strings and integers always serialises.
        let payload = serde_json::to_string(&data).expect("OrderCreated serialises");
        let now = chrono::Utc::now();
        let order_item = serde_dynamo::to_item(OrderItem {
            pk: format!("ORDER#{order_id}"),
            order_id: order_id.clone(),
            customer_id: data.customer_id.clone(),
            currency: data.currency.clone(),
            lines: data.lines.clone(),
            status: "CREATED".into(),
            version: 1,
            created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            correlation_id: correlation_id.to_owned(),
        })
        .expect("OrderItem serialises");
        let put = Put::builder()
            .table_name(&self.orders_table)
            .set_item(Some(order_item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .expect("Put has its required fields");

        let mut tx = self.writer.transaction();
        tx.write(TransactWriteItem::builder().put(put).build());
        let event_id = tx
            .emit(NewEvent {
                event_type: "OrderCreated".into(),
                event_version: 1,
                source: self.source.clone(),
                aggregate_type: AGGREGATE_TYPE.into(),
                aggregate_id: order_id.clone(),
                sequence: 1,
                payload,
                correlation_id: correlation_id.to_owned(),
                trace_header,
            })?
            .event_id
            .clone();
        match tx.execute(&self.dynamodb).await {
            Ok(_) => Ok(CreatedOrder { order_id, status: "CREATED".into(), version: 1, event_id }),
            Err(TransactionError::ConditionFailed { .. }) => Err(CreateOrderError::AlreadyExists(order_id)),
            Err(e) => Err(e.into()),
        }
    }
}

#[derive(Serialize)]
struct OrderItem {
    pk: String,
    order_id: String,
    customer_id: String,
    currency: String,
    lines: Vec<OrderLine>,
    status: String,
    version: u64,
    created_at: String,
    correlation_id: String,
}

fn header<'a>(request: &'a ApiGatewayV2httpRequest, name: &str) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Decodes the HTTP request into a [`CreateOrderRequest`], or the problem to answer.
pub fn parse_request(request: &ApiGatewayV2httpRequest) -> Result<CreateOrderRequest, Problem> {
    if let Some(content_type) = header(request, "content-type") {
        let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if media != "application/json" && !media.ends_with("+json") {
            return Err(Problem::new(415, "Unsupported media type", format!("content-type {content_type:?} is not supported; send application/json")));
        }
    }
    let body = request.body.as_deref().unwrap_or("");
    let bytes = if request.is_base64_encoded {
        base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .map_err(|e| Problem::bad_field("body", format!("isBase64Encoded is true but the body is not base64: {e}")))?
    } else {
        body.as_bytes().to_vec()
    };
    if bytes.len() > MAX_BODY_BYTES {
        return Err(Problem::new(413, "Body too large", format!("the body is {} bytes; the limit is {MAX_BODY_BYTES}", bytes.len())));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Problem::bad_field("body", "the request body is empty; send a JSON order"));
    }
    let de = &mut serde_json::Deserializer::from_slice(&bytes);
    let parsed: CreateOrderRequest = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = if path == "." || path == "?" { missing_field(&inner.to_string()).unwrap_or_else(|| "body".into()) } else { path };
        Problem::bad_field(field, inner.to_string())
    })?;
    validate(&parsed).map_err(|e| match e {
        CreateOrderError::Invalid { field, message } => Problem::bad_field(field, message),
        other => Problem::bad_field("body", other.to_string()),
    })?;
    Ok(parsed)
}

/// serde reports a missing top-level field at path "."; name it from the message instead.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> CreateOrderError {
    CreateOrderError::Invalid { field: field.into(), message: message.into() }
}

/// Checks the business rules of a decoded request.
///
/// # Errors
/// [`CreateOrderError::Invalid`] naming the field.
pub fn validate(request: &CreateOrderRequest) -> Result<(), CreateOrderError> {
    if let Some(id) = &request.order_id {
        let ok = !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(invalid("order_id", "must be 1-64 characters of A-Z, a-z, 0-9, '-' or '_'"));
        }
    }
    if request.customer_id.trim().is_empty() || request.customer_id.len() > 256 {
        return Err(invalid("customer_id", "must be 1-256 bytes and not blank"));
    }
    if request.currency.len() != 3 || !request.currency.chars().all(|c| c.is_ascii_uppercase()) {
        return Err(invalid("currency", "must be an ISO 4217 code of three capital letters, e.g. EUR"));
    }
    if request.lines.is_empty() || request.lines.len() > MAX_LINES {
        return Err(invalid("lines", format!("must hold 1 to {MAX_LINES} line items")));
    }
    for (i, line) in request.lines.iter().enumerate() {
        if line.sku.trim().is_empty() || line.sku.len() > 64 {
            return Err(invalid(format!("lines[{i}].sku"), "must be 1-64 bytes and not blank"));
        }
        if line.quantity == 0 || line.quantity > MAX_QUANTITY {
            return Err(invalid(format!("lines[{i}].quantity"), format!("must be 1 to {MAX_QUANTITY}")));
        }
        if !is_decimal(&line.unit_price) {
            return Err(invalid(format!("lines[{i}].unit_price"), "must be a non-negative decimal string such as \"12.50\""));
        }
    }
    Ok(())
}

/// `digits[.digits]`, at most 18 integer and 6 fraction digits.
fn is_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    !int.is_empty() && int.len() <= 18 && digits(int) && frac.len() <= 6 && digits(frac) && !(s.contains('.') && frac.is_empty())
}

/// Default time the handler keeps for itself when the context has no deadline.
pub const FALLBACK_BUDGET: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Option<&str>, content_type: Option<&str>) -> ApiGatewayV2httpRequest {
        let mut r = ApiGatewayV2httpRequest::default();
        r.body = body.map(str::to_owned);
        if let Some(ct) = content_type {
            r.headers.insert("content-type", ct.parse().unwrap());
        }
        r
    }

    const GOOD: &str = r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"A","quantity":2,"unit_price":"12.50"}]}"#;

    #[test]
    fn accepts_a_valid_order() {
        let parsed = parse_request(&request(Some(GOOD), Some("application/json; charset=utf-8"))).unwrap();
        assert_eq!(parsed.lines[0].unit_price, "12.50");
    }

    #[test]
    fn names_the_field_at_fault() {
        let field = |body: &str| parse_request(&request(Some(body), None)).unwrap_err().field.unwrap_or_default();
        assert_eq!(field(r#"{"currency":"EUR","lines":[]}"#), "customer_id");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":0"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":"2""#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":-2"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""12.50""#, "12.5")), "lines[0].unit_price");
        assert_eq!(field(&GOOD.replace(r#""12.50""#, r#""1e3""#)), "lines[0].unit_price");
        assert_eq!(field(&GOOD.replace("EUR", "eur")), "currency");
        assert_eq!(field(r#"{"customer_id":"c","currency":"EUR","lines":[]}"#), "lines");
        assert_eq!(field("{not json"), "body");
        assert_eq!(field("null"), "body");
        assert_eq!(field(&GOOD.replace(r#""customer_id""#, r#""extra":1,"customer_id""#)), "extra");
    }

    #[test]
    fn rejects_bad_transport_with_the_right_status() {
        assert_eq!(parse_request(&request(None, None)).unwrap_err().status, 400);
        assert_eq!(parse_request(&request(Some(GOOD), Some("text/plain"))).unwrap_err().status, 415);
        let big = format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
        assert_eq!(parse_request(&request(Some(&big), None)).unwrap_err().status, 413);
        let mut r = request(Some("%%%"), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap_err().field.as_deref(), Some("body"));
    }

    #[test]
    fn decodes_base64_bodies_before_validating() {
        let mut r = request(Some(&base64::engine::general_purpose::STANDARD.encode(GOOD)), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap().customer_id, "c-1");
    }
}
