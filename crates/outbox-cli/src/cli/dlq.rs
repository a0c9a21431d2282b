//! `outbox dlq list|show|redrive|purge|archive`: the stack's dead-letter queues and the relay's
//! failed stream batches ([`crate::dlq`], [`crate::failed_batch`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

use super::{confirm, Context};
use crate::dlq;
use crate::failed_batch;
use crate::{Error, Result};
use outbox_template::stack::QueueInfo;

/// The dead-letter verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum DlqCommand {
    /// List the messages of the dead-letter queues, grouped by failure cause (left in the queues).
    List {
        #[allow(missing_docs)] // clap shows the flattened arguments' own docs
        #[command(flatten)]
        scope: Scope,
        #[allow(missing_docs)]
        #[command(flatten)]
        output: Output,
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
        #[allow(missing_docs)]
        #[command(flatten)]
        scope: Scope,
        /// The S3 on-failure bucket of the relay's mapping: logical id, name, `s3://name` or ARN
        /// (default: the stream mappings' on-failure buckets).
        #[arg(long)]
        bucket: Option<String>,
        /// The bus to re-publish to: logical id, name or ARN, classic or Custom (default: the
        /// stack's Custom Event Bus when it has one, since its subscribers feed the consumers,
        /// else its first event bus).
        #[arg(long)]
        bus: Option<String>,
        #[allow(missing_docs)]
        #[command(flatten)]
        dry_run: DryRun,
        /// Redrive messages whose cause is permanent (malformed, payload conflict, rejected) too:
        /// only after fixing what made them fail.
        #[arg(long)]
        force: bool,
        /// After re-publishing, watch the redriven events this many seconds and report how many
        /// were applied, dead-lettered again or are still pending (0: do not watch). Exits 1
        /// when one came back, 2 when one is still pending or left.
        #[arg(long, default_value_t = 60)]
        watch: u64,
        #[allow(missing_docs)]
        #[command(flatten)]
        output: Output,
    },
    /// Delete the selected messages (all of them without a filter).
    Purge {
        #[allow(missing_docs)]
        #[command(flatten)]
        scope: Scope,
        #[allow(missing_docs)]
        #[command(flatten)]
        dry_run: DryRun,
        #[allow(missing_docs)]
        #[command(flatten)]
        output: Output,
    },
    /// Append the selected messages to FILE (JSON lines, bodies included), then delete them.
    Archive {
        /// The file to append to.
        file: PathBuf,
        #[allow(missing_docs)]
        #[command(flatten)]
        scope: Scope,
        #[allow(missing_docs)]
        #[command(flatten)]
        dry_run: DryRun,
    },
}

/// Which queue, and which of its messages: what every verb that acts on messages takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Scope {
    /// Only this queue: its logical id (e.g. ConsumerDeadLetterQueue), name, URL or ARN; the
    /// on-failure buckets are skipped.
    #[arg(long)]
    pub queue: Option<String>,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub select: SelectArgs,
}

/// `--dry-run`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct DryRun {
    /// Say what would be done; send, write and delete nothing.
    #[arg(long = "dry-run")]
    pub on: bool,
}

/// `--json`.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Output {
    /// One JSON object on stdout instead of lines for people (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

/// Which dead-letter messages a `dlq` verb acts on (all conditions hold).
#[derive(Debug, Clone, clap::Args)]
pub struct SelectArgs {
    /// Only these messages: SQS message id or event id (repeatable).
    #[arg(long = "id")]
    ids: Vec<String>,
    /// Only this failure cause, as `dlq list` groups them (e.g. MalformedEvent, SequenceGap).
    #[arg(long, alias = "reason")]
    cause: Option<String>,
    /// Only messages older than this: a number and s, m, h or d (e.g. 30m, 7d).
    #[arg(long, value_parser = crate::dlq::parse_age)]
    older_than: Option<Duration>,
}

impl SelectArgs {
    /// The selection these options make.
    pub fn selection(&self) -> dlq::Selection {
        dlq::Selection { ids: self.ids.clone(), cause: self.cause.clone(), older_than: self.older_than }
    }
}

/// `dlq …` on the stack of `context`.
///
/// # Errors
/// What failed ([`Error`]).
pub async fn run(context: &Context, command: &DlqCommand) -> Result<ExitCode> {
    let (sdk, resources) = (&context.sdk, &context.resources);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let s3 = aws_sdk_s3::Client::new(sdk);
    let only = match command {
        DlqCommand::List { scope, .. } | DlqCommand::Redrive { scope, .. } | DlqCommand::Purge { scope, .. } | DlqCommand::Archive { scope, .. } => {
            scope.queue.as_deref()
        }
        DlqCommand::Show { .. } => None,
    };
    let queues = match only {
        Some(given) => vec![resources.dead_letter_queue(given)?],
        None => resources.dead_letter_queues(),
    };
    // With --queue, that queue alone: the buckets are skipped.
    let buckets = if only.is_some() { Vec::new() } else { resources.failure_buckets() };
    if queues.is_empty() && buckets.is_empty() {
        return Err(Error::missing(
            &resources.source,
            "dead-letter queue (a queue whose logical id has DeadLetter or Dlq) and no on-failure bucket",
            "",
        ));
    }
    match command {
        DlqCommand::Redrive { scope: Scope { select, .. }, bus, dry_run: DryRun { on: dry_run }, force, bucket, watch, output } => {
            let resources = &crate::republisher::with_located_custom_buses(sdk, resources).await?;
            let republisher = crate::republisher::Republisher::for_stack(sdk, resources, bus.as_deref())?;
            let bus = republisher.bus().to_owned();
            let buckets = match bucket {
                Some(given) => vec![resources.bucket(given)?.name.clone()],
                None => buckets,
            };
            let replayer = match resources.functions.iter().find(|f| !f.stream_tables.is_empty()) {
                Some(f) => {
                    Some(failed_batch::Replayer::new(sdk, f.environment.clone()).map_err(Error::library(format!("the relay of {}", f.logical_id)))?)
                }
                None => None,
            };
            if !dry_run {
                let mut what: Vec<String> = Vec::new();
                for q in &queues {
                    what.push(format!("{} ({} message(s))", q.name, dlq::depth(&sqs, q).await?));
                }
                what.extend(buckets.iter().map(|b| format!("s3://{b}")));
                let scope = if select.selection().is_filtered() { "the selected messages" } else { "every message" };
                confirm(context, &format!("re-publish {scope} of {} to bus {bus} and delete what the bus accepts", what.join(", ")))?;
            }
            let failed_batches = FailedBatches { s3, replayer, buckets };
            let selection = select.selection();
            let options = dlq::RedriveOptions {
                bus: &republisher,
                replayer: failed_batches.replayer.as_ref(),
                dry_run: *dry_run,
                selection: &selection,
                force: *force,
            };
            let watch = Watch { dynamodb: aws_sdk_dynamodb::Client::new(sdk), inboxes: resources.inboxes(), timeout: Duration::from_secs(*watch) };
            redrive(&sqs, &queues, &failed_batches, &options, &watch, output.json).await
        }
        DlqCommand::List { scope, output } => list(&sqs, &queues, &s3, &buckets, output.json, &scope.select.selection()).await,
        DlqCommand::Purge { scope: Scope { select, .. }, dry_run: DryRun { on: dry_run }, output } => {
            if !dry_run {
                confirm(context, &format!("delete {} of {}", scope(select), names(&queues)))?;
            }
            purge(&sqs, &queues, &select.selection(), None, *dry_run, output.json).await
        }
        DlqCommand::Archive { file, scope: Scope { select, .. }, dry_run: DryRun { on: dry_run } } => {
            if !dry_run {
                confirm(context, &format!("append {} of {} to {} and delete them", scope(select), names(&queues), file.display()))?;
            }
            purge(&sqs, &queues, &select.selection(), Some(file), *dry_run, false).await
        }
        DlqCommand::Show { message_id } => show(&sqs, &queues, &s3, &buckets, message_id).await,
    }
}

/// `the selected messages` or `every message`.
fn scope(select: &SelectArgs) -> &'static str {
    if select.selection().is_filtered() {
        "the selected messages"
    } else {
        "every message"
    }
}

/// The queues' names, for people.
fn names(queues: &[QueueInfo]) -> String {
    queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// `dlq list [--json]`: per queue (and bucket) the count, then the groups by cause, then every
/// message. It reads every message of the queues (`ReceiveMessage`, left in place: each one's
/// receive count goes up by one) and lists the buckets' keys (`ListObjectsV2`, no object read).
async fn list(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    s3: &aws_sdk_s3::Client,
    buckets: &[String],
    json: bool,
    selection: &dlq::Selection,
) -> Result<ExitCode> {
    let mut all = Vec::new();
    for q in queues {
        if !json {
            eprintln!("reading every message of {} (left in the queue)…", q.name);
        }
        all.extend(dlq::peek(sqs, q).await?);
    }
    for b in buckets {
        all.extend(failed_batch::list_bucket(s3, b).await?);
    }
    let all: Vec<_> = all.into_iter().filter(|m| selection.matches(m)).collect();
    let groups = dlq::group_by_cause(&all);
    if json {
        let shown = serde_json::json!({"groups": groups, "messages": all});
        println!("{}", serde_json::to_string_pretty(&shown)?);
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

/// `dlq show <message-id>` (or the key of a failed-batch object, which alone is read).
async fn show(sqs: &aws_sdk_sqs::Client, queues: &[QueueInfo], s3: &aws_sdk_s3::Client, buckets: &[String], message_id: &str) -> Result<ExitCode> {
    let mut all = Vec::new();
    if message_id.starts_with("aws/lambda/") {
        for b in buckets {
            all.extend(failed_batch::peek_object(s3, b, message_id).await?);
        }
    } else {
        for q in queues {
            all.extend(dlq::peek(sqs, q).await?);
        }
    }
    let m =
        all.iter().find(|m| m.message_id == message_id).ok_or_else(|| Error::NotFound(format!("no message {message_id} in {}", names(queues))))?;
    let body: serde_json::Value = serde_json::from_str(&m.body).unwrap_or(serde_json::Value::String(m.body.clone()));
    let shown = serde_json::json!({
        "queue": m.queue, "message_id": m.message_id, "sent_at": m.sent_at, "receive_count": m.receive_count,
        "shape": m.shape, "event_id": m.event_id, "reason": m.reason, "attributes": m.attributes, "body": body,
    });
    println!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(ExitCode::SUCCESS)
}

/// What `dlq redrive` replays besides the queues' messages.
pub struct FailedBatches {
    /// S3.
    pub s3: aws_sdk_s3::Client,
    /// The relay that replays them (`None`: the stack has no stream mapping).
    pub replayer: Option<failed_batch::Replayer>,
    /// The on-failure buckets.
    pub buckets: Vec<String>,
}

impl std::fmt::Debug for FailedBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedBatches").field("buckets", &self.buckets).field("replays", &self.replayer.is_some()).finish_non_exhaustive()
    }
}

/// Where `dlq redrive` looks for its redriven events afterwards, and for how long.
pub struct Watch {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// (inbox table, consumer name) of every consumer.
    pub inboxes: Vec<(String, String)>,
    /// Zero: no watching.
    pub timeout: Duration,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("inboxes", &self.inboxes).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// `dlq redrive`: exit code 2 when anything was left in a queue or bucket, 1 when a redriven
/// event came back. With `json`, one object on stdout: `bus`, `dry_run`, `buckets` (each
/// `bucket`, `batches`, `records`, `left`), `queues` (each `logical_id`, `name`, and the
/// [`dlq::RedriveReport`]) and `watched` ([`dlq::WatchReport`], or null when not watched).
///
/// # Errors
/// What failed ([`Error`]).
pub async fn redrive(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    failed_batches: &FailedBatches,
    options: &dlq::RedriveOptions<'_>,
    watch: &Watch,
    json: bool,
) -> Result<ExitCode> {
    let (bus, dry_run) = (options.bus.bus(), options.dry_run);
    let mut shown = serde_json::json!({"bus": bus, "dry_run": dry_run, "buckets": [], "queues": [], "watched": null});
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
            left += report.left.len();
            if json {
                push(
                    &mut shown["buckets"],
                    serde_json::json!({"bucket": bucket, "batches": report.replayed, "records": published, "left": report.left}),
                );
                continue;
            }
            let what = if dry_run { "would replay" } else { "replayed through the relay and deleted" };
            println!("s3://{bucket}: {what} {} failed batch(es) ({published} record(s)); {} left", report.replayed.len(), report.left.len());
            print_left(&report.left);
        }
    }
    for q in queues {
        let report = dlq::redrive(sqs, q, options, |done, total| {
            eprint!("\r  {verb} {}: {done}/{total}", q.name);
        })
        .await?;
        eprintln!();
        left += report.left.len();
        redriven_events.extend(report.event_ids.iter().cloned());
        if json {
            push(&mut shown["queues"], serde_json::json!({"logical_id": q.logical_id, "name": q.name, "report": report}));
            continue;
        }
        let verb = if dry_run { "would re-publish" } else { "re-published and deleted" };
        println!("{} ({}): {verb} {} message(s) to bus {bus}; {} left", q.logical_id, q.name, report.redriven.len(), report.left.len());
        for (cause, (done, kept)) in &report.by_cause {
            println!("  cause {cause}: {done} {}, {kept} left", if dry_run { "would be redriven" } else { "redriven" });
        }
        print_left(&report.left);
    }
    if dry_run || redriven_events.is_empty() || watch.timeout.is_zero() {
        print_json(json, &shown)?;
        return Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) });
    }
    eprintln!("watching {} redriven event(s) for at most {} s…", redriven_events.len(), watch.timeout.as_secs());
    let watched = dlq::watch(&watch.dynamodb, sqs, &watch.inboxes, queues, &before, &redriven_events, watch.timeout).await?;
    let code = if !watched.dead_lettered_again.is_empty() {
        ExitCode::FAILURE
    } else if left > 0 || !watched.pending.is_empty() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        shown["watched"] = serde_json::to_value(&watched)?;
        print_json(json, &shown)?;
        return Ok(code);
    }
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
    Ok(code)
}

/// Appends `item` to the JSON array `array`.
fn push(array: &mut serde_json::Value, item: serde_json::Value) {
    if let Some(items) = array.as_array_mut() {
        items.push(item);
    }
}

/// Prints `shown` as pretty JSON when `json`.
fn print_json(json: bool, shown: &serde_json::Value) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(shown)?);
    }
    Ok(())
}

/// Prints what a `dlq` verb left in place, with why.
fn print_left(left: &[(String, String)]) {
    for (id, why) in left {
        println!("  left {id}: {why}");
    }
}

/// `dlq purge` / `dlq archive <file>`: exit code 2 when a selected message could not be deleted.
/// With `json`, one object on stdout: `dry_run` and `queues` (each `logical_id`, `name`, and
/// `selected` for a dry run, else the [`dlq::PurgeReport`]).
async fn purge(
    sqs: &aws_sdk_sqs::Client,
    queues: &[QueueInfo],
    selection: &dlq::Selection,
    archive: Option<&Path>,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode> {
    let mut shown = serde_json::json!({"dry_run": dry_run, "queues": []});
    if dry_run {
        for q in queues {
            let selected = dlq::peek(sqs, q).await?.into_iter().filter(|m| selection.matches(m)).count();
            let verb = if archive.is_some() { "archive and delete" } else { "delete" };
            if json {
                push(&mut shown["queues"], serde_json::json!({"logical_id": q.logical_id, "name": q.name, "selected": selected}));
            } else {
                println!("{} ({}): would {verb} {selected} message(s)", q.logical_id, q.name);
            }
        }
        print_json(json, &shown)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut file = match archive {
        Some(path) => Some(std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(Error::io(path))?),
        None => None,
    };
    let mut left = 0;
    for q in queues {
        let report = dlq::purge(sqs, q, selection, file.as_mut()).await?;
        left += report.left.len();
        if json {
            push(&mut shown["queues"], serde_json::json!({"logical_id": q.logical_id, "name": q.name, "report": report}));
            continue;
        }
        let verb = match archive {
            Some(path) => format!("archived to {} and deleted", path.display()),
            None => "deleted".to_owned(),
        };
        println!("{} ({}): {verb} {} message(s); {} left", q.logical_id, q.name, report.deleted.len(), report.left.len());
        print_left(&report.left);
    }
    print_json(json, &shown)?;
    Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) })
}
