//! The order sample's books: stock per SKU (`SKU#<sku>`: `available`, `reserved`) and one
//! reservation per order (`RESERVATION#<order>`: `status`, `lines`) in the inventory table,
//! orders (`ORDER#<order>`: `status`) in the orders table.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use super::{number, scan, text, Checked, Invariant, SampleBooks};
use crate::runtime::Runtime;
use crate::scenarios::demo::{stock, SAMPLE_SKUS};

/// Units of stock seeded per SKU.
pub const STOCK: u64 = 1_000_000;

/// The consumer of the sample.
const CONSUMER: &str = "ReserveInventoryFunction";

/// The order sample's tables, by the names its functions are given.
#[derive(Debug, Clone)]
pub struct OrderBooks {
    orders: String,
    inventory: String,
}

impl OrderBooks {
    /// The books of the sample's stack: `ORDERS_TABLE` of `CreateOrderFunction`,
    /// `INVENTORY_TABLE` of `ReserveInventoryFunction`.
    ///
    /// # Errors
    /// A function or variable the template does not have.
    pub fn of(runtime: &Runtime) -> crate::Result<Self> {
        let var = |function: &str, name: &str| -> crate::Result<String> {
            let f = runtime.function(function)?;
            let env = runtime.stack.environment(&f.spec)?;
            env.get(name).cloned().ok_or_else(|| crate::Error::invalid(format!("no {name} in {function}'s environment")))
        };
        Ok(Self { orders: var("CreateOrderFunction", "ORDERS_TABLE")?, inventory: var(CONSUMER, "INVENTORY_TABLE")? })
    }
}

impl SampleBooks for OrderBooks {
    fn consumer(&self) -> &str {
        CONSUMER
    }

    async fn seed(&self, dynamodb: &aws_sdk_dynamodb::Client) -> crate::Result<()> {
        for sku in SAMPLE_SKUS {
            stock::put(dynamodb, &self.inventory, sku, STOCK).await?;
        }
        Ok(())
    }

    fn request(&self, i: usize) -> (String, String) {
        let body = json!({"customer_id": format!("proof-{i}"), "currency": "EUR", "lines": [
            {"sku": SAMPLE_SKUS[i % SAMPLE_SKUS.len()], "quantity": 1 + i % 3, "unit_price": "10.00"},
            {"sku": SAMPLE_SKUS[(i / 2 + 1) % SAMPLE_SKUS.len()], "quantity": 1, "unit_price": "2.50"}]});
        ("/orders".into(), body.to_string())
    }

    fn undo(&self, id: &str) -> Option<(String, String)> {
        Some((format!("/orders/{id}/cancel"), r#"{"reason":"proof"}"#.into()))
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
            if let Some(order_id) = pk.strip_prefix("RESERVATION#") {
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
}
