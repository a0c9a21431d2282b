//! Per-function cost on the moto emulator (prints figures; asserts nothing).
//!
//! ```text
//! cargo bench -p outbox-pipeline-tests --bench functions                  # 5 runs
//! cargo bench -p outbox-pipeline-tests --bench functions -- --runs 9 --bootstrap target/lambda
//! ```
//!
//! The relay (`outbox_lambda::relay::RelayFunction`) and the inventory consumer
//! (`orders_app::inventory::InventoryConsumer`) run IN this process, built from the template's
//! environment as their `main` builds them, against a moto emulator this process starts and
//! provisions from `template.yaml`. Every run sends the same inputs (fresh ids):
//! * relay: 1,000 outbox INSERT stream records in 10 invocations of 100 (the mapping's
//!   `BatchSize`), payloads of ~200 B and ~50 KB, to a source no rule matches;
//! * consumer: 1,000 `OrderCreated` deliveries, 700 distinct events and 300 duplicates (a second
//!   delivery of an event with a new envelope id), two order lines each, one at a time.
//!
//! Reported per workload, min / median / max over the runs:
//! * handler CPU per 1,000 events: this process's user + system CPU (`getrusage(RUSAGE_SELF)`)
//!   around the handler calls only; the emulator is another process, so its CPU is not in it;
//! * AWS calls per event by operation, counted by an HTTP client wrapped around the SDK's
//!   default one (by the `X-Amz-Target` header of each request, retries included);
//! * handler CPU per AWS call.
//!
//! With `--bootstrap DIR` (the output of `cargo lambda build --release`: `DIR/<binary>/bootstrap`)
//! it also starts the relay's bootstrap binary the way Lambda does, through a Lambda Runtime API
//! served by `outbox-local`, and reports process start → first response (one stream record, one
//! `PutEvents`), the process's CPU time until then and its peak RSS (`VmHWM`) after that first
//! invocation, min / median / max over the runs (one cold start per run).
//!
//! `--endpoint URL` uses a running emulator (e.g. behind a proxy that delays its answers) instead
//! of starting one; `--only relay|consumer` runs one workload.
//!
//! `--process PROGRAM` (the relay's release binary, e.g. `target/release/outbox-relay` or
//! `target/lambda/outbox-relay/bootstrap`) measures instead what is deployed: the program as a
//! whole process through a Lambda Runtime API, logs on at the template's level, against a
//! stand-in `PutEvents` with 0, 10, 30 and 100 ms added latency. It prints events/s per shard
//! for three mixes of aggregates (order on the bus checked) and, at 0 ms, the process's CPU per
//! `PutEvents` call and its log bytes per event. No emulator is started.
//!
//! `--flavor current|multi` picks the tokio runtime the handlers run on (default `current`, the
//! relay's and the consumer's `#[tokio::main(flavor = "current_thread")]`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::shared::IntoShared;
use lambda_runtime::{Context, LambdaEvent};
use orders_app::inventory::InventoryConsumer;
use outbox::relay::stream::StreamBatch;
use outbox_lambda::relay::RelayFunction;
use outbox_lambda::Env;
use outbox_local::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::emulator::Emulator;
use outbox_local::lambda::function::{lambda_environment, LocalFunction, Placement};
use outbox_local::options::RuntimeOptions;
use outbox_local::stack::{Mode, Stack};
use outbox_local::stats::Stats;
use outbox_local::template::Template;
use serde_json::{json, Value};

const EVENTS: usize = 1000;
const RELAY_BATCH: usize = 100;
const RELAY: &str = "Relay/RelayFunction";
const CONSUMER: &str = "ReserveInventoryFunction";

/// AWS calls by operation, counted under the SDK.
#[derive(Debug, Clone, Default)]
struct Calls(Arc<Mutex<BTreeMap<String, usize>>>);

impl Calls {
    fn take(&self) -> BTreeMap<String, usize> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The SDK's default HTTPS client, counting requests by `X-Amz-Target` (`AWSEvents.PutEvents`,
/// `DynamoDB_20120810.TransactWriteItems`, `AmazonSQS.SendMessage`: the JSON protocols' operation).
#[derive(Debug, Clone)]
struct CountingClient {
    inner: SharedHttpClient,
    calls: Calls,
}

#[derive(Debug)]
struct CountingConnector {
    inner: SharedHttpConnector,
    calls: Calls,
}

impl HttpClient for CountingClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        CountingConnector { inner: self.inner.http_connector(settings, components), calls: self.calls.clone() }.into_shared()
    }
}

impl HttpConnector for CountingConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request.headers().get("x-amz-target").and_then(|t| t.rsplit('.').next()).unwrap_or("(other)").to_owned();
        *self.calls.0.lock().unwrap_or_else(|p| p.into_inner()).entry(target).or_default() += 1;
        self.inner.call(request)
    }
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `RELAY_BATCH` outbox INSERT records from `first` on: a stream event's JSON.
fn stream_event(run: usize, first: usize, payload_bytes: usize) -> Value {
    let records: Vec<Value> = (first..first + RELAY_BATCH)
        .map(|i| {
            let item = outbox::testing::sample_item(&format!("bench-{run}-{payload_bytes}-{i}"), &format!("bench-{run}-{i}"), payload_bytes);
            outbox::testing::insert_record(&item, i as u64 + 1).unwrap_or_else(|e| panic!("an outbox item converts: {e}"))
        })
        .collect();
    json!({ "Records": records })
}

/// [`stream_event`] decoded from its text, as the relay function reads Lambda's payload.
fn stream_batch(run: usize, first: usize, payload_bytes: usize) -> StreamBatch {
    serde_json::from_str(&stream_event(run, first, payload_bytes).to_string()).unwrap_or_else(|e| panic!("a stream event: {e}"))
}

/// The consumer's deliveries of run `run`: blocks of 10 = 7 new events + second deliveries of
/// the block's first 3.
fn deliveries(run: usize) -> Vec<String> {
    let event = |n: usize, envelope: &str| {
        let (event_id, order_id) = (format!("bench-{run}-e{n}"), format!("bench-{run}-o{n}"));
        json!({
            "version": "0", "id": format!("{envelope}-{event_id}"), "detail-type": "OrderCreated", "source": "example.orders",
            "account": EMULATOR_ACCOUNT, "time": "2026-12-01T06:00:00Z", "region": "us-east-1", "resources": [],
            "detail": {
                "metadata": {"id": event_id, "type": "OrderCreated", "version": 1, "source": "example.orders",
                             "time": "2026-12-01T06:00:00.000Z", "subject": order_id, "aggregate_type": "Order",
                             "sequence": 1, "correlation_id": "bench"},
                "data": {"order_id": order_id, "customer_id": "c-1", "currency": "EUR",
                         "lines": [{"sku": "BENCH-A", "quantity": 1, "unit_price": "1.00"}, {"sku": "BENCH-B", "quantity": 2, "unit_price": "2.50"}]}
            }
        })
        .to_string()
    };
    let mut out = Vec::with_capacity(EVENTS);
    for block in 0..EVENTS / 10 {
        let first = block * 7;
        out.extend((first..first + 7).map(|n| event(n, "first")));
        out.extend((first..first + 3).map(|n| event(n, "again")));
    }
    out
}

#[derive(Debug, Default)]
struct Figures {
    cpu_ms: Vec<f64>,
    calls: BTreeMap<String, usize>,
    total_calls: usize,
}

impl Figures {
    fn add(&mut self, cpu: Duration, calls: BTreeMap<String, usize>) {
        self.cpu_ms.push(cpu.as_secs_f64() * 1e3);
        self.total_calls = calls.values().sum();
        self.calls = calls;
    }

    fn print(&mut self, label: &str) {
        self.cpu_ms.sort_by(f64::total_cmp);
        let (min, med, max) = (self.cpu_ms[0], self.cpu_ms[self.cpu_ms.len() / 2], self.cpu_ms[self.cpu_ms.len() - 1]);
        let per_call = |ms: f64| ms / self.total_calls.max(1) as f64;
        let calls: Vec<String> = self.calls.iter().map(|(op, n)| format!("{op} {:.3}", *n as f64 / EVENTS as f64)).collect();
        println!(
            "| {label} | {med:.1} ({min:.1} / {max:.1}) | {} | {:.3} ({:.3} / {:.3}) |",
            calls.join(", "),
            per_call(med),
            per_call(min),
            per_call(max)
        );
    }
}

struct Args {
    runs: usize,
    bootstrap: Option<PathBuf>,
    current_thread: bool,
    only: Option<String>,
    endpoint: Option<String>,
    process: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args { runs: 5, bootstrap: None, current_thread: true, only: None, endpoint: None, process: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => a.runs = it.next().and_then(|n| n.parse().ok()).unwrap_or(a.runs),
            "--bootstrap" => a.bootstrap = it.next().map(PathBuf::from),
            "--flavor" => a.current_thread = it.next().as_deref() != Some("multi"),
            "--only" => a.only = it.next(),
            "--endpoint" => a.endpoint = it.next(),
            "--process" => a.process = it.next().map(PathBuf::from),
            // `cargo bench` passes `--bench`.
            _ => {}
        }
    }
    a
}

fn main() {
    let args = args();
    let mut builder = if args.current_thread { tokio::runtime::Builder::new_current_thread() } else { tokio::runtime::Builder::new_multi_thread() };
    let rt = builder.enable_all().build().unwrap_or_else(|e| panic!("a tokio runtime: {e}"));
    rt.block_on(bench(args));
}

async fn bench(args: Args) {
    if let Some(program) = &args.process {
        whole_process(program, args.runs).await;
        return;
    }
    let emulator = match &args.endpoint {
        Some(_) => None,
        None => Some(Emulator::start(&root()).await.unwrap_or_else(|e| panic!("the emulator: {e}"))),
    };
    let endpoint = args.endpoint.clone().or_else(|| emulator.as_ref().map(|e| e.endpoint.clone())).unwrap_or_default();
    let target = Target { endpoint: Some(endpoint.clone()), region: "us-east-1".into() };
    let calls = Calls::default();
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(aws_smithy_http_client::tls::rustls_provider::CryptoMode::AwsLc))
        .build_https();
    let sdk = sdk_config(&target).await.into_builder().http_client(CountingClient { inner: https, calls: calls.clone() }).build();
    let template = Template::load(&root().join("template.yaml")).unwrap_or_else(|e| panic!("template.yaml: {e}"));
    let stack = Stack::set_up(&sdk, template, "bench", EMULATOR_ACCOUNT, Mode::Provision).await.unwrap_or_else(|e| panic!("provisioning: {e}"));
    let env_of = |logical: &str| -> (outbox_local::template::FunctionSpec, std::collections::HashMap<String, String>) {
        let spec = stack.functions.iter().find(|f| f.logical_id == logical).cloned().unwrap_or_else(|| panic!("{logical} in the template"));
        let env = stack.environment(&spec).unwrap_or_else(|e| panic!("{logical}'s environment: {e}"));
        (spec, env)
    };
    let flavor = if args.current_thread { "current_thread" } else { "multi_thread" };
    println!(
        "functions benchmark: {} runs, {} cores, tokio {flavor}, emulator {}",
        args.runs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        endpoint
    );
    println!("\n| workload | handler CPU ms per 1,000 events: median (min / max) | AWS calls per event | handler CPU ms per AWS call: median (min / max) |");
    println!("|---|---|---|---|");

    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let (_, relay_env) = env_of(RELAY);
    let relay = RelayFunction::from_env(&sdk, &Env::from_map(relay_env)).unwrap_or_else(|e| panic!("the relay's configuration: {e}"));
    for (label, bytes) in [("relay, ~200 B payloads", 200), ("relay, ~50 KB payloads", 50 * 1024)] {
        if !wanted("relay") {
            continue;
        }
        // A warm-up invocation: connections and credentials as in a warm Lambda instance.
        let warm = LambdaEvent::new(stream_batch(usize::MAX, 0, bytes), Context::default());
        relay.handle(warm).await.unwrap_or_else(|e| panic!("relay warm-up: {e}"));
        calls.take();
        let mut figures = Figures::default();
        for run in 0..args.runs {
            let batches: Vec<StreamBatch> = (0..EVENTS / RELAY_BATCH).map(|b| stream_batch(run, b * RELAY_BATCH, bytes)).collect();
            let mut cpu = Duration::ZERO;
            for batch in batches {
                let before = cpu_time();
                let response = relay.handle(LambdaEvent::new(batch, Context::default())).await.unwrap_or_else(|e| panic!("relay: {e}"));
                cpu += cpu_time() - before;
                assert!(response.batch_item_failures.is_empty(), "benchmark setup: everything publishes");
            }
            figures.add(cpu, calls.take());
        }
        figures.print(label);
    }

    if wanted("consumer") {
        let (_, consumer_env) = env_of(CONSUMER);
        let table = consumer_env.get("INVENTORY_TABLE").cloned().unwrap_or_else(|| panic!("{CONSUMER} has INVENTORY_TABLE"));
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        for sku in ["BENCH-A", "BENCH-B"] {
            orders_app::inventory::put_stock(&dynamodb, &table, sku, 1_000_000_000).await.unwrap_or_else(|e| panic!("stock: {e}"));
        }
        let consumer =
            InventoryConsumer::from_env(&sdk, &Env::from_map(consumer_env)).unwrap_or_else(|e| panic!("the consumer's configuration: {e}"));
        let warm: Vec<String> = deliveries(usize::MAX).into_iter().take(10).collect();
        for payload in warm {
            let raw = serde_json::value::RawValue::from_string(payload).unwrap_or_else(|e| panic!("JSON: {e}"));
            consumer.handle(LambdaEvent::new(raw, Context::default())).await.unwrap_or_else(|e| panic!("consumer warm-up: {e}"));
        }
        calls.take();
        let mut figures = Figures::default();
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for run in 0..args.runs {
            let payloads: Vec<Box<serde_json::value::RawValue>> =
                deliveries(run).into_iter().map(|p| serde_json::value::RawValue::from_string(p).unwrap_or_else(|e| panic!("JSON: {e}"))).collect();
            let mut cpu = Duration::ZERO;
            outcomes.clear();
            for raw in payloads {
                let before = cpu_time();
                let response = consumer.handle(LambdaEvent::new(raw, Context::default())).await.unwrap_or_else(|e| panic!("consumer: {e}"));
                cpu += cpu_time() - before;
                let outcome = serde_json::to_value(&response).ok().and_then(|v| v["outcome"].as_str().map(str::to_owned)).unwrap_or_default();
                *outcomes.entry(outcome).or_default() += 1;
            }
            figures.add(cpu, calls.take());
        }
        figures.print("consumer, 1,000 deliveries (30 % duplicates, 2 lines each)");
        println!("\nconsumer outcomes per run: {outcomes:?}");
    }

    if let Some(dir) = &args.bootstrap {
        cold_starts(dir, &stack, &sdk, args.runs).await;
    }
    drop(emulator);
}

/// Process start → first response of the relay's release bootstrap through a Lambda Runtime
/// API, the process's CPU time until then, and its peak RSS (`VmHWM`) after that invocation.
async fn cold_starts(dir: &Path, stack: &Stack, sdk: &aws_config::SdkConfig, runs: usize) {
    let spec = stack.functions.iter().find(|f| f.logical_id == RELAY).cloned().unwrap_or_else(|| panic!("{RELAY} in the template"));
    // Absolute: the instance runs in its program's directory (as Lambda runs /var/task/bootstrap).
    let dir = dir.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let program = dir.join(&spec.binary).join("bootstrap");
    let size = std::fs::metadata(&program).map(|m| m.len()).unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let template_env = stack.environment(&spec).unwrap_or_else(|e| panic!("{RELAY}'s environment: {e}"));
    let r = &stack.resolver;
    let placement = Placement { region: r.region.clone(), endpoint: sdk.endpoint_url().map(str::to_owned), function_name: format!("bench-{RELAY}") };
    let env = lambda_environment(&spec, &template_env, &placement);
    let (mut start_ms, mut cpu_ms, mut rss_mb) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let f = LocalFunction::new(
            spec.clone(),
            "arn:bench".into(),
            program.clone(),
            env.clone(),
            Arc::new(Stats::default()),
            &RuntimeOptions::default(),
        );
        let mut event = stream_event(run + 1000, 0, 200);
        if let Some(records) = event["Records"].as_array_mut() {
            records.truncate(1);
        }
        let started = Instant::now();
        let invocation = f.invoke(&event.to_string()).await;
        start_ms.push(started.elapsed().as_secs_f64() * 1e3);
        invocation.result.unwrap_or_else(|d| panic!("{}: {}", d.error_type, d.error_message));
        let (peak_kb, cpu) = child_figures("bootstrap").unwrap_or_else(|| panic!("the bootstrap process is gone"));
        rss_mb.push(peak_kb as f64 / 1024.0);
        cpu_ms.push(cpu.as_secs_f64() * 1e3);
        f.stop();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "\n{}: {:.1} MB, {runs} cold starts\n  process start → first response (one PutEvents): {}\n  its CPU time until then: {}\n  peak RSS (VmHWM) after it: {} MB",
        program.display(),
        size as f64 / 1e6,
        spread(&mut start_ms, "ms"),
        spread(&mut cpu_ms, "ms"),
        spread(&mut rss_mb, "")
    );
}

/// `median (min / max)` of `values`, each followed by `unit`.
fn spread(values: &mut [f64], unit: &str) -> String {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    format!("median {:.1}{unit} (min {:.1} / max {:.1})", values[n / 2], values[0], values[n - 1])
}

/// Of this process's child named `comm`: its peak resident set (`VmHWM`, kB) and the CPU time
/// all its threads have spent (the first field of each `/proc/PID/task/TID/schedstat`, ns).
fn child_figures(comm: &str) -> Option<(u64, Duration)> {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).map(str::to_owned);
        if field("Name:").as_deref() == Some(comm) && field("PPid:").as_deref() == Some(me.as_str()) {
            let peak = field("VmHWM:").and_then(|v| v.trim_end_matches("kB").trim().parse().ok())?;
            let cpu_ns: u64 = std::fs::read_dir(entry.path().join("task"))
                .ok()?
                .flatten()
                .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
                .filter_map(|stat| stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()))
                .sum();
            return Some((peak, Duration::from_nanos(cpu_ns)));
        }
    }
    None
}

/// The stand-in EventBridge of the whole-process figures: answers `PutEvents` (AWS JSON 1.1,
/// `X-Amz-Target: AWSEvents.PutEvents`) after `latency_ms`, accepting every entry, and records
/// each entry's (`detail.metadata.subject`, `detail.metadata.sequence`) in the order it accepted
/// them. It runs in this process, so its CPU is not the relay's.
#[derive(Debug, Clone, Default)]
struct FakeBus {
    latency_ms: Arc<std::sync::atomic::AtomicU64>,
    accepted: Arc<Mutex<Vec<(String, u64)>>>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeBus {
    async fn start() -> (String, FakeBus) {
        let bus = FakeBus::default();
        let app = axum::Router::new().route("/", axum::routing::post(fake_put_events)).with_state(bus.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("a port for the fake bus: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), bus)
    }

    fn take_accepted(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.accepted.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn fake_put_events(
    axum::extract::State(bus): axum::extract::State<FakeBus>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok()).unwrap_or_default();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let entries = request["Entries"].as_array().cloned().unwrap_or_default();
    if target != "AWSEvents.PutEvents" || entries.is_empty() {
        let error = json!({"__type": "ValidationException", "message": format!("the fake bus answers PutEvents only, not {target:?}")});
        return (axum::http::StatusCode::BAD_REQUEST, [("content-type", "application/x-amz-json-1.1")], error.to_string()).into_response();
    }
    let latency = bus.latency_ms.load(std::sync::atomic::Ordering::SeqCst);
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    let n = bus.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut results = Vec::with_capacity(entries.len());
    {
        let mut accepted = bus.accepted.lock().unwrap_or_else(|p| p.into_inner());
        for (i, entry) in entries.iter().enumerate() {
            let detail: Value = entry["Detail"].as_str().and_then(|d| serde_json::from_str(d).ok()).unwrap_or(Value::Null);
            let metadata = &detail["metadata"];
            accepted.push((metadata["subject"].as_str().unwrap_or_default().to_owned(), metadata["sequence"].as_u64().unwrap_or(0)));
            results.push(json!({"EventId": format!("fake-{n}-{i}")}));
        }
    }
    let answer = json!({"FailedEntryCount": 0, "Entries": results});
    ([("content-type", "application/x-amz-json-1.1")], answer.to_string()).into_response()
}

/// The three mixes of a relay batch of 100 events: 100 distinct aggregates; 10 aggregates × 10
/// events interleaved as a busy table's stream interleaves them (1 of each, then 2 of each, …);
/// one hot aggregate × 100. Fresh aggregate ids per `run`.
fn mix_batch(mix: usize, run: usize) -> Value {
    let (aggregates, per_aggregate) = [(100, 1), (10, 10), (1, 100)][mix];
    let mut records = Vec::with_capacity(RELAY_BATCH);
    for s in 1..=per_aggregate {
        for a in 0..aggregates {
            let n = records.len();
            let aggregate = format!("mix{mix}-run{run}-{a}");
            let mut item = outbox::testing::sample_item(&format!("01a22651-6c7b-7e1a-{mix}{run:03}-{n:012}"), &aggregate, 200);
            item.sequence = s as u64;
            item.sk = outbox::envelope::OutboxItem::sort_key(item.sequence);
            records.push(outbox::testing::insert_record(&item, (run * RELAY_BATCH + n + 1) as u64).unwrap_or_else(|e| panic!("converts: {e}")));
        }
    }
    json!({ "Records": records })
}

const MIXES: [&str; 3] = ["100 distinct aggregates", "10 aggregates × 10, interleaved", "1 aggregate × 100"];

/// Whether every aggregate's events were accepted once each, in sequence order.
fn order_kept(accepted: &[(String, u64)]) -> bool {
    let mut last: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    accepted.iter().all(|(aggregate, sequence)| {
        let previous = last.insert(aggregate, *sequence).unwrap_or(0);
        *sequence == previous + 1
    })
}

/// The relay's release binary as a whole process, as Lambda runs it: started through a Lambda
/// Runtime API served by `outbox-local` ([`LocalFunction`]), with the template's logging
/// settings (`LoggingConfig`: JSON, `ApplicationLogLevel`), its stdout counted, against
/// [`FakeBus`] with 0, 10, 30 and 100 ms added to every `PutEvents` answer. Prints events/s per
/// shard (100 events per invocation ÷ the invocation's wall time, median of `runs`) with the
/// order on the bus checked, and at 0 ms the process's CPU per `PutEvents` call (all its
/// threads, `/proc/PID/task/*/schedstat`) and its log bytes per event.
async fn whole_process(program: &Path, runs: usize) {
    let template = Template::load(&root().join("template.yaml")).unwrap_or_else(|e| panic!("template.yaml: {e}"));
    let spec = template
        .functions()
        .unwrap_or_else(|e| panic!("template.yaml: {e}"))
        .into_iter()
        .find(|f| f.logical_id == RELAY)
        .unwrap_or_else(|| panic!("{RELAY} in the template"));
    let program = program.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let comm: String = program.file_name().map(|n| n.to_string_lossy().chars().take(15).collect()).unwrap_or_default();
    let (endpoint, bus) = FakeBus::start().await;
    let scratch = std::env::temp_dir().join(format!("relay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap_or_else(|e| panic!("{}: {e}", scratch.display()));
    let log = scratch.join("stdout.log");
    // The instance's stdout is copied to `log` on its way to the local runtime: `exec` keeps
    // the process id (and `comm` is the program's), so the figures are the program's.
    let wrapper = scratch.join("run");
    std::fs::write(&wrapper, "#!/usr/bin/env bash\nexec > >(tee -a \"$BENCH_LOG\")\nexec \"$BENCH_PROGRAM\"\n").unwrap_or_else(|e| panic!("{e}"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut variables: std::collections::HashMap<String, String> =
        spec.environment.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned()))).collect();
    variables.insert("EVENT_BUS_NAME".into(), "bench-bus".into());
    // The table of `outbox::testing::insert_record`'s stream ARN (a relay that reads
    // `OUTBOX_TABLE` skips any other table's records; an older one ignores the variable).
    variables.insert("OUTBOX_TABLE".into(), "t".into());
    variables.insert("RELAY_DLQ_URL".into(), format!("{endpoint}/{EMULATOR_ACCOUNT}/bench-relay-dlq"));
    let placement = Placement { region: "us-east-1".into(), endpoint: Some(endpoint.clone()), function_name: format!("bench-{RELAY}") };
    let mut env = lambda_environment(&spec, &variables, &placement);
    env.push(("BENCH_LOG".into(), log.display().to_string()));
    env.push(("BENCH_PROGRAM".into(), program.display().to_string()));
    let level = env.iter().find(|(k, _)| k == "AWS_LAMBDA_LOG_LEVEL").map(|(_, v)| v.clone()).unwrap_or_else(|| "(unset: INFO)".into());
    let f = LocalFunction::new(spec.clone(), "arn:bench".into(), wrapper, env, Arc::new(Stats::default()), &RuntimeOptions::default());
    let invoke = |payload: String| {
        let f = &f;
        async move {
            let started = Instant::now();
            let invocation = f.invoke(&payload).await;
            let elapsed = started.elapsed();
            let response = invocation.result.unwrap_or_else(|d| panic!("{}: {}", d.error_type, d.error_message));
            assert!(response["batchItemFailures"].as_array().is_some_and(Vec::is_empty), "benchmark setup: everything publishes: {response}");
            elapsed
        }
    };
    invoke(mix_batch(0, 999).to_string()).await;
    bus.take_accepted();
    tokio::time::sleep(Duration::from_millis(300)).await; // tee catches up
    let first_lines = std::fs::read_to_string(&log).unwrap_or_default();
    println!("\nthe warm-up invocation's log:\n{}", first_lines.trim_end());
    println!(
        "\nwhole process: {} ({:.1} MB) through a Lambda Runtime API, AWS_LAMBDA_LOG_LEVEL {level}, fake PutEvents at {endpoint}; {runs} invocations of 100 events per cell, {} cores shared with other builds",
        program.display(),
        std::fs::metadata(&program).map(|m| m.len()).unwrap_or(0) as f64 / 1e6,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("\n| batch of 100 events | events/s per shard at +0 ms | +10 ms | +30 ms | +100 ms | order on the bus |");
    println!("|---|---|---|---|---|---|");
    let mut per_call: Vec<String> = Vec::new();
    for (mix, name) in MIXES.iter().enumerate() {
        let mut cells = Vec::new();
        let mut kept = true;
        for latency in [0u64, 10, 30, 100] {
            bus.latency_ms.store(latency, std::sync::atomic::Ordering::SeqCst);
            let (cpu_before, calls_before, log_before) =
                (child_figures(&comm).map(|(_, c)| c).unwrap_or_default(), bus.calls(), std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0));
            let mut seconds = Vec::with_capacity(runs);
            for run in 0..runs {
                seconds.push(invoke(mix_batch(mix, run + 1000 * latency as usize).to_string()).await.as_secs_f64());
            }
            kept &= order_kept(&bus.take_accepted());
            seconds.sort_by(f64::total_cmp);
            cells.push(format!("{:.0}", RELAY_BATCH as f64 / seconds[seconds.len() / 2]));
            if latency == 0 {
                tokio::time::sleep(Duration::from_millis(300)).await; // tee catches up
                let cpu = child_figures(&comm).map(|(_, c)| c).unwrap_or_default().saturating_sub(cpu_before);
                let calls = bus.calls() - calls_before;
                let log_bytes = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0).saturating_sub(log_before);
                let events = (runs * RELAY_BATCH) as f64;
                per_call.push(format!(
                    "| {name} | {:.2} | {:.3} | {:.0} |",
                    calls as f64 / runs as f64,
                    cpu.as_secs_f64() * 1e3 / calls.max(1) as f64,
                    log_bytes as f64 / events
                ));
            }
        }
        println!("| {name} | {} | {} |", cells.join(" | "), if kept { "kept" } else { "BROKEN" });
    }
    println!("\n| batch of 100 small events, +0 ms | PutEvents calls per invocation | process CPU ms per PutEvents call (all threads) | log bytes per event (stdout: log lines + EMF) |");
    println!("|---|---|---|---|");
    for row in per_call {
        println!("{row}");
    }
    f.stop();
    let _ = std::fs::remove_dir_all(&scratch);
}
