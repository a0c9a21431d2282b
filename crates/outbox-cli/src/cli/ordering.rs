//! `outbox ordering parked|release`: an ordered consumer's waiting events and the way out of a
//! sequence gap ([`crate::ordering`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;

use super::{confirm, scan_progress, Context, ScanLimit};
use crate::ordering;
use crate::{Error, Result};

/// The ordering verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum OrderingCommand {
    /// List the events ordered consumers parked (arrived before their predecessor), oldest
    /// first, with how long each has waited; exits 1 when one waited longer than --gap-after
    /// (a real gap: its predecessor may never come), else 2 when the scan stopped at --limit.
    /// It reads the inbox table's parked index (one Query per consumer, parked rows only; the
    /// consumer kit's tables have it), bounded by --limit; a table without the index is scanned
    /// whole (bounded by --limit), and it says so.
    Parked {
        /// How long a parked event may wait before it counts as a gap: a number and s, m, h or d.
        #[arg(long, value_parser = crate::dlq::parse_age, default_value = "15m")]
        gap_after: Duration,
        /// The inbox table: logical id, name or ARN (default: every consumer's INBOX_TABLE).
        #[arg(long)]
        table: Option<String>,
        #[allow(missing_docs)]
        #[command(flatten)]
        limit: ScanLimit,
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
        /// The inbox table: logical id, name or ARN (default: the INBOX_TABLE of the function
        /// whose CONSUMER_NAME is --consumer).
        #[arg(long)]
        table: Option<String>,
        /// Create the aggregate's ordering row when it does not exist. Parking an event creates
        /// it (a gap at the aggregate's first event included), so it is missing only when the
        /// waiting event has not arrived yet; without it, a missing row means a mistyped --consumer or --aggregate, and
        /// nothing is written.
        #[arg(long)]
        create: bool,
    },
}

/// `ordering …` on the stack of `context`.
///
/// # Errors
/// What failed ([`crate::Error`]).
pub async fn run(context: &Context, command: &OrderingCommand) -> Result<ExitCode> {
    let dynamodb = aws_sdk_dynamodb::Client::new(&context.sdk);
    match command {
        OrderingCommand::Parked { gap_after, table, json, limit } => {
            let tables = match table {
                Some(given) => vec![context.resources.table(given)?.name.clone()],
                None => inbox_tables(context)?,
            };
            let (mut parked, mut complete) = (Vec::new(), true);
            for table in &tables {
                let found = match ordering::parked_index(&dynamodb, table).await? {
                    Some(index) => {
                        let consumers: Vec<String> =
                            context.resources.inboxes().into_iter().filter(|(t, _)| t == table).map(|(_, consumer)| consumer).collect();
                        ordering::parked_by_index(&dynamodb, table, &index, &consumers, limit.bound()).await?
                    }
                    None => {
                        eprintln!("{table} has no parked index ({}): scanning the whole table", outbox::ordering::PARKED_INDEX);
                        limit.announce(&format!("looking for parked events in {table}"));
                        let found = ordering::parked_bounded(&dynamodb, table, limit.bound(), |read, kept| scan_progress(table, read, kept)).await?;
                        limit.finish(found.read, found.complete);
                        found
                    }
                };
                complete &= found.complete;
                parked.extend(found.parked);
            }
            parked.sort_by_key(|p| std::cmp::Reverse(p.age_secs));
            if *json {
                println!("{}", serde_json::to_string_pretty(&parked)?);
            } else {
                print!("{}", ordering::format_parked(&parked, *gap_after));
            }
            let gap = parked.iter().any(|p| p.age_secs >= gap_after.as_secs());
            Ok(match (gap, complete) {
                (true, _) => ExitCode::FAILURE,
                (false, false) => ExitCode::from(2),
                (false, true) => ExitCode::SUCCESS,
            })
        }
        OrderingCommand::Release { consumer, aggregate, through, table, create } => {
            let table = match table {
                Some(given) => context.resources.table(given)?.name.clone(),
                None => consumer_inbox(context, consumer)?,
            };
            let has_bus = !context.resources.buses.is_empty() || !context.resources.custom_buses.is_empty();
            let bus = match has_bus {
                true => {
                    let resources = crate::republisher::with_located_custom_buses(&context.sdk, &context.resources).await?;
                    Some(crate::republisher::Republisher::for_stack(&context.sdk, &resources, None)?)
                }
                false => None,
            };
            let republish = match &bus {
                Some(bus) => format!(", and re-publish the events parked behind it to bus {}", bus.bus()),
                None => String::new(),
            };
            confirm(context, &format!("move {consumer}'s last sequence of {aggregate} in {table} up to {through}{republish}"))?;
            let released = ordering::release(&dynamodb, &table, consumer, aggregate, *through, *create).await?;
            println!("{consumer}: {aggregate} last sequence {} -> {} in {table}", released.before, released.after);
            match bus {
                Some(bus) => {
                    let sent = ordering::republish_parked(&dynamodb, &bus, &table, consumer, aggregate, released.after).await?;
                    println!("{sent} parked event(s) behind it re-published to {}; the consumer applies them in sequence", bus.bus());
                }
                None => println!("events parked behind it stay parked: the stack has no event bus"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Every consumer's inbox table (the functions' `INBOX_TABLE`), each once.
fn inbox_tables(context: &Context) -> Result<Vec<String>> {
    let mut tables: Vec<String> = context.resources.functions.iter().filter_map(|f| f.environment.get("INBOX_TABLE").cloned()).collect();
    tables.sort();
    tables.dedup();
    if tables.is_empty() {
        return Err(Error::missing(&context.resources.source, "inbox table (no function has INBOX_TABLE)", "pass --table"));
    }
    Ok(tables)
}

/// The inbox table of `consumer`: the `INBOX_TABLE` of the function whose `CONSUMER_NAME` it is,
/// else the stack's only inbox table.
fn consumer_inbox(context: &Context, consumer: &str) -> Result<String> {
    let inboxes = context.resources.inboxes();
    if let Some((table, _)) = inboxes.iter().find(|(_, name)| name == consumer) {
        return Ok(table.clone());
    }
    match inbox_tables(context) {
        Ok(mut tables) if tables.len() == 1 => Ok(tables.remove(0)),
        _ => {
            let names: Vec<&str> = inboxes.iter().map(|(_, name)| name.as_str()).collect();
            Err(Error::NotFound(format!(
                "no consumer {consumer:?} in {} (the consumers, by CONSUMER_NAME: {}); check --consumer, or pass --table",
                context.resources.source,
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )))
        }
    }
}
