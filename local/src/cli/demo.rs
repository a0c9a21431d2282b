//! `outbox-local demo`: the whole pipeline on the sample inputs, each stage reported.

use std::process::ExitCode;
use std::time::Duration;

use outbox_local::scenarios::demo::{self, DemoOptions};
use outbox_template::Template;

use super::session::{local, wait_for_stop_signal};
use super::Invocation;

/// `demo`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Generated orders on top of the samples in events/.
    #[arg(long, default_value_t = 20)]
    pub orders: usize,
    /// Print only one JSON object with the figures.
    #[arg(long)]
    pub json: bool,
    /// Longest wait for each stage, seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Keep the stack (emulator, HTTP API, pipelines) running after the report, until
    /// Ctrl-C, to inspect its tables and dead letters (`dlq list`, `trace`) with the
    /// printed endpoint.
    #[arg(long)]
    pub keep: bool,
}

/// Runs `demo`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, template: Template, args: &DemoArgs) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let template_path = inv.template_path.as_path();
    let DemoArgs { orders, json, timeout, keep } = args;
    let local = local(cli, template, root, stack_name, !json, None).await?;
    let running = local.start().await?;
    let api = running.api;
    if !json {
        println!("outbox demo: stack {stack_name:?} from {} on {} (emulator), HTTP API on http://{api}", template_path.display(), local.endpoint);
        let s = &local.runtime.stack;
        println!(
            "0. stack      provisioned from the template: {} tables, {} bus, {} queues, {} rule(s) to queues, {} rule(s) invoking a function (local delivery queues)",
            s.tables.len(),
            s.buses.len(),
            s.queues.len(),
            s.queue_rules.len(),
            s.rules.len()
        );
    }
    let options = DemoOptions { orders: *orders, json: *json, events_dir: root.join("events"), timeout: Duration::from_secs(*timeout) };
    let result = demo::run(local.runtime.clone(), api, &options).await;
    if *keep {
        eprintln!("\nthe stack is kept running on {} (emulator), HTTP API on http://{api}; Ctrl-C stops", local.endpoint);
        let run = inv.hint(Some(&local.endpoint));
        eprintln!("  dead letters: {run} dlq list");
        eprintln!("  one event:    {run} trace <event-id>");
        if let Err(e) = wait_for_stop_signal().await {
            eprintln!("warning: {e}");
        }
    }
    running.stop(&local.runtime).await;
    let report = result?;
    if *json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(outbox_local::Error::other("the report as JSON"))?);
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
