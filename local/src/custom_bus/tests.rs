//! The bus's operations without a target: validation, deduplication, sequence numbers,
//! retention, and the answers' shapes.

use serde_json::{json, Value};

use super::*;

async fn bus() -> Arc<CustomBus> {
    // Nothing is delivered in these tests (no subscriber), so no emulator is needed.
    CustomBus::new("http://127.0.0.1:9", "us-east-1", "123456789012").await
}

fn entry(group: &str, dedup: &str) -> Value {
    json!({"Source": "shop.orders", "DetailType": "OrderPlaced", "Detail": "{\"n\":1}", "SystemMetadata": {"EventGroupId": group, "DeduplicationId": dedup}})
}

#[tokio::test]
async fn put_events_numbers_each_group_and_deduplicates_within_the_window() {
    let bus = bus().await;
    let arn = bus.call("CreateEventBus", &json!({"Name": "orders"})).expect("created")["EventBusArn"].as_str().expect("an ARN").to_owned();
    assert!(
        arn.starts_with("arn:aws:events:us-east-1:123456789012:event-busv2/orders/") && arn.rsplit('/').next().map(str::len) == Some(25),
        "{arn}"
    );
    let first = bus
        .call("PutEvents", &json!({"EventBusArn": arn, "Entries": [entry("Order#1", "e1"), entry("Order#1", "e2"), entry("Order#2", "e3")]}))
        .expect("put");
    assert_eq!(first["FailedEntryCount"], 0);
    let seqs: Vec<&str> =
        first["Entries"].as_array().expect("entries").iter().map(|e| e["SequenceNumber"].as_str().expect("a sequence number")).collect();
    assert!(seqs[0] < seqs[1], "one group's numbers grow: {seqs:?}");
    assert_eq!(seqs[0], seqs[2], "each group has its own numbers");
    let again = bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": [entry("Order#1", "e2"), entry("Order#1", "e4")]})).expect("put");
    assert_eq!(again["Entries"][0]["SuccessCode"], "DEDUPLICATED");
    assert_eq!(again["Entries"][0]["EventId"], first["Entries"][1]["EventId"], "the first publish's id");
    assert_eq!(again["Entries"][1]["SuccessCode"], "PUBLISHED");
    assert!(again["Entries"][1]["SequenceNumber"].as_str() > Some(seqs[1]), "numbering continues across calls");
    let stats = bus.stats();
    assert_eq!((stats.published, stats.deduplicated), (4, 1));
}

#[tokio::test]
async fn bad_entries_fail_alone_and_bad_calls_whole() {
    let bus = bus().await;
    let arn = bus.call("CreateEventBus", &json!({"Name": "orders"})).expect("created")["EventBusArn"].as_str().expect("an ARN").to_owned();
    let long = "x".repeat(129);
    let entries = json!([
        {"DetailType": "T", "Detail": "{}"},
        {"Source": "s", "DetailType": "T", "Detail": "not json"},
        {"Source": "s", "DetailType": "T", "SystemMetadata": {"EventGroupId": long}},
        entry("Order#1", "ok"),
    ]);
    let out = bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": entries})).expect("a partial answer");
    assert_eq!(out["FailedEntryCount"], 3);
    let codes: Vec<&str> = out["Entries"].as_array().expect("entries").iter().map(|e| e["ErrorCode"].as_str().unwrap_or("")).collect();
    assert_eq!(codes, ["InvalidArgument", "MalformedDetail", "InvalidArgument", ""]);
    assert!(out["Entries"][2]["ErrorMessage"].as_str().is_some_and(|m| m.contains("EventGroupId") && m.contains("129")));
    let too_many: Vec<Value> = (0..101).map(|i| entry("g", &i.to_string())).collect();
    let err = bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": too_many})).expect_err("101 entries");
    assert!(err.code == "InvalidInputException" && err.message.contains("1-100"), "{err}");
    let big = json!({"Source": "s", "DetailType": "T", "Detail": format!("{{\"a\":\"{}\"}}", "x".repeat(ops::MAX_REQUEST_BYTES))});
    assert_eq!(bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": [big]})).expect_err("too big").code, "InvalidInputException");
    assert_eq!(
        bus.call("PutEvents", &json!({"EventBusArn": format!("{arn}x"), "Entries": [entry("g", "d")]})).expect_err("no bus").code,
        "ResourceNotFoundException"
    );
    let err = bus.call("PutRawEvents", &json!({})).expect_err("not played");
    assert!(err.message.contains("PutRawEvents") && err.message.contains("not played"), "{err}");
}

#[tokio::test]
async fn subscribers_are_checked_and_only_sqs_targets_are_played() {
    let bus = bus().await;
    let arn = bus.call("CreateEventBus", &json!({"Name": "orders", "StorageConfiguration": {"RetentionPeriodInDays": 3}})).expect("created")
        ["EventBusArn"]
        .as_str()
        .expect("an ARN")
        .to_owned();
    let sub = |invoke: Value, extra: Value| {
        let mut r = json!({"Name": "kit", "EventBusArn": arn, "InvokeConfiguration": invoke, "Type": "FIFO"});
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            r.extend(extra.clone());
        }
        r
    };
    let role = "arn:aws:iam::123456789012:role/r";
    let lambda = json!({"TargetArn": "arn:aws:lambda:us-east-1:123456789012:function:f", "RoleArn": role});
    let err = bus.call("CreateSubscriber", &sub(lambda, json!({}))).expect_err("a Lambda target");
    assert!(err.message.contains("SQS targets only"), "{err}");
    let fifo = json!({"TargetArn": "arn:aws:sqs:us-east-1:123456789012:q.fifo", "RoleArn": role});
    assert!(bus.call("CreateSubscriber", &sub(fifo.clone(), json!({}))).expect_err("no group").message.contains("MessageGroupId"));
    let fifo = json!({"TargetArn": "arn:aws:sqs:us-east-1:123456789012:q.fifo", "RoleArn": role,
        "SqsParameters": {"MessageGroupId": "{% $events.SystemMetadata.EventGroupId %}", "MessageDeduplicationId": "{% $events.SystemMetadata.'aws:EventId' %}"}});
    for (extra, needle) in [
        (json!({"RetryPolicy": {"MaxRetryAttempts": 186}}), "0-185"),
        (json!({"RetryPolicy": {"MaxEventAgeInSeconds": 59}}), "60-86400"),
        (json!({"Transformer": {"Type": "JSONATA"}}), "RAW and WITH_METADATA"),
        (json!({"FilterConfiguration": {"Filters": [{"Pattern": "{\"source\": \"x\"}", "Scope": "DATA"}]}}), "Filters[0].Pattern"),
        (json!({"StartingPosition": "POINT_IN_TIME"}), "PointInTimeConfiguration"),
    ] {
        let err = bus.call("CreateSubscriber", &sub(fifo.clone(), extra)).expect_err(needle);
        assert!(err.code == "InvalidInputException" && err.message.contains(needle), "{needle}: {err}");
    }
    let created = bus
        .call("CreateSubscriber", &sub(fifo.clone(), json!({"RetryPolicy": {"MaxRetryAttempts": 2, "MaxEventAgeInSeconds": 60}})))
        .expect("created");
    let sub_arn = created["SubscriberArn"].as_str().expect("an ARN");
    assert_eq!(bus.call("CreateSubscriber", &sub(fifo, json!({}))).expect_err("twice").code, "ResourceAlreadyExistsException");
    let described = bus.call("DescribeSubscriber", &json!({"SubscriberArn": sub_arn})).expect("described");
    assert_eq!((described["Type"].as_str(), described["RetryPolicy"]["MaxRetryAttempts"].as_u64()), (Some("FIFO"), Some(2)));
    let err = bus.call("UpdateSubscriber", &json!({"SubscriberArn": sub_arn, "StartingPosition": "LATEST"})).expect_err("fixed");
    assert!(err.message.contains("StartingPosition"), "{err}");
    let stopped = bus.call("UpdateSubscriber", &json!({"SubscriberArn": sub_arn, "State": "STOPPED"})).expect("stopped");
    assert_eq!(stopped["State"], "STOPPED");
    assert_eq!(bus.call("DeleteEventBus", &json!({"EventBusArn": arn})).expect_err("has subscribers").code, "InvalidStateException");
    bus.call("DeleteSubscriber", &json!({"SubscriberArn": sub_arn})).expect("deleted");
    bus.call("DeleteEventBus", &json!({"EventBusArn": arn})).expect("deleted");
}

#[tokio::test]
async fn retention_drops_events_older_than_the_buses_period_and_a_horizon_replay_starts_after_them() {
    let bus = bus().await;
    let arn = bus.call("CreateEventBus", &json!({"Name": "orders", "StorageConfiguration": {"RetentionPeriodInDays": 1}})).expect("created")
        ["EventBusArn"]
        .as_str()
        .expect("an ARN")
        .to_owned();
    assert_eq!(
        bus.call("CreateEventBus", &json!({"Name": "x", "StorageConfiguration": {"RetentionPeriodInDays": 366}})).expect_err("366").code,
        "InvalidInputException"
    );
    bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": [entry("A", "old")]})).expect("put");
    // That event was ingested two days ago.
    {
        let mut state = bus.lock();
        let stored = state.buses.get_mut(&arn).expect("the bus");
        let old = stored.events.pop().expect("the event");
        stored.events.push(Arc::new(StoredEvent {
            id: old.id.clone(),
            group: old.group.clone(),
            ingested: old.ingested - 2.0 * 86_400.0,
            data: old.data.clone(),
            system_metadata: old.system_metadata.clone(),
        }));
    }
    bus.call("PutEvents", &json!({"EventBusArn": arn, "Entries": [entry("A", "new")]})).expect("put");
    let replay = json!({"Name": "replay", "EventBusArn": arn, "StartingPosition": "POINT_IN_TIME", "PointInTimeConfiguration": {"PointType": "HORIZON"},
        "InvokeConfiguration": {"TargetArn": "arn:aws:sqs:us-east-1:123456789012:q", "RoleArn": "arn:aws:iam::123456789012:role/r"}});
    let sub = bus.call("CreateSubscriber", &replay).expect("created")["SubscriberArn"].as_str().expect("an ARN").to_owned();
    let state = bus.lock();
    let waiting: Vec<&str> = state.subscribers[&sub].pending.iter().filter_map(|p| p.event.system_metadata["DeduplicationId"].as_str()).collect();
    assert_eq!(waiting, ["new"], "the event past retention is gone");
}
