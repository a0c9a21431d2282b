//! `outbox-local provision`: the stack created on --endpoint, printed.

use std::process::ExitCode;

use outbox_template::Template;

use super::session::provisioned;
use super::Invocation;

/// Runs `provision`.
///
/// # Errors
/// What failed, as text.
pub(crate) async fn run(inv: &Invocation, template: Template) -> outbox_local::Result<ExitCode> {
    let cli = &inv.cli;
    let stack_name = inv.stack_name.as_str();
    let (_emulator, endpoint, _sdk, s) = provisioned(cli, template, stack_name, false).await?;
    println!("stack {stack_name:?} on {endpoint}");
    for t in &s.tables {
        println!("  table {:<16} {}{}", t.logical_id, t.name, s.stream_arns.get(&t.logical_id).map(|a| format!(" (stream {a})")).unwrap_or_default());
    }
    for b in &s.buses {
        println!("  bus   {:<16} {}", b.logical_id, b.name);
    }
    for a in &s.archives {
        println!("  archive {:<14} {} (of {}, {} days; 0: indefinitely)", a.logical_id, a.name, a.source_arn, a.retention_days);
    }
    for q in &s.queues {
        println!("  queue {:<16} {}", q.logical_id, q.url);
    }
    for b in &s.buckets {
        println!("  bucket {:<15} s3://{}", b.logical_id, b.name);
    }
    for r in &s.queue_rules {
        println!("  rule  {} on {} → queue {}", r.rule_name, r.bus_name, r.queues.join(", "));
    }
    for r in &s.rules {
        println!("  rule  {} on {} → {} (local delivery queue {})", r.rule_name, r.bus_name, r.function, r.delivery_queue.name);
    }
    if cli.endpoint.is_none() {
        eprintln!("note: the emulator this command started stops now; pass --endpoint to provision a running one");
    }
    Ok(ExitCode::SUCCESS)
}
