//! What the demo knows of the order sample (`template.yaml` at the repository's root): its SKUs,
//! the orders' aggregate and outbox keys, the events it puts on the bus itself, and its
//! functions, found by the environment they are given (never by name): the inventory consumer
//! has `INVENTORY_TABLE` and `INBOX_TABLE`, the webhook dispatcher `WEBHOOK_SUBSCRIBERS_TABLE`,
//! the partner webhook receiver `PARTNER_SECRETS_ID`. Another service's template has none of
//! them, and the demo says it runs the sample only ([`Sample::of`]); `proof` runs any service
//! from its books file.

use std::collections::HashMap;

use outbox::envelope::OutboxItem;
use serde_json::Value;

use super::stock;
use crate::runtime::Runtime;

/// The SKUs of the sample orders (`events/` and the demo's generated ones).
pub const SAMPLE_SKUS: [&str; 5] = ["SKU-RED-MUG", "SKU-BLUE-TEE", "SKU-GREEN-CAP", "SKU-BLACK-SOCKS", "SKU-WHITE-BAG"];
/// The demo's SKU with a single unit, to show a rejection.
pub const SCARCE_SKU: &str = "SKU-LAST-ONE";
/// The SKU only the demo's large order uses, so its reservation is checked on its own.
pub const LARGE_SKU: &str = "SKU-POSTER-A0";
/// The aggregate type of the sample's order events (`metadata.aggregate_type`).
pub const AGGREGATE: &str = "Order";
/// The `source` of the sample's order events.
pub const SOURCE: &str = "example.orders";

/// The outbox partition key of order `order_id`'s events (`Order#<order_id>`).
pub fn outbox_pk(order_id: &str) -> String {
    OutboxItem::partition_key(AGGREGATE, order_id)
}

/// `detail` of an order event as the sample's producer writes it, for the events the demo puts
/// on the bus itself.
pub fn order_event(event_type: &str, id: &str, order_id: &str, sequence: u64, correlation_id: &str, data: Value) -> Value {
    crate::scenarios::books::event_detail(event_type, id, (SOURCE, AGGREGATE, order_id), sequence, correlation_id, data)
}

/// The first function (by logical id) whose environment has every variable of `vars`: its
/// logical id and environment.
///
/// # Errors
/// A function whose environment cannot be resolved.
pub fn function_with(runtime: &Runtime, vars: &[&str]) -> crate::Result<Option<(String, HashMap<String, String>)>> {
    let mut ids: Vec<&String> = runtime.functions.keys().collect();
    ids.sort();
    for id in ids {
        let f = runtime.function(id)?;
        let env = runtime.stack.environment(&f.spec)?;
        if vars.iter().all(|v| env.contains_key(*v)) {
            return Ok(Some((id.clone(), env)));
        }
    }
    Ok(None)
}

/// The sample's inventory consumer.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Its logical id.
    pub consumer: String,
    /// Its environment.
    pub consumer_env: HashMap<String, String>,
    /// Its `INVENTORY_TABLE`.
    pub inventory: String,
}

impl Sample {
    /// The sample's inventory consumer in the runtime's template.
    ///
    /// # Errors
    /// Another service's template: the error says the demo runs the sample, and what runs
    /// another service (`proof` with its books file).
    pub fn of(runtime: &Runtime) -> crate::Result<Self> {
        let (consumer, consumer_env) = function_with(runtime, &["INVENTORY_TABLE", "INBOX_TABLE", "OUTBOX_TABLE"])?.ok_or_else(|| {
            let template = runtime.stack.template.path.display();
            crate::Error::invalid(format!(
                "demo runs the order sample (the repository's template.yaml): no function of {template} has the sample's INVENTORY_TABLE, INBOX_TABLE and OUTBOX_TABLE. \
                 For another service, `outbox-local --template {template} proof` sends the requests of its books file (outbox-books.yaml beside the template) and checks them"
            ))
        })?;
        let inventory = consumer_env.get("INVENTORY_TABLE").cloned().unwrap_or_default();
        Ok(Self { consumer, consumer_env, inventory })
    }

    /// The consumer's variable `name`.
    ///
    /// # Errors
    /// It has none.
    pub fn var(&self, name: &str) -> crate::Result<String> {
        self.consumer_env.get(name).cloned().ok_or_else(|| crate::Error::invalid(format!("{} has no {name}", self.consumer)))
    }

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
