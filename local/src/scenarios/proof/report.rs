//! The proof's report for people.

use super::ProofReport;

/// The report for people: the faults injected, then each invariant.
pub fn format_report(report: &ProofReport) -> String {
    let mut out = String::new();
    out.push_str(&format!("books: {}\nbus: {}\n", report.books_file, report.bus));
    out.push_str(&format!(
        "{}: {} sent, {} answered, {} committed, {} undone ({} undoing requests sent), {} requests failed after retries; {} AWS calls by the functions; {:.0} s\n",
        report.books,
        report.orders_sent,
        report.orders_answered,
        report.orders_committed,
        report.orders_cancelled,
        report.cancellations_sent,
        report.requests_failed,
        report.aws_calls,
        report.wall_secs
    ));
    out.push_str(&format!(
        "dead letters: {} before the redrive, {} redriven, {} left; stream carried {} events, {} reached the bus\n\n",
        report.dead_lettered, report.redriven, report.dead_letters_left, report.stream_events, report.published_events
    ));
    let phases: Vec<String> = report.phases_secs.iter().map(|(name, secs)| format!("{name} {secs:.0} s")).collect();
    let mb = |v: Option<f64>| v.map(|v| format!("{v:.0} MB")).unwrap_or_else(|| "-".into());
    out.push_str(&format!(
        "time: {}; peak memory: outbox-local {}, emulator {}\n\n",
        phases.join(", "),
        mb(report.peak_rss_mb),
        mb(report.emulator_peak_rss_mb)
    ));
    out.push_str("per stage, as each function reported it (EMF metrics):\n");
    out.push_str(&crate::stats::status::format_stage_figures(&report.stages));
    out.push('\n');
    out.push_str(&format!("{:<72} {:>7}\n", "fault injected", "count"));
    for f in &report.faults {
        out.push_str(&format!("{:<72} {:>7}\n", f.fault, f.count));
    }
    out.push_str(&format!("\n{:<72} {:>7}\n", "by kind", "count"));
    for (kind, n) in &report.faults_by_kind {
        out.push_str(&format!("{kind:<72} {n:>7}\n"));
    }
    out.push('\n');
    for i in &report.invariants {
        out.push_str(&format!("{:<7} {}\n        {}\n", if i.held { "HELD" } else { "BROKEN" }, i.name, i.detail));
    }
    out.push_str(if report.ok { "\nresult: every invariant held\n" } else { "\nresult: an invariant is BROKEN\n" });
    out
}
