//! `outbox-local proof`: the pipeline under a fault plan, the invariants checked.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use outbox_local::emulator::Emulator;
use outbox_local::faults::FaultPlan;
use outbox_local::scenarios::books::Books;
use outbox_local::scenarios::proof::{self, ProofOptions};
use outbox_template::Template;

use super::session::local_with_faults;
use super::Invocation;

/// `proof`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ProofArgs {
    /// Requests sent (orders, for the sample), as the books file says.
    #[arg(long, default_value_t = 200)]
    pub orders: usize,
    /// Undo (cancel) every n-th accepted request (0: none); default: the books file's
    /// `undo.every`.
    #[arg(long)]
    pub cancel_every: Option<usize>,
    /// The service's books file: what to send and what each request must leave in the tables
    /// (default: outbox-books.yaml beside the template; docs/local-runtime.md, "The books file").
    #[arg(long, value_name = "FILE")]
    pub books: Option<std::path::PathBuf>,
    /// The fault plan: `default` (every fault kind), `ci` (what the test command runs),
    /// `none`, or a TOML file (see local/faults/default.toml); its functions are roles
    /// (`producer`, `consumer`, `relay`) the books file resolves, or logical ids.
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
    /// The hot-aggregate scenario as well: N events of ONE aggregate (default 100), as the
    /// books file's `hot_aggregate` says (the sample's: types repeating, one settled by a
    /// `Duplicate` fallback), put on the bus shuffled; checks that the ordered consumer applied
    /// all N in sequence order (`--orders 0` runs it alone).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "100", value_parser = clap::value_parser!(u64).range(3..=1000))]
    pub hot_aggregate: Option<u64>,
}

/// Runs `proof`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, template: Template, args: &ProofArgs) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let root = inv.root.as_path();
    let stack_name = inv.stack_name.as_str();
    let ProofArgs { orders, cancel_every, books, plan, seed, concurrency, quiet, timeout, json, no_redrive, hot_aggregate } = args;
    // The service's books, beside the template (or --books): read before anything starts, so a
    // missing or bad file costs no emulator.
    let books = Books::load(&template.path, books.as_deref())?;
    let (functions, _) = template.runnable_functions().map_err(outbox_local::Error::from)?;
    let roles = books.roles(&functions)?;
    let plan_name = plan.as_str();
    let mut plan = match plan_name {
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
    // The plan names functions by role (the shipped ones only so): the books file says which.
    let resolved = plan.resolve_roles(&roles).map_err(|e| outbox_local::Error::invalid(format!("the plan {plan_name}: {e}")))?;
    if !json && !resolved.is_empty() {
        eprintln!("outbox proof: books {}; the plan's roles: {}", books.path.display(), resolved.join("; "));
    }
    let outbox_table = roles.outbox_table.clone().ok_or_else(|| {
        outbox_local::Error::invalid(format!("the proof reads the outbox table's stream, which the relay reads, but {}", roles.why_no_relay))
    })?;
    let (local, injector) = local_with_faults(cli, template, root, stack_name, !json, None, Some(plan)).await?;
    let injector = injector.ok_or_else(|| outbox_local::Error::expectation("no fault injector"))?;
    // The books' functions are the template's.
    for function in std::iter::once(&books.file.producer).chain(books.consumers()) {
        local.runtime.function(function).map_err(|e| outbox_local::Error::invalid(format!("{}: {e}", books.path.display())))?;
    }
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
        relay: roles.relay.clone(),
    };
    let result = proof::run(local.runtime.clone(), api, injector, &options, &books, &outbox_table).await;
    running.stop(&local.runtime).await;
    let report = result?;
    if *json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(outbox_local::Error::other("the report as JSON"))?);
    } else {
        print!("{}", proof::format_report(&report));
    }
    Ok(if report.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
