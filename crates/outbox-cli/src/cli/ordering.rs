//! `outbox ordering parked|release`: an ordered consumer's waiting events and the way out of a
//! sequence gap ([`crate::ordering`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

use super::{confirm, Context};
use crate::ordering;

/// The ordering verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum OrderingCommand {
    /// List the events ordered consumers parked (arrived before their predecessor), oldest
    /// first, with how long each has waited; exits 1 when one waited longer than --gap-after
    /// (a real gap: its predecessor may never come).
    Parked {
        /// How long a parked event may wait before it counts as a gap: a number and s, m, h or d.
        #[arg(long, value_parser = crate::dlq::parse_age, default_value = "15m")]
        gap_after: Duration,
        /// The inbox table: logical id, name or ARN (default: the table its consumers' INBOX_TABLE names).
        #[arg(long)]
        table: Option<String>,
        /// One JSON array instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Release an aggregate whose consumer waits for a sequence that will never come: its last
    /// sequence moves up to --through, and the events parked behind it are re-published to the
    /// bus, so the consumer applies them. The consumer's gap log line prints this command.
    Release {
        /// The consumer name (e.g. reserve-inventory, the CONSUMER_NAME of the function).
        #[arg(long)]
        consumer: String,
        /// The aggregate, <aggregate_type>#<aggregate_id>, e.g. Order#o-1001.
        #[arg(long)]
        aggregate: String,
        /// The sequence to treat as applied: the one the gap "waits for".
        #[arg(long)]
        through: u64,
        /// The inbox table: logical id, name or ARN (default: the table its consumers' INBOX_TABLE names).
        #[arg(long)]
        table: Option<String>,
        /// Create the aggregate's ordering row when it does not exist: only for a gap at the
        /// aggregate's first event (without it, a missing row means a mistyped --consumer or
        /// --aggregate, and nothing is written).
        #[arg(long)]
        create: bool,
    },
}

/// `ordering …` on the stack of `context`.
///
/// # Errors
/// What failed, as text.
pub async fn run(context: &Context, command: &OrderingCommand) -> Result<ExitCode, String> {
    let dynamodb = aws_sdk_dynamodb::Client::new(&context.sdk);
    match command {
        OrderingCommand::Parked { gap_after, table, json } => {
            let table = inbox_table(context, table.as_deref())?;
            let parked = ordering::parked(&dynamodb, &table).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&parked).map_err(|e| e.to_string())?);
            } else {
                print!("{}", ordering::format_parked(&parked, *gap_after));
            }
            let gap = parked.iter().any(|p| p.age_secs >= gap_after.as_secs());
            Ok(if gap { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
        OrderingCommand::Release { consumer, aggregate, through, table, create } => {
            let table = inbox_table(context, table.as_deref())?;
            let bus = context.resources.buses.first().map(|b| b.name.clone());
            let republish = match &bus {
                Some(bus) => format!(", and re-publish the events parked behind it to bus {bus}"),
                None => String::new(),
            };
            confirm(context, &format!("move {consumer}'s last sequence of {aggregate} in {table} up to {through}{republish}"))?;
            let released = ordering::release(&dynamodb, &table, consumer, aggregate, *through, *create).await?;
            println!("{consumer}: {aggregate} last sequence {} -> {} in {table}", released.before, released.after);
            match bus {
                Some(bus) => {
                    let events = aws_sdk_eventbridge::Client::new(&context.sdk);
                    let sent = ordering::republish_parked(&dynamodb, &events, &table, consumer, aggregate, released.after, &bus).await?;
                    println!("{sent} parked event(s) behind it re-published to {bus}; the consumer applies them in sequence");
                }
                None => println!("events parked behind it stay parked: the stack has no event bus"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The inbox table `given` names, else the one the stack's consumers name (`INBOX_TABLE` with a
/// `CONSUMER_NAME`: the consumer kit's `InboxTable`, `ConsumerKit/InboxTable` in a local stack).
fn inbox_table(context: &Context, given: Option<&str>) -> Result<String, String> {
    let mut inboxes: Vec<String> = context.resources.inboxes().into_iter().map(|(table, _)| table).collect();
    inboxes.sort();
    inboxes.dedup();
    let given = match (given, inboxes.as_slice()) {
        (Some(given), _) => given,
        (None, [only]) => only.as_str(),
        (None, _) => "InboxTable",
    };
    context.resources.table(given).map(|t| t.name.clone()).map_err(|e| format!("{e}\n  hint: pass --table"))
}
