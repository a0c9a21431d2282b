//! `outbox-local`: run the SAM template's functions locally against the moto emulator.
//!
//! ```text
//! outbox-local demo [--orders N] [--json]      # the whole pipeline on the sample inputs
//! outbox-local up [--port 3000]                # stack + HTTP API + pipelines until Ctrl-C
//! outbox-local invoke <LogicalId> -e <event>   # one handler, one event; response on stdout
//! outbox-local dlq list [--json] | show <id> | redrive [--dry-run] [--force] | purge | archive <file>
//!                  [--id ID]… [--cause CAUSE] [--older-than 7d]   # select messages
//! outbox-local dlq practice                    # make one real dead letter on a running `up`
//! outbox-local trace <event-id> [--json]      # where is event X: outbox, consumers, DLQs
//! outbox-local webhooks attempts <event-id> --subscriber S | resend <event-id> --subscriber S
//!                  | recover --subscriber S --since T | enable S [--recover] [--since T]
//! outbox-local ordering release --consumer C --aggregate Order#o-1 --through N   # unblock a sequence gap
//! outbox-local provision                       # create the stack on --endpoint and exit
//! outbox-local proof [--orders N] [--plan P]    # the pipeline under a fault plan, invariants checked
//! ```
//!
//! Without `--endpoint` (or `AWS_ENDPOINT_URL`), `up`, `demo`, `invoke` and `provision` start
//! their own moto server on a free loopback port; `dlq` and `ordering` use the ordinary AWS configuration.
//! `up`, `demo` and `invoke` first build the template's function binaries with one
//! `cargo build --bin …` beside the template (`invoke X`: only X's; `--no-build` when they are
//! prebuilt, with `--target-dir` or `CARGO_TARGET_DIR` where no Cargo project is beside the
//! template) and run each function as its real binary, served the Lambda Runtime API. `up` and
//! `demo` skip, with a warning, functions without `Metadata.BuildProperties.Binary`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use clap::{Parser, Subcommand};
use outbox_local::aws::{check_endpoint, region_from_env, sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::binaries;
use outbox_local::demo::{self, DemoOptions};
use outbox_local::emulator::Emulator;
use outbox_local::faults::{FaultPlan, Injector};
use outbox_local::proof::{self, ProofOptions};
use outbox_local::runtime::{Runtime, RuntimeOptions};
use outbox_local::stack::{default_stack_name, Destination, Mode, QueueInfo, Stack};
use outbox_local::template::{FunctionEvent, Template};
use outbox_local::{dlq, failed_batch, http_api};
use tokio::sync::watch;

#[derive(Debug, Parser)]
#[command(name = "outbox-local", version, about = "Run the outbox pipeline of template.yaml locally on the moto AWS emulator")]
struct Cli {
    /// SAM template to read (default: template.yaml in this directory or the nearest parent).
    #[arg(long, global = true)]
    template: Option<PathBuf>,
    /// Stack name: resource names are `<stack>-<suffix>` (default: stack_name of samconfig.toml
    /// beside the template, else the template directory's name).
    #[arg(long, global = true)]
    stack_name: Option<String>,
    /// AWS endpoint of a running emulator, e.g. http://127.0.0.1:5000 (also AWS_ENDPOINT_URL).
    #[arg(long, global = true, env = "AWS_ENDPOINT_URL")]
    endpoint: Option<String>,
    /// Show the functions' output and the runtime's logs (info level) on stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    /// Do not build the functions' binaries; run the prebuilt `<target dir>/debug/<Binary>`
    /// (also OUTBOX_LOCAL_NO_BUILD=1).
    #[arg(long, global = true, env = "OUTBOX_LOCAL_NO_BUILD", value_parser = clap::builder::FalseyValueParser::new())]
    no_build: bool,
    /// The cargo target directory: the functions' binaries are `<DIR>/debug/<Binary>` (built
    /// there, or prebuilt with --no-build). Default: cargo's for the template's directory
    /// (with --no-build, CARGO_TARGET_DIR when set).
    #[arg(long, global = true, value_name = "DIR")]
    target_dir: Option<PathBuf>,
    /// Environment variables on top of the template's, per function (the JSON of `sam local
    /// invoke --env-vars`; default: local/env.json beside the template, when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    env_vars: Option<PathBuf>,
    /// Most instances of one function at once, unless it sets ReservedConcurrentExecutions.
    #[arg(long, global = true, default_value_t = 4)]
    max_instances: usize,
    /// Compress retry waits to milliseconds (asynchronous invocation: 200 ms, 400 ms instead of
    /// Lambda's ~1 min, 2 min). `demo` and `proof` always compress, and say so.
    #[arg(long, global = true, env = "OUTBOX_LOCAL_COMPRESS_RETRIES", value_parser = clap::builder::FalseyValueParser::new())]
    compress_retries: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline on the sample inputs and report each stage.
    Demo {
        /// Generated orders on top of the samples in events/.
        #[arg(long, default_value_t = 20)]
        orders: usize,
        /// Print only one JSON object with the figures.
        #[arg(long)]
        json: bool,
        /// Longest wait for each stage, seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Keep the stack (emulator, HTTP API, pipelines) running after the report, until
        /// Ctrl-C, to inspect its tables and dead letters (`dlq list`, `trace`) with the
        /// printed endpoint.
        #[arg(long)]
        keep: bool,
    },
    /// Provision the stack, serve the HTTP API and run the pipelines until Ctrl-C.
    Up {
        /// Port of the local HTTP API.
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
    /// Print a token of the local issuer (what `up` and `demo` accept on routes under the
    /// template's JWT authorizer): `curl -H "authorization: Bearer $(outbox-local token --sub alice)"`.
    Token {
        /// The token's subject (`sub`): the caller, who owns the orders it creates.
        #[arg(long)]
        sub: String,
        /// A scope to put in the token's `scope` claim (repeatable), e.g. `orders/admin`.
        #[arg(long)]
        scope: Vec<String>,
        /// Lifetime, seconds.
        #[arg(long, default_value_t = outbox_local::authorizer::DEFAULT_TOKEN_SECONDS)]
        ttl: i64,
    },
    /// Invoke one function with one event (like `sam local invoke -e`); response on stdout.
    Invoke {
        /// Logical id of the function in the template, e.g. CreateOrderFunction.
        logical_id: String,
        /// Event file (JSON), e.g. events/create-order.json; `-` reads stdin.
        #[arg(short = 'e', long = "event")]
        event: PathBuf,
    },
    /// Inspect the dead-letter queues.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Create the stack's tables, bus, queues and rules on --endpoint, print them, and exit.
    Provision,
    /// Where is event X? Its outbox item, each consumer's inbox row, and any dead letter holding
    /// it, read from the tables and queues (--endpoint for the emulator; AWS otherwise).
    Trace {
        /// The event id (the outbox item's `event_id`, the EventBridge event's `detail.id`).
        event_id: String,
        /// One JSON object instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Webhook deliveries: a delivery's attempts, resend one event, recover what a subscriber
    /// missed, re-enable a disabled subscriber (--endpoint for the emulator; AWS otherwise).
    Webhooks {
        #[command(subcommand)]
        command: WebhooksCommand,
    },
    /// Per-aggregate ordering of ordered consumers.
    Ordering {
        #[command(subcommand)]
        command: OrderingCommand,
    },
    /// Run orders and cancellations through the HTTP API under a fault plan, redrive the
    /// dead-letter queues once if the plan says so (never with --no-redrive), and check the
    /// invariants from the tables and queues; exits 1 when one is broken.
    Proof {
        /// Orders sent.
        #[arg(long, default_value_t = 200)]
        orders: usize,
        /// Cancel every n-th order the API answered for (0: none).
        #[arg(long, default_value_t = 4)]
        cancel_every: usize,
        /// The fault plan: `default` (every fault kind), `ci` (what the test command runs),
        /// `none`, or a TOML file (see local/faults/default.toml).
        #[arg(long, default_value = "default")]
        plan: String,
        /// Seed of the plan's random decisions (overrides the plan's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Seconds without an AWS call from any function that count as quiet.
        #[arg(long, default_value_t = 8)]
        quiet: u64,
        /// Longest wait for the pipeline to go quiet, seconds (each time).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Print only one JSON object with the figures.
        #[arg(long)]
        json: bool,
        /// No operator: skip the redrive step even when the plan asks for it, and check that
        /// everything but never-succeeding events took effect on its own.
        #[arg(long)]
        no_redrive: bool,
    },
}

#[derive(Debug, Subcommand)]
enum WebhooksCommand {
    /// Show a delivery's attempts: status, latency and the first 1 KiB of each answer.
    Attempts {
        /// The event id (the `webhook-id`).
        event_id: String,
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Send one event to one subscriber again (from the outbox table), even if it acknowledged it.
    Resend {
        /// The event id.
        event_id: String,
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
    },
    /// Send a subscriber every event of its types since a time that it has not acknowledged
    /// (from the outbox table; acknowledged: the dispatcher's delivery record).
    Recover {
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
        /// RFC 3339 time, or an age such as 90m or 2d.
        #[arg(long)]
        since: String,
    },
    /// Re-enable a disabled subscriber (its circuit breaker reset).
    Enable {
        /// The subscriber id.
        subscriber: String,
        /// Then recover what it missed: since --since, or one retry span before it started failing.
        #[arg(long)]
        recover: bool,
        /// Where the recovery starts (RFC 3339 or an age such as 2d).
        #[arg(long)]
        since: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum OrderingCommand {
    /// List the events ordered consumers parked (arrived before their predecessor), oldest
    /// first, with how long each has waited; exits 1 when one waited longer than --gap-after
    /// (a real gap: its predecessor may never come).
    Parked {
        /// How long a parked event may wait before it counts as a gap: a number and s, m, h or d.
        #[arg(long, value_parser = outbox_local::dlq::parse_age, default_value = "15m")]
        gap_after: Duration,
        /// Physical name of the inbox table (default: the template's InboxTable in the stack).
        #[arg(long)]
        table: Option<String>,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Release an aggregate whose consumer waits for a sequence that will never come: its last
    /// sequence moves up to --through, and the events parked behind it are re-published to the
    /// bus, so the consumer applies them. The consumer's gap log line prints this command.
    Release {
        /// The consumer name (e.g. reserve-inventory, the CONSUMER_NAME of the function).
        #[arg(long)]
        consumer: String,
        /// The aggregate, <aggregate_type>#<aggregate_id>, e.g. Order#o-1001.
        #[arg(long)]
        aggregate: String,
        /// The sequence to treat as applied: the one the gap "waits for".
        #[arg(long)]
        through: u64,
        /// Physical name of the inbox table (default: the template's InboxTable in the stack).
        #[arg(long)]
        table: Option<String>,
        /// Create the aggregate's ordering row when it does not exist: only for a gap at the
        /// aggregate's first event (without it, a missing row means a mistyped --consumer or
        /// --aggregate, and nothing is written).
        #[arg(long)]
        create: bool,
    },
}

#[derive(Debug, Subcommand)]
enum DlqCommand {
    /// List the messages of the dead-letter queues, grouped by failure cause (left in the queues).
    List {
        /// One JSON object (`groups`, `messages`) instead of lines.
        #[arg(long)]
        json: bool,
        /// Only this queue (logical id, e.g. ConsumerDeadLetterQueue).
        #[arg(long)]
        queue: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Show one message: the event and why it failed.
    Show {
        /// The SQS message id (from `dlq list`).
        message_id: String,
    },
    /// Re-publish the dead-lettered events to the bus; delete what the bus accepted. Stream
    /// batches the relay's mapping gave up on (its S3 on-failure bucket, and pointer-only
    /// records in a queue) are replayed through the relay.
    Redrive {
        /// Only this queue (logical id, e.g. ConsumerDeadLetterQueue); the bucket is skipped.
        #[arg(long)]
        queue: Option<String>,
        /// The S3 on-failure bucket of the relay's mapping (default: the template's, named as
        /// its BucketName resolves; give it when the account id differs, e.g. on AWS).
        #[arg(long)]
        bucket: Option<String>,
        /// The bus to re-publish to (default: the template's first AWS::Events::EventBus).
        #[arg(long)]
        bus: Option<String>,
        /// Say what would be redriven; send and delete nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        select: SelectArgs,
        /// Redrive messages whose cause is permanent (malformed, payload conflict, rejected) too:
        /// only after fixing what made them fail.
        #[arg(long)]
        force: bool,
        /// After re-publishing, watch the redriven events this many seconds and report how many
        /// were applied, dead-lettered again or are still pending (0: do not watch). Exits 1
        /// when one came back, 2 when one is still pending or left.
        #[arg(long, default_value_t = 60)]
        watch: u64,
    },
    /// Delete the selected messages (all of them without a filter).
    Purge {
        /// Only this queue (logical id).
        #[arg(long)]
        queue: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
    },
    /// Make one real dead letter to practise on: put a malformed event on the bus of a running
    /// stack (`outbox-local up`), wait until its consumer has dead-lettered it, and print the
    /// commands to try next. Emulator only (--endpoint / AWS_ENDPOINT_URL) unless --allow-aws.
    Practice {
        /// Do it against AWS (no --endpoint): puts a malformed event on the real bus.
        #[arg(long)]
        allow_aws: bool,
        /// Longest wait for the dead letter, seconds.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Append the selected messages to FILE (JSON lines, bodies included), then delete them.
    Archive {
        /// The file to append to.
        file: PathBuf,
        /// Only this queue (logical id).
        #[arg(long)]
        queue: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
    },
}

/// Which dead-letter messages a `dlq` verb acts on (all conditions hold).
#[derive(Debug, clap::Args)]
struct SelectArgs {
    /// Only these messages: SQS message id or event id (repeatable).
    #[arg(long = "id")]
    ids: Vec<String>,
    /// Only this failure cause, as `dlq list` groups them (e.g. MalformedEvent, SequenceGap).
    #[arg(long, alias = "reason")]
    cause: Option<String>,
    /// Only messages older than this: a number and s, m, h or d (e.g. 30m, 7d).
    #[arg(long, value_parser = outbox_local::dlq::parse_age)]
    older_than: Option<Duration>,
}

impl SelectArgs {
    fn selection(&self) -> dlq::Selection {
        dlq::Selection { ids: self.ids.clone(), cause: self.cause.clone(), older_than: self.older_than }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_filter = match (&cli.command, cli.verbose) {
        (_, true) => "info",
        (Command::Demo { .. }, false) => "off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into()))
        .init();
    match run(cli).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("outbox-local: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The stack, on the endpoint given or on an emulator of our own (kept alive with the value).
struct Local {
    runtime: Arc<Runtime>,
    _emulator: Option<Emulator>,
    endpoint: String,
}

/// The emulator (when none is given), the provisioned stack, and the template's binaries built
/// and ready to run — only function `only`'s when given (`invoke`); otherwise functions without
/// a `Binary` are skipped with a warning.
async fn local(cli: &Cli, template: Template, root: &Path, stack_name: &str, announce: bool, only: Option<&str>) -> Result<Local, String> {
    Ok(local_with_faults(cli, template, root, stack_name, announce, only, None).await?.0)
}

/// Where the runtime keeps state for `stack_name` across restarts (checkpoints, the local
/// issuer's key).
fn state_dir(root: &Path, stack_name: &str) -> PathBuf {
    root.join(".local").join(stack_name)
}

/// [`local`] with `faults` injected between the functions and the emulator.
async fn local_with_faults(
    cli: &Cli,
    template: Template,
    root: &Path,
    stack_name: &str,
    announce: bool,
    only: Option<&str>,
    faults: Option<FaultPlan>,
) -> Result<(Local, Option<Arc<Injector>>), String> {
    let (emulator, endpoint, sdk, stack) = provisioned(cli, template, stack_name, announce).await?;
    if only.is_none() {
        for id in &stack.skipped_functions {
            eprintln!("warning: {id} has no Metadata.BuildProperties.Binary (not a Rust binary?): skipped, its events are not wired");
        }
    }
    let bin_dir = build_functions(cli, &stack, root, only).await?;
    let injector = faults.map(|plan| Injector::new(plan, &endpoint));
    // The stream mappings' checkpoints survive a restart of the runtime (on the same emulator:
    // a new emulator's streams have new ARNs, and their checkpoints start afresh).
    let state_dir = Some(state_dir(root, stack_name));
    let options = RuntimeOptions {
        verbose: cli.verbose,
        max_instances: cli.max_instances.max(1),
        faults: injector.clone(),
        state_dir,
        ..RuntimeOptions::default()
    };
    // The demo and the proof must finish in minutes: they compress retry waits, and say so.
    let compress = cli.compress_retries || matches!(cli.command, Command::Demo { .. } | Command::Proof { .. });
    let options = if compress { options.compressed() } else { options };
    if announce {
        eprintln!("outbox-local: {}", options.retry_timing());
    }
    let env_file = cli.env_vars.clone().unwrap_or_else(|| root.join("local").join("env.json"));
    let environment = if cli.env_vars.is_some() || env_file.is_file() {
        let ids: Vec<String> = stack.functions.iter().map(|f| f.logical_id.clone()).collect();
        outbox_local::env_vars::load(&env_file, &ids)?
    } else {
        Default::default()
    };
    let options = RuntimeOptions { environment, ..options };
    let runtime = Runtime::with_functions(sdk, stack, options, &bin_dir, only)?;
    Ok((Local { runtime: Arc::new(runtime), _emulator: emulator, endpoint }, injector))
}

/// `webhooks …`.
async fn webhooks(operator: &outbox_local::webhooks::Operator, command: &WebhooksCommand) -> Result<ExitCode, String> {
    use outbox_local::webhooks::{parse_since, render_attempts};
    match command {
        WebhooksCommand::Attempts { event_id, subscriber, json } => {
            let attempts = operator.attempts(subscriber, event_id).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&attempts).map_err(|e| e.to_string())?);
            } else {
                print!("{}", render_attempts(subscriber, event_id, &attempts));
            }
            Ok(if attempts.is_empty() { ExitCode::from(2) } else { ExitCode::SUCCESS })
        }
        WebhooksCommand::Resend { event_id, subscriber } => {
            operator.resend(subscriber, event_id).await?;
            println!("event {event_id} queued for subscriber {subscriber} (its delivery record removed: it is POSTed again)");
            Ok(ExitCode::SUCCESS)
        }
        WebhooksCommand::Recover { subscriber, since } => {
            let r = operator.recover(subscriber, parse_since(since)?).await?;
            println!(
                "{subscriber}: {} events since {since}: {} sent, {} acknowledged before, {} being delivered",
                r.events, r.sent, r.acknowledged, r.in_flight
            );
            Ok(ExitCode::SUCCESS)
        }
        WebhooksCommand::Enable { subscriber, recover, since } => {
            let failing_since = operator.enable(subscriber).await?;
            println!("{subscriber}: enabled");
            if *recover {
                let from = match (since, failing_since) {
                    (Some(text), _) => parse_since(text)?,
                    (None, Some(t)) => t,
                    (None, None) => return Err(format!("{subscriber} has no record of when it started failing: pass --since")),
                };
                let r = operator.recover(subscriber, from).await?;
                println!(
                    "{subscriber}: {} events since {from}: {} sent, {} acknowledged before, {} being delivered",
                    r.events, r.sent, r.acknowledged, r.in_flight
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The emulator (ours unless `--endpoint`), its endpoint, and the stack provisioned on it.
async fn provisioned(
    cli: &Cli,
    template: Template,
    stack_name: &str,
    announce: bool,
) -> Result<(Option<Emulator>, String, SdkConfig, Stack), String> {
    let (emulator, endpoint) = match &cli.endpoint {
        Some(e) => (None, e.clone()),
        None => {
            if announce {
                eprintln!("starting the moto emulator…");
            }
            let emulator = Emulator::start(&emulator_root(&template.path)).await.map_err(|e| e.to_string())?;
            let endpoint = emulator.endpoint.clone();
            (Some(emulator), endpoint)
        }
    };
    let sdk = sdk_config(&Target { endpoint: Some(endpoint.clone()), region: region_from_env() }).await;
    let stack = Stack::set_up(&sdk, template, stack_name, EMULATOR_ACCOUNT, Mode::Provision).await.map_err(|e| e.to_string())?;
    Ok((emulator, endpoint, sdk, stack))
}

/// Builds the stack's function binaries (only `only`'s when given) beside the template (unless
/// `--no-build`); returns the directory they are in.
async fn build_functions(cli: &Cli, stack: &Stack, root: &Path, only: Option<&str>) -> Result<PathBuf, String> {
    let functions: Vec<(String, String)> =
        stack.functions.iter().filter(|f| only.is_none_or(|id| f.logical_id == id)).map(|f| (f.logical_id.clone(), f.binary.clone())).collect();
    let root = root.to_owned();
    // Relative to where we run, not to the template's directory where cargo runs.
    let target_dir = cli.target_dir.as_deref().map(std::path::absolute).transpose().map_err(|e| format!("--target-dir: {e}"))?;
    let source = binaries::Source { prebuilt: cli.no_build, target_dir };
    tokio::task::spawn_blocking(move || binaries::prepare_functions(&root, &functions, &source))
        .await
        .map_err(|e| format!("building the functions: {e}"))?
        .map_err(|e| e.to_string())
}

/// Where `scripts/venv` (the emulator's virtualenv) is: the template's directory or its nearest
/// parent that has it, else this project's root.
fn emulator_root(template: &Path) -> PathBuf {
    template
        .ancestors()
        .skip(1)
        .find(|d| d.join("scripts/venv").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

fn find_template(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return p.canonicalize().map_err(|e| format!("{}: {e}", p.display()));
    }
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    cwd.ancestors()
        .map(|d| d.join("template.yaml"))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no template.yaml in {} or its parents; pass --template", cwd.display()))
}

/// Seconds between `up`'s status lines.
const STATUS_EVERY_SECS: u64 = 5;

/// `up`'s status line on stderr every [`STATUS_EVERY_SECS`] while something changed
/// ([`outbox_local::status::status_line`]): events/s, consumer outcomes, latency, failing AWS
/// calls per service (`health`: the pass-through proxy of every function), DLQ depths.
async fn print_status(runtime: Arc<Runtime>, health: Option<Arc<Injector>>, mut stopped: watch::Receiver<bool>) {
    let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
    let queues: Vec<QueueInfo> = runtime.stack.queues.iter().filter(|q| q.logical_id.contains("DeadLetter")).cloned().collect();
    let mut before = runtime.stats.snapshot();
    let mut last_line = String::new();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(STATUS_EVERY_SECS)) => {}
            _ = stopped.changed() => return,
        }
        let now = runtime.stats.snapshot();
        let mut depths = Vec::new();
        for q in &queues {
            depths.push((q.name.clone(), outbox_local::dlq::depth(&sqs, q).await.unwrap_or(0)));
        }
        let calls = health.as_ref().map(|h| h.health()).unwrap_or_default();
        let line = outbox_local::status::status_line(&before, &now, STATUS_EVERY_SECS as f64, &depths, &calls);
        // Quiet while nothing happens: the same figures are not repeated.
        let figures = line.split_once(" events/s").map(|(_, rest)| rest.to_owned()).unwrap_or_default();
        if figures != last_line {
            eprintln!("{line}");
            last_line = figures;
        }
        before = now;
    }
}

/// Ctrl-C (SIGINT) or SIGTERM, whichever comes first.
async fn wait_for_stop_signal() -> Result<(), String> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(|e| e.to_string())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(|e| e.to_string()),
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map_err(|e| e.to_string())
    }
}

/// Stock for the sample SKUs (`demo::SAMPLE_SKUS`, 1,000 each) where the inventory table has
/// none, so orders sent to `up` or `invoke` can be reserved. Existing stock is left alone.
async fn seed_sample_stock(runtime: &Runtime) {
    match demo::seed_stock(runtime, 1000).await {
        Ok(seeded) if !seeded.is_empty() => eprintln!("seeded stock: 1000 units each of {}", seeded.join(", ")),
        Ok(_) => {}
        Err(e) => eprintln!("warning: could not seed sample stock: {e}"),
    }
}

/// Checks that `logical_id` is a function of `template` that the local runtime can run.
fn check_function(template: &Template, logical_id: &str) -> Result<(), String> {
    let ids = template.function_ids();
    if !ids.iter().any(|id| id == logical_id) {
        return Err(format!("no function {logical_id:?} in {}; functions: {}", template.path.display(), ids.join(", ")));
    }
    let (_, skipped) = template.runnable_functions().map_err(|e| e.to_string())?;
    if skipped.iter().any(|id| id == logical_id) {
        return Err(outbox_local::template::no_binary(logical_id).to_string());
    }
    Ok(())
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    if let Some(endpoint) = &cli.endpoint {
        check_endpoint(endpoint)?;
    }
    let template_path = find_template(cli.template.as_deref())?;
    let root = template_path.parent().map(Path::to_path_buf).unwrap_or_default();
    let stack_name = cli.stack_name.clone().unwrap_or_else(|| default_stack_name(&root));
    let template = Template::load(&template_path).map_err(|e| e.to_string())?;

    match &cli.command {
        Command::Token { sub, scope, ttl } => {
            // The key `up` and `demo` use for this stack (created now when they never ran).
            let issuer = outbox_local::authorizer::LocalIssuer::load_or_create(&state_dir(&root, &stack_name))?;
            println!("{}", issuer.token(sub, scope, *ttl));
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo { orders, json, timeout, keep } => {
            let local = local(&cli, template, &root, &stack_name, !json, None).await?;
            let (stop, stopped) = watch::channel(false);
            let (api, _server) =
                http_api::serve(&local.runtime, SocketAddr::from(([127, 0, 0, 1], 0)), stopped.clone()).await.map_err(|e| e.to_string())?;
            let tasks = local.runtime.spawn_pipelines(stopped)?;
            if !json {
                println!(
                    "outbox demo: stack {stack_name:?} from {} on {} (emulator), HTTP API on http://{api}",
                    template_path.display(),
                    local.endpoint
                );
                let s = &local.runtime.stack;
                println!(
                    "0. stack      provisioned from the template: {} tables, {} bus, {} queues, {} rule(s) with local delivery queues",
                    s.tables.len(),
                    s.buses.len(),
                    s.queues.len(),
                    s.rules.len()
                );
            }
            let options = DemoOptions { orders: *orders, json: *json, events_dir: root.join("events"), timeout: Duration::from_secs(*timeout) };
            let result = demo::run(local.runtime.clone(), api, &options).await;
            if *keep {
                eprintln!("\nthe stack is kept running on {} (emulator), HTTP API on http://{api}; Ctrl-C stops", local.endpoint);
                eprintln!("  dead letters: AWS_ENDPOINT_URL={} cargo run -p outbox-local -- dlq list", local.endpoint);
                eprintln!("  one event:    AWS_ENDPOINT_URL={} cargo run -p outbox-local -- trace <event-id>", local.endpoint);
                if let Err(e) = wait_for_stop_signal().await {
                    eprintln!("warning: {e}");
                }
            }
            let _ = stop.send(true);
            for t in tasks {
                let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
            }
            local.runtime.stop_functions();
            let report = result?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            }
            Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Proof { orders, cancel_every, plan, seed, concurrency, quiet, timeout, json, no_redrive } => {
            let mut plan = match plan.as_str() {
                "default" => FaultPlan::parse(include_str!("../faults/default.toml")).map_err(|e| format!("the default plan: {e}"))?,
                "ci" => FaultPlan::parse(include_str!("../faults/ci.toml")).map_err(|e| format!("the ci plan: {e}"))?,
                "none" => FaultPlan::default(),
                path => FaultPlan::load(Path::new(path)).map_err(|e| e.to_string())?,
            };
            if let Some(seed) = seed {
                plan.seed = *seed;
            }
            if *no_redrive {
                plan.redrive = false;
            }
            let (local, injector) = local_with_faults(&cli, template, &root, &stack_name, !json, None, Some(plan)).await?;
            let injector = injector.ok_or("no fault injector")?;
            let (stop, stopped) = watch::channel(false);
            let (api, _server) =
                http_api::serve(&local.runtime, SocketAddr::from(([127, 0, 0, 1], 0)), stopped.clone()).await.map_err(|e| e.to_string())?;
            let mut tasks = local.runtime.spawn_pipelines(stopped.clone())?;
            let ttl: Vec<_> = injector
                .plan()
                .ttl
                .iter()
                .map(|t| {
                    local
                        .runtime
                        .stack
                        .table(&t.table)
                        .cloned()
                        .map(|spec| (t.clone(), spec))
                        .ok_or(format!("the plan's TTL table {} is not in the template", t.table))
                })
                .collect::<Result<_, _>>()?;
            tasks.extend(outbox_local::faults::ttl::spawn_sweeps(aws_sdk_dynamodb::Client::new(&local.runtime.sdk), ttl, injector.clone(), stopped));
            if !json {
                eprintln!(
                    "outbox proof: stack {stack_name:?} on {} (emulator), HTTP API on http://{api}, {} faults in the plan",
                    local.endpoint,
                    injector.plan().faults.len()
                );
            }
            let options = ProofOptions {
                orders: *orders,
                cancel_every: *cancel_every,
                concurrency: *concurrency,
                json: *json,
                timeout: Duration::from_secs(*timeout),
                quiet: Duration::from_secs(*quiet),
                emulator_pid: local._emulator.as_ref().and_then(Emulator::pid),
            };
            let result = proof::run(local.runtime.clone(), api, injector, &options).await;
            let _ = stop.send(true);
            for t in tasks {
                let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
            }
            local.runtime.stop_functions();
            let report = result?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                print!("{}", proof::format_report(&report));
            }
            Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Up { port } => {
            let named_by = match &cli.stack_name {
                Some(_) => "--stack-name".to_owned(),
                None if root.join("samconfig.toml").is_file() => "samconfig.toml".to_owned(),
                None => "the template directory's name; --stack-name to choose".to_owned(),
            };
            println!("outbox-local up: stack {stack_name:?} ({named_by}) from {}", template_path.display());
            // Every function's AWS calls go through a proxy with no faults, which counts them per
            // service, so the status line can say which service fails and since when.
            let (local, health) = local_with_faults(&cli, template, &root, &stack_name, true, None, Some(FaultPlan::default())).await?;
            let (stop, stopped) = watch::channel(false);
            let (api, server) = http_api::serve(&local.runtime, SocketAddr::from(([127, 0, 0, 1], *port)), stopped.clone())
                .await
                .map_err(|e| format!("port {port}: {e} (choose another with --port)"))?;
            let tasks = local.runtime.spawn_pipelines(stopped.clone())?;
            println!("stack {stack_name:?} is up on {} (emulator)", local.endpoint);
            println!("  HTTP API:   http://{api}");
            for route in http_api::routes(&local.runtime) {
                let auth = if route.jwt { "  (JWT)" } else { "" };
                println!("    {} {} → {}{auth}", route.method, route.path, route.function.spec.logical_id);
            }
            let pipelines = local.runtime.stack.pipelines();
            if pipelines.is_empty() {
                println!("  pipelines:  none (no DynamoDB stream or EventBridge rule events)");
            }
            for (i, pipeline) in pipelines.iter().enumerate() {
                println!("  {:<12}{pipeline}", if i == 0 { "pipelines:" } else { "" });
            }
            let routes = http_api::routes(&local.runtime);
            if routes.iter().any(|r| r.jwt) {
                println!("  token:      TOKEN=$(cargo run -q -p outbox-local -- token --sub alice)   # routes under the JWT authorizer need one");
            }
            if let Some(hint) = http_api::curl_hint(&api.to_string(), routes.iter().map(|r| (r.method.as_str(), r.path.as_str(), r.jwt))) {
                println!("  try:        {hint}");
            }
            println!("  DLQs:       AWS_ENDPOINT_URL={} cargo run -p outbox-local -- dlq list", local.endpoint);
            println!("  practise:   AWS_ENDPOINT_URL={} cargo run -p outbox-local -- dlq practice   # one real dead letter", local.endpoint);
            println!("Ctrl-C stops. A status line every {STATUS_EVERY_SECS} s on stderr.");
            seed_sample_stock(&local.runtime).await;
            let status = tokio::spawn(print_status(local.runtime.clone(), health, stopped.clone()));
            wait_for_stop_signal().await?;
            status.abort();
            let _ = stop.send(true);
            let _ = server.await;
            for t in tasks {
                let _ = tokio::time::timeout(Duration::from_secs(3), t).await;
            }
            local.runtime.stop_functions();
            Ok(ExitCode::SUCCESS)
        }
        Command::Invoke { logical_id, event } => {
            check_function(&template, logical_id)?;
            let payload = if event.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?
            } else {
                std::fs::read_to_string(event).map_err(|e| format!("{}: {e}", event.display()))?
            };
            serde_json::from_str::<serde::de::IgnoredAny>(&payload).map_err(|e| format!("{}: not JSON: {e}", event.display()))?;
            let local = local(&cli, template, &root, &stack_name, false, Some(logical_id)).await?;
            let function = local.runtime.function(logical_id)?;
            seed_sample_stock(&local.runtime).await;
            let invocation = function.invoke(&payload).await;
            local.runtime.stop_functions();
            match invocation.result {
                Ok(response) => {
                    println!("{}", serde_json::to_string_pretty(&response).map_err(|e| e.to_string())?);
                    Ok(ExitCode::SUCCESS)
                }
                Err(d) => {
                    println!("{}", serde_json::json!({"errorType": d.error_type, "errorMessage": d.error_message}));
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Provision => {
            let (_emulator, endpoint, _sdk, s) = provisioned(&cli, template, &stack_name, false).await?;
            println!("stack {stack_name:?} on {endpoint}");
            for t in &s.tables {
                println!(
                    "  table {:<16} {}{}",
                    t.logical_id,
                    t.name,
                    s.stream_arns.get(&t.logical_id).map(|a| format!(" (stream {a})")).unwrap_or_default()
                );
            }
            for b in &s.buses {
                println!("  bus   {:<16} {}", b.logical_id, b.name);
            }
            for q in &s.queues {
                println!("  queue {:<16} {}", q.logical_id, q.url);
            }
            for b in &s.buckets {
                println!("  bucket {:<15} s3://{}", b.logical_id, b.name);
            }
            for r in &s.rules {
                println!("  rule  {} on {} → {} (local delivery queue {})", r.rule_name, r.bus_name, r.function, r.delivery_queue.name);
            }
            if cli.endpoint.is_none() {
                eprintln!("note: the emulator this command started stops now; pass --endpoint to provision a running one");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Trace { event_id, json } => {
            let (sdk, stack) = existing_stack(&cli, template, &stack_name).await?;
            let trace = outbox_local::trace::trace(&sdk, &stack, event_id).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&trace).map_err(|e| e.to_string())?);
            } else {
                print!("{}", trace.render());
            }
            Ok(if trace.found() { ExitCode::SUCCESS } else { ExitCode::from(2) })
        }
        Command::Ordering { command: OrderingCommand::Parked { gap_after, table, json } } => {
            let sdk = target_sdk(&cli).await;
            let (table, _) = ordering_table(&sdk, template, &stack_name, &cli, table.as_deref()).await?;
            let parked = outbox_local::ordering::parked(&aws_sdk_dynamodb::Client::new(&sdk), &table).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&parked).map_err(|e| e.to_string())?);
            } else {
                print!("{}", outbox_local::ordering::format_parked(&parked, *gap_after));
            }
            let gap = parked.iter().any(|p| p.age_secs >= gap_after.as_secs());
            Ok(if gap { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        Command::Webhooks { command } => {
            let (sdk, stack) = existing_stack(&cli, template, &stack_name).await?;
            let operator = outbox_local::webhooks::Operator::new(&sdk, outbox_local::webhooks::WebhookStack::of(&stack)?);
            webhooks(&operator, command).await
        }
        Command::Ordering { command: OrderingCommand::Release { consumer, aggregate, through, table, create } } => {
            let sdk = target_sdk(&cli).await;
            let (table, bus) = ordering_table(&sdk, template, &stack_name, &cli, table.as_deref()).await?;
            let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
            let released = outbox_local::ordering::release(&dynamodb, &table, consumer, aggregate, *through, *create).await?;
            println!("{consumer}: {aggregate} last sequence {} -> {} in {table}", released.before, released.after);
            match bus {
                Some(bus) => {
                    let events = aws_sdk_eventbridge::Client::new(&sdk);
                    let sent =
                        outbox_local::ordering::republish_parked(&dynamodb, &events, &table, consumer, aggregate, released.after, &bus).await?;
                    println!("{sent} parked event(s) behind it re-published to {bus}; the consumer applies them in sequence");
                }
                None => println!("events parked behind it stay parked: no bus known (run without --table to look the stack up)"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Dlq { command } => {
            if let DlqCommand::Practice { allow_aws: false, .. } = command {
                if cli.endpoint.is_none() {
                    return Err(format!(
                        "dlq practice puts a malformed event on the bus: give the emulator's --endpoint (or AWS_ENDPOINT_URL), as `outbox-local up` prints it; against AWS stack {stack_name:?}, add --allow-aws"
                    ));
                }
            }
            let (sdk, stack) = existing_stack(&cli, template, &stack_name).await?;
            let sqs = aws_sdk_sqs::Client::new(&sdk);
            let queues: Vec<_> = stack
                .queues
                .iter()
                .filter(|q| q.logical_id.contains("DeadLetter"))
                .filter(|q| match command {
                    DlqCommand::List { queue: Some(name), .. }
                    | DlqCommand::Redrive { queue: Some(name), .. }
                    | DlqCommand::Purge { queue: Some(name), .. }
                    | DlqCommand::Archive { queue: Some(name), .. } => &q.logical_id == name,
                    _ => true,
                })
                .cloned()
                .collect();
            if queues.is_empty() {
                return Err("no dead-letter queue matches (queues are the template's *DeadLetter* queues)".into());
            }
            match command {
                DlqCommand::Redrive { bus, dry_run, select, force, bucket, queue, watch } => {
                    let bus = match bus {
                        Some(b) => b.clone(),
                        None => stack.buses.first().map(|b| b.name.clone()).ok_or("the template has no event bus; pass --bus")?,
                    };
                    let (replayer, mut buckets) = stream_mappings(&stack, &sdk)?;
                    if let Some(b) = bucket {
                        buckets = vec![b.clone()];
                    }
                    if queue.is_some() {
                        buckets.clear();
                    }
                    let failed_batches = FailedBatches { s3: aws_sdk_s3::Client::new(&sdk), replayer, buckets };
                    let selection = select.selection();
                    let options = dlq::RedriveOptions {
                        bus: &bus,
                        replayer: failed_batches.replayer.as_ref(),
                        dry_run: *dry_run,
                        selection: &selection,
                        force: *force,
                    };
                    // Every consumer's inbox (table, CONSUMER_NAME), where a redriven event shows it applied.
                    let mut inboxes = Vec::new();
                    for f in &stack.functions {
                        let env = stack.environment(f).map_err(|e| e.to_string())?;
                        if let (Some(table), Some(consumer)) = (env.get("INBOX_TABLE"), env.get("CONSUMER_NAME")) {
                            inboxes.push((table.clone(), consumer.clone()));
                        }
                    }
                    let watch = Watch { dynamodb: aws_sdk_dynamodb::Client::new(&sdk), inboxes, timeout: Duration::from_secs(*watch) };
                    dlq_redrive(&sqs, &aws_sdk_eventbridge::Client::new(&sdk), &queues, &failed_batches, &options, &watch).await
                }
                DlqCommand::List { json, queue, select } => {
                    let buckets = if queue.is_some() { Vec::new() } else { s3_destinations(&stack) };
                    dlq_list(&sqs, &queues, &aws_sdk_s3::Client::new(&sdk), &buckets, *json, &select.selection()).await
                }
                DlqCommand::Purge { select, .. } => dlq_purge(&sqs, &queues, &select.selection(), None).await,
                DlqCommand::Archive { file, select, .. } => dlq_purge(&sqs, &queues, &select.selection(), Some(file)).await,
                DlqCommand::Practice { timeout, .. } => {
                    let practice = outbox_local::practice::run(&sdk, &stack, Duration::from_secs(*timeout)).await?;
                    print!("{}", outbox_local::practice::next_steps(&practice, cli.endpoint.as_deref()));
                    Ok(ExitCode::SUCCESS)
                }
                DlqCommand::Show { message_id } => {
                    dlq_show(&sqs, &queues, &aws_sdk_s3::Client::new(&sdk), &s3_destinations(&stack), message_id).await
                }
            }
        }
    }
}

/// The SDK configuration of the verbs that read an existing stack: `--endpoint` (the emulator),
/// else AWS with the ordinary configuration.
async fn target_sdk(cli: &Cli) -> SdkConfig {
    sdk_config(&Target { endpoint: cli.endpoint.clone(), region: region_from_env() }).await
}

/// The account id names are resolved with when looking a stack up: the emulator's, or a
/// placeholder on AWS (queue URLs are looked up by name there).
fn lookup_account(cli: &Cli) -> &'static str {
    if cli.endpoint.is_some() {
        EMULATOR_ACCOUNT
    } else {
        "000000000000"
    }
}

/// The inbox table for the `ordering` verbs (`--table`, else the template's InboxTable in the
/// stack) and the stack's first bus (`None` with `--table`).
async fn ordering_table(
    sdk: &aws_config::SdkConfig,
    template: Template,
    stack_name: &str,
    cli: &Cli,
    table: Option<&str>,
) -> Result<(String, Option<String>), String> {
    if let Some(t) = table {
        return Ok((t.to_owned(), None));
    }
    let stack =
        Stack::set_up(sdk, template, stack_name, lookup_account(cli), Mode::LookUp).await.map_err(|e| format!("{e}\n  hint: pass --table"))?;
    let table = stack.table("InboxTable").map(|t| t.name.clone()).ok_or("the template has no InboxTable; pass --table")?;
    Ok((table, stack.buses.first().map(|b| b.name.clone())))
}

/// The SDK configuration and the names of a stack that already exists: on `--endpoint` (the
/// emulator), else on AWS with the ordinary configuration.
async fn existing_stack(cli: &Cli, template: Template, stack_name: &str) -> Result<(SdkConfig, Stack), String> {
    let sdk = target_sdk(cli).await;
    let stack = Stack::set_up(&sdk, template, stack_name, lookup_account(cli), Mode::LookUp).await.map_err(|e| {
        let hint = match &cli.endpoint {
            Some(url) => format!("is the emulator at {url} running (e.g. `outbox-local up`) and provisioned as stack {stack_name:?}?"),
            None => format!(
                "this talks to AWS (no --endpoint / AWS_ENDPOINT_URL): configure credentials and a region, and check that stack {stack_name:?} is deployed (--stack-name)"
            ),
        };
        format!("{e}\n  hint: {hint}")
    })?;
    Ok((sdk, stack))
}

/// The relay of the stack's stream mapping(s), to replay failed batches with, and their S3
/// on-failure buckets.
fn stream_mappings(stack: &Stack, sdk: &SdkConfig) -> Result<(Option<failed_batch::Replayer>, Vec<String>), String> {
    let mut replayer = None;
    for function in &stack.functions {
        if replayer.is_none() && function.events.iter().any(|e| matches!(e, FunctionEvent::DynamoDb(_))) {
            let env = stack.environment(function).map_err(|e| e.to_string())?;
            replayer = Some(failed_batch::Replayer::new(sdk, env).map_err(|e| format!("{}: {e}", function.logical_id))?);
        }
    }
    Ok((replayer, s3_destinations(stack)))
}

/// The S3 on-failure buckets of the stack's stream mappings.
fn s3_destinations(stack: &Stack) -> Vec<String> {
    let mut buckets = Vec::new();
    for function in &stack.functions {
        for event in &function.events {
            let FunctionEvent::DynamoDb(mapping) = event else { continue };
            let Some(on_failure) = &mapping.on_failure else { continue };
            if let Ok(Destination::S3 { bucket }) = stack.destination(on_failure, &function.logical_id) {
                buckets.push(bucket);
            }
        }
    }
    buckets
}

/// What `dlq redrive` replays besides the queues' messages.
struct FailedBatches {
    s3: aws_sdk_s3::Client,
    replayer: Option<failed_batch::Replayer>,
    buckets: Vec<String>,
}

/// `dlq redrive`: exit code 2 when anything was left in a queue or bucket.
/// Where `dlq redrive` looks for its redriven events afterwards, and for how long.
struct Watch {
    dynamodb: aws_sdk_dynamodb::Client,
    /// (inbox table, consumer name) of every consumer.
    inboxes: Vec<(String, String)>,
    /// Zero: no watching.
    timeout: Duration,
}

async fn dlq_redrive(
    sqs: &aws_sdk_sqs::Client,
    events: &aws_sdk_eventbridge::Client,
    queues: &[QueueInfo],
    failed_batches: &FailedBatches,
    options: &dlq::RedriveOptions<'_>,
    watch: &Watch,
) -> Result<ExitCode, String> {
    let (bus, dry_run) = (options.bus, options.dry_run);
    let mut left = 0;
    let mut redriven_events = Vec::new();
    // The messages there before: a message about a redriven event that is not among them came back.
    let mut before = std::collections::HashSet::new();
    for q in queues {
        before.extend(dlq::peek(sqs, q).await?.into_iter().map(|m| m.message_id));
    }
    let verb = if dry_run { "checking" } else { "redriving" };
    if let Some(replayer) = &failed_batches.replayer {
        for bucket in &failed_batches.buckets {
            let report = failed_batch::redrive_bucket(&failed_batches.s3, replayer, bucket, dry_run, |done, total| {
                eprint!("\r  {verb} s3://{bucket}: {done}/{total}");
            })
            .await?;
            eprintln!();
            let published: usize = report.replayed.iter().map(|(_, n)| n).sum();
            let what = if dry_run { "would replay" } else { "replayed through the relay and deleted" };
            println!("s3://{bucket}: {what} {} failed batch(es) ({published} record(s)); {} left", report.replayed.len(), report.left.len());
            left += print_left(&report.left);
        }
    }
    for q in queues {
        let report = dlq::redrive(sqs, events, q, options, |done, total| {
            eprint!("\r  {verb} {}: {done}/{total}", q.name);
        })
        .await?;
        eprintln!();
        let verb = if dry_run { "would re-publish" } else { "re-published and deleted" };
        println!("{} ({}): {verb} {} message(s) to bus {bus}; {} left", q.logical_id, q.name, report.redriven.len(), report.left.len());
        for (cause, (done, kept)) in &report.by_cause {
            println!("  cause {cause}: {done} {}, {kept} left", if dry_run { "would be redriven" } else { "redriven" });
        }
        left += print_left(&report.left);
        redriven_events.extend(report.event_ids);
    }
    if dry_run || redriven_events.is_empty() || watch.timeout.is_zero() {
        return Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) });
    }
    eprintln!("watching {} redriven event(s) for at most {} s…", redriven_events.len(), watch.timeout.as_secs());
    let watched = dlq::watch(&watch.dynamodb, sqs, &watch.inboxes, queues, &before, &redriven_events, watch.timeout).await?;
    println!(
        "redriven events after {} s at most: {} applied, {} dead-lettered again, {} pending",
        watch.timeout.as_secs(),
        watched.applied.len(),
        watched.dead_lettered_again.len(),
        watched.pending.len()
    );
    for id in &watched.dead_lettered_again {
        println!("  dead-lettered again: {id} (`dlq show`, `trace {id}`)");
    }
    for id in &watched.pending {
        println!("  pending: {id} (still retried, or parked behind its predecessor: `trace {id}`, `ordering parked`)");
    }
    Ok(if !watched.dead_lettered_again.is_empty() {
        ExitCode::FAILURE
    } else if left > 0 || !watched.pending.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

/// Every message of `queues` and failed-batch object of `buckets`, left in place.
async fn dlq_messages(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    s3: &aws_sdk_s3::Client,
    buckets: &[String],
) -> Result<Vec<dlq::DlqMessage>, String> {
    let mut all = Vec::new();
    for q in queues {
        all.extend(dlq::peek(sqs, q).await?);
    }
    for b in buckets {
        all.extend(failed_batch::peek_bucket(s3, b).await?);
    }
    Ok(all)
}

/// `dlq list [--json]`: per queue (and bucket) the count, then the groups by cause, then every message.
async fn dlq_list(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    s3: &aws_sdk_s3::Client,
    buckets: &[String],
    json: bool,
    selection: &dlq::Selection,
) -> Result<ExitCode, String> {
    let all: Vec<_> = dlq_messages(sqs, queues, s3, buckets).await?.into_iter().filter(|m| selection.matches(m)).collect();
    let groups = dlq::group_by_cause(&all);
    if json {
        let shown = serde_json::json!({"groups": groups, "messages": all});
        println!("{}", serde_json::to_string_pretty(&shown).map_err(|e| e.to_string())?);
    } else {
        for q in queues {
            let n = all.iter().filter(|m| m.queue == q.name).count();
            println!("{} ({}): {n} message(s)", q.logical_id, q.name);
        }
        for b in buckets {
            let n = all.iter().filter(|m| m.queue == format!("s3://{b}")).count();
            println!("s3://{b}: {n} failed stream batch(es)");
        }
        if !groups.is_empty() {
            println!("by cause:");
            print!("{}", dlq::format_groups(&groups));
            println!("messages:");
        }
        print!("{}", dlq::format_listing(&all));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints what a `dlq` verb left in place, with why; answers how many.
fn print_left(left: &[(String, String)]) -> usize {
    for (id, why) in left {
        println!("  left {id}: {why}");
    }
    left.len()
}

/// `dlq purge` / `dlq archive <file>`: exit code 2 when a selected message could not be deleted.
async fn dlq_purge(sqs: &aws_sdk_sqs::Client, queues: &[QueueInfo], selection: &dlq::Selection, archive: Option<&Path>) -> Result<ExitCode, String> {
    let mut file = match archive {
        Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?),
        None => None,
    };
    let mut left = 0;
    for q in queues {
        let report = dlq::purge(sqs, q, selection, file.as_mut()).await?;
        let verb = match archive {
            Some(path) => format!("archived to {} and deleted", path.display()),
            None => "deleted".to_owned(),
        };
        println!("{} ({}): {verb} {} message(s); {} left", q.logical_id, q.name, report.deleted.len(), report.left.len());
        left += print_left(&report.left);
    }
    Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// `dlq show <message-id>` (or the key of a failed-batch object).
async fn dlq_show(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    s3: &aws_sdk_s3::Client,
    buckets: &[String],
    message_id: &str,
) -> Result<ExitCode, String> {
    let all = dlq_messages(sqs, queues, s3, buckets).await?;
    let names = || queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>().join(", ");
    let m = all.iter().find(|m| m.message_id == message_id).ok_or_else(|| format!("no message {message_id} in {}", names()))?;
    let body: serde_json::Value = serde_json::from_str(&m.body).unwrap_or(serde_json::Value::String(m.body.clone()));
    let shown = serde_json::json!({
        "queue": m.queue, "message_id": m.message_id, "sent_at": m.sent_at, "receive_count": m.receive_count,
        "shape": m.shape, "event_id": m.event_id, "reason": m.reason, "attributes": m.attributes, "body": body,
    });
    println!("{}", serde_json::to_string_pretty(&shown).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}
