//! `outbox webhooks attempts|resend|recover|enable`: a subscriber's deliveries
//! ([`crate::webhooks`]).

use std::process::ExitCode;

use clap::Subcommand;

use super::{confirm, scan_progress, Context, ScanLimit};
use crate::webhooks::{parse_since, render_attempts, Bound, Operator, Recovery, WebhookStack};
use crate::{Error, Result};

/// The webhook verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum WebhooksCommand {
    /// Show a delivery's attempts: status, latency and the first 1 KiB of each answer.
    Attempts {
        /// The event id (the `webhook-id`).
        event_id: String,
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Send one event to one subscriber again (from the outbox table), even if it acknowledged it.
    Resend {
        /// The event id.
        event_id: String,
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
    },
    /// Send a subscriber every event of its types since a time that it has not acknowledged
    /// (from the outbox table, by a Scan bounded by --limit; acknowledged: the dispatcher's
    /// delivery record). Exits 2 when the scan stopped at --limit before the end.
    Recover {
        /// The subscriber id.
        #[arg(long)]
        subscriber: String,
        /// RFC 3339 time, or an age such as 90m or 2d.
        #[arg(long)]
        since: String,
        #[allow(missing_docs)]
        #[command(flatten)]
        limit: ScanLimit,
    },
    /// Re-enable a disabled subscriber (its circuit breaker reset).
    Enable {
        /// The subscriber id.
        subscriber: String,
        /// Then recover what it missed: since --since, or one retry span before it started failing.
        #[arg(long)]
        recover: bool,
        /// Where the recovery starts (RFC 3339 or an age such as 2d).
        #[arg(long)]
        since: Option<String>,
        #[allow(missing_docs)]
        #[command(flatten)]
        limit: ScanLimit,
    },
}

/// `webhooks …` on the stack of `context`.
///
/// # Errors
/// What failed ([`Error`]).
pub async fn run(context: &Context, command: &WebhooksCommand) -> Result<ExitCode> {
    let operator = Operator::new(&context.sdk, WebhookStack::of(&context.resources)?);
    match command {
        WebhooksCommand::Attempts { event_id, subscriber, json } => {
            let attempts = operator.attempts(subscriber, event_id).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&attempts)?);
            } else {
                print!("{}", render_attempts(subscriber, event_id, &attempts));
            }
            Ok(if attempts.is_empty() { ExitCode::from(2) } else { ExitCode::SUCCESS })
        }
        WebhooksCommand::Resend { event_id, subscriber } => {
            confirm(context, &format!("send event {event_id} to subscriber {subscriber} again (its delivery record is removed)"))?;
            operator.resend(subscriber, event_id).await?;
            println!("event {event_id} queued for subscriber {subscriber} (its delivery record removed: it is POSTed again)");
            Ok(ExitCode::SUCCESS)
        }
        WebhooksCommand::Recover { subscriber, since, limit } => {
            let from = parse_since(since)?;
            confirm(context, &format!("send subscriber {subscriber} every event of its types since {since} it has not acknowledged"))?;
            let r = recover(&operator, subscriber, from, *limit).await?;
            println!(
                "{subscriber}: {} events since {since}: {} sent, {} acknowledged before, {} being delivered",
                r.events, r.sent, r.acknowledged, r.in_flight
            );
            Ok(if r.complete { ExitCode::SUCCESS } else { ExitCode::from(2) })
        }
        WebhooksCommand::Enable { subscriber, recover: and_recover, since, limit } => {
            let then = if *and_recover { ", then send it what it missed" } else { "" };
            confirm(context, &format!("re-enable subscriber {subscriber} (its circuit breaker reset){then}"))?;
            let failing_since = operator.enable(subscriber).await?;
            println!("{subscriber}: enabled");
            if *and_recover {
                let from = match (since, failing_since) {
                    (Some(text), _) => parse_since(text)?,
                    (None, Some(t)) => t,
                    (None, None) => return Err(Error::NotFound(format!("{subscriber} has no record of when it started failing: pass --since"))),
                };
                let r = recover(&operator, subscriber, from, *limit).await?;
                println!(
                    "{subscriber}: {} events since {from}: {} sent, {} acknowledged before, {} being delivered",
                    r.events, r.sent, r.acknowledged, r.in_flight
                );
                if !r.complete {
                    return Ok(ExitCode::from(2));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `recover`, its scan announced and its progress on stderr.
async fn recover(operator: &Operator, subscriber: &str, from: chrono::DateTime<chrono::Utc>, limit: ScanLimit) -> Result<Recovery> {
    limit.announce(&format!("reading the outbox for the events since {from}"));
    let r = operator.recover(subscriber, from, Bound { limit: limit.bound(), progress: Box::new(scan_progress) }).await?;
    limit.finish(r.read, r.complete);
    Ok(r)
}
