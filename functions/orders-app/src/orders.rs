//! The order API (producer) on an API Gateway HTTP API (payload format 2.0): one Lambda
//! function, routed inside [`OrdersApi::handle`] by `requestContext.http.method` and `rawPath`.
//!
//! | route | answer |
//! |---|---|
//! | `POST /orders` | 201 [`CreatedOrder`] + `Location`; emits `OrderCreated` (sequence 1) |
//! | `GET /orders/{id}` | 200 [`OrderView`] |
//! | `POST /orders/{id}/cancel` | 200 [`CancelledOrder`]; emits `OrderCancelled` (sequence = new version) |
//! | other paths / methods | 404 / 405 (with `Allow`) |
//!
//! Every write is ONE DynamoDB `TransactWriteItems` call: the order write and its outbox item
//! (and the idempotency key record, see below) commit together or not at all.
//!
//! * **Create**: the order item is put with `attribute_not_exists(pk)`, so an order id is never
//!   overwritten (a second create of one id is a 409 and writes nothing).
//! * **Cancel**: the order is read with a strongly consistent `GetItem` to learn its `version`,
//!   then updated with the condition `#version = :expected AND #status = :created`
//!   (optimistic concurrency), next to the `OrderCancelled` outbox put with sequence
//!   `version + 1`, whose own `attribute_not_exists(pk)` on (aggregate, sequence) also stops two
//!   cancels that read the same version from both committing. The loser gets a 409 and no event.
//! * **Idempotency** ([`crate::idempotency`]): a POST may carry an `Idempotency-Key` header. Its
//!   record (`IDEMPOTENCY#<key>` in the orders table, holding the request hash and the answer) is
//!   the transaction's FIRST item, so when the key is taken its `ConditionalCheckFailed` is the
//!   first one in `CancellationReasons` and the stored answer comes back with it
//!   (`ReturnValuesOnConditionCheckFailure=ALL_OLD`). A retry replays the answer (same status,
//!   same body, header `idempotent-replayed: true`); the same key with another method, path or
//!   body is a 422. Keys expire after `IDEMPOTENCY_TTL_SECONDS` (default 24 h).
//!
//! AWS behaviour relied on: a transaction writes all of its items or none, and when it is
//! cancelled `CancellationReasons` holds one entry per request item, in request order
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>);
//! a `GetItem` with `ConsistentRead=true` sees every write acknowledged before it
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html>); the HTTP
//! API's payload format 2.0 (`rawPath` holds the stage name for stages other than `$default`,
//! `isBase64Encoded` bodies, `headers` may be absent)
//! (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html>).
//!
//! # Bodies
//!
//! `POST /orders` (`application/json`, or any `+json` type; absent `content-type` is read as
//! JSON): `{"order_id"?: string, "customer_id": string, "currency": "EUR", "lines": [{"sku":
//! string, "quantity": 1..=1000, "unit_price": "12.50"}]}` — amounts are decimal *strings*, never
//! JSON numbers, so no client or server ever rounds them; `order_id` (1–64 of `A-Z a-z 0-9 - _`)
//! is generated (UUIDv7) when absent; 1 to [`MAX_LINES`] lines.
//!
//! `POST /orders/{id}/cancel`: no body, or `{"reason"?: string}` (1–[`MAX_REASON_CHARS`]
//! characters).
//!
//! # Errors
//!
//! RFC 9457 `application/problem+json` ([`Problem`]) naming the field at fault
//! (`lines[0].quantity`, `body`, `reason`, or the `Idempotency-Key` / `content-type` header):
//! 400 malformed or invalid body or key, 404 no such order or route, 405 wrong method, 409 the
//! order exists / is not cancellable / a concurrent change won, 413 body over
//! [`MAX_BODY_BYTES`] (after base64 decoding), 415 not JSON, 422 key reused for another request,
//! 503 + `Retry-After` when DynamoDB conflicts or throttles. A rejected request writes nothing;
//! bad input is never a 500.

use std::collections::HashMap;
use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use base64::Engine;
use lambda_runtime::LambdaEvent;
use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::http::{json_response, problem_response, Problem};
use crate::idempotency::{
    is_retryable_read, request_hash, IdempotencyKey, IdempotencyRecord, IdempotencyStore, IdempotentRequest, ReadError, Replay, StoredResponse,
    DEFAULT_TTL, HEADER as IDEMPOTENCY_HEADER, REPLAYED_HEADER,
};
use outbox::config::{ConfigError, Env, DEFAULT_RETENTION};
use outbox::transaction::{transact_write, TransactionError};
use outbox::writer::{NewEvent, OutboxWriter, WriteError, DEFAULT_MAX_PUT_EVENTS_BYTES};

/// Largest accepted request body, bytes (after base64 decoding).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most line items in one order.
pub const MAX_LINES: usize = 50;
/// Largest quantity of one line.
pub const MAX_QUANTITY: u32 = 1000;
/// Longest cancellation reason, characters.
pub const MAX_REASON_CHARS: usize = 500;
/// Aggregate type of orders in the outbox.
pub const AGGREGATE_TYPE: &str = "Order";
/// `status` of an order that can still be cancelled.
pub const STATUS_CREATED: &str = "CREATED";
/// `status` of a cancelled order.
pub const STATUS_CANCELLED: &str = "CANCELLED";
/// `Retry-After` of a 503, seconds.
pub const RETRY_AFTER_SECONDS: &str = "1";
/// Schema version of the `OrderCreated` and `OrderCancelled` payloads (`schemas/*.v1.json`).
pub const EVENT_VERSION: u32 = 1;

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

/// `OrderCreated` event data (version 1, `schemas/OrderCreated.v1.json`).
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

/// `POST /orders/{id}/cancel` request body (optional: no body means no reason).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelOrderRequest {
    /// Why the order is cancelled, 1 to [`MAX_REASON_CHARS`] characters.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `OrderCancelled` event data (version 1, `schemas/OrderCancelled.v1.json`): the lines let a
/// consumer release the stock it reserved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCancelled {
    /// Order id.
    pub order_id: String,
    /// Why, when the client said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The order's line items.
    pub lines: Vec<OrderLine>,
}

/// 201 answer of `POST /orders`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// 200 answer of `POST /orders/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelledOrder {
    /// Order id.
    pub order_id: String,
    /// `CANCELLED`.
    pub status: String,
    /// The new order version (the `OrderCancelled` event's sequence).
    pub version: u64,
    /// Id of the `OrderCancelled` event.
    pub event_id: String,
}

/// 200 answer of `GET /orders/{id}`: the order as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderView {
    /// Order id.
    pub order_id: String,
    /// Customer id.
    pub customer_id: String,
    /// Currency code.
    pub currency: String,
    /// Line items.
    pub lines: Vec<OrderLine>,
    /// `CREATED` or `CANCELLED`.
    pub status: String,
    /// 1 when created, +1 per change; equals the sequence of the order's latest event.
    pub version: u64,
    /// RFC 3339 UTC with milliseconds.
    pub created_at: String,
}

/// The result of a POST: done now, or an earlier answer replayed for its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// Written by this request.
    Done(T),
    /// A request with the same key and hash was answered before: nothing was written.
    Replayed(StoredResponse),
}

/// Why a request was not carried out. Nothing was written in any case.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// 400: the request is invalid; `field` names the culprit.
    #[error("{field}: {message}")]
    Invalid {
        /// JSON path of the field, or `body`, or the header name.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// 404: no order with this id.
    #[error("order {0} does not exist")]
    NotFound(String),
    /// 409: an order with this id exists (create).
    #[error("order {0} already exists")]
    AlreadyExists(String),
    /// 409: the order is not in a state that allows the change (e.g. already cancelled).
    #[error("order {order_id} is {status}")]
    NotCancellable {
        /// Order id.
        order_id: String,
        /// Its current status.
        status: String,
    },
    /// 409: another request changed the order between our read and our write, and won.
    #[error("order {0} was changed concurrently")]
    Conflict(String),
    /// 422: the idempotency key was used for another request.
    #[error("the idempotency key was used for another request")]
    KeyReused,
    /// 413: the event would be too large to publish (or to store as an outbox item).
    #[error(transparent)]
    TooLarge(WriteError),
    /// 500: the event could not be built for another reason (a configuration bug, e.g. an
    /// empty `EVENT_SOURCE`).
    #[error(transparent)]
    Event(WriteError),
    /// The transaction failed: 503 when retryable, else 500.
    #[error(transparent)]
    Transaction(#[from] TransactionError),
    /// A read failed: 503 when retryable, else 500.
    #[error("{message}")]
    Read {
        /// The failure.
        message: String,
        /// Whether a retry can succeed.
        retryable: bool,
    },
}

impl From<WriteError> for OrderError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::EventTooLarge { .. } | WriteError::ItemTooLarge { .. } => OrderError::TooLarge(e),
            other => OrderError::Event(other),
        }
    }
}

impl From<ReadError> for OrderError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Sdk { message, retryable } => OrderError::Read { message, retryable },
            ReadError::Malformed(m) => OrderError::Read { message: m.to_string(), retryable: false },
        }
    }
}

impl OrderError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            OrderError::Invalid { .. } => 400,
            OrderError::NotFound(_) => 404,
            OrderError::AlreadyExists(_) | OrderError::NotCancellable { .. } | OrderError::Conflict(_) => 409,
            OrderError::KeyReused => 422,
            OrderError::TooLarge(_) => 413,
            OrderError::Transaction(e) if e.is_retryable() => 503,
            OrderError::Read { retryable: true, .. } => 503,
            OrderError::Transaction(_) | OrderError::Read { .. } | OrderError::Event(_) => 500,
        }
    }

    /// The problem document and extra headers of this error.
    pub fn to_problem(&self) -> (Problem, Vec<(&'static str, &'static str)>) {
        let status = self.status();
        let problem = match self {
            OrderError::Invalid { field, message } => Problem::bad_field(field.clone(), message.clone()),
            OrderError::NotFound(id) => Problem::new(404, "Order not found", format!("there is no order {id}")),
            OrderError::AlreadyExists(id) => Problem::new(409, "Order already exists", format!("order {id} already exists; nothing was written")),
            OrderError::NotCancellable { order_id, status } => {
                Problem::new(409, "Order cannot be cancelled", format!("order {order_id} is {status}, not {STATUS_CREATED}; nothing was written"))
            }
            OrderError::Conflict(id) => Problem::new(
                409,
                "Concurrent change",
                format!("order {id} was changed by another request first; nothing was written (read it again)"),
            ),
            OrderError::KeyReused => Problem {
                field: Some(IDEMPOTENCY_HEADER.into()),
                ..Problem::new(
                    422,
                    "Idempotency key reused",
                    format!("this {IDEMPOTENCY_HEADER} was used for a request with another method, path or body; use a new key"),
                )
            },
            OrderError::TooLarge(e) => Problem { field: Some("body".into()), ..Problem::new(413, "Body too large", e.to_string()) },
            _ if status == 503 => Problem::new(503, "Try again", "the order store is busy; nothing was written"),
            _ => Problem::new(500, "Internal error", "the request could not be carried out; nothing was written"),
        };
        let headers = if status == 503 { vec![("retry-after", RETRY_AFTER_SECONDS)] } else { Vec::new() };
        (problem, headers)
    }
}

/// Where a request goes, from its method and path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /orders`.
    CreateOrder,
    /// `GET /orders/{id}` (the id as it appears in the path, not yet validated).
    GetOrder(String),
    /// `POST /orders/{id}/cancel`.
    CancelOrder(String),
    /// A known path with another method: 405 with `Allow`.
    MethodNotAllowed {
        /// The method the path accepts.
        allow: &'static str,
    },
    /// No such path: 404.
    NotFound,
}

/// Routes `method` (case-insensitive) and `path` (one trailing `/` is ignored).
pub fn route(method: &str, path: &str) -> Route {
    let path = path.strip_suffix('/').filter(|p| !p.is_empty()).unwrap_or(path);
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let is = |m: &str| method.eq_ignore_ascii_case(m);
    match segments.as_slice() {
        ["orders"] if is("POST") => Route::CreateOrder,
        ["orders"] => Route::MethodNotAllowed { allow: "POST" },
        ["orders", id] if !id.is_empty() && is("GET") => Route::GetOrder((*id).to_owned()),
        ["orders", id] if !id.is_empty() => Route::MethodNotAllowed { allow: "GET" },
        ["orders", id, "cancel"] if !id.is_empty() && is("POST") => Route::CancelOrder((*id).to_owned()),
        ["orders", id, "cancel"] if !id.is_empty() => Route::MethodNotAllowed { allow: "POST" },
        _ => Route::NotFound,
    }
}

/// The request's path as the API sees it: `rawPath` (else `requestContext.http.path`), without
/// the stage name API Gateway puts in front of it for stages other than `$default`.
pub fn request_path(request: &ApiGatewayV2httpRequest) -> String {
    let path = request.raw_path.as_deref().or(request.request_context.http.path.as_deref()).unwrap_or("/");
    match request.request_context.stage.as_deref() {
        Some(stage) if !stage.is_empty() && stage != "$default" => {
            let prefix = format!("/{stage}");
            match path.strip_prefix(&prefix) {
                Some("") => "/".to_owned(),
                Some(rest) if rest.starts_with('/') => rest.to_owned(),
                _ => path.to_owned(),
            }
        }
        _ => path.to_owned(),
    }
}

/// The order API function: DynamoDB client and configuration, built once per cold start.
#[derive(Debug, Clone)]
pub struct OrdersApi {
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
    writer: OutboxWriter,
    source: String,
    idempotency: IdempotencyStore,
}

impl OrdersApi {
    /// Reads `ORDERS_TABLE`, `OUTBOX_TABLE`, `EVENT_SOURCE` (default `example.orders`),
    /// `OUTBOX_RETENTION_SECONDS` (default 7 days), `PUT_EVENTS_MAX_REQUEST_BYTES` and
    /// `IDEMPOTENCY_TTL_SECONDS` (default 86400 = 24 h).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let writer = OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.seconds("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?)
            .with_max_event_bytes(env.bytes("PUT_EVENTS_MAX_REQUEST_BYTES", DEFAULT_MAX_PUT_EVENTS_BYTES)?);
        Ok(Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            env.required("ORDERS_TABLE")?,
            writer,
            env.optional("EVENT_SOURCE", "example.orders"),
            env.seconds("IDEMPOTENCY_TTL_SECONDS", DEFAULT_TTL)?,
        ))
    }

    /// An API over `dynamodb` writing orders (and idempotency key records, remembered for
    /// `idempotency_ttl`) to `orders_table` and events through `writer`, with event `source`.
    pub fn new(
        dynamodb: aws_sdk_dynamodb::Client,
        orders_table: impl Into<String>,
        writer: OutboxWriter,
        source: impl Into<String>,
        idempotency_ttl: Duration,
    ) -> Self {
        let orders_table = orders_table.into();
        let idempotency = IdempotencyStore::new(dynamodb.clone(), orders_table.clone(), idempotency_ttl);
        Self { dynamodb, orders_table, writer, source: source.into(), idempotency }
    }

    /// Lambda handler: one HTTP API request, one response.
    ///
    /// # Errors
    /// None: every failure is an HTTP status (bad input a 4xx, never a 500 or a panic).
    pub async fn handle(&self, event: LambdaEvent<ApiGatewayV2httpRequest>) -> Result<ApiGatewayV2httpResponse, lambda_runtime::Error> {
        let (request, context) = event.into_parts();
        let correlation_id = header(&request, "x-correlation-id")
            .filter(|c| !c.is_empty() && c.len() <= 128)
            .map(str::to_owned)
            .or_else(|| request.request_context.request_id.clone())
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let trace_header = context.xray_trace_id.clone().or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok());
        let method = request.request_context.http.method.as_str().to_owned();
        let path = request_path(&request);
        let span = tracing::info_span!("orders_api", correlation_id = %correlation_id, method = %method, path = %path);
        Ok(self.respond(&request, &method, &path, &correlation_id, trace_header).instrument(span).await)
    }

    async fn respond(
        &self,
        request: &ApiGatewayV2httpRequest,
        method: &str,
        path: &str,
        correlation_id: &str,
        trace_header: Option<String>,
    ) -> ApiGatewayV2httpResponse {
        let reject = |problem: Problem, extra: &[(&str, &str)]| {
            tracing::info!(status = problem.status, field = problem.field.as_deref().unwrap_or(""), detail = %problem.detail, "request rejected");
            problem_response(problem, correlation_id, extra)
        };
        let fail = |e: OrderError| {
            let (problem, headers) = e.to_problem();
            if problem.status >= 500 {
                tracing::error!(status = problem.status, error = %e, "request failed");
            } else {
                tracing::info!(status = problem.status, error = %e, "request refused");
            }
            problem_response(problem, correlation_id, &headers)
        };
        let replay = |stored: StoredResponse| {
            tracing::info!(status = stored.status, "idempotent replay");
            let mut headers = vec![(REPLAYED_HEADER, "true"), ("x-correlation-id", correlation_id)];
            if let Some(location) = stored.location.as_deref() {
                headers.push(("location", location));
            }
            raw_json_response(stored.status, stored.body.clone(), &headers)
        };

        let order_id = match route(method, path) {
            Route::NotFound => {
                let shown: String = path.chars().take(200).collect();
                return reject(Problem::new(404, "Not found", format!("no route for {method} {shown}")), &[]);
            }
            Route::MethodNotAllowed { allow } => {
                let problem = Problem::new(405, "Method not allowed", format!("{path} accepts {allow} only"));
                return reject(problem, &[("allow", allow)]);
            }
            Route::CreateOrder => None,
            Route::GetOrder(id) | Route::CancelOrder(id) if !is_valid_order_id(&id) => {
                let shown: String = id.chars().take(80).collect();
                return reject(
                    Problem::new(404, "Order not found", format!("there is no order {shown:?}: order ids are 1-64 of A-Z a-z 0-9 - _")),
                    &[],
                );
            }
            Route::GetOrder(id) => {
                return match self.get_order(&id).await {
                    Ok(order) => json_response(200, "application/json", &order, &[("x-correlation-id", correlation_id)]),
                    Err(e) => fail(e),
                };
            }
            Route::CancelOrder(id) => Some(id),
        };

        // POST: key header, then body, then the write.
        let key = match IdempotencyKey::from_headers(&request.headers) {
            Ok(key) => key,
            Err(problem) => return reject(problem, &[]),
        };
        let body = match read_body(request) {
            Ok(body) => body,
            Err(problem) => return reject(problem, &[]),
        };
        let idempotent = key.map(|key| IdempotentRequest { key, request_hash: request_hash(method, path, &body) });
        match order_id {
            None => {
                let parsed = match parse_create(&body) {
                    Ok(parsed) => parsed,
                    Err(problem) => return reject(problem, &[]),
                };
                match self.create_order(parsed, idempotent.as_ref(), correlation_id, trace_header).await {
                    Ok(Answer::Done(created)) => {
                        tracing::info!(order_id = %created.order_id, event_id = %created.event_id, "order created");
                        let location = location_of(&created.order_id);
                        json_response(201, "application/json", &created, &[("location", &location), ("x-correlation-id", correlation_id)])
                    }
                    Ok(Answer::Replayed(stored)) => replay(stored),
                    Err(e) => fail(e),
                }
            }
            Some(order_id) => {
                let parsed = match parse_cancel(&body) {
                    Ok(parsed) => parsed,
                    Err(problem) => return reject(problem, &[]),
                };
                match self.cancel_order(&order_id, parsed, idempotent.as_ref(), correlation_id, trace_header).await {
                    Ok(Answer::Done(cancelled)) => {
                        tracing::info!(order_id = %cancelled.order_id, event_id = %cancelled.event_id, version = cancelled.version, "order cancelled");
                        json_response(200, "application/json", &cancelled, &[("x-correlation-id", correlation_id)])
                    }
                    Ok(Answer::Replayed(stored)) => replay(stored),
                    Err(e) => fail(e),
                }
            }
        }
    }

    /// Validates `request` and writes the order and its `OrderCreated` event atomically, with
    /// the key record of `idempotent` in the same transaction when given.
    ///
    /// # Errors
    /// [`OrderError`]: `Invalid`, `AlreadyExists`, `KeyReused`, `TooLarge`, `Transaction`, `Read`.
    pub async fn create_order(
        &self,
        request: CreateOrderRequest,
        idempotent: Option<&IdempotentRequest>,
        correlation_id: &str,
        trace_header: Option<String>,
    ) -> Result<Answer<CreatedOrder>, OrderError> {
        validate(&request)?;
        let now = chrono::Utc::now();
        if let Some(stored) = self.replay_if_known(idempotent, now.timestamp()).await? {
            return Ok(Answer::Replayed(stored));
        }
        let order_id = request.order_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let data = OrderCreated { order_id: order_id.clone(), customer_id: request.customer_id, currency: request.currency, lines: request.lines };
        let event = self.writer.outbox_item(order_created_event(&data, &self.source, correlation_id, trace_header), now)?;
        let created = CreatedOrder { order_id: order_id.clone(), status: STATUS_CREATED.into(), version: 1, event_id: event.event_id.clone() };

        let order_item = serde_dynamo::to_item(OrderItem {
            pk: order_key(&order_id),
            order_id: order_id.clone(),
            customer_id: data.customer_id,
            currency: data.currency,
            lines: data.lines,
            status: STATUS_CREATED.into(),
            version: 1,
            created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            correlation_id: correlation_id.to_owned(),
        })
        // Strings, integers and a list of such structs: serde_dynamo cannot fail on them.
        .expect("OrderItem serialises");
        let put = Put::builder()
            .table_name(&self.orders_table)
            .set_item(Some(order_item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            // table_name and item, the builder's only required fields, are set just above.
            .expect("Put has its required fields");

        let stored = StoredResponse { status: 201, body: to_json(&created), location: Some(location_of(&order_id)) };
        let (items, key_at) = self.with_key(idempotent, stored, now, vec![TransactWriteItem::builder().put(put).build(), self.writer.put(&event)]);
        match transact_write(&self.dynamodb, items).await {
            Ok(()) => Ok(Answer::Done(created)),
            Err(TransactionError::ConditionFailed { index, item }) if Some(index) == key_at => self.after_key_taken(idempotent, item).await,
            Err(TransactionError::ConditionFailed { .. }) => Err(OrderError::AlreadyExists(order_id)),
            Err(e) => Err(e.into()),
        }
    }

    /// Cancels order `order_id`: emits `OrderCancelled` with sequence = the new version, in one
    /// transaction with the conditional update (and the key record of `idempotent`).
    ///
    /// # Errors
    /// [`OrderError`]: `Invalid`, `NotFound`, `NotCancellable`, `Conflict`, `KeyReused`,
    /// `Transaction`, `Read`.
    pub async fn cancel_order(
        &self,
        order_id: &str,
        request: CancelOrderRequest,
        idempotent: Option<&IdempotentRequest>,
        correlation_id: &str,
        trace_header: Option<String>,
    ) -> Result<Answer<CancelledOrder>, OrderError> {
        validate_cancel(&request)?;
        let now = chrono::Utc::now();
        // Before the order's state: a retry of a cancel that succeeded finds it CANCELLED.
        if let Some(stored) = self.replay_if_known(idempotent, now.timestamp()).await? {
            return Ok(Answer::Replayed(stored));
        }
        let order = self.read_order(order_id).await?.ok_or_else(|| OrderError::NotFound(order_id.to_owned()))?;
        if order.status != STATUS_CREATED {
            return Err(OrderError::NotCancellable { order_id: order_id.to_owned(), status: order.status });
        }
        let expected = order.version;
        let next = expected + 1;
        let data = OrderCancelled { order_id: order_id.to_owned(), reason: request.reason.clone(), lines: order.lines };
        let event = self.writer.outbox_item(order_cancelled_event(&data, next, &self.source, correlation_id, trace_header), now)?;
        let cancelled =
            CancelledOrder { order_id: order_id.to_owned(), status: STATUS_CANCELLED.into(), version: next, event_id: event.event_id.clone() };

        let mut set = "SET #status = :cancelled, #version = :next, cancelled_at = :at".to_owned();
        let mut update = Update::builder()
            .table_name(&self.orders_table)
            .key("pk", AttributeValue::S(order_key(order_id)))
            .condition_expression("#version = :expected AND #status = :created")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":cancelled", AttributeValue::S(STATUS_CANCELLED.into()))
            .expression_attribute_values(":created", AttributeValue::S(STATUS_CREATED.into()))
            .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()))
            .expression_attribute_values(":next", AttributeValue::N(next.to_string()))
            .expression_attribute_values(":at", AttributeValue::S(now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)));
        if let Some(reason) = &request.reason {
            set.push_str(", cancel_reason = :reason");
            update = update.expression_attribute_values(":reason", AttributeValue::S(reason.clone()));
        }
        let update = update
            .update_expression(set)
            .build()
            // table_name, key and update_expression, the builder's required fields, are set above.
            .expect("Update has its required fields");

        let stored = StoredResponse { status: 200, body: to_json(&cancelled), location: None };
        let (items, key_at) =
            self.with_key(idempotent, stored, now, vec![TransactWriteItem::builder().update(update).build(), self.writer.put(&event)]);
        match transact_write(&self.dynamodb, items).await {
            Ok(()) => Ok(Answer::Done(cancelled)),
            Err(TransactionError::ConditionFailed { index, item }) if Some(index) == key_at => self.after_key_taken(idempotent, item).await,
            // The order's version or status moved, or sequence `next` is taken: another change won.
            Err(TransactionError::ConditionFailed { .. }) => Err(OrderError::Conflict(order_id.to_owned())),
            Err(e) => Err(e.into()),
        }
    }

    /// The order `order_id` (strongly consistent read).
    ///
    /// # Errors
    /// [`OrderError::NotFound`], or [`OrderError::Read`].
    pub async fn get_order(&self, order_id: &str) -> Result<OrderView, OrderError> {
        self.read_order(order_id).await?.ok_or_else(|| OrderError::NotFound(order_id.to_owned()))
    }

    async fn read_order(&self, order_id: &str) -> Result<Option<OrderView>, OrderError> {
        let out = self
            .dynamodb
            .get_item()
            .table_name(&self.orders_table)
            .key("pk", AttributeValue::S(order_key(order_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| OrderError::Read {
                retryable: is_retryable_read(&e),
                message: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string(),
            })?;
        match out.item {
            None => Ok(None),
            Some(item) => serde_dynamo::from_item(item)
                .map(Some)
                .map_err(|e| OrderError::Read { message: format!("order {order_id} is malformed: {e}"), retryable: false }),
        }
    }

    /// `writes` with the key record put in FRONT when there is a key; returns the items and the
    /// key record's position.
    fn with_key(
        &self,
        idempotent: Option<&IdempotentRequest>,
        response: StoredResponse,
        now: chrono::DateTime<chrono::Utc>,
        writes: Vec<TransactWriteItem>,
    ) -> (Vec<TransactWriteItem>, Option<usize>) {
        match idempotent {
            None => (writes, None),
            Some(request) => {
                let record = self.idempotency.record(request, response, now);
                let mut items = vec![self.idempotency.put(&record, now.timestamp())];
                items.extend(writes);
                (items, Some(0))
            }
        }
    }

    /// The stored answer when the key has a live record with the same hash; 422 on another hash.
    async fn replay_if_known(&self, idempotent: Option<&IdempotentRequest>, now: i64) -> Result<Option<StoredResponse>, OrderError> {
        let Some(request) = idempotent else { return Ok(None) };
        match self.idempotency.get(&request.key, now).await? {
            None => Ok(None),
            Some(record) => match record.replay_for(&request.request_hash) {
                Replay::Response(stored) => Ok(Some(stored)),
                Replay::Mismatch => Err(OrderError::KeyReused),
            },
        }
    }

    /// The key record's condition failed: a request with the same key committed first. Its
    /// record comes with the cancellation (`ALL_OLD`); read it when it does not.
    async fn after_key_taken<T>(
        &self,
        idempotent: Option<&IdempotentRequest>,
        item: Option<HashMap<String, AttributeValue>>,
    ) -> Result<Answer<T>, OrderError> {
        // Unreachable: callers pass a key position only when there is a key.
        let Some(request) = idempotent else { return Err(OrderError::Read { message: "key condition without a key".into(), retryable: false }) };
        let record = match item {
            Some(item) => Some(IdempotencyRecord::from_item(&item).map_err(ReadError::from)?),
            None => self.idempotency.get(&request.key, chrono::Utc::now().timestamp()).await?,
        };
        match record.map(|r| r.replay_for(&request.request_hash)) {
            Some(Replay::Response(stored)) => Ok(Answer::Replayed(stored)),
            Some(Replay::Mismatch) => Err(OrderError::KeyReused),
            // Expired between the failed condition and the read: the client may simply retry.
            None => Err(OrderError::Transaction(TransactionError::Retryable("idempotency record expired meanwhile".into()))),
        }
    }
}

/// The outbox event of a new order: `OrderCreated` version [`EVENT_VERSION`], aggregate
/// `Order#<order_id>`, sequence 1 (the order's first version).
pub fn order_created_event(data: &OrderCreated, source: &str, correlation_id: &str, trace_header: Option<String>) -> NewEvent {
    order_event("OrderCreated", &data.order_id, 1, to_json(data), source, correlation_id, trace_header)
}

/// The outbox event of a cancellation: `OrderCancelled` version [`EVENT_VERSION`], aggregate
/// `Order#<order_id>`, `sequence` = the order's new version.
pub fn order_cancelled_event(data: &OrderCancelled, sequence: u64, source: &str, correlation_id: &str, trace_header: Option<String>) -> NewEvent {
    order_event("OrderCancelled", &data.order_id, sequence, to_json(data), source, correlation_id, trace_header)
}

fn order_event(
    event_type: &str,
    order_id: &str,
    sequence: u64,
    payload: String,
    source: &str,
    correlation_id: &str,
    trace_header: Option<String>,
) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        event_version: EVENT_VERSION,
        source: source.into(),
        aggregate_type: AGGREGATE_TYPE.into(),
        aggregate_id: order_id.to_owned(),
        sequence,
        payload,
        correlation_id: correlation_id.to_owned(),
        trace_header,
    }
}

/// The order item as stored in the orders table (`pk` = `ORDER#<order_id>`).
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

/// Partition key of an order in the orders table: `ORDER#<order_id>`.
pub fn order_key(order_id: &str) -> String {
    format!("ORDER#{order_id}")
}

fn location_of(order_id: &str) -> String {
    format!("/orders/{order_id}")
}

/// JSON text of one of this module's types (strings, integers, options and lists of such
/// structs), which serde_json always serialises.
fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".into())
}

/// A response whose body is JSON text already.
fn raw_json_response(status: u16, body: String, headers: &[(&str, &str)]) -> ApiGatewayV2httpResponse {
    let mut response = json_response(status, "application/json", &(), headers);
    response.body = Some(aws_lambda_events::encodings::Body::Text(body));
    response
}

fn header<'a>(request: &'a ApiGatewayV2httpRequest, name: &str) -> Option<&'a str> {
    request.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `id` is a valid order id: 1–64 of `A-Z a-z 0-9 - _`.
pub fn is_valid_order_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The request body as bytes: base64-decoded when `isBase64Encoded`, checked against
/// [`MAX_BODY_BYTES`], and — when not empty — against the content type (JSON, or absent).
///
/// # Errors
/// 415 for a content type that is not JSON, 413 for a body over the limit, 400 (`body`) for
/// a body flagged base64 that is not.
pub fn read_body(request: &ApiGatewayV2httpRequest) -> Result<Vec<u8>, Problem> {
    let raw = request.body.as_deref().unwrap_or("");
    if !raw.is_empty() {
        if let Some(value) = request.headers.get("content-type") {
            let content_type = String::from_utf8_lossy(value.as_bytes());
            let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            if media != "application/json" && !media.ends_with("+json") {
                let detail = format!("content-type {content_type:?} is not supported; send application/json");
                return Err(Problem { field: Some("content-type".into()), ..Problem::new(415, "Unsupported media type", detail) });
            }
        }
    }
    let too_large = |bytes: usize| Problem {
        field: Some("body".into()),
        ..Problem::new(413, "Body too large", format!("the body is {bytes} bytes; the limit is {MAX_BODY_BYTES}"))
    };
    if !request.is_base64_encoded {
        if raw.len() > MAX_BODY_BYTES {
            return Err(too_large(raw.len()));
        }
        return Ok(raw.as_bytes().to_vec());
    }
    // Base64 is 4/3 of the data: what is over twice the limit cannot fit once decoded.
    if raw.len() > 2 * MAX_BODY_BYTES {
        return Err(too_large(raw.len() / 4 * 3));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw.trim())
        .map_err(|e| Problem::bad_field("body", format!("isBase64Encoded is true but the body is not base64: {e}")))?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(too_large(bytes.len()));
    }
    Ok(bytes)
}

/// Decodes a `POST /orders` body and checks it ([`validate`]).
///
/// # Errors
/// 400 naming the field.
pub fn parse_create(bytes: &[u8]) -> Result<CreateOrderRequest, Problem> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Problem::bad_field("body", "the request body is empty; send a JSON order"));
    }
    let parsed: CreateOrderRequest = decode_json(bytes)?;
    validate(&parsed).map_err(to_bad_field)?;
    Ok(parsed)
}

/// Decodes a `POST /orders/{id}/cancel` body: empty means no reason.
///
/// # Errors
/// 400 naming the field.
pub fn parse_cancel(bytes: &[u8]) -> Result<CancelOrderRequest, Problem> {
    // The body is optional: empty or `null` mean "no reason".
    let trimmed = bytes.trim_ascii();
    if trimmed.is_empty() || trimmed == b"null" {
        return Ok(CancelOrderRequest::default());
    }
    let parsed: CancelOrderRequest = decode_json(bytes)?;
    validate_cancel(&parsed).map_err(to_bad_field)?;
    Ok(parsed)
}

/// [`read_body`] then [`parse_create`]: the `POST /orders` request as a [`CreateOrderRequest`].
///
/// # Errors
/// The problem to answer (400, 413, 415).
pub fn parse_request(request: &ApiGatewayV2httpRequest) -> Result<CreateOrderRequest, Problem> {
    parse_create(&read_body(request)?)
}

fn decode_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    // serde accepts a struct written as a JSON array (`["o-1","c-1",…]`); the API takes objects only.
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => {}
        Some(_) => return Err(Problem::bad_field("body", "the body must be a JSON object")),
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // Malformed JSON (syntax, truncation, invalid UTF-8) is the body's fault, not a field's.
        let malformed = matches!(inner.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof);
        let field = if malformed {
            "body".to_owned()
        } else if path == "." || path == "?" {
            named_field(&inner.to_string()).unwrap_or_else(|| "body".into())
        } else {
            path
        };
        Problem::bad_field(field, inner.to_string())
    })?;
    // Trailing data after the JSON value ("{...} x") is malformed too.
    let mut rest = serde_json::Deserializer::from_slice(bytes).into_iter::<serde::de::IgnoredAny>();
    let _ = rest.next();
    if rest.next().is_some() {
        return Err(Problem::bad_field("body", "unexpected data after the JSON value"));
    }
    Ok(value)
}

fn to_bad_field(e: OrderError) -> Problem {
    match e {
        OrderError::Invalid { field, message } => Problem::bad_field(field, message),
        other => Problem::bad_field("body", other.to_string()),
    }
}

/// serde reports a missing or duplicate top-level field at path "."; name it from the message.
fn named_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `").or_else(|| message.strip_prefix("duplicate field `"))?;
    Some(rest.split('`').next()?.to_owned())
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> OrderError {
    OrderError::Invalid { field: field.into(), message: message.into() }
}

/// Checks the business rules of a decoded create request.
///
/// # Errors
/// [`OrderError::Invalid`] naming the field.
pub fn validate(request: &CreateOrderRequest) -> Result<(), OrderError> {
    if let Some(id) = &request.order_id {
        if !is_valid_order_id(id) {
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
        return Err(invalid("lines", format!("must hold 1 to {MAX_LINES} line items, got {}", request.lines.len())));
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

/// Checks a decoded cancel request.
///
/// # Errors
/// [`OrderError::Invalid`] naming `reason`.
pub fn validate_cancel(request: &CancelOrderRequest) -> Result<(), OrderError> {
    if let Some(reason) = &request.reason {
        if reason.trim().is_empty() || reason.chars().count() > MAX_REASON_CHARS {
            return Err(invalid("reason", format!("must be 1-{MAX_REASON_CHARS} characters and not blank")));
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
        assert!(parse_request(&request(Some(GOOD), Some("application/vnd.orders+json"))).is_ok());
    }

    #[test]
    fn names_the_field_at_fault() {
        let field = |body: &str| parse_request(&request(Some(body), None)).unwrap_err().field.unwrap_or_default();
        assert_eq!(field(r#"{"currency":"EUR","lines":[]}"#), "customer_id");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":0"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":"2""#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":-2"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":1001"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""quantity":2"#, r#""quantity":1.5"#)), "lines[0].quantity");
        assert_eq!(field(&GOOD.replace(r#""12.50""#, "12.5")), "lines[0].unit_price");
        assert_eq!(field(&GOOD.replace(r#""12.50""#, r#""1e3""#)), "lines[0].unit_price");
        assert_eq!(field(&GOOD.replace("EUR", "eur")), "currency");
        assert_eq!(field(r#"{"customer_id":"c","currency":"EUR","lines":[]}"#), "lines");
        assert_eq!(field("{not json"), "body");
        assert_eq!(field(r#"{"customer_id":"#), "body", "truncated JSON is the body's fault");
        assert_eq!(field(r#"{"customer_id":"c","currency":"EUR","lines":[{"sku":"A","quantity":2,"unit_price":"1",]}"#), "body");
        assert_eq!(field("null"), "body");
        assert_eq!(field("[]"), "body");
        let array = r#"["o-1","c-1","EUR",[["SKU-X",2,"3.00"]]]"#;
        let problem = parse_request(&request(Some(array), None)).unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (400, Some("body")), "an order written as an array");
        assert_eq!(field(&format!("{GOOD} {GOOD}")), "body");
        assert_eq!(field(&GOOD.replace(r#""customer_id""#, r#""extra":1,"customer_id""#)), "extra");
        assert_eq!(field(&GOOD.replace(r#""currency":"EUR""#, r#""currency":"EUR","currency":"USD""#)), "currency");
        assert_eq!(field(&GOOD.replace(r#""customer_id":"c-1""#, r#""order_id":"a/b","customer_id":"c-1""#)), "order_id");
    }

    #[test]
    fn too_many_lines_are_refused_naming_lines() {
        let line = r#"{"sku":"A","quantity":1,"unit_price":"1"}"#;
        let body = |n: usize| format!(r#"{{"customer_id":"c","currency":"EUR","lines":[{}]}}"#, vec![line; n].join(","));
        assert!(parse_create(body(MAX_LINES).as_bytes()).is_ok());
        let problem = parse_create(body(MAX_LINES + 1).as_bytes()).unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (400, Some("lines")));
    }

    #[test]
    fn rejects_bad_transport_with_the_right_status() {
        assert_eq!(parse_request(&request(None, None)).unwrap_err().status, 400);
        assert_eq!(parse_request(&request(Some(""), None)).unwrap_err().field.as_deref(), Some("body"));
        let problem = parse_request(&request(Some(GOOD), Some("text/plain"))).unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (415, Some("content-type")));
        assert_eq!(parse_request(&request(Some(GOOD), Some("application/x-www-form-urlencoded"))).unwrap_err().status, 415);
        let big = format!(r#"{{"customer_id":"{}"}}"#, "x".repeat(MAX_BODY_BYTES));
        let problem = parse_request(&request(Some(&big), None)).unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (413, Some("body")));
        let mut r = request(Some("%%%"), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap_err().field.as_deref(), Some("body"));
        let mut r = request(Some(&base64::engine::general_purpose::STANDARD.encode(&big)), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap_err().status, 413, "the limit applies to the decoded body");
    }

    #[test]
    fn decodes_base64_bodies_before_validating() {
        let mut r = request(Some(&base64::engine::general_purpose::STANDARD.encode(GOOD)), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap().customer_id, "c-1");
        let mut r = request(Some(&base64::engine::general_purpose::STANDARD.encode(GOOD.replace(r#""quantity":2"#, r#""quantity":0"#))), None);
        r.is_base64_encoded = true;
        assert_eq!(parse_request(&r).unwrap_err().field.as_deref(), Some("lines[0].quantity"));
    }

    #[test]
    fn cancel_bodies_are_optional_and_checked() {
        assert_eq!(parse_cancel(b"").unwrap(), CancelOrderRequest::default());
        assert_eq!(parse_cancel(b"{}").unwrap(), CancelOrderRequest::default());
        assert_eq!(parse_cancel(b" null ").unwrap(), CancelOrderRequest::default(), "null means no reason");
        assert_eq!(parse_cancel(br#"{"reason":"changed my mind"}"#).unwrap().reason.as_deref(), Some("changed my mind"));
        let field = |body: &str| parse_cancel(body.as_bytes()).unwrap_err().field.unwrap_or_default();
        assert_eq!(field(r#"{"reason":" "}"#), "reason");
        assert_eq!(field(&format!(r#"{{"reason":"{}"}}"#, "r".repeat(MAX_REASON_CHARS + 1))), "reason");
        assert_eq!(field(r#"{"reason":7}"#), "reason");
        assert_eq!(field(r#"{"why":"x"}"#), "why");
        assert_eq!(field(r#"["x"]"#), "body");
    }

    #[test]
    fn oversize_events_are_413_and_other_event_errors_500() {
        let too_large = WriteError::EventTooLarge { event_type: "OrderCreated".into(), bytes: 2, limit: 1 };
        assert_eq!(OrderError::from(too_large).status(), 413);
        assert_eq!(OrderError::from(WriteError::ItemTooLarge { event_type: "OrderCreated".into(), bytes: 2 }).status(), 413);
        assert_eq!(OrderError::from(WriteError::Envelope(outbox::envelope::EnvelopeError::Empty("source"))).status(), 500);
        let (problem, headers) = OrderError::Transaction(TransactionError::Retryable("TransactionConflict".into())).to_problem();
        assert_eq!((problem.status, headers), (503, vec![("retry-after", RETRY_AFTER_SECONDS)]));
    }

    #[test]
    fn routes_by_method_and_path() {
        assert_eq!(route("POST", "/orders"), Route::CreateOrder);
        assert_eq!(route("post", "/orders/"), Route::CreateOrder);
        assert_eq!(route("GET", "/orders"), Route::MethodNotAllowed { allow: "POST" });
        assert_eq!(route("GET", "/orders/o-1"), Route::GetOrder("o-1".into()));
        assert_eq!(route("DELETE", "/orders/o-1"), Route::MethodNotAllowed { allow: "GET" });
        assert_eq!(route("POST", "/orders/o-1/cancel"), Route::CancelOrder("o-1".into()));
        assert_eq!(route("GET", "/orders/o-1/cancel"), Route::MethodNotAllowed { allow: "POST" });
        assert_eq!(route("POST", "/orders//cancel"), Route::NotFound);
        assert_eq!(route("GET", "/"), Route::NotFound);
        assert_eq!(route("GET", ""), Route::NotFound);
        assert_eq!(route("GET", "/orders/o-1/lines"), Route::NotFound);
        assert_eq!(route("POST", "/customers"), Route::NotFound);
    }

    fn event(json: &str) -> ApiGatewayV2httpRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_path_drops_a_named_stage_but_not_the_default_one() {
        let with =
            |stage: &str, raw: &str| event(&format!(r#"{{"rawPath":"{raw}","requestContext":{{"stage":"{stage}","http":{{"method":"GET"}}}}}}"#));
        assert_eq!(request_path(&with("$default", "/orders/o-1")), "/orders/o-1");
        assert_eq!(request_path(&with("prod", "/prod/orders/o-1")), "/orders/o-1");
        assert_eq!(request_path(&with("prod", "/production/orders")), "/production/orders");
        let fallback = event(r#"{"requestContext":{"http":{"method":"GET","path":"/orders/o-2"}}}"#);
        assert_eq!(request_path(&fallback), "/orders/o-2");
    }

    #[test]
    fn null_headers_and_body_deserialise_to_nothing() {
        // aws_lambda_events reads `headers` with deserialize_option: null is an empty map.
        let r = event(r#"{"rawPath":"/orders","headers":null,"body":null,"requestContext":{"http":{"method":"POST"}}}"#);
        assert!(r.headers.is_empty());
        assert_eq!(r.body, None);
        assert_eq!(parse_request(&r).unwrap_err().field.as_deref(), Some("body"));
    }

    // ---------------------------------------------------------------- the handler, mocked DynamoDB

    use std::sync::{Arc, Mutex};

    use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
    use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsOutput};
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_smithy_mocks::{mock, mock_client, MockResponse, Rule, RuleMode};

    use crate::idempotency::KEY_PREFIX;
    use outbox::envelope::OutboxItem;

    type Item = HashMap<String, AttributeValue>;

    /// A mocked orders table: `GetItem` answers from `items`; every `TransactWriteItems` is
    /// recorded and answered by `reasons` (None = commit, Some(codes) = cancelled with those
    /// reasons, the item of a `ConditionalCheckFailed` reason taken from `old`).
    struct Table {
        rules: Vec<Rule>,
        sent: Arc<Mutex<Vec<Vec<TransactWriteItem>>>>,
        gets: Arc<Mutex<usize>>,
    }

    impl Table {
        fn new(items: Vec<Item>, reasons: Option<Vec<&'static str>>, old: Option<Item>) -> Self {
            let gets = Arc::new(Mutex::new(0));
            let counter = gets.clone();
            let get = mock!(aws_sdk_dynamodb::Client::get_item).then_compute_response(move |input| {
                *counter.lock().unwrap() += 1;
                let pk = input.key().and_then(|k| k.get("pk")).cloned();
                let found = items.iter().find(|i| i.get("pk") == pk.as_ref()).cloned();
                MockResponse::<GetItemOutput, GetItemError>::Output(GetItemOutput::builder().set_item(found).build())
            });
            let sent: Arc<Mutex<Vec<Vec<TransactWriteItem>>>> = Default::default();
            let log = sent.clone();
            let transact = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_compute_response(move |input| {
                log.lock().unwrap().push(input.transact_items().to_vec());
                match &reasons {
                    None => MockResponse::Output(TransactWriteItemsOutput::builder().build()),
                    Some(codes) => {
                        let reasons = codes
                            .iter()
                            .map(|code| {
                                let item = (*code == "ConditionalCheckFailed").then(|| old.clone()).flatten();
                                CancellationReason::builder().code(*code).set_item(item).build()
                            })
                            .collect();
                        MockResponse::Error(TransactWriteItemsError::TransactionCanceledException(
                            TransactionCanceledException::builder().message("cancelled").set_cancellation_reasons(Some(reasons)).build(),
                        ))
                    }
                }
            });
            Self { rules: vec![get, transact], sent, gets }
        }

        fn api(&self) -> OrdersApi {
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, self.rules.iter(), |c| {
                c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            });
            OrdersApi::new(client, "orders", OutboxWriter::new("outbox", DEFAULT_RETENTION), "example.orders", DEFAULT_TTL)
        }

        fn sent(&self) -> Vec<Vec<TransactWriteItem>> {
            self.sent.lock().unwrap().clone()
        }
    }

    fn http(method: &str, path: &str, body: Option<&str>, key: Option<&str>) -> LambdaEvent<ApiGatewayV2httpRequest> {
        let mut headers = serde_json::Map::new();
        headers.insert("content-type".into(), "application/json".into());
        if let Some(key) = key {
            headers.insert("idempotency-key".into(), key.into());
        }
        let mut json = serde_json::json!({
            "version": "2.0", "routeKey": format!("{method} {path}"), "rawPath": path, "headers": headers,
            "requestContext": {"stage": "$default", "requestId": "req-1", "http": {"method": method, "path": path}},
            "isBase64Encoded": false,
        });
        if let Some(body) = body {
            json["body"] = body.into();
        }
        LambdaEvent::new(serde_json::from_value(json).unwrap(), lambda_runtime::Context::default())
    }

    fn body_of(response: &ApiGatewayV2httpResponse) -> String {
        match &response.body {
            Some(aws_lambda_events::encodings::Body::Text(t)) => t.clone(),
            other => panic!("no text body: {other:?}"),
        }
    }

    fn json_of(response: &ApiGatewayV2httpResponse) -> serde_json::Value {
        serde_json::from_str(&body_of(response)).unwrap()
    }

    fn header_of<'a>(response: &'a ApiGatewayV2httpResponse, name: &str) -> Option<&'a str> {
        response.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn order_item(id: &str, status: &str, version: u64) -> Item {
        serde_dynamo::to_item(OrderItem {
            pk: order_key(id),
            order_id: id.into(),
            customer_id: "c-1".into(),
            currency: "EUR".into(),
            lines: vec![OrderLine { sku: "A".into(), quantity: 2, unit_price: "12.50".into() }],
            status: status.into(),
            version,
            created_at: "2026-11-29T08:00:00.000Z".into(),
            correlation_id: "c".into(),
        })
        .unwrap()
    }

    fn key_record(key: &str, hash: &str, status: u16, body: &str) -> Item {
        IdempotencyRecord {
            key: key.into(),
            request_hash: hash.into(),
            response: StoredResponse { status, body: body.into(), location: None },
            created_at: "2026-11-29T08:00:00.000Z".into(),
            expires_at: chrono::Utc::now().timestamp() + 3600,
        }
        .to_item()
    }

    #[tokio::test]
    async fn unknown_routes_and_methods_are_problems_without_any_call() {
        let table = Table::new(vec![], None, None);
        let api = table.api();
        let r = api.handle(http("GET", "/customers", None, None)).await.unwrap();
        assert_eq!(r.status_code, 404);
        assert_eq!(header_of(&r, "content-type"), Some("application/problem+json"));
        let r = api.handle(http("DELETE", "/orders/o-1", None, None)).await.unwrap();
        assert_eq!((r.status_code, header_of(&r, "allow")), (405, Some("GET")));
        let r = api.handle(http("PUT", "/orders", None, None)).await.unwrap();
        assert_eq!((r.status_code, header_of(&r, "allow")), (405, Some("POST")));
        let r = api.handle(http("GET", "/orders/not%20an%20id", None, None)).await.unwrap();
        assert_eq!(r.status_code, 404);
        let r = api.handle(http("POST", "/orders", Some(GOOD), Some(""))).await.unwrap();
        assert_eq!((r.status_code, json_of(&r)["field"].as_str()), (400, Some("Idempotency-Key")));
        assert!(table.sent().is_empty());
        assert_eq!(*table.gets.lock().unwrap(), 0);
    }

    #[tokio::test]
    async fn a_create_with_a_key_puts_the_key_record_first_in_the_transaction() {
        let table = Table::new(vec![], None, None);
        let r = table.api().handle(http("POST", "/orders", Some(GOOD), Some("k-1"))).await.unwrap();
        assert_eq!(r.status_code, 201, "{}", body_of(&r));
        let sent = table.sent();
        assert_eq!(sent.len(), 1);
        let items = &sent[0];
        assert_eq!(items.len(), 3);
        let key_put = items[0].put().unwrap();
        assert_eq!(key_put.item()["pk"], AttributeValue::S(format!("{KEY_PREFIX}k-1")));
        assert_eq!(key_put.item()["status_code"], AttributeValue::N("201".into()));
        assert_eq!(key_put.item()["response_body"], AttributeValue::S(body_of(&r)), "the stored body is the answer's body");
        assert_eq!(key_put.item()["request_hash"], AttributeValue::S(request_hash("POST", "/orders", GOOD.as_bytes())));
        assert_eq!(items[1].put().unwrap().condition_expression(), Some("attribute_not_exists(pk)"));
        assert_eq!(items[2].put().unwrap().table_name(), "outbox");
    }

    #[tokio::test]
    async fn a_key_taken_in_a_race_replays_the_record_returned_with_the_cancellation() {
        let hash = request_hash("POST", "/orders", GOOD.as_bytes());
        let stored = r#"{"order_id":"o-first","status":"CREATED","version":1,"event_id":"e-1"}"#;
        let table = Table::new(vec![], Some(vec!["ConditionalCheckFailed", "None", "None"]), Some(key_record("k-1", &hash, 201, stored)));
        let r = table.api().handle(http("POST", "/orders", Some(GOOD), Some("k-1"))).await.unwrap();
        assert_eq!(r.status_code, 201);
        assert_eq!(body_of(&r), stored);
        assert_eq!(header_of(&r, REPLAYED_HEADER), Some("true"));
        // One lookup before the write (absent then), none after: ALL_OLD carried the record.
        assert_eq!(*table.gets.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_key_taken_for_another_body_is_a_422() {
        let table =
            Table::new(vec![], Some(vec!["ConditionalCheckFailed", "ConditionalCheckFailed", "None"]), Some(key_record("k-1", "other", 201, "{}")));
        let r = table.api().handle(http("POST", "/orders", Some(GOOD), Some("k-1"))).await.unwrap();
        assert_eq!(r.status_code, 422);
        assert_eq!(json_of(&r)["field"], "Idempotency-Key");
    }

    #[tokio::test]
    async fn a_known_key_replays_before_any_write_or_state_check() {
        let path = "/orders/o-1/cancel";
        let stored = r#"{"order_id":"o-1","status":"CANCELLED","version":2,"event_id":"e-2"}"#;
        let items = vec![order_item("o-1", STATUS_CANCELLED, 2), key_record("k-2", &request_hash("POST", path, b""), 200, stored)];
        let table = Table::new(items, None, None);
        let r = table.api().handle(http("POST", path, None, Some("k-2"))).await.unwrap();
        assert_eq!((r.status_code, body_of(&r).as_str()), (200, stored));
        let r = table.api().handle(http("POST", path, Some(r#"{"reason":"x"}"#), Some("k-2"))).await.unwrap();
        assert_eq!(r.status_code, 422);
        assert!(table.sent().is_empty(), "a replay or a 422 writes nothing");
    }

    #[tokio::test]
    async fn a_cancel_updates_on_the_read_version_and_emits_the_next_sequence() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], None, None);
        let r = table.api().handle(http("POST", "/orders/o-1/cancel", Some(r#"{"reason":"late"}"#), None)).await.unwrap();
        assert_eq!(r.status_code, 200, "{}", body_of(&r));
        let answer = json_of(&r);
        assert_eq!((answer["status"].as_str(), answer["version"].as_u64()), (Some("CANCELLED"), Some(2)));
        let sent = table.sent();
        let items = &sent[0];
        assert_eq!(items.len(), 2);
        let update = items[0].update().unwrap();
        assert_eq!(update.condition_expression(), Some("#version = :expected AND #status = :created"));
        let values = update.expression_attribute_values().unwrap();
        assert_eq!(values[":expected"], AttributeValue::N("1".into()));
        assert_eq!(values[":next"], AttributeValue::N("2".into()));
        assert_eq!(values[":reason"], AttributeValue::S("late".into()));
        let outbox = OutboxItem::from_item(items[1].put().unwrap().item().clone().into()).unwrap();
        assert_eq!((outbox.event_type.as_str(), outbox.sequence, outbox.pk.as_str()), ("OrderCancelled", 2, "Order#o-1"));
        assert_eq!(outbox.event_id, answer["event_id"].as_str().unwrap());
        let payload: OrderCancelled = serde_json::from_str(&outbox.payload).unwrap();
        assert_eq!(payload.reason.as_deref(), Some("late"));
        assert_eq!(payload.lines[0].quantity, 2);
    }

    #[tokio::test]
    async fn cancel_refusals_are_404_and_409_without_a_write() {
        let table = Table::new(vec![order_item("o-2", STATUS_CANCELLED, 2)], None, None);
        let r = table.api().handle(http("POST", "/orders/o-1/cancel", None, None)).await.unwrap();
        assert_eq!(r.status_code, 404);
        let r = table.api().handle(http("POST", "/orders/o-2/cancel", None, None)).await.unwrap();
        assert_eq!(r.status_code, 409);
        assert!(json_of(&r)["detail"].as_str().unwrap().contains("CANCELLED"));
        assert!(table.sent().is_empty());
    }

    #[tokio::test]
    async fn a_lost_race_is_a_409_and_a_conflict_a_503_with_retry_after() {
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], Some(vec!["ConditionalCheckFailed", "None"]), None);
        let r = table.api().handle(http("POST", "/orders/o-1/cancel", None, None)).await.unwrap();
        assert_eq!(r.status_code, 409);
        assert_eq!(json_of(&r)["title"], "Concurrent change");
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], Some(vec!["None", "ConditionalCheckFailed"]), None);
        let r = table.api().handle(http("POST", "/orders/o-1/cancel", None, None)).await.unwrap();
        assert_eq!(r.status_code, 409, "sequence 2 taken by another writer");
        let table = Table::new(vec![order_item("o-1", STATUS_CREATED, 1)], Some(vec!["TransactionConflict", "None"]), None);
        let r = table.api().handle(http("POST", "/orders/o-1/cancel", None, None)).await.unwrap();
        assert_eq!((r.status_code, header_of(&r, "retry-after")), (503, Some(RETRY_AFTER_SECONDS)));
        let table = Table::new(vec![], Some(vec!["None", "ThrottlingError", "None"]), None);
        let r = table.api().handle(http("POST", "/orders", Some(GOOD), Some("k"))).await.unwrap();
        assert_eq!((r.status_code, header_of(&r, "retry-after")), (503, Some(RETRY_AFTER_SECONDS)));
    }

    #[tokio::test]
    async fn get_answers_the_stored_order() {
        let table = Table::new(vec![order_item("o-1", STATUS_CANCELLED, 2)], None, None);
        let r = table.api().handle(http("GET", "/orders/o-1", None, None)).await.unwrap();
        assert_eq!(r.status_code, 200);
        let view: OrderView = serde_json::from_str(&body_of(&r)).unwrap();
        assert_eq!((view.status.as_str(), view.version, view.customer_id.as_str()), ("CANCELLED", 2, "c-1"));
        let as_json = json_of(&r);
        let mut keys: Vec<&str> = as_json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["created_at", "currency", "customer_id", "lines", "order_id", "status", "version"]);
        let r = table.api().handle(http("GET", "/orders/o-404", None, None)).await.unwrap();
        assert_eq!(r.status_code, 404);
    }
}
