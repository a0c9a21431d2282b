//! `outbox-local proof`: the pipeline under a fault plan, the invariants checked.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use outbox_local::emulator::Emulator;
use outbox_local::faults::FaultPlan;
use outbox_local::scenarios::books::{self, Detected};
use outbox_local::scenarios::proof::{self, ProofOptions};
use outbox_local::template::Template;

use super::session::local_with_faults;
use super::Invocation;

/// `proof`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ProofArgs {
    /// Orders sent.
    #[arg(long, default_value_t = 200)]
    pub orders: usize,
    /// Cancel every n-th order the API answered for (0: none).
    #[arg(long, default_value_t = 4)]
    pub cancel_every: usize,
    /// The fault plan: `default` (every fault kind), `ci` (what the test command runs),
    /// `none`, or a TOML file (see local/faults/default.toml).
    #[arg(long, default_value = "default")]
    pub plan: String,
    /// Seed of the plan's random decisions (overrides the plan's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds without an AWS call from any function that count as quiet.
    #[arg(long, default_value_t = 8)]
    pub quiet: u64,
    /// Longest wait for the pipeline to go quiet, seconds (each time).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Print only one JSON object with the figures.
    #[arg(long)]
    pub json: bool,
    /// No operator: skip the redrive step even when the plan asks for it, and check that
    /// everything but never-succeeding events took effect on its own.
    #[arg(long)]
    pub no_redrive: bool,
    /// The hot-aggregate scenario as well: N events of ONE aggregate (default 100), types
    /// repeating, one settled by a `Duplicate` fallback, put on the bus shuffled; checks that
    /// the ordered consumer applied all N in sequence order (the sample's books; `--orders 0`
    /// runs it alone).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100", value_parser = clap::value_parser!(u64).range(3..=1000))]
    pub hot_aggregate: Option<u64>,
}

/// Runs `proof`.
///
/// # Errors
/// What failed, as text.
pub async fn run(inv: &Invocation, template: Template, args: &ProofArgs) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let ProofArgs { orders, cancel_every, plan, seed, concurrency, quiet, timeout, json, no_redrive, hot_aggregate } = args;
    let mut plan = match plan.as_str() {
        "default" => FaultPlan::parse(include_str!("../../faults/default.toml")).map_err(outbox_local::Error::other("the default plan"))?,
        "ci" => FaultPlan::parse(include_str!("../../faults/ci.toml")).map_err(outbox_local::Error::other("the ci plan"))?,
        "none" => FaultPlan::default(),
        path => FaultPlan::load(Path::new(path))?,
    };
    if let Some(seed) = seed {
        plan.seed = *seed;
    }
    if *no_redrive {
        plan.redrive = false;
    }
    // The shipped plans name the sample's functions: on another service's template, its producer
    // and consumer take their faults.
    for (sample, ours) in books::stand_ins(&template.function_ids()) {
        let mut moved = 0;
        for fault in plan.faults.iter_mut().filter(|f| f.function.as_deref() == Some(sample)) {
            fault.function = Some(ours.to_owned());
            moved += 1;
        }
        if moved > 0 && !json {
            eprintln!("outbox proof: the plan's {moved} fault(s) of {sample} apply to {ours}");
        }
    }
    let (local, injector) = local_with_faults(cli, template, root, stack_name, !json, None, Some(plan)).await?;
    let injector = injector.ok_or_else(|| outbox_local::Error::expectation("no fault injector"))?;
    // The service's books, chosen by the template's functions (the sample's, or my-service's).
    let books = books::detect(&local.runtime)?;
    // A fault for a function the template does not have would never apply: refuse the plan.
    for fault in &injector.plan().faults {
        if let Some(Err(e)) = fault.function.as_deref().map(|f| local.runtime.function(f)) {
            return Err(outbox_local::Error::invalid(format!("the plan's fault {}: {e}", fault.label())));
        }
    }
    let mut running = local.start().await?;
    let api = running.api;
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
                .ok_or_else(|| outbox_local::Error::invalid(format!("the plan's TTL table {} is not in the template", t.table)))
        })
        .collect::<outbox_local::Result<_>>()?;
    let sweeps =
        outbox_local::faults::ttl::spawn_sweeps(aws_sdk_dynamodb::Client::new(&local.runtime.sdk), ttl, injector.clone(), running.stopped.clone());
    running.tasks.extend(sweeps);
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
        hot_aggregate: hot_aggregate.map(|n| n as usize),
    };
    let result = match &books {
        Detected::Orders(books) => proof::run(local.runtime.clone(), api, injector, &options, books).await,
        Detected::Customers(books) => proof::run(local.runtime.clone(), api, injector, &options, books).await,
    };
    running.stop(&local.runtime).await;
    let report = result?;
    if *json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(outbox_local::Error::other("the report as JSON"))?);
    } else {
        print!("{}", proof::format_report(&report));
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
