//! `outbox-local up`: the stack, the HTTP API and the pipelines until Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use outbox_local::faults::{FaultPlan, Injector};
use outbox_local::runtime::http_api;
use outbox_local::runtime::Runtime;
use outbox_template::stack::QueueInfo;
use outbox_template::Template;
use tokio::sync::watch;

use super::session::{local_with_faults, seed_sample_stock, wait_for_stop_signal};
use super::Invocation;

/// `up`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Port of the local HTTP API.
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
}

/// Runs `up`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, template: Template, args: &UpArgs) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let template_path = inv.template_path.as_path();
    let UpArgs { port } = args;
    let named_by = match &cli.stack_name {
        Some(_) => "--stack-name".to_owned(),
        None if root.join("samconfig.toml").is_file() => "samconfig.toml".to_owned(),
        None => "the template directory's name; --stack-name to choose".to_owned(),
    };
    println!("outbox-local up: stack {stack_name:?} ({named_by}) from {}", template_path.display());
    // Every function's AWS calls go through a proxy with no faults, which counts them per
    // service, so the status line can say which service fails and since when.
    let (local, health) = local_with_faults(cli, template, root, stack_name, true, None, Some(FaultPlan::default())).await?;
    let (stop, stopped) = watch::channel(false);
    let (api, server) = http_api::serve(&local.runtime, SocketAddr::from(([127, 0, 0, 1], *port)), stopped.clone())
        .await
        .map_err(|e| outbox_local::Error::invalid(format!("port {port}: {e} (choose another with --port)")))?;
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
        println!("  token:      TOKEN=$({} token --sub alice)   # routes under the JWT authorizer need one", inv.hint(None));
    }
    if let Some(hint) = http_api::curl_hint(&api.to_string(), routes.iter().map(|r| (r.method.as_str(), r.path.as_str(), r.jwt))) {
        println!("  try:        {hint}");
    }
    let run = inv.hint(Some(&local.endpoint));
    println!("  DLQs:       {run} dlq list");
    println!("  practise:   {run} dlq practice   # one real dead letter");
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

/// Seconds between `up`'s status lines.
const STATUS_EVERY_SECS: u64 = 5;

/// `up`'s status line on stderr every [`STATUS_EVERY_SECS`] while something changed
/// ([`outbox_local::stats::status::status_line`]): events/s, consumer outcomes, latency, failing AWS
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
            depths.push((q.logical_id.clone(), outbox_cli::dlq::depth(&sqs, q).await.unwrap_or(0)));
        }
        let calls = health.as_ref().map(|h| h.health()).unwrap_or_default();
        let line = outbox_local::stats::status::status_line(&before, &now, STATUS_EVERY_SECS as f64, &depths, &calls);
        // Quiet while nothing happens: the same figures are not repeated.
        let figures = line.split_once(" events/s").map(|(_, rest)| rest.to_owned()).unwrap_or_default();
        if figures != last_line {
            eprintln!("{line}");
            last_line = figures;
        }
        before = now;
    }
}
