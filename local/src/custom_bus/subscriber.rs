//! A subscriber's configuration, read from `CreateSubscriber` / `UpdateSubscriber` and checked
//! the way the API reference bounds it (RetryPolicy 0-185 attempts, 60-86,400 s; filters;
//! starting position). What the local runtime does not play (targets other than SQS, JSONata
//! transforms or expressions other than the forms [`super::target`] reads) is an
//! `InvalidInputException` naming it, never a silent drop.

use serde_json::{json, Value};

use super::target::Template;
use super::wire::WireError;

/// What a FIFO subscriber's failing delivery holds up. AWS's pages disagree: "Within a FIFO
/// subscriber, an event that cannot be delivered holds up the later events in its own group
/// while other groups continue" (user guide, eb-custom-bus-ordering) is [`FifoBlocking::Group`];
/// the reading where the whole subscriber waits is [`FifoBlocking::Subscriber`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FifoBlocking {
    /// A failing event blocks the later events of its own event group only (default).
    #[default]
    Group,
    /// A failing event blocks every later event of the subscriber.
    Subscriber,
}

/// `Type`: FIFO or UNORDERED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ordering {
    Fifo,
    Unordered,
}

/// `Transformer.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transform {
    /// The event's `Data` as the body.
    Raw,
    /// `{"Data": ..., "Metadata": ..., "SystemMetadata": ...}`.
    WithMetadata,
}

/// One filter: its scope and pattern.
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub(crate) scope: String,
    pub(crate) pattern: Value,
}

/// A subscriber's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) arn: String,
    pub(crate) name: String,
    pub(crate) bus_arn: String,
    pub(crate) description: Option<String>,
    pub(crate) ordering: Ordering,
    pub(crate) target_arn: String,
    pub(crate) role_arn: String,
    pub(crate) group_id: Option<Template>,
    pub(crate) dedup_id: Option<Template>,
    /// `InvokeConfiguration` as given (answered back by `DescribeSubscriber`).
    pub(crate) invoke: Value,
    pub(crate) filters: Vec<Filter>,
    pub(crate) max_retry_attempts: u32,
    pub(crate) max_event_age_s: u64,
    pub(crate) on_failure_arn: Option<String>,
    pub(crate) transform: Transform,
    pub(crate) starting_position: String,
    /// `PointInTimeConfiguration` as given.
    pub(crate) point_in_time: Option<Value>,
    /// `EndPoint`, epoch seconds: no event ingested later is delivered.
    pub(crate) end_point: Option<f64>,
    pub(crate) running: bool,
}

/// `MaxRetryAttempts` when not given (CloudFormation schema's default).
pub(crate) const DEFAULT_MAX_RETRY_ATTEMPTS: u32 = 5;
/// `MaxEventAgeInSeconds` when not given (CloudFormation schema's default).
pub(crate) const DEFAULT_MAX_EVENT_AGE_S: u64 = 300;

fn str_of<'a>(v: &'a Value, field: &str) -> Result<Option<&'a str>, WireError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(WireError::invalid(format!("{field} must be a string"))),
    }
}

/// A required string member.
pub(crate) fn required<'a>(v: &'a Value, field: &str) -> Result<&'a str, WireError> {
    str_of(v, field)?.filter(|s| !s.is_empty()).ok_or_else(|| WireError::invalid(format!("{field} is required")))
}

impl Config {
    /// Reads a `CreateSubscriber` request; `arn` is the ARN the subscriber gets.
    pub(crate) fn from_create(request: &Value, arn: String) -> Result<Self, WireError> {
        let name = required(request, "Name")?.to_owned();
        if name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(WireError::invalid(format!("Name {name:?}: 1-64 letters, digits, '-', '_' or '.'")));
        }
        let bus_arn = required(request, "EventBusArn")?.to_owned();
        let ordering = match str_of(request, "Type")? {
            None | Some("UNORDERED") => Ordering::Unordered,
            Some("FIFO") => Ordering::Fifo,
            Some(other) => return Err(WireError::invalid(format!("Type {other:?}: FIFO or UNORDERED"))),
        };
        let starting_position = str_of(request, "StartingPosition")?.unwrap_or("LATEST").to_owned();
        let (point_in_time, end_point) = match starting_position.as_str() {
            "LATEST" => (None, None),
            "POINT_IN_TIME" => {
                let pit = request
                    .get("PointInTimeConfiguration")
                    .ok_or_else(|| WireError::invalid("StartingPosition POINT_IN_TIME needs a PointInTimeConfiguration"))?;
                let point_type = required(pit, "PointType")?;
                let start = pit.get("StartingPoint").and_then(Value::as_f64);
                match (point_type, start) {
                    ("HORIZON", _) | ("TIMESTAMP", Some(_)) => {}
                    ("TIMESTAMP", None) => return Err(WireError::invalid("PointType TIMESTAMP needs a StartingPoint")),
                    (other, _) => return Err(WireError::invalid(format!("PointType {other:?}: HORIZON or TIMESTAMP"))),
                }
                let end = pit.get("EndPoint").and_then(Value::as_f64);
                if let (Some(s), Some(e)) = (start, end) {
                    if e < s {
                        return Err(WireError::invalid("EndPoint is before StartingPoint"));
                    }
                }
                (Some(pit.clone()), end)
            }
            other => return Err(WireError::invalid(format!("StartingPosition {other:?}: LATEST or POINT_IN_TIME"))),
        };
        let invoke = request.get("InvokeConfiguration").cloned().ok_or_else(|| WireError::invalid("InvokeConfiguration is required"))?;
        let mut config = Self {
            arn,
            name,
            bus_arn,
            description: str_of(request, "Description")?.map(str::to_owned),
            ordering,
            target_arn: String::new(),
            role_arn: String::new(),
            group_id: None,
            dedup_id: None,
            invoke: Value::Null,
            filters: Vec::new(),
            max_retry_attempts: DEFAULT_MAX_RETRY_ATTEMPTS,
            max_event_age_s: DEFAULT_MAX_EVENT_AGE_S,
            on_failure_arn: None,
            transform: Transform::Raw,
            starting_position,
            point_in_time,
            end_point,
            running: true,
        };
        config.set_invoke(&invoke, true)?;
        config.update(request)?;
        Ok(config)
    }

    /// Applies the members an `UpdateSubscriber` (or `CreateSubscriber`) may change: State,
    /// InvokeConfiguration (not its target), FilterConfiguration, Transformer, RetryPolicy,
    /// OnFailureConfiguration, Description. Checked whole before anything changes.
    pub(crate) fn update(&mut self, request: &Value) -> Result<(), WireError> {
        let mut next = self.clone();
        if let Some(state) = str_of(request, "State")? {
            next.running = match state {
                "RUNNING" => true,
                "STOPPED" => false,
                other => return Err(WireError::invalid(format!("State {other:?}: RUNNING or STOPPED"))),
            };
        }
        if let Some(d) = str_of(request, "Description")? {
            next.description = Some(d.to_owned());
        }
        if let Some(invoke) = request.get("InvokeConfiguration") {
            next.set_invoke(invoke, false)?;
        }
        if let Some(fc) = request.get("FilterConfiguration") {
            next.filters = filters(fc)?;
        }
        if let Some(t) = request.get("Transformer") {
            next.transform = match str_of(t, "Type")? {
                None | Some("RAW") => Transform::Raw,
                Some("WITH_METADATA") => Transform::WithMetadata,
                Some("JSONATA") => return Err(WireError::invalid("Transformer JSONATA: the local runtime plays RAW and WITH_METADATA only")),
                Some(other) => return Err(WireError::invalid(format!("Transformer.Type {other:?}: RAW, WITH_METADATA or JSONATA"))),
            };
        }
        if let Some(rp) = request.get("RetryPolicy") {
            if let Some(n) = rp.get("MaxRetryAttempts") {
                next.max_retry_attempts = n
                    .as_u64()
                    .filter(|n| *n <= 185)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| WireError::invalid(format!("RetryPolicy.MaxRetryAttempts {n}: 0-185")))?;
            }
            if let Some(s) = rp.get("MaxEventAgeInSeconds") {
                next.max_event_age_s = s
                    .as_u64()
                    .filter(|s| (60..=86_400).contains(s))
                    .ok_or_else(|| WireError::invalid(format!("RetryPolicy.MaxEventAgeInSeconds {s}: 60-86400")))?;
            }
        }
        if let Some(of) = request.get("OnFailureConfiguration") {
            let arn = required(of, "Arn")?;
            if !arn.starts_with("arn:aws:sqs:") {
                return Err(WireError::invalid(format!("OnFailureConfiguration.Arn {arn}: the local runtime plays SQS queues only")));
            }
            next.on_failure_arn = Some(arn.to_owned());
        }
        *self = next;
        Ok(())
    }

    fn set_invoke(&mut self, invoke: &Value, create: bool) -> Result<(), WireError> {
        if create {
            let target = required(invoke, "TargetArn")?;
            if !target.starts_with("arn:aws:sqs:") {
                return Err(WireError::invalid(format!(
                    "InvokeConfiguration.TargetArn {target}: the local runtime plays SQS targets only (standard and FIFO queues)"
                )));
            }
            self.target_arn = target.to_owned();
        } else if invoke.get("TargetArn").and_then(Value::as_str).is_some_and(|t| t != self.target_arn) {
            return Err(WireError::invalid("UpdateSubscriber cannot change InvokeConfiguration.TargetArn"));
        }
        if let Some(role) = str_of(invoke, "RoleArn")? {
            self.role_arn = role.to_owned();
        } else if create {
            return Err(WireError::invalid("InvokeConfiguration.RoleArn is required"));
        }
        let other: Vec<&str> =
            ["LambdaParameters", "SnsParameters", "KinesisParameters", "StepFunctionsParameters", "HttpParameters", "UniversalTargetParameters"]
                .into_iter()
                .filter(|k| invoke.get(*k).is_some())
                .collect();
        if !other.is_empty() {
            return Err(WireError::invalid(format!("InvokeConfiguration.{}: the local runtime plays SQS targets only", other.join(", "))));
        }
        if let Some(sqs) = invoke.get("SqsParameters") {
            self.group_id = str_of(sqs, "MessageGroupId")?.map(|t| Template::parse(t, "SqsParameters.MessageGroupId")).transpose()?;
            self.dedup_id = str_of(sqs, "MessageDeduplicationId")?.map(|t| Template::parse(t, "SqsParameters.MessageDeduplicationId")).transpose()?;
            for k in ["DelaySeconds", "MessageAttributes", "MessageSystemAttributes"] {
                if sqs.get(k).is_some() {
                    return Err(WireError::invalid(format!("SqsParameters.{k} is not played by the local runtime")));
                }
            }
        }
        if self.target_arn.ends_with(".fifo") && self.group_id.is_none() {
            return Err(WireError::invalid(format!("{}: a FIFO queue target needs SqsParameters.MessageGroupId", self.target_arn)));
        }
        let mut stored = invoke.clone();
        if let Some(o) = stored.as_object_mut() {
            o.insert("TargetArn".into(), json!(self.target_arn));
        }
        self.invoke = stored;
        Ok(())
    }

    /// `DescribeSubscriber`'s answer.
    pub(crate) fn describe(&self, created: f64, modified: f64) -> Value {
        let mut out = json!({
            "SubscriberArn": self.arn,
            "Name": self.name,
            "EventBusArn": self.bus_arn,
            "InvokeConfiguration": self.invoke,
            "Type": if self.ordering == Ordering::Fifo { "FIFO" } else { "UNORDERED" },
            "StartingPosition": self.starting_position,
            "Transformer": {"Type": if self.transform == Transform::Raw { "RAW" } else { "WITH_METADATA" }},
            "RetryPolicy": {"MaxRetryAttempts": self.max_retry_attempts, "MaxEventAgeInSeconds": self.max_event_age_s},
            "State": if self.running { "RUNNING" } else { "STOPPED" },
            "CreationTime": created,
            "LastModifiedTime": modified,
        });
        let o = out.as_object_mut().expect("a JSON object literal"); // cannot fail: built as an object above
        if let Some(d) = &self.description {
            o.insert("Description".into(), json!(d));
        }
        if !self.filters.is_empty() {
            let filters: Vec<Value> = self.filters.iter().map(|f| json!({"Pattern": f.pattern.to_string(), "Scope": f.scope})).collect();
            o.insert("FilterConfiguration".into(), json!({ "Filters": filters }));
        }
        if let Some(arn) = &self.on_failure_arn {
            o.insert("OnFailureConfiguration".into(), json!({ "Arn": arn }));
        }
        if let Some(pit) = &self.point_in_time {
            o.insert("PointInTimeConfiguration".into(), pit.clone());
        }
        out
    }

    /// Whether an event passes every filter (a filter per scope: DATA against the event's
    /// `Data`, the PutEvents envelope; METADATA; SYSTEM_METADATA).
    pub(crate) fn accepts(&self, data: &Value, system_metadata: &Value) -> bool {
        let metadata = json!({});
        self.filters.iter().all(|f| {
            let record = match f.scope.as_str() {
                "DATA" => data,
                "SYSTEM_METADATA" => system_metadata,
                _ => &metadata,
            };
            outbox_cli::filter::matches(&f.pattern, record)
        })
    }
}

fn filters(fc: &Value) -> Result<Vec<Filter>, WireError> {
    let Some(list) = fc.get("Filters") else { return Ok(Vec::new()) };
    let list = list.as_array().ok_or_else(|| WireError::invalid("FilterConfiguration.Filters must be a list"))?;
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let at = format!("FilterConfiguration.Filters[{i}]");
            let text = required(f, "Pattern").map_err(|e| WireError::invalid(format!("{at}: {}", e.message)))?;
            let pattern: Value = serde_json::from_str(text).map_err(|e| WireError::invalid(format!("{at}.Pattern is not JSON: {e}")))?;
            outbox_cli::filter::validate(&pattern).map_err(|e| WireError::invalid(format!("{at}.Pattern: {e}")))?;
            let scope = str_of(f, "Scope")?.unwrap_or("DATA");
            if !matches!(scope, "DATA" | "METADATA" | "SYSTEM_METADATA") {
                return Err(WireError::invalid(format!("{at}.Scope {scope:?}: DATA, METADATA or SYSTEM_METADATA")));
            }
            Ok(Filter { scope: scope.to_owned(), pattern })
        })
        .collect()
}
