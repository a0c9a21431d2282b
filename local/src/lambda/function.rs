//! A function of the template, run as its real binary: a small pool of [`Sandbox`] instances,
//! each the binary as a child process behind its own Lambda Runtime API.
//!
//! An invocation takes an idle instance, or starts a new one when all are busy, up to the
//! function's `ReservedConcurrentExecutions` or [`RuntimeOptions::max_instances`]; beyond that
//! it waits for one to be free (Lambda would throttle). Concurrent invocations therefore really
//! run concurrently, and a warm instance is reused as Lambda reuses execution environments. An
//! instance that timed out, exited or failed its init is dropped; the next invocation starts a
//! fresh one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::lambda::runtime_api::FunctionError;
use crate::lambda::sandbox::{Launch, Sandbox};
use crate::options::RuntimeOptions;
use crate::stats::Stats;
use outbox_template::FunctionSpec;

/// Variables of this process passed on to instances (the basics a process needs, and Rust's
/// logging and backtrace switches); nothing else of its environment leaks in.
pub const PASSED_THROUGH: [&str; 9] = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TERM", "RUST_LOG", "RUST_BACKTRACE"];

/// The result of one invocation: the JSON response, or the error Lambda would report.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `Ok(response)` or `Err` (`errorType`, `errorMessage`).
    pub result: Result<Value, FunctionError>,
}

/// Where a function's instances run.
#[derive(Debug, Clone)]
pub struct Placement {
    /// AWS region (`AWS_REGION`, `AWS_DEFAULT_REGION`).
    pub region: String,
    /// The emulator's endpoint (`AWS_ENDPOINT_URL`), with dummy credentials; `None` leaves
    /// endpoint and credentials unset.
    pub endpoint: Option<String>,
    /// Physical function name (`AWS_LAMBDA_FUNCTION_NAME`), e.g. `<stack>-<LogicalId>`.
    pub function_name: String,
}

/// The environment Lambda gives an instance of `spec`: the basics of this process
/// ([`PASSED_THROUGH`]), the function's resolved `Environment.Variables`, then Lambda's reserved
/// variables (which a template cannot override). `AWS_LAMBDA_RUNTIME_API` is added per
/// instance. Source: <https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime>.
pub fn lambda_environment(spec: &FunctionSpec, template_env: &HashMap<String, String>, placement: &Placement) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> =
        PASSED_THROUGH.iter().filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v))).collect();
    env.extend(template_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let name = &placement.function_name;
    let reserved = [
        ("AWS_LAMBDA_FUNCTION_NAME", name.clone()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", spec.memory_mb.to_string()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}")),
        ("AWS_LAMBDA_LOG_STREAM_NAME", format!("{}/[$LATEST]local", chrono::Utc::now().format("%Y/%m/%d"))),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_owned()),
        ("AWS_REGION", placement.region.clone()),
        ("AWS_DEFAULT_REGION", placement.region.clone()),
        ("TZ", ":UTC".to_owned()),
    ];
    env.extend(reserved.into_iter().map(|(k, v)| (k.to_owned(), v)));
    if let Some(endpoint) = &placement.endpoint {
        env.insert("AWS_ENDPOINT_URL".into(), endpoint.clone());
        env.insert("AWS_ACCESS_KEY_ID".into(), "test".into());
        env.insert("AWS_SECRET_ACCESS_KEY".into(), "test".into());
    }
    if let Some(format) = &spec.log_format {
        env.insert("AWS_LAMBDA_LOG_FORMAT".into(), format.clone());
    }
    if let Some(level) = &spec.log_level {
        env.insert("AWS_LAMBDA_LOG_LEVEL".into(), level.clone());
    }
    env.into_iter().collect()
}

/// One function of the stack, ready to invoke.
pub struct LocalFunction {
    /// Its template entry.
    pub spec: FunctionSpec,
    /// Its ARN on the local stack.
    pub arn: String,
    launch: Launch,
    permits: Semaphore,
    idle: Mutex<Vec<Sandbox>>,
    started: AtomicUsize,
    stopped: AtomicBool,
}

impl std::fmt::Debug for LocalFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFunction")
            .field("logical_id", &self.spec.logical_id)
            .field("program", &self.launch.program)
            .field("arn", &self.arn)
            .finish_non_exhaustive()
    }
}

impl LocalFunction {
    /// The function `spec`, run as `program` with `env` (see [`lambda_environment`]); nothing
    /// starts until the first invocation.
    pub fn new(spec: FunctionSpec, arn: String, program: PathBuf, env: Vec<(String, String)>, stats: Arc<Stats>, options: &RuntimeOptions) -> Self {
        let cap = spec.reserved_concurrency.map(|n| n as usize).unwrap_or(options.max_instances).max(1);
        let launch = Launch {
            logical_id: spec.logical_id.clone(),
            arn: arn.clone(),
            program,
            args: Vec::new(),
            env,
            verbose: options.verbose,
            stats,
            faults: options.faults.clone(),
        };
        Self {
            spec,
            arn,
            launch,
            permits: Semaphore::new(cap),
            idle: Mutex::new(Vec::new()),
            started: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    /// The executable its instances run.
    pub fn program(&self) -> &Path {
        &self.launch.program
    }

    /// Instances started so far (cold starts).
    pub fn instances_started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// Invokes the function with `payload` (JSON text) and waits for its response, bounded by
    /// its `Timeout` (from the moment an instance fetches the event).
    pub async fn invoke(&self, payload: &str) -> Invocation {
        use tracing::Instrument;
        let span = tracing::info_span!("function", name = %self.spec.logical_id);
        let result = self.run(payload).instrument(span).await;
        Invocation { result }
    }

    async fn run(&self, payload: &str) -> Result<Value, FunctionError> {
        let stopping = || FunctionError::new("Runtime.Stopped", format!("{}: the local runtime is stopping", self.spec.logical_id));
        // The semaphore is never closed, so acquiring fails only if it were.
        let Ok(_permit) = self.permits.acquire().await else { return Err(stopping()) };
        if self.stopped.load(Ordering::SeqCst) {
            return Err(stopping());
        }
        let sandbox = match self.take_idle() {
            Some(s) => s,
            None => {
                let sandbox = Sandbox::start(&self.launch).await.map_err(|e| FunctionError::new("Runtime.InvalidEntrypoint", e.to_string()))?;
                self.started.fetch_add(1, Ordering::SeqCst);
                sandbox
            }
        };
        let result = sandbox.invoke(payload.to_owned(), Duration::from_secs(self.spec.timeout_secs)).await;
        if sandbox.is_alive() && !self.stopped.load(Ordering::SeqCst) {
            self.idle().push(sandbox);
        }
        result
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Sandbox>> {
        // A poisoned lock only means a task panicked while holding it; the list stays usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle instance that is still alive (dead ones are dropped on the way).
    fn take_idle(&self) -> Option<Sandbox> {
        let mut idle = self.idle();
        while let Some(s) = idle.pop() {
            if s.is_alive() {
                return Some(s);
            }
        }
        None
    }

    /// Kills the idle instances and refuses new invocations; busy instances are killed when
    /// their invocation ends.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.idle().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec() -> FunctionSpec {
        FunctionSpec {
            logical_id: "EchoFunction".into(),
            binary: "echo".into(),
            code_uri: None,
            timeout_secs: 3,
            memory_mb: 256,
            reserved_concurrency: None,
            log_format: Some("JSON".into()),
            log_level: Some("INFO".into()),
            environment: BTreeMap::new(),
            events: Vec::new(),
            event_invoke: Default::default(),
        }
    }

    /// A Lambda runtime in bash (`/dev/tcp`): fetches events forever, answers each with `{}`
    /// after 300 ms.
    const BASH_RUNTIME: &str = r#"#!/bin/bash
api=$AWS_LAMBDA_RUNTIME_API; host=${api%:*}; port=${api#*:}
while true; do
  exec 3<>/dev/tcp/$host/$port
  printf 'GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: %s\r\n\r\n' "$api" >&3
  id=
  while IFS= read -r line <&3; do
    line=${line%$'\r'}
    [ -z "$line" ] && break
    case "${line,,}" in lambda-runtime-aws-request-id:*) id=${line#*: };; esac
  done
  exec 3<&-
  sleep 0.3
  exec 4<>/dev/tcp/$host/$port
  printf 'POST /2018-06-01/runtime/invocation/%s/response HTTP/1.1\r\nHost: %s\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{"ok":true}' "$id" "$api" >&4
  read -r status <&4
  exec 4<&-
done
"#;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_instances_make_new_ones_up_to_the_cap_and_idle_ones_are_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("outbox-local-pool-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let program = dir.join("bootstrap");
        std::fs::write(&program, BASH_RUNTIME).expect("the script");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let spec = FunctionSpec { reserved_concurrency: Some(2), ..spec() };
        let env = vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())];
        let function = Arc::new(LocalFunction::new(spec, "arn:f".into(), program, env, Arc::new(Stats::default()), &RuntimeOptions::default()));

        let invoke_all = |n: usize| {
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let f = function.clone();
                    tokio::spawn(async move { f.invoke("{}").await.result })
                })
                .collect();
            async move {
                for t in tasks {
                    assert_eq!(t.await.expect("the invocation task"), Ok(serde_json::json!({"ok": true})));
                }
            }
        };
        invoke_all(2).await;
        assert_eq!(function.instances_started(), 2, "two invocations at once ran in two instances");
        invoke_all(1).await;
        assert_eq!(function.instances_started(), 2, "an idle instance is reused (warm start)");
        invoke_all(3).await;
        assert_eq!(function.instances_started(), 2, "ReservedConcurrentExecutions 2 caps the instances; the third waits");
        function.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn instances_get_lambdas_environment_and_nothing_else() {
        let template_env: HashMap<String, String> =
            [("TABLE".to_owned(), "t".to_owned()), ("AWS_LAMBDA_FUNCTION_NAME".to_owned(), "not-allowed".to_owned())].into();
        let placement =
            Placement { region: "eu-west-1".into(), endpoint: Some("http://127.0.0.1:5000".into()), function_name: "s-EchoFunction".into() };
        let env: HashMap<String, String> = lambda_environment(&spec(), &template_env, &placement).into_iter().collect();
        assert_eq!(env["TABLE"], "t");
        assert_eq!(env["AWS_LAMBDA_FUNCTION_NAME"], "s-EchoFunction", "reserved variables win over the template");
        assert_eq!(env["AWS_LAMBDA_FUNCTION_VERSION"], "$LATEST");
        assert_eq!(env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"], "256");
        assert_eq!((env["AWS_REGION"].as_str(), env["AWS_DEFAULT_REGION"].as_str()), ("eu-west-1", "eu-west-1"));
        assert_eq!(env["AWS_ENDPOINT_URL"], "http://127.0.0.1:5000");
        assert_eq!((env["AWS_ACCESS_KEY_ID"].as_str(), env["AWS_SECRET_ACCESS_KEY"].as_str()), ("test", "test"));
        assert_eq!((env["AWS_LAMBDA_LOG_FORMAT"].as_str(), env["AWS_LAMBDA_LOG_LEVEL"].as_str()), ("JSON", "INFO"));
        let allowed: Vec<&str> = PASSED_THROUGH.to_vec();
        for key in env.keys() {
            assert!(
                allowed.contains(&key.as_str()) || key == "TABLE" || key.starts_with("AWS_") || key == "TZ",
                "{key} leaked from this process's environment"
            );
        }
        assert!(!env.contains_key("CARGO_MANIFEST_DIR"), "cargo's variables must not leak");
    }
}
