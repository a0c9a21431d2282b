//! The local runtime's Custom Event Bus through the real `aws-sdk-eventbridgev2` client, given
//! the runtime's endpoint as `endpoint_url` (Smithy RPC v2 CBOR), delivering into SQS queues of
//! the moto emulator behind the same endpoint.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_sdk_eventbridgev2::types::{
    Filter, FilterConfiguration, FilterScope, InvokeConfiguration, OnFailureConfiguration, OrderingType, PointInTimeConfiguration, PointType,
    PutEventsRequestEntry, PutEventsSystemMetadata, RetryPolicy, SqsParameters, StartingPosition, UpdateInvokeConfiguration,
};
use outbox_cli::aws::{sdk_config, Target};
use outbox_local::custom_bus::{BusOptions, FifoBlocking};
use outbox_local::emulator::Emulator;
use outbox_local::faults::{Fault, FaultKind, FaultPlan, Injector};
use serde_json::Value;

const ROLE: &str = "arn:aws:iam::123456789012:role/delivery";
const GROUP_ID: &str = "{% $events.SystemMetadata.EventGroupId %}";
const EVENT_ID: &str = "{% $events.SystemMetadata.'aws:EventId' %}";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Env {
    emulator: Emulator,
    bus: aws_sdk_eventbridgev2::Client,
    sqs: aws_sdk_sqs::Client,
    bus_arn: String,
}

async fn env(blocking: FifoBlocking) -> Env {
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    emulator.custom_bus.configure(BusOptions::default().compressed().with_blocking(blocking));
    let sdk = sdk_config(&Target { endpoint: Some(emulator.endpoint.clone()), region: "us-east-1".into() }).await;
    let bus = aws_sdk_eventbridgev2::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let created = bus.create_event_bus().name("orders").send().await.expect("CreateEventBus");
    let bus_arn = created.event_bus_arn().expect("an ARN").to_owned();
    Env { emulator, bus, sqs, bus_arn }
}

/// A queue (FIFO when `name` ends `.fifo`): its URL and ARN.
async fn queue(sqs: &aws_sdk_sqs::Client, name: &str) -> (String, String) {
    let mut request = sqs.create_queue().queue_name(name);
    if name.ends_with(".fifo") {
        request = request.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
    }
    let url = request.send().await.expect("CreateQueue").queue_url.expect("a URL");
    (url, format!("arn:aws:sqs:us-east-1:123456789012:{name}"))
}

fn fifo_target(queue_arn: &str, dedup: &str) -> InvokeConfiguration {
    InvokeConfiguration::builder()
        .target_arn(queue_arn)
        .role_arn(ROLE)
        .sqs_parameters(SqsParameters::builder().message_group_id(GROUP_ID).message_deduplication_id(dedup).build())
        .build()
        .expect("an invoke configuration")
}

fn entry(group: &str, dedup: &str, detail: &str) -> PutEventsRequestEntry {
    PutEventsRequestEntry::builder()
        .source("shop.orders")
        .detail_type("OrderPlaced")
        .detail(detail)
        .system_metadata(PutEventsSystemMetadata::builder().event_group_id(group).deduplication_id(dedup).build())
        .build()
        .expect("an entry")
}

fn order(group: &str, n: u32) -> PutEventsRequestEntry {
    entry(group, &format!("{group}-{n}"), &format!(r#"{{"group":"{group}","n":{n},"dedup":"{group}-{n}"}}"#))
}

async fn put(env: &Env, entries: Vec<PutEventsRequestEntry>) -> aws_sdk_eventbridgev2::operation::put_events::PutEventsOutput {
    env.bus.put_events().event_bus_arn(&env.bus_arn).set_entries(Some(entries)).send().await.expect("PutEvents")
}

/// Receives until `n` messages came (deleting them), or fails after 30 s.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} messages arrived in {url}", got.len());
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .expect("ReceiveMessage");
        for m in out.messages.unwrap_or_default() {
            sqs.delete_message().queue_url(url).receipt_handle(m.receipt_handle().unwrap_or_default()).send().await.expect("DeleteMessage");
            got.push(m);
        }
    }
    got
}

/// Whether the queue has no visible message now.
async fn empty(sqs: &aws_sdk_sqs::Client, url: &str) -> bool {
    let out = sqs.receive_message().queue_url(url).visibility_timeout(0).send().await.expect("ReceiveMessage");
    out.messages.unwrap_or_default().is_empty()
}

fn body(m: &aws_sdk_sqs::types::Message) -> Value {
    serde_json::from_str(m.body().unwrap_or_default()).expect("a JSON body")
}

/// `group-n` of each delivered message, in delivery order.
fn labels(messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
    messages.iter().map(|m| body(m)["detail"]["dedup"].as_str().unwrap_or("?").to_owned()).collect()
}

fn in_group<'a>(labels: &'a [String], group: &str) -> Vec<&'a str> {
    labels.iter().filter(|l| l.starts_with(&format!("{group}-"))).map(String::as_str).collect()
}

/// Waits (at most 30 s) until `check` holds on the bus's stats.
async fn until(env: &Env, what: &str, check: impl Fn(&outbox_local::custom_bus::BusStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check(&env.emulator.custom_bus.stats()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", env.emulator.custom_bus.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the bus has delivered `n` events and has nothing waiting.
async fn until_delivered(emulator: &Emulator, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while emulator.custom_bus.stats().delivered < n || emulator.custom_bus.backlog() > 0 {
        assert!(Instant::now() < deadline, "{:?}", emulator.custom_bus.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_events_arrive_in_publish_order_across_calls_and_duplicates_once() {
    let env = env(FifoBlocking::Group).await;
    let (url, arn) = queue(&env.sqs, "kit-delivery.fifo").await;
    env.bus
        .create_subscriber()
        .name("kit")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Fifo)
        .invoke_configuration(fifo_target(&arn, EVENT_ID))
        .send()
        .await
        .expect("CreateSubscriber");
    let first = put(&env, vec![order("Order#1", 1), order("Order#2", 1), order("Order#1", 2)]).await;
    assert_eq!(first.failed_entry_count(), 0);
    put(&env, vec![order("Order#1", 3), order("Order#2", 2)]).await;
    // The same DeduplicationId within 300 s: a success, not a second event.
    let again = put(&env, vec![order("Order#1", 2), order("Order#1", 4)]).await;
    let entries = again.entries();
    assert_eq!(entries[0].success_code().map(|c| c.as_str()), Some("DEDUPLICATED"));
    assert_eq!(entries[0].event_id(), first.entries()[2].event_id(), "the first publish's EventId");
    assert_eq!(entries[1].success_code().map(|c| c.as_str()), Some("PUBLISHED"));

    let got = receive(&env.sqs, &url, 6).await;
    let labels = labels(&got);
    assert_eq!(in_group(&labels, "Order#1"), ["Order#1-1", "Order#1-2", "Order#1-3", "Order#1-4"], "{labels:?}");
    assert_eq!(in_group(&labels, "Order#2"), ["Order#2-1", "Order#2-2"], "{labels:?}");
    // RAW: the body is the PutEvents envelope; the message group is the event group.
    let envelope = body(&got[0]);
    for field in ["version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"] {
        assert!(envelope.get(field).is_some(), "{field} in {envelope}");
    }
    let group = got[0].attributes().and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)).cloned();
    assert_eq!(group.as_deref(), envelope["detail"]["group"].as_str());
    assert!(empty(&env.sqs, &url).await, "the duplicate was not delivered");
    let stats = env.emulator.custom_bus.stats();
    assert_eq!((stats.published, stats.deduplicated, stats.delivered), (6, 1, 6));
}

/// A FIFO subscriber whose deliveries of group A fail (its MessageDeduplicationId reads
/// `detail.dedup`, which A's first event lacks) until the subscriber is fixed: what got through
/// while A was failing, then the order after the fix.
async fn blocked(blocking: FifoBlocking) -> (Vec<String>, Vec<String>) {
    let env = env(blocking).await;
    let (url, arn) = queue(&env.sqs, "kit-delivery.fifo").await;
    let sub = env
        .bus
        .create_subscriber()
        .name("kit")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Fifo)
        .invoke_configuration(fifo_target(&arn, "{% $events.Data.detail.dedup %}"))
        .retry_policy(RetryPolicy::builder().max_retry_attempts(185).max_event_age_in_seconds(86_400).build())
        .send()
        .await
        .expect("CreateSubscriber");
    let a1 = entry("A", "A-1", r#"{"group":"A","n":1}"#);
    put(&env, vec![a1, order("B", 1), order("A", 2), order("B", 2)]).await;
    until(&env, "A-1 retried 3 times", |s| s.retried >= 3).await;
    let mut early = Vec::new();
    while !empty(&env.sqs, &url).await {
        early.extend(labels(&receive(&env.sqs, &url, 1).await));
    }
    // Fixed: the deduplication id from the event id; A-1 goes through, then what it held up.
    let fixed = UpdateInvokeConfiguration::builder()
        .role_arn(ROLE)
        .sqs_parameters(SqsParameters::builder().message_group_id(GROUP_ID).message_deduplication_id(EVENT_ID).build())
        .build()
        .expect("an invoke configuration");
    env.bus
        .update_subscriber()
        .subscriber_arn(sub.subscriber_arn().expect("an ARN"))
        .invoke_configuration(fixed)
        .send()
        .await
        .expect("UpdateSubscriber");
    let late = labels(&receive(&env.sqs, &url, 4 - early.len()).await);
    (early, late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_delivery_holds_up_its_group_only_by_default() {
    let (early, late) = blocked(FifoBlocking::Group).await;
    assert_eq!(early, ["B-1", "B-2"], "group B went through while A was failing");
    // A-1 has no detail.dedup label: it is the one "?" delivered first.
    assert_eq!(late, ["?", "A-2"], "A in publish order once its head was delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_blocking_holds_up_every_group() {
    let (early, late) = blocked(FifoBlocking::Subscriber).await;
    assert!(early.is_empty(), "nothing passes a failing event in subscriber mode: {early:?}");
    assert_eq!(late, ["?", "B-1", "A-2", "B-2"], "publish order once the head was delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_in_order_and_exhausted_ones_go_to_the_on_failure_queue() {
    let env = env(FifoBlocking::Group).await;
    let (url, arn) = queue(&env.sqs, "kit-delivery.fifo").await;
    let (dlq_url, dlq_arn) = queue(&env.sqs, "kit-bus-failures.fifo").await;
    // The plan fails the subscriber's first 3 delivery attempts (as the target's errors would).
    let mut fault = Fault::new(FaultKind::Error, "sqs:SendMessage");
    fault.function = Some("kit".into());
    fault.limit = Some(3);
    let injector = Injector::new(FaultPlan { faults: vec![fault], ..FaultPlan::default() }, &env.emulator.endpoint);
    env.emulator.custom_bus.set_faults(Some(injector.clone()));
    env.bus
        .create_subscriber()
        .name("kit")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Fifo)
        .invoke_configuration(fifo_target(&arn, EVENT_ID))
        .retry_policy(RetryPolicy::builder().max_retry_attempts(5).build())
        .on_failure_configuration(OnFailureConfiguration::builder().arn(&dlq_arn).build())
        .send()
        .await
        .expect("CreateSubscriber");
    put(&env, vec![order("A", 1), order("A", 2), order("A", 3)]).await;
    assert_eq!(labels(&receive(&env.sqs, &url, 3).await), ["A-1", "A-2", "A-3"]);
    assert_eq!(injector.injected()[0].count, 3);
    assert!(empty(&env.sqs, &dlq_url).await, "nothing given up");

    // Retries exhausted (0 retries, an id that cannot be evaluated): to the on-failure queue,
    // with why; the group's next event follows.
    env.bus
        .create_subscriber()
        .name("strict")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Fifo)
        .invoke_configuration(fifo_target(&arn, "{% $events.Data.detail.missing %}"))
        .retry_policy(RetryPolicy::builder().max_retry_attempts(0).build())
        .on_failure_configuration(OnFailureConfiguration::builder().arn(&dlq_arn).build())
        .send()
        .await
        .expect("CreateSubscriber");
    put(&env, vec![order("C", 1)]).await;
    let failed = receive(&env.sqs, &dlq_url, 1).await;
    let attributes = failed[0].message_attributes().cloned().unwrap_or_default();
    let attribute = |k: &str| attributes.get(k).and_then(|v| v.string_value()).unwrap_or_default().to_owned();
    assert_eq!(attribute("EXHAUSTED_RETRY_CONDITION"), "MaximumRetryAttempts");
    assert!(attribute("ERROR_MESSAGE").contains("detail.missing"), "{}", attribute("ERROR_MESSAGE"));
    assert!(attribute("SUBSCRIBER_ARN").ends_with("/strict"));
    assert_eq!(body(&failed[0])["detail"]["dedup"], "C-1", "the event itself");
    assert_eq!(labels(&receive(&env.sqs, &url, 1).await), ["C-1"], "the first subscriber delivered it");
    until(&env, "one sent to on-failure", |s| s.sent_to_on_failure == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unordered_filters_and_replay_from_a_point_in_time() {
    let env = env(FifoBlocking::Group).await;
    let (url, arn) = queue(&env.sqs, "audit").await;
    let filter = |pattern: &str, scope: FilterScope| Filter::builder().pattern(pattern).scope(scope).build().expect("a filter");
    env.bus
        .create_subscriber()
        .name("audit")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Unordered)
        .invoke_configuration(InvokeConfiguration::builder().target_arn(&arn).role_arn(ROLE).build().expect("invoke"))
        .filter_configuration(
            FilterConfiguration::builder()
                .filters(filter(r#"{"detail-type": ["OrderPlaced"], "detail": {"group": ["A", "B"]}}"#, FilterScope::Data))
                .filters(filter(r#"{"EventGroupId": [{"prefix": "A"}, "B"]}"#, FilterScope::SystemMetadata))
                .build(),
        )
        .send()
        .await
        .expect("CreateSubscriber");
    put(&env, vec![order("A", 1), order("Z", 1)]).await;
    let mut cancelled = order("B", 1);
    cancelled.detail_type = "OrderCancelled".into();
    put(&env, vec![cancelled]).await;
    let between = std::time::SystemTime::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    put(&env, vec![order("B", 2), order("A", 2)]).await;
    let mut got = labels(&receive(&env.sqs, &url, 3).await);
    got.sort();
    assert_eq!(got, ["A-1", "A-2", "B-2"], "the filters left out Z (DATA, SYSTEM_METADATA) and the cancellation (detail-type)");
    assert!(empty(&env.sqs, &url).await);

    // A replay subscriber from `between`: the retained events since then, nothing before.
    let (replay_url, replay_arn) = queue(&env.sqs, "replay").await;
    let since = aws_smithy_types::DateTime::from(between);
    env.bus
        .create_subscriber()
        .name("replay")
        .event_bus_arn(&env.bus_arn)
        .r#type(OrderingType::Unordered)
        .invoke_configuration(InvokeConfiguration::builder().target_arn(&replay_arn).role_arn(ROLE).build().expect("invoke"))
        .starting_position(StartingPosition::PointInTime)
        .point_in_time_configuration(
            PointInTimeConfiguration::builder()
                .point_type(PointType::Timestamp)
                .starting_point(since)
                .end_point(aws_smithy_types::DateTime::from(std::time::SystemTime::now()))
                .build()
                .expect("a point in time"),
        )
        .send()
        .await
        .expect("CreateSubscriber");
    put(&env, vec![order("A", 3)]).await;
    let mut replayed = labels(&receive(&env.sqs, &replay_url, 2).await);
    replayed.sort();
    assert_eq!(replayed, ["A-2", "B-2"], "from the starting point to the end point");
    assert_eq!(labels(&receive(&env.sqs, &url, 1).await), ["A-3"]);
    assert!(empty(&env.sqs, &replay_url).await, "nothing after the end point");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_sees_per_entry_faults_throttling_and_clear_errors_through_a_proxy() {
    let env = env(FifoBlocking::Group).await;
    let mut entries = Fault::new(FaultKind::PutEventsEntries, "events:PutEvents");
    entries.code = Some("InternalFailure".into());
    entries.limit = Some(2);
    let mut throttle = Fault::new(FaultKind::Error, "events:PutEvents");
    throttle.code = Some("ThrottlingException".into());
    throttle.limit = Some(1);
    let injector = Injector::new(FaultPlan { faults: vec![throttle, entries], ..FaultPlan::default() }, &env.emulator.endpoint);
    let proxy = injector.attach("RelayFunction", Box::new(|| {})).await.expect("a proxy");
    let sdk = sdk_config(&Target { endpoint: Some(proxy.endpoint.clone()), region: "us-east-1".into() }).await;
    let relay = aws_sdk_eventbridgev2::Client::new(&sdk);

    // One attempt only: the throttle is the SDK's retryable ThrottlingException.
    let once = aws_sdk_eventbridgev2::config::Builder::from(&sdk).retry_config(aws_sdk_eventbridgev2::config::retry::RetryConfig::disabled()).build();
    let err = aws_sdk_eventbridgev2::Client::from_conf(once)
        .put_events()
        .event_bus_arn(&env.bus_arn)
        .entries(order("A", 1))
        .send()
        .await
        .expect_err("throttled");
    let service = err.as_service_error().expect("a service error");
    assert!(service.is_throttling_exception(), "{service:?}");
    assert_eq!(aws_smithy_types::retry::ProvideErrorKind::retryable_error_kind(service), Some(aws_smithy_types::retry::ErrorKind::ThrottlingError));

    // Entries failed by position, the others published.
    let out = relay
        .put_events()
        .event_bus_arn(&env.bus_arn)
        .entries(order("A", 1))
        .entries(order("A", 2))
        .entries(order("A", 3))
        .send()
        .await
        .expect("PutEvents");
    assert_eq!(out.failed_entry_count(), 2);
    let codes: Vec<Option<&str>> = out.entries().iter().map(|e| e.error_code()).collect();
    assert_eq!(codes, [Some("InternalFailure"), Some("InternalFailure"), None]);
    assert!(out.entries()[2].event_id().is_some() && out.entries()[2].sequence_number().is_some());

    // A bad entry fails alone; an operation the runtime does not play is named.
    let bad = PutEventsRequestEntry::builder().source("s").detail_type("T").detail("not json").build().expect("an entry");
    let out = relay.put_events().event_bus_arn(&env.bus_arn).entries(bad).entries(order("A", 4)).send().await.expect("PutEvents");
    assert_eq!((out.failed_entry_count(), out.entries()[0].error_code()), (1, Some("MalformedDetail")));
    let err = relay.list_event_sources().send().await.expect_err("not played");
    let text = format!("{}", aws_sdk_eventbridgev2::error::DisplayErrorContext(&err));
    assert!(text.contains("ListEventSources") && text.contains("not played"), "{text}");
    let err = relay.put_events().event_bus_arn(&env.bus_arn).set_entries(Some(Vec::new())).send().await.expect_err("no entries");
    assert!(format!("{}", aws_sdk_eventbridgev2::error::DisplayErrorContext(&err)).contains("1-100"), "{err:?}");
    // Everything else still reaches moto unchanged through the same endpoint.
    queue(&env.sqs, "still-moto").await;
}

const TEMPLATE: &str = r#"
AWSTemplateFormatVersion: "2010-09-09"
Parameters:
  EventBusType:
    Type: String
    AllowedValues: [Classic, Custom]
    Default: Classic
  EventRetentionDays:
    Type: Number
    Default: 7
Conditions:
  UseCustomBus: !Equals [!Ref EventBusType, Custom]
Resources:
  Bus:
    Type: AWS::EventsV2::EventBus
    Condition: UseCustomBus
    Properties:
      Name: !Sub "${AWS::StackName}-bus"
      StorageConfiguration:
        RetentionPeriodInDays: !Ref EventRetentionDays
  DeliveryQueue:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      QueueName: !Sub "${AWS::StackName}-delivery.fifo"
  FailureQueue:
    Type: AWS::SQS::Queue
    Properties:
      FifoQueue: true
      QueueName: !Sub "${AWS::StackName}-bus-failures.fifo"
  DeliveryRole:
    Type: AWS::IAM::Role
    Properties:
      AssumeRolePolicyDocument: {}
  Subscriber:
    Type: AWS::EventsV2::Subscriber
    Condition: UseCustomBus
    Properties:
      Name: !Sub "${AWS::StackName}-kit"
      EventBusArn: !GetAtt Bus.EventBusArn
      Type: FIFO
      InvokeConfiguration:
        TargetArn: !GetAtt DeliveryQueue.Arn
        RoleArn: !GetAtt DeliveryRole.Arn
        SqsParameters:
          MessageGroupId: "{% $events.SystemMetadata.EventGroupId %}"
          MessageDeduplicationId: "{% $events.SystemMetadata.'aws:EventId' %}"
      FilterConfiguration:
        Filters:
          - Scope: DATA
            Pattern: '{"source": ["shop.orders"]}'
      RetryPolicy:
        MaxRetryAttempts: 3
        MaxEventAgeInSeconds: "600"
      OnFailureConfiguration:
        Arn: !GetAtt FailureQueue.Arn
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_templates_custom_bus_and_subscriber_are_provisioned_with_parameter_overrides() {
    let dir = std::env::temp_dir().join(format!("custom-bus-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("template.yaml");
    std::fs::write(&path, TEMPLATE).expect("the template");
    let emulator = Emulator::start(&root()).await.expect("the moto emulator starts");
    emulator.custom_bus.configure(BusOptions::default().compressed());
    let sdk = sdk_config(&Target { endpoint: Some(emulator.endpoint.clone()), region: "us-east-1".into() }).await;

    // The default (Classic): no Custom bus resource.
    let classic = outbox_template::Template::load(&path).expect("the template");
    let stack = outbox_local::provision::provision(&sdk, classic, "shop", "123456789012").await.expect("provisioned");
    assert!(stack.custom_buses.is_empty() && stack.subscribers.is_empty());
    // An override outside AllowedValues, or of no parameter, is refused with the choices.
    let err = outbox_template::Template::load_with_overrides(&path, &[("EventBusType".into(), "Kafka".into())]).expect_err("not allowed");
    assert!(err.to_string().contains("Classic, Custom"), "{err}");
    let err = outbox_template::Template::load_with_overrides(&path, &[("BusKind".into(), "Custom".into())]).expect_err("no parameter");
    assert!(err.to_string().contains("BusKind is not a parameter"), "{err}");

    let overrides = [("EventBusType".to_owned(), "Custom".to_owned()), ("EventRetentionDays".to_owned(), "3".to_owned())];
    let custom = || outbox_template::Template::load_with_overrides(&path, &overrides).expect("the template");
    let stack = outbox_local::provision::provision(&sdk, custom(), "shop", "123456789012").await.expect("provisioned");
    let bus_arn = stack.custom_buses[0].arn.clone().expect("its ARN");
    assert_eq!(stack.custom_buses[0].spec.retention_days, Some(3));
    let queue = stack.queues.iter().find(|q| q.logical_id == "DeliveryQueue").expect("the delivery queue").clone();
    let sub = stack.subscriber_for_queue(&queue.url).expect("found by its delivery queue's URL");
    assert_eq!((sub.name.as_str(), sub.bus_arn.as_str(), sub.target_arn.as_str()), ("shop-kit", bus_arn.as_str(), queue.arn.as_str()));
    assert_eq!(stack.subscriber_for_queue("DeliveryQueue").map(|s| &s.name), Some(&sub.name), "or its logical id");
    assert!(stack.subscriber_for_queue("FailureQueue").is_none());
    assert_eq!(sub.request["RetryPolicy"]["MaxEventAgeInSeconds"], 600, "numbers as the API takes them");
    // Provisioning again leaves what exists: the same ARNs.
    let again = outbox_local::provision::provision(&sdk, custom(), "shop", "123456789012").await.expect("provisioned again");
    assert_eq!((again.custom_buses[0].arn.as_deref(), again.subscribers[0].arn.as_deref()), (Some(bus_arn.as_str()), sub.arn.as_deref()));

    let bus = aws_sdk_eventbridgev2::Client::new(&sdk);
    let described = bus.describe_subscriber().subscriber_arn(sub.arn.clone().expect("its ARN")).send().await.expect("DescribeSubscriber");
    assert_eq!(described.retry_policy().and_then(|r| r.max_retry_attempts()), Some(3));
    let other = PutEventsRequestEntry::builder().source("shop.billing").detail_type("T").detail("{}").build().expect("an entry");
    bus.put_events().event_bus_arn(&bus_arn).entries(order("Order#9", 1)).entries(other).send().await.expect("PutEvents");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    assert_eq!(labels(&receive(&sqs, &queue.url, 1).await), ["Order#9-1"], "the filter keeps shop.orders only");
    until_delivered(&emulator, 1).await;
    assert!(empty(&sqs, &queue.url).await, "shop.billing left out");
    let _ = std::fs::remove_dir_all(&dir);
}
