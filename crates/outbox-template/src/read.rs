//! The stack's data resources: tables, buses, buckets, queues and the standalone rules that
//! target queues, as the local runtime provisions them.

use std::collections::BTreeMap;

use serde_yaml_ng::Value;

use super::intrinsics::Resolver;
use super::names;
use super::specs::{ArchiveSpec, BucketSpec, BusSpec, IndexSpec, QueueSpec, ScheduleRuleSpec, StandaloneRuleSpec, TableSpec};
use super::{unsupported, Template, TemplateError};

impl Template {
    /// Every `AWS::DynamoDB::Table`.
    ///
    /// # Errors
    /// [`TemplateError`] naming the property that cannot be read.
    pub fn tables(&self, r: &Resolver) -> Result<Vec<TableSpec>, TemplateError> {
        self.resources_of("AWS::DynamoDB::Table")
            .into_iter()
            .map(|(id, p)| {
                let at = |prop: &str| format!("{id}.Properties.{prop}");
                let name = named(r, &id, &p, &names::TABLE)?;
                let pairs_of = |list: Option<&Value>, prop: &str, a: &str, b: &str| -> Result<Vec<(String, String)>, TemplateError> {
                    let seq = list.and_then(Value::as_sequence).ok_or_else(|| unsupported(at(prop), "must be a list"))?;
                    seq.iter()
                        .map(|e| {
                            let x = e.get(a).and_then(Value::as_str);
                            let y = e.get(b).and_then(Value::as_str);
                            match (x, y) {
                                (Some(x), Some(y)) => Ok((x.to_owned(), y.to_owned())),
                                _ => Err(unsupported(at(prop), format!("every entry needs {a} and {b} as plain strings"))),
                            }
                        })
                        .collect()
                };
                let pairs = |prop: &str, a: &str, b: &str| pairs_of(p.get(prop), prop, a, b);
                let indexes = p.get("GlobalSecondaryIndexes").and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or_default();
                let global_indexes = indexes
                    .iter()
                    .map(|index| {
                        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
                        let projection = index.get("Projection");
                        Ok(IndexSpec {
                            name: text(index.get("IndexName"))
                                .ok_or_else(|| unsupported(at("GlobalSecondaryIndexes"), "every index needs an IndexName as a plain string"))?,
                            key_schema: pairs_of(index.get("KeySchema"), "GlobalSecondaryIndexes.KeySchema", "AttributeName", "KeyType")?,
                            projection: text(projection.and_then(|p| p.get("ProjectionType"))).unwrap_or_else(|| "KEYS_ONLY".into()),
                            non_key_attributes: projection
                                .and_then(|p| p.get("NonKeyAttributes"))
                                .and_then(Value::as_sequence)
                                .into_iter()
                                .flatten()
                                .filter_map(|a| text(Some(a)))
                                .collect(),
                        })
                    })
                    .collect::<Result<Vec<_>, TemplateError>>()?;
                let ttl = p.get("TimeToLiveSpecification").filter(|t| t.get("Enabled").and_then(Value::as_bool) == Some(true));
                Ok(TableSpec {
                    attributes: pairs("AttributeDefinitions", "AttributeName", "AttributeType")?,
                    key_schema: pairs("KeySchema", "AttributeName", "KeyType")?,
                    stream_view_type: p.get("StreamSpecification").and_then(|s| s.get("StreamViewType")).and_then(Value::as_str).map(str::to_owned),
                    ttl_attribute: ttl.and_then(|t| t.get("AttributeName")).and_then(Value::as_str).map(str::to_owned),
                    global_indexes,
                    logical_id: id,
                    name,
                })
            })
            .collect()
    }

    /// Every `AWS::Events::EventBus`.
    ///
    /// # Errors
    /// [`TemplateError`] if a `Name` cannot be resolved.
    pub fn buses(&self, r: &Resolver) -> Result<Vec<BusSpec>, TemplateError> {
        self.resources_of("AWS::Events::EventBus")
            .into_iter()
            .map(|(id, p)| {
                if p.get("Name").is_none() {
                    return Err(unsupported(format!("{id}.Properties.Name"), "is required"));
                }
                Ok(BusSpec { name: named(r, &id, &p, &names::BUS)?, logical_id: id })
            })
            .collect()
    }

    /// Every `AWS::Events::Archive`, its `SourceArn` resolved (the bus's ARN must be known).
    ///
    /// # Errors
    /// [`TemplateError`] naming the property that cannot be read: a missing `SourceArn`, a
    /// `RetentionDays` that is not a whole number, an `EventPattern` that is not JSON, an
    /// `ArchiveName` AWS refuses ([`names::ARCHIVE`]).
    pub fn archives(&self, r: &Resolver) -> Result<Vec<ArchiveSpec>, TemplateError> {
        self.resources_of("AWS::Events::Archive")
            .into_iter()
            .map(|(id, p)| {
                let at = |prop: &str| format!("{id}.Properties.{prop}");
                let name = match p.get("ArchiveName") {
                    Some(v) => {
                        let name = r.resolve_string(v, &at("ArchiveName"))?;
                        names::check(&names::ARCHIVE, &name, &at("ArchiveName"))?;
                        name
                    }
                    None => super::physical_name(&r.stack_name, &id, &names::ARCHIVE),
                };
                let source = p.get("SourceArn").ok_or_else(|| unsupported(at("SourceArn"), "is required"))?;
                let source_arn = r.resolve_string(source, &at("SourceArn"))?;
                let pattern = match p.get("EventPattern") {
                    None => None,
                    Some(Value::String(text)) => Some(serde_json::from_str(text)),
                    Some(other) => Some(serde_json::to_value(other)),
                }
                .transpose()
                .map_err(|e| unsupported(at("EventPattern"), format!("is not JSON: {e}")))?;
                let retention_days = match p.get("RetentionDays") {
                    None => 0,
                    Some(v) => {
                        let text = r.resolve_string(v, &at("RetentionDays"))?;
                        text.parse().map_err(|_| unsupported(at("RetentionDays"), format!("{text:?} is not a whole number of days")))?
                    }
                };
                Ok(ArchiveSpec { logical_id: id, name, source_arn, pattern, retention_days })
            })
            .collect()
    }

    /// Every `AWS::S3::Bucket`.
    ///
    /// # Errors
    /// [`TemplateError`] if a `BucketName` cannot be resolved.
    pub fn buckets(&self, r: &Resolver) -> Result<Vec<BucketSpec>, TemplateError> {
        self.resources_of("AWS::S3::Bucket")
            .into_iter()
            .map(|(id, p)| Ok(BucketSpec { name: named(r, &id, &p, &names::BUCKET)?, logical_id: id }))
            .collect()
    }

    /// Every `AWS::SQS::Queue`, with the attributes it is created with locally:
    /// `MessageRetentionPeriod`, `VisibilityTimeout`, `ReceiveMessageWaitTimeSeconds`,
    /// `DelaySeconds`, `MaximumMessageSize` (the emulator refuses a longer body, as SQS does).
    ///
    /// # Errors
    /// [`TemplateError`] if a `QueueName` or one of those attributes cannot be resolved.
    pub fn queues(&self, r: &Resolver) -> Result<Vec<QueueSpec>, TemplateError> {
        self.resources_of("AWS::SQS::Queue")
            .into_iter()
            .map(|(id, p)| {
                let mut name = named(r, &id, &p, &names::QUEUE)?;
                let mut attributes = BTreeMap::new();
                for key in [
                    "MessageRetentionPeriod",
                    "VisibilityTimeout",
                    "ReceiveMessageWaitTimeSeconds",
                    "DelaySeconds",
                    "MaximumMessageSize",
                    "FifoQueue",
                    "ContentBasedDeduplication",
                ] {
                    if let Some(v) = p.get(key) {
                        attributes.insert(key.to_owned(), r.resolve_string(v, &format!("{id}.Properties.{key}"))?);
                    }
                }
                if attributes.get("FifoQueue").is_some_and(|v| v == "true") {
                    name = fifo_name(&id, &p, name)?;
                } else {
                    // SQS takes FifoQueue only as true ("If you don't specify the FifoQueue
                    // attribute, Amazon SQS creates a standard queue", CreateQueue).
                    attributes.remove("FifoQueue");
                    attributes.remove("ContentBasedDeduplication");
                }
                Ok(QueueSpec { logical_id: id, name, attributes, redrive_policy: p.get("RedrivePolicy").cloned() })
            })
            .collect()
    }

    /// Every name the template sets: the name property (`TableName`, `QueueName`, `AlarmName`, …)
    /// of each resource of a type of [`names::RULES`] that has one, resolved by `r` (resources
    /// without one are named by CloudFormation, within the limit). The names are not checked.
    ///
    /// # Errors
    /// [`TemplateError`] naming a name that cannot be resolved.
    pub fn physical_names(&self, r: &Resolver) -> Result<Vec<names::PhysicalName>, TemplateError> {
        let mut found = Vec::new();
        for rule in names::RULES {
            for (id, p) in self.resources_of(rule.resource_type) {
                if let Some(v) = p.get(rule.property) {
                    let name = r.resolve_string(v, &format!("{id}.Properties.{}", rule.property))?;
                    found.push(names::PhysicalName { logical_id: id, rule, name });
                }
            }
        }
        Ok(found)
    }

    /// Checks each function's `FunctionName`, where it has one, against Lambda's limit (the local
    /// runtime names every function as CloudFormation names an unnamed one, but refuses a
    /// template AWS would refuse).
    ///
    /// # Errors
    /// [`TemplateError`] naming a `FunctionName` that cannot be resolved or that Lambda refuses.
    pub fn check_function_names(&self, r: &Resolver) -> Result<(), TemplateError> {
        for rule in [&names::SERVERLESS_FUNCTION, &names::FUNCTION] {
            for (id, p) in self.resources_of(rule.resource_type) {
                if p.get(rule.property).is_some() {
                    named(r, &id, &p, rule)?;
                }
            }
        }
        Ok(())
    }

    /// Every standalone `AWS::Events::Rule` (functions' `EventBridgeRule` events are read with the
    /// functions).
    ///
    /// # Errors
    /// [`TemplateError`] when a rule has no `EventPattern` or a target no `Arn`.
    pub fn standalone_rules(&self) -> Result<Vec<StandaloneRuleSpec>, TemplateError> {
        self.resources_of("AWS::Events::Rule")
            .into_iter()
            .filter(|(_, p)| p.get("ScheduleExpression").is_none() || p.get("EventPattern").is_some())
            .map(|(id, p)| {
                let pattern = p.get("EventPattern").ok_or_else(|| unsupported(format!("{id}.Properties.EventPattern"), "is required locally"))?;
                let pattern = match pattern {
                    Value::String(text) => serde_json::from_str(text),
                    other => serde_json::to_value(other),
                }
                .map_err(|e| unsupported(format!("{id}.Properties.EventPattern"), format!("is not JSON: {e}")))?;
                let targets = rule_targets(&id, &p)?
                    .into_iter()
                    .map(|(i, target_id, arn, t)| {
                        // moto ignores Input and InputPath and fails on some InputTransformers:
                        // the local queue would get a different body than on AWS.
                        if let Some(key) = ["Input", "InputPath", "InputTransformer"].into_iter().find(|k| t.get(*k).is_some()) {
                            return Err(unsupported(
                                format!("{id}.Properties.Targets[{i}].{key}"),
                                "is not played locally (the target gets the whole event)",
                            ));
                        }
                        Ok((target_id, arn))
                    })
                    .collect::<Result<Vec<_>, TemplateError>>()?;
                Ok(StandaloneRuleSpec { logical_id: id, name: p.get("Name").cloned(), bus: p.get("EventBusName").cloned(), pattern, targets })
            })
            .collect()
    }

    /// Every standalone `AWS::Events::Rule` with a `ScheduleExpression` and no `EventPattern`
    /// (read apart from [`Template::standalone_rules`]): the local runtime sends each target its
    /// `Input` every period.
    ///
    /// # Errors
    /// [`TemplateError`] when a target has no `Arn`.
    pub fn schedule_rules(&self) -> Result<Vec<ScheduleRuleSpec>, TemplateError> {
        self.resources_of("AWS::Events::Rule")
            .into_iter()
            .filter(|(_, p)| p.get("EventPattern").is_none())
            .filter_map(|(id, p)| Some((id, p.get("ScheduleExpression")?.clone(), p)))
            .map(|(id, schedule, p)| {
                let targets = rule_targets(&id, &p)?.into_iter().map(|(_, target_id, arn, t)| (target_id, arn, t.get("Input").cloned())).collect();
                Ok(ScheduleRuleSpec { logical_id: id, schedule, targets })
            })
            .collect()
    }
}

/// The physical name of resource `id` (properties `p`) named under `rule`: its name property
/// resolved and checked against the service's limit ([`names::check`]), else the name
/// CloudFormation would generate ([`super::physical_name`]).
///
/// # Errors
/// [`TemplateError`] when the name cannot be resolved or AWS would refuse it.
pub(super) fn named(r: &Resolver, id: &str, p: &serde_yaml_ng::Mapping, rule: &names::NameRule) -> Result<String, TemplateError> {
    match p.get(rule.property) {
        Some(v) => {
            let at = format!("{id}.Properties.{}", rule.property);
            let name = r.resolve_string(v, &at)?;
            names::check(rule, &name, &at)?;
            Ok(name)
        }
        None => Ok(super::physical_name(&r.stack_name, id, rule)),
    }
}

/// The name of FIFO queue `id`: a `QueueName` must end in `.fifo` (SQS API reference,
/// CreateQueue: "The name of a FIFO queue ... must end with the .fifo suffix"); a generated one
/// gets the suffix within SQS's 80 characters, as CloudFormation names an unnamed FIFO queue.
fn fifo_name(id: &str, p: &serde_yaml_ng::Mapping, name: String) -> Result<String, TemplateError> {
    const SUFFIX: &str = ".fifo";
    if name.ends_with(SUFFIX) {
        return Ok(name);
    }
    if p.get("QueueName").is_some() {
        return Err(unsupported(format!("{id}.Properties.QueueName"), format!("{name:?}: a FIFO queue's name must end with .fifo")));
    }
    let room = names::QUEUE.max - SUFFIX.len();
    Ok(name.chars().take(room).collect::<String>() + SUFFIX)
}

/// The `Targets[]` of rule `id` (properties `p`): `(index, Id or target-<index>, Arn, target)`.
fn rule_targets<'a>(id: &str, p: &'a serde_yaml_ng::Mapping) -> Result<Vec<(usize, String, Value, &'a Value)>, TemplateError> {
    p.get("Targets")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let arn = t.get("Arn").cloned().ok_or_else(|| unsupported(format!("{id}.Properties.Targets[{i}].Arn"), "is required"))?;
            let target_id = t.get("Id").and_then(Value::as_str).map_or_else(|| format!("target-{i}"), str::to_owned);
            Ok((i, target_id, arn, t))
        })
        .collect()
}
