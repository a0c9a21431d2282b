//! The order sample's inventory table, read and seeded with plain DynamoDB calls (the local
//! runtime does not depend on the sample application). Item layout, as the sample's consumer
//! (`functions/orders-app/src/inventory.rs`) keeps it:
//! `pk` = `SKU#<sku>`, `sku` (S), `available` and `reserved` (N, units).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

fn key(sku: &str) -> AttributeValue {
    AttributeValue::S(format!("SKU#{sku}"))
}

fn failed(action: &str, table: &str, e: impl std::error::Error + Send + Sync + 'static) -> crate::Error {
    crate::Error::aws(format!("{action} {table}"))(e)
}

/// Puts a stock item for `sku` with `available` units and none reserved (replacing any).
///
/// # Errors
/// A message with the SDK's error.
pub async fn put(client: &aws_sdk_dynamodb::Client, table: &str, sku: &str, available: u64) -> crate::Result<()> {
    client
        .put_item()
        .table_name(table)
        .item("pk", key(sku))
        .item("sku", AttributeValue::S(sku.into()))
        .item("available", AttributeValue::N(available.to_string()))
        .item("reserved", AttributeValue::N("0".into()))
        .send()
        .await
        .map_err(|e| failed("PutItem", table, e))?;
    Ok(())
}

/// `(available, reserved)` units of `sku` (consistent read), `None` without a stock item.
///
/// # Errors
/// A message with the SDK's error.
pub async fn get(client: &aws_sdk_dynamodb::Client, table: &str, sku: &str) -> crate::Result<Option<(u64, u64)>> {
    let out = client.get_item().table_name(table).key("pk", key(sku)).consistent_read(true).send().await.map_err(|e| failed("GetItem", table, e))?;
    let number = |item: &HashMap<String, AttributeValue>, name: &str| {
        item.get(name).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)
    };
    Ok(out.item().map(|item| (number(item, "available"), number(item, "reserved"))))
}
