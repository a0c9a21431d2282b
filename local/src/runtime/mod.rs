//! The local runtime: the stack's functions as their real binaries ([`crate::lambda::function`]), plus
//! the AWS glue that invokes them — the stream event source mapping ([`crate::mappings::stream`]), the SQS
//! event source mapping ([`crate::mappings::sqs`]) and EventBridge rule delivery with Lambda's asynchronous-invocation retries
//! ([`crate::mappings::rule_delivery`]); the HTTP API in front of them ([`http_api`], with its JWT
//! [`authorizer`], whose keys are in [`issuer_keys`]).

pub mod authorizer;
pub mod http_api;
pub mod issuer_keys;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use aws_config::SdkConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lambda::binaries::BinDirs;
use crate::lambda::function::{lambda_environment, LocalFunction, Placement};
use crate::mappings::rule_delivery::RuleDelivery;
use crate::mappings::sqs::SqsMapping;
use crate::mappings::stream::StreamMapping;
use crate::mappings::Glue;
pub use crate::options::RuntimeOptions;
use crate::stats::Stats;
use outbox_template::stack::Stack;
use outbox_template::{FunctionEvent, FunctionSpec};

/// The runtime.
#[derive(Debug)]
pub struct Runtime {
    /// The stack.
    pub stack: Stack,
    /// SDK configuration (endpoint, region, credentials).
    pub sdk: SdkConfig,
    /// Functions by logical id.
    pub functions: HashMap<String, Arc<LocalFunction>>,
    /// What the pipelines and the functions' metrics observed.
    pub stats: Arc<Stats>,
    /// Timing knobs.
    pub options: RuntimeOptions,
    /// The local issuer of the HTTP API's tokens ([`crate::runtime::authorizer`]): its key is kept in
    /// `options.state_dir` when there is one, else new for this runtime.
    pub issuer: Arc<crate::runtime::authorizer::LocalIssuer>,
}

impl Runtime {
    /// Sets up every function of `stack` to run as `<bin_dir>/<Binary>` with the environment the
    /// template gives it (see [`crate::lambda::binaries`] for building them). Instances start on the
    /// first invocation.
    ///
    /// # Errors
    /// A message naming the function whose environment cannot be resolved or whose binary is
    /// missing.
    pub fn new(sdk: SdkConfig, stack: Stack, options: RuntimeOptions, bin_dir: &Path) -> crate::Result<Self> {
        Self::with_functions(sdk, stack, options, &BinDirs::Shared(bin_dir.to_owned()), None)
    }

    /// [`Runtime::new`] with each function's binary in its own directory ([`BinDirs`]: one per
    /// Cargo workspace, as [`crate::lambda::binaries::prepare_functions`] built them), and only
    /// the function `only` when given (`invoke`: the other functions' binaries need not exist).
    ///
    /// # Errors
    /// As [`Runtime::new`]; a message naming a function whose binary's directory is unknown.
    pub fn with_functions(sdk: SdkConfig, stack: Stack, options: RuntimeOptions, bin_dirs: &BinDirs, only: Option<&str>) -> crate::Result<Self> {
        let stats = Arc::new(Stats::default());
        let mut functions = HashMap::new();
        for spec in stack.functions.iter().filter(|f| only.is_none_or(|id| f.logical_id == id)) {
            let bin_dir = bin_dirs.of(&spec.logical_id).ok_or_else(|| {
                crate::Error::invalid(format!("{}: its binary {:?} was not built (no directory for it)", spec.logical_id, spec.binary))
            })?;
            let program = program_of(spec, bin_dir)?;
            let mut template_env = stack.environment(spec)?;
            if let Some(overrides) = options.environment.get(&spec.logical_id) {
                template_env.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let r = &stack.resolver;
            let function_name = outbox_template::physical_name(&r.stack_name, &spec.logical_id, &outbox_template::names::FUNCTION);
            let arn = format!("arn:aws:lambda:{}:{}:function:{function_name}", r.region, r.account);
            let placement = Placement { region: r.region.clone(), endpoint: sdk.endpoint_url().map(str::to_owned), function_name };
            let env = lambda_environment(spec, &template_env, &placement);
            let function = LocalFunction::new(spec.clone(), arn, program, env, stats.clone(), &options);
            functions.insert(spec.logical_id.clone(), Arc::new(function));
        }
        let issuer = match &options.state_dir {
            Some(dir) => crate::runtime::authorizer::LocalIssuer::load_or_create(dir)?,
            None => crate::runtime::authorizer::LocalIssuer::generate()?,
        };
        Ok(Self { stack, sdk, functions, stats, options, issuer: Arc::new(issuer) })
    }

    /// The function with `logical_id`.
    ///
    /// # Errors
    /// A message listing the functions there are.
    pub fn function(&self, logical_id: &str) -> crate::Result<Arc<LocalFunction>> {
        self.functions.get(logical_id).cloned().ok_or_else(|| {
            let mut names: Vec<&str> = self.functions.keys().map(String::as_str).collect();
            names.sort_unstable();
            crate::Error::invalid(format!("no function {logical_id:?} in {}; functions: {}", self.stack.template.path.display(), names.join(", ")))
        })
    }

    /// The bus the consumer `logical_id`'s events come from and the event types (`detail-type`)
    /// delivered to it, whether a rule of its own invokes it or a rule sends them to the queue its
    /// SQS event source mapping reads (the consumer kit's delivery queue):
    /// [`Stack::deliveries_of`](outbox_template::stack::Stack::deliveries_of).
    ///
    /// # Errors
    /// A message when the function has no delivery from a bus, or one cannot be resolved.
    pub fn consumer_delivery(&self, logical_id: &str) -> crate::Result<(String, Vec<String>)> {
        let deliveries = self.stack.deliveries_of(logical_id)?;
        let bus = deliveries.first().map(|d| d.bus_name.clone()).ok_or_else(|| {
            crate::Error::invalid(format!(
                "{logical_id} has no delivery from a bus: no EventBridgeRule event, and no rule of the template targets the queue of its SQS event"
            ))
        })?;
        Ok((bus, deliveries.iter().flat_map(|d| d.detail_types()).collect()))
    }

    /// Starts every stream and SQS event source mapping, rule delivery and schedule rule; they stop when `shutdown`
    /// becomes true.
    ///
    /// # Errors
    /// A message when a mapping cannot be set up (e.g. an unsupported filter).
    pub fn spawn_pipelines(&self, shutdown: watch::Receiver<bool>) -> crate::Result<Vec<JoinHandle<()>>> {
        let glue = Glue { stack: &self.stack, sdk: &self.sdk, stats: &self.stats, options: &self.options };
        let mut tasks = Vec::new();
        for function in self.functions.values() {
            for event in &function.spec.events {
                match event {
                    FunctionEvent::DynamoDb(spec) => {
                        let mapping = StreamMapping::new(glue, function.clone(), spec.clone())?;
                        tasks.push(tokio::spawn(mapping.run(shutdown.clone())));
                    }
                    FunctionEvent::Sqs(spec) => {
                        let mapping = SqsMapping::new(glue, function.clone(), spec.clone())?;
                        tasks.push(tokio::spawn(mapping.run(shutdown.clone())));
                    }
                    _ => {}
                }
            }
        }
        for rule in &self.stack.rules {
            let function = self.function(&rule.function)?;
            let delivery = RuleDelivery::new(glue, function, rule.clone())?;
            tasks.push(tokio::spawn(delivery.run(shutdown.clone())));
        }
        let sqs = aws_sdk_sqs::Client::new(&self.sdk);
        for send in &self.stack.schedules {
            tasks.push(tokio::spawn(crate::mappings::schedule::run(sqs.clone(), send.clone(), shutdown.clone())));
        }
        Ok(tasks)
    }

    /// Stops every function's instances (idle ones now, busy ones when their invocation ends).
    pub fn stop_functions(&self) {
        for function in self.functions.values() {
            function.stop();
        }
    }
}

/// The executable of `spec`: `<bin_dir>/<Binary>`.
///
/// # Errors
/// A message naming the function and its `Binary` when the file is not there.
pub fn program_of(spec: &FunctionSpec, bin_dir: &Path) -> crate::Result<std::path::PathBuf> {
    let program = bin_dir.join(&spec.binary);
    if program.is_file() {
        return Ok(program);
    }
    Err(crate::Error::invalid(format!(
        "{}: its binary {:?} (Metadata.BuildProperties.Binary) is not at {}; build it (`cargo build --bin {}` in its CodeUri) or run without --no-build",
        spec.logical_id,
        spec.binary,
        program.display(),
        spec.binary
    )))
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop_functions();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_an_error_naming_the_function_and_the_binary() {
        let template = outbox_template::Template::parse(
            Path::new("t.yaml"),
            "Resources:\n  ShipOrderFunction:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: ship-order}}\n",
        )
        .expect("a template");
        let spec = &template.functions().expect("its functions")[0];
        let dir = std::env::temp_dir().join(format!("outbox-local-no-binaries-{}", uuid::Uuid::new_v4()));
        let err = program_of(spec, &dir).expect_err("no binary there").to_string();
        assert!(err.starts_with("ShipOrderFunction: its binary \"ship-order\" (Metadata.BuildProperties.Binary) is not at "), "{err}");
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        std::fs::write(dir.join("ship-order"), b"").expect("a file");
        assert_eq!(program_of(spec, &dir).expect("the binary is there"), dir.join("ship-order"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
