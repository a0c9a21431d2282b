//! The event schemas (`schemas/<EventType>.v<N>.json`, JSON Schema draft 2020-12) against what
//! the code really produces: every schema is a valid 2020-12 schema named by its type and
//! version; the sample EventBridge events of `events/` match; the `detail` the library builds for
//! the order API's payloads (`OrderCreated`, `OrderCancelled`) and the inventory consumer's
//! (`InventoryReserved`, `InventoryRejected`, `InventoryReleased`) matches; and the schemas
//! reject what the contract forbids (so none of them is vacuous).
//!
//! No emulator: the details are built by the library exactly as the relay publishes them
//! (`OutboxWriter` → outbox item → `to_bus_event`). `tests/orders_api.rs` validates the events
//! the order API wrote to the emulator's outbox table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use orders_app::inventory::{InventoryReleased, ReservationSettled, AGGREGATE_TYPE as RESERVATION};
use orders_app::orders::{order_cancelled_event, order_created_event, OrderCancelled, OrderCreated, OrderLine, MAX_LINES};
use outbox::{Event, OutboxWriter};
use serde_json::{json, Value};

/// Every event type the project publishes, with its current schema version.
const EVENT_TYPES: [(&str, u64); 6] =
    [("OrderCreated", 1), ("OrderCancelled", 1), ("InventoryReserved", 1), ("InventoryRejected", 1), ("InventoryReleased", 1), ("OrderPaid", 1)];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Messages of every violation of `instance` against the schema of `event_type` v`version`.
fn violations(event_type: &str, version: u64, instance: &Value) -> Vec<String> {
    crate::common::schema_violations(event_type, version, instance)
}

fn assert_valid(event_type: &str, version: u64, detail: &Value) {
    let errors = violations(event_type, version, detail);
    assert!(errors.is_empty(), "{event_type}.v{version} rejects {detail}:\n{}", errors.join("\n"));
}

fn assert_invalid(event_type: &str, detail: &Value, why: &str) {
    assert!(!violations(event_type, 1, detail).is_empty(), "{event_type}.v1 accepts a detail with {why}: {detail}");
}

/// The bus event's `detail` for `event`, built as the relay builds it: the outbox item the writer
/// would store, then `OutboxItem::to_bus_event`.
fn detail_of(event: Event) -> Value {
    let writer = OutboxWriter::new("outbox", Duration::from_secs(3600));
    let mut tx = writer.transaction();
    let item = tx.emit(event).unwrap_or_else(|e| panic!("the event is not publishable: {e}")).clone();
    let bus_event = item.to_bus_event().unwrap_or_else(|e| panic!("no bus event: {e}"));
    serde_json::from_str(&bus_event.detail).unwrap_or_else(|e| panic!("detail is not JSON: {e}"))
}

fn lines() -> Vec<OrderLine> {
    vec![
        OrderLine { sku: "SKU-RED-MUG".into(), quantity: 2, unit_price: "12.50".into() },
        OrderLine { sku: "SKU-BLUE-TEE".into(), quantity: 1000, unit_price: "0.000001".into() },
    ]
}

fn created(order_id: &str) -> OrderCreated {
    OrderCreated { order_id: order_id.into(), customer_id: "Zoë 🚀 c-1".into(), currency: "EUR".into(), lines: lines(), attachment: None }
}

fn created_detail() -> Value {
    detail_of(order_created_event(&created("o-1"), "example.orders", "corr-1", None))
}

fn cancelled_detail(reason: Option<&str>) -> Value {
    let data = OrderCancelled { order_id: "o-1".into(), reason: reason.map(str::to_owned), lines: lines() };
    detail_of(order_cancelled_event(&data, 2, "example.orders", "corr-2", None))
}

/// An inventory event as the consumer emits it: event version 1, aggregate `Reservation#<order>`.
fn inventory_detail(event_type: &str, payload: String, sequence: u64) -> Value {
    detail_of(Event::from_json(event_type, "example.inventory", (RESERVATION, "o-1"), sequence, payload).correlation_id("corr-1").trace_header(None))
}

fn settled(reason: Option<&str>) -> String {
    let data = ReservationSettled { order_id: "o-1".into(), lines: lines(), reason: reason.map(str::to_owned) };
    serde_json::to_string(&data).expect("the payload serialises")
}

fn released() -> String {
    let data =
        InventoryReleased { order_id: "o-1".into(), released: BTreeMap::from([("SKU-RED-MUG".to_owned(), 2), ("SKU-BLUE-TEE".to_owned(), 1000)]) };
    serde_json::to_string(&data).expect("the payload serialises")
}

#[test]
fn every_event_type_has_a_valid_2020_12_schema_named_by_type_and_version() {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("schemas")).expect("schemas/ exists") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if !name.ends_with(".json") {
            continue;
        }
        let (event_type, version) = name
            .strip_suffix(".json")
            .and_then(|stem| stem.rsplit_once(".v"))
            .and_then(|(t, v)| Some((t.to_owned(), v.parse::<u64>().ok()?)))
            .unwrap_or_else(|| panic!("{name} is not named <EventType>.v<version>.json"));
        let schema = read_json(&path);
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{name}");
        if let Err(e) = jsonschema::draft202012::meta::validate(&schema) {
            panic!("{name} is not a valid draft 2020-12 schema: {e}");
        }
        let id = schema["$id"].as_str().unwrap_or_else(|| panic!("{name} has no $id"));
        assert!(id.ends_with(&format!("/{name}")), "{name}: $id {id} does not end with the file name");
        let metadata = &schema["properties"]["metadata"]["properties"];
        assert_eq!(metadata["type"]["const"], event_type.as_str(), "{name}: metadata.type");
        assert_eq!(metadata["version"]["const"], version, "{name}: metadata.version");
        assert_eq!(schema["required"], json!(["metadata", "data"]), "{name}");
        found.insert((event_type, version));
    }
    let expected: BTreeSet<(String, u64)> = EVENT_TYPES.iter().map(|(t, v)| ((*t).to_owned(), *v)).collect();
    assert_eq!(found, expected, "one schema per event type and version");
}

#[test]
fn the_sample_bus_events_match_their_schemas() {
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(root().join("events")).expect("events/ exists") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let event = read_json(&path);
        let (Some(detail_type), Some(detail)) = (event["detail-type"].as_str(), event.get("detail")) else { continue };
        let version = detail["metadata"]["version"].as_u64().unwrap_or_else(|| panic!("{}: no detail.metadata.version", path.display()));
        assert_eq!(detail["metadata"]["type"], detail_type, "{}: detail-type and metadata.type differ", path.display());
        assert_valid(detail_type, version, detail);
        checked.push(path.file_name().unwrap_or_default().to_string_lossy().into_owned());
    }
    checked.sort();
    assert!(checked.contains(&"order-created.json".to_owned()), "events/order-created.json was not checked: {checked:?}");
    assert!(checked.contains(&"order-cancelled.json".to_owned()), "events/order-cancelled.json was not checked: {checked:?}");
}

#[test]
fn the_order_apis_events_match_their_schemas() {
    let detail = created_detail();
    assert_eq!(detail["metadata"]["type"], "OrderCreated");
    assert_valid("OrderCreated", 1, &detail);
    assert_valid("OrderCancelled", 1, &cancelled_detail(Some("too late")));
    assert_valid("OrderCancelled", 1, &cancelled_detail(None));
    // The largest order the API accepts.
    let mut big = created("o_2");
    big.lines = (0..MAX_LINES).map(|i| OrderLine { sku: format!("SKU-{i}"), quantity: 1, unit_price: "999999999999999999.999999".into() }).collect();
    assert_valid("OrderCreated", 1, &detail_of(order_created_event(&big, "example.orders", "c", None)));
}

#[test]
fn the_inventory_consumers_events_match_their_schemas() {
    assert_valid("InventoryReserved", 1, &inventory_detail("InventoryReserved", settled(None), 1));
    assert_valid("InventoryRejected", 1, &inventory_detail("InventoryRejected", settled(Some("insufficient stock for SKU-RED-MUG")), 1));
    assert_valid("InventoryReleased", 1, &inventory_detail("InventoryReleased", released(), 2));
}

#[test]
fn the_schemas_reject_what_the_contract_forbids() {
    let with = |mut detail: Value, pointer: &str, value: Value| {
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer with a parent");
        let target = detail.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}"));
        match value {
            Value::Null => {
                target.as_object_mut().expect("an object").remove(key);
            }
            value => match target {
                Value::Object(map) => {
                    map.insert(key.to_owned(), value);
                }
                Value::Array(items) => items[key.parse::<usize>().expect("an index")] = value,
                _ => panic!("{parent} is neither an object nor an array"),
            },
        }
        detail
    };
    let created = created_detail();
    assert_invalid("OrderCreated", &with(created.clone(), "/data/lines/0/quantity", json!(0)), "quantity 0");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/lines/0/quantity", json!(1001)), "quantity 1001");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/lines/0/unit_price", json!(12.5)), "a numeric price");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/lines/0/unit_price", json!("1e3")), "an exponent price");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/lines", json!([])), "no lines");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/currency", json!("eur")), "a lower-case currency");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/customer_id", Value::Null), "no customer_id");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/order_id", json!("a/b")), "a bad order id");
    assert_invalid("OrderCreated", &with(created.clone(), "/data/extra", json!(1)), "an unknown data field");
    assert_invalid("OrderCreated", &with(created.clone(), "/metadata/type", json!("OrderCancelled")), "another type");
    assert_invalid("OrderCreated", &with(created.clone(), "/metadata/version", json!(2)), "another version");
    assert_invalid("OrderCreated", &with(created.clone(), "/metadata/sequence", json!(2)), "sequence 2");
    assert_invalid("OrderCreated", &with(created.clone(), "/metadata/id", Value::Null), "no event id");
    assert_invalid("OrderCreated", &with(created.clone(), "/metadata/time", json!("2026-11-29T09:00:00+01:00")), "a non-UTC time");
    assert_invalid("OrderCreated", &with(created.clone(), "/data", json!("{}")), "data as a JSON string");

    let cancelled = cancelled_detail(Some("x"));
    assert_invalid("OrderCancelled", &with(cancelled.clone(), "/data/lines", Value::Null), "no lines");
    assert_invalid("OrderCancelled", &with(cancelled.clone(), "/data/reason", json!("")), "an empty reason");
    assert_invalid("OrderCancelled", &with(cancelled.clone(), "/metadata/sequence", json!(1)), "sequence 1");
    assert_invalid("OrderCancelled", &created, "an OrderCreated detail");

    let reserved = inventory_detail("InventoryReserved", settled(None), 1);
    assert_invalid("InventoryReserved", &with(reserved.clone(), "/data/reason", json!("why")), "a reason");
    assert_invalid("InventoryReserved", &with(reserved.clone(), "/metadata/aggregate_type", json!("Order")), "aggregate Order");
    let rejected = inventory_detail("InventoryRejected", settled(Some("short")), 1);
    assert_invalid("InventoryRejected", &with(rejected.clone(), "/data/reason", Value::Null), "no reason");
    let released = inventory_detail("InventoryReleased", released(), 2);
    assert_invalid("InventoryReleased", &with(released.clone(), "/data/released", json!({})), "nothing released");
    assert_invalid("InventoryReleased", &with(released.clone(), "/data/released/SKU-RED-MUG", json!(0)), "0 units released");
}
