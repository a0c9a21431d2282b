//! Relay benchmark (prints figures; asserts nothing).
//!
//!     cargo bench -p outbox --bench relay --features test-util
//!
//! EventBridge and SQS are mocked in-process with `aws-smithy-mocks`, so the figures are the
//! relay's own cost: decoding the batch's JSON text (as the function decodes Lambda's payload), building entries, batching, bookkeeping and the
//! SDK's request/response handling. Reported per 1,000 records:
//! * CPU time (user + system, `getrusage`), median of the runs, small (~200 B) and large
//!   (~50 KB) payloads;
//! * `PutEvents` calls per event for steady full batches, and with 10 % of entries failing once
//!   with `InternalFailure` (resent alone);
//! * peak resident memory of the process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
use aws_sdk_eventbridge::types::PutEventsResultEntry;
use aws_sdk_sqs::operation::send_message::SendMessageOutput;
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use outbox::relay::stream::StreamBatch;
use outbox::relay::{Relay, RelayConfig};
use serde_json::json;

const RECORDS: usize = 1000;
const RUNS: usize = 7;

/// The batch's JSON text, as Lambda delivers it.
fn batch(payload_bytes: usize) -> String {
    let records: Vec<_> = (0..RECORDS)
        .map(|i| {
            let item = outbox::testing::sample_item(&format!("01a22651-6c7b-7e1a-89c3-{i:012}"), &format!("o-{i}"), payload_bytes);
            outbox::testing::insert_record(&item, i as u64 + 1).expect("converts")
        })
        .collect();
    json!({ "Records": records }).to_string()
}

/// A relay whose bus fails every `fail_every`-th entry it sees once (0 = never).
fn relay(fail_every: usize) -> (Relay, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let (c, s) = (calls.clone(), seen.clone());
    let failed_once = Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let put = mock!(aws_sdk_eventbridge::Client::put_events).then_compute_output(move |input| {
        c.fetch_add(1, Ordering::Relaxed);
        let entries: Vec<PutEventsResultEntry> = input
            .entries()
            .iter()
            .map(|e| {
                let n = s.fetch_add(1, Ordering::Relaxed);
                let detail = e.detail().unwrap_or_default().to_owned();
                let mut failed = failed_once.lock().expect("not poisoned");
                if fail_every > 0 && n % fail_every == 0 && failed.insert(detail) {
                    PutEventsResultEntry::builder().error_code("InternalFailure").error_message("bench").build()
                } else {
                    PutEventsResultEntry::builder().event_id(format!("eb-{n}")).build()
                }
            })
            .collect();
        let failed = entries.iter().filter(|e| e.error_code().is_some()).count() as i32;
        PutEventsOutput::builder().failed_entry_count(failed).set_entries(Some(entries)).build()
    });
    let send = mock!(aws_sdk_sqs::Client::send_message).then_output(|| SendMessageOutput::builder().build());
    let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&put]);
    let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&send]);
    let mut config = RelayConfig::new("bench-bus", "https://sqs/relay-dlq");
    config.base_backoff = Duration::ZERO;
    config.max_backoff = Duration::ZERO;
    config.safety_margin = Duration::ZERO;
    config.call_budget = Duration::ZERO;
    (Relay::new(events, sqs, config), calls)
}

#[allow(unsafe_code)] // getrusage: see SAFETY
fn rusage() -> (Duration, i64) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    (tv(u.ru_utime) + tv(u.ru_stime), u.ru_maxrss)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    println!("relay benchmark: {RECORDS} INSERT records of distinct aggregates per batch, {RUNS} runs, mocked EventBridge/SQS");
    for (label, bytes) in [("small (~200 B)", 200), ("large (~50 KB)", 50 * 1024)] {
        let event = batch(bytes);
        let mut cpu = Vec::new();
        let mut calls_per_event = 0.0;
        for _ in 0..RUNS {
            let (relay, calls) = relay(0);
            let (before, _) = rusage();
            // Decoding Lambda's payload is part of the work, as in the function.
            let batch: StreamBatch = serde_json::from_str(&event).expect("a stream event");
            let outcome = rt.block_on(relay.relay_batch(batch, Instant::now() + Duration::from_secs(60))).expect("relayed");
            let (after, _) = rusage();
            assert_eq!(outcome.report.published, RECORDS, "benchmark setup: everything publishes");
            cpu.push(after - before);
            calls_per_event = calls.load(Ordering::Relaxed) as f64 / RECORDS as f64;
        }
        cpu.sort();
        println!(
            "  {label:<15} CPU per 1,000 records: median {:>7.1} ms (min {:.1}, max {:.1}); PutEvents calls per event {calls_per_event:.3}",
            cpu[RUNS / 2].as_secs_f64() * 1e3,
            cpu[0].as_secs_f64() * 1e3,
            cpu[RUNS - 1].as_secs_f64() * 1e3,
        );
    }
    let event = batch(200);
    let (relay, calls) = relay(10);
    let batch: StreamBatch = serde_json::from_str(&event).expect("a stream event");
    let outcome = rt.block_on(relay.relay_batch(batch, Instant::now() + Duration::from_secs(60))).expect("relayed");
    println!(
        "  10 % of entries failing once (InternalFailure): PutEvents calls per event {:.3} ({} calls, {} entries resent, {} published, {} reported)",
        calls.load(Ordering::Relaxed) as f64 / RECORDS as f64,
        calls.load(Ordering::Relaxed),
        outcome.report.retried,
        outcome.report.published,
        outcome.response.batch_item_failures.len()
    );
    let (_, max_rss_kb) = rusage();
    println!("  peak resident memory of the benchmark process: {:.1} MiB", max_rss_kb as f64 / 1024.0);
}
