//! Where the operator's verbs re-publish an event (`dlq redrive`, `ordering release`): the classic
//! bus (`PutEvents`, `aws-sdk-eventbridge`) or the EventBridge Custom Event Bus (`PutEvents` of
//! `aws-sdk-eventbridgev2`, with `SystemMetadata`).
//!
//! On a stack whose consumers are fed by a Custom bus's subscribers, an event re-put on the classic
//! bus reaches no consumer: the bus accepts it, the dead letter is deleted, and the event is lost.
//! So a stack with a Custom bus re-publishes there ([`Republisher::for_stack`]).
//!
//! On the Custom bus the entry's `EventGroupId` is the event's aggregate
//! (`<aggregate_type>#<subject>` from `detail.metadata`, as the relay sets it:
//! [`outbox::relay::bus::aggregate_group_id`]), so a re-published
//! event joins its aggregate's FIFO group behind what is already there; its `DeduplicationId` is
//! new (a UUID v7): the bus answers a `DeduplicationId` seen within 300 s `DEDUPLICATED` and
//! delivers nothing (API reference, `PutEventsSystemMetadata`), and a redrive must be delivered.
//! Consumers deduplicate on `detail.metadata.id` in their inbox, so a re-published event that had
//! taken effect is absorbed there.

use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use crate::resources::Resources;
use crate::{Error, Result};

/// A bus to re-publish events to.
#[derive(Debug, Clone)]
pub enum Republisher {
    /// A classic event bus, by name.
    Classic {
        /// The `events` client.
        client: aws_sdk_eventbridge::Client,
        /// The bus's name.
        bus: String,
    },
    /// A Custom Event Bus, by ARN (`arn:aws:events:<region>:<account>:event-busv2/<name>/<id>`).
    Custom {
        /// The `eventsv2` client.
        client: aws_sdk_eventbridgev2::Client,
        /// The bus's ARN.
        bus_arn: String,
    },
}

impl Republisher {
    /// The bus `given` names (logical id, name or ARN, classic or Custom); without one, the
    /// stack's first Custom bus when it has one (its consumers are fed by subscribers), else its
    /// first classic bus.
    ///
    /// # Errors
    /// [`Error::Resolve`] when `given` names no bus of the stack; [`Error::Missing`] when the
    /// stack has no bus and none is given.
    pub fn for_stack(sdk: &aws_config::SdkConfig, resources: &Resources, given: Option<&str>) -> Result<Self> {
        let custom = |arn: &str| Republisher::Custom { client: aws_sdk_eventbridgev2::Client::new(sdk), bus_arn: arn.to_owned() };
        let classic = |name: &str| Republisher::Classic { client: aws_sdk_eventbridge::Client::new(sdk), bus: name.to_owned() };
        match given {
            Some(given) => {
                let named = |b: &&crate::resources::Named| [&b.logical_id, &b.name, &b.arn].iter().any(|k| k.as_str() == given);
                if let Some(b) = resources.custom_buses.iter().find(named) {
                    return Ok(custom(&b.arn));
                }
                Ok(classic(&resources.bus(given)?.name))
            }
            None => match (resources.custom_buses.first(), resources.buses.first()) {
                (Some(b), _) => Ok(custom(&b.arn)),
                (None, Some(b)) => Ok(classic(&b.name)),
                (None, None) => Err(Error::missing(&resources.source, "event bus", "pass --bus")),
            },
        }
    }

    /// The bus's name (classic) or ARN (Custom), for messages.
    pub fn bus(&self) -> &str {
        match self {
            Republisher::Classic { bus, .. } => bus,
            Republisher::Custom { bus_arn, .. } => bus_arn,
        }
    }

    /// Puts one event (built by [`crate::dlq::redrive_entry`] with [`Republisher::bus`]). `Ok(Ok(()))`: the bus accepted it; `Ok(Err(reason))`: the bus refused the entry
    /// (`FailedEntryCount` 1), or the event has no aggregate to group it by on a Custom bus.
    ///
    /// # Errors
    /// [`Error::Aws`]: the `PutEvents` call failed.
    pub async fn put(&self, entry: PutEventsRequestEntry) -> Result<std::result::Result<(), String>> {
        match self {
            Republisher::Classic { client, bus } => {
                let out = client.put_events().entries(entry).send().await.map_err(Error::aws(format!("PutEvents to {bus}")))?;
                Ok(match out.failed_entry_count() {
                    0 => Ok(()),
                    _ => Err(out.entries().first().and_then(|e| e.error_message()).unwrap_or("unknown error").to_owned()),
                })
            }
            Republisher::Custom { client, bus_arn } => {
                let entry = match custom_entry(&entry) {
                    Ok(entry) => entry,
                    Err(why) => return Ok(Err(why)),
                };
                let out = client
                    .put_events()
                    .event_bus_arn(bus_arn)
                    .entries(entry)
                    .send()
                    .await
                    .map_err(Error::aws(format!("PutEvents (Custom Event Bus) to {bus_arn}")))?;
                let refused = out.entries().iter().find(|e| e.error_code().is_some());
                Ok(match (out.failed_entry_count(), refused) {
                    (0, None) => Ok(()),
                    (_, Some(e)) => Err(format!("{}: {}", e.error_code().unwrap_or_default(), e.error_message().unwrap_or_default())),
                    (_, None) => Err("unknown error".to_owned()),
                })
            }
        }
    }
}

/// `resources` with each Custom bus's whole ARN (`event-busv2/<name>/<id>`). A stack looked up
/// from its template knows at most `event-busv2/<name>` (AWS makes the `/<id>` suffix when it creates
/// the bus), so an incomplete ARN is completed by `ListEventBuses` (`NamePrefix`, then the exact
/// name), in the buses and wherever a function's environment holds it (the relay's
/// `EVENT_BUS_NAME`). A bus not found keeps what the template gave.
///
/// # Errors
/// [`Error::Aws`]: `ListEventBuses` failed.
pub async fn with_located_custom_buses(sdk: &aws_config::SdkConfig, resources: &Resources) -> Result<Resources> {
    let mut located = resources.clone();
    if located.custom_buses.iter().all(|b| b.arn.split('/').count() == 3) {
        return Ok(located);
    }
    let client = aws_sdk_eventbridgev2::Client::new(sdk);
    for bus in located.custom_buses.iter_mut().filter(|b| b.arn.split('/').count() != 3) {
        let mut pages = client.list_event_buses().name_prefix(&bus.name).into_paginator().send();
        let mut found = None;
        while let Some(page) = pages.next().await {
            let page = page.map_err(Error::aws(format!("ListEventBuses {}", bus.name)))?;
            found = found.or_else(|| {
                page.event_buses().iter().find(|b| b.name() == Some(bus.name.as_str())).and_then(|b| b.event_bus_arn().map(str::to_owned))
            });
        }
        let Some(arn) = found else { continue };
        bus.arn.clone_from(&arn);
        let incomplete = format!(":event-busv2/{}", bus.name);
        for function in &mut located.functions {
            for value in function.environment.values_mut().filter(|v| v.starts_with("arn:") && v.ends_with(&incomplete)) {
                value.clone_from(&arn);
            }
        }
    }
    Ok(located)
}

/// The Custom bus entry of a classic `entry`: its `Source`, `DetailType` and `Detail`, grouped by
/// the event's aggregate ([`outbox::relay::bus::aggregate_group_id`], as the relay groups it),
/// with a new `DeduplicationId`; `Err` with why when the detail names no aggregate.
fn custom_entry(entry: &PutEventsRequestEntry) -> std::result::Result<aws_sdk_eventbridgev2::types::PutEventsRequestEntry, String> {
    let detail = entry.detail().unwrap_or_default();
    let metadata: outbox::envelope::EventMetadata = serde_json::from_str::<serde_json::Value>(detail)
        .ok()
        .and_then(|v| v.get("metadata").cloned())
        .and_then(|m| serde_json::from_value(m).ok())
        .ok_or_else(|| "the event's detail.metadata is missing or malformed: no aggregate to group it by on the Custom Event Bus".to_owned())?;
    let group = outbox::relay::bus::aggregate_group_id(&metadata.aggregate_type, &metadata.subject);
    let system = aws_sdk_eventbridgev2::types::PutEventsSystemMetadata::builder()
        .event_group_id(group)
        .deduplication_id(uuid::Uuid::now_v7().to_string())
        .build();
    aws_sdk_eventbridgev2::types::PutEventsRequestEntry::builder()
        .source(entry.source().unwrap_or_default())
        .detail_type(entry.detail_type().unwrap_or_default())
        .detail(detail)
        .system_metadata(system)
        .build()
        .map_err(|e| format!("the Custom Event Bus entry: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classic(detail: &str) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder().event_bus_name("b").source("orders").detail_type("OrderCreated").detail(detail).build()
    }

    #[test]
    fn a_custom_entry_is_grouped_by_its_aggregate_with_a_fresh_deduplication_id() {
        let detail = r#"{"metadata":{"id":"e-1","type":"OrderCreated","version":1,"source":"orders","time":"2026-12-04T00:00:00Z","subject":"o-1","aggregate_type":"Order","sequence":3,"correlation_id":"c"},"data":{}}"#;
        let a = custom_entry(&classic(detail)).unwrap();
        let b = custom_entry(&classic(detail)).unwrap();
        let meta = |e: &aws_sdk_eventbridgev2::types::PutEventsRequestEntry| e.system_metadata().cloned().unwrap();
        assert_eq!(meta(&a).event_group_id(), Some("Order#o-1"));
        assert_ne!(meta(&a).deduplication_id(), meta(&b).deduplication_id(), "a redrive must not be deduplicated against the original");
        assert_eq!((a.source(), a.detail_type(), a.detail()), ("orders", "OrderCreated", Some(detail)));
    }

    #[test]
    fn an_event_without_an_aggregate_is_refused_with_why() {
        let why = custom_entry(&classic(r#"{"data":{}}"#)).unwrap_err();
        assert!(why.contains("detail.metadata"), "{why}");
        let long = format!(
            r#"{{"metadata":{{"id":"e","type":"T","version":1,"source":"s","time":"t","subject":"{}","aggregate_type":"Order","sequence":1,"correlation_id":"c"}}}}"#,
            "x".repeat(200)
        );
        let grouped = custom_entry(&classic(&long)).expect("a long aggregate id is grouped by its hash, as the relay groups it");
        assert_eq!(
            grouped.system_metadata().and_then(|m| m.event_group_id()),
            Some(outbox::relay::bus::aggregate_group_id("Order", &"x".repeat(200)).as_str())
        );
    }
}
