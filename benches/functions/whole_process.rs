//! What is deployed, measured: a function's release binary as a whole process, as Lambda runs
//! it — started through a Lambda Runtime API served by `outbox-local` ([`LocalFunction`]), with
//! the template's logging settings (`LoggingConfig`: JSON, `ApplicationLogLevel`) and its stdout
//! counted — against [`FakeAws`], a stand-in for the AWS APIs it calls that runs in the bench
//! process (so its CPU is not the function's).
//!
//! * [`relay`] (`--process PROGRAM`): events/s per shard for three mixes of aggregates at 0, 10,
//!   30 and 100 ms added to every `PutEvents` answer, the order on the bus checked, and at 0 ms
//!   the process's CPU per `PutEvents` call and its log bytes per event;
//! * [`consumer`] (`--process-consumer PROGRAM`, the inventory consumer's binary): the process's
//!   CPU per `TransactWriteItems` (one per event) and its log bytes per event, for deliveries one
//!   event per invocation (an EventBridge event) and ten per invocation (an SQS batch, the
//!   consumer kit's delivery queue) when the binary takes SQS batches.
//!
//! A process's CPU is the sum over all its threads of `/proc/PID/task/*/schedstat`'s first field
//! (run time, ns): decoding, SigV4, HTTP, the runtime loop, logs and EMF included.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_cli::aws::EMULATOR_ACCOUNT;
use outbox_local::lambda::function::{lambda_environment, LocalFunction, Placement};
use outbox_local::options::RuntimeOptions;
use outbox_local::stats::Stats;
use outbox_template::{FunctionSpec, Template};
use serde_json::{json, Value};

use super::reference::Reference;
use super::{order_created, root, CONSUMER, RELAY};

/// Of this process's child named `comm`: its peak resident set (`VmHWM`, kB) and the CPU time
/// all its threads have spent (the first field of each `/proc/PID/task/TID/schedstat`, ns).
pub(crate) fn child_figures(comm: &str) -> Option<(u64, Duration)> {
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

/// The stand-in AWS endpoint (AWS JSON 1.0/1.1, dispatched on `X-Amz-Target`): `PutEvents`
/// answered after `latency_ms`, every entry accepted and its (`detail.metadata.subject`,
/// `detail.metadata.sequence`) recorded in the order accepted; `TransactWriteItems` answered
/// `{}` (committed); `GetItem` answered `{}` and `BatchGetItem` answered every table it asks
/// with no item and no `UnprocessedKeys` (nothing stored: the ordered consumer's reads of the
/// aggregate's ordering row and of the parked rows around an applied event). Anything else is a
/// `ValidationException` naming the operation, so a function calling something unexpected fails
/// the bench instead of being measured wrong.
#[derive(Debug, Clone, Default)]
struct FakeAws {
    latency_ms: Arc<AtomicU64>,
    accepted: Arc<Mutex<Vec<(String, u64)>>>,
    put_events: Arc<AtomicUsize>,
    transactions: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
    batch_reads: Arc<AtomicUsize>,
}

impl FakeAws {
    async fn start() -> (String, FakeAws) {
        let aws = FakeAws::default();
        let app = axum::Router::new().route("/", axum::routing::post(answer)).with_state(aws.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("a port for the fake AWS: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), aws)
    }

    fn take_accepted(&self) -> Vec<(String, u64)> {
        std::mem::take(&mut *self.accepted.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

async fn answer(
    axum::extract::State(aws): axum::extract::State<FakeAws>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let target = headers.get("x-amz-target").and_then(|t| t.to_str().ok()).unwrap_or_default();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let refuse = |content_type: &'static str, message: String| {
        let error = json!({"__type": "ValidationException", "message": message});
        (axum::http::StatusCode::BAD_REQUEST, [("content-type", content_type)], error.to_string()).into_response()
    };
    match target {
        "DynamoDB_20120810.GetItem" => {
            aws.reads.fetch_add(1, Ordering::SeqCst);
            ([("content-type", "application/x-amz-json-1.0")], "{}").into_response()
        }
        "DynamoDB_20120810.BatchGetItem" => {
            aws.batch_reads.fetch_add(1, Ordering::SeqCst);
            let tables = request["RequestItems"].as_object().map(|t| t.keys().map(|table| (table.clone(), json!([]))).collect()).unwrap_or_default();
            let answer = json!({"Responses": Value::Object(tables), "UnprocessedKeys": {}});
            ([("content-type", "application/x-amz-json-1.0")], answer.to_string()).into_response()
        }
        "DynamoDB_20120810.TransactWriteItems" => {
            aws.transactions.fetch_add(1, Ordering::SeqCst);
            ([("content-type", "application/x-amz-json-1.0")], "{}").into_response()
        }
        "AWSEvents.PutEvents" => {
            let entries = request["Entries"].as_array().cloned().unwrap_or_default();
            if entries.is_empty() {
                return refuse("application/x-amz-json-1.1", "PutEvents without entries".into());
            }
            let latency = aws.latency_ms.load(Ordering::SeqCst);
            if latency > 0 {
                tokio::time::sleep(Duration::from_millis(latency)).await;
            }
            let n = aws.put_events.fetch_add(1, Ordering::SeqCst);
            let mut results = Vec::with_capacity(entries.len());
            {
                let mut accepted = aws.accepted.lock().unwrap_or_else(|p| p.into_inner());
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
        other => refuse(
            "application/x-amz-json-1.1",
            format!("the fake AWS answers PutEvents, TransactWriteItems, GetItem and BatchGetItem only, not {other:?}"),
        ),
    }
}

/// A function's program running as a whole process through a local Lambda Runtime API, its
/// stdout copied to a log file on its way (a `tee` in a wrapper that `exec`s the program, so
/// the process id and `comm` are the program's).
struct Instance {
    function: LocalFunction,
    comm: String,
    log: std::path::PathBuf,
    scratch: std::path::PathBuf,
    level: String,
}

impl Instance {
    /// Starts `program` as the template's function `logical_id`, with the template's environment
    /// (its plain strings) plus `variables`, every AWS endpoint at `endpoint`.
    fn start(program: &Path, logical_id: &str, variables: &[(&str, String)], endpoint: &str) -> Instance {
        let template = Template::load(&root().join("template.yaml")).unwrap_or_else(|e| panic!("template.yaml: {e}"));
        let spec: FunctionSpec = template
            .functions()
            .unwrap_or_else(|e| panic!("template.yaml: {e}"))
            .into_iter()
            .find(|f| f.logical_id == logical_id)
            .unwrap_or_else(|| panic!("{logical_id} in the template"));
        let program = program.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let comm: String = program.file_name().map(|n| n.to_string_lossy().chars().take(15).collect()).unwrap_or_default();
        let scratch = std::env::temp_dir().join(format!("whole-process-bench-{}-{}", std::process::id(), comm));
        std::fs::create_dir_all(&scratch).unwrap_or_else(|e| panic!("{}: {e}", scratch.display()));
        let log = scratch.join("stdout.log");
        let wrapper = scratch.join("run");
        std::fs::write(&wrapper, "#!/usr/bin/env bash\nexec > >(tee -a \"$BENCH_LOG\")\nexec \"$BENCH_PROGRAM\"\n").unwrap_or_else(|e| panic!("{e}"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
        }
        let mut environment: std::collections::HashMap<String, String> =
            spec.environment.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned()))).collect();
        environment.extend(variables.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let placement = Placement { region: "us-east-1".into(), endpoint: Some(endpoint.to_owned()), function_name: format!("bench-{comm}") };
        let mut env = lambda_environment(&spec, &environment, &placement);
        env.push(("BENCH_LOG".into(), log.display().to_string()));
        env.push(("BENCH_PROGRAM".into(), program.display().to_string()));
        let level = env.iter().find(|(k, _)| k == "AWS_LAMBDA_LOG_LEVEL").map(|(_, v)| v.clone()).unwrap_or_else(|| "(unset: INFO)".into());
        let function = LocalFunction::new(spec, "arn:bench".into(), wrapper, env, Arc::new(Stats::default()), &RuntimeOptions::default());
        Instance { function, comm, log, scratch, level }
    }

    /// Invokes it with `payload`; its wall time from the Runtime API's side and its response.
    async fn invoke(&self, payload: &str) -> (Duration, Value) {
        let started = Instant::now();
        let invocation = self.function.invoke(payload).await;
        let elapsed = started.elapsed();
        (elapsed, invocation.result.unwrap_or_else(|d| panic!("{}: {}", d.error_type, d.error_message)))
    }

    /// The process's CPU so far and the log's size in bytes (after letting `tee` catch up).
    async fn figures(&self) -> (Duration, u64) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cpu = child_figures(&self.comm).map(|(_, c)| c).unwrap_or_default();
        (cpu, std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn stop(self) {
        self.function.stop();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The three mixes of a relay batch of `batch` events: `batch` distinct aggregates; `batch ÷ 10`
/// aggregates × 10 events interleaved as a busy table's stream interleaves them (1 of each, then
/// 2 of each, …); one hot aggregate × `batch`. Fresh aggregate ids per `run`.
fn mix_batch(mix: usize, batch: usize, run: usize) -> Value {
    let (aggregates, per_aggregate) = [(batch, 1), ((batch / 10).max(1), 10), (1, batch)][mix];
    let mut records = Vec::with_capacity(batch);
    for s in 1..=per_aggregate {
        for a in 0..aggregates {
            let n = records.len();
            let aggregate = format!("mix{mix}-run{run}-{a}");
            let mut item = outbox::testing::sample_item(&format!("01a22651-6c7b-7e1a-{mix}{run:03}-{n:012}"), &aggregate, 200);
            item.sequence = s as u64;
            item.sk = outbox::envelope::OutboxItem::sort_key(item.sequence);
            records.push(outbox::testing::insert_record(&item, (run * batch + n + 1) as u64).unwrap_or_else(|e| panic!("converts: {e}")));
        }
    }
    json!({ "Records": records })
}

/// The relay's batch shape: records per invocation (the stream mapping's `BatchSize`, the relay
/// block's parameter) and `RELAY_MAX_CALLS_IN_FLIGHT` (`None`: the template's value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RelayShape {
    /// Records per invocation.
    pub batch: usize,
    /// `PutEvents` calls in flight at once; `None` keeps the template's environment.
    pub calls_in_flight: Option<usize>,
}

/// The names of [`mix_batch`]'s mixes for a batch of `batch` records.
fn mixes(batch: usize) -> [String; 3] {
    [format!("{batch} distinct aggregates"), format!("{} aggregates × 10, interleaved", (batch / 10).max(1)), format!("1 aggregate × {batch}")]
}

/// Whether every aggregate's events were accepted once each, in sequence order.
fn order_kept(accepted: &[(String, u64)]) -> bool {
    let mut last: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    accepted.iter().all(|(aggregate, sequence)| {
        let previous = last.insert(aggregate, *sequence).unwrap_or(0);
        *sequence == previous + 1
    })
}

fn header(instance: &Instance, program: &Path, endpoint: &str, what: &str) {
    println!(
        "\nwhole process: {} ({:.1} MB) through a Lambda Runtime API, AWS_LAMBDA_LOG_LEVEL {}, fake AWS at {endpoint}; {what}, {} cores",
        program.display(),
        std::fs::metadata(program).map(|m| m.len()).unwrap_or(0) as f64 / 1e6,
        instance.level,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// The relay's release binary (`--process PROGRAM`): events/s per shard (`shape.batch` events per
/// invocation ÷ the invocation's wall time, median of `runs`) for [`mixes`] at 0, 10, 30 and
/// 100 ms of added `PutEvents` latency, the order on the bus checked; at 0 ms the process's CPU
/// per `PutEvents` call and its log bytes per event.
pub(crate) async fn relay(program: &Path, runs: usize, shape: RelayShape) {
    let (endpoint, aws) = FakeAws::start().await;
    // The table of `outbox::testing::insert_record`'s stream ARN (a relay that reads
    // `OUTBOX_TABLE` skips any other table's records).
    let variables = [
        ("EVENT_BUS_NAME", "bench-bus".to_owned()),
        // The relay block's `EventBusType` parameter (a `!Ref`, not a plain string): the classic bus.
        ("EVENT_BUS_TYPE", "Classic".to_owned()),
        ("OUTBOX_TABLE", "t".to_owned()),
        ("RELAY_DLQ_URL", format!("{endpoint}/{EMULATOR_ACCOUNT}/bench-relay-dlq")),
    ];
    let mut variables = variables.to_vec();
    if let Some(n) = shape.calls_in_flight {
        variables.push(("RELAY_MAX_CALLS_IN_FLIGHT", n.to_string()));
    }
    let batch = shape.batch;
    let instance = Instance::start(program, RELAY, &variables, &endpoint);
    let invoke = |payload: String| {
        let instance = &instance;
        async move {
            let (elapsed, response) = instance.invoke(&payload).await;
            assert!(response["batchItemFailures"].as_array().is_some_and(Vec::is_empty), "benchmark setup: everything publishes: {response}");
            elapsed
        }
    };
    invoke(mix_batch(0, batch, 999).to_string()).await;
    aws.take_accepted();
    instance.figures().await;
    println!("\nthe relay's warm-up invocation's log:\n{}", instance.log_text().trim_end());
    let in_flight = shape.calls_in_flight.map_or_else(|| "the template's".to_owned(), |n| n.to_string());
    header(&instance, program, &endpoint, &format!("{runs} invocations of {batch} events per cell, RELAY_MAX_CALLS_IN_FLIGHT {in_flight}"));
    let reference = Reference::before();
    println!("\n| batch of {batch} events | events/s per shard at +0 ms | +10 ms | +30 ms | +100 ms | order on the bus |");
    println!("|---|---|---|---|---|---|");
    let mut per_call: Vec<(String, f64, String)> = Vec::new();
    for (mix, name) in mixes(batch).iter().enumerate() {
        let mut cells = Vec::new();
        let mut kept = true;
        for latency in [0u64, 10, 30, 100] {
            aws.latency_ms.store(latency, Ordering::SeqCst);
            let ((cpu_before, log_before), calls_before) = (instance.figures().await, aws.put_events.load(Ordering::SeqCst));
            let mut seconds = Vec::with_capacity(runs);
            for run in 0..runs {
                seconds.push(invoke(mix_batch(mix, batch, run + 1000 * latency as usize).to_string()).await.as_secs_f64());
            }
            kept &= order_kept(&aws.take_accepted());
            seconds.sort_by(f64::total_cmp);
            cells.push(format!("{:.0}", batch as f64 / seconds[seconds.len() / 2]));
            if latency == 0 {
                let (cpu, log) = instance.figures().await;
                let calls = aws.put_events.load(Ordering::SeqCst) - calls_before;
                let events = (runs * batch) as f64;
                let cpu_ms = cpu.saturating_sub(cpu_before).as_secs_f64() * 1e3 / calls.max(1) as f64;
                per_call.push((
                    format!("| {name} | {:.2}", calls as f64 / runs as f64),
                    cpu_ms,
                    format!("{:.0} |", log.saturating_sub(log_before) as f64 / events),
                ));
            }
        }
        println!("| {name} | {} | {} |", cells.join(" | "), if kept { "kept" } else { "BROKEN" });
    }
    let reference = reference.after();
    println!("\n{}", reference.describe());
    println!("\n| batch of {batch} small events, +0 ms | PutEvents calls per invocation | process CPU ms per PutEvents call (all threads) | ÷ ref | log bytes per event (stdout: log lines + EMF) |");
    println!("|---|---|---|---|---|");
    for (head, cpu_ms, tail) in per_call {
        println!("{head} | {cpu_ms:.3} | {:.3} | {tail}", reference.ratio(cpu_ms));
    }
    instance.stop();
}

/// An SQS event of `events` (the consumer kit's delivery queue: the rule's target sends the
/// whole EventBridge event as the message body).
fn sqs_batch(events: &[Value]) -> Value {
    let records: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            json!({
                "messageId": format!("m-{}-{i}", event["id"].as_str().unwrap_or_default()), "receiptHandle": "r",
                "body": event.to_string(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764568800000", "SenderId": "bench",
                               "ApproximateFirstReceiveTimestamp": "1764568800000"},
                "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                "eventSourceARN": format!("arn:aws:sqs:us-east-1:{EMULATOR_ACCOUNT}:bench-delivery"), "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// The inventory consumer's release binary (`--process-consumer PROGRAM`): `runs` × 100 distinct
/// `OrderCreated` events, delivered one per invocation (EventBridge) and ten per invocation (an
/// SQS batch) when the binary takes SQS batches; per delivery shape the process's CPU per
/// `TransactWriteItems` (the fake commits every one) and its log bytes per event.
pub(crate) async fn consumer(program: &Path, runs: usize) {
    let (endpoint, aws) = FakeAws::start().await;
    let variables = [
        ("INBOX_TABLE", "bench-inbox".to_owned()),
        ("INVENTORY_TABLE", "bench-inventory".to_owned()),
        ("OUTBOX_TABLE", "bench-outbox".to_owned()),
        ("DEAD_LETTER_QUEUE_URL", format!("{endpoint}/{EMULATOR_ACCOUNT}/bench-consumer-dlq")),
        ("DEAD_LETTER_RETENTION_SECONDS", "1209600".to_owned()),
        ("CLAIM_CHECK_BUCKET", "bench-payloads".to_owned()),
    ];
    let instance = Instance::start(program, CONSUMER, &variables, &endpoint);
    let (_, warm) = instance.invoke(&order_created(usize::MAX, 0, "warm").to_string()).await;
    let takes_sqs = {
        let before = aws.transactions.load(Ordering::SeqCst);
        let (_, response) = instance.invoke(&sqs_batch(&[order_created(usize::MAX, 1, "warm")]).to_string()).await;
        response["batchItemFailures"].as_array().is_some_and(Vec::is_empty) && aws.transactions.load(Ordering::SeqCst) == before + 1
    };
    instance.figures().await;
    println!("\nthe consumer's warm-up invocations' log (response {warm}):\n{}", instance.log_text().trim_end());
    header(&instance, program, &endpoint, &format!("{runs} × 100 OrderCreated (2 lines each) per row"));
    let reference = Reference::before();
    // (the row up to the CPU figure, the CPU figure: none when the binary does not take SQS
    // batches, the row after it)
    let mut rows: Vec<(String, Option<f64>, String)> = Vec::new();
    for (label, per_invocation) in [("one event per invocation (EventBridge)", 1usize), ("10 per invocation (SQS batch)", 10)] {
        if per_invocation > 1 && !takes_sqs {
            rows.push((format!("| {label} | —"), None, "— |".into()));
            continue;
        }
        let ((cpu_before, log_before), calls_before, reads_before, batch_reads_before) = (
            instance.figures().await,
            aws.transactions.load(Ordering::SeqCst),
            aws.reads.load(Ordering::SeqCst),
            aws.batch_reads.load(Ordering::SeqCst),
        );
        for run in 0..runs {
            for chunk in (0..100).collect::<Vec<_>>().chunks(per_invocation) {
                let events: Vec<Value> = chunk.iter().map(|&n| order_created(run + 100 * per_invocation, n, "first")).collect();
                let payload = if per_invocation == 1 { events[0].to_string() } else { sqs_batch(&events).to_string() };
                instance.invoke(&payload).await;
            }
        }
        let (cpu, log) = instance.figures().await;
        let calls = aws.transactions.load(Ordering::SeqCst) - calls_before;
        let reads = aws.reads.load(Ordering::SeqCst) - reads_before;
        let batch_reads = aws.batch_reads.load(Ordering::SeqCst) - batch_reads_before;
        let events = (runs * 100) as f64;
        rows.push((
            format!("| {label} | {:.2}, {:.2}, {:.2}", calls as f64 / events, reads as f64 / events, batch_reads as f64 / events),
            Some(cpu.saturating_sub(cpu_before).as_secs_f64() * 1e3 / calls.max(1) as f64),
            format!("{:.0} |", log.saturating_sub(log_before) as f64 / events),
        ));
    }
    let reference = reference.after();
    println!("\n{}", reference.describe());
    println!("\n| consumer, distinct events | TransactWriteItems, GetItem, BatchGetItem per event | process CPU ms per TransactWriteItems (all threads) | ÷ ref | log bytes per event (stdout: log lines + EMF) |");
    println!("|---|---|---|---|---|");
    for (head, cpu_ms, tail) in rows {
        match cpu_ms {
            Some(ms) => println!("{head} | {ms:.3} | {:.3} | {tail}", reference.ratio(ms)),
            None => println!("{head} | the binary does not take SQS batches | — | {tail}"),
        }
    }
    instance.stop();
}
