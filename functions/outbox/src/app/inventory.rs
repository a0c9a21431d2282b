//! The inventory consumer: reserves stock for every `OrderCreated` event, exactly once.
//!
//! Transactional inbox mode ([`crate::inbox`]): the inbox claim, one conditional stock update
//! per SKU (`available >= :qty`), the reservation record and the consumer's own outbox event
//! (`InventoryReserved`) go in ONE `TransactWriteItems` call. A duplicate delivery writes
//! nothing. When stock is short, a second transaction records the rejection and emits
//! `InventoryRejected` (a business outcome: no retry, no dead-letter queue). The consumer's
//! events flow through the same outbox and relay as the orders' own.
//!
//! Inventory table items: `pk` = `SKU#<sku>` with `available` and `reserved` (N), and
//! `pk` = `RESERVATION#<order_id>` with `status` (`RESERVED`/`REJECTED`), `lines`, `event_id`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde::Serialize;

use super::orders::{OrderCreated, OrderLine};
use crate::config::{ConfigError, Env, DEFAULT_RETENTION};
use crate::consumer::{decode_event, DeliveredEvent, MalformedEvent, RawEventBridgeEvent};
use crate::inbox::{Inbox, InboxError, InboxOutcome};
use crate::outbox::{NewEvent, OutboxWriter, WriteError};

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
    /// The event was applied before: no effect.
    Duplicate,
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

impl From<ConsumerError> for Diagnostic {
    fn from(e: ConsumerError) -> Self {
        let error_type = match &e {
            ConsumerError::Malformed(_) => "MalformedEvent",
            ConsumerError::Inbox(InboxError::PayloadMismatch { .. }) => "PayloadMismatch",
            ConsumerError::Inbox(i) if i.is_retryable() => "Retryable",
            ConsumerError::Inbox(_) => "InboxError",
            ConsumerError::Write(_) => "WriteError",
        };
        Diagnostic { error_type: error_type.into(), error_message: e.to_string() }
    }
}

/// The reserve-inventory function, built once per cold start.
#[derive(Debug, Clone)]
pub struct InventoryConsumer {
    inbox: Inbox,
    inventory_table: String,
    writer: OutboxWriter,
    source: String,
}

impl InventoryConsumer {
    /// Reads `INBOX_TABLE`, `INVENTORY_TABLE`, `OUTBOX_TABLE`, `CONSUMER_NAME` (default
    /// `reserve-inventory`), `EVENT_SOURCE` (default `example.inventory`),
    /// `INBOX_RETENTION_SECONDS` and `OUTBOX_RETENTION_SECONDS` (default 7 days each).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let client = aws_sdk_dynamodb::Client::new(sdk);
        Ok(Self {
            inbox: Inbox::new(
                client,
                env.required("INBOX_TABLE")?,
                env.optional("CONSUMER_NAME", "reserve-inventory"),
                env.seconds("INBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?,
            ),
            inventory_table: env.required("INVENTORY_TABLE")?,
            writer: OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.seconds("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?),
            source: env.optional("EVENT_SOURCE", "example.inventory"),
        })
    }

    /// Lambda handler for one EventBridge `OrderCreated` event.
    ///
    /// # Errors
    /// [`ConsumerError`]; Lambda retries, then dead-letters the event.
    pub async fn handle(&self, event: LambdaEvent<RawEventBridgeEvent>) -> Result<ConsumerResponse, ConsumerError> {
        let delivered = decode_event::<OrderCreated>(&event.payload).inspect_err(|e| {
            tracing::error!(envelope_id = event.payload.id.as_deref().unwrap_or(""), error = %e, "malformed event");
        })?;
        let outcome = self.reserve(&delivered).await.inspect_err(|e| {
            tracing::error!(event_id = %delivered.metadata.id, error = %e, "reservation failed");
        })?;
        tracing::info!(
            event_id = %delivered.metadata.id,
            order_id = %delivered.data.order_id,
            correlation_id = %delivered.metadata.correlation_id,
            outcome = ?outcome,
            "OrderCreated handled"
        );
        Ok(ConsumerResponse { outcome, event_id: delivered.metadata.id })
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
        writes.push(self.reservation(order, &event.metadata.id, "RESERVED", None));
        writes.push(self.event("InventoryReserved", order, &event.metadata.correlation_id, None)?);
        match self.inbox.apply(&event.metadata, &hash, writes).await? {
            InboxOutcome::Applied => Ok(Outcome::Reserved),
            InboxOutcome::Duplicate => Ok(Outcome::Duplicate),
            // The reservation record exists: this order was settled by another event id.
            InboxOutcome::BusinessConditionFailed { index } if index >= skus.len() => Ok(Outcome::Duplicate),
            InboxOutcome::BusinessConditionFailed { index } => {
                let reason = format!("insufficient stock for {}", skus[index]);
                let writes = vec![
                    self.reservation(order, &event.metadata.id, "REJECTED", Some(&reason)),
                    self.event("InventoryRejected", order, &event.metadata.correlation_id, Some(&reason))?,
                ];
                match self.inbox.apply(&event.metadata, &hash, writes).await? {
                    InboxOutcome::Applied => Ok(Outcome::Rejected),
                    InboxOutcome::Duplicate | InboxOutcome::BusinessConditionFailed { .. } => Ok(Outcome::Duplicate),
                }
            }
        }
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

    fn reservation(&self, order: &OrderCreated, event_id: &str, status: &str, reason: Option<&str>) -> TransactWriteItem {
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
        let put = Put::builder()
            .table_name(&self.inventory_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    fn event(&self, event_type: &str, order: &OrderCreated, correlation_id: &str, reason: Option<&str>) -> Result<TransactWriteItem, WriteError> {
        #[derive(Serialize)]
        struct Data<'a> {
            order_id: &'a str,
            lines: &'a [OrderLine],
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'a str>,
        }
        // Strings and integers always serialise.
        let payload = serde_json::to_string(&Data { order_id: &order.order_id, lines: &order.lines, reason }).expect("serialises");
        let item = self.writer.outbox_item(
            NewEvent {
                event_type: event_type.into(),
                event_version: 1,
                source: self.source.clone(),
                aggregate_type: AGGREGATE_TYPE.into(),
                aggregate_id: order.order_id.clone(),
                sequence: 1,
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
    let out = client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(stock_key(sku)))
        .consistent_read(true)
        .send()
        .await?;
    let num = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| {
        item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)
    };
    Ok(out.item().map(|item| (num(item, "available"), num(item, "reserved"))))
}
