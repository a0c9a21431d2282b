//! The inventory consumer: reserves stock for every `OrderCreated` event and gives it back for
//! every `OrderCancelled` event, exactly once (one function, routed by `detail-type`). Only the
//! business logic lives here; `outbox::consumer::Consumer` does decode → inbox → answer → dead-letter.
//!
//! Transactional inbox mode, with ordering per order: the inbox claim, the order's sequence
//! check, one conditional stock update per SKU (`available >= :qty`), the reservation record and
//! the consumer's own outbox event (`InventoryReserved`) go in ONE `TransactWriteItems` call. A
//! duplicate delivery writes nothing. When stock is short, the fallback records the rejection and
//! emits `InventoryRejected` instead (a business outcome: no retry, no dead-letter queue). A
//! cancellation releases exactly what was reserved (`InventoryReleased`), and only for a
//! reservation in status `RESERVED`; an `OrderCancelled` that arrives before its `OrderCreated`
//! was applied is parked in the inbox table and applied right after it (`outbox::inbox::parked`).
//! The ordering is by [`HANDLED_TYPES`] (`Ordered::by_types`): an `OrderCancelled` waits
//! for the `OrderCreated` its `metadata.previous` names, never for other order event types this
//! consumer does not receive; the ordering row never expires; a gap that never closes stays
//! parked, listed by `outbox-local ordering parked` and released with `outbox-local ordering
//! release` (docs/ordering.md).
//! The release decision is read, then committed on the condition that what was read still
//! holds (the reservation's `status`), so an `OrderCreated` applied in between cannot leave
//! stock reserved forever. Events no retry can fix go to the dead-letter queue on the first
//! attempt when `DEAD_LETTER_QUEUE_URL` is set.
//!
//! Inventory table items: `pk` = `SKU#<sku>` with `available` and `reserved` (N), and
//! `pk` = `RESERVATION#<order_id>` with `status` (`RESERVED`/`REJECTED`/`RELEASED`), `lines`
//! (per SKU: `{"sku": qty}`), `event_id`.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};
use lambda_runtime::LambdaEvent;
use serde::Serialize;

use crate::orders::{OrderCreated, OrderLine};
use outbox::claim_check::ClaimCheck;
use outbox::consumer::Tx;
use outbox::consumer::{Consumer, ConsumerDeadLetterQueue, DeliveredEvent, EventHandler, Fallback, HandlerError};
use outbox::consumer::{ConsumerResponse, InvocationAnswer, MalformedEvent, RawEvent};
use outbox::inbox::Inbox;
use outbox::ordering::Ordered;
use outbox::{ConditionFailed, Event};
use outbox::{OutboxWriter, WriteError};
use outbox_lambda::{inbox_retention, ConfigError, Env, DEFAULT_RETENTION};
use outbox_lambda::{InvocationError, LambdaConsumer as _};

/// The event types this consumer handles (its rule's `detail-type` list): per order it waits
/// only for the latest earlier event of these types (`detail.metadata.previous`), never for
/// other types the order emits.
pub const HANDLED_TYPES: [&str; 2] = ["OrderCreated", "OrderCancelled"];

/// Aggregate type of reservations in the outbox.
pub const AGGREGATE_TYPE: &str = "Reservation";

/// How one delivery ended, when it took effect (`duplicate` and `dead_lettered` come from the
/// library).
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

/// The reserve-inventory function, built once per cold start.
#[derive(Debug, Clone)]
pub struct InventoryConsumer {
    consumer: Consumer<Ordered<Inbox>, Option<ConsumerDeadLetterQueue>, Outcome>,
}

impl InventoryConsumer {
    /// Reads `INBOX_TABLE`, `INVENTORY_TABLE`, `OUTBOX_TABLE`, `CONSUMER_NAME` (required:
    /// [`outbox_lambda::consumer_name`], the name `outbox trace` looks up; the template sets
    /// `reserve-inventory`), `EVENT_SOURCE` (default `example.inventory`), the inbox retention by
    /// the retention rule ([`outbox_lambda::inbox_retention`]: `DEAD_LETTER_RETENTION_SECONDS`,
    /// `REDRIVE_MARGIN_SECONDS`, `INBOX_RETENTION_SECONDS`), `OUTBOX_RETENTION_SECONDS` (default
    /// 7 days), `DEAD_LETTER_QUEUE_URL` (optional: where events no retry can fix go at once), and
    /// the claim check's variables ([`outbox_lambda::claim_check`]: with `CLAIM_CHECK_BUCKET` set,
    /// an event carrying `detail.data_ref` is fetched from S3 and verified before the handler
    /// sees it).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let client = aws_sdk_dynamodb::Client::new(sdk);
        let name = outbox_lambda::consumer_name(env)?;
        let dead_letters = match env.optional("DEAD_LETTER_QUEUE_URL", "") {
            url if url.is_empty() => None,
            url => Some(ConsumerDeadLetterQueue::new(aws_sdk_sqs::Client::new(sdk), url, name.clone())),
        };
        let inbox = Ordered::by_types(Inbox::new(client.clone(), env.required("INBOX_TABLE")?, name, inbox_retention(env)?), HANDLED_TYPES);
        let outbox = OutboxWriter::new(env.required("OUTBOX_TABLE")?, env.retention("OUTBOX_RETENTION_SECONDS", DEFAULT_RETENTION)?);
        let source = env.optional("EVENT_SOURCE", "example.inventory");
        let claim_check = outbox_lambda::claim_check(sdk, env)?;
        Ok(Self::new(client, inbox, dead_letters, env.required("INVENTORY_TABLE")?, source, outbox, claim_check))
    }

    /// The consumer over `inventory_table` (read and written with `client`), recording events in
    /// `inbox`, emitting its own events with `source` to `outbox`, dead-lettering to `dead_letters`,
    /// fetching payloads carried by reference (`detail.data_ref`) through `claim_check`.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        inbox: Ordered<Inbox>,
        dead_letters: Option<ConsumerDeadLetterQueue>,
        inventory_table: String,
        source: String,
        outbox: OutboxWriter,
        claim_check: Option<ClaimCheck>,
    ) -> Self {
        let stock = Arc::new(Stock { client, table: inventory_table, source });
        let mut builder = Consumer::builder(inbox, dead_letters)
            .outbox(outbox)
            .handler::<OrderCreated, _>(HANDLED_TYPES[0], stock.clone())
            .handler::<OrderCancelledData, _>(HANDLED_TYPES[1], stock);
        if let Some(claim_check) = claim_check {
            builder = builder.claim_check(claim_check);
        }
        Self { consumer: builder.build() }
    }

    /// Lambda handler for one EventBridge event (`OrderCreated` or `OrderCancelled`).
    ///
    /// # Errors
    /// A retryable [`outbox::consumer::ConsumerError`] (Lambda retries it, then sends it to the on-failure
    /// destination), or a non-retryable one when no dead-letter queue is configured or it
    /// cannot be reached; as an [`InvocationError`].
    pub async fn handle(&self, event: LambdaEvent<RawEvent>) -> Result<ConsumerResponse<Outcome>, InvocationError> {
        self.consumer.handle(event).await
    }

    /// Lambda handler for an SQS batch of the consumer kit's delivery queue (the function's event
    /// source mapping, `ReportBatchItemFailures`), or one EventBridge event: the answer lists the
    /// messages that must come back (`batchItemFailures`, retried after the queue's visibility
    /// timeout) and the events settled.
    ///
    /// # Errors
    /// As [`InventoryConsumer::handle`] for an EventBridge event; for a batch, only what fails the
    /// whole invocation (see [`outbox::consumer::Consumer::handle_invocation`]).
    pub async fn handle_any(&self, event: LambdaEvent<RawEvent>) -> Result<InvocationAnswer<Outcome>, InvocationError> {
        self.consumer.handle_any(event).await
    }
}

/// The business logic: the inventory table and the source of the consumer's own events.
#[derive(Debug)]
struct Stock {
    client: aws_sdk_dynamodb::Client,
    table: String,
    source: String,
}

impl EventHandler<OrderCreated, Outcome> for Stock {
    /// Reserves stock for the order; when a SKU is short, records the rejection instead.
    async fn handle(&self, event: DeliveredEvent<OrderCreated>, tx: Tx<Outcome>) -> Result<Outcome, HandlerError> {
        let (order, metadata) = (event.data, event.metadata);
        if order.lines.is_empty() {
            return Err(MalformedEvent("detail.data.lines is empty".into()).into());
        }
        let mut quantities: BTreeMap<String, u64> = BTreeMap::new();
        for line in &order.lines {
            *quantities.entry(line.sku.clone()).or_default() += u64::from(line.quantity);
        }
        for (sku, qty) in &quantities {
            tx.write(take_stock(&self.table, sku, *qty));
        }
        tx.write(reservation(&self.table, &order.order_id, &metadata.id, "RESERVED", None, &quantities));
        let settled = ReservationSettled { order_id: order.order_id.clone(), lines: order.lines.clone(), reason: None };
        tx.emit(event_of(&self.source, "InventoryReserved", &order.order_id, 1, &settled, &metadata.correlation_id)?)?;
        let (table, source) = (self.table.clone(), self.source.clone());
        tx.on_condition_failed(move |failed, tx| match failed {
            ConditionFailed::Write { index, .. } if index < quantities.len() => {
                let sku = quantities.keys().nth(index).map_or("?", String::as_str);
                let reason = format!("insufficient stock for {sku}");
                tx.write(reservation(&table, &order.order_id, &metadata.id, "REJECTED", Some(&reason), &BTreeMap::new()));
                let rejected = ReservationSettled { order_id: order.order_id.clone(), lines: order.lines, reason: Some(reason) };
                tx.emit(event_of(&source, "InventoryRejected", &order.order_id, 1, &rejected, &metadata.correlation_id)?)?;
                // Settled meanwhile by another event id.
                tx.on_condition_failed(|_, _| Ok(Fallback::Duplicate));
                Ok(Fallback::Commit(Outcome::Rejected))
            }
            // The reservation record exists: this order was settled by another event id.
            _ => Ok(Fallback::Duplicate),
        });
        Ok(Outcome::Reserved)
    }
}

impl EventHandler<OrderCancelledData, Outcome> for Stock {
    /// Gives back the stock reserved for the cancelled order (only a `RESERVED` reservation).
    async fn handle(&self, event: DeliveredEvent<OrderCancelledData>, tx: Tx<Outcome>) -> Result<Outcome, HandlerError> {
        let order_id = &event.data.order_id;
        let key = AttributeValue::S(format!("RESERVATION#{order_id}"));
        let read = self.client.get_item().table_name(&self.table).key("pk", key.clone()).consistent_read(true).send().await;
        let reservation =
            read.map_err(|e| HandlerError::retry(format!("reading the reservation: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e))))?.item;
        let reserved: BTreeMap<String, u64> = reservation
            .as_ref()
            .filter(|r| r.get("status").and_then(|s| s.as_s().ok()).is_some_and(|s| s == "RESERVED"))
            .and_then(|r| r.get("lines"))
            .and_then(|l| l.as_m().ok())
            .map(|m| m.iter().filter_map(|(sku, q)| Some((sku.clone(), q.as_n().ok()?.parse().ok()?))).collect())
            .unwrap_or_default();
        if reserved.is_empty() {
            // Rejected (or never reserved): record the event as applied, nothing to give back —
            // on the condition that this is still true when the transaction commits. Without it,
            // an `OrderCreated` applied between the read and the commit (a released sequence gap,
            // an unordered deployment) would reserve stock that no cancellation ever gives back.
            // When the condition fails, the consumer runs this handler again within the
            // invocation (a condition without fallback is transient), which reads the
            // reservation afresh and releases it.
            tx.write(nothing_reserved(&self.table, key));
            return Ok(Outcome::NothingToRelease);
        }
        for (sku, qty) in &reserved {
            tx.write(give_back(&self.table, sku, *qty));
        }
        let update = Update::builder()
            .table_name(&self.table)
            .key("pk", key)
            .update_expression("SET #status = :released, released_by = :event")
            .condition_expression("#status = :reserved")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":released", AttributeValue::S("RELEASED".into()))
            .expression_attribute_values(":reserved", AttributeValue::S("RESERVED".into()))
            .expression_attribute_values(":event", AttributeValue::S(event.metadata.id.clone()))
            .build()
            // table_name, key and update_expression, the builder's only required fields, are set.
            .expect("Update has its required fields");
        tx.write(TransactWriteItem::builder().update(update).build());
        let released = InventoryReleased { order_id: order_id.clone(), released: reserved };
        tx.emit(event_of(&self.source, "InventoryReleased", order_id, 2, &released, &event.metadata.correlation_id)?)?;
        // Released meanwhile by another event id: nothing more to give back.
        tx.on_condition_failed(|_, _| Ok(Fallback::Duplicate));
        Ok(Outcome::Released)
    }
}

/// The consumer's own event about the reservation of `order_id` (aggregate `Reservation`,
/// `sequence` 1 when settled, 2 when released), in the correlation of the event that caused it.
fn event_of<T: Serialize>(
    source: &str,
    event_type: &str,
    order_id: &str,
    sequence: u64,
    data: &T,
    correlation_id: &str,
) -> Result<Event, WriteError> {
    Ok(Event::new(event_type, source, (AGGREGATE_TYPE, order_id), sequence, data)?.correlation_id(correlation_id))
}

/// A condition that the reservation `key` is absent or not `RESERVED`: the read that found
/// nothing to release still holds when the transaction commits.
fn nothing_reserved(table: &str, key: AttributeValue) -> TransactWriteItem {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key("pk", key)
        .condition_expression("attribute_not_exists(pk) OR #status <> :reserved")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":reserved", AttributeValue::S("RESERVED".into()))
        .build()
        // table_name, key and condition_expression, the builder's only required fields, are set.
        .expect("ConditionCheck has its required fields");
    TransactWriteItem::builder().condition_check(check).build()
}

fn give_back(table: &str, sku: &str, quantity: u64) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S(stock_key(sku)))
        .update_expression("SET available = available + :q, reserved = reserved - :q")
        .condition_expression("reserved >= :q")
        .expression_attribute_values(":q", AttributeValue::N(quantity.to_string()))
        .build()
        // table_name, key and update_expression, the builder's only required fields, are set.
        .expect("Update has its required fields");
    TransactWriteItem::builder().update(update).build()
}

fn take_stock(table: &str, sku: &str, quantity: u64) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S(stock_key(sku)))
        .update_expression("SET available = available - :q, reserved = if_not_exists(reserved, :zero) + :q")
        .condition_expression("available >= :q")
        .expression_attribute_values(":q", AttributeValue::N(quantity.to_string()))
        .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        .build()
        // table_name, key and update_expression, the builder's only required fields, are set.
        .expect("Update has its required fields");
    TransactWriteItem::builder().update(update).build()
}

/// The reservation record of `order_id`, put only if the order has none yet.
fn reservation(
    table: &str,
    order_id: &str,
    event_id: &str,
    status: &str,
    reason: Option<&str>,
    quantities: &BTreeMap<String, u64>,
) -> TransactWriteItem {
    let mut item = std::collections::HashMap::from([
        ("pk".to_owned(), AttributeValue::S(format!("RESERVATION#{order_id}"))),
        ("order_id".to_owned(), AttributeValue::S(order_id.to_owned())),
        ("status".to_owned(), AttributeValue::S(status.into())),
        ("event_id".to_owned(), AttributeValue::S(event_id.into())),
        ("settled_at".to_owned(), AttributeValue::S(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true))),
    ]);
    if let Some(reason) = reason {
        item.insert("reason".into(), AttributeValue::S(reason.into()));
    }
    if !quantities.is_empty() {
        let lines = quantities.iter().map(|(sku, q)| (sku.clone(), AttributeValue::N(q.to_string()))).collect();
        item.insert("lines".into(), AttributeValue::M(lines));
    }
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        // table_name and item, the builder's only required fields, are set.
        .expect("Put has its required fields");
    TransactWriteItem::builder().put(put).build()
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
    use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsError, TransactWriteItemsOutput};
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_smithy_mocks::{mock, mock_client, MockResponse, RuleMode};
    use lambda_runtime::Context;
    use outbox::consumer::Handled;

    use super::*;

    type Item = HashMap<String, AttributeValue>;

    /// The inventory table's reservation of `o-1` as DynamoDB holds it, and what was committed.
    #[derive(Debug, Default)]
    struct Table {
        reservation: Option<Item>,
        /// Applies `OrderCreated` (the reservation becomes `RESERVED`) right after the first read.
        created_after_first_read: bool,
        /// `TransactWriteItems` calls to answer `ThrottlingException` first.
        throttles: usize,
        reads: usize,
        committed: Vec<Vec<TransactWriteItem>>,
    }

    fn reserved() -> Item {
        HashMap::from([
            ("pk".into(), AttributeValue::S("RESERVATION#o-1".into())),
            ("status".into(), AttributeValue::S("RESERVED".into())),
            ("lines".into(), AttributeValue::M(HashMap::from([("A".into(), AttributeValue::N("2".into()))]))),
        ])
    }

    fn is_reserved(table: &Table) -> bool {
        table.reservation.as_ref().and_then(|r| r.get("status")).and_then(|s| s.as_s().ok()).is_some_and(|s| s == "RESERVED")
    }

    fn consumer(table: &Arc<Mutex<Table>>) -> InventoryConsumer {
        let state = table.clone();
        // The ordered inbox reads its own rows (the aggregate's last sequence, parked successors,
        // a parked copy of the event; one GetItem, or one BatchGetItem after a commit): they are
        // absent here; only the inventory table's reads are the handler's.
        let inbox_read = mock!(aws_sdk_dynamodb::Client::get_item)
            .match_requests(|r| r.table_name() == Some("inbox"))
            .then_output(|| GetItemOutput::builder().build());
        let inbox_batch_read = mock!(aws_sdk_dynamodb::Client::batch_get_item).then_output(|| BatchGetItemOutput::builder().build());
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_compute_response(move |_| {
            let mut table = state.lock().unwrap();
            table.reads += 1;
            let item = table.reservation.clone();
            if table.created_after_first_read && table.reads == 1 {
                table.reservation = Some(reserved());
            }
            MockResponse::<GetItemOutput, GetItemError>::Output(GetItemOutput::builder().set_item(item).build())
        });
        let state = table.clone();
        let transact = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_compute_response(move |input| {
            let mut table = state.lock().unwrap();
            if table.throttles > 0 {
                table.throttles -= 1;
                let body = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#;
                return MockResponse::Http(aws_sdk_dynamodb::config::http::HttpResponse::new(
                    400.try_into().unwrap(),
                    aws_smithy_types::body::SdkBody::from(body),
                ));
            }
            let items = input.transact_items().to_vec();
            // The "nothing reserved" check and the release's `status = RESERVED` condition, as DynamoDB evaluates them.
            let failed = items.iter().position(|i| {
                let check = i.condition_check().is_some_and(|c| c.key().get("pk") == Some(&AttributeValue::S("RESERVATION#o-1".into())));
                let release = i.update().is_some_and(|u| u.key().get("pk") == Some(&AttributeValue::S("RESERVATION#o-1".into())));
                (check && is_reserved(&table)) || (release && !is_reserved(&table))
            });
            if let Some(index) = failed {
                let reasons = (0..items.len())
                    .map(|i| CancellationReason::builder().code(if i == index { "ConditionalCheckFailed" } else { "None" }).build())
                    .collect();
                return MockResponse::Error(TransactWriteItemsError::TransactionCanceledException(
                    TransactionCanceledException::builder().message("cancelled").set_cancellation_reasons(Some(reasons)).build(),
                ));
            }
            if items.iter().any(|i| i.update().is_some_and(|u| u.key().get("pk") == Some(&AttributeValue::S("RESERVATION#o-1".into())))) {
                table.reservation.as_mut().map(|r| r.insert("status".into(), AttributeValue::S("RELEASED".into())));
            }
            table.committed.push(items);
            MockResponse::Output(TransactWriteItemsOutput::builder().build())
        });
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&inbox_read, &inbox_batch_read, &get, &transact], |c| {
            c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        });
        let inbox = Ordered::new(Inbox::new(client.clone(), "inbox", "reserve-inventory", DEFAULT_RETENTION));
        InventoryConsumer::new(
            client,
            inbox,
            None,
            "inventory".into(),
            "example.inventory".into(),
            OutboxWriter::new("outbox", DEFAULT_RETENTION),
            None,
        )
    }

    fn cancelled() -> LambdaEvent<RawEvent> {
        let event = serde_json::json!({
            "version": "0", "id": "envelope-1", "detail-type": "OrderCancelled", "source": "example.orders",
            "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {
                "metadata": {"id": "cancel-1", "type": "OrderCancelled", "version": 1, "source": "example.orders",
                             "time": "2026-11-29T08:00:00.000Z", "subject": "o-1", "aggregate_type": "Order", "sequence": 2, "correlation_id": "c-1"},
                "data": {"order_id": "o-1"}
            }
        });
        LambdaEvent::new(serde_json::value::to_raw_value(&event).unwrap(), Context::default())
    }

    #[tokio::test]
    async fn an_order_created_applied_between_read_and_commit_is_released_not_left_reserved() {
        let table = Arc::new(Mutex::new(Table { created_after_first_read: true, ..Default::default() }));
        let response = consumer(&table).handle(cancelled()).await.expect("settled within the invocation");
        assert_eq!(response.outcome, Handled::Applied(Outcome::Released));
        let table = table.lock().unwrap();
        assert_eq!(table.reads, 2, "the handler read the reservation again after its condition failed");
        assert_eq!(table.committed.len(), 1, "one commit: the release");
        assert!(!is_reserved(&table), "the stock reserved in between was given back");
        let gave_back = table.committed[0].iter().filter_map(|i| i.update()).any(|u| u.key().get("pk") == Some(&AttributeValue::S(stock_key("A"))));
        assert!(gave_back);
    }

    #[tokio::test]
    async fn nothing_to_release_is_committed_on_the_condition_it_read() {
        let table = Arc::new(Mutex::new(Table::default()));
        let response = consumer(&table).handle(cancelled()).await.unwrap();
        assert_eq!(response.outcome, Handled::Applied(Outcome::NothingToRelease));
        let table = table.lock().unwrap();
        let check = table.committed[0].iter().find_map(|i| i.condition_check()).expect("the read's condition is in the transaction");
        assert_eq!(check.condition_expression(), "attribute_not_exists(pk) OR #status <> :reserved");
    }

    #[tokio::test]
    async fn a_throttled_transaction_is_retried_in_the_invocation_not_dead_lettered() {
        let table = Arc::new(Mutex::new(Table { reservation: Some(reserved()), throttles: 2, ..Default::default() }));
        let response = consumer(&table).handle(cancelled()).await.expect("throttling is transient");
        assert_eq!(response.outcome, Handled::Applied(Outcome::Released));
        assert_eq!(table.lock().unwrap().committed.len(), 1);
    }
}
