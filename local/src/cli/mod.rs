//! `outbox-local`'s command line: one file per verb; [`session`] holds what they share.

pub(crate) mod demo;
pub(crate) mod invoke;
pub(crate) mod operator;
pub(crate) mod proof;
pub(crate) mod provision;
pub(crate) mod session;
pub(crate) mod token;
pub(crate) mod up;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outbox_cli::aws::check_endpoint;
use outbox_cli::cli::Operator;
use outbox_template::stack::default_stack_name;
use outbox_template::Template;

use operator::LocalDlq;

#[derive(Debug, Parser)]
#[command(name = "outbox-local", version, about = "Run the outbox pipeline of template.yaml locally on the moto AWS emulator")]
pub(crate) struct Cli {
    /// SAM template to read (default: template.yaml in this directory or the nearest parent).
    #[arg(long, global = true)]
    pub template: Option<PathBuf>,
    /// Stack name, one CloudFormation accepts (a letter, then letters, digits and hyphens, at most
    /// 128): resource names derive from it as on AWS (docs/local-runtime.md, "Names"; default:
    /// stack_name of samconfig.toml beside the template, else the template directory's name).
    #[arg(long, global = true)]
    pub stack_name: Option<String>,
    /// AWS endpoint of a running emulator, e.g. http://127.0.0.1:5000 (also AWS_ENDPOINT_URL).
    #[arg(long, global = true, env = "AWS_ENDPOINT_URL")]
    pub endpoint: Option<String>,
    /// Show the functions' output and the runtime's logs (info level) on stderr.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Do not build the functions' binaries; run the prebuilt `<target dir>/debug/<Binary>`
    /// (also OUTBOX_LOCAL_NO_BUILD=1).
    #[arg(long, global = true, env = "OUTBOX_LOCAL_NO_BUILD", value_parser = clap::builder::FalseyValueParser::new())]
    pub no_build: bool,
    /// The cargo target directory: the functions' binaries are `<DIR>/debug/<Binary>` (built
    /// there, or prebuilt with --no-build). Default: cargo's for each function's Cargo workspace
    /// (its CodeUri's; with --no-build, CARGO_TARGET_DIR when it is an absolute path).
    #[arg(long, global = true, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// Environment variables on top of the template's, per function (the JSON of `sam local
    /// invoke --env-vars`; default: local/env.json beside the template, when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub env_vars: Option<PathBuf>,
    /// Most instances of one function at once, unless it sets ReservedConcurrentExecutions.
    #[arg(long, global = true, default_value_t = 4)]
    pub max_instances: usize,
    /// Compress retry waits to milliseconds (asynchronous invocation: 200 ms, 400 ms instead of
    /// Lambda's ~1 min, 2 min). `demo` and `proof` always compress, and say so.
    #[arg(long, global = true, env = "OUTBOX_LOCAL_COMPRESS_RETRIES", value_parser = clap::builder::FalseyValueParser::new())]
    pub compress_retries: bool,
    /// Override the root template's parameters, as `sam deploy --parameter-overrides`:
    /// `Key=Value`, checked against each parameter's AllowedValues (e.g. `--parameter-overrides
    /// EventBusType=Custom`); several in one quoted value (`"A=1 B=2"`) or by repeating the flag
    /// (one value per flag, so a verb may follow).
    #[arg(long, global = true, value_name = "KEY=VALUE", action = clap::ArgAction::Append, value_parser = parse_overrides)]
    pub parameter_overrides: Vec<Vec<(String, String)>>,
    /// What a FIFO subscriber of the Custom Event Bus holds up when a delivery fails: the later
    /// events of its event group (`group`, "Within a FIFO subscriber, an event that cannot be
    /// delivered holds up the later events in its own group while other groups continue", user
    /// guide eb-custom-bus-ordering) or every later event of the subscriber (`subscriber`).
    #[arg(long, global = true, value_enum, default_value_t = outbox_local::custom_bus::FifoBlocking::Group)]
    pub fifo_blocking: outbox_local::custom_bus::FifoBlocking,
    /// The operator's destructive verbs (`dlq redrive|purge|archive`, `ordering release`,
    /// `webhooks resend|recover|enable`, `replay`) do not ask.
    #[arg(long, short = 'y', global = true)]
    pub yes: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the whole pipeline on the sample inputs and report each stage.
    Demo(demo::DemoArgs),
    /// Provision the stack, serve the HTTP API and run the pipelines until Ctrl-C.
    Up(up::UpArgs),
    /// Print a token of the local issuer (what `up` and `demo` accept on routes under the
    /// template's JWT authorizer): `curl -H "authorization: Bearer $(outbox-local token --sub alice)"`.
    Token(token::TokenArgs),
    /// Invoke one function with one event (like `sam local invoke -e`); response on stdout.
    Invoke(invoke::InvokeArgs),
    /// Dead letters (the `outbox` binary's verbs, on this template's stack): list, show,
    /// redrive, purge, archive; and `practice`.
    Dlq {
        #[command(subcommand)]
        command: LocalDlq,
    },
    /// Create the stack's tables, bus, queues and rules on --endpoint, print them, and exit.
    Provision,
    /// Where is event X? (the `outbox` binary's `trace`, on this template's stack; its timeline
    /// adds the publish and delivery times the local runtime recorded)
    Trace(outbox_cli::cli::TraceArgs),
    /// Webhook deliveries (the `outbox` binary's `webhooks`, on this template's stack).
    Webhooks {
        #[command(subcommand)]
        command: outbox_cli::cli::webhooks::WebhooksCommand,
    },
    /// Per-aggregate ordering of ordered consumers (the `outbox` binary's `ordering`).
    Ordering {
        #[command(subcommand)]
        command: outbox_cli::cli::ordering::OrderingCommand,
    },
    /// Re-deliver a time window to a consumer: from the classic bus's archive to its rules, or
    /// on the Custom Event Bus through a replay subscriber from a point in time (the `outbox`
    /// binary's `replay`, on this template's stack; the emulator and the local runtime play both).
    Replay(outbox_cli::cli::replay::ReplayArgs),
    /// Send the service's requests (its books file, outbox-books.yaml beside the template: the
    /// sample's orders and cancellations) under a fault plan, redrive the dead-letter queues once
    /// if the plan says so (never with --no-redrive), and check the invariants from the tables
    /// and queues; exits 1 when one is broken.
    Proof(proof::ProofArgs),
}

/// The `Key=Value` pairs of one `--parameter-overrides` value (separated by spaces).
fn parse_overrides(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => Err(format!("{pair:?}: expected Key=Value (as sam deploy --parameter-overrides)")),
        })
        .collect()
}

/// One run of the command: its arguments, the template and the stack name.
pub(crate) struct Invocation {
    /// The arguments.
    pub cli: Cli,
    /// The template.
    pub template_path: PathBuf,
    /// The template's directory.
    pub root: PathBuf,
    /// The stack name.
    pub stack_name: String,
}

impl Invocation {
    /// The command its hints print to run this program again on the same template and stack,
    /// with `AWS_ENDPOINT_URL=<endpoint>` when given: [`outbox_local::hint::command`] with the
    /// `--template` and `--stack-name` the user passed (the verb follows).
    pub(crate) fn hint(&self, endpoint: Option<&str>) -> String {
        outbox_local::hint::command(&outbox_local::hint::program(), self.cli.template.as_deref(), self.cli.stack_name.as_deref(), endpoint)
    }
}

/// Runs the command `cli` names.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(cli: Cli) -> outbox_local::Result<ExitCode> {
    if let Some(endpoint) = &cli.endpoint {
        check_endpoint(endpoint)?;
    }
    let template_path = session::find_template(cli.template.as_deref())?;
    let root = template_path.parent().map(Path::to_path_buf).unwrap_or_default();
    let stack_name = cli.stack_name.clone().unwrap_or_else(|| default_stack_name(&root));
    // Before anything starts or is written (the emulator, the issuer's key under .local/<stack>/):
    // a name CloudFormation refuses is refused here, for every command.
    outbox_template::names::check_stack_name(&stack_name)?;
    let overrides: Vec<(String, String)> = cli.parameter_overrides.iter().flatten().cloned().collect();
    let template = Template::load_with_overrides(&template_path, &overrides)?;
    let inv = Invocation { cli, template_path, root, stack_name };
    match &inv.cli.command {
        Command::Token(args) => token::run(&inv, template, args).await,
        Command::Demo(args) => demo::run(&inv, template, args).await,
        Command::Proof(args) => proof::run(&inv, template, args).await,
        Command::Up(args) => up::run(&inv, template, args).await,
        Command::Invoke(args) => invoke::run(&inv, template, args).await,
        Command::Provision => provision::run(&inv, template).await,
        Command::Dlq { command: LocalDlq::Practice { allow_aws, timeout } } => operator::practice(&inv, template, *allow_aws, *timeout).await,
        Command::Dlq { command: LocalDlq::Operator(command) } => operator::operate(&inv, template, Operator::Dlq { command: command.clone() }).await,
        Command::Trace(args) => operator::operate(&inv, template, Operator::Trace(args.clone())).await,
        Command::Webhooks { command } => operator::operate(&inv, template, Operator::Webhooks { command: command.clone() }).await,
        Command::Ordering { command } => operator::operate(&inv, template, Operator::Ordering { command: command.clone() }).await,
        Command::Replay(args) => operator::operate(&inv, template, Operator::Replay(args.clone())).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    #[test]
    fn parameter_overrides_take_one_value_per_flag_so_a_verb_follows() {
        let cli =
            Cli::try_parse_from(["outbox-local", "--parameter-overrides", "EventBusType=Custom", "--parameter-overrides", "A=1 B=2", "provision"])
                .expect("parsed");
        let overrides: Vec<(String, String)> = cli.parameter_overrides.into_iter().flatten().collect();
        assert_eq!(overrides, [("EventBusType".into(), "Custom".into()), ("A".into(), "1".into()), ("B".into(), "2".into())]);
        assert!(matches!(cli.command, Command::Provision));
        assert_eq!(cli.fifo_blocking, outbox_local::custom_bus::FifoBlocking::Group);
        let err = Cli::try_parse_from(["outbox-local", "--parameter-overrides", "Custom", "provision"]).expect_err("no =").to_string();
        assert!(err.contains("expected Key=Value"), "{err}");
        let cli = Cli::try_parse_from(["outbox-local", "--fifo-blocking", "subscriber", "provision"]).expect("parsed");
        assert_eq!(cli.fifo_blocking, outbox_local::custom_bus::FifoBlocking::Subscriber);
    }
}
