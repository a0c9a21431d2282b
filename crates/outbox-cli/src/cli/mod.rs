//! The operator's verbs as commands: one file per verb family, the same commands in `outbox`
//! (production first: ordinary AWS configuration, `--stack` or `--template`) and in
//! `outbox-local` (the emulator, the template beside it).

pub mod dlq;
pub mod ordering;
pub mod replay;
pub mod webhooks;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use aws_config::SdkConfig;
use clap::Subcommand;

use crate::resources::Resources;
use crate::trace::Lookup;
use crate::{Error, Result};

/// What every verb works on.
#[derive(Debug, Clone)]
pub struct Context {
    /// The SDK configuration (AWS, or the emulator's endpoint).
    pub sdk: SdkConfig,
    /// The stack's resources.
    pub resources: Resources,
    /// `--yes`: destructive verbs do not ask.
    pub yes: bool,
}

/// Says what a destructive verb will do and asks on the terminal, unless `--yes`.
///
/// # Errors
/// [`Error::NotConfirmed`]: the person said no, or stdin is not a terminal and `--yes` was not
/// given; [`Error::Io`]: stdin could not be read.
pub fn confirm(context: &Context, what: &str) -> Result<()> {
    if context.yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::NotConfirmed(format!(
            "this would {what}; not a terminal, so nothing was done: pass --yes to do it (or --dry-run where it applies)"
        )));
    }
    eprint!("this will {what} ({}).\nproceed? [y/N] ", context.resources.source);
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer).map_err(Error::io("stdin"))?;
    match answer.trim() {
        "y" | "Y" | "yes" => Ok(()),
        _ => Err(Error::NotConfirmed("nothing done".into())),
    }
}

/// `--limit`: how far a verb that must scan reads.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ScanLimit {
    /// Read at most this many items per table (a Scan reads, and is billed for, every item it
    /// passes, whatever it keeps); 0: the whole table.
    #[arg(long, default_value_t = 100_000)]
    pub limit: u64,
}

impl ScanLimit {
    /// The bound, `None` for the whole table.
    pub fn bound(self) -> Option<u64> {
        (self.limit > 0).then_some(self.limit)
    }

    /// Says on stderr that `what` scans, and how far.
    pub fn announce(self, what: &str) {
        match self.bound() {
            Some(n) => eprintln!("{what}: a Scan (reads every item, at most {n} per table: --limit)…"),
            None => eprintln!("{what}: a Scan (reads every item: --limit 0)…"),
        }
    }

    /// Ends the progress line; says where a scan stopped when it did not read everything.
    pub fn finish(self, read: u64, complete: bool) {
        eprintln!();
        if !complete {
            eprintln!("stopped after {read} item(s) (--limit {}): the answer covers those only; pass a larger --limit, or 0, to read on", self.limit);
        }
    }
}

/// A scan's progress on stderr, on one line: `scanning <table>: <n> item(s) read, <k> kept`.
pub fn scan_progress(table: &str, read: u64, kept: usize) {
    eprint!("\r  scanning {table}: {read} item(s) read, {kept} kept");
}

/// `trace`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// The event id (the outbox item's `event_id`, the EventBridge event's `detail.metadata.id`).
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub event_id: String,
    /// The event's aggregate, `<aggregate_type>#<aggregate_id>` (e.g. Order#o-1001): with
    /// --sequence, the outbox item and a parked row are read by key (by default they are found
    /// by the outbox table's event-id index).
    #[arg(long, requires = "sequence")]
    pub aggregate: Option<String>,
    /// The event's sequence within its aggregate.
    #[arg(long, requires = "aggregate")]
    pub sequence: Option<u64>,
    /// The last resort for an outbox table without the event-id index: find the outbox item by
    /// scanning the outbox tables (reads items until it meets the event; a filtered `Scan` of
    /// the inbox table for a parked row too).
    #[arg(long, conflicts_with = "aggregate")]
    pub scan: bool,
    /// One JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// The operator's verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum Operator {
    /// Dead letters: list grouped by cause, show, redrive (replaying failed stream batches),
    /// purge, archive.
    Dlq {
        #[allow(missing_docs)] // clap shows the variant's doc
        #[command(subcommand)]
        command: dlq::DlqCommand,
    },
    /// Where is event X? Its outbox item, each consumer's inbox row, and any dead letter holding
    /// it; its trace id and the timeline of the stored times, with the gaps between stages.
    Trace(TraceArgs),
    /// Webhook deliveries: a delivery's attempts, resend one event, recover what a subscriber
    /// missed, re-enable a disabled subscriber.
    Webhooks {
        #[allow(missing_docs)] // clap shows the variant's doc
        #[command(subcommand)]
        command: webhooks::WebhooksCommand,
    },
    /// Per-aggregate ordering of ordered consumers: parked events, releasing a sequence gap.
    Ordering {
        #[allow(missing_docs)] // clap shows the variant's doc
        #[command(subcommand)]
        command: ordering::OrderingCommand,
    },
    /// Re-deliver the events of a time window to one consumer (or every consumer): from the
    /// bus's archive to its rules, followed to the end; on a Custom Event Bus, through a replay
    /// subscriber (`--cleanup` removes the finished ones). The inboxes absorb what was applied.
    Replay(replay::ReplayArgs),
}

/// Runs `command` on the stack of `context`.
///
/// # Errors
/// What failed ([`Error`]).
pub async fn run(context: &Context, command: &Operator) -> Result<ExitCode> {
    match command {
        Operator::Dlq { command } => dlq::run(context, command).await,
        Operator::Webhooks { command } => webhooks::run(context, command).await,
        Operator::Ordering { command } => ordering::run(context, command).await,
        Operator::Replay(args) => replay::run(context, args).await,
        Operator::Trace(args) => trace(context, args, |_| {}).await,
    }
}

/// `trace`: the event's trace, with `add` making its additions (`outbox-local trace` adds the
/// stages the local runtime recorded), printed as lines or JSON; exit code 2 when the event is
/// found nowhere.
///
/// # Errors
/// What failed ([`Error`]).
pub async fn trace(context: &Context, args: &TraceArgs, add: impl FnOnce(&mut crate::trace::Trace)) -> Result<ExitCode> {
    let TraceArgs { event_id, aggregate, sequence, scan, json } = args;
    let lookup = match (aggregate, sequence, scan) {
        (Some(aggregate), Some(sequence), _) => Lookup::Key { aggregate: aggregate.clone(), sequence: *sequence },
        (_, _, true) => {
            eprintln!("scanning the outbox tables for event {event_id} (--scan: reads items until it meets the event)…");
            Lookup::Scan
        }
        _ => Lookup::Index,
    };
    let mut trace = crate::trace::trace(&context.sdk, &context.resources, event_id, &lookup).await?;
    add(&mut trace);
    if *json {
        println!("{}", serde_json::to_string_pretty(&trace)?);
    } else {
        print!("{}", trace.render());
    }
    Ok(if trace.found() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Where the stack's resources come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A deployed CloudFormation stack (name or ARN).
    Stack(String),
    /// A template, its names resolved as stack `stack_name`.
    Template {
        /// The template.
        path: PathBuf,
        /// The stack name its `${AWS::StackName}` resolves to.
        stack_name: String,
        /// The account id its ARNs are built with.
        account: String,
        /// Its parameters as deployed (`--parameter-overrides`, as `sam deploy`): `(name, value)`.
        overrides: Vec<(String, String)>,
    },
}

/// The resources of `source`.
///
/// # Errors
/// The stack or template cannot be read ([`Error::Discovery`], [`Error::Template`]), or a
/// lookup failed ([`Error::Stack`]).
pub async fn resources(sdk: &SdkConfig, source: &Source) -> Result<Resources> {
    match source {
        Source::Stack(name) => Ok(crate::cloudformation::discover(&crate::cloudformation::Clients::new(sdk), name).await?),
        Source::Template { path, stack_name, account, overrides } => {
            let template = outbox_template::Template::load_with_overrides(path, overrides)?;
            let stack = outbox_template::stack::Stack::look_up(sdk, template, stack_name, account).await?;
            Ok(Resources::from_stack(&stack)?)
        }
    }
}
