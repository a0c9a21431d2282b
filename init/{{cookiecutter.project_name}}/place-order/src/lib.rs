//! `PlaceOrderFunction`: saves an order and its `OrderPlaced` event in ONE DynamoDB transaction
//! (`TransactWriteItems`) with the outbox library's writer: either both are stored or neither.
//! Invoked directly with `{"order_id": "o-42", "amount_cents": 1250}`; answers whether the order
//! was placed or already existed (a retried request whose first attempt committed).

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_runtime::Error;
use outbox::{CommitError, ConditionFailed, Event, OutboxWriter};
use serde::{Deserialize, Serialize};

/// The `detail-type` of the event this function emits.
pub const ORDER_PLACED: &str = "OrderPlaced";

/// The longest order id taken, bytes (a key part; DynamoDB allows 2,048 bytes for a partition key).
pub const MAX_ORDER_ID_BYTES: usize = 128;

/// The request, and the event's `detail.data`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct PlaceOrder {
    /// The order's id, chosen by the caller (so that a retry finds the order it placed).
    pub order_id: String,
    /// What the order costs, in cents.
    pub amount_cents: u64,
}

/// Why a request is refused before anything is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOrder {
    /// `order_id` is empty.
    #[error("order_id is empty")]
    EmptyId,
    /// `order_id` is longer than [`MAX_ORDER_ID_BYTES`].
    #[error("order_id is {0} bytes, more than {MAX_ORDER_ID_BYTES}")]
    IdTooLong(usize),
    /// `amount_cents` is 0.
    #[error("amount_cents is 0: an order costs something")]
    ZeroAmount,
}

impl PlaceOrder {
    /// Checks the request before any write.
    ///
    /// # Errors
    /// [`InvalidOrder`], the first problem found.
    pub fn validate(&self) -> Result<(), InvalidOrder> {
        if self.order_id.is_empty() {
            return Err(InvalidOrder::EmptyId);
        }
        if self.order_id.len() > MAX_ORDER_ID_BYTES {
            return Err(InvalidOrder::IdTooLong(self.order_id.len()));
        }
        if self.amount_cents == 0 {
            return Err(InvalidOrder::ZeroAmount);
        }
        Ok(())
    }
}

/// What the function answers.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// The order's id.
    pub order_id: String,
    /// `placed` (order and event written) or `exists` (nothing written).
    pub status: Status,
    /// The event's id when this call placed the order.
    pub event_id: Option<String>,
}

/// Whether this call placed the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The order and its event were written.
    Placed,
    /// The order was there already: nothing was written.
    Exists,
}

/// The function's clients and settings, made once per instance.
pub struct Orders {
    /// The DynamoDB client.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// `ORDERS_TABLE`.
    pub orders_table: String,
    /// `EVENT_SOURCE`: the events' `source` (the consumer kit's `EventSources`).
    pub event_source: String,
    /// The outbox writer (`OUTBOX_TABLE`).
    pub outbox: OutboxWriter,
}

impl Orders {
    /// Places the order: the order item (only if it does not exist) and its event, in one
    /// transaction.
    ///
    /// # Errors
    /// [`InvalidOrder`] before any write; the transaction's error ([`CommitError`]) when it failed
    /// for another reason than an existing order (Lambda answers it as the invocation's error).
    pub async fn place(&self, request: PlaceOrder) -> Result<Answer, Error> {
        request.validate()?;
        let order = Put::builder()
            .table_name(&self.orders_table)
            .item("pk", AttributeValue::S(format!("ORDER#{}", request.order_id)))
            .item("amount_cents", AttributeValue::N(request.amount_cents.to_string()))
            .condition_expression("attribute_not_exists(pk)")
            .build()?;
        let mut tx = self.outbox.transaction();
        tx.write(TransactWriteItem::builder().put(order).build());
        // Serialised by the library; the X-Ray trace header comes from the Lambda environment.
        tx.emit(Event::new(ORDER_PLACED, &self.event_source, ("Order", request.order_id.as_str()), 1, &request)?)?;
        match tx.execute(&self.dynamodb).await {
            Ok(events) => Ok(Answer { order_id: request.order_id, status: Status::Placed, event_id: events.first().map(|e| e.event_id.clone()) }),
            // Write 0 (the first of ours) is the order's put: the order exists, nothing was written.
            Err(CommitError::ConditionFailed(ConditionFailed::Write { index: 0, .. })) => {
                Ok(Answer { order_id: request.order_id, status: Status::Exists, event_id: None })
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: &str, amount_cents: u64) -> PlaceOrder {
        PlaceOrder { order_id: id.into(), amount_cents }
    }

    #[test]
    fn a_request_is_refused_before_any_write_when_it_cannot_be_an_order() {
        assert_eq!(order("o-1", 1250).validate(), Ok(()));
        assert_eq!(order("", 1250).validate(), Err(InvalidOrder::EmptyId));
        assert_eq!(order("o-1", 0).validate(), Err(InvalidOrder::ZeroAmount));
        let long = "o".repeat(MAX_ORDER_ID_BYTES + 1);
        assert_eq!(order(&long, 1).validate(), Err(InvalidOrder::IdTooLong(MAX_ORDER_ID_BYTES + 1)));
        assert_eq!(order(&long[1..], 1).validate(), Ok(()));
    }

    #[test]
    fn the_request_and_the_answer_have_the_documented_shape() {
        let request: PlaceOrder = serde_json::from_str(r#"{"order_id": "o-42", "amount_cents": 1250}"#).unwrap();
        assert_eq!(request, order("o-42", 1250));
        assert!(serde_json::from_str::<PlaceOrder>(r#"{"order_id": "o-42", "amount_cents": -1}"#).is_err());
        let answer = Answer { order_id: "o-42".into(), status: Status::Exists, event_id: None };
        assert_eq!(serde_json::to_value(answer).unwrap(), serde_json::json!({"order_id": "o-42", "status": "exists", "event_id": null}));
    }
}
