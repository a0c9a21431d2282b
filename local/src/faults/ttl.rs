//! DynamoDB's TTL deletion, played: moto never deletes expired items, so a sweep scans a table
//! for items whose TTL attribute has passed (on a clock moved forward by
//! [`TtlSweep::advance_s`]) and deletes each with `DeleteItem` conditioned on the attribute
//! still having passed. The request carries the header [`TTL_HEADER`], on which the emulator
//! shim (`scripts/moto_server.py`) marks the stream's `REMOVE` record as AWS marks a TTL
//! deletion: `userIdentity` `{"type": "Service", "principalId": "dynamodb.amazonaws.com"}`.
//! Source: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html>.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::plan::TtlSweep;
use super::proxy::Injector;
use outbox_template::TableSpec;

/// The header that makes the emulator shim mark a deletion as DynamoDB's TTL process.
pub const TTL_HEADER: &str = "x-outbox-local-ttl-delete";

/// Deletes, as the TTL process would, every item of `table` whose `attribute` is before
/// `now_s` (epoch seconds); returns how many it deleted.
///
/// # Errors
/// A message naming the table when a scan or delete fails (a failed condition is not an error:
/// the item was updated meanwhile).
pub async fn delete_expired(dynamodb: &aws_sdk_dynamodb::Client, table: &TableSpec, attribute: &str, now_s: i64) -> crate::Result<u64> {
    let keys: Vec<String> = table.key_schema.iter().map(|(name, _)| name.clone()).collect();
    let now = AttributeValue::N(now_s.to_string());
    let mut expired = Vec::new();
    // Only the keys come back: the emulator's cost of a Scan answer grows with every attribute
    // of every item in it.
    let projection: Vec<String> = (0..keys.len()).map(|i| format!("#k{i}")).collect();
    let mut scan = dynamodb
        .scan()
        .table_name(&table.name)
        .filter_expression("#ttl < :now")
        .projection_expression(projection.join(", "))
        .expression_attribute_names("#ttl", attribute)
        .expression_attribute_values(":now", now.clone());
    for (name, key) in projection.iter().zip(&keys) {
        scan = scan.expression_attribute_names(name, key);
    }
    let mut pages = scan.into_paginator().items().send();
    while let Some(item) = pages.next().await {
        let item = item.map_err(crate::Error::aws(format!("Scan {}", table.name)))?;
        expired.push(keys.iter().filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone()))).collect::<std::collections::HashMap<_, _>>());
    }
    let mut deleted = 0;
    for key in expired {
        let result = dynamodb
            .delete_item()
            .table_name(&table.name)
            .set_key(Some(key))
            .condition_expression("#ttl < :now")
            .expression_attribute_names("#ttl", attribute)
            .expression_attribute_values(":now", now.clone())
            .customize()
            .mutate_request(|r| {
                r.headers_mut().insert(TTL_HEADER, "1");
            })
            .send()
            .await;
        match result {
            Ok(_) => deleted += 1,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => {}
            Err(e) => return Err(crate::Error::aws(format!("DeleteItem {}", table.name))(e)),
        }
    }
    Ok(deleted)
}

/// Runs the plan's TTL sweeps until `shutdown`, counting deletions on `injector`.
pub fn spawn_sweeps(
    dynamodb: aws_sdk_dynamodb::Client,
    tables: Vec<(TtlSweep, TableSpec)>,
    injector: Arc<Injector>,
    shutdown: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    tables
        .into_iter()
        .map(|(sweep, table)| {
            let (dynamodb, injector, mut shutdown) = (dynamodb.clone(), injector.clone(), shutdown.clone());
            tokio::spawn(async move {
                let every = Duration::from_secs_f64(sweep.every_s.max(0.1));
                loop {
                    if *shutdown.borrow() {
                        return;
                    }
                    if injector.elapsed_s() >= sweep.from_s {
                        let now = chrono::Utc::now().timestamp() + sweep.advance_s as i64;
                        match delete_expired(&dynamodb, &table, &sweep.attribute, now).await {
                            Ok(n) => injector.add_ttl_deleted(n),
                            Err(e) => tracing::warn!(error = %e, "TTL sweep failed"),
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = shutdown.changed() => {}
                    }
                }
            })
        })
        .collect()
}
