//! Reading `template.yaml`: the resources the local stack needs, with CloudFormation intrinsic
//! functions resolved the way CloudFormation resolves them.
//!
//! Supported intrinsics (short and long form): `Ref`, `Fn::GetAtt` (`A.B` and `[A, B]`),
//! `Fn::Sub` (string form, `${Name}`, `${Name.Attr}`, `${!Literal}`). Pseudo parameters:
//! `AWS::StackName`, `AWS::Region`, `AWS::AccountId`, `AWS::Partition`, `AWS::URLSuffix`.
//! Anything else in a place the local runtime reads is an error naming the resource and
//! property — never silently ignored.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

/// A template the local runtime cannot use.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The file could not be read or is not YAML.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// Template path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not valid YAML.
    #[error("{path}:{line}:{column}: not valid YAML: {reason}")]
    Yaml {
        /// Template path.
        path: PathBuf,
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// A value the runtime needs is missing or of an unsupported form.
    #[error("{at}: {reason}")]
    Unsupported {
        /// `Resource.Property.Path`.
        at: String,
        /// Why.
        reason: String,
    },
}

fn unsupported(at: impl Into<String>, reason: impl Into<String>) -> TemplateError {
    TemplateError::Unsupported { at: at.into(), reason: reason.into() }
}

/// A parsed SAM template.
#[derive(Debug, Clone)]
pub struct Template {
    /// Where it was read from.
    pub path: PathBuf,
    resources: Mapping,
    function_globals: Mapping,
    parameters: Mapping,
}

/// A DynamoDB table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Logical id.
    pub logical_id: String,
    /// `TableName`.
    pub name: String,
    /// `(AttributeName, AttributeType)` of `AttributeDefinitions`.
    pub attributes: Vec<(String, String)>,
    /// `(AttributeName, KeyType)` of `KeySchema`.
    pub key_schema: Vec<(String, String)>,
    /// `StreamSpecification.StreamViewType`.
    pub stream_view_type: Option<String>,
    /// `TimeToLiveSpecification.AttributeName`, when enabled.
    pub ttl_attribute: Option<String>,
}

/// An EventBridge bus.
#[derive(Debug, Clone, PartialEq)]
pub struct BusSpec {
    /// Logical id.
    pub logical_id: String,
    /// `Name`.
    pub name: String,
}

/// An S3 bucket (an on-failure destination of a stream mapping, the claim check's payload bucket).
#[derive(Debug, Clone, PartialEq)]
pub struct BucketSpec {
    /// Logical id.
    pub logical_id: String,
    /// `BucketName` (default `<stack>-<logical id>`, lowercased: bucket names are lowercase).
    pub name: String,
}

/// An SQS queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// Logical id.
    pub logical_id: String,
    /// `QueueName`.
    pub name: String,
    /// Attributes the emulator understands (`MessageRetentionPeriod`, `VisibilityTimeout`, …).
    pub attributes: BTreeMap<String, String>,
    /// `RedrivePolicy` (`deadLetterTargetArn`, `maxReceiveCount`), unresolved: the dead-letter
    /// queue's ARN is resolved once every queue of the stack has one.
    pub redrive_policy: Option<Value>,
}

/// A serverless function and the triggers the local runtime plays.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    /// Logical id, e.g. `CreateOrderFunction`.
    pub logical_id: String,
    /// `Metadata.BuildProperties.Binary` (the cargo binary name).
    pub binary: String,
    /// `Timeout`, seconds (Globals merged; default 3 as in Lambda).
    pub timeout_secs: u64,
    /// `MemorySize`, MB (Globals merged; default 128 as in Lambda). Passed to the function as
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`; not enforced locally.
    pub memory_mb: u64,
    /// `ReservedConcurrentExecutions`: the most instances that run at once, when set.
    pub reserved_concurrency: Option<u32>,
    /// `LoggingConfig.LogFormat` (`Text` or `JSON`), passed as `AWS_LAMBDA_LOG_FORMAT`.
    pub log_format: Option<String>,
    /// `LoggingConfig.ApplicationLogLevel`, passed as `AWS_LAMBDA_LOG_LEVEL`.
    pub log_level: Option<String>,
    /// `Environment.Variables` (Globals merged), unresolved.
    pub environment: BTreeMap<String, Value>,
    /// `Events`.
    pub events: Vec<FunctionEvent>,
    /// `EventInvokeConfig` (asynchronous invocation).
    pub event_invoke: EventInvokeSpec,
}

/// Asynchronous-invocation settings (`EventInvokeConfig`), with Lambda's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EventInvokeSpec {
    /// `MaximumRetryAttempts` (0-2, default 2).
    pub max_retry_attempts: u32,
    /// `MaximumEventAgeInSeconds` (60-21600, default 21600).
    pub max_event_age_secs: u64,
    /// `DestinationConfig.OnFailure.Destination`, unresolved.
    pub on_failure: Option<Value>,
}

impl Default for EventInvokeSpec {
    fn default() -> Self {
        Self { max_retry_attempts: 2, max_event_age_secs: 21_600, on_failure: None }
    }
}

/// One entry of a function's `Events`.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionEvent {
    /// `Type: HttpApi`.
    HttpApi {
        /// Event name.
        name: String,
        /// `Path`, e.g. `/orders/{id}`.
        path: String,
        /// `Method`, upper case (`ANY` for any).
        method: String,
        /// Whether the route is under a JWT authorizer: the `ApiId` API's `Auth.DefaultAuthorizer`
        /// names one with a `JwtConfiguration` and the event does not say `Auth: {Authorizer:
        /// NONE}` (`outbox_local::authorizer` plays it).
        jwt: bool,
    },
    /// `Type: DynamoDB` (a stream event source mapping).
    DynamoDb(StreamMappingSpec),
    /// `Type: EventBridgeRule`.
    EventBridgeRule(RuleSpec),
    /// `Type: SQS` (an SQS event source mapping).
    Sqs(SqsMappingSpec),
}

/// An SQS event source mapping (SAM event `Type: SQS`).
#[derive(Debug, Clone, PartialEq)]
pub struct SqsMappingSpec {
    /// Event name.
    pub name: String,
    /// Logical id of the queue whose `Arn` is the `Queue`.
    pub queue_logical_id: String,
    /// `BatchSize` (1 to 10,000, default 10).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds` (0 to 300, default 0): how long Lambda gathers messages
    /// before invoking with fewer than `BatchSize`.
    pub max_batching_window_secs: u64,
    /// `FunctionResponseTypes` contains `ReportBatchItemFailures`.
    pub report_batch_item_failures: bool,
    /// `FilterCriteria.Filters[].Pattern`, parsed.
    pub filters: Vec<serde_json::Value>,
}

/// A standalone `AWS::Events::Rule` (not a function's `EventBridgeRule` event), with the targets
/// the local stack can wire: SQS queues of the template.
#[derive(Debug, Clone, PartialEq)]
pub struct StandaloneRuleSpec {
    /// Logical id (the rule's name on the bus is `<stack>-<logical id>`, unless `Name` is set).
    pub logical_id: String,
    /// `Name`, unresolved.
    pub name: Option<Value>,
    /// `EventBusName`, unresolved (default: the `default` bus).
    pub bus: Option<Value>,
    /// `EventPattern`, as JSON.
    pub pattern: serde_json::Value,
    /// `Targets[]`: `(Id, Arn unresolved)`.
    pub targets: Vec<(String, Value)>,
}

/// A DynamoDB stream event source mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMappingSpec {
    /// Event name.
    pub name: String,
    /// Logical id of the table whose `StreamArn` is the `Stream`.
    pub table_logical_id: String,
    /// `BatchSize` (default 100).
    pub batch_size: usize,
    /// `ParallelizationFactor` (1 to 10, default 1): concurrent batches per shard.
    pub parallelization_factor: usize,
    /// `MaximumRetryAttempts` (default -1: until the record expires).
    pub max_retry_attempts: i64,
    /// `MaximumRecordAgeInSeconds` (default -1: until the record expires, 24 h on a DynamoDB
    /// stream); older records are discarded to the `OnFailure` destination.
    pub max_record_age_secs: i64,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_error: bool,
    /// `FunctionResponseTypes` contains `ReportBatchItemFailures`.
    pub report_batch_item_failures: bool,
    /// `DestinationConfig.OnFailure.Destination`, unresolved.
    pub on_failure: Option<Value>,
    /// `FilterCriteria.Filters[].Pattern`, parsed.
    pub filters: Vec<serde_json::Value>,
}

/// An EventBridge rule that targets a function.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// Event name (SAM names the rule `<FunctionLogicalId><EventName>`).
    pub name: String,
    /// `EventBusName`, unresolved.
    pub bus: Option<Value>,
    /// `Pattern`, as JSON.
    pub pattern: serde_json::Value,
    /// `RetryPolicy.MaximumRetryAttempts` (default 185).
    pub retry_attempts: u32,
    /// `RetryPolicy.MaximumEventAgeInSeconds` (default 86400).
    pub max_event_age_secs: u64,
    /// `DeadLetterConfig.Arn`, unresolved.
    pub dead_letter_arn: Option<Value>,
}

impl Template {
    /// Reads and parses `path`.
    ///
    /// # Errors
    /// [`TemplateError::Read`].
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let read_err = |reason: String| TemplateError::Read { path: path.to_owned(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| read_err(e.to_string()))?;
        Self::parse(path, &text).map_err(|e| match e {
            TemplateError::Read { reason, .. } => read_err(reason),
            other => other,
        })
    }

    /// Parses template `text` (for tests).
    ///
    /// # Errors
    /// [`TemplateError`].
    pub fn parse(path: &Path, text: &str) -> Result<Self, TemplateError> {
        let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| match e.location() {
            Some(at) => {
                // The message may repeat the location; it is said once, first.
                let reason = e.to_string().replacen(&format!(" at line {} column {}", at.line(), at.column()), "", 1);
                TemplateError::Yaml { path: path.to_owned(), line: at.line(), column: at.column(), reason }
            }
            None => TemplateError::Read { path: path.to_owned(), reason: e.to_string() },
        })?;
        let resources = doc
            .get("Resources")
            .and_then(Value::as_mapping)
            .cloned()
            .ok_or_else(|| unsupported("Resources", "the template has no Resources mapping"))?;
        let function_globals = doc.get("Globals").and_then(|g| g.get("Function")).and_then(Value::as_mapping).cloned().unwrap_or_default();
        let parameters = doc.get("Parameters").and_then(Value::as_mapping).cloned().unwrap_or_default();
        Ok(Self { path: path.to_owned(), resources, function_globals, parameters })
    }

    /// `(logical id, Properties)` of every resource of `kind`, in template order.
    pub fn resources_of(&self, kind: &str) -> Vec<(String, Mapping)> {
        self.resources
            .iter()
            .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some(kind))
            .filter_map(|(id, r)| {
                let props = r.get("Properties").and_then(Value::as_mapping).cloned().unwrap_or_default();
                Some((id.as_str()?.to_owned(), props))
            })
            .collect()
    }

    /// The `Type` of resource `logical_id`.
    pub fn resource_type(&self, logical_id: &str) -> Option<&str> {
        self.resources.get(logical_id)?.get("Type")?.as_str()
    }

    /// Every `AWS::DynamoDB::Table`.
    ///
    /// # Errors
    /// [`TemplateError`] naming the property that cannot be read.
    pub fn tables(&self, r: &Resolver) -> Result<Vec<TableSpec>, TemplateError> {
        self.resources_of("AWS::DynamoDB::Table")
            .into_iter()
            .map(|(id, p)| {
                let at = |prop: &str| format!("{id}.Properties.{prop}");
                let name = match p.get("TableName") {
                    Some(v) => r.resolve_string(v, &at("TableName"))?,
                    None => format!("{}-{id}", r.stack_name),
                };
                let pairs = |prop: &str, a: &str, b: &str| -> Result<Vec<(String, String)>, TemplateError> {
                    let seq = p.get(prop).and_then(Value::as_sequence).ok_or_else(|| unsupported(at(prop), "must be a list"))?;
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
                let ttl = p.get("TimeToLiveSpecification").filter(|t| t.get("Enabled").and_then(Value::as_bool) == Some(true));
                Ok(TableSpec {
                    attributes: pairs("AttributeDefinitions", "AttributeName", "AttributeType")?,
                    key_schema: pairs("KeySchema", "AttributeName", "KeyType")?,
                    stream_view_type: p.get("StreamSpecification").and_then(|s| s.get("StreamViewType")).and_then(Value::as_str).map(str::to_owned),
                    ttl_attribute: ttl.and_then(|t| t.get("AttributeName")).and_then(Value::as_str).map(str::to_owned),
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
                let value = p.get("Name").ok_or_else(|| unsupported(format!("{id}.Properties.Name"), "is required"))?;
                Ok(BusSpec { name: r.resolve_string(value, &format!("{id}.Properties.Name"))?, logical_id: id })
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
            .map(|(id, p)| {
                let name = match p.get("BucketName") {
                    Some(v) => r.resolve_string(v, &format!("{id}.Properties.BucketName"))?,
                    None => format!("{}-{id}", r.stack_name).to_ascii_lowercase(),
                };
                Ok(BucketSpec { logical_id: id, name })
            })
            .collect()
    }

    /// Every `AWS::SQS::Queue`.
    ///
    /// # Errors
    /// [`TemplateError`] if a `QueueName` cannot be resolved.
    pub fn queues(&self, r: &Resolver) -> Result<Vec<QueueSpec>, TemplateError> {
        self.resources_of("AWS::SQS::Queue")
            .into_iter()
            .map(|(id, p)| {
                let name = match p.get("QueueName") {
                    Some(v) => r.resolve_string(v, &format!("{id}.Properties.QueueName"))?,
                    None => format!("{}-{id}", r.stack_name),
                };
                let mut attributes = BTreeMap::new();
                for key in ["MessageRetentionPeriod", "VisibilityTimeout", "ReceiveMessageWaitTimeSeconds", "DelaySeconds"] {
                    if let Some(v) = p.get(key) {
                        attributes.insert(key.to_owned(), r.resolve_string(v, &format!("{id}.Properties.{key}"))?);
                    }
                }
                Ok(QueueSpec { logical_id: id, name, attributes, redrive_policy: p.get("RedrivePolicy").cloned() })
            })
            .collect()
    }

    /// Every standalone `AWS::Events::Rule` (functions' `EventBridgeRule` events are read with the
    /// functions).
    ///
    /// # Errors
    /// [`TemplateError`] when a rule has no `EventPattern` or a target no `Arn`.
    pub fn standalone_rules(&self) -> Result<Vec<StandaloneRuleSpec>, TemplateError> {
        self.resources_of("AWS::Events::Rule")
            .into_iter()
            .map(|(id, p)| {
                let pattern = p.get("EventPattern").ok_or_else(|| unsupported(format!("{id}.Properties.EventPattern"), "is required locally"))?;
                let pattern = match pattern {
                    Value::String(text) => serde_json::from_str(text),
                    other => serde_json::to_value(other),
                }
                .map_err(|e| unsupported(format!("{id}.Properties.EventPattern"), format!("is not JSON: {e}")))?;
                let targets = p
                    .get("Targets")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, t)| {
                        let arn = t.get("Arn").cloned().ok_or_else(|| unsupported(format!("{id}.Properties.Targets[{i}].Arn"), "is required"))?;
                        // moto ignores Input and InputPath and fails on some InputTransformers:
                        // the local queue would get a different body than on AWS.
                        if let Some(key) = ["Input", "InputPath", "InputTransformer"].into_iter().find(|k| t.get(*k).is_some()) {
                            return Err(unsupported(
                                format!("{id}.Properties.Targets[{i}].{key}"),
                                "is not played locally (the target gets the whole event)",
                            ));
                        }
                        let target_id = t.get("Id").and_then(Value::as_str).map_or_else(|| format!("target-{i}"), str::to_owned);
                        Ok((target_id, arn))
                    })
                    .collect::<Result<Vec<_>, TemplateError>>()?;
                Ok(StandaloneRuleSpec { logical_id: id, name: p.get("Name").cloned(), bus: p.get("EventBusName").cloned(), pattern, targets })
            })
            .collect()
    }

    /// Each template parameter with its `Default` (what `!Ref <parameter>` gives in a stack
    /// deployed without overrides), in template order; parameters without a default are left out.
    pub fn parameter_defaults(&self) -> Vec<(String, String)> {
        self.parameters.iter().filter_map(|(name, p)| Some((name.as_str()?.to_owned(), scalar(p.get("Default")?)?))).collect()
    }

    /// The logical ids of every `AWS::Serverless::Function`, in template order (those without
    /// a `Binary` included).
    pub fn function_ids(&self) -> Vec<String> {
        self.serverless_functions().map(|(id, _)| id).collect()
    }

    fn serverless_functions(&self) -> impl Iterator<Item = (String, &Value)> {
        self.resources
            .iter()
            .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some("AWS::Serverless::Function"))
            .map(|(id, r)| (id.as_str().unwrap_or_default().to_owned(), r))
    }

    /// Every `AWS::Serverless::Function`, with Globals merged.
    ///
    /// # Errors
    /// [`TemplateError`] naming what cannot be read, or a function without
    /// `Metadata.BuildProperties.Binary` (see [`Template::runnable_functions`] to skip those).
    pub fn functions(&self) -> Result<Vec<FunctionSpec>, TemplateError> {
        let (functions, skipped) = self.runnable_functions()?;
        match skipped.first() {
            Some(id) => Err(no_binary(id)),
            None => Ok(functions),
        }
    }

    /// The functions the local runtime can run (those with `Metadata.BuildProperties.Binary`,
    /// Globals merged), and the logical ids of the others (e.g. a Python function), which it
    /// skips.
    ///
    /// # Errors
    /// [`TemplateError`] naming what cannot be read.
    pub fn runnable_functions(&self) -> Result<(Vec<FunctionSpec>, Vec<String>), TemplateError> {
        let mut skipped = Vec::new();
        let mut functions = Vec::new();
        for (id, resource) in self.serverless_functions() {
            match self.function(id.clone(), resource)? {
                Some(f) => functions.push(f),
                None => skipped.push(id),
            }
        }
        Ok((functions, skipped))
    }

    fn function(&self, id: String, resource: &Value) -> Result<Option<FunctionSpec>, TemplateError> {
        let props = resource.get("Properties").and_then(Value::as_mapping).cloned().unwrap_or_default();
        let get = |key: &str| props.get(key).or_else(|| self.function_globals.get(key));
        let Some(binary) = resource.get("Metadata").and_then(|m| m.get("BuildProperties")).and_then(|b| b.get("Binary")).and_then(Value::as_str)
        else {
            return Ok(None);
        };
        let binary = binary.to_owned();
        let timeout_secs = get("Timeout").and_then(Value::as_u64).unwrap_or(3);
        let memory_mb = get("MemorySize").and_then(Value::as_u64).unwrap_or(128);
        let reserved_concurrency = get("ReservedConcurrentExecutions").and_then(Value::as_u64).map(|n| n.min(u64::from(u32::MAX)) as u32);
        let logging = |key: &str| {
            [props.get("LoggingConfig"), self.function_globals.get("LoggingConfig")]
                .into_iter()
                .flatten()
                .find_map(|c| c.get(key).and_then(Value::as_str))
                .map(str::to_owned)
        };
        let (log_format, log_level) = (logging("LogFormat"), logging("ApplicationLogLevel"));
        let mut environment = BTreeMap::new();
        for source in [self.function_globals.get("Environment"), props.get("Environment")] {
            if let Some(vars) = source.and_then(|e| e.get("Variables")).and_then(Value::as_mapping) {
                for (k, v) in vars {
                    if let Some(k) = k.as_str() {
                        environment.insert(k.to_owned(), v.clone());
                    }
                }
            }
        }
        let mut events = Vec::new();
        if let Some(map) = props.get("Events").and_then(Value::as_mapping) {
            for (name, event) in map {
                let name = name.as_str().unwrap_or_default().to_owned();
                if let Some(e) = parse_event(&id, &name, event, &self.resources)? {
                    events.push(e);
                }
            }
        }
        let mut event_invoke = EventInvokeSpec::default();
        if let Some(cfg) = get("EventInvokeConfig") {
            if let Some(n) = cfg.get("MaximumRetryAttempts").and_then(Value::as_u64) {
                event_invoke.max_retry_attempts = n as u32;
            }
            if let Some(n) = cfg.get("MaximumEventAgeInSeconds").and_then(Value::as_u64) {
                event_invoke.max_event_age_secs = n;
            }
            event_invoke.on_failure = cfg.get("DestinationConfig").and_then(|d| d.get("OnFailure")).and_then(|o| o.get("Destination")).cloned();
        }
        Ok(Some(FunctionSpec {
            logical_id: id,
            binary,
            timeout_secs,
            memory_mb,
            reserved_concurrency,
            log_format,
            log_level,
            environment,
            events,
            event_invoke,
        }))
    }
}

/// The error for function `id` without `Metadata.BuildProperties.Binary`.
pub fn no_binary(id: &str) -> TemplateError {
    unsupported(
        format!("{id}.Metadata.BuildProperties.Binary"),
        format!("is required: the local runtime runs function {id} as the cargo binary named there (as `sam build` with BuildMethod rust-cargolambda does); functions that are not Rust binaries cannot run locally"),
    )
}

/// Whether an `HttpApi` event with properties `props` is under a JWT authorizer (see
/// [`FunctionEvent::HttpApi`]). Only a `!Ref` `ApiId` is followed; the implicit API has no
/// authorizer unless the template's `Globals.HttpApi` (not read here) gives it one.
fn http_event_jwt(at: &str, props: &Value, resources: &Mapping) -> Result<bool, TemplateError> {
    let route_authorizer = props.get("Auth").and_then(|a| a.get("Authorizer")).and_then(Value::as_str);
    if route_authorizer == Some("NONE") {
        return Ok(false);
    }
    let Some(api_id) = props.get("ApiId").and_then(ref_target) else { return Ok(false) };
    let auth = resources.get(api_id.as_str()).and_then(|api| api.get("Properties")).and_then(|p| p.get("Auth"));
    let Some(name) = route_authorizer.or_else(|| auth.and_then(|a| a.get("DefaultAuthorizer")).and_then(Value::as_str)) else { return Ok(false) };
    if name == "NONE" {
        return Ok(false);
    }
    match auth.and_then(|a| a.get("Authorizers")).and_then(|a| a.get(name)) {
        Some(authorizer) if authorizer.get("JwtConfiguration").is_some() => Ok(true),
        _ => Err(unsupported(
            format!("{at}.Auth"),
            format!("authorizer {name:?} is not a JWT authorizer of {api_id}: the local runtime plays JWT authorizers only"),
        )),
    }
}

/// The logical id of a `!Ref X` / `{"Ref": "X"}` value.
fn ref_target(value: &Value) -> Option<String> {
    intrinsic(value, "Ref")?.as_str().map(str::to_owned)
}

fn parse_event(function: &str, name: &str, event: &Value, resources: &Mapping) -> Result<Option<FunctionEvent>, TemplateError> {
    let at = |prop: &str| format!("{function}.Properties.Events.{name}.Properties.{prop}");
    let props = event.get("Properties").cloned().unwrap_or(Value::Null);
    let kind = event.get("Type").and_then(Value::as_str).unwrap_or_default();
    Ok(match kind {
        "HttpApi" => Some(FunctionEvent::HttpApi {
            name: name.to_owned(),
            path: props.get("Path").and_then(Value::as_str).unwrap_or("/{proxy+}").to_owned(),
            method: props.get("Method").and_then(Value::as_str).unwrap_or("ANY").to_ascii_uppercase(),
            jwt: http_event_jwt(&format!("{function}.Properties.Events.{name}.Properties"), &props, resources)?,
        }),
        "DynamoDB" => {
            let stream = props.get("Stream").ok_or_else(|| unsupported(at("Stream"), "is required"))?;
            let table_logical_id = match get_att(stream) {
                Some((table, attr)) if attr == "StreamArn" => table,
                _ => return Err(unsupported(at("Stream"), "must be !GetAtt <Table>.StreamArn")),
            };
            let filters = filter_patterns(&props, &at("FilterCriteria"))?;
            Some(FunctionEvent::DynamoDb(StreamMappingSpec {
                name: name.to_owned(),
                table_logical_id,
                batch_size: props.get("BatchSize").and_then(Value::as_u64).unwrap_or(100) as usize,
                parallelization_factor: props.get("ParallelizationFactor").and_then(Value::as_u64).unwrap_or(1).clamp(1, 10) as usize,
                max_retry_attempts: props.get("MaximumRetryAttempts").and_then(Value::as_i64).unwrap_or(-1),
                max_record_age_secs: props.get("MaximumRecordAgeInSeconds").and_then(Value::as_i64).unwrap_or(-1),
                bisect_on_error: props.get("BisectBatchOnFunctionError").and_then(Value::as_bool).unwrap_or(false),
                report_batch_item_failures: reports_batch_item_failures(&props),
                on_failure: props.get("DestinationConfig").and_then(|d| d.get("OnFailure")).and_then(|o| o.get("Destination")).cloned(),
                filters,
            }))
        }
        "EventBridgeRule" => {
            let pattern = props.get("Pattern").ok_or_else(|| unsupported(at("Pattern"), "is required"))?;
            let pattern = serde_json::to_value(pattern).map_err(|e| unsupported(at("Pattern"), format!("cannot be JSON: {e}")))?;
            let retry = props.get("RetryPolicy");
            Some(FunctionEvent::EventBridgeRule(RuleSpec {
                name: name.to_owned(),
                bus: props.get("EventBusName").cloned(),
                pattern,
                retry_attempts: retry.and_then(|r| r.get("MaximumRetryAttempts")).and_then(Value::as_u64).unwrap_or(185) as u32,
                max_event_age_secs: retry.and_then(|r| r.get("MaximumEventAgeInSeconds")).and_then(Value::as_u64).unwrap_or(86_400),
                dead_letter_arn: props.get("DeadLetterConfig").and_then(|d| d.get("Arn")).cloned(),
            }))
        }
        "SQS" => {
            let queue = props.get("Queue").ok_or_else(|| unsupported(at("Queue"), "is required"))?;
            let queue_logical_id = match get_att(queue) {
                Some((queue, attr)) if attr == "Arn" => queue,
                _ => return Err(unsupported(at("Queue"), "must be !GetAtt <Queue>.Arn (a queue of the template)")),
            };
            Some(FunctionEvent::Sqs(SqsMappingSpec {
                name: name.to_owned(),
                queue_logical_id,
                batch_size: props.get("BatchSize").and_then(Value::as_u64).unwrap_or(10).clamp(1, 10_000) as usize,
                max_batching_window_secs: props.get("MaximumBatchingWindowInSeconds").and_then(Value::as_u64).unwrap_or(0).min(300),
                report_batch_item_failures: reports_batch_item_failures(&props),
                filters: filter_patterns(&props, &at("FilterCriteria"))?,
            }))
        }
        _ => None,
    })
}

/// Whether an event source mapping's `FunctionResponseTypes` has `ReportBatchItemFailures`.
fn reports_batch_item_failures(props: &Value) -> bool {
    props.get("FunctionResponseTypes").and_then(Value::as_sequence).is_some_and(|s| s.iter().any(|t| t.as_str() == Some("ReportBatchItemFailures")))
}

/// An event source mapping's `FilterCriteria.Filters[].Pattern`, parsed; `at` names the property
/// in errors.
fn filter_patterns(props: &Value, at: &str) -> Result<Vec<serde_json::Value>, TemplateError> {
    let Some(filters) = props.get("FilterCriteria").and_then(|f| f.get("Filters")).and_then(Value::as_sequence) else { return Ok(Vec::new()) };
    filters
        .iter()
        .map(|f| {
            let text = f.get("Pattern").and_then(Value::as_str).ok_or_else(|| unsupported(at, "Pattern must be a JSON string"))?;
            serde_json::from_str(text).map_err(|e| unsupported(at, format!("Pattern is not JSON: {e}")))
        })
        .collect()
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `(logical id, attribute)` of a `!GetAtt` in either form.
fn get_att(v: &Value) -> Option<(String, String)> {
    let inner = intrinsic(v, "GetAtt")?;
    match inner {
        Value::String(s) => {
            let (a, b) = s.split_once('.')?;
            Some((a.to_owned(), b.to_owned()))
        }
        Value::Sequence(seq) if seq.len() == 2 => Some((seq[0].as_str()?.to_owned(), seq[1].as_str()?.to_owned())),
        _ => None,
    }
}

/// The argument of intrinsic `name` (`!Name x` or `{"Fn::Name": x}`; `Ref` has no `Fn::`).
fn intrinsic<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Tagged(t) if t.tag == name => Some(&t.value),
        Value::Mapping(m) if m.len() == 1 => {
            let long = if name == "Ref" { "Ref".to_owned() } else { format!("Fn::{name}") };
            m.get(long.as_str())
        }
        _ => None,
    }
}

/// Resolves intrinsic functions against a local stack.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// `AWS::StackName`.
    pub stack_name: String,
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::AccountId`.
    pub account: String,
    refs: HashMap<String, String>,
    attrs: HashMap<(String, String), String>,
}

impl Resolver {
    /// A resolver that knows only the pseudo parameters.
    pub fn new(stack_name: &str, region: &str, account: &str) -> Self {
        Self { stack_name: stack_name.into(), region: region.into(), account: account.into(), refs: HashMap::new(), attrs: HashMap::new() }
    }

    /// Declares what `!Ref logical_id` gives.
    pub fn set_ref(&mut self, logical_id: &str, value: impl Into<String>) {
        self.refs.insert(logical_id.into(), value.into());
    }

    /// Declares what `!GetAtt logical_id.attr` gives.
    pub fn set_attr(&mut self, logical_id: &str, attr: &str, value: impl Into<String>) {
        self.attrs.insert((logical_id.into(), attr.into()), value.into());
    }

    fn pseudo(&self, name: &str) -> Option<String> {
        Some(match name {
            "AWS::StackName" => self.stack_name.clone(),
            "AWS::Region" => self.region.clone(),
            "AWS::AccountId" => self.account.clone(),
            "AWS::Partition" => "aws".into(),
            "AWS::URLSuffix" => "amazonaws.com".into(),
            _ => return None,
        })
    }

    fn reference(&self, name: &str, at: &str) -> Result<String, TemplateError> {
        self.pseudo(name)
            .or_else(|| self.refs.get(name).cloned())
            .ok_or_else(|| unsupported(at, format!("Ref {name}: not a resource the local runtime provisions")))
    }

    fn attribute(&self, id: &str, attr: &str, at: &str) -> Result<String, TemplateError> {
        self.attrs
            .get(&(id.to_owned(), attr.to_owned()))
            .cloned()
            .ok_or_else(|| unsupported(at, format!("GetAtt {id}.{attr}: not an attribute the local runtime knows")))
    }

    /// Resolves `v` to a string; `at` names it in errors.
    ///
    /// # Errors
    /// [`TemplateError::Unsupported`] for unknown references or unsupported intrinsics.
    pub fn resolve_string(&self, v: &Value, at: &str) -> Result<String, TemplateError> {
        if let Some(s) = scalar(v) {
            return Ok(s);
        }
        if let Some(name) = intrinsic(v, "Ref") {
            let name = name.as_str().ok_or_else(|| unsupported(at, "Ref takes a name"))?;
            return self.reference(name, at);
        }
        if intrinsic(v, "GetAtt").is_some() {
            let (id, attr) = get_att(v).ok_or_else(|| unsupported(at, "GetAtt takes Resource.Attribute"))?;
            return self.attribute(&id, &attr, at);
        }
        if let Some(text) = intrinsic(v, "Sub") {
            let text = text.as_str().ok_or_else(|| unsupported(at, "only the string form of Sub is supported"))?;
            return self.substitute(text, at);
        }
        Err(unsupported(at, "expected a string, Ref, GetAtt or Sub"))
    }

    fn substitute(&self, text: &str, at: &str) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or_else(|| unsupported(at, "unclosed ${ in Sub"))?;
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some((id, attr)) = name.split_once('.').filter(|_| !name.starts_with("AWS::")) {
                out.push_str(&self.attribute(id, attr, at)?);
            } else {
                out.push_str(&self.reference(name, at)?);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"
Globals:
  Function:
    Timeout: 30
    MemorySize: 256
    LoggingConfig: {LogFormat: JSON, ApplicationLogLevel: INFO}
    Environment:
      Variables:
        SHARED: one
Resources:
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub ${AWS::StackName}-t
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      StreamSpecification: {StreamViewType: NEW_IMAGE}
      TimeToLiveSpecification: {AttributeName: expires_at, Enabled: true}
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub "${AWS::StackName}-q"
  Fn:
    Type: AWS::Serverless::Function
    Metadata:
      BuildProperties: {Binary: my-bin}
    Properties:
      Timeout: 60
      ReservedConcurrentExecutions: 2
      LoggingConfig: {LogFormat: JSON, ApplicationLogLevel: DEBUG}
      Environment:
        Variables:
          TABLE: !Ref Table
          QUEUE_ARN: !GetAtt Queue.Arn
          LONG: {"Fn::GetAtt": [Queue, Arn]}
          SUB: !Sub "${Table}/${Queue.Arn}/${!Literal}"
      Events:
        S:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt Table.StreamArn
            BatchSize: 7
            MaximumRetryAttempts: 3
            FunctionResponseTypes: [ReportBatchItemFailures]
            FilterCriteria:
              Filters:
                - Pattern: '{"eventName": ["INSERT"]}'
        R:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [a], detail-type: [B]}
            RetryPolicy: {MaximumRetryAttempts: 4}
      EventInvokeConfig:
        MaximumRetryAttempts: 1
"#;

    fn resolver() -> Resolver {
        let mut r = Resolver::new("stack", "us-east-1", "123456789012");
        r.set_ref("Table", "stack-t");
        r.set_attr("Queue", "Arn", "arn:q");
        r
    }

    #[test]
    fn reads_tables_with_stream_and_ttl() {
        let t = Template::parse(Path::new("t.yaml"), T).unwrap();
        let tables = t.tables(&resolver()).unwrap();
        assert_eq!(tables[0].name, "stack-t");
        assert_eq!(tables[0].stream_view_type.as_deref(), Some("NEW_IMAGE"));
        assert_eq!(tables[0].ttl_attribute.as_deref(), Some("expires_at"));
        assert_eq!(t.queues(&resolver()).unwrap()[0].name, "stack-q");
    }

    #[test]
    fn reads_functions_with_globals_events_and_intrinsics() {
        let t = Template::parse(Path::new("t.yaml"), T).unwrap();
        let f = &t.functions().unwrap()[0];
        assert_eq!((f.binary.as_str(), f.timeout_secs, f.memory_mb, f.reserved_concurrency), ("my-bin", 60, 256, Some(2)));
        assert_eq!((f.log_format.as_deref(), f.log_level.as_deref()), (Some("JSON"), Some("DEBUG")), "the function's LoggingConfig wins");
        let r = resolver();
        let env: BTreeMap<_, _> = f.environment.iter().map(|(k, v)| (k.as_str(), r.resolve_string(v, k).unwrap())).collect();
        assert_eq!(env["SHARED"], "one");
        assert_eq!(env["TABLE"], "stack-t");
        assert_eq!(env["QUEUE_ARN"], "arn:q");
        assert_eq!(env["LONG"], "arn:q");
        assert_eq!(env["SUB"], "stack-t/arn:q/${Literal}");
        assert_eq!(f.event_invoke.max_retry_attempts, 1);
        let FunctionEvent::DynamoDb(m) = &f.events[0] else { panic!("{:?}", f.events) };
        assert_eq!((m.table_logical_id.as_str(), m.batch_size, m.max_retry_attempts), ("Table", 7, 3));
        assert!(m.report_batch_item_failures);
        assert_eq!(m.filters[0]["eventName"][0], "INSERT");
        let FunctionEvent::EventBridgeRule(rule) = &f.events[1] else { panic!() };
        assert_eq!(rule.pattern["detail-type"][0], "B");
        assert_eq!(rule.retry_attempts, 4);
    }

    #[test]
    fn reads_sqs_mappings_standalone_rules_and_redrive_policies() {
        let text = r#"
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dead.Arn, maxReceiveCount: 3}
  Dead:
    Type: AWS::SQS::Queue
  ToWork:
    Type: AWS::Events::Rule
    Properties:
      EventPattern: {detail-type: [A]}
      Targets: [{Id: w, Arn: !GetAtt Work.Arn}]
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: b}}
    Properties:
      Events:
        Q:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            MaximumBatchingWindowInSeconds: 2
            FunctionResponseTypes: [ReportBatchItemFailures]
            FilterCriteria: {Filters: [{Pattern: '{"body": {"a": [1]}}'}]}
"#;
        let t = Template::parse(Path::new("t.yaml"), text).unwrap();
        let FunctionEvent::Sqs(m) = &t.functions().unwrap()[0].events[0] else { panic!("an SQS mapping") };
        assert_eq!((m.queue_logical_id.as_str(), m.batch_size, m.max_batching_window_secs, m.report_batch_item_failures), ("Work", 10, 2, true));
        assert_eq!(m.filters[0]["body"]["a"][0], 1);
        let rules = t.standalone_rules().unwrap();
        assert_eq!(
            (rules[0].logical_id.as_str(), rules[0].pattern["detail-type"][0].as_str(), rules[0].targets[0].0.as_str()),
            ("ToWork", Some("A"), "w")
        );
        let queues = t.queues(&resolver()).unwrap();
        let work = queues.iter().find(|q| q.logical_id == "Work").unwrap();
        assert_eq!(work.redrive_policy.as_ref().and_then(|p| p.get("maxReceiveCount")).and_then(Value::as_u64), Some(3));
        let transformed = text.replace("Targets: [{Id: w, Arn: !GetAtt Work.Arn}]", "Targets: [{Id: w, Arn: !GetAtt Work.Arn, InputPath: $.detail}]");
        let err = Template::parse(Path::new("t.yaml"), &transformed).unwrap().standalone_rules().unwrap_err().to_string();
        assert!(err.starts_with("ToWork.Properties.Targets[0].InputPath: is not played locally"), "{err}");
    }

    #[test]
    fn a_function_without_a_binary_is_an_error_naming_it() {
        let text = "Resources:\n  PyFunction:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: python3.13, Handler: app.handler}\n";
        let err = Template::parse(Path::new("t.yaml"), text).unwrap().functions().unwrap_err().to_string();
        assert!(err.starts_with("PyFunction.Metadata.BuildProperties.Binary: is required"), "{err}");
        assert!(err.contains("function PyFunction"), "{err}");
    }

    #[test]
    fn a_template_that_is_not_yaml_is_an_error_with_the_path_line_and_column() {
        let text = "Resources:\n  Fn:\n    Type: AWS::Serverless::Function\n   Properties: {}\n";
        let err = Template::parse(Path::new("/x/template.yaml"), text).unwrap_err().to_string();
        assert!(err.starts_with("/x/template.yaml:4:"), "{err}");
        assert!(err.contains("not valid YAML: did not find expected key, while parsing"), "{err}");
    }

    #[test]
    fn http_routes_under_a_jwt_authorizer_are_known_and_opt_outs_are_not() {
        let text = r#"
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
    Properties:
      Auth:
        DefaultAuthorizer: Jwt
        Authorizers:
          Jwt: {IdentitySource: $request.header.Authorization, JwtConfiguration: {issuer: x, audience: [y]}}
          Custom: {FunctionArn: arn}
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: b}}
    Properties:
      Events:
        Guarded: {Type: HttpApi, Properties: {ApiId: !Ref Api, Path: /a, Method: GET}}
        Open: {Type: HttpApi, Properties: {ApiId: !Ref Api, Path: /b, Method: POST, Auth: {Authorizer: NONE}}}
        Implicit: {Type: HttpApi, Properties: {Path: /c, Method: GET}}
"#;
        let t = Template::parse(Path::new("t.yaml"), text).unwrap();
        let (functions, _) = t.runnable_functions().unwrap();
        let jwt: Vec<(String, bool)> = functions[0]
            .events
            .iter()
            .filter_map(|e| match e {
                FunctionEvent::HttpApi { name, jwt, .. } => Some((name.clone(), *jwt)),
                _ => None,
            })
            .collect();
        assert_eq!(jwt, [("Guarded".to_owned(), true), ("Open".to_owned(), false), ("Implicit".to_owned(), false)]);
        let lambda = text.replace("DefaultAuthorizer: Jwt", "DefaultAuthorizer: Custom");
        let err = Template::parse(Path::new("t.yaml"), &lambda).unwrap().runnable_functions().unwrap_err();
        assert!(err.to_string().contains("JWT authorizers only"), "{err}");
    }

    #[test]
    fn functions_without_a_binary_are_skipped_and_named() {
        let text = "Resources:\n  PyFunction:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: python3.13}\n  RustFunction:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: rust-bin}}\n";
        let t = Template::parse(Path::new("t.yaml"), text).unwrap();
        let (functions, skipped) = t.runnable_functions().unwrap();
        assert_eq!(functions.iter().map(|f| f.logical_id.as_str()).collect::<Vec<_>>(), ["RustFunction"]);
        assert_eq!(skipped, ["PyFunction"]);
        assert_eq!(t.function_ids(), ["PyFunction", "RustFunction"]);
    }

    #[test]
    fn unknown_references_are_errors_that_name_the_place() {
        let err = resolver().resolve_string(&serde_yaml_ng::from_str("!Ref Nope").unwrap(), "X.Env.Y").unwrap_err();
        assert_eq!(err.to_string(), "X.Env.Y: Ref Nope: not a resource the local runtime provisions");
        let err = resolver().resolve_string(&serde_yaml_ng::from_str("!Join [a, [b]]").unwrap(), "X").unwrap_err();
        assert!(err.to_string().contains("expected a string, Ref, GetAtt or Sub"));
    }

    /// The retention rule holds in the project's own template: one parameter sets both
    /// dead-letter queues' retention and every inbox consumer's, and each consumer's resolved
    /// environment passes the check it runs at start.
    #[test]
    fn the_template_states_the_retention_rule_once_and_keeps_it() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml");
        let template = Template::load(&path).unwrap();
        let defaults = template.parameter_defaults();
        let (_, retention) = defaults.iter().find(|(name, _)| name == "DeadLetterRetentionSeconds").expect("the parameter exists");
        let mut r = Resolver::new("stack", "us-east-1", "123456789012");
        for (name, value) in &defaults {
            r.set_ref(name, value.clone());
        }
        let by_ref = |v: &Value| intrinsic(v, "Ref").and_then(Value::as_str) == Some("DeadLetterRetentionSeconds");
        let queues = template.resources_of("AWS::SQS::Queue");
        assert!(queues.iter().any(|(id, _)| id.contains("DeadLetter")));
        let default_retention: u64 = retention.parse().unwrap();
        for (id, properties) in &queues {
            let period = properties.get("MessageRetentionPeriod").unwrap_or_else(|| panic!("{id} states its retention"));
            if id.contains("DeadLetter") {
                assert!(by_ref(period), "{id}.MessageRetentionPeriod must be !Ref DeadLetterRetentionSeconds");
            } else {
                // A work queue (e.g. webhook deliveries) redrives into a dead-letter queue, and SQS
                // keeps a message's original enqueue time there: it must not outlive the rule.
                let seconds: u64 = r.resolve_string(period, id).unwrap().parse().unwrap();
                assert!(seconds <= default_retention, "{id} keeps messages {seconds} s, longer than its dead-letter queue");
            }
        }
        let consumers: Vec<FunctionSpec> = template.functions().unwrap().into_iter().filter(|f| f.environment.contains_key("INBOX_TABLE")).collect();
        assert!(!consumers.is_empty());
        for function in consumers {
            let stated = function.environment.get("DEAD_LETTER_RETENTION_SECONDS").unwrap_or_else(|| panic!("{} gets the rule", function.logical_id));
            assert!(by_ref(stated), "{}: DEAD_LETTER_RETENTION_SECONDS must be !Ref DeadLetterRetentionSeconds", function.logical_id);
            let env: std::collections::HashMap<String, String> =
                function.environment.iter().filter_map(|(k, v)| Some((k.clone(), r.resolve_string(v, k).ok()?))).collect();
            let inbox = outbox_lambda::inbox_retention(&outbox_lambda::Env::from_map(env)).unwrap_or_else(|e| panic!("{}: {e}", function.logical_id));
            assert!(inbox.as_secs() > retention.parse::<u64>().unwrap(), "{}: the inbox outlives the dead-letter queues", function.logical_id);
        }
    }
}
