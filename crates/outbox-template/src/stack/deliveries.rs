//! How each function receives events from a bus, read from the template: either a rule of its
//! own (SAM's `EventBridgeRule` event: the function invoked asynchronously) or a standalone
//! `AWS::Events::Rule` sending the events to a queue that the function's SQS event source mapping
//! reads (the consumer kit's rule → delivery queue → mapping). Tools that put events on a
//! consumer's bus (the demo, the proof, `dlq practice`) find the bus and the event types here,
//! whichever way the consumer is wired; it needs no provisioning (it works in
//! [`Mode::LookUp`](super::Mode::LookUp) too).

use serde_json::Value;

use super::Stack;
use crate::{FunctionEvent, TemplateError};

/// One way events reach a function.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// The function's logical id.
    pub function: String,
    /// The rule's logical id: `<Function><Event>` for a function's own rule (SAM's name for the
    /// rule it generates), the `AWS::Events::Rule`'s for a standalone rule.
    pub rule: String,
    /// The rule's name on the bus: its `Name`, else [`super::rule_name`] of its logical id (the
    /// name the local stack gives it).
    pub rule_name: String,
    /// The bus the rule is on.
    pub bus_name: String,
    /// The rule's event pattern (`source`, `detail-type`, ...), as JSON.
    pub pattern: Value,
    /// The queue between the rule and the function (its logical id) when the function reads it
    /// through an SQS event source mapping; `None` for a rule invoking the function itself.
    pub queue: Option<String>,
}

impl Delivery {
    /// The strings the pattern lists under `key` (e.g. `detail-type`); content filters (objects)
    /// are left out.
    pub fn listed(&self, key: &str) -> Vec<String> {
        self.pattern.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
    }

    /// The event types (`detail-type`) the rule delivers.
    pub fn detail_types(&self) -> Vec<String> {
        self.listed("detail-type")
    }
}

impl Stack {
    /// Every function's deliveries, in template order: its own rules first, then the rules
    /// feeding the queues its SQS mappings read. A rule whose pattern names no `source` and no
    /// `detail-type` (e.g. one without an event pattern) is not a delivery of bus events.
    ///
    /// # Errors
    /// [`TemplateError`] naming a bus or a rule target that cannot be resolved.
    pub fn deliveries(&self) -> Result<Vec<Delivery>, TemplateError> {
        let bus_of = |bus: Option<&serde_yaml_ng::Value>, at: String| match bus {
            Some(v) => self.resolver.resolve_string(v, &at),
            None => Ok("default".to_owned()),
        };
        let standalone = self.template.standalone_rules()?;
        let mut out = Vec::new();
        for f in &self.functions {
            for event in &f.events {
                match event {
                    FunctionEvent::EventBridgeRule(rule) => out.push(Delivery {
                        function: f.logical_id.clone(),
                        rule: format!("{}{}", f.logical_id, rule.name),
                        rule_name: super::rule_name(&self.resolver.stack_name, &format!("{}{}", f.logical_id, rule.name)),
                        bus_name: bus_of(rule.bus.as_ref(), format!("{}.Properties.Events.{}.Properties.EventBusName", f.logical_id, rule.name))?,
                        pattern: rule.pattern.clone(),
                        queue: None,
                    }),
                    FunctionEvent::Sqs(mapping) => {
                        let Some(queue) = self.queue(&mapping.queue_logical_id) else { continue };
                        for rule in &standalone {
                            let pattern = serde_json::to_value(&rule.pattern).unwrap_or_default();
                            if pattern.get("source").is_none() && pattern.get("detail-type").is_none() {
                                continue;
                            }
                            let mut targets_queue = false;
                            for (i, (_, arn)) in rule.targets.iter().enumerate() {
                                let at = format!("{}.Properties.Targets[{i}].Arn", rule.logical_id);
                                targets_queue |= self.resolver.resolve_string(arn, &at)? == queue.arn;
                            }
                            if targets_queue {
                                let rule_name = match &rule.name {
                                    Some(v) => self.resolver.resolve_string(v, &format!("{}.Properties.Name", rule.logical_id))?,
                                    None => super::rule_name(&self.resolver.stack_name, &rule.logical_id),
                                };
                                out.push(Delivery {
                                    function: f.logical_id.clone(),
                                    rule: rule.logical_id.clone(),
                                    rule_name,
                                    bus_name: bus_of(rule.bus.as_ref(), format!("{}.Properties.EventBusName", rule.logical_id))?,
                                    pattern,
                                    queue: Some(queue.logical_id.clone()),
                                });
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    /// The deliveries of the function with `logical_id` (see [`Stack::deliveries`]).
    ///
    /// # Errors
    /// As [`Stack::deliveries`].
    pub fn deliveries_of(&self, logical_id: &str) -> Result<Vec<Delivery>, TemplateError> {
        Ok(self.deliveries()?.into_iter().filter(|d| d.function == logical_id).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::stack::QueueInfo;
    use crate::{Resolver, Template};

    /// A stack of `template` as set-up resolves it (buses' and queues' names and ARNs), without AWS.
    fn stack(template: Template) -> Stack {
        let mut resolver = Resolver::new("s", "us-east-1", "1");
        for (parameter, default) in template.parameter_defaults() {
            resolver.set_ref(&parameter, default);
        }
        for bus in template.buses(&resolver).expect("its buses") {
            resolver.set_ref(&bus.logical_id, &bus.name);
        }
        let mut queues = Vec::new();
        for spec in template.queues(&resolver).expect("its queues") {
            let arn = format!("arn:aws:sqs:us-east-1:1:{}", spec.name);
            resolver.set_attr(&spec.logical_id, "Arn", &arn);
            queues.push(QueueInfo { logical_id: spec.logical_id, url: format!("http://q/{}", spec.name), name: spec.name, arn });
        }
        let (functions, skipped_functions) = template.runnable_functions().expect("its functions");
        Stack {
            template,
            resolver,
            tables: Vec::new(),
            stream_arns: HashMap::new(),
            buses: Vec::new(),
            archives: Vec::new(),
            queues,
            buckets: Vec::new(),
            functions,
            skipped_functions,
            rules: Vec::new(),
            queue_rules: Vec::new(),
            schedules: Vec::new(),
            custom_buses: Vec::new(),
            subscribers: Vec::new(),
        }
    }

    #[test]
    fn a_consumer_is_delivered_by_its_own_rule_or_by_a_rule_to_the_queue_it_reads() {
        let text = r#"
Resources:
  Bus: {Type: AWS::Events::EventBus, Properties: {Name: s-bus}}
  Deliveries: {Type: AWS::SQS::Queue}
  Other: {Type: AWS::SQS::Queue}
  ToDeliveries:
    Type: AWS::Events::Rule
    Properties:
      EventBusName: !Ref Bus
      EventPattern: {source: [example.orders], detail-type: [OrderCreated, OrderCancelled]}
      Targets: [{Id: q, Arn: !GetAtt Deliveries.Arn}]
  ToOther:
    Type: AWS::Events::Rule
    Properties:
      EventBusName: !Ref Bus
      EventPattern: {source: [example.other]}
      Targets: [{Id: q, Arn: !GetAtt Other.Arn}]
  Queued:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: queued}}
    Properties:
      Events:
        D: {Type: SQS, Properties: {Queue: !GetAtt Deliveries.Arn, FunctionResponseTypes: [ReportBatchItemFailures]}}
  Direct:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: direct}}
    Properties:
      Events:
        Paid: {Type: EventBridgeRule, Properties: {EventBusName: !Ref Bus, Pattern: {source: [example.orders], detail-type: [OrderPaid]}}}
"#;
        let stack = stack(Template::parse(Path::new("t.yaml"), text).expect("a template"));
        let queued = stack.deliveries_of("Queued").expect("resolves");
        assert_eq!(queued.len(), 1, "only the rule to its queue: {queued:?}");
        assert_eq!((queued[0].rule.as_str(), queued[0].bus_name.as_str(), queued[0].queue.as_deref()), ("ToDeliveries", "s-bus", Some("Deliveries")));
        assert_eq!(queued[0].detail_types(), ["OrderCreated", "OrderCancelled"]);
        assert_eq!(queued[0].listed("source"), ["example.orders"]);
        let direct = stack.deliveries_of("Direct").expect("resolves");
        assert_eq!(direct.len(), 1);
        assert_eq!((direct[0].rule.as_str(), direct[0].bus_name.as_str(), direct[0].queue.as_deref()), ("DirectPaid", "s-bus", None));
        assert_eq!(direct[0].detail_types(), ["OrderPaid"]);
        assert_eq!(stack.deliveries().expect("resolves").len(), 2, "ToOther feeds no function");
    }

    /// The sample's consumer reads the consumer kit's delivery queue (issue 24): the kit's rule
    /// on the sample's bus, the two order event types.
    #[test]
    fn the_samples_consumer_is_delivered_through_the_consumer_kits_queue() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let stack = stack(Template::load(&root.join("template.yaml")).expect("template.yaml"));
        let deliveries = stack.deliveries_of("ReserveInventoryFunction").expect("resolves");
        assert_eq!(deliveries.len(), 1, "{deliveries:?}");
        let d = &deliveries[0];
        assert_eq!((d.rule.as_str(), d.queue.as_deref()), ("ConsumerKit/DeliveryRule", Some("ConsumerKit/DeliveryQueue")));
        assert_eq!(d.listed("source"), ["example.orders"]);
        assert_eq!(d.detail_types(), ["OrderCreated", "OrderCancelled"]);
    }
}
