//! The bus the proof runs on: the classic bus (a consumer's events come through rules) or a
//! Custom Event Bus (through the subscriber that targets the queue the consumer's SQS mapping
//! reads: the consumer kit with `EventBusType: Custom`). The proof's own reader of what was
//! published is a rule on the classic bus and an `UNORDERED` subscriber on a Custom bus, each to a
//! queue of its own; the hot aggregate's events go on the bus through its own `PutEvents`.

use serde_json::{json, Value};

use super::reads::sdk_error;
use crate::runtime::Runtime;
use outbox_template::FunctionEvent;

/// The bus a consumer's events come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ProofBus {
    /// A classic bus, by name.
    Classic(String),
    /// A Custom Event Bus, by ARN (`event-busv2/<name>/<id>`).
    Custom(String),
}

impl ProofBus {
    /// Its name (classic) or ARN (Custom).
    pub(super) fn id(&self) -> &str {
        match self {
            Self::Classic(name) | Self::Custom(name) => name,
        }
    }

    /// Where `dlq redrive` re-publishes to on this bus.
    pub(super) fn republisher(&self, sdk: &aws_config::SdkConfig) -> outbox_cli::republisher::Republisher {
        use outbox_cli::republisher::Republisher;
        match self {
            Self::Classic(bus) => Republisher::Classic { client: aws_sdk_eventbridge::Client::new(sdk), bus: bus.clone() },
            Self::Custom(bus_arn) => Republisher::Custom { client: aws_sdk_eventbridgev2::Client::new(sdk), bus_arn: bus_arn.clone() },
        }
    }
}

/// The bus consumer `logical_id`'s events come from and the event types (`detail-type`) it
/// receives: its rules ([`Runtime::consumer_delivery`]), else the Custom bus subscriber that
/// targets a queue its SQS mapping reads (the types its filters list).
///
/// # Errors
/// A message when neither delivers to it (the rules' error, which names what was looked for).
pub(super) fn delivery(runtime: &Runtime, logical_id: &str) -> crate::Result<(ProofBus, Vec<String>)> {
    let classic = match runtime.consumer_delivery(logical_id) {
        Ok((bus, types)) => return Ok((ProofBus::Classic(bus), types)),
        Err(e) => e,
    };
    let function = runtime.function(logical_id)?;
    let subscriber = function.spec.events.iter().find_map(|event| match event {
        FunctionEvent::Sqs(mapping) => runtime.stack.subscriber_for_queue(&mapping.queue_logical_id),
        _ => None,
    });
    let Some(subscriber) = subscriber else { return Err(classic) };
    Ok((ProofBus::Custom(subscriber.bus_arn.clone()), filter_types(&subscriber.request)))
}

/// The `detail-type`s a subscriber's `FilterConfiguration.Filters[].Pattern` (JSON texts) list.
fn filter_types(request: &Value) -> Vec<String> {
    let filters = request.pointer("/FilterConfiguration/Filters").and_then(Value::as_array).into_iter().flatten();
    filters
        .filter_map(|f| serde_json::from_str::<Value>(f.get("Pattern")?.as_str()?).ok())
        .flat_map(|p| p.get("detail-type").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect()
}

/// A queue with every event of `bus` (a rule, or an `UNORDERED` subscriber, matching every
/// source), so what was published can be read back: the queue's URL.
pub(super) async fn archive(runtime: &Runtime, bus: &ProofBus) -> crate::Result<String> {
    let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
    // One name for the queue and its rule or subscriber: CloudFormation's shape, within the rule's
    // 64 characters (and so the queue's 80) whatever the stack name.
    let name = outbox_template::physical_name(&runtime.stack.resolver.stack_name, "ProofArchive", &outbox_template::names::EVENT_RULE);
    let url = sqs.create_queue().queue_name(&name).send().await.map_err(|e| sdk_error("CreateQueue", e))?.queue_url.unwrap_or_default();
    let r = &runtime.stack.resolver;
    let arn = format!("arn:aws:sqs:{}:{}:{name}", r.region, r.account);
    let every = json!({"source": [{"prefix": ""}]}).to_string();
    match bus {
        ProofBus::Classic(bus) => {
            let events = aws_sdk_eventbridge::Client::new(&runtime.sdk);
            events.put_rule().name(&name).event_bus_name(bus).event_pattern(every).send().await.map_err(|e| sdk_error("PutRule", e))?;
            let target = aws_sdk_eventbridge::types::Target::builder()
                .id("proof-archive")
                .arn(arn)
                .build()
                .map_err(crate::Error::other("the rule's target"))?;
            events.put_targets().rule(&name).event_bus_name(bus).targets(target).send().await.map_err(|e| sdk_error("PutTargets", e))?;
        }
        ProofBus::Custom(bus_arn) => {
            use aws_sdk_eventbridgev2::types::{Filter, FilterConfiguration, FilterScope, InvokeConfiguration, OrderingType, StartingPosition};
            let target = InvokeConfiguration::builder()
                .target_arn(arn)
                .role_arn(format!("arn:aws:iam::{}:role/{name}", r.account))
                .build()
                .map_err(crate::Error::other("the subscriber's target"))?;
            let filter = Filter::builder().pattern(every).scope(FilterScope::Data).build().map_err(crate::Error::other("the subscriber's filter"))?;
            aws_sdk_eventbridgev2::Client::new(&runtime.sdk)
                .create_subscriber()
                .name(&name)
                .event_bus_arn(bus_arn)
                .invoke_configuration(target)
                .filter_configuration(FilterConfiguration::builder().filters(filter).build())
                .r#type(OrderingType::Unordered)
                .starting_position(StartingPosition::Latest)
                .send()
                .await
                .map_err(|e| sdk_error("CreateSubscriber", e))?;
        }
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscriber_s_types_are_those_its_filters_list() {
        let request = json!({"FilterConfiguration": {"Filters": [
            {"Pattern": "{\"source\":[\"example.orders\"],\"detail-type\":[\"OrderCreated\",\"OrderCancelled\"]}", "Scope": "DATA"},
            {"Pattern": "{\"source\":[\"example.payments\"]}", "Scope": "DATA"},
            {"Pattern": "not JSON", "Scope": "DATA"}
        ]}});
        assert_eq!(filter_types(&request), ["OrderCreated", "OrderCancelled"]);
        assert!(filter_types(&json!({})).is_empty());
    }
}
