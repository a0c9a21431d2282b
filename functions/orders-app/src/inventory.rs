//! The inventory consumer: reserves stock for every `OrderCreated` event and gives it back for
//! every `OrderCancelled` event, exactly once (one function, routed by `detail-type`).
//!
//! Transactional inbox mode ([`crate::inbox`]), with ordering per order: the inbox claim, the
//! order's sequence check, one conditional stock update per SKU (`available >= :qty`), the
//! reservation record and the consumer's own outbox event (`InventoryReserved`) go in ONE
//! `TransactWriteItems` call. A duplicate delivery writes nothing. When stock is short, a second
//! transaction records the rejection and emits `InventoryRejected` (a business outcome: no
//! retry, no dead-letter queue). A cancellation releases exactly what was reserved
//! (`InventoryReleased`), and only for a reservation in status `RESERVED`; an `OrderCancelled`
//! that arrives before its `OrderCreated` was applied is a sequence gap and is retried. The
//! consumer's events flow through the same outbox and relay as the orders' own.
//!
//! Events no retry can fix (malformed, an event id reused with another payload) go to the
//! dead-letter queue on the first attempt when `DEAD_LETTER_QUEUE_URL` is set; every other
//! failure is returned, so Lambda retries it and, when retries run out, sends it to the
//! function's on-failure destination.
//!
//! Inventory table items: `pk` = `SKU#<sku>` with `available` and `reserved` (N), and
//! `pk` = `RESERVATION#<order_id>` with `status` (`RESERVED`/`REJECTED`/`RELEASED`), `lines`
//! (per SKU: `{"sku": qty}`), `event_id`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;

use crate::orders::{OrderCreated, OrderLine};
use outbox::config::{ConfigError, Env, DEFAULT_RETENTION};
use outbox::consumer::{decode_envelope, decode_event, ConsumerDeadLetterQueue, DeliveredEvent, MalformedEvent, RawEvent};
use outbox::inbox::{Inbox, InboxError, InboxOutcome};
use outbox::writer::{NewEvent, OutboxWriter, WriteError};

/// Aggregate type of reservations in the outbox.
pub const AGGREGATE_TYPE: &str = "Reservation";

/// How one delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Stock reserved for every line.
    Reserved,
    /// Not enough stock: rejection recorded, `InventoryRejected` emitted.
    Rejected,
    /// A cancellation gave the reserved stock back, `InventoryReleased` emitted.
    Released,
    /// A cancellation of an order whose stock was not reserved (rejected): nothing to give back.
    NothingToRelease,
    /// The event was applied before: no effect.
    Duplicate,
    /// The event can never be processed and was sent to the dead-letter queue.
    DeadLettered,
}

/// `InventoryReserved` and `InventoryRejected` data (version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ReservationSettled {
    /// Order id.
    pub order_id: String,
    /// The order's lines.
    pub lines: Vec<OrderLine>,
    /// Why it was rejected (`InventoryRejected` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `InventoryReleased` data (version 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct InventoryReleased {
    /// Order id.
    pub order_id: String,
    /// Units given back, per SKU.
    pub released: BTreeMap<String, u64>,
}

/// `OrderCancelled` data as this consumer reads it (other fields are ignored).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct OrderCancelledData {
    /// Order id.
    pub order_id: String,
}

/// The handler's answer (logged by Lambda; the local runtime counts it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumerResponse {
    /// What happened.
    pub outcome: Outcome,
    /// `detail.metadata.id`.
    pub event_id: String,
}

/// Why a delivery failed. Lambda retries failed asynchronous invocations (the template's
/// `EventInvokeConfig.MaximumRetryAttempts`), then sends them to the on-failure destination.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    /// The event can never be processed.
    #[error(transparent)]
    Malformed(#[from] MalformedEvent),
    /// The inbox transaction failed or found a payload conflict.
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// The consumer's own event could not be built.
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl ConsumerError {
    /// Short machine-readable name, e.g. `MalformedEvent`, `SequenceGap`.
    pub fn error_type(&self) -> &'static str {
        match self {
            ConsumerError::Malformed(_) => "MalformedEvent",
            ConsumerError::Inbox(InboxError::PayloadMismatch { .. }) => "PayloadMismatch",
            ConsumerError::Inbox(InboxError::SequenceGap { .. }) => "SequenceGap",
            ConsumerError::Inbox(InboxError::InProgress { .. }) => "InProgress",
            ConsumerError::Inbox(i) if i.is_retryable() => "Retryable",
            ConsumerError::Inbox(_) => "InboxError",
            ConsumerError::Write(_) => "WriteError",
        }
    }

    /// Whether a later attempt can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ConsumerError::Malformed(_) | ConsumerError::Write(_) => false,
            ConsumerError::Inbox(e) => e.is_retryable(),
        }
    }
}

impl From<ConsumerError> for Diagnostic {
    fn from(e: ConsumerError) -> Self {
        Diagnostic { error_type: e.error_type().into(), error_message: e.to_string() }
    }
}

/// The reserve-inventory function, built once per cold start.
#[derive(Debug, Clone)]
pub struct InventoryConsumer {
    inbox: Inbox,
    inventory_table: String,
    writer: OutboxWriter,
    source: String,
    dead_letters: Option<ConsumerDeadLetterQueue>,
}

impl InventoryConsumer {
    /// Reads `INBOX_TABLE`, `INVENTORY_TABLE`, `OUTBOX_TABLE`, `CONSUMER_NAME` (default
    /// `reserve-inventory`), `EVENT_SOURCE` (default `example.inventory`),
    /// `INBOX_RETENTION_SECONDS` and `OUTBOX_RETENTION_SECONDS` (default 7 days each), and
    /// `DEAD_LETTER_QUEUE_URL` (optional: where events no retry can fix go at once).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let client = aws_sdk_dynamodb::Client::new(sdk);
        let consumer = env.optional("CONSUMER_NAME", "reserve-inventory");
        let dead_letters = match env.optional("DEAD_LETTER_QUEUE_URL", "") {
            url if url.is_empty() => None,
            url => Some(ConsumerDeadLetterQueue::new(aws_sdk_sqs::Client::new(sdk), url, consumer.clone())),
        };
        Ok(Self {
            inbox: Inbox::new(client, env.required("INBOX_TABLE")?, consumer, env.seconds("INBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?).ordered(),
            dead_letters,
            inventory_table: env.required("INVENTORY_TABLE")?,
            writer: OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.seconds("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?),
            source: env.optional("EVENT_SOURCE", "example.inventory"),
        })
    }

    /// Lambda handler for one EventBridge event (`OrderCreated` or `OrderCancelled`).
    ///
    /// # Errors
    /// A retryable [`ConsumerError`] (Lambda retries it, then sends it to the on-failure
    /// destination), or a non-retryable one when no dead-letter queue is configured or it
    /// cannot be reached.
    pub async fn handle(&self, event: LambdaEvent<RawEvent>) -> Result<ConsumerResponse, ConsumerError> {
        let payload = &event.payload;
        let envelope = decode_envelope(payload);
        let result = match &envelope {
            Err(e) => Err(e.clone().into()),
            Ok(event) => self.dispatch(event).await,
        };
        let envelope_id = envelope.as_ref().ok().and_then(|e| e.id.clone()).unwrap_or_default();
        match result {
            Ok((outcome, metadata)) => {
                tracing::info!(event_id = %metadata.id, event_type = %metadata.event_type, subject = %metadata.subject, correlation_id = %metadata.correlation_id, outcome = ?outcome, "event handled");
                Ok(ConsumerResponse { outcome, event_id: metadata.id })
            }
            Err(e) if !e.is_retryable() && self.dead_letters.is_some() => {
                let queue = self.dead_letters.as_ref().expect("checked by the guard");
                tracing::error!(envelope_id = %envelope_id, error_type = e.error_type(), error = %e, "event can never be processed; dead-lettering it now");
                queue.send(payload, e.error_type(), &e.to_string()).await.map_err(|send_error| {
                    tracing::error!(error = %send_error, "the dead-letter queue is unreachable; failing the invocation instead");
                    e
                })?;
                let event_id = envelope
                    .ok()
                    .and_then(|ev| serde_json::from_str::<serde_json::Value>(ev.detail.get()).ok())
                    .and_then(|d| d.pointer("/metadata/id").and_then(|v| v.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                Ok(ConsumerResponse { outcome: Outcome::DeadLettered, event_id })
            }
            Err(e) => {
                tracing::error!(envelope_id = %envelope_id, error_type = e.error_type(), error = %e, "event failed");
                Err(e)
            }
        }
    }

    /// Routes a decoded envelope by `detail-type`.
    async fn dispatch(&self, event: &outbox::consumer::RawEventBridgeEvent) -> Result<(Outcome, outbox::envelope::EventMetadata), ConsumerError> {
        match event.detail_type.as_str() {
            "OrderCreated" => match decode_event::<OrderCreated>(event) {
                Ok(delivered) => self.reserve(&delivered).await.map(|o| (o, delivered.metadata)),
                Err(e) => Err(e.into()),
            },
            "OrderCancelled" => match decode_event::<OrderCancelledData>(event) {
                Ok(delivered) => self.release(&delivered).await.map(|o| (o, delivered.metadata)),
                Err(e) => Err(e.into()),
            },
            other => Err(MalformedEvent(format!("detail-type {other:?} is not handled here (OrderCreated, OrderCancelled)")).into()),
        }
    }

    /// Reserves stock for the order, exactly once per event id.
    ///
    /// # Errors
    /// [`ConsumerError::Inbox`] when the transaction fails (retryable or a payload conflict).
    pub async fn reserve(&self, event: &DeliveredEvent<OrderCreated>) -> Result<Outcome, ConsumerError> {
        let order = &event.data;
        if order.lines.is_empty() {
            return Err(MalformedEvent("detail.data.lines is empty".into()).into());
        }
        let hash = Inbox::payload_hash(&event.raw_data);
        let mut quantities: BTreeMap<&str, u64> = BTreeMap::new();
        for line in &order.lines {
            *quantities.entry(line.sku.as_str()).or_default() += u64::from(line.quantity);
        }
        let skus: Vec<&str> = quantities.keys().copied().collect();
        let mut writes: Vec<TransactWriteItem> = quantities.iter().map(|(sku, qty)| self.take_stock(sku, *qty)).collect();
        writes.push(self.reservation(order, &event.metadata.id, "RESERVED", None, &quantities));
        let settled = ReservationSettled { order_id: order.order_id.clone(), lines: order.lines.clone(), reason: None };
        writes.push(self.event_item("InventoryReserved", &order.order_id, &settled, &event.metadata.correlation_id, 1)?);
        match self.inbox.apply(&event.metadata, &hash, writes).await? {
            InboxOutcome::Applied => Ok(Outcome::Reserved),
            InboxOutcome::Duplicate => Ok(Outcome::Duplicate),
            // The reservation record exists: this order was settled by another event id.
            InboxOutcome::BusinessConditionFailed { index } if index >= skus.len() => Ok(Outcome::Duplicate),
            InboxOutcome::BusinessConditionFailed { index } => {
                let reason = format!("insufficient stock for {}", skus[index]);
                let writes = vec![
                    self.reservation(order, &event.metadata.id, "REJECTED", Some(&reason), &BTreeMap::new()),
                    self.event_item(
                        "InventoryRejected",
                        &order.order_id,
                        &ReservationSettled { order_id: order.order_id.clone(), lines: order.lines.clone(), reason: Some(reason.clone()) },
                        &event.metadata.correlation_id,
                        1,
                    )?,
                ];
                match self.inbox.apply(&event.metadata, &hash, writes).await? {
                    InboxOutcome::Applied => Ok(Outcome::Rejected),
                    InboxOutcome::Duplicate | InboxOutcome::BusinessConditionFailed { .. } => Ok(Outcome::Duplicate),
                }
            }
        }
    }

    /// Gives back the stock reserved for the cancelled order, exactly once per event id.
    ///
    /// # Errors
    /// [`ConsumerError::Inbox`] when the transaction fails, the order's `OrderCreated` was not
    /// applied yet (sequence gap), or on a payload conflict.
    pub async fn release(&self, event: &DeliveredEvent<OrderCancelledData>) -> Result<Outcome, ConsumerError> {
        let hash = Inbox::payload_hash(&event.raw_data);
        let order_id = &event.data.order_id;
        let reservation = self
            .inbox
            .client()
            .get_item()
            .table_name(&self.inventory_table)
            .key("pk", AttributeValue::S(format!("RESERVATION#{order_id}")))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| InboxError::Sdk { action: "read reservation", reason: aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string() })?
            .item;
        let reserved: BTreeMap<String, u64> = reservation
            .as_ref()
            .filter(|r| r.get("status").and_then(|s| s.as_s().ok()).is_some_and(|s| s == "RESERVED"))
            .and_then(|r| r.get("lines"))
            .and_then(|l| l.as_m().ok())
            .map(|m| m.iter().filter_map(|(sku, q)| Some((sku.clone(), q.as_n().ok()?.parse().ok()?))).collect())
            .unwrap_or_default();
        if reserved.is_empty() {
            // Rejected (or never reserved): record the event as applied, nothing to give back.
            return Ok(match self.inbox.apply(&event.metadata, &hash, vec![]).await? {
                InboxOutcome::Applied => Outcome::NothingToRelease,
                _ => Outcome::Duplicate,
            });
        }
        let mut writes: Vec<TransactWriteItem> = reserved.iter().map(|(sku, qty)| self.give_back(sku, *qty)).collect();
        let update = Update::builder()
            .table_name(&self.inventory_table)
            .key("pk", AttributeValue::S(format!("RESERVATION#{order_id}")))
            .update_expression("SET #status = :released, released_by = :event")
            .condition_expression("#status = :reserved")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":released", AttributeValue::S("RELEASED".into()))
            .expression_attribute_values(":reserved", AttributeValue::S("RESERVED".into()))
            .expression_attribute_values(":event", AttributeValue::S(event.metadata.id.clone()))
            .build()
            .expect("Update has its required fields");
        writes.push(TransactWriteItem::builder().update(update).build());
        let released = InventoryReleased { order_id: order_id.clone(), released: reserved.clone() };
        writes.push(self.event_item("InventoryReleased", order_id, &released, &event.metadata.correlation_id, 2)?);
        match self.inbox.apply(&event.metadata, &hash, writes).await? {
            InboxOutcome::Applied => Ok(Outcome::Released),
            // Released meanwhile by another event id: nothing more to give back.
            InboxOutcome::Duplicate | InboxOutcome::BusinessConditionFailed { .. } => Ok(Outcome::Duplicate),
        }
    }

    fn give_back(&self, sku: &str, quantity: u64) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(&self.inventory_table)
            .key("pk", AttributeValue::S(stock_key(sku)))
            .update_expression("SET available = available + :q, reserved = reserved - :q")
            .condition_expression("reserved >= :q")
            .expression_attribute_values(":q", AttributeValue::N(quantity.to_string()))
            .build()
            .expect("Update has its required fields");
        TransactWriteItem::builder().update(update).build()
    }

    fn take_stock(&self, sku: &str, quantity: u64) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(&self.inventory_table)
            .key("pk", AttributeValue::S(stock_key(sku)))
            .update_expression("SET available = available - :q, reserved = if_not_exists(reserved, :zero) + :q")
            .condition_expression("available >= :q")
            .expression_attribute_values(":q", AttributeValue::N(quantity.to_string()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .build()
            .expect("Update has its required fields");
        TransactWriteItem::builder().update(update).build()
    }

    fn reservation(
        &self,
        order: &OrderCreated,
        event_id: &str,
        status: &str,
        reason: Option<&str>,
        quantities: &BTreeMap<&str, u64>,
    ) -> TransactWriteItem {
        let mut item = std::collections::HashMap::from([
            ("pk".to_owned(), AttributeValue::S(format!("RESERVATION#{}", order.order_id))),
            ("order_id".to_owned(), AttributeValue::S(order.order_id.clone())),
            ("status".to_owned(), AttributeValue::S(status.into())),
            ("event_id".to_owned(), AttributeValue::S(event_id.into())),
            ("settled_at".to_owned(), AttributeValue::S(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true))),
        ]);
        if let Some(reason) = reason {
            item.insert("reason".into(), AttributeValue::S(reason.into()));
        }
        if !quantities.is_empty() {
            let lines = quantities.iter().map(|(sku, q)| ((*sku).to_owned(), AttributeValue::N(q.to_string()))).collect();
            item.insert("lines".into(), AttributeValue::M(lines));
        }
        let put = Put::builder()
            .table_name(&self.inventory_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// The outbox put of the consumer's own event about the reservation of `order_id`
    /// (aggregate `Reservation`, `sequence` 1 when settled, 2 when released).
    fn event_item<T: Serialize>(
        &self,
        event_type: &str,
        order_id: &str,
        data: &T,
        correlation_id: &str,
        sequence: u64,
    ) -> Result<TransactWriteItem, WriteError> {
        // Our payload types hold strings, integers and maps with string keys: they serialise.
        let payload = serde_json::to_string(data).expect("payload serialises");
        let item = self.writer.outbox_item(
            NewEvent {
                event_type: event_type.into(),
                event_version: 1,
                source: self.source.clone(),
                aggregate_type: AGGREGATE_TYPE.into(),
                aggregate_id: order_id.to_owned(),
                sequence,
                payload,
                correlation_id: correlation_id.into(),
                trace_header: None,
            },
            chrono::Utc::now(),
        )?;
        Ok(self.writer.put(&item))
    }
}

/// Inventory table key of a SKU's stock.
pub fn stock_key(sku: &str) -> String {
    format!("SKU#{sku}")
}

/// Sets a SKU's stock (`available`, `reserved` = 0): used to seed the demo and tests.
///
/// # Errors
/// The SDK error, if the put fails.
pub async fn put_stock(client: &aws_sdk_dynamodb::Client, table: &str, sku: &str, available: u64) -> Result<(), aws_sdk_dynamodb::Error> {
    client
        .put_item()
        .table_name(table)
        .item("pk", AttributeValue::S(stock_key(sku)))
        .item("sku", AttributeValue::S(sku.into()))
        .item("available", AttributeValue::N(available.to_string()))
        .item("reserved", AttributeValue::N("0".into()))
        .send()
        .await?;
    Ok(())
}

/// A SKU's `(available, reserved)` stock, `None` if it has no stock item.
///
/// # Errors
/// The SDK error, if the read fails.
pub async fn stock(client: &aws_sdk_dynamodb::Client, table: &str, sku: &str) -> Result<Option<(u64, u64)>, aws_sdk_dynamodb::Error> {
    let out = client.get_item().table_name(table).key("pk", AttributeValue::S(stock_key(sku))).consistent_read(true).send().await?;
    let num = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| {
        item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)
    };
    Ok(out.item().map(|item| (num(item, "available"), num(item, "reserved"))))
}
