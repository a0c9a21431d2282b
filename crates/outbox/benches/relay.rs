//! Relay benchmark (prints figures; asserts nothing).
//!
//!     cargo bench -p outbox --bench relay --features custom-bus,test-util
//!
//! EventBridge and SQS are mocked in-process with `aws-smithy-mocks`, so the figures are the
//! relay's own cost: decoding the batch's JSON text (as the function decodes Lambda's payload), building entries, batching, bookkeeping and the
//! SDK's request/response handling. Reported per 1,000 records:
//! * CPU time (user + system, `getrusage`), median of the runs, small (~200 B) and large
//!   (~50 KB) payloads;
//! * `PutEvents` calls per event for steady full batches, and with 10 % of entries failing once
//!   with `InternalFailure` (resent alone);
//! * peak resident memory of the process;
//! * **the classic bus and the Custom Event Bus side by side, in one run**: events/s per shard
//!   when every `PutEvents` call takes +30 ms (the mocks' transport holds each request 30 ms,
//!   `support/held.rs`), for a batch of 100 records (the relay block's `BatchSize`) in three
//!   mixes: 100 distinct aggregates, 10 aggregates × 10 interleaved, one hot aggregate × 100.
//!   Events/s = 100 ÷ the batch's wall time, median of the runs; `PutEvents` calls per event;
//!   CPU per call (the relay's and the SDK's request side, mock answers not decoded). The
//!   relay's defaults: 10 calls in flight; 10 entries a call on the classic bus, 100 on the
//!   Custom bus, whose event groups keep each aggregate's calls one after the other as the
//!   classic relay does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
use aws_sdk_eventbridge::types::PutEventsResultEntry;
use aws_sdk_sqs::operation::send_message::SendMessageOutput;
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use outbox::relay::stream::StreamBatch;
use outbox::relay::{BusType, Relay, RelayConfig};
use serde_json::json;

#[path = "support/held.rs"]
mod held;

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

/// The Custom bus's ARN in the bench (any `event-busv2` ARN: the bus is mocked).
const CUSTOM_BUS_ARN: &str = "arn:aws:events:us-east-1:123456789012:event-busv2/bench/abcdefghij0123456789klmno";

/// Records of one throughput batch.
const SHARD_BATCH: usize = 100;

/// A batch of [`SHARD_BATCH`] small events over `aggregates` aggregates, interleaved (aggregate
/// i % n, each one's sequence rising).
fn mix(aggregates: usize) -> String {
    let records: Vec<_> = (0..SHARD_BATCH)
        .map(|i| {
            let aggregate = format!("o-{}", i % aggregates);
            let mut item = outbox::testing::sample_item(&format!("01a22651-6c7b-7e1a-89c3-{i:012}"), &aggregate, 200);
            item.sequence = (i / aggregates) as u64 + 1;
            item.sk = outbox::envelope::OutboxItem::sort_key(item.sequence);
            outbox::testing::insert_record(&item, i as u64 + 1).expect("converts")
        })
        .collect();
    json!({ "Records": records }).to_string()
}

/// A relay on `bus` whose every `PutEvents` call takes `delay` and succeeds; its call count.
fn held_relay(bus: BusType, delay: Duration) -> (Relay, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let send = mock!(aws_sdk_sqs::Client::send_message).then_output(|| SendMessageOutput::builder().build());
    let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&send]);
    let transport = held::Held::new(delay);
    let mut config = RelayConfig::new(CUSTOM_BUS_ARN, "https://sqs/relay-dlq");
    config.safety_margin = Duration::ZERO;
    config.call_budget = Duration::ZERO;
    let c = calls.clone();
    let relay = match bus {
        BusType::Classic => {
            config.event_bus_name = "bench-bus".into();
            let put = mock!(aws_sdk_eventbridge::Client::put_events).then_compute_output(move |input| {
                c.fetch_add(1, Ordering::Relaxed);
                let entries = input.entries().iter().enumerate().map(|(i, _)| PutEventsResultEntry::builder().event_id(format!("eb-{i}")).build());
                PutEventsOutput::builder().failed_entry_count(0).set_entries(Some(entries.collect())).build()
            });
            let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&put], |b| b.http_client(transport.clone().shared()));
            Relay::new(events, sqs, config)
        }
        _ => {
            use aws_sdk_eventbridgev2::operation::put_events::PutEventsOutput as Output;
            use aws_sdk_eventbridgev2::types::{PutEventsResultEntry as Entry, SuccessCode};
            let put = mock!(aws_sdk_eventbridgev2::Client::put_events).then_compute_output(move |input| {
                c.fetch_add(1, Ordering::Relaxed);
                let entries = input
                    .entries()
                    .iter()
                    .enumerate()
                    .map(|(i, _)| Entry::builder().event_id(format!("ev-{i}")).success_code(SuccessCode::Published).build());
                Output::builder().failed_entry_count(0).set_entries(Some(entries.collect())).build()
            });
            let events = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&put], |b| b.http_client(transport.clone().shared()));
            Relay::custom(events, sqs, config).expect("an event-busv2 ARN")
        }
    };
    (relay, calls)
}

/// One row of the side-by-side table: (events/s median, calls per event, CPU ms per call median).
fn throughput(rt: &tokio::runtime::Runtime, bus: BusType, batch_text: &str, runs: usize) -> (f64, f64, f64) {
    let mut rates = Vec::new();
    let mut cpu_per_call = Vec::new();
    let mut calls_per_event = 0.0;
    for _ in 0..runs {
        let (relay, calls) = held_relay(bus, Duration::from_millis(30));
        let (cpu_before, _) = rusage();
        let started = Instant::now();
        let batch: StreamBatch = serde_json::from_str(batch_text).expect("a stream event");
        let outcome = rt.block_on(relay.relay_batch(batch, Instant::now() + Duration::from_secs(60))).expect("relayed");
        let wall = started.elapsed();
        let (cpu_after, _) = rusage();
        assert_eq!(outcome.report.published, SHARD_BATCH, "benchmark setup: everything publishes");
        let n = calls.load(Ordering::Relaxed);
        rates.push(SHARD_BATCH as f64 / wall.as_secs_f64());
        cpu_per_call.push((cpu_after - cpu_before).as_secs_f64() * 1e3 / n as f64);
        calls_per_event = n as f64 / SHARD_BATCH as f64;
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (median(&mut rates), calls_per_event, median(&mut cpu_per_call))
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
    println!("\nthe classic bus and the Custom Event Bus side by side: a batch of {SHARD_BATCH} small events, every PutEvents call +30 ms, 10 calls in flight, median of {RUNS} runs");
    println!("| batch of 100, +30 ms per call | classic events/s | Custom events/s | classic calls per event | Custom calls per event | classic CPU ms per call | Custom CPU ms per call | classic CPU µs per event | Custom CPU µs per event |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (label, aggregates) in [("100 distinct aggregates", SHARD_BATCH), ("10 aggregates × 10 interleaved", 10), ("1 hot aggregate × 100", 1)] {
        let text = mix(aggregates);
        let (classic_rate, classic_calls, classic_cpu) = throughput(&rt, BusType::Classic, &text, RUNS);
        let (custom_rate, custom_calls, custom_cpu) = throughput(&rt, BusType::Custom, &text, RUNS);
        println!(
            "| {label} | {classic_rate:.0} | {custom_rate:.0} | {classic_calls:.2} | {custom_calls:.2} | {classic_cpu:.2} | {custom_cpu:.2} | {:.0} | {:.0} |",
            classic_cpu * classic_calls * 1e3,
            custom_cpu * custom_calls * 1e3
        );
    }
    let (_, max_rss_kb) = rusage();
    println!("  peak resident memory of the benchmark process: {:.1} MiB", max_rss_kb as f64 / 1024.0);
}
