//! `proof`: the pipeline under a fault plan, judged from the tables and queues. What the requests
//! are and what "took effect exactly once" means is the service's, from its books file
//! ([`Books`]: `outbox-books.yaml` beside the template); the rest holds for every template.
//!
//! 1. the books' seed items; an archive rule on the bus (every event, to a queue of its own)
//!    records what was published;
//! 2. `--orders N` requests as the books say (HTTP `POST`s through the local HTTP API, each with
//!    an `Idempotency-Key`, retried on 5xx, 408, 429 and transport errors as a careful client
//!    does; or direct invocations of a function, retried while it answers with an error), then
//!    the books' undoing request of every `--cancel-every`-th accepted one (default: the books'
//!    `undo.every`; once the requests went quiet when the plan says `cancel_after_quiet = true`);
//!    with `--hot-aggregate N`, the books' N events of one aggregate put on the bus shuffled
//!    (the module `hot`);
//! 3. waits until quiet: no function made an AWS call for `--quiet` seconds;
//! 4. reads the dead-letter queues (each message's reason) and asks `dlq redrive --dry-run`
//!    what it would do; when the plan says `redrive = true` (and not `--no-redrive`), redrives
//!    them once, as an operator would, and waits until quiet again;
//! 5. checks the invariants from the tables, the outbox stream and the queues — never from its
//!    own counters — and prints the faults injected and each invariant, held or broken.
//!
//! The service's invariants (the books file, [`crate::scenarios::books::check`]):
//! * **exactly once**: every accepted request (and every one the origin effect, the producer's
//!   own record, holds) left each effect of the books: as many items as the file says, with the
//!   attribute values it says, in the state its undo implies;
//! * **no effect without its request**: no item of an effect for an id no request committed;
//! * **the balances**: per group, a sum of number attributes equals what was seeded or what the
//!   parts add up to (an effect applied twice or lost breaks it even when each item looks right).
//!
//! The generic invariants (from the outbox, the stream, the bus and the inboxes):
//! * **published at least once**: every event the outbox stream carried (`INSERT` records)
//!   reached the bus (the archive queue);
//! * **dead letters explained**: every dead-lettered message has a reason, and the redrive
//!   would re-publish it or says why not;
//! * **nothing missing**: every event a consumer of the books subscribes to that the stream
//!   carried has a row in that consumer's inbox (claimed with its effect, or `COMPLETED`; a
//!   parked event is not applied); without a redrive, only events dead-lettered with a permanent
//!   cause are excused;
//! * **parked rows counted exactly**: every ordering row's `parked_count` equals the parked rows
//!   of its aggregate (what lets an ordered event's commit prove that nothing is parked);
//! * **dead letters hold only what can never succeed** (without a redrive): no dead letter whose
//!   cause may pass later (a transient failure must heal without a person);
//! * **each aggregate's effects in order**: per consumer, the inbox claims (written in the
//!   effect's own transaction, with `processed_at`) of an aggregate's events follow the events'
//!   sequence from the outbox stream (the module `order`);
//! * **the hot aggregate** (with `--hot-aggregate`): all its events applied in sequence order,
//!   from the inbox table (the module `hot`);
//! * **quiet**: the pipeline went quiet within `--timeout`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::faults::{Injected, Injector};
use crate::runtime::Runtime;
pub use crate::scenarios::books::Invariant;
use crate::scenarios::books::{env_var, Books, Ledger, Request};
use crate::scenarios::demo::Say;
use outbox_cli::dlq;
use outbox_template::stack::QueueInfo;

mod bus;
mod hot;
mod order;
mod reads;
mod report;

use crate::scenarios::books::{scan, text};
use bus::ProofBus;
use reads::{drain_archive, send, stream_events};
pub use report::format_report;

/// Proof settings.
#[derive(Debug, Clone)]
pub struct ProofOptions {
    /// Orders sent.
    pub orders: usize,
    /// Undo every n-th accepted request (0: none); `None`: as the books say (`undo.every`).
    pub cancel_every: Option<usize>,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Print only the JSON report.
    pub json: bool,
    /// Longest wait for the pipeline to go quiet (each time).
    pub timeout: Duration,
    /// How long without an AWS call from any function counts as quiet.
    pub quiet: Duration,
    /// The emulator's process id, to report its peak memory (`None`: an emulator of its own).
    pub emulator_pid: Option<u32>,
    /// The hot-aggregate scenario: this many events of one aggregate, put on the bus shuffled
    /// after the requests (the module `hot`); `None`: not run.
    pub hot_aggregate: Option<usize>,
    /// The relay's logical id (the books' `relay` role): the report names the bus it publishes
    /// to from its environment (`EVENT_BUS_TYPE`, `EVENT_BUS_NAME`); `None`: not known.
    pub relay: Option<String>,
}

/// The proof's figures (`proof --json`).
#[derive(Debug, Clone, Serialize)]
pub struct ProofReport {
    /// What the requests create, as the service's books file names it (`orders`, `customers`):
    /// the `orders_*` figures count these.
    pub books: String,
    /// The books file read.
    pub books_file: String,
    /// Orders sent to the API.
    pub orders_sent: usize,
    /// Orders the API answered 2xx for.
    pub orders_answered: usize,
    /// The bus the relay publishes to: `Classic (<name>)` or `Custom (<ARN>)`, from the relay's
    /// `EVENT_BUS_TYPE` (default `Classic`) and `EVENT_BUS_NAME`.
    pub bus: String,
    /// Requests committed: accepted, or found in the books' origin effect.
    pub orders_committed: usize,
    /// Undoing requests sent (cancellations).
    pub cancellations_sent: usize,
    /// Committed requests undone, as the tables show.
    pub orders_cancelled: usize,
    /// Requests that never got a 2xx answer after the client's retries.
    pub requests_failed: usize,
    /// AWS calls the functions made.
    pub aws_calls: u64,
    /// Faults injected, per fault of the plan.
    pub faults: Vec<Injected>,
    /// Faults injected, per kind.
    pub faults_by_kind: BTreeMap<String, u64>,
    /// Messages in the dead-letter queues before the redrive.
    pub dead_lettered: usize,
    /// Messages redriven.
    pub redriven: usize,
    /// Messages left in the dead-letter queues at the end.
    pub dead_letters_left: usize,
    /// Events the outbox stream carried.
    pub stream_events: usize,
    /// Distinct events that reached the bus.
    pub published_events: usize,
    /// Seconds from the first order to the verdict.
    pub wall_secs: f64,
    /// Seconds per phase, in order: `orders` (orders and cancellations answered), `quiet`
    /// (until the pipeline went quiet), `redrive` (the redrive and quiet again), `verdict`
    /// (reading the tables, the stream and the queues, and checking).
    pub phases_secs: Vec<(&'static str, f64)>,
    /// Peak resident memory of this process (`VmHWM`), MB.
    pub peak_rss_mb: Option<f64>,
    /// Peak resident memory of the emulator process (`VmHWM`), MB, when this process started it.
    pub emulator_peak_rss_mb: Option<f64>,
    /// Per function, the figures it reported through its EMF metrics (totals), as in
    /// `demo --json` ([`crate::stats::status::stage_figures`]).
    pub stages: BTreeMap<String, BTreeMap<String, u64>>,
    /// The invariants.
    pub invariants: Vec<Invariant>,
    /// Whether every invariant held.
    pub ok: bool,
}

/// One consumer the proof checks: its inbox and what is delivered to it.
struct ConsumerNames {
    logical_id: String,
    /// Its `INBOX_TABLE`.
    inbox: String,
    /// Its `CONSUMER_NAME`, the prefix of its inbox rows (`None`: every row of the table).
    inbox_consumer: Option<String>,
    /// The `detail-type`s delivered to it.
    types: Vec<String>,
}

/// The tables and queues the proof reads.
struct Names {
    consumers: Vec<ConsumerNames>,
    outbox_stream: String,
    bus: ProofBus,
    dead_letter_queues: Vec<QueueInfo>,
}

fn names(runtime: &Runtime, consumers: &[String], outbox_table: &str) -> crate::Result<Names> {
    let mut named = Vec::new();
    let mut bus = None;
    for consumer in consumers {
        let (its_bus, types) = bus::delivery(runtime, consumer)?;
        bus.get_or_insert(its_bus);
        named.push(ConsumerNames {
            logical_id: consumer.clone(),
            inbox: env_var(runtime, consumer, "INBOX_TABLE")?,
            inbox_consumer: env_var(runtime, consumer, "CONSUMER_NAME").ok(),
            types,
        });
    }
    Ok(Names {
        consumers: named,
        outbox_stream: runtime
            .stack
            .stream_arns
            .get(outbox_table)
            .cloned()
            .ok_or_else(|| crate::Error::invalid(format!("the template's {outbox_table} (the relay's outbox table) has no stream")))?,
        bus: bus.ok_or_else(|| crate::Error::invalid("the books name no consumer"))?,
        dead_letter_queues: runtime.stack.queues.iter().filter(|q| q.logical_id.contains("DeadLetter")).cloned().collect(),
    })
}

/// Waits until no function made an AWS call for `options.quiet`; `false` after `options.timeout`.
async fn wait_quiet(injector: &Injector, options: &ProofOptions, say: &Say, stage: &str) -> bool {
    let started = Instant::now();
    let (mut last, mut since) = (injector.calls(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let calls = injector.calls();
        if calls != last {
            (last, since) = (calls, Instant::now());
        } else if since.elapsed() >= options.quiet {
            say.end_progress();
            return true;
        }
        if started.elapsed() > options.timeout {
            say.end_progress();
            return false;
        }
        let injected: u64 = injector.injected().iter().map(|i| i.count).sum();
        say.progress(format!(
            "{stage}: waiting until quiet ({calls} AWS calls, {injected} faults injected, {:.0} s)",
            started.elapsed().as_secs_f64()
        ));
    }
}

/// Runs the proof against a runtime whose pipelines and HTTP API (at `api`) run with
/// `injector` between the functions and the emulator; `books`: the service's books file,
/// `outbox_table`: the logical id of the table whose stream the relay reads.
///
/// # Errors
/// A message when the stack cannot be read or set up (not when an invariant breaks: that is in
/// the report).
pub async fn run(
    runtime: Arc<Runtime>,
    api: SocketAddr,
    injector: Arc<Injector>,
    options: &ProofOptions,
    books: &Books,
    outbox_table: &str,
) -> crate::Result<ProofReport> {
    use std::io::IsTerminal;
    let say = Say { quiet: options.json, terminal: std::io::stderr().is_terminal(), last: Default::default() };
    let names = names(&runtime, books.consumers(), outbox_table)?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&runtime.sdk);
    let sqs = aws_sdk_sqs::Client::new(&runtime.sdk);
    let hot = match options.hot_aggregate {
        Some(n) => {
            let consumer = books.hot_consumer().ok_or_else(|| books.no_hot_aggregate())?;
            let inbox_consumer = env_var(&runtime, consumer, "CONSUMER_NAME").map_err(|e| {
                crate::Error::invalid(format!("--hot-aggregate: the ordered consumer's inbox rows are named by its CONSUMER_NAME: {e}"))
            })?;
            Some(books.hot_aggregate(n, &inbox_consumer)?)
        }
        None => None,
    };
    books.seed(&runtime, &dynamodb).await?;
    let archive_url = bus::archive(&runtime, &names.bus).await?;
    let redrive = injector.plan().redrive;
    let republisher = names.bus.republisher(&runtime.sdk);
    if injector.plan().redrive && !redrive {
        say.line("the plan asks for a redrive: not on a Custom Event Bus (dlq redrive re-publishes to a classic bus); judged as without an operator");
    }
    let (stop_archive, archive_stopped) = tokio::sync::watch::channel(false);
    let archived = tokio::spawn(drain_archive(sqs.clone(), archive_url, archive_stopped));
    let started = Instant::now();
    let mut phases = Vec::new();
    let mut phase = Instant::now();
    let mut lap = |name: &'static str, phases: &mut Vec<(&'static str, f64)>| {
        phases.push((name, phase.elapsed().as_secs_f64()));
        phase = Instant::now();
    };
    injector.arm();

    // Requests (orders), then the undoing requests (cancellations), as the books say.
    let client = crate::runtime::authorizer::client_as(&runtime.issuer, "proof-customer")
        .timeout(Duration::from_secs(90))
        .build()
        .map_err(crate::Error::other("the HTTP client"))?;
    let permits = Arc::new(tokio::sync::Semaphore::new(options.concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..options.orders {
        let (runtime, client, permits) = (runtime.clone(), client.clone(), permits.clone());
        let request = books.request(i);
        tasks.spawn(async move {
            let _permit = permits.acquire().await;
            (i, send(&runtime, &client, api, &request, Some(&format!("proof-order-{i}"))).await)
        });
    }
    let mut answered = Vec::new();
    let mut failed = 0;
    let mut done = 0;
    while let Some(joined) = tasks.join_next().await {
        done += 1;
        match joined {
            Ok((i, answer)) => match answer.as_ref().and_then(|a| books.accepted(a)) {
                Some(id) => answered.push((i, id)),
                None => {
                    failed += 1;
                    tracing::warn!(request = i, answer = ?answer, "proof: the request was not accepted");
                }
            },
            Err(e) => return Err(crate::Error::expectation(format!("a request task failed: {e}"))),
        }
        say.progress(format!(
            "{} {done}/{}: {} answered, {failed} failed; {} AWS calls",
            books.name(),
            options.orders,
            answered.len(),
            injector.calls()
        ));
    }
    answered.sort();
    if injector.plan().cancel_after_quiet {
        say.end_progress();
        wait_quiet(&injector, options, &say, "requests sent, undoing ones held back").await;
    }
    let every = options.cancel_every.or(books.undo_every()).unwrap_or(0);
    let to_cancel: Vec<(String, Request)> =
        if every == 0 { Vec::new() } else { answered.iter().step_by(every).filter_map(|(_, id)| Some((id.clone(), books.undo(id)?))).collect() };
    let mut undo_tasks = tokio::task::JoinSet::new();
    for (id, request) in &to_cancel {
        let (runtime, client, permits, request, id) = (runtime.clone(), client.clone(), permits.clone(), request.clone(), id.clone());
        undo_tasks.spawn(async move {
            let _permit = permits.acquire().await;
            (id, send(&runtime, &client, api, &request, None).await)
        });
    }
    let mut done = 0;
    let mut undo = HashMap::new();
    while let Some(joined) = undo_tasks.join_next().await {
        done += 1;
        // Any final answer counts as sent: a 409 after a lost answer is an undo that committed,
        // and the tables judge. Without one, either state is right.
        match joined {
            Ok((id, answer)) => {
                if answer.is_none() {
                    failed += 1;
                }
                undo.insert(id, answer.is_some());
            }
            Err(e) => return Err(crate::Error::expectation(format!("an undoing request's task failed: {e}"))),
        }
        say.progress(format!("undoing {done}/{}", to_cancel.len()));
    }
    if let Some(hot) = &hot {
        say.progress(format!("hot aggregate: {} events of {} put on the bus, shuffled", hot.events.len(), hot.aggregate_id));
        hot::publish(&runtime.sdk, &names.bus, hot, injector.plan().seed).await?;
    }
    say.end_progress();
    lap("orders", &mut phases);
    let quiet = wait_quiet(&injector, options, &say, "orders sent").await;
    lap("quiet", &mut phases);

    // Dead letters: their reasons, what a redrive would do, and the redrive when the plan says so.
    let mut dead = Vec::new();
    let mut unexplained = Vec::new();
    let mut redriven = 0;
    for q in &names.dead_letter_queues {
        let messages = dlq::peek(&sqs, q).await.map_err(crate::Error::Operator)?;
        let all = dlq::Selection::default();
        let options = dlq::RedriveOptions { bus: &republisher, replayer: None, dry_run: true, selection: &all, force: false };
        let dry = dlq::redrive(&sqs, q, &options, |_, _| {}).await.map_err(crate::Error::Operator)?;
        for m in &messages {
            let explained = !m.reason.trim().is_empty()
                && (dry.redriven.contains(&m.message_id) || dry.left.iter().any(|(id, why)| id == &m.message_id && !why.trim().is_empty()));
            if !explained {
                unexplained.push(format!("{} in {}", m.message_id, q.logical_id));
            }
        }
        dead.extend(messages);
    }
    let mut quiet_after_redrive = true;
    if redrive && !dead.is_empty() {
        for q in &names.dead_letter_queues {
            // As an operator would: what can pass is redriven; permanent causes stay, with why.
            let all = dlq::Selection::default();
            let options = dlq::RedriveOptions { bus: &republisher, replayer: None, dry_run: false, selection: &all, force: false };
            let report = dlq::redrive(&sqs, q, &options, |d, t| say.progress(format!("redriving {}: {d}/{t}", q.logical_id)))
                .await
                .map_err(crate::Error::Operator)?;
            redriven += report.redriven.len();
        }
        say.end_progress();
        quiet_after_redrive = wait_quiet(&injector, options, &say, "redriven").await;
    }
    let mut left = 0;
    for q in &names.dead_letter_queues {
        left += dlq::peek(&sqs, q).await.map_err(crate::Error::Operator)?.len();
    }
    lap("redrive", &mut phases);

    // The verdict, from the tables, the stream and the queues.
    say.progress("reading the tables, the stream and the archive");
    let _ = stop_archive.send(true);
    let published = archived.await.map_err(crate::Error::other("reading the archive queue"))??;
    let carried = stream_events(&runtime, &names.outbox_stream).await?;
    let ledger =
        Ledger { accepted: answered.iter().map(|(_, id)| id.clone()).collect(), undo, excused: hot.iter().map(|h| h.aggregate_id.clone()).collect() };
    let checked = books.check(&runtime, &dynamodb, &ledger).await?;
    let mut invariants = vec![requests_took_effect(options.orders, answered.len(), checked.committed, failed)];
    invariants.extend(checked.invariants);
    // Each inbox table once (consumers may share one).
    let mut inboxes: BTreeMap<&str, Vec<HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>> = BTreeMap::new();
    for c in &names.consumers {
        if !inboxes.contains_key(c.inbox.as_str()) {
            let attributes = ["pk", "event_id", "status", "kind", "processed_at", outbox::ordering::PARKED_COUNT];
            inboxes.insert(&c.inbox, scan(&dynamodb, &c.inbox, &attributes).await?);
        }
    }
    if let Some(hot) = &hot {
        let table = names.consumers.iter().find(|c| c.logical_id == hot.consumer).map(|c| c.inbox.clone());
        let table = match table {
            Some(t) => t,
            None => env_var(&runtime, &hot.consumer, "INBOX_TABLE")?,
        };
        invariants.push(hot::verdict(&dynamodb, &table, hot, &dead).await?);
    }
    say.end_progress();

    let first = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let carried_ids: HashSet<&str> = carried.iter().map(|c| c.id.as_str()).collect();
    let unpublished: Vec<String> = carried_ids.iter().filter(|id| !published.contains(**id)).map(|id| (*id).to_owned()).collect();
    invariants.push(Invariant {
        name: "every event the stream carried was published at least once".into(),
        held: unpublished.is_empty(),
        detail: format!(
            "{} events carried, {} reached the bus; {} never published [{}]",
            carried_ids.len(),
            published.len(),
            unpublished.len(),
            first(&unpublished)
        ),
    });
    invariants.push(Invariant {
        name: "every dead letter has a reason and is redrivable or says why not".into(),
        held: unexplained.is_empty(),
        detail: format!("{} dead-lettered, {} unexplained [{}]", dead.len(), unexplained.len(), first(&unexplained)),
    });
    // A row per event and consumer: claimed in the effect's own transaction (no status), or
    // COMPLETED. Parked rows (an event waiting for its predecessor) are not claims.
    let all_rows = || inboxes.values().flatten();
    let parked: Vec<String> = all_rows().filter(|i| text(i, "kind") == outbox::ordering::PARKED_KIND).map(|i| text(i, "event_id")).collect();
    // The ordering rows' counts of parked rows (what lets an ordered event's commit prove that
    // nothing is parked and skip its reads) equal the parked rows of their aggregate, whatever
    // was lost, retried or crashed on the way: a count below the rows would let a commit skip
    // a parked event.
    // Parked rows by aggregate, `<consumer>#parked#<type>#<id>` (their key less `#<waits_for>`):
    // one pass, so the verdict stays linear in the table at 10,000 orders.
    let mut parked_by_aggregate: HashMap<String, i64> = HashMap::new();
    for row in all_rows() {
        let pk = text(row, "pk");
        if let Some((aggregate, _waits_for)) = pk.contains("#parked#").then(|| pk.rsplit_once('#')).flatten() {
            *parked_by_aggregate.entry(aggregate.to_owned()).or_default() += 1;
        }
    }
    let miscounted: Vec<String> = all_rows()
        .filter_map(|row| {
            let pk = text(row, "pk");
            let (consumer, aggregate) = pk.split_once("#aggregate#")?;
            let count = row.get(outbox::ordering::PARKED_COUNT).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<i64>().ok()).unwrap_or(0);
            let rows = parked_by_aggregate.get(&format!("{consumer}#parked#{aggregate}")).copied().unwrap_or(0);
            (count != rows).then(|| format!("{pk}: count {count}, {rows} parked"))
        })
        .collect();
    invariants.push(Invariant {
        name: "every ordering row counts exactly the parked rows of its aggregate".into(),
        held: miscounted.is_empty(),
        detail: format!(
            "{} ordering rows, {} miscounted [{}]",
            all_rows().filter(|r| text(r, "pk").contains("#aggregate#")).count(),
            miscounted.len(),
            first(&miscounted)
        ),
    });
    // Without a redrive, events that can never succeed (dead-lettered with a permanent cause)
    // are the only ones allowed to be missing.
    let never: HashSet<String> =
        if redrive { HashSet::new() } else { dead.iter().filter(|m| m.permanent).filter_map(|m| m.event_id.clone()).collect() };
    let mut missing = Vec::new();
    let mut claims = Vec::new();
    let mut subscribed = 0;
    for c in &names.consumers {
        let prefix = c.inbox_consumer.as_ref().map(|n| format!("{n}#"));
        // Its claims: the events it applied, each with when (written in the effect's transaction).
        let applied: Vec<(String, String)> = inboxes
            .get(c.inbox.as_str())
            .into_iter()
            .flatten()
            .filter(|i| prefix.as_ref().is_none_or(|p| text(i, "pk").starts_with(p.as_str())))
            .filter(|i| !text(i, "event_id").is_empty() && text(i, "kind") != outbox::ordering::PARKED_KIND)
            .filter(|i| matches!(text(i, "status").as_str(), "" | "COMPLETED"))
            .map(|i| (text(i, "event_id"), text(i, "processed_at")))
            .collect();
        let completed: HashSet<String> = applied.iter().map(|(id, _)| id.clone()).collect();
        let theirs: Vec<&reads::Carried> = carried.iter().filter(|e| c.types.contains(&e.event_type)).collect();
        subscribed += theirs.len();
        missing.extend(
            theirs
                .into_iter()
                .filter(|e| !completed.contains(&e.id) && !never.contains(&e.id))
                .map(|e| format!("{} {} {}", c.logical_id, e.event_type, e.id)),
        );
        claims.extend(applied.into_iter().map(|(event_id, processed_at)| order::Claim { consumer: c.logical_id.clone(), event_id, processed_at }));
    }
    let consumers: Vec<&str> = names.consumers.iter().map(|c| c.logical_id.as_str()).collect();
    invariants.push(Invariant {
        name: if redrive { "nothing missing after the redrive" } else { "nothing missing without an operator (no redrive)" }.into(),
        held: missing.is_empty(),
        detail: format!(
            "{subscribed} events for the consumers ({}), {} not applied [{}] ({} never-succeeding excused), {} still parked [{}]; {left} dead letters left",
            consumers.join(", "),
            missing.len(),
            first(&missing),
            never.len(),
            parked.len(),
            first(&parked)
        ),
    });
    invariants.push(order::verdict(&carried, &claims));
    if !redrive {
        // What may pass later must never need a person: only never-succeeding causes in the queues.
        let transient: Vec<String> =
            dead.iter().filter(|m| !m.permanent).map(|m| format!("{} ({})", m.event_id.as_deref().unwrap_or(&m.message_id), m.cause)).collect();
        invariants.push(Invariant {
            name: "dead letters hold only what can never succeed".into(),
            held: transient.is_empty(),
            detail: format!("{} dead-lettered, {} with a cause that may pass [{}]", dead.len(), transient.len(), first(&transient)),
        });
    }
    invariants.push(Invariant {
        name: "the pipeline went quiet".into(),
        held: quiet && quiet_after_redrive,
        detail: format!("no AWS call for {} s within {} s", options.quiet.as_secs(), options.timeout.as_secs()),
    });

    let ok = invariants.iter().all(|i| i.held);
    Ok(ProofReport {
        books: books.name().to_owned(),
        books_file: books.path.display().to_string(),
        bus: bus_label(&runtime, options.relay.as_deref(), names.bus.id()),
        orders_sent: options.orders,
        orders_answered: answered.len(),
        orders_committed: checked.committed,
        cancellations_sent: to_cancel.len(),
        orders_cancelled: checked.undone,
        requests_failed: failed,
        aws_calls: injector.calls(),
        faults: injector.injected(),
        faults_by_kind: injector.injected_by_kind(),
        dead_lettered: dead.len(),
        redriven,
        dead_letters_left: left,
        stream_events: carried_ids.len(),
        published_events: published.len(),
        wall_secs: started.elapsed().as_secs_f64(),
        phases_secs: {
            lap("verdict", &mut phases);
            phases
        },
        peak_rss_mb: peak_rss_mb("self"),
        emulator_peak_rss_mb: options.emulator_pid.and_then(|pid| peak_rss_mb(&pid.to_string())),
        stages: crate::stats::status::stage_figures(&runtime.stats.snapshot()),
        invariants,
        ok,
    })
}

/// The bus the proof ran on, for the report: the relay's `EVENT_BUS_TYPE` (unset: `Classic`) and
/// `EVENT_BUS_NAME`; without a known relay, the consumers' bus (`consumers'`).
fn bus_label(runtime: &Runtime, relay: Option<&str>, consumers_bus: &str) -> String {
    match relay {
        Some(relay) => {
            let kind = env_var(runtime, relay, "EVENT_BUS_TYPE").unwrap_or_else(|_| "Classic".to_owned());
            let name = env_var(runtime, relay, outbox::contract::env::EVENT_BUS_NAME).unwrap_or_else(|_| consumers_bus.to_owned());
            format!("{kind} ({name})")
        }
        None => format!("the consumers' ({consumers_bus})"),
    }
}

/// `VmHWM` of process `pid` (a number or `self`), MB (Linux).
fn peak_rss_mb(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024.0)
}

/// "The requests took effect": with requests sent, at least one must have committed, or every
/// other invariant would hold over an empty service (a producer that refuses every request, an
/// `accepted` the answers never match) and the proof would check nothing.
fn requests_took_effect(sent: usize, accepted: usize, committed: usize, failed: usize) -> Invariant {
    Invariant {
        name: "the requests took effect (the proof checked something)".into(),
        held: sent == 0 || committed > 0,
        detail: format!(
            "{sent} sent, {accepted} accepted, {committed} committed, {failed} failed after retries{}",
            if sent > 0 && committed == 0 {
                "; none committed: is the producer refusing them, or does the books file's `accepted` match no answer? (its WARN lines above)"
            } else {
                ""
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::requests_took_effect;

    #[test]
    fn a_proof_whose_requests_all_failed_or_were_never_accepted_is_broken_not_green() {
        assert!(!requests_took_effect(3, 0, 0, 3).held, "every request refused: nothing was checked");
        assert!(requests_took_effect(3, 0, 0, 3).detail.contains("none committed"));
        assert!(!requests_took_effect(10, 0, 0, 0).held, "answers the books file never accepts");
        assert!(requests_took_effect(10, 9, 10, 1).held, "committed work was checked");
        assert!(requests_took_effect(10, 0, 2, 8).held, "a commit without an accepted answer still counts");
        assert!(requests_took_effect(0, 0, 0, 0).held, "--orders 0 (the hot aggregate alone) sends none");
    }

    use serde_json::json;

    use super::*;

    fn report() -> ProofReport {
        let mut stages = BTreeMap::new();
        stages.insert("OutboxRelayFunction".to_owned(), BTreeMap::from([("EventsPublished".to_owned(), 250), ("PutEventsCalls".to_owned(), 43)]));
        ProofReport {
            books: "orders".into(),
            books_file: "outbox-books.yaml".into(),
            bus: "Custom (arn:aws:events:us-east-1:123456789012:event-busv2/orders/abcdefghijklmnopqrstuvwxy)".into(),
            orders_sent: 100,
            orders_answered: 100,
            orders_committed: 100,
            cancellations_sent: 25,
            orders_cancelled: 25,
            requests_failed: 0,
            aws_calls: 529,
            faults: vec![Injected { fault: "crash events:PutEvents".into(), count: 1 }],
            faults_by_kind: BTreeMap::from([("crash".to_owned(), 1)]),
            dead_lettered: 0,
            redriven: 0,
            dead_letters_left: 0,
            stream_events: 250,
            published_events: 250,
            wall_secs: 36.0,
            phases_secs: vec![("orders", 5.6), ("quiet", 20.1), ("redrive", 9.1), ("verdict", 1.0)],
            peak_rss_mb: Some(45.2),
            emulator_peak_rss_mb: Some(104.9),
            stages,
            invariants: vec![Invariant { name: "the pipeline went quiet".into(), held: true, detail: "no AWS call for 8 s".into() }],
            ok: true,
        }
    }

    #[test]
    fn the_report_gives_the_phases_peak_memory_and_the_functions_stage_figures() {
        let text = format_report(&report());
        assert!(text.contains("time: orders 6 s, quiet 20 s, redrive 9 s, verdict 1 s"), "{text}");
        assert!(text.contains("peak memory: outbox-local 45 MB, emulator 105 MB"), "{text}");
        assert!(text.starts_with("books: outbox-books.yaml\nbus: Custom (arn:aws:events:us-east-1:123456789012:event-busv2/orders/"), "{text}");
        assert!(text.contains("OutboxRelayFunction: 250 published, 43 PutEvents calls"), "{text}");
        let json = serde_json::to_value(report()).expect("the report serialises");
        assert_eq!(json["stages"]["OutboxRelayFunction"]["EventsPublished"], 250);
        assert_eq!(json["phases_secs"][0], json!(["orders", 5.6]));
        assert_eq!(json["emulator_peak_rss_mb"], 104.9);
    }

    #[test]
    fn peak_memory_is_read_from_proc() {
        assert!(peak_rss_mb("self").is_some_and(|mb| mb > 0.0), "this process has a VmHWM");
        assert_eq!(peak_rss_mb("no-such-process"), None);
    }
}
