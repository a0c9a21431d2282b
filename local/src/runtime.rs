//! The local runtime: the stack's functions in-process, plus the AWS glue that invokes them —
//! the stream event source mapping ([`crate::esm`]) and EventBridge rule delivery with Lambda's
//! asynchronous-invocation retries ([`crate::delivery`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::delivery::RuleDelivery;
use crate::esm::StreamMapping;
use crate::functions::{Handler, Invocation};
use crate::stack::Stack;
use crate::stats::Stats;
use crate::template::{FunctionEvent, FunctionSpec};

/// Timing knobs of the local glue. AWS's own values are in the comments; the local defaults
/// are compressed so a demo finishes in seconds.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Wait between polls of an idle stream (Lambda polls each shard about 4 times a second).
    pub stream_poll_interval: Duration,
    /// Wait before retrying a failed stream batch.
    pub stream_retry_delay: Duration,
    /// Wait before the n-th retry of a failed asynchronous invocation is `n ×` this
    /// (Lambda waits about 1 minute, then 2 minutes).
    pub async_retry_delay: Duration,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            stream_poll_interval: Duration::from_millis(100),
            stream_retry_delay: Duration::from_millis(200),
            async_retry_delay: Duration::from_millis(200),
        }
    }
}

/// One function of the stack, ready to invoke.
#[derive(Debug)]
pub struct LocalFunction {
    /// Its template entry.
    pub spec: FunctionSpec,
    /// Its handler.
    pub handler: Handler,
    /// Its ARN on the local stack.
    pub arn: String,
}

impl LocalFunction {
    /// Invokes the function with `payload` (JSON text), its timeout as the deadline.
    pub async fn invoke(&self, payload: &str) -> Invocation {
        use tracing::Instrument;
        let span = tracing::info_span!("function", name = %self.spec.logical_id);
        self.handler.invoke(payload, &self.arn, Duration::from_secs(self.spec.timeout_secs)).instrument(span).await
    }
}

/// The runtime.
#[derive(Debug)]
pub struct Runtime {
    /// The stack.
    pub stack: Stack,
    /// SDK configuration (endpoint, region, credentials).
    pub sdk: SdkConfig,
    /// Functions by logical id.
    pub functions: HashMap<String, Arc<LocalFunction>>,
    /// What the pipelines observed.
    pub stats: Arc<Stats>,
    /// Timing knobs.
    pub options: RuntimeOptions,
}

impl Runtime {
    /// Builds every function of `stack` with the environment the template gives it.
    ///
    /// # Errors
    /// A message naming the function whose environment or handler cannot be built.
    pub fn new(sdk: SdkConfig, stack: Stack, options: RuntimeOptions) -> Result<Self, String> {
        let mut functions = HashMap::new();
        for spec in &stack.functions {
            let env = stack.environment(spec).map_err(|e| e.to_string())?;
            let handler = Handler::build(spec, &sdk, env)?;
            let arn = format!(
                "arn:aws:lambda:{}:{}:function:{}-{}",
                stack.resolver.region, stack.resolver.account, stack.resolver.stack_name, spec.logical_id
            );
            functions.insert(spec.logical_id.clone(), Arc::new(LocalFunction { spec: spec.clone(), handler, arn }));
        }
        Ok(Self { stack, sdk, functions, stats: Arc::new(Stats::default()), options })
    }

    /// The function with `logical_id`.
    ///
    /// # Errors
    /// A message listing the functions there are.
    pub fn function(&self, logical_id: &str) -> Result<Arc<LocalFunction>, String> {
        self.functions.get(logical_id).cloned().ok_or_else(|| {
            let mut names: Vec<&str> = self.functions.keys().map(String::as_str).collect();
            names.sort_unstable();
            format!("no function {logical_id:?} in {}; functions: {}", self.stack.template.path.display(), names.join(", "))
        })
    }

    /// Starts every stream event source mapping and rule delivery; they stop when `shutdown`
    /// becomes true.
    ///
    /// # Errors
    /// A message when a mapping cannot be set up (e.g. an unsupported filter).
    pub fn spawn_pipelines(&self, shutdown: watch::Receiver<bool>) -> Result<Vec<JoinHandle<()>>, String> {
        let mut tasks = Vec::new();
        for function in self.functions.values() {
            for event in &function.spec.events {
                if let FunctionEvent::DynamoDb(spec) = event {
                    let mapping = StreamMapping::new(self, function.clone(), spec.clone())?;
                    tasks.push(tokio::spawn(mapping.run(shutdown.clone())));
                }
            }
        }
        for rule in &self.stack.rules {
            let function = self.function(&rule.function)?;
            let delivery = RuleDelivery::new(self, function, rule.clone())?;
            tasks.push(tokio::spawn(delivery.run(shutdown.clone())));
        }
        Ok(tasks)
    }

    /// URL of the template queue with `arn` (an on-failure destination).
    ///
    /// # Errors
    /// A message when `arn` is not a queue of the stack (only SQS destinations run locally).
    pub fn destination_url(&self, value: &serde_yaml_ng::Value, at: &str) -> Result<String, String> {
        let arn = self.stack.resolver.resolve_string(value, at).map_err(|e| e.to_string())?;
        self.stack
            .queue_by_arn(&arn)
            .map(|q| q.url.clone())
            .ok_or_else(|| format!("{at}: {arn} is not an SQS queue of the template (only SQS destinations run locally)"))
    }
}
