use std::collections::HashMap;

use aws_sdk_eventbridge::operation::describe_archive::DescribeArchiveOutput;
use aws_sdk_eventbridge::operation::list_replays::ListReplaysOutput;
use aws_sdk_eventbridge::types::{ArchiveState as Enabled, Replay};
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use serde_json::json;

use super::*;
use crate::resources::FunctionInfo;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("an RFC 3339 time").with_timezone(&Utc)
}

fn rule(name: &str, bus: &str) -> RuleInfo {
    RuleInfo { logical_id: name.into(), name: name.into(), bus: bus.into(), arn: RuleInfo::arn_of("eu-west-1", "1", bus, name) }
}

fn consumer(logical_id: &str, consumer_name: Option<&str>, rules: Vec<(RuleInfo, Value)>) -> FunctionInfo {
    let environment: HashMap<String, String> = consumer_name.map(|n| ("CONSUMER_NAME".to_owned(), n.to_owned())).into_iter().collect();
    FunctionInfo { logical_id: logical_id.into(), name: format!("s-{logical_id}"), environment, rules, ..Default::default() }
}

/// reserve-inventory (OrderCreated, OrderCancelled), the webhook dispatcher (every order type,
/// no CONSUMER_NAME), a function on another bus, and one archive.
fn resources() -> Resources {
    Resources {
        source: "stack s".into(),
        functions: vec![
            consumer(
                "ReserveInventoryFunction",
                Some("reserve-inventory"),
                vec![(rule("s-delivery", "s-orders"), json!({"source": ["example.orders"], "detail-type": ["OrderCreated", "OrderCancelled"]}))],
            ),
            consumer("WebhookDispatcherFunction", None, vec![(rule("s-webhooks", "s-orders"), json!({"source": [{"prefix": "example."}]}))]),
            consumer("Elsewhere", Some("elsewhere"), vec![(rule("s-other", "other-bus"), json!({"source": ["x"]}))]),
            consumer("RelayFunction", None, Vec::new()),
        ],
        archives: vec![Named {
            logical_id: "Relay/EventArchive".into(),
            name: "s-archive".into(),
            arn: "arn:aws:events:eu-west-1:1:archive/s-archive".into(),
        }],
        ..Default::default()
    }
}

fn request(consumers: Consumers) -> Request {
    Request { consumers, since: at("2026-12-01T00:00:00Z"), until: at("2026-12-01T06:00:00Z"), types: Vec::new(), sources: Vec::new(), archive: None }
}

fn names(rules: &[ChosenRule]) -> Vec<(&str, &str)> {
    rules.iter().map(|r| (r.rule.name.as_str(), r.consumer.as_str())).collect()
}

#[test]
fn a_consumer_is_found_by_its_consumer_name_logical_id_or_function_name_and_gets_its_rules_on_the_bus() {
    for given in ["reserve-inventory", "ReserveInventoryFunction", "s-ReserveInventoryFunction"] {
        let rules = choose_rules(&resources(), "s-orders", &request(Consumers::One(given.into()))).expect(given);
        assert_eq!(names(&rules), [("s-delivery", "reserve-inventory")], "{given}");
        assert_eq!(rules[0].rule.arn, "arn:aws:events:eu-west-1:1:rule/s-orders/s-delivery");
    }
    // Without CONSUMER_NAME, the function's logical id names it.
    let all = choose_rules(&resources(), "s-orders", &request(Consumers::All)).expect("every consumer");
    assert_eq!(names(&all), [("s-delivery", "reserve-inventory"), ("s-webhooks", "WebhookDispatcherFunction")], "only rules on the archive's bus");
}

#[test]
fn an_unknown_consumer_lists_the_consumers_of_the_bus() {
    let err = choose_rules(&resources(), "s-orders", &request(Consumers::One("billing".into()))).expect_err("no such consumer").to_string();
    assert!(err.starts_with("no consumer \"billing\" receives events from bus s-orders in stack s"), "{err}");
    assert!(
        err.contains("\n  reserve-inventory (function ReserveInventoryFunction)\n  WebhookDispatcherFunction (function WebhookDispatcherFunction)"),
        "{err}"
    );
    assert!(!err.contains("elsewhere") && !err.contains("RelayFunction"), "only consumers of this bus: {err}");
    let err = choose_rules(&resources(), "s-orders", &request(Consumers::One("elsewhere".into()))).expect_err("on another bus").to_string();
    assert!(err.starts_with("no consumer \"elsewhere\" receives events from bus s-orders"), "{err}");
}

#[test]
fn types_and_sources_choose_rules_and_name_what_a_rule_also_delivers() {
    let mut r = request(Consumers::All);
    r.types = vec!["OrderCancelled".into()];
    let chosen = choose_rules(&resources(), "s-orders", &r).expect("rules that can match");
    assert_eq!(names(&chosen), [("s-delivery", "reserve-inventory"), ("s-webhooks", "WebhookDispatcherFunction")]);
    assert_eq!(chosen[0].also_types, ["OrderCreated"], "replays have no event filter: the rule's other type is replayed too");
    assert_eq!(chosen[1].also_types, ["*"], "a rule without detail-type delivers every type");

    r.types = vec!["PaymentTaken".into()];
    r.sources = vec!["example.payments".into()];
    let chosen = choose_rules(&resources(), "s-orders", &r).expect("the prefix filter may match");
    assert_eq!(names(&chosen), [("s-webhooks", "WebhookDispatcherFunction")], "a content filter is taken as possibly matching");

    let mut r = request(Consumers::One("reserve-inventory".into()));
    r.types = vec!["PaymentTaken".into()];
    let err = choose_rules(&resources(), "s-orders", &r).expect_err("no rule can match").to_string();
    assert_eq!(err, "no rule of the chosen consumer(s) on bus s-orders can match --type PaymentTaken: nothing to replay to");
}

fn archive(created: &str, retention_days: i32) -> ArchiveState {
    ArchiveState {
        name: "s-archive".into(),
        arn: "arn:aws:events:eu-west-1:1:archive/s-archive".into(),
        bus_arn: "arn:aws:events:eu-west-1:1:event-bus/s-orders".into(),
        state: "ENABLED".into(),
        retention_days,
        created: Some(at(created)),
    }
}

#[test]
fn a_window_outside_the_archive_is_refused_and_one_partly_outside_is_warned_of() {
    let now = at("2026-12-10T00:00:00Z");
    let a = archive("2026-12-01T00:00:00Z", 5);
    assert_eq!(a.bus_name(), "s-orders");
    // Inside: no warning.
    assert_eq!(a.check_window(at("2026-12-06T00:00:00Z"), at("2026-12-07T00:00:00Z"), now).expect("inside"), Vec::<String>::new());
    let refused = |since: &str, until: &str| a.check_window(at(since), at(until), now).expect_err("refused").to_string();
    let err = refused("2026-11-20T00:00:00Z", "2026-11-30T00:00:00Z");
    assert!(err.contains("is before archive s-archive was created (2026-12-01T00:00:00+00:00): it holds nothing of that window"), "{err}");
    let err = refused("2026-12-02T00:00:00Z", "2026-12-04T00:00:00Z");
    assert!(err.contains("older than archive s-archive's retention (5 days, events since 2026-12-05T00:00:00+00:00)"), "{err}");
    let err = refused("2026-12-07T00:00:00Z", "2026-12-06T00:00:00Z");
    assert!(err.starts_with("--since \"2026-12-07T00:00:00+00:00\": must be before --until"), "{err}");
    let err = refused("2026-12-07T00:00:00Z", "2026-12-11T00:00:00Z");
    assert!(err.starts_with("--until \"2026-12-11T00:00:00+00:00\": is in the future"), "{err}");
    // A window wholly in the future names --since (not "before --until" against the default now).
    let err = refused("2026-12-12T00:00:00Z", "2026-12-10T00:00:00Z");
    assert!(err.starts_with("--since \"2026-12-12T00:00:00+00:00\": is in the future"), "{err}");
    // Partly outside: replayed, with a warning each.
    let warnings = a.check_window(at("2026-12-03T00:00:00Z"), at("2026-12-09T23:55:00Z"), now).expect("partly inside");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("less than 10 minutes ago"), "{warnings:?}");
    assert!(warnings[1].contains("events before 2026-12-05T00:00:00+00:00 are gone"), "{warnings:?}");
    let forever = archive("2026-12-01T00:00:00Z", 0);
    let warnings = forever.check_window(at("2026-11-01T00:00:00Z"), at("2026-12-02T00:00:00Z"), now).expect("0 keeps indefinitely");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("events before it were not archived"), "{warnings:?}");
    let disabled = ArchiveState { state: "DISABLED".into(), ..forever };
    let err = disabled.check_window(at("2026-12-06T00:00:00Z"), at("2026-12-07T00:00:00Z"), now).expect_err("disabled").to_string();
    assert_eq!(err, "archive s-archive is DISABLED (not ENABLED): it cannot be replayed from now");
}

#[test]
fn replay_names_fit_eventbridges_pattern_and_length() {
    let now = at("2026-12-03T14:05:09Z");
    assert_eq!(replay_name(&Consumers::All, now), "outbox-all-20261203T140509Z");
    assert_eq!(replay_name(&Consumers::One("reserve inventory/ü".into()), now), "outbox-reserve-inventory---20261203T140509Z");
    let long = replay_name(&Consumers::One("x".repeat(200)), now);
    assert_eq!(long.len(), REPLAY_NAME_MAX);
    assert!(long.ends_with("-20261203T140509Z"), "{long}");
}

#[test]
fn progress_is_the_share_of_the_window_replayed() {
    let (since, until) = (at("2026-12-01T00:00:00Z"), at("2026-12-01T10:00:00Z"));
    let mut p = Progress { name: "r".into(), state: "RUNNING".into(), reason: None, last_replayed: None };
    assert_eq!(p.percent(since, until), 0);
    p.last_replayed = Some(at("2026-12-01T04:00:00Z"));
    assert_eq!(p.line(since, until), "replay r: RUNNING, events up to 2026-12-01T04:00:00+00:00 replayed (40 % of the window)");
    assert!(!p.ended());
    p.state = "COMPLETED".into();
    assert!(p.ended() && p.percent(since, until) == 100);
}

fn describe_archive() -> aws_smithy_mocks::Rule {
    mock!(aws_sdk_eventbridge::Client::describe_archive).then_output(|| {
        DescribeArchiveOutput::builder()
            .archive_arn("arn:aws:events:eu-west-1:1:archive/s-archive")
            .event_source_arn("arn:aws:events:eu-west-1:1:event-bus/s-orders")
            .state(Enabled::Enabled)
            .retention_days(30)
            .creation_time(aws_sdk_eventbridge::primitives::DateTime::from_secs(at("2026-11-01T00:00:00Z").timestamp()))
            .build()
    })
}

#[tokio::test]
async fn a_replay_of_the_archive_still_running_is_refused_before_anything_starts() {
    let archive = describe_archive();
    let replays = mock!(aws_sdk_eventbridge::Client::list_replays)
        .match_requests(|r| r.event_source_arn() == Some("arn:aws:events:eu-west-1:1:archive/s-archive"))
        .then_output(|| {
            ListReplaysOutput::builder()
                .replays(Replay::builder().replay_name("old-done").state(ReplayState::Completed).build())
                .replays(Replay::builder().replay_name("outbox-all-1").state(ReplayState::Running).build())
                .build()
        });
    let start = mock!(aws_sdk_eventbridge::Client::start_replay)
        .then_output(|| aws_sdk_eventbridge::operation::start_replay::StartReplayOutput::builder().build());
    let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&archive, &replays, &start]);
    let replayer = Replayer::with_client(client);
    let err = prepare(&replayer, &resources(), &request(Consumers::All), at("2026-12-02T00:00:00Z")).await.expect_err("one is running").to_string();
    assert!(err.starts_with("replay outbox-all-1 of archive s-archive is still RUNNING: one replay of an archive at a time"), "{err}");
    assert!(err.contains("aws events cancel-replay --replay-name outbox-all-1"), "{err}");
    assert_eq!(start.num_calls(), 0, "nothing started");
}

#[tokio::test]
async fn a_plan_names_the_archive_its_bus_and_the_rules() {
    let archive = describe_archive();
    let replays = mock!(aws_sdk_eventbridge::Client::list_replays)
        .then_output(|| ListReplaysOutput::builder().replays(Replay::builder().replay_name("old").state(ReplayState::Completed).build()).build());
    let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&archive, &replays]);
    let plan =
        prepare(&Replayer::with_client(client), &resources(), &request(Consumers::One("reserve-inventory".into())), at("2026-12-02T00:00:00Z"))
            .await
            .expect("ready");
    assert_eq!((plan.archive.bus_arn.as_str(), plan.archive.retention_days), ("arn:aws:events:eu-west-1:1:event-bus/s-orders", 30));
    assert_eq!(names(&plan.rules), [("s-delivery", "reserve-inventory")]);
    assert_eq!(plan.name, "outbox-reserve-inventory-20261202T000000Z");
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}

#[tokio::test]
async fn a_stack_without_an_archive_is_told_where_one_comes_from() {
    let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, []);
    let without = Resources { archives: Vec::new(), ..resources() };
    let err = prepare(&Replayer::with_client(client), &without, &request(Consumers::All), at("2026-12-02T00:00:00Z"))
        .await
        .expect_err("no archive")
        .to_string();
    assert_eq!(
        err,
        "stack s has no event archive (AWS::Events::Archive); deploy the relay block of this version: its EventArchive keeps the bus's events for replays (ArchiveRetentionDays)"
    );
}
