//! Property tests of the parsers at the library's edges (proptest, a few hundred cases each):
//!
//! * any outbox item survives the outbox table (DynamoDB attributes and back) unchanged, and
//!   becomes a bus event whose `detail` carries its metadata and its payload byte for byte
//!   (the webhook signature check's properties are in `crates/outbox-webhooks/tests/properties.rs`).

use std::collections::BTreeMap;

use chrono::{DateTime, FixedOffset, SecondsFormat, TimeZone, Utc};
use outbox::envelope::{EventDetail, OutboxItem, PayloadRef};
use proptest::prelude::*;
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON document of nested objects, arrays, strings, numbers, booleans and nulls.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text with at least one visible character (the envelope refuses blank ids and types).
fn word() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][\\PC]{0,24}"
}

/// An RFC 3339 time with any offset (the producer's clock), from 1970 to 2100.
fn occurred_at() -> impl Strategy<Value = DateTime<FixedOffset>> {
    (0i64..4_102_444_800, 0u32..1_000_000_000, -12 * 3600i32..14 * 3600).prop_map(|(secs, nanos, offset)| {
        let offset = FixedOffset::east_opt(offset - offset % 60).expect("within a day");
        offset.timestamp_opt(secs, nanos).single().expect("a fixed offset has one local time per instant")
    })
}

prop_compose! {
    fn outbox_item()(
        event_id in word(), event_type in word(), event_version in any::<u32>(), source in word(),
        aggregate_type in word(), aggregate_id in word(), sequence in any::<u64>(), at in occurred_at(),
        payload in json_value(), correlation_id in "\\PC{0,40}", trace_header in proptest::option::of("[ -~]{1,60}"),
        expires_at in any::<i64>(), previous in prop::collection::btree_map(word(), any::<u64>(), 0..3),
        claim_checked in any::<bool>(), size in any::<u64>(),
    ) -> OutboxItem {
        let payload_ref = claim_checked.then(|| PayloadRef { bucket: "payloads".into(), key: format!("outbox/{event_id}"), size, sha256: "ab".repeat(32) });
        OutboxItem {
            pk: OutboxItem::partition_key(&aggregate_type, &aggregate_id),
            sk: OutboxItem::sort_key(sequence),
            payload: if payload_ref.is_some() { "null".into() } else { payload.to_string() },
            occurred_at: at.to_rfc3339_opts(SecondsFormat::AutoSi, false),
            event_id, event_type, event_version, source, aggregate_type, aggregate_id, sequence,
            correlation_id, payload_ref, trace_header, expires_at, previous: previous.into_iter().collect::<BTreeMap<_, _>>(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_outbox_item_round_trips_through_the_table_and_onto_the_bus(item in outbox_item()) {
        let stored: serde_dynamo::Item = item.to_item().expect("an outbox item encodes");
        prop_assert_eq!(&OutboxItem::from_item(stored).expect("and decodes"), &item);

        let event = item.to_bus_event().expect("a valid item is publishable");
        prop_assert_eq!(&event.source, &item.source);
        prop_assert_eq!(&event.detail_type, &item.event_type);
        let occurred = DateTime::parse_from_rfc3339(&item.occurred_at).expect("RFC 3339").with_timezone(&Utc);
        prop_assert_eq!(event.time, occurred, "Time is occurred_at, in UTC");
        let detail: Value = serde_json::from_str(&event.detail).expect("detail is JSON");
        let metadata = &detail["metadata"];
        prop_assert_eq!(metadata["id"].as_str(), Some(item.event_id.as_str()));
        prop_assert_eq!(metadata["type"].as_str(), Some(item.event_type.as_str()));
        prop_assert_eq!(metadata["version"].as_u64(), Some(u64::from(item.event_version)));
        prop_assert_eq!(metadata["subject"].as_str(), Some(item.aggregate_id.as_str()));
        prop_assert_eq!(metadata["aggregate_type"].as_str(), Some(item.aggregate_type.as_str()));
        prop_assert_eq!(metadata["sequence"].as_u64(), Some(item.sequence));
        prop_assert_eq!(metadata["correlation_id"].as_str(), Some(item.correlation_id.as_str()));
        let expected_time = occurred.to_rfc3339_opts(SecondsFormat::Millis, true);
        prop_assert_eq!(metadata["time"].as_str(), Some(expected_time.as_str()));
        let previous: BTreeMap<String, u64> = serde_json::from_value(metadata.get("previous").cloned().unwrap_or(Value::Object(Default::default()))).expect("a map");
        prop_assert_eq!(&previous, &item.previous);
        match &item.payload_ref {
            // The payload travels untouched: the same bytes, not a re-serialisation.
            None => {
                let detail: EventDetail<Box<RawValue>> = serde_json::from_str(&event.detail).expect("detail has data");
                prop_assert_eq!(detail.data.get(), item.payload.as_str());
            }
            Some(reference) => {
                prop_assert!(detail.get("data").is_none());
                prop_assert_eq!(detail["data_ref"]["key"].as_str(), Some(reference.key.as_str()));
                prop_assert_eq!(detail["data_ref"]["size"].as_u64(), Some(reference.size));
            }
        }
    }
}
