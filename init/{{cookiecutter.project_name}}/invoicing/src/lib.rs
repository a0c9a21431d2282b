//! `InvoicingFunction`'s business logic: on each `OrderPlaced`, one invoice row in its own table,
//! once per event although the consumer kit's queue delivers at least once. The library commits
//! the row and the event's inbox claim (`<CONSUMER_NAME>#<event id>`) in ONE transaction: a
//! redelivered event finds its claim and writes nothing. The table alone would take a second row
//! (its sort key is the time invoiced): only the inbox keeps it to one.

use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use outbox::consumer::{DeliveredEvent, EventHandler, HandlerError, Tx};
use serde::Deserialize;

/// The `detail-type` this consumer handles.
pub const ORDER_PLACED: &str = "OrderPlaced";

/// `detail.data` of `OrderPlaced` (what the producer writes).
#[derive(Debug, Deserialize)]
pub struct OrderPlaced {
    /// The order's id.
    pub order_id: String,
    /// What the order costs, in cents.
    pub amount_cents: u64,
}

/// Adds the invoice row to the transaction the library commits with the inbox claim.
pub struct Invoicing {
    /// `INVOICES_TABLE`.
    pub invoices_table: String,
}

impl EventHandler<OrderPlaced, &'static str> for Invoicing {
    async fn handle(&self, event: DeliveredEvent<OrderPlaced>, tx: Tx<&'static str>) -> Result<&'static str, HandlerError> {
        let order = event.data;
        if order.amount_cents == 0 {
            // No retry can fix it: dead-lettered now, with the reason.
            return Err(HandlerError::reject(format!("order {} has no amount to invoice", order.order_id)));
        }
        let invoiced_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let invoice = Put::builder()
            .table_name(&self.invoices_table)
            .item("pk", AttributeValue::S(format!("ORDER#{}", order.order_id)))
            .item("sk", AttributeValue::S(format!("INVOICE#{invoiced_at:020}")))
            .item("amount_cents", AttributeValue::N(order.amount_cents.to_string()))
            .item("event_id", AttributeValue::S(event.metadata.id))
            .build()
            .map_err(HandlerError::reject)?;
        tx.write(TransactWriteItem::builder().put(invoice).build());
        Ok("invoiced")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox::consumer::{Consumer, Handled, MemoryDeadLetters};
    use outbox::inbox::MemoryInbox;
    use serde_json::value::RawValue;

    /// An EventBridge event as the kit's queue delivers it (`detail`: the outbox envelope).
    fn event(id: &str, data: &str) -> Box<RawValue> {
        RawValue::from_string(format!(
            r#"{{"version":"0","id":"envelope-{id}","detail-type":"OrderPlaced","source":"test","account":"123456789012",
                "time":"2026-12-01T08:00:00Z","region":"us-east-1","resources":[],
                "detail":{{"metadata":{{"id":"{id}","type":"OrderPlaced","version":1,"source":"test",
                "time":"2026-12-01T08:00:00.000Z","subject":"o-1","aggregate_type":"Order","sequence":1,
                "correlation_id":"c-1"}},"data":{data}}}}}"#
        ))
        .unwrap()
    }

    fn consumer() -> Consumer<MemoryInbox, MemoryDeadLetters, &'static str> {
        Consumer::builder(MemoryInbox::new("invoicing"), MemoryDeadLetters::new())
            .handler::<OrderPlaced, _>(ORDER_PLACED, Invoicing { invoices_table: "invoices".into() })
            .build()
    }

    #[tokio::test]
    async fn an_order_is_invoiced_once_however_often_its_event_is_delivered() {
        let consumer = consumer();
        let first = consumer.handle_payload(&event("e-1", r#"{"order_id":"o-1","amount_cents":1250}"#)).await.unwrap();
        assert!(matches!(first.outcome, Handled::Applied("invoiced")), "{:?}", first.outcome);
        let again = consumer.handle_payload(&event("e-1", r#"{"order_id":"o-1","amount_cents":1250}"#)).await.unwrap();
        assert!(matches!(again.outcome, Handled::Duplicate), "{:?}", again.outcome);

        let applied = consumer.store().applied();
        assert_eq!(applied.len(), 1, "one transaction for two deliveries");
        let put = applied[0].writes[0].put().expect("the invoice is a put");
        assert_eq!(put.table_name(), "invoices");
        assert_eq!(put.item().get("pk"), Some(&AttributeValue::S("ORDER#o-1".into())));
        assert_eq!(put.item().get("amount_cents"), Some(&AttributeValue::N("1250".into())));
        assert_eq!(put.item().get("event_id"), Some(&AttributeValue::S("e-1".into())));
        assert!(consumer.dead_letters().messages().is_empty());
    }

    #[tokio::test]
    async fn an_event_no_retry_can_fix_is_dead_lettered_at_once_and_writes_nothing() {
        let consumer = consumer();
        let zero = consumer.handle_payload(&event("e-2", r#"{"order_id":"o-2","amount_cents":0}"#)).await.unwrap();
        assert!(matches!(zero.outcome, Handled::DeadLettered), "{:?}", zero.outcome);
        let malformed = consumer.handle_payload(&event("e-3", r#"{"order_id":"o-3"}"#)).await.unwrap();
        assert!(matches!(malformed.outcome, Handled::DeadLettered), "{:?}", malformed.outcome);

        assert!(consumer.store().applied().is_empty(), "no invoice for either");
        let dead = consumer.dead_letters().messages();
        assert_eq!(dead.len(), 2);
        assert_eq!(dead[1].error_type, "MalformedEvent");
    }
}
