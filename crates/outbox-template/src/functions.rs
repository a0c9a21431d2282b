//! Serverless functions and the events the local runtime plays for them (`HttpApi`, `DynamoDB`,
//! `EventBridgeRule`, `SQS`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use super::intrinsics::{get_att, ref_target};
use super::specs::{EventInvokeSpec, FunctionEvent, FunctionSpec, RuleSpec, SqsMappingSpec, StreamMappingSpec};
use super::{unsupported, Template, TemplateError};

impl Template {
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
        let get = |key: &str| props.get(key);
        let Some(binary) = resource.get("Metadata").and_then(|m| m.get("BuildProperties")).and_then(|b| b.get("Binary")).and_then(Value::as_str)
        else {
            return Ok(None);
        };
        let binary = binary.to_owned();
        let code_uri = self.code_uri(&id, get("CodeUri"));
        let timeout_secs = get("Timeout").and_then(number).unwrap_or(3);
        let memory_mb = get("MemorySize").and_then(number).unwrap_or(128);
        let reserved_concurrency = get("ReservedConcurrentExecutions").and_then(number).map(|n| n.min(u64::from(u32::MAX)) as u32);
        let logging = |key: &str| props.get("LoggingConfig").and_then(|c| c.get(key)).and_then(Value::as_str).map(str::to_owned);
        let (log_format, log_level) = (logging("LogFormat"), logging("ApplicationLogLevel"));
        let mut environment = BTreeMap::new();
        if let Some(vars) = props.get("Environment").and_then(|e| e.get("Variables")).and_then(Value::as_mapping) {
            for (k, v) in vars {
                if let Some(k) = k.as_str() {
                    environment.insert(k.to_owned(), v.clone());
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
            if let Some(n) = cfg.get("MaximumRetryAttempts").and_then(number) {
                event_invoke.max_retry_attempts = n as u32;
            }
            if let Some(n) = cfg.get("MaximumEventAgeInSeconds").and_then(number) {
                event_invoke.max_event_age_secs = n;
            }
            event_invoke.on_failure = cfg.get("DestinationConfig").and_then(|d| d.get("OnFailure")).and_then(|o| o.get("Destination")).cloned();
        }
        Ok(Some(FunctionSpec {
            logical_id: id,
            binary,
            code_uri,
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

impl Template {
    /// `CodeUri` of function `id` (`value`, absent when `None`) as a directory: relative to the
    /// directory of the template that declares it (the nested application `<App>` of `<App>/<Id>`,
    /// else this template), `.` when absent (SAM CLI's default); `None` for an S3 location.
    fn code_uri(&self, id: &str, value: Option<&Value>) -> Option<PathBuf> {
        let uri = match value {
            None => ".",
            Some(v) => v.as_str().filter(|u| !u.contains("://"))?,
        };
        let declared_in = id
            .rsplit_once('/')
            .and_then(|(app, _)| self.nested_apps().iter().find(|n| n.logical_id == app))
            .map_or(self.path.as_path(), |n| n.template.as_path());
        Some(declared_in.parent().unwrap_or(Path::new("")).join(uri))
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
                batch_size: props.get("BatchSize").and_then(number).unwrap_or(100) as usize,
                parallelization_factor: props.get("ParallelizationFactor").and_then(number).unwrap_or(1).clamp(1, 10) as usize,
                max_retry_attempts: props.get("MaximumRetryAttempts").and_then(signed).unwrap_or(-1),
                max_record_age_secs: props.get("MaximumRecordAgeInSeconds").and_then(signed).unwrap_or(-1),
                bisect_on_error: props.get("BisectBatchOnFunctionError").and_then(boolean).unwrap_or(false),
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
                retry_attempts: retry.and_then(|r| r.get("MaximumRetryAttempts")).and_then(number).unwrap_or(185) as u32,
                max_event_age_secs: retry.and_then(|r| r.get("MaximumEventAgeInSeconds")).and_then(number).unwrap_or(86_400),
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
                batch_size: props.get("BatchSize").and_then(number).unwrap_or(10).clamp(1, 10_000) as usize,
                max_batching_window_secs: props.get("MaximumBatchingWindowInSeconds").and_then(number).unwrap_or(0).min(300),
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

/// A number given as a YAML number or as a string of digits (what a nested application's
/// parameter gives: CloudFormation passes parameters as strings).
fn number(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// [`number`], signed (`MaximumRetryAttempts: -1`).
fn signed(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_str()?.trim().parse().ok())
}

/// A boolean given as a YAML boolean or as `"true"`/`"false"`.
fn boolean(v: &Value) -> Option<bool> {
    v.as_bool().or_else(|| v.as_str()?.trim().parse().ok())
}
