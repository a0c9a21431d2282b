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
//! * handler CPU per AWS call, and its ratio to a reference measured in the same run, before and
//!   after the workload ([`reference`]: SHA-256 over a fixed buffer; absolute CPU figures move
//!   2–3× between days on a shared machine, the ratio much less).
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
//! `PutEvents` call and its log bytes per event; `--relay-batch N` (records per invocation, the
//! relay block's `BatchSize`, default 100) and `--calls-in-flight N` (`RELAY_MAX_CALLS_IN_FLIGHT`,
//! default the template's) change the batch's shape. `--process-consumer PROGRAM` (the inventory
//! consumer's release binary, `target/release/reserve-inventory`) does the same for the consumer:
//! its CPU per `TransactWriteItems` and log bytes per event ([`whole_process`]). No emulator is
//! started in either. Each CPU figure is printed with its ratio to the [`reference`] too.
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
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_lambda::relay::RelayFunction;
use outbox_lambda::Env;
use outbox_local::emulator::Emulator;
use outbox_local::lambda::function::{lambda_environment, LocalFunction, Placement};

use outbox_local::options::RuntimeOptions;
use outbox_local::stats::Stats;
use outbox_template::stack::Stack;
use outbox_template::Template;
use serde_json::{json, Value};
use whole_process::child_figures;

// Not benches/whole_process.rs: cargo would take that file for a benchmark of its own.
#[path = "functions/whole_process.rs"]
mod whole_process;

// Every CPU figure's ratio to a fixed workload measured in the same run.
#[path = "functions/reference.rs"]
mod reference;

use reference::Reference;

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

#[allow(unsafe_code)]
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

/// Event `n` of run `run`, an `OrderCreated` as EventBridge delivers it (two order lines), in
/// envelope `envelope` (a second delivery has another envelope id, the same event id).
fn order_created(run: usize, n: usize, envelope: &str) -> Value {
    let (event_id, order_id) = (format!("bench-{run}-e{n}"), format!("bench-{run}-o{n}"));
    json!({
        "version": "0", "id": format!("{envelope}-{event_id}"), "detail-type": "OrderCreated", "source": "example.orders",
        "account": EMULATOR_ACCOUNT, "time": "2026-12-01T06:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {
            "metadata": {"id": event_id, "type": "OrderCreated", "version": 1, "source": "example.orders",
                         "time": "2026-12-01T06:00:00.000Z", "subject": order_id, "aggregate_type": "Order",
                         "sequence": 1, "correlation_id": "bench",
                         // Every event the writer stores has one (outbox::TraceContext::current_or_new).
                         "traceparent": "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"},
            "data": {"order_id": order_id, "customer_id": "c-1", "currency": "EUR",
                     "lines": [{"sku": "BENCH-A", "quantity": 1, "unit_price": "1.00"}, {"sku": "BENCH-B", "quantity": 2, "unit_price": "2.50"}]}
        }
    })
}

/// The consumer's deliveries of run `run`: blocks of 10 = 7 new events + second deliveries of
/// the block's first 3.
fn deliveries(run: usize) -> Vec<String> {
    let event = |n: usize, envelope: &str| order_created(run, n, envelope).to_string();
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

    fn print(&mut self, label: &str, reference: &Reference) {
        self.cpu_ms.sort_by(f64::total_cmp);
        let (min, med, max) = (self.cpu_ms[0], self.cpu_ms[self.cpu_ms.len() / 2], self.cpu_ms[self.cpu_ms.len() - 1]);
        let per_call = |ms: f64| ms / self.total_calls.max(1) as f64;
        let calls: Vec<String> = self.calls.iter().map(|(op, n)| format!("{op} {:.3}", *n as f64 / EVENTS as f64)).collect();
        println!(
            "| {label} | {med:.1} ({min:.1} / {max:.1}) | {} | {:.3} ({:.3} / {:.3}) | {:.3} |",
            calls.join(", "),
            per_call(med),
            per_call(min),
            per_call(max),
            reference.ratio(per_call(med))
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
    process_consumer: Option<PathBuf>,
    relay_shape: whole_process::RelayShape,
}

fn args() -> Args {
    let mut a = Args {
        runs: 5,
        bootstrap: None,
        current_thread: true,
        only: None,
        endpoint: None,
        process: None,
        process_consumer: None,
        relay_shape: whole_process::RelayShape { batch: RELAY_BATCH, calls_in_flight: None },
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => a.runs = it.next().and_then(|n| n.parse().ok()).unwrap_or(a.runs),
            "--bootstrap" => a.bootstrap = it.next().map(PathBuf::from),
            "--flavor" => a.current_thread = it.next().as_deref() != Some("multi"),
            "--only" => a.only = it.next(),
            "--endpoint" => a.endpoint = it.next(),
            "--process" => a.process = it.next().map(PathBuf::from),
            "--process-consumer" => a.process_consumer = it.next().map(PathBuf::from),
            "--relay-batch" => a.relay_shape.batch = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).unwrap_or(RELAY_BATCH),
            "--calls-in-flight" => a.relay_shape.calls_in_flight = it.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0),
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
    if args.process.is_some() || args.process_consumer.is_some() {
        if let Some(program) = &args.process {
            whole_process::relay(program, args.runs, args.relay_shape).await;
        }
        if let Some(program) = &args.process_consumer {
            whole_process::consumer(program, args.runs).await;
        }
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
    let stack = outbox_local::provision::provision(&sdk, template, "bench", EMULATOR_ACCOUNT).await.unwrap_or_else(|e| panic!("provisioning: {e}"));
    let env_of = |logical: &str| -> (outbox_template::FunctionSpec, std::collections::HashMap<String, String>) {
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
    println!("\n| workload | handler CPU ms per 1,000 events: median (min / max) | AWS calls per event | handler CPU ms per AWS call: median (min / max) | median ÷ ref |");
    println!("|---|---|---|---|---|");

    // Each workload's reference, printed after the table.
    let mut references: Vec<String> = Vec::new();
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let (_, mut relay_env) = env_of(RELAY);
    // The table of `outbox::testing::insert_record`'s stream ARN: the stack's `OUTBOX_TABLE` names
    // another, and a relay that reads it skips every record of another table's stream
    // (`RecordsSkipped`, `foreign_stream`): it would publish nothing and the row measure nothing.
    relay_env.insert("OUTBOX_TABLE".to_owned(), "t".to_owned());
    let relay = RelayFunction::from_env(&sdk, &Env::from_map(relay_env)).unwrap_or_else(|e| panic!("the relay's configuration: {e}"));
    for (label, bytes) in [("relay, ~200 B payloads", 200), ("relay, ~50 KB payloads", 50 * 1024)] {
        if !wanted("relay") {
            continue;
        }
        // A warm-up invocation: connections and credentials as in a warm Lambda instance.
        let warm = LambdaEvent::new(stream_batch(usize::MAX, 0, bytes), Context::default());
        relay.handle(warm).await.unwrap_or_else(|e| panic!("relay warm-up: {e}"));
        calls.take();
        let reference = Reference::before();
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
            let made = calls.take();
            // Not a timing: a relay that skipped its records would print figures of no work.
            assert!(made.get("PutEvents").copied().unwrap_or(0) > 0, "benchmark setup: the relay published nothing ({made:?})");
            figures.add(cpu, made);
        }
        let reference = reference.after();
        figures.print(label, &reference);
        references.push(format!("{label}: {}", reference.describe()));
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
        let reference = Reference::before();
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
        let reference = reference.after();
        figures.print("consumer, 1,000 deliveries (30 % duplicates, 2 lines each)", &reference);
        references.push(format!("consumer: {}", reference.describe()));
        println!("\nconsumer outcomes per run: {outcomes:?}");
    }
    for line in references {
        println!("\n{line}");
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
