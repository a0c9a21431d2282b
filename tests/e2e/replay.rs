//! Replay from a point in time (`outbox replay`): the relay block's archive on the bus, and
//! EventBridge's replay (played by the emulator shim, scripts/moto_server.py change 8) to one
//! consumer's rule.
//!
//! Orders flow to reserve-inventory; then the consumer kit's rule loses its target (a deploy
//! gone wrong: the bus accepts the events, the relay publishes them, nothing reaches the
//! delivery queue) and the orders of that outage are never delivered; the target comes back and
//! later orders flow again. `replay --since T --consumer reserve-inventory` re-delivers the whole
//! window: checked from the tables, every order is reserved exactly once (the inbox absorbed the
//! replayed copies of what was applied, and applied what was missed), and from a spy queue on
//! the bus, the replay reached the consumer's rule only. A replayed event keeps its trace id:
//! what the consumer wrote for it carries the order's.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use crate::common::{s, Deadline, Local};
use crate::relay_outage::{drain_spy, order_event};
use outbox_cli::cli::replay::ReplayArgs;
use outbox_cli::cli::{Context, Operator};

const SKU: &str = "SKU-OUTAGE"; // relay_outage::order_event's

/// `n` orders (one `OrderCreated` each, of one unit), committed to the outbox; their ids.
async fn orders(local: &Local, label: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("replay-{label}-{i}-{}", crate::common::short_id());
        order_event(local, &id, false).await;
        ids.push(id);
    }
    ids
}

/// The orders with a `RESERVED` reservation, each with how many reservation rows it has.
async fn reservations(local: &Local) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for row in local.scan(&local.table("InventoryTable")).await {
        if s(&row, "pk").starts_with("RESERVATION#") && s(&row, "status") == "RESERVED" {
            *out.entry(s(&row, "order_id").to_owned()).or_default() += 1;
        }
    }
    out
}

/// reserve-inventory's claims in the inbox (one row per event it applied or absorbed).
async fn claims(local: &Local) -> usize {
    let rows = local.scan(&local.table("ConsumerKit/InboxTable")).await;
    rows.iter()
        .filter(|r| s(r, "pk").starts_with("reserve-inventory#") && !s(r, "pk").contains("#aggregate#") && !s(r, "pk").contains("#parked#"))
        .count()
}

/// Waits until the stock shows `reserved` units reserved and the delivery queue is empty (every
/// delivery, replayed copies included, taken by the consumer).
async fn settle(local: &Local, reserved: u64, what: &str) {
    let inventory = local.table("InventoryTable");
    let delivery = local.runtime.stack.queue("ConsumerKit/DeliveryQueue").cloned().expect("the consumer kit's delivery queue");
    let deadline = Deadline::new(what.to_owned());
    loop {
        let stock = orders_app::inventory::stock(&local.dynamodb, &inventory, SKU).await.expect("stock");
        let waiting = outbox_cli::dlq::depth(&local.sqs, &delivery).await.expect("the delivery queue's depth");
        if stock == Some((1000 - reserved, reserved)) && waiting == 0 {
            return;
        }
        deadline.tick(|| format!("stock {stock:?}, {waiting} waiting, stats {:?}", local.runtime.stats.snapshot())).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_an_outage_applies_only_what_the_consumer_missed() {
    let mut local = Local::start().await;
    let inventory = local.table("InventoryTable");
    orders_app::inventory::put_stock(&local.dynamodb, &inventory, SKU, 1000).await.expect("stock");
    let bus = local.env_of("Relay/RelayFunction").remove("EVENT_BUS_NAME").expect("EVENT_BUS_NAME");
    let spy = local.spy_on_bus(&bus, "example.orders").await;
    let rule = local.runtime.stack.queue_rules.iter().find(|r| r.logical_id == "ConsumerKit/DeliveryRule").cloned().expect("the kit's rule");
    let target = local.events.list_targets_by_rule().rule(&rule.rule_name).event_bus_name(&rule.bus_name).send().await.expect("ListTargetsByRule");
    let target = target.targets().first().cloned().expect("the rule's target: the delivery queue");
    local.spawn_pipelines();

    let since = chrono::Utc::now() - chrono::Duration::seconds(1);
    let before = orders(&local, "before", 3).await;
    settle(&local, 3, "the orders before the outage reserved").await;

    // The outage: the rule has no target; the relay publishes, the bus accepts, the consumer gets nothing.
    local.events.remove_targets().rule(&rule.rule_name).event_bus_name(&rule.bus_name).ids(target.id()).send().await.expect("RemoveTargets");
    let missed = orders(&local, "missed", 4).await;
    let mut seen = BTreeMap::new();
    let deadline = Deadline::new("the outage's orders published (the spy saw them)");
    while seen.len() < 7 {
        drain_spy(&local, &spy, &mut seen).await;
        deadline.tick(|| format!("{seen:?}")).await;
    }
    local.events.put_targets().rule(&rule.rule_name).event_bus_name(&rule.bus_name).targets(target).send().await.expect("PutTargets");
    let after = orders(&local, "after", 2).await;
    settle(&local, 5, "the orders after the outage reserved").await;
    let reserved = reservations(&local).await;
    let applied: BTreeSet<String> = before.iter().chain(&after).cloned().collect();
    assert_eq!(reserved.keys().cloned().collect::<BTreeSet<_>>(), applied, "the outage's orders were missed: {reserved:?}");
    drain_spy(&local, &spy, &mut seen).await;
    assert_eq!(seen.len(), 9, "every order was published once: {seen:?}");

    // The operator's step: replay the window to reserve-inventory's rule.
    let args = ReplayArgs {
        since: Some(since.to_rfc3339()),
        until: None,
        consumer: Some("reserve-inventory".into()),
        all: false,
        types: Vec::new(),
        sources: Vec::new(),
        archive: None,
        no_wait: false,
        poll_seconds: 1,
        cleanup: false,
        force: false,
    };
    let resources = outbox_cli::resources::Resources::from_stack(&local.runtime.stack).expect("the stack's resources");
    assert_eq!(resources.archives.len(), 1, "the relay block's archive: {:?}", resources.archives);
    let context = Context { sdk: local.runtime.sdk.clone(), resources, yes: true };
    let code = outbox_cli::cli::run(&context, &Operator::Replay(args)).await.expect("the replay completes");
    assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::SUCCESS), "the replay completed");

    // From the tables: all 9 orders reserved, each once; the inbox holds one claim per event.
    settle(&local, 9, "every order reserved after the replay, the replayed copies taken").await;
    let reserved = reservations(&local).await;
    let all: BTreeSet<String> = applied.iter().chain(&missed).cloned().collect();
    assert_eq!(reserved.keys().cloned().collect::<BTreeSet<_>>(), all, "what was missed is applied");
    assert!(reserved.values().all(|n| *n == 1), "nothing applied twice: {reserved:?}");
    assert_eq!(claims(&local).await, 9, "one inbox claim per event");
    // A replayed event keeps its trace (the context is in `detail.metadata`, not in EventBridge's
    // `TraceHeader`): what the consumer wrote for each missed order joins the order's trace.
    let outbox = local.table("OutboxTable");
    for id in &missed {
        let trace_of = |items: Vec<std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>>| {
            items.first().map(|i| outbox::envelope::trace_id(Some(s(i, "traceparent"))).to_owned()).unwrap_or_default()
        };
        let (order, reservation) =
            (trace_of(local.query_pk(&outbox, &format!("Order#{id}")).await), trace_of(local.query_pk(&outbox, &format!("Reservation#{id}")).await));
        assert!(order.len() == 32 && order == reservation, "the replayed {id} kept its trace: order {order:?}, reservation {reservation:?}");
    }
    let dlq = local.runtime.stack.queue("ConsumerKit/ConsumerDeadLetterQueue").cloned().expect("the kit's dead-letter queue");
    assert_eq!(outbox_cli::dlq::depth(&local.sqs, &dlq).await.expect("depth"), 0, "no replayed copy dead-lettered");

    // The replay went to the consumer's rule only (Destination.FilterArns): the spy's rule got nothing.
    drain_spy(&local, &spy, &mut seen).await;
    assert!(seen.len() == 9 && seen.values().all(|n| *n == 1), "the spy saw no replayed event: {seen:?}");
    let counts = local.runtime.stats.snapshot();
    eprintln!("replay: {} replayed copies absorbed as duplicates", counts.outcome_count("duplicate"));

    // A second replay of a window before the archive existed is refused before anything starts.
    let early = ReplayArgs {
        since: Some("2020-01-01T00:00:00Z".into()),
        until: Some("2020-01-02T00:00:00Z".into()),
        consumer: None,
        all: true,
        types: Vec::new(),
        sources: Vec::new(),
        archive: None,
        no_wait: true,
        poll_seconds: 1,
        cleanup: false,
        force: false,
    };
    let err = outbox_cli::cli::run(&context, &Operator::Replay(early)).await.expect_err("outside the archive").to_string();
    assert!(err.contains("is before archive") && err.contains("it holds nothing of that window"), "{err}");
    local.shutdown().await;
}
