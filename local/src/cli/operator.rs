//! The operator's verbs on this template's stack: `dlq`, `trace`, `webhooks`, `ordering`, `replay` are the
//! `outbox` binary's (crate `outbox-cli`: one implementation); `dlq practice` is the local
//! runtime's own.

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use outbox_cli::cli::{Context, Operator};
use outbox_template::Template;

use outbox_local::journal::Journal;

use super::session::{existing_stack, state_dir};
use super::Invocation;

/// `dlq`: the operator's verbs (the `outbox` binary's) and `practice`, which makes a dead letter
/// on a running local stack.
#[derive(Debug, Subcommand)]
pub(crate) enum LocalDlq {
    #[command(flatten)]
    Operator(outbox_cli::cli::dlq::DlqCommand),
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
}

/// `dlq practice`: one real dead letter on a running local stack.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn practice(inv: &Invocation, template: Template, allow_aws: bool, timeout: u64) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let stack_name = inv.stack_name.as_str();
    if !allow_aws && cli.endpoint.is_none() {
        return Err(outbox_local::Error::expectation(format!(
            "dlq practice puts a malformed event on the bus: give the emulator's --endpoint (or AWS_ENDPOINT_URL), as `outbox-local up` prints it; against AWS stack {stack_name:?}, add --allow-aws"
        )));
    }
    let (sdk, stack) = existing_stack(cli, template, stack_name).await?;
    let practice = outbox_local::scenarios::practice::run(&sdk, &stack, Duration::from_secs(timeout)).await?;
    print!("{}", outbox_local::scenarios::practice::next_steps(&practice, &inv.hint(cli.endpoint.as_deref())));
    Ok(ExitCode::SUCCESS)
}

/// Runs one of the operator's verbs on this template's stack (`--endpoint`: the emulator; else
/// AWS with the ordinary configuration). `trace` adds the stages the local runtime recorded
/// in its timeline journal ([`outbox_local::journal`]).
pub(crate) async fn operate(inv: &Invocation, template: Template, command: Operator) -> outbox_local::Result<ExitCode> {
    let (sdk, stack) = existing_stack(&inv.cli, template, &inv.stack_name).await?;
    let resources = outbox_cli::resources::Resources::from_stack(&stack).map_err(outbox_local::Error::other("the stack's resources"))?;
    let context = Context { sdk, resources, yes: inv.cli.yes };
    match &command {
        Operator::Trace(args) => {
            let state_dir = state_dir(&inv.root, &inv.stack_name);
            Ok(outbox_cli::cli::trace(&context, args, |trace| trace.add_stages(Journal::stages_of(&state_dir, &args.event_id))).await?)
        }
        _ => Ok(outbox_cli::cli::run(&context, &command).await?),
    }
}
