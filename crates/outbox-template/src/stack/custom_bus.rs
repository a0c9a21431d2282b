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
