//! The template's Custom Event Bus resources in the stack: `AWS::EventsV2::EventBus` (its
//! `EventBusArn`, `!Ref` = the ARN) and `AWS::EventsV2::Subscriber` (its `SubscriberArn`), with
//! each subscriber's properties resolved into the API's request shape (CloudFormation's property
//! names are the API's members: `InvokeConfiguration`, `FilterConfiguration`, `RetryPolicy
//! { MaxRetryAttempts, MaxEventAgeInSeconds }`, `PointInTimeConfiguration`, ...), so a backend
//! creates it with one `CreateSubscriber`. Source: cfn-lint 1.58.0's schemas of
//! `AWS::EventsV2::EventBus` and `AWS::EventsV2::Subscriber`.

use serde_json::{Map, Number, Value as Json};
use serde_yaml_ng::Value;

use super::{Stack, StackError};
use crate::intrinsics::Resolver;
use crate::{names, unsupported, Template, TemplateError};

/// An `AWS::EventsV2::EventBus` of the template.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CustomBusSpec {
    /// Logical id.
    pub logical_id: String,
    /// `Name` (required by CloudFormation).
    pub name: String,
    /// `StorageConfiguration.RetentionPeriodInDays` (1-365; `None`: the service's default).
    pub retention_days: Option<u32>,
}

/// A Custom Event Bus of the stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CustomBusInfo {
    /// The bus as the template has it.
    pub spec: CustomBusSpec,
    /// `EventBusArn` (`arn:aws:events:<region>:<account>:event-busv2/<name>/<suffix>`); on a
    /// looked-up stack ([`super::LookUp`]) the suffix is not known: `None`.
    pub arn: Option<String>,
}

/// An `AWS::EventsV2::Subscriber` of the stack.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct SubscriberInfo {
    /// Logical id (`<App>/<Id>` when nested).
    pub logical_id: String,
    /// `Name`.
    pub name: String,
    /// `EventBusArn`, resolved.
    pub bus_arn: String,
    /// `InvokeConfiguration.TargetArn`, resolved (an SQS queue's ARN for the consumer kit).
    pub target_arn: String,
    /// The target queue's URL when it is a queue of the template.
    pub target_queue_url: Option<String>,
    /// `SubscriberArn` (`None` on a looked-up stack).
    pub arn: Option<String>,
    /// The properties resolved into a `CreateSubscriber` request (`Name`, `EventBusArn`,
    /// `InvokeConfiguration`, `Type`, `FilterConfiguration`, `RetryPolicy`,
    /// `OnFailureConfiguration`, `Transformer`, `StartingPosition`, ...), what a replay
    /// subscriber copies.
    pub request: Json,
}

/// Properties whose values are numbers in the API (CloudFormation may give them as strings).
const NUMERIC: [&str; 5] = ["MaxRetryAttempts", "MaxEventAgeInSeconds", "RetentionPeriodInDays", "StartingPoint", "EndPoint"];

/// Resolves a property tree to JSON: intrinsics to strings, numeric members to numbers.
pub(crate) fn resolve_json(r: &Resolver, v: &Value, key: &str, at: &str) -> Result<Json, TemplateError> {
    Ok(match v {
        Value::Mapping(m) if m.len() != 1 || !m.keys().next().and_then(Value::as_str).is_some_and(|k| k == "Ref" || k.starts_with("Fn::")) => {
            let mut out = Map::new();
            for (k, v) in m {
                let k = k.as_str().ok_or_else(|| unsupported(at, "a key that is not a string"))?;
                out.insert(k.to_owned(), resolve_json(r, v, k, &format!("{at}.{k}"))?);
            }
            Json::Object(out)
        }
        Value::Sequence(items) => {
            Json::Array(items.iter().enumerate().map(|(i, v)| resolve_json(r, v, key, &format!("{at}[{i}]"))).collect::<Result<_, _>>()?)
        }
        Value::Bool(b) => Json::Bool(*b),
        Value::Number(n) => number(&n.to_string(), at)?,
        _ => {
            let s = r.resolve_string(v, at)?;
            if NUMERIC.contains(&key) {
                number(&s, at)?
            } else {
                Json::String(s)
            }
        }
    })
}

fn number(s: &str, at: &str) -> Result<Json, TemplateError> {
    if let Ok(i) = s.parse::<i64>() {
        return Ok(Json::from(i));
    }
    s.parse::<f64>().ok().and_then(Number::from_f64).map(Json::Number).ok_or_else(|| unsupported(at, format!("{s:?} is not a number")))
}

impl Template {
    /// Every `AWS::EventsV2::EventBus`.
    ///
    /// # Errors
    /// [`TemplateError`] naming the property that cannot be read.
    pub fn custom_buses(&self, r: &Resolver) -> Result<Vec<CustomBusSpec>, TemplateError> {
        self.resources_of("AWS::EventsV2::EventBus")
            .into_iter()
            .map(|(id, p)| {
                let name = p.get("Name").ok_or_else(|| unsupported(format!("{id}.Properties.Name"), "is required"))?;
                let name = r.resolve_string(name, &format!("{id}.Properties.Name"))?;
                let at = format!("{id}.Properties.StorageConfiguration.RetentionPeriodInDays");
                let retention_days = p
                    .get("StorageConfiguration")
                    .and_then(|s| s.get("RetentionPeriodInDays"))
                    .map(|d| {
                        let d = r.resolve_string(d, &at)?;
                        d.parse::<u32>().ok().filter(|d| (1..=365).contains(d)).ok_or_else(|| unsupported(&at, format!("{d:?}: 1-365 days")))
                    })
                    .transpose()?;
                Ok(CustomBusSpec { logical_id: id, name, retention_days })
            })
            .collect()
    }
}

impl Stack {
    /// The Custom Event Bus subscriber that delivers to queue `queue` (its ARN, URL, name or
    /// logical id): how an operator's verb finds a consumer's subscriber from its delivery
    /// queue (`outbox replay`). The first one when several do.
    pub fn subscriber_for_queue(&self, queue: &str) -> Option<&SubscriberInfo> {
        let arn = self
            .queues
            .iter()
            .find(|q| q.arn == queue || q.url == queue || q.name == queue || q.logical_id == queue)
            .map_or(queue, |q| q.arn.as_str());
        self.subscribers.iter().find(|s| s.target_arn == arn)
    }

    /// The Custom Event Bus with logical id or name `bus`.
    pub fn custom_bus(&self, bus: &str) -> Option<&CustomBusInfo> {
        self.custom_buses.iter().find(|b| b.spec.logical_id == bus || b.spec.name == bus || b.arn.as_deref() == Some(bus))
    }
}

/// Declares each `AWS::IAM::Role`'s `Arn` and `!Ref` (what a subscriber's `RoleArn` reads); a
/// role whose `RoleName` cannot be resolved is left undeclared (a reference to it is then the
/// error, naming it).
pub(super) fn declare_roles(template: &Template, r: &mut Resolver) {
    for (id, p) in template.resources_of("AWS::IAM::Role") {
        let Ok(name) = crate::read::named(r, &id, &p, &names::ROLE) else { continue };
        let arn = format!("arn:aws:iam::{}:role/{name}", r.account);
        r.set_attr(&id, "Arn", arn);
        r.set_ref(&id, name);
    }
}

/// Every `AWS::EventsV2::Subscriber`, resolved (`Name`, `EventBusArn` and
/// `InvokeConfiguration.TargetArn` required).
pub(super) fn subscribers(template: &Template, r: &Resolver) -> Result<Vec<SubscriberInfo>, StackError> {
    let mut out = Vec::new();
    for (id, p) in template.resources_of("AWS::EventsV2::Subscriber") {
        let mut request = Map::new();
        for (k, v) in &p {
            let Some(k) = k.as_str() else { continue };
            if matches!(k, "Tags") {
                continue;
            }
            request.insert(k.to_owned(), resolve_json(r, v, k, &format!("{id}.Properties.{k}"))?);
        }
        let text = |path: &[&str]| -> Result<String, TemplateError> {
            path.iter()
                .try_fold(&Json::Object(request.clone()), |v, k| v.get(*k))
                .and_then(Json::as_str)
                .map(str::to_owned)
                .ok_or_else(|| unsupported(format!("{id}.Properties.{}", path.join(".")), "is required"))
        };
        let name = text(&["Name"])?;
        let bus_arn = text(&["EventBusArn"])?;
        let target_arn = text(&["InvokeConfiguration", "TargetArn"])?;
        out.push(SubscriberInfo { logical_id: id, name, bus_arn, target_arn, target_queue_url: None, arn: None, request: Json::Object(request) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Backend, Stack, StackError};
    use super::{CustomBusSpec, SubscriberInfo};
    use crate::{ArchiveSpec, BucketSpec, BusSpec, QueueSpec, TableSpec, Template};

    /// A backend that knows the Custom bus's ARN only when `creates` (a provisioner), not on a
    /// look-up.
    struct Fake {
        creates: bool,
    }

    impl Backend for Fake {
        async fn table(&self, _: &TableSpec) -> Result<Option<String>, StackError> {
            Ok(None)
        }
        async fn bus(&self, _: &BusSpec) -> Result<(), StackError> {
            Ok(())
        }
        async fn archive(&self, _: &ArchiveSpec) -> Result<(), StackError> {
            Ok(())
        }
        async fn queue(&self, spec: &QueueSpec) -> Result<String, StackError> {
            Ok(format!("http://q/123456789012/{}", spec.name))
        }
        async fn bucket(&self, _: &BucketSpec) -> Result<(), StackError> {
            Ok(())
        }
        async fn custom_bus(&self, bus: &CustomBusSpec) -> Result<Option<String>, StackError> {
            Ok(self.creates.then(|| format!("arn:aws:events:us-east-1:123456789012:event-busv2/{}/abc", bus.name)))
        }
        async fn subscriber(&self, s: &SubscriberInfo) -> Result<Option<String>, StackError> {
            Ok(self.creates.then(|| format!("arn:sub/{}", s.name)))
        }
    }

    const TEMPLATE: &str = r#"
Resources:
  Bus:
    Type: AWS::EventsV2::EventBus
    Properties: {Name: !Sub "${AWS::StackName}-bus", StorageConfiguration: {RetentionPeriodInDays: 30}}
  Queue:
    Type: AWS::SQS::Queue
    Properties: {QueueName: kit.fifo, FifoQueue: true}
  Role:
    Type: AWS::IAM::Role
    Properties: {AssumeRolePolicyDocument: {}}
  Sub:
    Type: AWS::EventsV2::Subscriber
    Properties:
      Name: kit
      EventBusArn: !GetAtt Bus.EventBusArn
      Type: FIFO
      InvokeConfiguration: {TargetArn: !GetAtt Queue.Arn, RoleArn: !GetAtt Role.Arn}
      RetryPolicy: {MaxRetryAttempts: "7", MaxEventAgeInSeconds: 900}
      PointInTimeConfiguration: {PointType: TIMESTAMP, StartingPoint: 1700000000}
"#;

    #[tokio::test]
    async fn subscribers_resolve_into_the_apis_request_and_are_found_by_their_queue() {
        let template = Template::parse(Path::new("t.yaml"), TEMPLATE).expect("a template");
        let stack = Stack::resolve(template.clone(), "shop", "us-east-1", "123456789012", &Fake { creates: true }).await.expect("resolved");
        let bus_arn = "arn:aws:events:us-east-1:123456789012:event-busv2/shop-bus/abc";
        assert_eq!((stack.custom_buses[0].arn.as_deref(), stack.custom_buses[0].spec.retention_days), (Some(bus_arn), Some(30)));
        let sub = stack.subscriber_for_queue("arn:aws:sqs:us-east-1:123456789012:kit.fifo").expect("by ARN");
        assert_eq!(sub.bus_arn, bus_arn);
        assert_eq!(sub.arn.as_deref(), Some("arn:sub/kit"));
        assert_eq!(sub.target_queue_url.as_deref(), Some("http://q/123456789012/kit.fifo"));
        assert_eq!(sub.request["RetryPolicy"], serde_json::json!({"MaxRetryAttempts": 7, "MaxEventAgeInSeconds": 900}));
        assert_eq!(sub.request["PointInTimeConfiguration"]["StartingPoint"], 1_700_000_000);
        assert!(sub.request["InvokeConfiguration"]["RoleArn"].as_str().is_some_and(|r| r.starts_with("arn:aws:iam::123456789012:role/shop-Role-")));
        assert!(stack.subscriber_for_queue("kit.fifo").is_some() && stack.subscriber_for_queue("Role").is_none());

        // A looked-up stack knows names, not the ARNs' suffixes.
        let looked_up = Stack::resolve(template, "shop", "us-east-1", "123456789012", &Fake { creates: false }).await.expect("resolved");
        assert_eq!(looked_up.custom_buses[0].arn, None);
        assert_eq!(looked_up.subscribers[0].bus_arn, "arn:aws:events:us-east-1:123456789012:event-busv2/shop-bus");
        assert_eq!(looked_up.subscribers[0].arn, None);
    }

    #[test]
    fn overrides_replace_defaults_and_are_checked() {
        let text = "Parameters:\n  Kind: {Type: String, AllowedValues: [A, B], Default: A}\nConditions:\n  IsB: !Equals [!Ref Kind, B]\nResources:\n  Q:\n    Type: AWS::SQS::Queue\n    Condition: IsB\n";
        let path = Path::new("t.yaml");
        assert!(Template::parse(path, text).expect("parsed").resources_of("AWS::SQS::Queue").is_empty());
        let b = Template::parse_with_overrides(path, text, &[("Kind".into(), "B".into())]).expect("parsed");
        assert_eq!(b.resources_of("AWS::SQS::Queue").len(), 1, "the condition sees the override");
        assert_eq!(b.parameter_defaults(), [("Kind".to_owned(), "B".to_owned())]);
        let err = Template::parse_with_overrides(path, text, &[("Kind".into(), "C".into())]).expect_err("not allowed").to_string();
        assert!(err.contains("--parameter-overrides Kind=C") && err.contains("A, B"), "{err}");
    }
}
