//! The order sample's books: stock per SKU (`SKU#<sku>`: `available`, `reserved`) and one
//! reservation per order (`RESERVATION#<order>`: `status`, `lines`) in the inventory table,
//! orders (`ORDER#<order>`: `status`) in the orders table; and what `demo` knows of the sample:
//! its SKUs, the orders' aggregate type and outbox keys, the events it puts on the bus itself.

use std::collections::{BTreeMap, HashMap};

use outbox::envelope::OutboxItem;
use serde_json::json;

use serde_json::Value;

use super::stock;
use super::{env_var, number, scan, text, Checked, HotAggregate, HotEvent, Invariant, Request, SampleBooks};
use crate::runtime::Runtime;

/// Units of stock seeded per SKU.
pub const STOCK: u64 = 1_000_000;

/// The SKUs of the sample orders (`events/`, the demo's generated ones and the proof's).
pub const SAMPLE_SKUS: [&str; 5] = ["SKU-RED-MUG", "SKU-BLUE-TEE", "SKU-GREEN-CAP", "SKU-BLACK-SOCKS", "SKU-WHITE-BAG"];
/// The demo's SKU with a single unit, to show a rejection.
pub const SCARCE_SKU: &str = "SKU-LAST-ONE";
/// The SKU only the demo's large order uses, so its reservation is checked on its own.
pub const LARGE_SKU: &str = "SKU-POSTER-A0";

/// The SKU of the hot-aggregate scenario's order (seeded with [`STOCK`] like the others).
pub const HOT_SKU: &str = "SKU-HOT-PROOF";
/// The id prefix of the hot-aggregate scenario's order: its events are put on the bus by the
/// proof, so it has a reservation but no row in the orders table; [`SampleBooks::check`] leaves
/// it to the scenario's own verdict.
pub const HOT_ORDER_PREFIX: &str = "proof-hot-";

/// The aggregate type of the sample's order events (`metadata.aggregate_type`).
pub const AGGREGATE: &str = "Order";

/// The outbox partition key of order `order_id`'s events (`Order#<order_id>`).
pub fn outbox_pk(order_id: &str) -> String {
    OutboxItem::partition_key(AGGREGATE, order_id)
}

/// `detail` of an order event as the sample's producer writes it (source `example.orders`,
/// aggregate [`AGGREGATE`] `order_id`), for the events `demo` and `proof` put on the bus
/// themselves.
pub fn order_event(event_type: &str, id: &str, order_id: &str, sequence: u64, correlation_id: &str, data: serde_json::Value) -> serde_json::Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    json!({
        "metadata": {"id": id, "type": event_type, "version": 1, "source": "example.orders", "time": now,
                     "subject": order_id, "aggregate_type": AGGREGATE, "sequence": sequence, "correlation_id": correlation_id},
        "data": data
    })
}

/// Puts `units` of stock for every [`SAMPLE_SKUS`] entry that has no stock item yet, in the
/// inventory table of the stack's `ReserveInventoryFunction`; returns the SKUs it seeded. A
/// template without that function (not the sample's) gets nothing.
///
/// # Errors
/// A message when the table is unknown or DynamoDB fails.
pub async fn seed_stock(runtime: &Runtime, units: u64) -> crate::Result<Vec<String>> {
    if runtime.function(CONSUMER).is_err() {
        return Ok(Vec::new());
    }
    let table = env_var(runtime, CONSUMER, "INVENTORY_TABLE")?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    let mut seeded = Vec::new();
    for sku in SAMPLE_SKUS {
        if stock::get(&dynamodb, &table, sku).await?.is_none() {
            stock::put(&dynamodb, &table, sku, units).await?;
            seeded.push(sku.to_owned());
        }
    }
    Ok(seeded)
}

/// The sample's producer (the order API) and consumer (stock reservations): the functions the
/// books are chosen by ([`super::detect`]), and those the shipped fault plans name.
pub const FUNCTIONS: [&str; 2] = [PRODUCER, CONSUMER];
const PRODUCER: &str = "CreateOrderFunction";
const CONSUMER: &str = "ReserveInventoryFunction";

/// The order sample's tables, by the names its functions are given.
#[derive(Debug, Clone)]
pub struct OrderBooks {
    orders: String,
    inventory: String,
    /// The consumer's name in its inbox rows (`CONSUMER_NAME`, default `reserve-inventory`).
    inbox_consumer: String,
}

impl OrderBooks {
    /// The books of the sample's stack: `ORDERS_TABLE` of `CreateOrderFunction`,
    /// `INVENTORY_TABLE` of `ReserveInventoryFunction`.
    ///
    /// # Errors
    /// A function or variable the template does not have.
    pub fn of(runtime: &Runtime) -> crate::Result<Self> {
        Ok(Self {
            orders: env_var(runtime, PRODUCER, "ORDERS_TABLE")?,
            inventory: env_var(runtime, CONSUMER, "INVENTORY_TABLE")?,
            inbox_consumer: env_var(runtime, CONSUMER, "CONSUMER_NAME").unwrap_or_else(|_| "reserve-inventory".into()),
        })
    }
}

impl OrderBooks {
    /// Puts `units` of stock for `sku`, none reserved (replacing any).
    ///
    /// # Errors
    /// The `PutItem` that failed.
    pub async fn put_stock(&self, dynamodb: &aws_sdk_dynamodb::Client, sku: &str, units: u64) -> crate::Result<()> {
        stock::put(dynamodb, &self.inventory, sku, units).await
    }

    /// The units reserved of `skus`, summed (a SKU without stock counts 0; consistent reads).
    ///
    /// # Errors
    /// A `GetItem` that failed.
    pub async fn reserved(&self, dynamodb: &aws_sdk_dynamodb::Client, skus: impl IntoIterator<Item = &str>) -> crate::Result<u64> {
        let mut reserved = 0;
        for sku in skus {
            reserved += stock::get(dynamodb, &self.inventory, sku).await?.map_or(0, |(_, r)| r);
        }
        Ok(reserved)
    }
}

impl SampleBooks for OrderBooks {
    fn name(&self) -> &'static str {
        "orders"
    }

    fn producer(&self) -> &str {
        PRODUCER
    }

    fn consumer(&self) -> &str {
        CONSUMER
    }

    async fn seed(&self, dynamodb: &aws_sdk_dynamodb::Client) -> crate::Result<()> {
        for sku in SAMPLE_SKUS.into_iter().chain([HOT_SKU]) {
            stock::put(dynamodb, &self.inventory, sku, STOCK).await?;
        }
        Ok(())
    }

    fn request(&self, i: usize) -> Request {
        let body = json!({"customer_id": format!("proof-{i}"), "currency": "EUR", "lines": [
            {"sku": SAMPLE_SKUS[i % SAMPLE_SKUS.len()], "quantity": 1 + i % 3, "unit_price": "10.00"},
            {"sku": SAMPLE_SKUS[(i / 2 + 1) % SAMPLE_SKUS.len()], "quantity": 1, "unit_price": "2.50"}]});
        Request::Post { path: "/orders".into(), body: body.to_string() }
    }

    fn accepted(&self, answer: &Value) -> Option<String> {
        answer["order_id"].as_str().map(str::to_owned)
    }

    fn undo(&self, id: &str) -> Option<Request> {
        Some(Request::Post { path: format!("/orders/{id}/cancel"), body: r#"{"reason":"proof"}"#.into() })
    }

    async fn check(&self, dynamodb: &aws_sdk_dynamodb::Client, accepted: &[String]) -> crate::Result<Checked> {
        let orders = scan(dynamodb, &self.orders, &["pk", "order_id", "status"]).await?;
        let inventory = scan(dynamodb, &self.inventory, &["pk", "status", "lines", "available", "reserved"]).await?;
        let orders: HashMap<String, String> =
            orders.iter().filter(|i| text(i, "pk").starts_with("ORDER#")).map(|i| (text(i, "order_id"), text(i, "status"))).collect();
        let mut reservations: HashMap<String, (String, BTreeMap<String, u64>)> = HashMap::new();
        let mut skus: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for item in &inventory {
            let pk = text(item, "pk");
            if let Some(order_id) = pk.strip_prefix("RESERVATION#").filter(|id| !id.starts_with(HOT_ORDER_PREFIX)) {
                let lines = item
                    .get("lines")
                    .and_then(|v| v.as_m().ok())
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), number(v))).collect())
                    .unwrap_or_default();
                reservations.insert(order_id.to_owned(), (text(item, "status"), lines));
            } else if let Some(sku) = pk.strip_prefix("SKU#") {
                let n = |k: &str| item.get(k).map(number).unwrap_or(0);
                skus.insert(sku.to_owned(), (n("available"), n("reserved")));
            }
        }
        let first = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        let mut invariants = Vec::new();

        // Exactly once.
        let mut wrong = Vec::new();
        for (order_id, status) in &orders {
            let state = reservations.get(order_id).map(|(s, _)| s.as_str());
            let fine = match (status.as_str(), state) {
                ("CANCELLED", Some("RELEASED" | "REJECTED")) => true,
                ("CANCELLED", _) => false,
                (_, Some("RESERVED" | "REJECTED")) => true,
                _ => false,
            };
            if !fine {
                wrong.push(format!("{order_id} ({status}, reservation {})", state.unwrap_or("missing")));
            }
        }
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        for (status, lines) in reservations.values() {
            if status == "RESERVED" {
                for (sku, q) in lines {
                    *expected.entry(sku.clone()).or_insert(0) += q;
                }
            }
        }
        let mut sums = Vec::new();
        for (sku, (available, reserved)) in &skus {
            let want = expected.get(sku).copied().unwrap_or(0);
            if *reserved != want || available + reserved != STOCK {
                sums.push(format!(
                    "{sku}: reserved {reserved} (reservations say {want}), available + reserved {} (seeded {STOCK})",
                    available + reserved
                ));
            }
        }
        let answered_missing: Vec<String> = accepted.iter().filter(|id| !orders.contains_key(*id)).cloned().collect();
        invariants.push(Invariant {
        name: "every committed order took effect exactly once",
        held: wrong.is_empty() && sums.is_empty() && answered_missing.is_empty(),
        detail: format!(
            "{} orders in the table, {} reservations; {} orders without the right effect [{}]; {} SKU sums off [{}]; {} answered 201 but not in the table [{}]",
            orders.len(),
            reservations.len(),
            wrong.len(),
            first(&wrong),
            sums.len(),
            first(&sums),
            answered_missing.len(),
            first(&answered_missing)
        ),
    });
        let orphans: Vec<String> = reservations.keys().filter(|id| !orders.contains_key(*id)).cloned().collect();
        invariants.push(Invariant {
            name: "no effect without a committed order",
            held: orphans.is_empty(),
            detail: format!("{} reservations without an order [{}]", orphans.len(), first(&orphans)),
        });
        let undone = orders.values().filter(|s| *s == "CANCELLED").count();
        Ok(Checked { committed: orders.len(), undone, invariants })
    }
    /// One order's `OrderCreated` and `OrderCancelled` events, `n` in all: sequence 1 creates it
    /// (`reserved`), 2 cancels it (`released`), the middle one creates it again (its reservation
    /// exists: the condition fails and the `Duplicate` fallback settles it, `nothing_to_do`),
    /// every other one cancels it again (`nothing_to_release`). `metadata.previous` as the
    /// producer writes it. Its stock ([`HOT_SKU`]) comes back once: the SKU sums judge that.
    fn hot_aggregate(&self, n: usize) -> Option<HotAggregate> {
        let order_id = format!("{HOT_ORDER_PREFIX}{}", uuid::Uuid::now_v7().simple());
        let again = (n / 2).max(3) as u64;
        let mut previous = serde_json::Map::new();
        let mut events = Vec::with_capacity(n);
        for sequence in 1..=n as u64 {
            let (event_type, outcome) = match sequence {
                1 => ("OrderCreated", "reserved"),
                2 => ("OrderCancelled", "released"),
                s if s == again => ("OrderCreated", "nothing_to_do"),
                _ => ("OrderCancelled", "nothing_to_release"),
            };
            let data = if event_type == "OrderCreated" {
                json!({"order_id": order_id, "customer_id": "proof-hot", "currency": "EUR", "lines": [{"sku": HOT_SKU, "quantity": 1, "unit_price": "1.00"}]})
            } else {
                json!({"order_id": order_id, "reason": "proof: hot aggregate"})
            };
            let id = format!("{order_id}-{sequence}");
            let mut detail = order_event(event_type, &id, &order_id, sequence, "proof-hot-aggregate", data);
            if !previous.is_empty() {
                detail["metadata"]["previous"] = serde_json::Value::Object(previous.clone());
            }
            previous.insert(event_type.to_owned(), json!(sequence));
            events.push(HotEvent { detail_type: event_type.into(), detail, outcome });
        }
        Some(HotAggregate {
            inbox_consumer: self.inbox_consumer.clone(),
            aggregate_type: AGGREGATE.into(),
            aggregate_id: order_id,
            source: "example.orders".into(),
            events,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn books() -> OrderBooks {
        OrderBooks { orders: "orders".into(), inventory: "inventory".into(), inbox_consumer: "reserve-inventory".into() }
    }

    #[test]
    fn the_hot_aggregate_is_one_order_in_sequence_with_types_repeating_and_one_duplicate_fallback() {
        let hot = books().hot_aggregate(100).expect("the sample's consumer is ordered");
        assert_eq!(hot.events.len(), 100);
        assert!(hot.aggregate_id.starts_with(HOT_ORDER_PREFIX));
        for (i, e) in hot.events.iter().enumerate() {
            let m = &e.detail["metadata"];
            assert_eq!(
                (m["sequence"].as_u64(), m["subject"].as_str(), m["aggregate_type"].as_str()),
                (Some(i as u64 + 1), Some(hot.aggregate_id.as_str()), Some(AGGREGATE))
            );
            assert_eq!(m["type"].as_str(), Some(e.detail_type.as_str()));
            // What the producer writes: the latest earlier sequence per type, so the consumer
            // waits for sequence - 1.
            let latest = m["previous"].as_object().map(|p| p.values().filter_map(|v| v.as_u64()).max().unwrap_or(0)).unwrap_or(0);
            assert_eq!(latest, i as u64);
        }
        let outcomes: Vec<&str> = hot.events.iter().map(|e| e.outcome).collect();
        assert_eq!(&outcomes[..3], ["reserved", "released", "nothing_to_release"]);
        assert_eq!(outcomes.iter().filter(|o| **o == "nothing_to_do").count(), 1, "one Duplicate fallback");
        assert_eq!(hot.events.iter().filter(|e| e.detail_type == "OrderCreated").count(), 2, "OrderCreated repeats");
        let ids: std::collections::HashSet<&str> = hot.events.iter().map(HotEvent::id).collect();
        assert_eq!(ids.len(), 100, "one id per event");
    }

    #[test]
    fn requests_go_through_the_api_and_answers_name_the_order() {
        let books = books();
        assert!(matches!(books.request(0), Request::Post { path, .. } if path == "/orders"));
        assert_eq!(books.undo("o-1"), Some(Request::Post { path: "/orders/o-1/cancel".into(), body: r#"{"reason":"proof"}"#.into() }));
        assert_eq!(books.accepted(&json!({"order_id": "o-1", "status": "PENDING"})).as_deref(), Some("o-1"));
        assert_eq!(outbox_pk("o-1"), "Order#o-1");
    }
}
