//! How events reach the consumer the proof checks: the bus they are published on and the
//! `detail-type`s delivered to it, either by its own `EventBridgeRule` events (rule → function)
//! or by a standalone rule whose target is the queue of its SQS event source mapping (the
//! consumer kit's rule → delivery queue → mapping, as `examples/my-service` has it).

use crate::runtime::Runtime;
use crate::template::FunctionEvent;

/// `(bus, detail-types)` of what is delivered to function `consumer`; `None` when nothing is.
pub(super) fn consumer_delivery(runtime: &Runtime, consumer: &str) -> crate::Result<Option<(String, Vec<String>)>> {
    let types_of = |pattern: &serde_json::Value| -> Vec<String> {
        pattern["detail-type"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    let stack = &runtime.stack;
    let own: Vec<_> = stack.rules.iter().filter(|r| r.function == consumer).collect();
    if let Some(first) = own.first() {
        return Ok(Some((first.bus_name.clone(), own.iter().flat_map(|r| types_of(&r.spec.pattern)).collect())));
    }
    let queues: Vec<String> = runtime
        .function(consumer)?
        .spec
        .events
        .iter()
        .filter_map(|e| match e {
            FunctionEvent::Sqs(m) => Some(m.queue_logical_id.clone()),
            _ => None,
        })
        .collect();
    let rules: Vec<_> = stack.queue_rules.iter().filter(|r| r.queues.iter().any(|q| queues.contains(q))).collect();
    let Some(first) = rules.first() else { return Ok(None) };
    let specs = stack.template.standalone_rules()?;
    let types = specs.iter().filter(|s| rules.iter().any(|r| r.logical_id == s.logical_id)).flat_map(|s| types_of(&s.pattern)).collect();
    Ok(Some((first.bus_name.clone(), types)))
}
