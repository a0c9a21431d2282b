//! The order API's operations (producer): [`OrdersApi::create_order`] (emits `OrderCreated`,
//! sequence 1), [`OrdersApi::get_order`] and [`OrdersApi::cancel_order`] (emits `OrderCancelled`,
//! sequence = the new version). [`crate::http`] serves them over HTTP; this module holds the
//! bodies, their checks and the DynamoDB transactions.
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
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html>).
//!
//! # Bodies
//!
//! `POST /orders` (`application/json`, or any `+json` type; absent `content-type` is read as
//! JSON): `{"order_id"?: string, "customer_id": string, "currency": "EUR", "lines": [{"sku":
//! string, "quantity": 1..=1000, "unit_price": "12.50"}]}` — amounts are decimal *strings*, never
//! JSON numbers, so no client or server ever rounds them; `order_id` (1–64 of `A-Z a-z 0-9 - _`)
//! is generated (UUIDv7) when absent; 1 to [`MAX_LINES`] lines; `"attachment"?: string`, a
//! document attached to the order (free text, or a file as base64), up to
//! `ORDER_ATTACHMENT_MAX_BYTES` bytes ([`DEFAULT_MAX_ATTACHMENT_BYTES`] by default; above it a 400
//! naming `attachment`). The attachment travels in the `OrderCreated` event; the order item keeps
//! only its size (`attachment_bytes`: a DynamoDB item holds at most 400 KB). An order whose event
//! does not fit an outbox item or one `PutEvents` entry goes by claim check: with
//! `CLAIM_CHECK_BUCKET` set ([`outbox_lambda::claim_check`]) its payload is stored in S3 before
//! the transaction and the event carries `detail.data_ref`; without it the order is refused (413).
//!
//! `POST /orders/{id}/cancel`: no body, or `{"reason"?: string}` (1–[`MAX_REASON_CHARS`]
//! characters).
//!
//! # Errors
//!
//! A bad body is a 400 [`Problem`] naming the field at fault (`lines[0].quantity`, `body`,
//! `reason`); a refused operation is an [`OrderError`] with its status ([`OrderError::status`]):
//! 404 no such order, 409 the order exists / is not cancellable / a concurrent change won, 413
//! event too large, 422 key reused for another request, 503 when DynamoDB conflicts or throttles.
//! A refused request writes nothing.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use serde::{Deserialize, Serialize};

use crate::auth::{AuthMode, Caller};
use crate::http::Problem;
use crate::idempotency::{
    read_error, IdempotencyRecord, IdempotencyStore, IdempotentRequest, ReadError, Replay, StoredResponse, DEFAULT_TTL, HEADER as IDEMPOTENCY_HEADER,
};
use outbox::transaction::{transact_write, TransactionError};
use outbox::writer::{Event, OutboxWriter, WriteError, DEFAULT_MAX_PUT_EVENTS_BYTES};
use outbox_lambda::config::{ConfigError, Env, DEFAULT_RETENTION};

/// Largest accepted request body, bytes (after base64 decoding), not counting the attachment:
/// `POST /orders` accepts this plus the configured attachment maximum
/// ([`OrdersApi::body_limit`]).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Default largest `attachment`, bytes: 4 MiB, so a whole order stays under Lambda's 6 MB
/// synchronous request payload (<https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html>)
/// and the claim check's 10 MiB maximum.
pub const DEFAULT_MAX_ATTACHMENT_BYTES: usize = 4 * 1024 * 1024;
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
    /// A document attached to the order (free text or base64), at most the API's configured
    /// maximum ([`OrdersApi::max_attachment_bytes`]).
    #[serde(default)]
    pub attachment: Option<String>,
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
    /// The order's attachment, when it has one (absent from the JSON otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<String>,
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
    /// Size of the attachment in bytes, when the order has one (the attachment itself is in the
    /// `OrderCreated` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment_bytes: Option<u64>,
    /// The subject (`sub`) that created the order ([`crate::auth`]); read from the item, never
    /// answered (`None`: created with authentication off).
    #[serde(default, skip_serializing)]
    pub owner: Option<String>,
}

/// The result of a POST: done now, or an earlier answer replayed for its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// Written by this request.
    Done(T),
    /// A request with the same key and hash was answered before: nothing was written.
    Replayed(StoredResponse),
}

impl<T> Answer<T> {
    /// `f` applied to an answer done now; a replay unchanged.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Done(done) => Answer::Done(f(done)),
            Answer::Replayed(stored) => Answer::Replayed(stored),
        }
    }
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
    /// Storing the event's payload in S3 (claim check) failed: 503 when retryable, else 500.
    #[error(transparent)]
    PayloadStore(outbox::claim_check::ClaimCheckError),
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
            WriteError::EventTooLarge { .. } | WriteError::ItemTooLarge { .. } | WriteError::PayloadTooLarge { .. } => OrderError::TooLarge(e),
            WriteError::ClaimCheck(e) => OrderError::PayloadStore(e),
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
            OrderError::PayloadStore(e) if e.is_retryable() => 503,
            OrderError::Transaction(_) | OrderError::Read { .. } | OrderError::Event(_) | OrderError::PayloadStore(_) => 500,
        }
    }

    /// The problem document of this error (the router adds `Retry-After` to a 503).
    pub fn to_problem(&self) -> Problem {
        match self {
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
            _ if self.status() == 503 => Problem::new(503, "Try again", "the order store is busy; nothing was written"),
            _ => Problem::new(500, "Internal error", "the request could not be carried out; nothing was written"),
        }
    }
}

/// The order API: DynamoDB client and configuration, built once per cold start and shared by
/// every request through the router's state ([`crate::http::router`]).
#[derive(Debug, Clone)]
pub struct OrdersApi {
    dynamodb: aws_sdk_dynamodb::Client,
    orders_table: String,
    writer: OutboxWriter,
    source: String,
    idempotency: IdempotencyStore,
    max_attachment_bytes: usize,
    auth: AuthMode,
}

impl OrdersApi {
    /// Reads `ORDERS_TABLE`, `OUTBOX_TABLE`, `EVENT_SOURCE` (default `example.orders`),
    /// `OUTBOX_RETENTION_SECONDS` (default 7 days), `PUT_EVENTS_MAX_REQUEST_BYTES` and
    /// `IDEMPOTENCY_TTL_SECONDS` (default 86400 = 24 h), `ORDER_ATTACHMENT_MAX_BYTES` (default
    /// [`DEFAULT_MAX_ATTACHMENT_BYTES`]) and the claim check's variables
    /// ([`outbox_lambda::claim_check`]: `CLAIM_CHECK_BUCKET`, unset = no claim check).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let writer = OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.seconds("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?)
            .with_max_event_bytes(env.bytes("PUT_EVENTS_MAX_REQUEST_BYTES", DEFAULT_MAX_PUT_EVENTS_BYTES)?);
        let writer = match outbox_lambda::claim_check(sdk, env)? {
            Some(claim_check) => writer.with_claim_check(claim_check),
            None => writer,
        };
        let api = Self::new(
            aws_sdk_dynamodb::Client::new(sdk),
            env.required("ORDERS_TABLE")?,
            writer,
            env.optional("EVENT_SOURCE", "example.orders"),
            env.seconds("IDEMPOTENCY_TTL_SECONDS", DEFAULT_TTL)?,
        );
        let auth = AuthMode::parse(&env.optional("ORDER_API_AUTH", "jwt")).map_err(|reason| ConfigError::Invalid {
            name: "ORDER_API_AUTH",
            value: env.optional("ORDER_API_AUTH", "jwt"),
            reason,
        })?;
        if auth == AuthMode::None {
            tracing::warn!("ORDER_API_AUTH=none: the order API authenticates no one and every caller may read and cancel every order");
        }
        Ok(api.with_max_attachment_bytes(env.bytes("ORDER_ATTACHMENT_MAX_BYTES", DEFAULT_MAX_ATTACHMENT_BYTES)?).with_auth(auth))
    }

    /// Sets the authentication mode (default [`AuthMode::Jwt`]; `from_env` reads `ORDER_API_AUTH`).
    pub fn with_auth(mut self, auth: AuthMode) -> Self {
        self.auth = auth;
        self
    }

    /// The authentication mode.
    pub fn auth(&self) -> AuthMode {
        self.auth
    }

    /// Sets the largest `attachment` accepted, bytes (default [`DEFAULT_MAX_ATTACHMENT_BYTES`]).
    pub fn with_max_attachment_bytes(mut self, bytes: usize) -> Self {
        self.max_attachment_bytes = bytes;
        self
    }

    /// The largest `attachment` accepted, bytes.
    pub fn max_attachment_bytes(&self) -> usize {
        self.max_attachment_bytes
    }

    /// The largest `POST /orders` body accepted, bytes: [`MAX_BODY_BYTES`] plus the attachment
    /// maximum (an attachment written with many JSON escapes can make a body over it: 413).
    pub fn body_limit(&self) -> usize {
        MAX_BODY_BYTES.saturating_add(self.max_attachment_bytes)
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
        Self {
            dynamodb,
            orders_table,
            writer,
            source: source.into(),
            idempotency,
            max_attachment_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
            auth: AuthMode::default(),
        }
    }

    /// Validates `request` and writes the order (owned by `caller`'s subject) and its
    /// `OrderCreated` event atomically, with the key record of `idempotent` in the same
    /// transaction when given.
    ///
    /// # Errors
    /// [`OrderError`]: `Invalid`, `AlreadyExists`, `KeyReused`, `TooLarge`, `Transaction`, `Read`.
    pub async fn create_order(
        &self,
        request: CreateOrderRequest,
        caller: &Caller,
        idempotent: Option<&IdempotentRequest>,
        correlation_id: &str,
        trace_header: Option<String>,
    ) -> Result<Answer<CreatedOrder>, OrderError> {
        validate(&request)?;
        let attachment_bytes = request.attachment.as_ref().map(|a| a.len());
        if let Some(bytes) = attachment_bytes.filter(|b| *b > self.max_attachment_bytes) {
            return Err(invalid("attachment", format!("is {bytes} bytes; the limit is {}", self.max_attachment_bytes)));
        }
        let now = chrono::Utc::now();
        if let Some(stored) = self.replay_if_known(idempotent, now.timestamp()).await? {
            return Ok(Answer::Replayed(stored));
        }
        let order_id = request.order_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let data = OrderCreated {
            order_id: order_id.clone(),
            customer_id: request.customer_id,
            currency: request.currency,
            lines: request.lines,
            attachment: request.attachment,
        };
        // Inline when the event fits an outbox item and a PutEvents entry; otherwise (claim check
        // configured) its payload is uploaded to S3 here, before the transaction.
        let (event, event_put) = self.writer.prepare(order_created_event(&data, &self.source, correlation_id, trace_header)).await?;
        // The event's lines carry its fields (outbox::envelope::event_span).
        let span = event.span();
        if let Some(reference) = &event.payload_ref {
            span.in_scope(
                || tracing::info!(bucket = %reference.bucket, key = %reference.key, size = reference.size, "payload stored by claim check"),
            );
        }
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
            attachment_bytes: attachment_bytes.map(|b| b as u64),
            owner: caller.subject.clone(),
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
        let (items, key_at) = self.with_key(idempotent, stored, now, vec![TransactWriteItem::builder().put(put).build(), event_put]);
        match transact_write(&self.dynamodb, items).await {
            Ok(()) => {
                span.in_scope(|| tracing::info!(order_id = %created.order_id, "order created"));
                Ok(Answer::Done(created))
            }
            Err(TransactionError::ConditionFailed { index, item }) if Some(index) == key_at => self.after_key_taken(idempotent, item).await,
            Err(TransactionError::ConditionFailed { .. }) => Err(OrderError::AlreadyExists(order_id)),
            Err(e) => Err(e.into()),
        }
    }

    /// Cancels order `order_id`: emits `OrderCancelled` with sequence = the new version, in one
    /// transaction with the conditional update (and the key record of `idempotent`). An order
    /// `caller` may not access ([`Caller::may_access`]) is `NotFound`, as one that does not exist.
    ///
    /// # Errors
    /// [`OrderError`]: `Invalid`, `NotFound`, `NotCancellable`, `Conflict`, `KeyReused`,
    /// `Transaction`, `Read`.
    pub async fn cancel_order(
        &self,
        order_id: &str,
        request: CancelOrderRequest,
        caller: &Caller,
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
        let order = self.read_visible(order_id, caller).await?;
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
            Ok(()) => {
                event.span().in_scope(|| tracing::info!(order_id = %cancelled.order_id, version = next, "order cancelled"));
                Ok(Answer::Done(cancelled))
            }
            Err(TransactionError::ConditionFailed { index, item }) if Some(index) == key_at => self.after_key_taken(idempotent, item).await,
            // The order's version or status moved, or sequence `next` is taken: another change won.
            Err(TransactionError::ConditionFailed { .. }) => Err(OrderError::Conflict(order_id.to_owned())),
            Err(e) => Err(e.into()),
        }
    }

    /// The order `order_id` (strongly consistent read), when `caller` may access it.
    ///
    /// # Errors
    /// [`OrderError::NotFound`] (no such order, or another subject's), or [`OrderError::Read`].
    pub async fn get_order(&self, order_id: &str, caller: &Caller) -> Result<OrderView, OrderError> {
        self.read_visible(order_id, caller).await
    }

    /// The order, or `NotFound` when it does not exist or `caller` may not access it (the same
    /// answer, so another subject's order ids reveal nothing).
    async fn read_visible(&self, order_id: &str, caller: &Caller) -> Result<OrderView, OrderError> {
        match self.read_order(order_id).await? {
            Some(order) if caller.may_access(order.owner.as_deref()) => Ok(order),
            Some(_) => {
                tracing::info!(order_id, subject = caller.subject.as_deref().unwrap_or(""), "order of another subject: answered as not found");
                Err(OrderError::NotFound(order_id.to_owned()))
            }
            None => Err(OrderError::NotFound(order_id.to_owned())),
        }
    }

    async fn read_order(&self, order_id: &str) -> Result<Option<OrderView>, OrderError> {
        read_order(&self.dynamodb, &self.orders_table, order_id).await
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
pub fn order_created_event(data: &OrderCreated, source: &str, correlation_id: &str, trace_header: Option<String>) -> Event {
    order_event("OrderCreated", &data.order_id, 1, to_json(data), source, correlation_id, trace_header)
}

/// The outbox event of a cancellation: `OrderCancelled` version [`EVENT_VERSION`], aggregate
/// `Order#<order_id>`, `sequence` = the order's new version, `previous` = `{"OrderCreated": 1}`:
/// an order emits `OrderCreated` (sequence 1) and, from status `CREATED` only, one
/// `OrderCancelled`, so that is the whole history before it (an ordered consumer of these two
/// types waits for nothing else).
pub fn order_cancelled_event(data: &OrderCancelled, sequence: u64, source: &str, correlation_id: &str, trace_header: Option<String>) -> Event {
    order_event("OrderCancelled", &data.order_id, sequence, to_json(data), source, correlation_id, trace_header).previous("OrderCreated", 1)
}

pub(crate) fn order_event(
    event_type: &str,
    order_id: &str,
    sequence: u64,
    payload: String,
    source: &str,
    correlation_id: &str,
    trace_header: Option<String>,
) -> Event {
    Event {
        event_type: event_type.into(),
        event_version: EVENT_VERSION,
        source: source.into(),
        aggregate_type: AGGREGATE_TYPE.into(),
        aggregate_id: order_id.to_owned(),
        sequence,
        payload,
        correlation_id: correlation_id.to_owned(),
        trace_header,
        previous: Default::default(),
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
    #[serde(skip_serializing_if = "Option::is_none")]
    attachment_bytes: Option<u64>,
    /// The creating caller's subject ([`crate::auth`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

/// Partition key of an order in the orders table: `ORDER#<order_id>`.
pub fn order_key(order_id: &str) -> String {
    format!("ORDER#{order_id}")
}

/// The order `order_id` of `orders_table` (strongly consistent `GetItem`), or `None`.
///
/// # Errors
/// [`OrderError::Read`]: the read failed (`retryable` as the project's AWS error classification
/// says) or the stored item is not an order.
pub(crate) async fn read_order(dynamodb: &aws_sdk_dynamodb::Client, orders_table: &str, order_id: &str) -> Result<Option<OrderView>, OrderError> {
    let out = dynamodb
        .get_item()
        .table_name(orders_table)
        .key("pk", AttributeValue::S(order_key(order_id)))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| OrderError::from(read_error(&e)))?;
    match out.item {
        None => Ok(None),
        Some(item) => serde_dynamo::from_item(item)
            .map(Some)
            .map_err(|e| OrderError::Read { message: format!("order {order_id} is malformed: {e}"), retryable: false }),
    }
}

/// The `Location` of order `order_id`: `/orders/<order_id>`.
pub fn location_of(order_id: &str) -> String {
    format!("/orders/{order_id}")
}

/// JSON text of one of this module's types (strings, integers, options and lists of such
/// structs), which serde_json always serialises.
pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".into())
}

/// Whether `id` is a valid order id: 1–64 of `A-Z a-z 0-9 - _`.
pub fn is_valid_order_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
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

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"A","quantity":2,"unit_price":"12.50"}]}"#;

    #[test]
    fn accepts_a_valid_order() {
        let parsed = parse_create(GOOD.as_bytes()).unwrap();
        assert_eq!(parsed.lines[0].unit_price, "12.50");
        assert_eq!(parsed.customer_id, "c-1");
    }

    #[test]
    fn names_the_field_at_fault() {
        let field = |body: &str| parse_create(body.as_bytes()).unwrap_err().field.unwrap_or_default();
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
        assert_eq!(field(""), "body");
        let array = r#"["o-1","c-1","EUR",[["SKU-X",2,"3.00"]]]"#;
        let problem = parse_create(array.as_bytes()).unwrap_err();
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
        let problem = OrderError::Transaction(TransactionError::Retryable("TransactionConflict".into())).to_problem();
        assert_eq!((problem.status, problem.title.as_str()), (503, "Try again"));
    }

    #[test]
    fn order_ids_are_1_to_64_safe_characters() {
        assert!(is_valid_order_id("o-1_A"));
        assert!(is_valid_order_id(&"a".repeat(64)));
        assert!(!is_valid_order_id(""));
        assert!(!is_valid_order_id(&"a".repeat(65)));
        assert!(!is_valid_order_id("a.b"));
        assert!(!is_valid_order_id("not an id"));
    }
}
