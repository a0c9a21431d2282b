//! Subscribers and the breaker store: one item per subscriber in a DynamoDB table
//! ([`Subscriber`]), read with a cached `Scan` ([`SubscriberTable`]), which also holds each
//! subscriber's circuit breaker ([`crate::BreakerState`]) and is where a subscriber is disabled.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::error::{aws, DispatchError};
use super::lock;
use crate::breaker::{BreakerConfig, BreakerState};

/// One subscriber, as stored in the subscriber table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Subscriber {
    /// Subscriber id (the table's partition key `id`): the metric dimension and inbox key part.
    pub id: String,
    /// Endpoint URL (`https://`; `http://` only with `WEBHOOK_ALLOW_HTTP`).
    pub url: String,
    /// Event types delivered (`detail.metadata.type`); `*` for all.
    pub event_types: Vec<String>,
    /// Secrets Manager secret id or ARN holding the subscriber's `whsec_` secret(s).
    pub secret_id: String,
    /// `false` after a 410 (or by hand): no more deliveries. Default `true`.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl Subscriber {
    /// An enabled subscriber: `url` gets the `event_types` (`*` for all), signed with the
    /// secrets of Secrets Manager secret `secret_id`.
    pub fn new(id: impl Into<String>, url: impl Into<String>, event_types: Vec<String>, secret_id: impl Into<String>) -> Self {
        Self { id: id.into(), url: url.into(), event_types, secret_id: secret_id.into(), enabled: true }
    }

    /// Whether this subscriber gets events of `event_type`.
    pub fn wants(&self, event_type: &str) -> bool {
        self.enabled && self.event_types.iter().any(|t| t == "*" || t == event_type)
    }
}

/// The subscriber table, its `Scan` cached for a TTL.
#[derive(Debug)]
pub struct SubscriberTable {
    client: aws_sdk_dynamodb::Client,
    table: String,
    ttl: Duration,
    cache: Mutex<Option<(Instant, Vec<Subscriber>)>>,
}

impl SubscriberTable {
    /// The table `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>, ttl: Duration) -> Self {
        Self { client, table: table.into(), ttl, cache: Mutex::new(None) }
    }

    /// Every subscriber (enabled or not).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn all(&self) -> Result<Vec<Subscriber>, DispatchError> {
        if let Some((at, list)) = lock(&self.cache).as_ref() {
            if at.elapsed() < self.ttl {
                return Ok(list.clone());
            }
        }
        self.refresh().await
    }

    /// Every subscriber, read now (the cache renewed).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn refresh(&self) -> Result<Vec<Subscriber>, DispatchError> {
        let mut list = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| DispatchError::Aws { action: "Scan of the subscriber table", source: outbox::AwsError::from_sdk("Scan", &e) })?;
            let items: Vec<Subscriber> = serde_dynamo::from_items(out.items().to_vec()).map_err(DispatchError::Subscriber)?;
            list.extend(items);
            start = out.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        *lock(&self.cache) = Some((Instant::now(), list.clone()));
        Ok(list)
    }

    /// Sets `enabled = false` with the reason and time (after a 410), and forgets the cache.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn disable(&self, id: &str, reason: &str) -> Result<(), DispatchError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET enabled = :no, disabled_reason = :reason, disabled_at = :at")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .expression_attribute_values(":reason", AttributeValue::S(reason.to_owned()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339()))
            .send()
            .await
            .map_err(|e| DispatchError::Aws { action: "UpdateItem (disable subscriber)", source: outbox::AwsError::from_sdk("UpdateItem", &e) })?;
        *lock(&self.cache) = None;
        Ok(())
    }
}

impl SubscriberTable {
    /// The breaker attributes of subscriber `id` (a consistent `GetItem`; an absent item is a
    /// closed breaker).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn breaker(&self, id: &str) -> Result<BreakerState, DispatchError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .consistent_read(true)
            .projection_expression("breaker_failures, breaker_open_until, breaker_probe_until, failing_since")
            .send()
            .await
            .map_err(aws("GetItem (circuit breaker)"))?;
        Ok(out.item.as_ref().map(breaker_state).unwrap_or_default())
    }

    /// Makes this caller the probe of a half-open breaker until `until` (epoch ms): `true` for
    /// exactly one of racing callers (a conditional `UpdateItem`).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn claim_probe(&self, id: &str, now: i64, until: i64) -> Result<bool, DispatchError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET breaker_probe_until = :until")
            .condition_expression("breaker_open_until <= :now AND (attribute_not_exists(breaker_probe_until) OR breaker_probe_until <= :now)")
            .expression_attribute_values(":until", AttributeValue::N(until.to_string()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(aws("UpdateItem (claim the breaker's probe)")(e)),
        }
    }

    /// A 2xx from subscriber `id`: its breaker closes (failures 0, the rest removed).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record_success(&self, id: &str) -> Result<(), DispatchError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET breaker_failures = :zero REMOVE breaker_open_until, breaker_probe_until, failing_since")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send()
            .await
            .map_err(aws("UpdateItem (close the breaker)"))?;
        Ok(())
    }

    /// A failed attempt to subscriber `id` at `now` (epoch ms): one more consecutive failure;
    /// at `config.threshold` (or when this was the probe) the breaker opens for the cool-down.
    /// Returns the state after.
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn record_failure(&self, id: &str, now: i64, config: &BreakerConfig, probe: bool) -> Result<BreakerState, DispatchError> {
        let out = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("ADD breaker_failures :one SET failing_since = if_not_exists(failing_since, :now) REMOVE breaker_probe_until")
            .condition_expression("attribute_exists(id)")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllNew)
            .send()
            .await
            .map_err(aws("UpdateItem (count a failure)"))?;
        let mut state = out.attributes.as_ref().map(breaker_state).unwrap_or_default();
        if config.threshold > 0 && (probe || state.failures >= config.threshold) {
            let until = now + i64::try_from(config.cooldown.as_millis()).unwrap_or(i64::MAX / 2);
            self.client
                .update_item()
                .table_name(&self.table)
                .key("id", AttributeValue::S(id.to_owned()))
                .update_expression("SET breaker_open_until = :until")
                .condition_expression("attribute_exists(id)")
                .expression_attribute_values(":until", AttributeValue::N(until.to_string()))
                .send()
                .await
                .map_err(aws("UpdateItem (open the breaker)"))?;
            state.open_until = Some(until);
        }
        Ok(state)
    }
}

impl SubscriberTable {
    /// Disables subscriber `id` for failing since `failing_since` (epoch ms): `enabled = false`,
    /// `disabled_reason`, `disabled_at`, `disabled_failing_since` (where `enable` recovers
    /// from). `false` when it was disabled already (another invocation won).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn disable_failing(&self, id: &str, reason: &str, failing_since: i64) -> Result<bool, DispatchError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("id", AttributeValue::S(id.to_owned()))
            .update_expression("SET enabled = :no, disabled_reason = :reason, disabled_at = :at, disabled_failing_since = :since")
            .condition_expression("attribute_exists(id) AND enabled = :yes")
            .expression_attribute_values(":no", AttributeValue::Bool(false))
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .expression_attribute_values(":reason", AttributeValue::S(reason.to_owned()))
            .expression_attribute_values(":at", AttributeValue::S(Utc::now().to_rfc3339()))
            .expression_attribute_values(":since", AttributeValue::N(failing_since.to_string()))
            .send()
            .await;
        *lock(&self.cache) = None;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_conditional_check_failed_exception()) => Ok(false),
            Err(e) => Err(aws("UpdateItem (disable a failing subscriber)")(e)),
        }
    }
}

/// The breaker attributes of a subscriber item.
fn breaker_state(item: &HashMap<String, AttributeValue>) -> BreakerState {
    let n = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse::<i64>().ok());
    BreakerState {
        failures: n("breaker_failures").and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
        open_until: n("breaker_open_until"),
        probe_until: n("breaker_probe_until"),
        failing_since: n("failing_since"),
    }
}
