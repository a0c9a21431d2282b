use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_sdk_eventbridgev2::operation::create_subscriber::{CreateSubscriberError, CreateSubscriberInput, CreateSubscriberOutput};
use aws_sdk_eventbridgev2::operation::delete_subscriber::{DeleteSubscriberError, DeleteSubscriberOutput};
use aws_sdk_eventbridgev2::operation::describe_event_bus::DescribeEventBusOutput;
use aws_sdk_eventbridgev2::operation::describe_subscriber::DescribeSubscriberError;
use aws_sdk_eventbridgev2::operation::list_subscribers::ListSubscribersOutput;
use aws_sdk_eventbridgev2::types::error::{InvalidInputException, LimitExceededException, ResourceNotFoundException};
use aws_sdk_eventbridgev2::types::{
    Filter, FilterConfiguration, FilterScope, InvokeConfiguration, OnFailureConfiguration, OrderingType, RetryPolicy, SqsParameters,
    StorageConfigurationOutput, SubscriberSummary, Transformer, TransformerType,
};
use aws_smithy_mocks::{mock, mock_client, MockResponse, RuleMode};

use super::*;
use crate::resources::FunctionInfo;

const BUS: &str = "arn:aws:events:eu-west-1:111122223333:event-busv2/s-orders/abcdefghijklmnopqrstuvwxy";
const SUBSCRIBER: &str = "arn:aws:events:eu-west-1:111122223333:subscriber/s-orders/s-reserve";
const DELIVERY: &str = "arn:aws:sqs:eu-west-1:111122223333:s-delivery.fifo";

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("an RFC 3339 time").with_timezone(&Utc)
}

fn secs(t: &str) -> aws_sdk_eventbridgev2::primitives::DateTime {
    aws_sdk_eventbridgev2::primitives::DateTime::from_secs(at(t).timestamp())
}

fn function(logical_id: &str, consumer_name: Option<&str>, queues: &[&str]) -> FunctionInfo {
    let environment: HashMap<String, String> = consumer_name.map(|n| ("CONSUMER_NAME".to_owned(), n.to_owned())).into_iter().collect();
    FunctionInfo {
        logical_id: logical_id.into(),
        name: format!("s-{logical_id}"),
        environment,
        queues: queues.iter().map(|q| (*q).to_owned()).collect(),
        ..Default::default()
    }
}

/// reserve-inventory reads the kit's FIFO delivery queue, which the Custom bus's subscriber
/// targets; the audit function is the target of a subscriber itself; billing is on the classic
/// bus (a rule only); the relay receives nothing.
fn resources() -> Resources {
    let classic_rule = crate::resources::RuleInfo {
        logical_id: "BillingRule".into(),
        name: "s-billing".into(),
        bus: "s-classic".into(),
        arn: "arn:aws:events:eu-west-1:111122223333:rule/s-classic/s-billing".into(),
    };
    let mut billing = function("BillingFunction", Some("billing"), &["arn:aws:sqs:eu-west-1:111122223333:s-billing"]);
    billing.rules = vec![(classic_rule, serde_json::json!({"source": ["example.orders"]}))];
    Resources {
        source: "stack s".into(),
        functions: vec![
            function("ReserveInventoryFunction", Some("reserve-inventory"), &[DELIVERY]),
            function("AuditFunction", None, &[]),
            billing,
            function("RelayFunction", None, &[]),
        ],
        subscribers: vec![
            SubscriberInfo::new("ConsumerKit/DeliverySubscriber", "s-reserve", SUBSCRIBER, BUS, DELIVERY),
            SubscriberInfo::new(
                "AuditSubscriber",
                "s-audit",
                "arn:aws:events:eu-west-1:111122223333:subscriber/s-orders/s-audit",
                BUS,
                "arn:aws:lambda:eu-west-1:111122223333:function:s-AuditFunction:live",
            ),
        ],
        ..Default::default()
    }
}

fn chosen_names(chosen: &[Chosen]) -> Vec<(&str, &str)> {
    chosen.iter().map(|c| (c.consumer.as_str(), c.subscriber.name.as_str())).collect()
}

#[test]
fn a_consumer_s_subscriber_is_the_one_targeting_its_queue_or_its_function() {
    for given in ["reserve-inventory", "ReserveInventoryFunction", "s-ReserveInventoryFunction"] {
        let chosen = choose_subscribers(&resources(), &Consumers::One(given.into())).expect(given).expect("on the Custom bus");
        assert_eq!(chosen_names(&chosen), [("reserve-inventory", "s-reserve")], "{given}");
    }
    let audit = choose_subscribers(&resources(), &Consumers::One("AuditFunction".into())).expect("found").expect("a function target");
    assert_eq!(chosen_names(&audit), [("AuditFunction", "s-audit")], "a qualified function ARN names the function");
    let all = choose_subscribers(&resources(), &Consumers::All).expect("found").expect("some on the Custom bus");
    assert_eq!(chosen_names(&all), [("reserve-inventory", "s-reserve"), ("AuditFunction", "s-audit")], "every consumer with a subscriber");
}

#[test]
fn a_consumer_on_the_classic_bus_has_no_subscriber_and_an_unknown_one_lists_the_consumers() {
    assert_eq!(choose_subscribers(&resources(), &Consumers::One("billing".into())).expect("found"), None, "the archive replay applies");
    let classic = Resources { subscribers: Vec::new(), ..resources() };
    assert_eq!(choose_subscribers(&classic, &Consumers::All).expect("a classic stack"), None);
    let err = choose_subscribers(&resources(), &Consumers::One("shipping".into())).expect_err("no such consumer").to_string();
    assert!(err.starts_with("no consumer \"shipping\" in stack s (give a consumer's CONSUMER_NAME, function logical id or name)"), "{err}");
    assert!(
        err.ends_with("\n  reserve-inventory (function ReserveInventoryFunction)\n  AuditFunction (function AuditFunction)\n  billing (function BillingFunction)"),
        "classic and Custom consumers, not the relay: {err}"
    );
}

#[test]
fn replay_subscriber_names_carry_the_time_and_fit_the_name_limit() {
    let now = at("2026-12-03T14:05:09Z");
    assert_eq!(replay_subscriber_name("s-reserve", now), "s-reserve-replay-20261203T140509Z");
    assert!(replay_subscriber_name("s-reserve", now).starts_with(&replay_prefix("s-reserve")));
    let long = "n".repeat(100);
    let name = replay_subscriber_name(&long, now);
    assert_eq!(name.len(), SUBSCRIBER_NAME_MAX);
    assert!(name.starts_with(&replay_prefix(&long)) && name.ends_with("-replay-20261203T140509Z"), "{name}");
}

fn retention(days: Option<i32>, window_start: Option<&str>) -> BusRetention {
    BusRetention { arn: BUS.into(), name: "s-orders".into(), retention_days: days, window_start: window_start.map(at) }
}

#[test]
fn a_window_must_lie_in_the_bus_s_retention_and_in_the_past() {
    let now = at("2026-12-10T00:00:00Z");
    let bus = retention(Some(7), Some("2026-12-03T00:00:00Z"));
    assert_eq!(bus.check_window(at("2026-12-04T00:00:00Z"), at("2026-12-05T00:00:00Z"), now).map_err(|e| e.to_string()), Ok(()));
    assert_eq!(bus.check_window(at("2026-12-03T00:00:00Z"), now, now).map_err(|e| e.to_string()), Ok(()), "from the window's start to now");
    let refused = |bus: &BusRetention, since: &str, until: &str| bus.check_window(at(since), at(until), now).expect_err("refused").to_string();
    let err = refused(&bus, "2026-12-02T23:59:59Z", "2026-12-05T00:00:00Z");
    assert_eq!(
        err,
        "--since \"2026-12-02T23:59:59+00:00\": is beyond what bus s-orders retains (its retention window starts at 2026-12-03T00:00:00+00:00, it keeps 7 days): those events are gone; give --since 2026-12-03T00:00:00+00:00 or later"
    );
    assert!(refused(&bus, "2026-12-11T00:00:00Z", "2026-12-12T00:00:00Z").starts_with("--since \"2026-12-11T00:00:00+00:00\": is in the future"));
    assert!(refused(&bus, "2026-12-05T00:00:00Z", "2026-12-11T00:00:00Z").starts_with("--until \"2026-12-11T00:00:00+00:00\": is in the future"));
    assert!(
        refused(&bus, "2026-12-05T00:00:00Z", "2026-12-04T00:00:00Z").starts_with("--since \"2026-12-05T00:00:00+00:00\": must be before --until")
    );
    // Without RetentionWindowStartTime: now − RetentionPeriodInDays.
    let err = refused(&retention(Some(2), None), "2026-12-07T00:00:00Z", "2026-12-09T00:00:00Z");
    assert!(err.contains("its retention window starts at 2026-12-08T00:00:00+00:00, it keeps 2 days"), "{err}");
    // A bus that says neither: the order checks only.
    assert!(retention(None, None).check_window(at("2020-01-01T00:00:00Z"), now, now).is_ok());
}

#[test]
fn cleanup_waits_for_the_end_and_the_retry_window_unless_forced() {
    let replay = ReplaySubscriber {
        name: "s-reserve-replay-1".into(),
        arn: "a".into(),
        since: Some(at("2026-12-01T00:00:00Z")),
        until: Some(at("2026-12-01T06:00:00Z")),
        max_event_age_seconds: 3600,
        state: "RUNNING".into(),
    };
    assert_eq!(replay.cleanup(at("2026-12-01T05:00:00Z"), false), Cleanup::Wait(at("2026-12-01T07:00:00Z")));
    assert_eq!(replay.cleanup(at("2026-12-01T05:00:00Z"), true), Cleanup::Wait(at("2026-12-01T06:00:00Z")), "--force still waits for the end");
    assert_eq!(replay.cleanup(at("2026-12-01T06:30:00Z"), false), Cleanup::Wait(at("2026-12-01T07:00:00Z")), "its retries may still run");
    assert_eq!(replay.cleanup(at("2026-12-01T06:30:00Z"), true), Cleanup::Delete);
    assert_eq!(replay.cleanup(at("2026-12-01T07:00:00Z"), false), Cleanup::Delete);
    let endless = ReplaySubscriber { until: None, ..replay };
    assert_eq!(endless.cleanup(at("2030-01-01T00:00:00Z"), true), Cleanup::NoEnd);
}

fn describe_bus() -> aws_smithy_mocks::Rule {
    mock!(aws_sdk_eventbridgev2::Client::describe_event_bus).match_requests(|r| r.event_bus_arn() == Some(BUS)).then_output(|| {
        DescribeEventBusOutput::builder()
            .event_bus_arn(BUS)
            .name("s-orders")
            .storage_configuration(
                StorageConfigurationOutput::builder().retention_period_in_days(7).retention_window_start_time(secs("2026-12-01T00:00:00Z")).build(),
            )
            .build()
    })
}

/// The kit's subscriber: FIFO to the delivery queue, the aggregate as message group.
fn describe_original() -> aws_smithy_mocks::Rule {
    mock!(aws_sdk_eventbridgev2::Client::describe_subscriber).match_requests(|r| r.subscriber_arn() == Some(SUBSCRIBER)).then_output(|| {
        let sqs = SqsParameters::builder()
            .message_group_id("{% $events.SystemMetadata.EventGroupId %}")
            .message_deduplication_id("{% $events.SystemMetadata.\"aws:EventId\" %}")
            .build();
        let invoke = InvokeConfiguration::builder()
            .target_arn(DELIVERY)
            .role_arn("arn:aws:iam::111122223333:role/s-deliver")
            .sqs_parameters(sqs)
            .build()
            .expect("an invoke configuration");
        let filter = Filter::builder()
            .pattern(r#"{"source":["example.orders"],"detail-type":["OrderCreated"]}"#)
            .scope(FilterScope::Data)
            .build()
            .expect("a filter");
        DescribeSubscriberOutput::builder()
            .subscriber_arn(SUBSCRIBER)
            .name("s-reserve")
            .event_bus_arn(BUS)
            .invoke_configuration(invoke)
            .filter_configuration(FilterConfiguration::builder().filters(filter).build())
            .r#type(OrderingType::Fifo)
            .transformer(Transformer::builder().r#type(TransformerType::Raw).build())
            .retry_policy(RetryPolicy::builder().max_retry_attempts(185).max_event_age_in_seconds(86_400).build())
            .on_failure_configuration(OnFailureConfiguration::builder().arn("arn:aws:sqs:eu-west-1:111122223333:s-bus-failures.fifo").build())
            .starting_position(StartingPosition::Latest)
            .build()
    })
}

fn reserve() -> Vec<Chosen> {
    choose_subscribers(&resources(), &Consumers::One("reserve-inventory".into())).expect("found").expect("on the Custom bus")
}

#[tokio::test]
async fn a_replay_subscriber_copies_the_consumer_s_subscriber_and_reads_the_window_from_a_point_in_time() {
    let sent: Arc<Mutex<Option<CreateSubscriberInput>>> = Arc::default();
    let kept = sent.clone();
    let create = mock!(aws_sdk_eventbridgev2::Client::create_subscriber).then_compute_output(move |input| {
        *kept.lock().expect("not poisoned") = Some(input.clone());
        CreateSubscriberOutput::builder().subscriber_arn("arn:replay").name(input.name().unwrap_or_default()).build()
    });
    let (bus, original) = (describe_bus(), describe_original());
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus, &original, &create]);
    let replayer = SubscriberReplayer::with_client(client);
    let (since, until, now) = (at("2026-12-02T00:00:00Z"), at("2026-12-02T06:00:00Z"), at("2026-12-02T07:00:00Z"));
    let plans = prepare(&replayer, &reserve(), since, until, now).await.expect("ready");
    assert_eq!(plans.len(), 1);
    assert_eq!((plans[0].name.as_str(), plans[0].bus.name.as_str()), ("s-reserve-replay-20261202T070000Z", "s-orders"));
    let created = replayer.create(&plans[0], since, until).await.expect("created");
    assert_eq!(created, Created { consumer: "reserve-inventory".into(), name: "s-reserve-replay-20261202T070000Z".into(), arn: "arn:replay".into() });

    let input = sent.lock().expect("not poisoned").clone().expect("CreateSubscriber was called");
    assert_eq!((input.name(), input.event_bus_arn()), (Some("s-reserve-replay-20261202T070000Z"), Some(BUS)));
    assert_eq!(input.starting_position(), Some(&StartingPosition::PointInTime));
    let point = input.point_in_time_configuration().expect("a point in time");
    assert_eq!(point.point_type(), &PointType::Timestamp);
    assert_eq!(point.starting_point().and_then(time_of), Some(since));
    assert_eq!(point.end_point().and_then(time_of), Some(until), "the replay stops at --until");
    // Everything the consumer's subscriber delivers with is copied.
    let o = &plans[0].original;
    let (made, original) = (input.invoke_configuration().expect("an invoke configuration"), o.invoke_configuration().expect("the original's"));
    assert_eq!((made.target_arn(), made.role_arn()), (original.target_arn(), original.role_arn()), "same target and role");
    let (made_sqs, original_sqs) = (made.sqs_parameters().expect("SQS parameters"), original.sqs_parameters().expect("the original's"));
    assert_eq!(made_sqs.message_group_id(), original_sqs.message_group_id(), "the same message group: the aggregate");
    // A deduplication id of this replay's own: the FIFO queue took the originals' in the last 5 minutes maybe.
    assert_eq!(made_sqs.message_deduplication_id(), Some("{% $events.SystemMetadata.\"aws:EventId\" & '#s-reserve-replay-20261202T070000Z' %}"));
    assert_eq!(input.filter_configuration(), o.filter_configuration());
    assert_eq!(input.r#type(), Some(&OrderingType::Fifo), "FIFO: each event group in order in the replay too");
    assert_eq!(input.transformer(), o.transformer());
    assert_eq!(input.retry_policy(), o.retry_policy());
    assert_eq!(input.on_failure_configuration(), o.on_failure_configuration());
    assert_eq!(input.state(), Some(&SubscriberState::Running));
    assert!(input.description().is_some_and(|d| d.contains("s-reserve") && d.contains("reserve-inventory")), "{input:?}");
}

#[tokio::test]
async fn a_window_beyond_the_retention_is_refused_before_anything_is_created() {
    let create = mock!(aws_sdk_eventbridgev2::Client::create_subscriber).then_output(|| CreateSubscriberOutput::builder().build());
    let (bus, original) = (describe_bus(), describe_original());
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus, &original, &create]);
    let err = prepare(
        &SubscriberReplayer::with_client(client),
        &reserve(),
        at("2026-11-30T00:00:00Z"),
        at("2026-12-02T00:00:00Z"),
        at("2026-12-03T00:00:00Z"),
    )
    .await
    .expect_err("before the retention window")
    .to_string();
    assert!(err.contains("is beyond what bus s-orders retains (its retention window starts at 2026-12-01T00:00:00+00:00"), "{err}");
    assert_eq!((create.num_calls(), original.num_calls()), (0, 0), "nothing read further, nothing created");
}

#[tokio::test]
async fn a_subscriber_gone_from_the_bus_is_named() {
    let gone = mock!(aws_sdk_eventbridgev2::Client::describe_subscriber).then_error(|| {
        DescribeSubscriberError::ResourceNotFoundException(ResourceNotFoundException::builder().message("no such subscriber").build())
    });
    let bus = describe_bus();
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus, &gone]);
    let err = prepare(
        &SubscriberReplayer::with_client(client),
        &reserve(),
        at("2026-12-02T00:00:00Z"),
        at("2026-12-02T06:00:00Z"),
        at("2026-12-03T00:00:00Z"),
    )
    .await
    .expect_err("deleted outside the stack")
    .to_string();
    assert_eq!(err, format!("subscriber {SUBSCRIBER} is not there: DescribeSubscriber found none"));
}

#[tokio::test]
async fn the_bus_refusing_the_replay_subscriber_says_why_and_what_to_do() {
    let (bus, original) = (describe_bus(), describe_original());
    let (since, until, now) = (at("2026-12-02T00:00:00Z"), at("2026-12-02T06:00:00Z"), at("2026-12-03T00:00:00Z"));
    let limit = mock!(aws_sdk_eventbridgev2::Client::create_subscriber)
        .then_error(|| CreateSubscriberError::LimitExceededException(LimitExceededException::builder().message("too many subscribers").build()));
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&bus, &original, &limit]);
    let replayer = SubscriberReplayer::with_client(client);
    let plans = prepare(&replayer, &reserve(), since, until, now).await.expect("ready");
    let err = replayer.create(&plans[0], since, until).await.expect_err("the quota").to_string();
    assert!(
        err.contains("its quota of subscribers is reached; remove finished replays (outbox replay --consumer reserve-inventory --cleanup)"),
        "{err}"
    );

    let invalid = mock!(aws_sdk_eventbridgev2::Client::create_subscriber).then_error(|| {
        CreateSubscriberError::InvalidInputException(
            InvalidInputException::builder().message("StartingPoint is outside the retention window").build(),
        )
    });
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&invalid]);
    let err = SubscriberReplayer::with_client(client).create(&plans[0], since, until).await.expect_err("refused").to_string();
    assert!(err.starts_with("bus s-orders refused replay subscriber s-reserve-replay-20261203T000000Z: "), "{err}");
    assert!(err.contains("StartingPoint is outside the retention window"), "the bus's reason: {err}");
}

#[tokio::test]
async fn cleanup_lists_only_the_consumer_s_replay_subscribers_and_deletes_what_is_over() {
    let listed = mock!(aws_sdk_eventbridgev2::Client::list_subscribers)
        .match_requests(|r| r.event_bus_arn() == Some(BUS) && r.name_prefix() == Some("s-reserve-replay-"))
        .then_output(|| {
            let summary = |name: &str| SubscriberSummary::builder().name(name).subscriber_arn(format!("arn:{name}")).build();
            ListSubscribersOutput::builder()
                .subscribers(summary("s-reserve-replay-20261201T000000Z"))
                .subscribers(summary("s-reserve-replay-20261202T000000Z"))
                .subscribers(summary("s-reserve-replay-gone"))
                .subscribers(summary("s-reserve-replay-20261203T000000Z"))
                // Whatever the service's prefix filter lets through, nothing else is taken.
                .subscribers(summary("s-reserve"))
                .build()
        });
    let described = mock!(aws_sdk_eventbridgev2::Client::describe_subscriber).then_compute_response(|input| {
        let name = input.subscriber_arn().unwrap_or_default().trim_start_matches("arn:").to_owned();
        if name.ends_with("gone") {
            return MockResponse::Error(DescribeSubscriberError::ResourceNotFoundException(ResourceNotFoundException::builder().build()));
        }
        let end = if name.contains("20261201") { "2026-12-01T06:00:00Z" } else { "2026-12-02T06:00:00Z" };
        let point = PointInTimeConfiguration::builder()
            .point_type(PointType::Timestamp)
            .starting_point(secs("2026-12-01T00:00:00Z"))
            .end_point(secs(end))
            .build()
            .expect("a point in time");
        // One whose name has the prefix but that this command did not make (no such description).
        let description =
            if name.contains("20261203") { "someone's own".to_owned() } else { format!("{}reserve-inventory: …", replay_description("s-reserve")) };
        MockResponse::Output(
            DescribeSubscriberOutput::builder()
                .description(description)
                .name(name)
                .point_in_time_configuration(point)
                .retry_policy(RetryPolicy::builder().max_event_age_in_seconds(3600).build())
                .state(SubscriberState::Running)
                .build(),
        )
    });
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&listed, &described]);
    let replayer = SubscriberReplayer::with_client(client);
    let replays = replayer.replays(&reserve()[0].subscriber).await.expect("listed");
    let now = at("2026-12-02T06:30:00Z");
    let plan: Vec<(&str, Cleanup)> = replays.iter().map(|r| (r.name.as_str(), r.cleanup(now, false))).collect();
    assert_eq!(
        plan,
        [("s-reserve-replay-20261201T000000Z", Cleanup::Delete), ("s-reserve-replay-20261202T000000Z", Cleanup::Wait(at("2026-12-02T07:00:00Z"))),],
        "the consumer's own subscriber is never listed; one deleted meanwhile is skipped, one not made by replay too"
    );
    assert_eq!(replays[0].max_event_age_seconds, 3600);

    let deleted = mock!(aws_sdk_eventbridgev2::Client::delete_subscriber).then_output(|| DeleteSubscriberOutput::builder().build());
    let already = mock!(aws_sdk_eventbridgev2::Client::delete_subscriber)
        .then_error(|| DeleteSubscriberError::ResourceNotFoundException(ResourceNotFoundException::builder().build()));
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::Sequential, [&deleted, &already]);
    let replayer = SubscriberReplayer::with_client(client);
    replayer.delete("arn:s-reserve-replay-20261201T000000Z").await.expect("deleted");
    replayer.delete("arn:s-reserve-replay-20261201T000000Z").await.expect("already gone counts as deleted");
}

fn context(resources: Resources) -> crate::cli::Context {
    crate::cli::Context { sdk: aws_config::SdkConfig::builder().build(), resources, yes: true }
}

fn args(extra: &[&str]) -> crate::cli::replay::ReplayArgs {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        replay: crate::cli::replay::ReplayArgs,
    }
    Cli::try_parse_from(std::iter::once("replay").chain(extra.iter().copied())).expect("valid arguments").replay
}

#[tokio::test]
async fn the_classic_bus_s_options_and_cleanup_are_refused_where_they_do_not_apply() {
    // On a Custom bus, --type chooses nothing: refused before any call.
    let err = crate::cli::replay::run(&context(resources()), &args(&["--consumer", "reserve-inventory", "--since", "2h", "--type", "OrderCreated"]))
        .await
        .expect_err("classic only")
        .to_string();
    assert!(err.starts_with("--type/--source/--archive \"OrderCreated\": choose the classic bus's rules and archive"), "{err}");
    // On the classic bus there is nothing to clean up.
    let err = crate::cli::replay::run(&context(resources()), &args(&["--consumer", "billing", "--cleanup"])).await.expect_err("classic").to_string();
    assert!(
        err.starts_with("consumer billing receive(s) events from the classic bus (rules, no Custom-bus subscriber) in stack s: its replays are EventBridge archive replays"),
        "{err}"
    );
    // An unknown consumer: named, whichever bus.
    let err = crate::cli::replay::run(&context(resources()), &args(&["--consumer", "nobody", "--cleanup"])).await.expect_err("unknown").to_string();
    assert!(err.starts_with("no consumer \"nobody\" in stack s"), "{err}");
}

#[test]
fn cleanup_takes_no_window_and_force_only_with_cleanup() {
    use clap::Parser;
    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        replay: crate::cli::replay::ReplayArgs,
    }
    let parse = |a: &[&str]| Cli::try_parse_from(std::iter::once("replay").chain(a.iter().copied())).map(|c| c.replay);
    assert!(parse(&["--consumer", "c", "--cleanup"]).is_ok_and(|a| a.cleanup && a.since.is_none()));
    assert!(parse(&["--consumer", "c"]).is_err(), "--since is required without --cleanup");
    assert!(parse(&["--consumer", "c", "--cleanup", "--since", "2h"]).is_err());
    assert!(parse(&["--consumer", "c", "--since", "2h", "--force"]).is_err(), "--force only with --cleanup");
}

#[tokio::test]
async fn a_looked_up_subscriber_is_found_by_its_name_on_its_bus() {
    let listed = mock!(aws_sdk_eventbridgev2::Client::list_subscribers)
        .match_requests(|r| r.event_bus_arn().is_none() && r.name_prefix() == Some("s-reserve"))
        .then_output(|| {
            let summary = |name: &str, bus: &str, arn: &str| SubscriberSummary::builder().name(name).event_bus_arn(bus).subscriber_arn(arn).build();
            ListSubscribersOutput::builder()
                .subscribers(summary("s-reserve-replay-20261201T000000Z", BUS, "arn:replay"))
                .subscribers(summary("s-reserve", "arn:aws:events:eu-west-1:111122223333:event-busv2/other/zzzzzzzzzzzzzzzzzzzzzzzzz", "arn:other"))
                .subscribers(summary("s-reserve", BUS, SUBSCRIBER))
                .build()
        });
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&listed]);
    let replayer = SubscriberReplayer::with_client(client);
    // A stack looked up from its template: no subscriber ARN, the bus's ARN without its suffix.
    let looked_up = SubscriberInfo::new(
        "ConsumerKit/DeliverySubscriber",
        "s-reserve",
        "",
        "arn:aws:events:eu-west-1:111122223333:event-busv2/s-orders",
        DELIVERY,
    );
    let located = replayer.locate(&looked_up).await.expect("found by name");
    assert_eq!((located.arn.as_str(), located.bus_arn.as_str()), (SUBSCRIBER, BUS), "the one of that exact name on its bus");
    let known = reserve()[0].subscriber.clone();
    assert_eq!(replayer.locate(&known).await.expect("known"), known, "nothing to look up");
    assert_eq!(listed.num_calls(), 1);

    let gone = SubscriberInfo::new("X", "s-gone", "", "arn:aws:events:eu-west-1:111122223333:event-busv2/s-orders", DELIVERY);
    let empty = mock!(aws_sdk_eventbridgev2::Client::list_subscribers).then_output(|| ListSubscribersOutput::builder().build());
    let client = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&empty]);
    let err = SubscriberReplayer::with_client(client).locate(&gone).await.expect_err("not deployed").to_string();
    assert_eq!(err, "subscriber s-gone (X) is not on bus s-orders: ListSubscribers found none of that name; is the stack deployed (the region)?");
}
