//! `outbox replay --since T [--until T] (--consumer C | --all) [--type T …] [--source S …]`:
//! re-deliver a window of the bus's archive to consumers' rules ([`crate::replay`]), and follow
//! it to its end.

use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use super::{confirm, Context};
use crate::replay::{prepare, Consumers, Plan, Replayer, Request};
use crate::webhooks::parse_time;
use crate::{Error, Result};

/// A time as the command prints it: RFC 3339, UTC, milliseconds.
fn show(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `replay`'s arguments.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("to").required(true).args(["consumer", "all"])))]
pub struct ReplayArgs {
    /// Start of the window: RFC 3339 (2026-12-01T06:00:00Z) or an age (90m, 2d). Events whose
    /// time (the outbox item's occurred_at) is at or after it are replayed.
    #[arg(long)]
    pub since: String,
    /// End of the window (RFC 3339 or an age; default: now).
    #[arg(long)]
    pub until: Option<String>,
    /// The consumer to re-deliver to: its CONSUMER_NAME, function logical id or function name
    /// (its rules on the archive's bus).
    #[arg(long)]
    pub consumer: Option<String>,
    /// Re-deliver to every consumer's rules on the archive's bus.
    #[arg(long)]
    pub all: bool,
    /// Only the rules that can match this detail-type (repeatable). EventBridge replays have no
    /// event filter: a chosen rule receives every archived event of the window it matches.
    #[arg(long = "type", value_name = "DETAIL_TYPE")]
    pub types: Vec<String>,
    /// Only the rules that can match this source (repeatable); as --type.
    #[arg(long = "source", value_name = "SOURCE")]
    pub sources: Vec<String>,
    /// The archive (logical id, name or ARN), when the stack has more than one.
    #[arg(long)]
    pub archive: Option<String>,
    /// Start the replay and return (do not follow its progress).
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds between two progress reads (DescribeReplay) while following it.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub poll_seconds: u64,
}

/// `replay` on the stack of `context`: checks, says what it will do, asks (unless `--yes`),
/// starts the replay and follows it (`DescribeReplay`) with a progress line on stderr until it
/// completes. Exit status 0 once it completed (or started, with `--no-wait`).
///
/// # Errors
/// [`Error::Missing`]: the stack has no archive; [`Error::InvalidArgument`]: a time, or a window
/// outside what the archive holds; [`Error::NotFound`]: no such consumer or rule;
/// [`Error::Replay`]: a replay of the archive is still running, EventBridge refused it, or it
/// ended without completing (its state and reason); [`Error::Aws`]: a call failed.
pub async fn run(context: &Context, args: &ReplayArgs) -> Result<ExitCode> {
    let now = Utc::now();
    let since = parse_time("--since", &args.since)?;
    let until = match &args.until {
        Some(text) => parse_time("--until", text)?,
        None => now,
    };
    let consumers = match &args.consumer {
        Some(name) => Consumers::One(name.clone()),
        None => Consumers::All,
    };
    let request = Request { consumers, since, until, types: args.types.clone(), sources: args.sources.clone(), archive: args.archive.clone() };
    let replayer = Replayer::new(&context.sdk);
    let Plan { archive: state, rules, warnings, name } = prepare(&replayer, &context.resources, &request, now).await?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    println!("archive {} (bus {}): events of {} .. {} to {} rule(s):", state.name, state.bus_name(), show(since), show(until), rules.len());
    for chosen in &rules {
        println!("  rule {} → consumer {}", chosen.rule.name, chosen.consumer);
        if !chosen.also_types.is_empty() {
            println!(
                "    it also delivers {}: those events of the window are replayed too (the inbox absorbs what was applied)",
                chosen.also_types.join(", ")
            );
        }
    }
    confirm(context, &format!("re-deliver the archived events of {} .. {} to {} rule(s)", show(since), show(until), rules.len()))?;
    replayer.start(&name, &state, since, until, &rules).await?;
    println!("replay {name} started");
    if args.no_wait {
        println!("not following it (--no-wait): aws events describe-replay --replay-name {name}");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("following replay {name} (Ctrl-C stops following, not the replay)…");
    loop {
        let progress = replayer.progress(&name).await?;
        eprint!("\r  {}", progress.line(since, until));
        if progress.ended() {
            eprintln!();
            if progress.state == "COMPLETED" {
                println!("replay {name}: COMPLETED ({} .. {} re-delivered)", show(since), show(until));
                return Ok(ExitCode::SUCCESS);
            }
            return Err(Error::Replay(format!(
                "replay {name} ended {}{}: start another one for what is left (--since {})",
                progress.state,
                progress.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
                show(progress.last_replayed.unwrap_or(since))
            )));
        }
        tokio::time::sleep(Duration::from_secs(args.poll_seconds)).await;
    }
}
