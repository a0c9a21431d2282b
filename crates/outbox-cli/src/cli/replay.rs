//! `outbox replay --since T [--until T] (--consumer C | --all) [--type T …] [--source S …]`:
//! re-deliver a window of past events to consumers. On the classic bus, from the bus's archive to
//! the consumers' rules ([`crate::replay`]), followed to its end; on a Custom Event Bus, through a
//! replay subscriber per consumer ([`crate::replay::subscriber`]), which `--cleanup` removes
//! once its window and retries are over.

use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use super::{confirm, Context};
use crate::replay::subscriber::{choose_subscribers, Chosen, Cleanup, SubscriberReplayer};
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
    /// time (the outbox item's occurred_at; on a Custom bus, when the bus received them) is at
    /// or after it are replayed.
    #[arg(long, required_unless_present = "cleanup")]
    pub since: Option<String>,
    /// End of the window (RFC 3339 or an age; default: now).
    #[arg(long)]
    pub until: Option<String>,
    /// The consumer to re-deliver to: its CONSUMER_NAME, function logical id or function name
    /// (its rules on the archive's bus; on a Custom bus, its subscriber).
    #[arg(long)]
    pub consumer: Option<String>,
    /// Re-deliver to every consumer (its rules on the archive's bus; on a Custom bus, its subscriber).
    #[arg(long)]
    pub all: bool,
    /// Only the rules that can match this detail-type (repeatable). EventBridge replays have no
    /// event filter: a chosen rule receives every archived event of the window it matches.
    /// Classic bus only (a replay subscriber copies its consumer's filter).
    #[arg(long = "type", value_name = "DETAIL_TYPE")]
    pub types: Vec<String>,
    /// Only the rules that can match this source (repeatable); as --type, classic bus only.
    #[arg(long = "source", value_name = "SOURCE")]
    pub sources: Vec<String>,
    /// The archive (logical id, name or ARN), when the stack has more than one (classic bus).
    #[arg(long)]
    pub archive: Option<String>,
    /// Start the replay and return (do not follow its progress). A Custom bus replay always
    /// returns once its subscriber exists (the bus delivers in the background).
    #[arg(long)]
    pub no_wait: bool,
    /// Seconds between two progress reads (DescribeReplay) while following it.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub poll_seconds: u64,
    /// Custom bus: delete the consumer's replay subscribers whose window is over and whose
    /// deliveries can no longer be retried (their end plus their RetryPolicy's
    /// MaxEventAgeInSeconds); the others are listed and left.
    #[arg(long, conflicts_with_all = ["since", "until", "types", "sources", "archive"])]
    pub cleanup: bool,
    /// With --cleanup: delete the replay subscribers whose end has passed, even while their
    /// deliveries may still be retried. (Not with a window: --since is required unless --cleanup.)
    #[arg(long, conflicts_with_all = ["since", "until"])]
    pub force: bool,
}

/// `replay` on the stack of `context`: checks, says what it will do, asks (unless `--yes`) and
/// re-delivers. Consumers with a Custom-bus subscriber get a replay subscriber each (the command
/// returns once they exist; exit status 0); `--cleanup` removes the finished ones (exit status 2
/// when some are left). Otherwise (the classic bus) it starts an archive replay and follows it
/// (`DescribeReplay`) with a progress line on stderr until it completes: exit status 0 once it
/// completed (or started, with `--no-wait`).
///
/// # Errors
/// [`Error::Missing`]: the stack has no archive (classic); [`Error::InvalidArgument`]: a time, a
/// window outside what the archive or the Custom bus holds, or a classic-only option on a
/// Custom bus; [`Error::NotFound`]: no such consumer, rule, bus or subscriber;
/// [`Error::Replay`]: a replay of the archive is still running, EventBridge refused it, or it
/// ended without completing (its state and reason); the Custom bus refused the replay
/// subscriber; `--cleanup` for consumers on the classic bus; [`Error::Aws`]: a call failed.
pub async fn run(context: &Context, args: &ReplayArgs) -> Result<ExitCode> {
    let now = Utc::now();
    let consumers = match &args.consumer {
        Some(name) => Consumers::One(name.clone()),
        None => Consumers::All,
    };
    match choose_subscribers(&context.resources, &consumers)? {
        Some(chosen) if args.cleanup => cleanup(context, &chosen, args.force, now).await,
        Some(chosen) => custom(context, args, &chosen, now).await,
        None if args.cleanup => Err(Error::Replay(format!(
            "{} receive(s) events from the classic bus (rules, no Custom-bus subscriber) in {}: its replays are EventBridge archive replays, which end on their own; nothing to clean up (aws events list-replays)",
            who(&consumers),
            context.resources.source
        ))),
        None => classic(context, args, consumers, now).await,
    }
}

/// `--consumer C` as messages name it, or `every consumer`.
fn who(consumers: &Consumers) -> String {
    match consumers {
        Consumers::One(name) => format!("consumer {name}"),
        Consumers::All => "every consumer".to_owned(),
    }
}

/// The window `[--since, --until]` (`--until` defaults to `now`).
fn window(args: &ReplayArgs, now: DateTime<Utc>) -> Result<(DateTime<Utc>, DateTime<Utc>)> {
    let Some(since) = &args.since else { return Err(Error::invalid("--since", "", "the start of the window: RFC 3339 or an age such as 2h")) };
    let since = parse_time("--since", since)?;
    let until = match &args.until {
        Some(text) => parse_time("--until", text)?,
        None => now,
    };
    Ok((since, until))
}

/// A replay on a Custom bus: one replay subscriber per consumer's subscriber, created after the
/// checks and the question; prints each and how to remove it.
async fn custom(context: &Context, args: &ReplayArgs, chosen: &[Chosen], now: DateTime<Utc>) -> Result<ExitCode> {
    if !args.types.is_empty() || !args.sources.is_empty() || args.archive.is_some() {
        return Err(Error::invalid(
            "--type/--source/--archive",
            [args.types.join(","), args.sources.join(","), args.archive.clone().unwrap_or_default()].join(" ").trim().to_owned(),
            "choose the classic bus's rules and archive; on a Custom bus the replay subscriber copies its consumer's filter (every event of the window it matches comes again; the inbox absorbs what was applied): leave them out",
        ));
    }
    let (since, until) = window(args, now)?;
    let replayer = SubscriberReplayer::new(&context.sdk);
    let plans = crate::replay::subscriber::prepare(&replayer, chosen, since, until, now).await?;
    println!("events of {} .. {} on the Custom bus, to {} consumer(s):", show(since), show(until), plans.len());
    for plan in &plans {
        let o = &plan.original;
        println!(
            "  consumer {}: subscriber {} ({}, target {}) → replay subscriber {} on bus {}",
            plan.chosen.consumer,
            plan.chosen.subscriber.name,
            o.r#type().map_or("type not given", |t| t.as_str()),
            plan.chosen.subscriber.target_arn,
            plan.name,
            plan.bus.name
        );
    }
    confirm(context, &format!("create {} replay subscriber(s) re-delivering the events of {} .. {}", plans.len(), show(since), show(until)))?;
    for plan in &plans {
        let created = replayer.create(plan, since, until).await?;
        println!("replay subscriber {} created ({}) for consumer {}", created.name, created.arn, created.consumer);
    }
    println!("the bus delivers the window in the background; each consumer's inbox absorbs what it already applied.");
    let consumer = args.consumer.as_deref().map_or_else(|| "--all".to_owned(), |c| format!("--consumer {c}"));
    println!("remove them once their deliveries are over (their end, {}, plus their retry window): outbox replay {consumer} --cleanup", show(until));
    Ok(ExitCode::SUCCESS)
}

/// `--cleanup`: the consumers' replay subscribers, each deleted or left with the reason. Exit
/// status 0 when none is left, 2 when some are.
async fn cleanup(context: &Context, chosen: &[Chosen], force: bool, now: DateTime<Utc>) -> Result<ExitCode> {
    let replayer = SubscriberReplayer::new(&context.sdk);
    let mut doomed = Vec::new();
    let mut left = 0usize;
    for c in chosen {
        let replays = replayer.replays(&replayer.locate(&c.subscriber).await?).await?;
        println!("consumer {}, subscriber {}: {} replay subscriber(s)", c.consumer, c.subscriber.name, replays.len());
        for r in replays {
            let span = format!("{} .. {}", r.since.map_or_else(|| "?".to_owned(), show), r.until.map_or_else(|| "no end".to_owned(), show));
            match r.cleanup(now, force) {
                Cleanup::Delete => {
                    println!("  {} ({span}): to delete", r.name);
                    doomed.push(r);
                }
                Cleanup::Wait(at) => {
                    left += 1;
                    println!(
                        "  {} ({span}, {}): left, its deliveries may still be retried until {} (--force deletes it now if its end has passed)",
                        r.name,
                        r.state,
                        show(at)
                    );
                }
                Cleanup::NoEnd => {
                    left += 1;
                    println!("  {} ({span}): left, it has no EndPoint: delete it yourself once it is done", r.name);
                }
            }
        }
    }
    if !doomed.is_empty() {
        confirm(context, &format!("delete {} replay subscriber(s)", doomed.len()))?;
        for r in &doomed {
            replayer.delete(&r.arn).await?;
            println!("deleted {}", r.name);
        }
    }
    Ok(if left == 0 { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// A replay from the classic bus's archive to the consumers' rules, followed to its end.
async fn classic(context: &Context, args: &ReplayArgs, consumers: Consumers, now: DateTime<Utc>) -> Result<ExitCode> {
    let (since, until) = window(args, now)?;
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
