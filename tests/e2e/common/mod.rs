//! Shared fixture of the end-to-end tests: ONE moto emulator per test binary, and one freshly
//! provisioned stack (its own name, `t-<8 hex>`) per test, so tests can run in parallel without
//! sharing a table, queue, bus or rule.
//!
//! Each `#[tokio::test]` has its own tokio runtime, so the emulator is started on a thread of its
//! own (with a runtime that lives as long as the test process) and tests only share its endpoint;
//! SDK clients are made per test. Statics are never dropped, so a small watchdog shell process
//! stops the moto server (by its pid) once the test process is gone.
//!
//! The functions run as their real binaries (the local runtime's instances), built ONCE per test
//! process with one `cargo build --workspace --bin …` at the root ([`bin_dir`]); `OUTBOX_LOCAL_NO_BUILD=1`
//! skips the build when they are prebuilt, `OUTBOX_LOCAL_VERBOSE=1` shows their output.

#![allow(dead_code)] // each test binary uses a part of this module

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::emulator::Emulator;
use outbox_local::lambda::binaries;
use outbox_local::runtime::{Runtime, RuntimeOptions};
use outbox_template::Template;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Longest wait for any condition of a test.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// The project root (where `template.yaml`, `events/` and `scripts/` are).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

static ENDPOINT: OnceLock<String> = OnceLock::new();
static BIN_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The directory of the template's function binaries, built on first use (once per test
/// process; cargo's progress on stderr) unless `OUTBOX_LOCAL_NO_BUILD` is set.
pub(crate) fn bin_dir() -> &'static PathBuf {
    BIN_DIR.get_or_init(|| {
        let template = Template::load(&root().join("template.yaml")).unwrap_or_else(|e| panic!("template.yaml: {e}"));
        let functions = template.functions().unwrap_or_else(|e| panic!("the template's functions: {e}"));
        let skip = std::env::var_os("OUTBOX_LOCAL_NO_BUILD").is_some_and(|v| !v.is_empty() && v != "0");
        binaries::prepare(&root(), functions.iter().map(|f| f.binary.as_str()), skip).unwrap_or_else(|e| panic!("the function binaries: {e}"))
    })
}

/// Endpoint of this test binary's moto emulator, started on first use.
pub(crate) fn endpoint() -> &'static str {
    ENDPOINT.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("moto-emulator".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime for the emulator");
                rt.block_on(async move {
                    match Emulator::start(&root()).await {
                        Ok(emulator) => {
                            let _ = tx.send(Ok((emulator.endpoint.clone(), emulator.moto_endpoint.clone())));
                            // Keep the emulator (and its child process handle) for the life of the process.
                            std::future::pending::<()>().await;
                            drop(emulator);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                        }
                    }
                });
            })
            .expect("spawning the emulator thread");
        let (endpoint, moto_endpoint) =
            rx.recv().expect("the emulator thread ended without an answer").unwrap_or_else(|e| panic!("the moto emulator did not start: {e}"));
        // The watchdog looks for moto's own port; the emulator's endpoint is the in-process front.
        stop_emulator_when_this_process_ends(&moto_endpoint);
        endpoint
    })
}

/// Starts a watchdog that kills the moto server (our child, found by its `-p PORT` argument)
/// once this test process has exited.
fn stop_emulator_when_this_process_ends(endpoint: &str) {
    let Some(port) = endpoint.rsplit(':').next() else { return };
    let me = std::process::id();
    let Some(moto) = child_with_port_argument(me, port) else {
        eprintln!("warning: could not find the moto server process for {endpoint}; it will outlive the tests");
        return;
    };
    let spawned = std::process::Command::new("sh")
        .args(["-c", "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; kill \"$2\" 2>/dev/null", "moto-watchdog"])
        .arg(me.to_string())
        .arg(moto.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("warning: no watchdog for the moto server (pid {moto}): {e}");
    }
}

/// Pid of a child of `parent` whose command line has `-p <port>`.
fn child_with_port_argument(parent: u32, port: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args.windows(2).any(|w| w[0] == b"-p" && w[1] == port.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// A fresh stack name: `t-<8 hex digits>`.
pub(crate) fn stack_name() -> String {
    format!("t-{}", short_id())
}

/// 8 random hex digits.
pub(crate) fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// `template.yaml` and the building blocks it reads (`blocks/…`), copied to a fresh directory
/// with each `(file, from, to)` applied (`from` replaced by `to` in `file`, a path from the root;
/// it must be there), and read from that copy: a test's variant of the sample's settings.
pub(crate) fn sample_template_with(changes: &[(&str, &str, &str)]) -> Template {
    let root = root();
    let sample = Template::load(&root.join("template.yaml")).expect("template.yaml loads");
    let dir = std::env::temp_dir().join(format!("sample-{}", uuid::Uuid::new_v4()));
    let blocks = sample.nested_apps().iter().map(|a| a.template.strip_prefix(&root).expect("a block of the repository").to_owned());
    let mut applied = 0;
    for path in std::iter::once(PathBuf::from("template.yaml")).chain(blocks) {
        let mut text = std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (file, from, to) in changes.iter().filter(|(file, _, _)| path == std::path::Path::new(file)) {
            assert!(text.contains(from), "{file} has no {from:?}");
            text = text.replace(from, to);
            applied += 1;
        }
        std::fs::create_dir_all(dir.join(&path).parent().expect("a directory")).expect("the scratch directory");
        std::fs::write(dir.join(&path), text).expect("the scratch copy");
    }
    assert_eq!(applied, changes.len(), "every change names template.yaml or one of its blocks: {changes:?}");
    let template = Template::load(&dir.join("template.yaml")).unwrap_or_else(|e| panic!("the changed template: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    template
}

/// Short delays, so retries and polls take milliseconds (retry waits compressed explicitly:
/// the runtime's default is Lambda's ~1 min, 2 min); the functions' local settings of
/// `local/env.json` (as `outbox-local` runs them: e.g. the webhook dispatcher's short backoff).
pub(crate) fn fast_options() -> RuntimeOptions {
    let template = Template::load(&root().join("template.yaml")).expect("template.yaml loads");
    let environment =
        outbox_local::lambda::env_vars::load(&root().join("local/env.json"), &template.function_ids()).unwrap_or_else(|e| panic!("{e}"));
    RuntimeOptions {
        stream_poll_interval: Duration::from_millis(50),
        stream_retry_delay: Duration::from_millis(50),
        async_retry_delay: Duration::from_millis(20),
        verbose: std::env::var_os("OUTBOX_LOCAL_VERBOSE").is_some(),
        environment,
        ..RuntimeOptions::default()
    }
}

/// One test's stack on the shared emulator, with the functions' binaries ready to run.
pub(crate) struct Local {
    /// Stack name.
    pub stack_name: String,
    /// The runtime (stack, functions, stats).
    pub runtime: Arc<Runtime>,
    /// Clients on the emulator.
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Local {
    /// Registers a webhook subscriber of `OrderCreated` in the stack's subscriber table (the
    /// `PutItem` docs/webhooks.md's "Adding a subscriber" gives): `url`, its secret `secret_name`.
    pub(crate) async fn add_webhook_subscriber(&self, id: &str, url: &str, secret_name: &str) {
        let table = self.env_of("Webhooks/WebhookDispatcherFunction")["WEBHOOK_SUBSCRIBERS_TABLE"].clone();
        self.dynamodb
            .put_item()
            .table_name(table)
            .item("id", AttributeValue::S(id.into()))
            .item("url", AttributeValue::S(url.into()))
            .item("event_types", AttributeValue::L(vec![AttributeValue::S("OrderCreated".into())]))
            .item("secret_id", AttributeValue::S(secret_name.into()))
            .item("enabled", AttributeValue::Bool(true))
            .send()
            .await
            .expect("PutItem subscriber");
    }

    /// Provisions the template as a fresh stack on the emulator and builds its functions.
    pub(crate) async fn start() -> Self {
        let template = Template::load(&root().join("template.yaml")).expect("template.yaml loads");
        Self::start_with(template, endpoint(), fast_options(), None).await
    }

    /// [`Local::start`] with a template of the test's own, `endpoint` in place of the emulator's
    /// (e.g. a proxy in front of it), `options`, and the stack `stack_name` when given (an
    /// existing stack: a second runtime on it, as after a restart).
    pub(crate) async fn start_with(template: Template, endpoint: &str, options: RuntimeOptions, stack_name: Option<String>) -> Self {
        let target = Target { endpoint: Some(endpoint.to_owned()), region: "us-east-1".into() };
        let sdk = sdk_config(&target).await;
        let stack_name = stack_name.unwrap_or_else(self::stack_name);
        let stack = outbox_local::provision::provision(&sdk, template, &stack_name, EMULATOR_ACCOUNT)
            .await
            .unwrap_or_else(|e| panic!("provisioning stack {stack_name}: {e}"));
        let runtime = Runtime::new(sdk, stack, options, bin_dir()).unwrap_or_else(|e| panic!("setting up the functions: {e}"));
        let (stop, _) = watch::channel(false);
        Self {
            stack_name,
            dynamodb: aws_sdk_dynamodb::Client::new(&runtime.sdk),
            sqs: aws_sdk_sqs::Client::new(&runtime.sdk),
            events: aws_sdk_eventbridge::Client::new(&runtime.sdk),
            runtime: Arc::new(runtime),
            stop,
            tasks: Vec::new(),
        }
    }

    /// A receiver of the shutdown signal (for the HTTP API, pipelines, demo).
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Starts the stream mapping(s) and rule delivery.
    pub(crate) fn spawn_pipelines(&mut self) {
        let tasks = self.runtime.spawn_pipelines(self.stop.subscribe()).unwrap_or_else(|e| panic!("spawn_pipelines: {e}"));
        self.tasks.extend(tasks);
    }

    /// Serves the HTTP API on a free loopback port; returns its address.
    pub(crate) async fn serve_http(&mut self) -> SocketAddr {
        let (addr, task) = outbox_local::runtime::http_api::serve(&self.runtime, SocketAddr::from(([127, 0, 0, 1], 0)), self.stop.subscribe())
            .await
            .expect("the HTTP API binds a loopback port");
        self.tasks.push(task);
        addr
    }

    /// A token of the runtime's local issuer for `sub` (the HTTP API's JWT authorizer accepts it).
    pub(crate) fn token(&self, sub: &str) -> String {
        self.runtime.issuer.token(sub, &[], 3600)
    }

    /// Stops the pipelines and the HTTP API.
    pub(crate) async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    /// A function's resolved `Environment.Variables`.
    pub(crate) fn env_of(&self, logical_id: &str) -> HashMap<String, String> {
        let function = self.runtime.function(logical_id).unwrap_or_else(|e| panic!("{e}"));
        self.runtime.stack.environment(&function.spec).unwrap_or_else(|e| panic!("environment of {logical_id}: {e}"))
    }

    /// Physical name of the table `logical_id`.
    pub(crate) fn table(&self, logical_id: &str) -> String {
        self.runtime.stack.table(logical_id).unwrap_or_else(|| panic!("no table {logical_id} in the stack")).name.clone()
    }

    /// Every item of `table` (consistent scan).
    pub(crate) async fn scan(&self, table: &str) -> Vec<HashMap<String, AttributeValue>> {
        let mut items = Vec::new();
        let mut pages = self.dynamodb.scan().table_name(table).consistent_read(true).into_paginator().items().send();
        while let Some(item) = pages.next().await {
            items.push(item.unwrap_or_else(|e| panic!("Scan {table}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e))));
        }
        items
    }

    /// A spy on the bus `bus`: a fresh queue `<stack>-spy` and a rule `{"source": [source]}`
    /// targeting it; returns the queue URL. Tests use a source of their own, so no consumer rule
    /// of the template matches what they publish.
    pub(crate) async fn spy_on_bus(&self, bus: &str, source: &str) -> String {
        let name = format!("{}-spy", self.stack_name);
        let url = self.sqs.create_queue().queue_name(&name).send().await.expect("CreateQueue spy").queue_url.expect("a queue URL");
        let arn = self
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("GetQueueAttributes spy")
            .attributes
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn).cloned())
            .expect("the spy queue's ARN");
        let pattern = serde_json::json!({ "source": [source] }).to_string();
        self.events.put_rule().name(&name).event_bus_name(bus).event_pattern(pattern).send().await.expect("PutRule spy");
        let target = aws_sdk_eventbridge::types::Target::builder().id("spy").arn(arn).build().expect("a target");
        self.events.put_targets().rule(&name).event_bus_name(bus).targets(target).send().await.expect("PutTargets spy");
        url
    }

    /// Items of `table` with partition key `pk` = `value` (consistent query).
    pub(crate) async fn query_pk(&self, table: &str, value: &str) -> Vec<HashMap<String, AttributeValue>> {
        self.dynamodb
            .query()
            .table_name(table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S(value.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .unwrap_or_else(|e| panic!("Query {table} pk={value}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))
            .items
            .unwrap_or_default()
    }
}

/// A string attribute of an item, or "".
pub(crate) fn s<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str).unwrap_or("")
}

/// A bounded wait: `tick` sleeps briefly, or panics saying what was not reached once the time
/// is up. Never used to assert timings, only to wait for conditions.
pub(crate) struct Deadline {
    what: String,
    until: Instant,
}

impl Deadline {
    /// Waits at most [`WAIT`] for `what`.
    pub(crate) fn new(what: impl Into<String>) -> Self {
        Self { what: what.into(), until: Instant::now() + WAIT }
    }

    /// Sleeps 50 ms; panics with `what` and `state` when the deadline has passed.
    pub(crate) async fn tick(&self, state: impl FnOnce() -> String) {
        if Instant::now() > self.until {
            panic!("not reached within {} s: {} (last seen: {})", WAIT.as_secs(), self.what, state());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every violation of `detail` against `schemas/<event_type>.v<version>.json` (JSON Schema
/// 2020-12), as messages naming the place.
pub(crate) fn schema_violations(event_type: &str, version: u64, detail: &serde_json::Value) -> Vec<String> {
    let path = root().join(format!("schemas/{event_type}.v{version}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let validator = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("schema {event_type}.v{version}: {e}"));
    validator.iter_errors(detail).map(|e| format!("{} at {}", e, e.instance_path())).collect()
}
