//! The relay on the emulator: outbox items written with the library's `OutboxWriter` in one
//! transaction flow through the stream mapping (with the template's FilterCriteria) and the relay
//! to the stack's bus. Only INSERTs of outbox items become events — not the MODIFY of one, the
//! REMOVE of another, nor a non-outbox item — and the payload reaches the bus verbatim (a big
//! integer and non-ASCII text intact).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::common::{Deadline, Local};
use aws_sdk_dynamodb::types::AttributeValue;
use outbox::{Event, OutboxWriter};
use serde_json::json;
use serde_json::value::RawValue;

const BIG: &str = "123456789012345678901234567890";
const RELAY: &str = "Relay/RelayFunction";
const NAME: &str = "Zoë 🚀";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_inserted_outbox_items_are_published_verbatim() {
    let mut local = Local::start().await;
    let outbox_table = local.table("OutboxTable");
    let bus = local.env_of("Relay/RelayFunction").remove("EVENT_BUS_NAME").expect("the relay has EVENT_BUS_NAME");
    // A source of this test's own: no consumer rule of the template matches it.
    let source = format!("test.relay.{}", crate::common::short_id());
    let spy_url = local.spy_on_bus(&bus, &source).await;

    // Three events in ONE transaction.
    let writer = OutboxWriter::new(&outbox_table, Duration::from_secs(3600));
    let mut tx = writer.transaction();
    for i in 0..3 {
        tx.emit(
            Event::from_json(
                "ThingHappened",
                source.clone(),
                ("Thing", format!("thing-{i}")),
                1,
                format!(r#"{{"big":{BIG},"name":"{NAME}","i":{i}}}"#),
            )
            .correlation_id("relay-emulator-test")
            .trace_header(None),
        )
        .expect("the event is publishable");
    }
    let inserted = tx.execute(&local.dynamodb).await.expect("the outbox transaction commits");
    let inserted_ids: BTreeSet<String> = inserted.iter().map(|i| i.event_id.clone()).collect();
    assert_eq!(inserted_ids.len(), 3);

    // MODIFY one outbox item, REMOVE another, INSERT a non-outbox item.
    local
        .dynamodb
        .update_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(inserted[0].pk.clone()))
        .key("sk", AttributeValue::S(inserted[0].sk.clone()))
        .update_expression("SET note = :n")
        .expression_attribute_values(":n", AttributeValue::S("touched".into()))
        .send()
        .await
        .expect("UpdateItem");
    local
        .dynamodb
        .delete_item()
        .table_name(&outbox_table)
        .key("pk", AttributeValue::S(inserted[1].pk.clone()))
        .key("sk", AttributeValue::S(inserted[1].sk.clone()))
        .send()
        .await
        .expect("DeleteItem");
    local
        .dynamodb
        .put_item()
        .table_name(&outbox_table)
        .item("pk", AttributeValue::S("Misc#not-an-event".into()))
        .item("sk", AttributeValue::S("0".into()))
        .item("note", AttributeValue::S("no event_id".into()))
        .send()
        .await
        .expect("PutItem non-outbox item");

    local.spawn_pipelines();

    // Every stream record read and every record that passed the filter handed to the relay. The
    // relay binary's figures come from its CloudWatch EMF lines.
    let relay = |c: &outbox_local::stats::Counts, name: &str| c.metric(RELAY, name) as usize;
    let deadline = Deadline::new("the relay handling all 6 stream records (3 INSERT, MODIFY, REMOVE, non-outbox INSERT)");
    let counts = loop {
        let c = local.runtime.stats.snapshot();
        if c.stream_records >= 6 && relay(&c, "RecordsSeen") + c.stream_records_filtered == c.stream_records && relay(&c, "EventsPublished") >= 3 {
            break c;
        }
        deadline.tick(|| format!("{c:?}")).await;
    };
    assert_eq!(counts.stream_records, 6, "{counts:?}");
    assert_eq!(counts.stream_records_filtered, 3, "the mapping's filter should drop MODIFY, REMOVE and the non-outbox item: {counts:?}");
    // Published: exactly the INSERTed ones, once each — 3 publications here, and the ids on the
    // bus (the spy queue, below) are the inserted ones.
    assert_eq!(relay(&counts, "EventsPublished"), inserted_ids.len(), "published ids must be exactly the INSERTed ones, once each: {counts:?}");
    let skipped = relay(&counts, "RecordsSkipped");
    assert_eq!((relay(&counts, "RecordsFailed"), relay(&counts, "RecordsDeadLettered"), skipped), (0, 0, 0), "{counts:?}");

    // The events on the bus, seen through the spy queue.
    let mut bodies: BTreeMap<String, String> = BTreeMap::new();
    let mut received = 0;
    let deadline = Deadline::new("3 events in the spy queue");
    while bodies.len() < 3 {
        let out =
            local.sqs.receive_message().queue_url(&spy_url).max_number_of_messages(10).wait_time_seconds(1).send().await.expect("ReceiveMessage spy");
        for m in out.messages.unwrap_or_default() {
            received += 1;
            let body = m.body.unwrap_or_default();
            let event: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("spy message is not JSON ({e}): {body}"));
            let id =
                event.pointer("/detail/metadata/id").and_then(|v| v.as_str()).unwrap_or_else(|| panic!("no detail.metadata.id: {body}")).to_owned();
            bodies.insert(id, body);
        }
        if bodies.len() < 3 {
            deadline.tick(|| format!("{} of 3 received: {:?}", bodies.len(), bodies.keys())).await;
        }
    }
    assert_eq!(received, 3, "each event reaches the bus once: {bodies:?}");
    assert_eq!(bodies.keys().cloned().collect::<BTreeSet<_>>(), inserted_ids, "published ids must be exactly the INSERTed ones");

    for (id, body) in &bodies {
        // Raw text, never through f64.
        let envelope: HashMap<String, Box<RawValue>> = serde_json::from_str(body).expect("an object");
        let string = |k: &str| serde_json::from_str::<String>(envelope.get(k).map(|v| v.get()).unwrap_or("null")).unwrap_or_default();
        assert_eq!(string("source"), source, "{body}");
        assert_eq!(string("detail-type"), "ThingHappened", "{body}");
        let detail: HashMap<String, Box<RawValue>> =
            serde_json::from_str(envelope["detail"].get()).unwrap_or_else(|e| panic!("detail is not an object ({e}): {body}"));
        let data = detail["data"].get();
        assert!(data.trim_start().starts_with('{'), "detail.data must be an object, not a string: {data}");
        let data: HashMap<String, Box<RawValue>> = serde_json::from_str(data).expect("detail.data is an object");
        assert_eq!(data["big"].get(), BIG, "the big integer was not carried verbatim for {id}: {body}");
        assert_eq!(serde_json::from_str::<String>(data["name"].get()).expect("name is a string"), NAME, "{body}");
    }

    local.shutdown().await;
}

/// Per-aggregate order under the template's `ParallelizationFactor` (1; the local stream mapping
/// plays the factor as Lambda documents it, see `outbox_local::mappings::lanes`): 20 events of one
/// aggregate, each its own outbox item, are published in sequence order, in full calls
/// (20 events = 2 `PutEvents` calls, not 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_aggregates_events_are_published_in_order_in_full_calls() {
    let mut local = Local::start().await;
    let outbox_table = local.table("OutboxTable");
    let bus = local.env_of(RELAY).remove("EVENT_BUS_NAME").expect("the relay has EVENT_BUS_NAME");
    let source = format!("test.order.{}", crate::common::short_id());
    let spy_url = local.spy_on_bus(&bus, &source).await;
    let writer = OutboxWriter::new(&outbox_table, Duration::from_secs(3600));
    for sequence in 1..=20u64 {
        let mut tx = writer.transaction();
        tx.emit(Event::new("ThingChanged", source.as_str(), ("Thing", "hot-1"), sequence, &json!({ "n": sequence })).expect("an event"))
            .expect("publishable");
        tx.execute(&local.dynamodb).await.expect("the outbox transaction commits");
    }
    local.spawn_pipelines();

    let mut sequences: Vec<u64> = Vec::new();
    let deadline = Deadline::new("20 events in the spy queue");
    while sequences.len() < 20 {
        let out =
            local.sqs.receive_message().queue_url(&spy_url).max_number_of_messages(10).wait_time_seconds(1).send().await.expect("ReceiveMessage spy");
        for m in out.messages.unwrap_or_default() {
            let event: serde_json::Value = serde_json::from_str(m.body().unwrap_or_default()).expect("JSON");
            sequences.push(event.pointer("/detail/metadata/sequence").and_then(|v| v.as_u64()).expect("a sequence"));
        }
        if sequences.len() < 20 {
            deadline.tick(|| format!("{sequences:?}")).await;
        }
    }
    assert_eq!(sequences, (1..=20).collect::<Vec<_>>(), "published in sequence order");
    // The relay's EMF line is read after its invocation ends, possibly after the spy saw the events.
    let deadline = Deadline::new("the relay's metrics");
    let counts = loop {
        let c = local.runtime.stats.snapshot();
        if c.metric(RELAY, "EventsPublished") as usize >= 20 {
            break c;
        }
        deadline.tick(|| format!("{c:?}")).await;
    };
    assert_eq!(counts.metric(RELAY, "PutEventsCalls") as usize, 2, "20 events of one aggregate = 2 full calls: {counts:?}");
    local.shutdown().await;
}
