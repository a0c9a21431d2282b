use std::collections::{HashMap, HashSet};
use std::path::Path;

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::json;

use super::check::{check_effects, Balance, Effect};
use super::file::BooksFile;
use super::*;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn sample() -> Books {
    let path = root().join(FILE_NAME);
    Books::of(BooksFile::load(&path).expect("the sample's books file"), path, "r1")
}

fn my_service() -> Books {
    let path = root().join("examples/my-service").join(FILE_NAME);
    Books::of(BooksFile::load(&path).expect("my-service's books file"), path, "r1")
}

const GOOD: &str = r#"
name: things
producer: P
consumers: [C]
request: {post: /things, body: {n: "{i}"}}
accepted: {id: /id}
effects:
  - {table: T, key: {pk: "THING#{id}"}}
"#;

/// `GOOD` with `line` replaced by `with` (the line must be there).
fn bad(line: &str, with: &str) -> String {
    assert!(GOOD.contains(line), "{line}");
    GOOD.replace(line, with)
}

#[test]
fn the_shipped_books_files_parse_and_make_the_requests_they_say() {
    let books = sample();
    assert_eq!((books.name(), books.consumers().len()), ("orders", 1));
    let Request::Post { path, body } = books.request(4) else { panic!("the sample posts its orders") };
    assert_eq!(path, "/orders");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(body["customer_id"], "proof-r1-4");
    assert_eq!(body["lines"][0], json!({"sku": "SKU-WHITE-BAG", "quantity": 2, "unit_price": "10.00"}), "vary: entry i % n, a number stays a number");
    assert_eq!(books.undo("o-1"), Some(Request::Post { path: "/orders/o-1/cancel".into(), body: r#"{"reason":"proof"}"#.into() }));
    assert_eq!(books.undo_every(), Some(4));
    let answer = |status, body| Answer { status: Some(status), ok: (200..300).contains(&status), body };
    assert_eq!(books.accepted(&answer(201, json!({"order_id": "o-1"}))).as_deref(), Some("o-1"));
    assert_eq!(books.accepted(&answer(200, json!({"order_id": "o-1"}))), None, "only the statuses listed");
    assert_eq!(books.accepted(&answer(409, json!({"order_id": "o-1"}))), None);

    let my = my_service();
    let Request::Invoke { function, payload } = my.request(3) else { panic!("my-service's producer has no HTTP API") };
    assert_eq!(function, my.file.producer, "the producer, by the logical id the file gives");
    assert_eq!(serde_json::from_str::<Value>(&payload).expect("JSON"), json!({"customer_id": "proof-r1-3", "email": "proof-r1-3@example.com"}));
    let invoked = |body| Answer { status: None, ok: true, body };
    assert_eq!(my.accepted(&invoked(json!({"customer_id": "c-1", "status": "exists"}))).as_deref(), Some("c-1"));
    assert_eq!(my.accepted(&invoked(json!({"customer_id": "c-1", "status": "failed"}))), None, "`when` decides");
    assert_eq!(my.undo("c-1"), None);
    assert!(my.hot_aggregate(10, "welcome-mail").is_err(), "no hot_aggregate in the file");
}

#[test]
fn a_missing_field_an_unknown_one_and_each_bad_value_name_the_file_the_field_and_what_is_allowed() {
    assert!(BooksFile::parse("b.yaml", GOOD).is_ok());
    for (text, field, says) in [
        (GOOD.replace("name: things\n", ""), ".", "missing field `name`"),
        (bad("producer: P", "producer: P\nproducr: Q"), "producr", "unknown field `producr`, expected one of `name`, `producer`"),
        (bad("{table: T, key", "{table: T, keys: {}, key"), "effects[0].keys", "unknown field `keys`"),
        (bad("consumers: [C]", "consumers: []"), "consumers", "at least one"),
        (bad("consumers: [C]", "consumers: C"), "consumers", "expected a sequence"),
        (bad("{post: /things,", "{post: /things, invoke: P,"), "request", "exactly one of `post"),
        (bad("{post: /things,", "{post: things,"), "request.post", "not a path"),
        (bad("{n: \"{i}\"}", "{n: \"{j}\"}"), "request.body.n", "unknown placeholder {j}; allowed here: {run}, {i}"),
        (bad("{id: /id}", "{id: id}"), "accepted.id", "not a JSON pointer"),
        (bad("{id: /id}", "{id: /id, status: [42]}"), "accepted.status", "not an HTTP status"),
        (bad("{id: /id}", "{id: /id, when: {/s: [{a: 1}]}}"), "accepted.when./s", "not a string, number or boolean"),
        (bad("key: {pk: \"THING#{id}\"}", "key: {pk: \"THING\"}"), "effects[0].key", "must hold {id}"),
        (bad("key: {pk: \"THING#{id}\"}", "key: {pk: \"THING#{group}\"}"), "effects[0].key.pk", "unknown placeholder {group}"),
        (bad("{table: T,", "{table: {function: F},"), "effects[0].table", "missing field `variable`"),
        (bad("{table: T,", "{table: {function: F, variable: V, x: 1},"), "effects[0].table", "unknown field `x`"),
        (bad("{table: T,", "{table: T, items: -1,"), "effects[0].items", "invalid type: integer `-1`, expected usize"),
        (bad("{table: T,", "{table: T, origin: true,") + "  - {table: U, origin: true, key: {pk: \"U#{id}\"}}\n", "effects", "at most one"),
        (GOOD.to_owned() + "undo: {every: 0, post: /x}\n", "undo.every", "at least 1"),
        (GOOD.to_owned() + "undo: {every: 2, post: \"/x/{i}\"}\n", "undo.post", "unknown placeholder {i}; allowed here: {run}, {id}"),
        (GOOD.to_owned() + "balances: [{name: b, table: T, totals: {key: {pk: \"S#{group}\"}, sum: [n]}}]\n", "balances[0]", "exactly one of `seeded"),
        (
            GOOD.to_owned() + "hot_aggregate: {source: s, aggregate_type: A, id: h, events: [{at: 1, type: T, outcome: o}]}\n",
            "hot_aggregate.events",
            "exactly one event `at: rest`",
        ),
        (
            GOOD.to_owned() + "hot_aggregate: {source: s, aggregate_type: A, id: h, events: [{at: first, type: T, outcome: o}, {at: rest, type: T, outcome: o}]}\n",
            "hot_aggregate.events[0].at",
            "not a sequence number",
        ),
    ] {
        let err = BooksFile::parse("b.yaml", &text).expect_err(&text);
        assert_eq!((err.file.as_str(), err.field.as_str()), ("b.yaml", field), "{err}");
        assert!(err.reason.contains(says), "{field}: {err}");
        assert!(err.to_string().starts_with(&format!("b.yaml: {field}: ")), "{err}");
        assert!(!err.reason.starts_with(&format!("{field}: ")), "the field once: {err}");
    }
}

#[test]
fn a_template_without_a_books_file_is_told_where_it_was_looked_for_with_an_example() {
    let dir = std::env::temp_dir().join(format!("books-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let err = Books::load(&dir.join("template.yaml"), None).expect_err("no books file").to_string();
    std::fs::remove_dir_all(&dir).ok();
    assert!(err.contains(&dir.join(FILE_NAME).display().to_string()) && err.contains("beside"), "{err}");
    let example = err.split_once("A minimal one:\n\n").map(|(_, e)| e).expect("an example");
    assert!(BooksFile::parse("example", example).is_ok(), "the example shown is a valid books file");
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn item(pairs: &[(&str, AttributeValue)]) -> Item {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn effects(books: &Books) -> Vec<Effect> {
    books.file.effects.iter().map(|e| Effect::of(e, &e.table.to_string()).expect("an effect")).collect()
}

fn ledger(accepted: &[&str], undone: &[&str]) -> Ledger {
    Ledger {
        accepted: accepted.iter().map(|s| (*s).to_owned()).collect(),
        undo: undone.iter().map(|s| ((*s).to_owned(), true)).collect(),
        excused: HashSet::new(),
    }
}

/// The sample's tables for orders `o-1` (reserved) and `o-2` (cancelled, released).
fn sample_tables() -> Vec<Vec<Item>> {
    vec![
        vec![
            item(&[("pk", s("ORDER#o-1")), ("status", s("CREATED"))]),
            item(&[("pk", s("ORDER#o-2")), ("status", s("CANCELLED"))]),
            item(&[("pk", s("IDEMPOTENCY#k")), ("status", s("x"))]),
        ],
        vec![
            item(&[("pk", s("RESERVATION#o-1")), ("status", s("RESERVED"))]),
            item(&[("pk", s("RESERVATION#o-2")), ("status", s("RELEASED"))]),
            item(&[("pk", s("SKU#A")), ("reserved", n(1))]),
        ],
    ]
}

fn verdict(checked: &Checked) -> Vec<(String, bool, String)> {
    checked.invariants.iter().map(|i| (i.name.clone(), i.held, i.detail.clone())).collect()
}

#[test]
fn every_accepted_request_with_its_effects_once_in_the_state_its_undo_implies_holds() {
    let books = sample();
    let checked = check_effects("orders", &effects(&books), &sample_tables(), &ledger(&["o-1", "o-2"], &["o-2"]));
    assert!(checked.invariants.iter().all(|i| i.held), "{:?}", verdict(&checked));
    assert_eq!((checked.committed, checked.undone), (2, 1));
}

#[test]
fn a_missing_effect_a_duplicate_an_orphan_and_a_wrong_state_are_each_found() {
    let books = sample();
    let effects = effects(&books);
    let broken = |tables: Vec<Vec<Item>>, ledger: Ledger, invariant: usize, says: &str| {
        let checked = check_effects("orders", &effects, &tables, &ledger);
        let i = &checked.invariants[invariant];
        assert!(!i.held && i.detail.contains(says), "{says}: {:?}", verdict(&checked));
        assert!(checked.invariants.iter().enumerate().all(|(n, i)| n == invariant || i.held), "only {invariant}: {:?}", verdict(&checked));
    };
    // Missing: accepted, but its reservation never came.
    let mut tables = sample_tables();
    tables[1].remove(0);
    broken(tables, ledger(&["o-1", "o-2"], &["o-2"]), 0, "o-1: reservation: 0 items (expected 1)");
    // Accepted, and not in the origin table at all.
    broken(sample_tables(), ledger(&["o-1", "o-2", "o-3"], &["o-2"]), 0, "o-3: order: 0 items (expected 1)");
    // A duplicate effect.
    let mut tables = sample_tables();
    tables[1].push(item(&[("pk", s("RESERVATION#o-1")), ("status", s("RESERVED"))]));
    broken(tables, ledger(&["o-1", "o-2"], &["o-2"]), 0, "o-1: reservation: 2 items (expected 1)");
    // An orphan: a reservation of no order.
    let mut tables = sample_tables();
    tables[1].push(item(&[("pk", s("RESERVATION#o-9")), ("status", s("RESERVED"))]));
    broken(tables, ledger(&["o-1", "o-2"], &["o-2"]), 1, "reservation: o-9");
    // Undone, but the release never happened.
    let mut tables = sample_tables();
    tables[1][1] = item(&[("pk", s("RESERVATION#o-2")), ("status", s("RESERVED"))]);
    broken(tables, ledger(&["o-1", "o-2"], &["o-2"]), 0, "o-2: reservation: status RESERVED (expected RELEASED|REJECTED)");
    // Undo answered, but the order is not cancelled: the origin disagrees with the answer.
    broken(sample_tables(), ledger(&["o-1", "o-2"], &["o-1", "o-2"]), 0, "o-1: order shows it not undone but its undo was answered");
    // Cancelled without an undo request.
    broken(sample_tables(), ledger(&["o-1", "o-2"], &[]), 0, "o-2: order shows it undone but its undo was never sent");
}

#[test]
fn a_committed_request_without_an_answer_is_judged_and_an_unanswered_undo_allows_either_state() {
    let books = sample();
    // o-2's answer was lost: it is in the orders table, so it is committed and judged.
    let checked = check_effects("orders", &effects(&books), &sample_tables(), &ledger(&["o-1"], &[]));
    assert!(
        !checked.invariants[0].held && checked.invariants[0].detail.contains("1 committed without an accepted answer"),
        "{:?}",
        verdict(&checked)
    );
    // Its undo got no final answer: the origin says which state; both effects follow it.
    let mut l = ledger(&["o-1", "o-2"], &[]);
    l.undo.insert("o-2".into(), false);
    let checked = check_effects("orders", &effects(&books), &sample_tables(), &l);
    assert!(checked.invariants.iter().all(|i| i.held), "{:?}", verdict(&checked));
    assert_eq!(checked.undone, 1);
    // The hot aggregate's effects come without a request: excused.
    let mut tables = sample_tables();
    tables[1].push(item(&[("pk", s("RESERVATION#proof-hot-1")), ("status", s("RELEASED"))]));
    let mut l = ledger(&["o-1", "o-2"], &["o-2"]);
    l.excused.insert("proof-hot-1".into());
    assert!(check_effects("orders", &effects(&books), &tables, &l).invariants.iter().all(|i| i.held));
}

#[test]
fn my_services_mails_are_counted_per_customer_whatever_their_sort_key() {
    let books = my_service();
    let tables = |mails: usize| {
        vec![
            vec![item(&[("pk", s("CUSTOMER#c-1"))])],
            (0..mails).map(|m| item(&[("pk", s("CUSTOMER#c-1")), ("sk", s(&format!("MAIL#{m:020}")))])).collect(),
        ]
    };
    let l = ledger(&["c-1"], &[]);
    assert!(check_effects("customers", &effects(&books), &tables(1), &l).invariants.iter().all(|i| i.held));
    let twice = check_effects("customers", &effects(&books), &tables(2), &l);
    assert!(twice.invariants[0].detail.contains("c-1: welcome mail: 2 items (expected 1)"), "{:?}", verdict(&twice));
    let none = check_effects("customers", &effects(&books), &tables(0), &l);
    assert!(none.invariants[0].detail.contains("c-1: welcome mail: 0 items (expected 1)"), "{:?}", verdict(&none));
}

#[test]
fn balances_find_a_release_applied_twice_and_stock_that_did_not_add_up() {
    let books = sample();
    let balances: Vec<Balance> = books.file.balances.iter().map(|b| Balance::of(b).expect("a balance")).collect();
    let lines = |a: u64, b: u64| AttributeValue::M(HashMap::from([("A".to_owned(), n(a)), ("B".to_owned(), n(b))]));
    let sku = |name: &str, available: u64, reserved: u64| {
        item(&[("pk", s(&format!("SKU#{name}"))), ("available", n(available)), ("reserved", n(reserved))])
    };
    let seeded = vec![sku("A", 100, 0), sku("B", 100, 0)];
    let reservations = vec![
        item(&[("pk", s("RESERVATION#o-1")), ("status", s("RESERVED")), ("lines", lines(2, 1))]),
        item(&[("pk", s("RESERVATION#o-2")), ("status", s("RELEASED")), ("lines", lines(5, 0))]),
    ];
    let table = |a: (u64, u64), b: (u64, u64)| {
        let mut items = reservations.clone();
        items.extend([sku("A", a.0, a.1), sku("B", b.0, b.1)]);
        items
    };
    let held = |items: &[Item]| balances.iter().map(|b| b.check(items, &seeded).held).collect::<Vec<_>>();
    assert_eq!(held(&table((98, 2), (99, 1))), [true, true]);
    // 5 units more than seeded: a release applied twice gives back what it never took.
    assert_eq!(held(&table((103, 2), (99, 1))), [true, false]);
    let twice = table((98, 2), (100, 0));
    assert_eq!(held(&twice), [false, true], "B lost its reservation: the units came back, the parts still say 1");
    assert!(balances[0].check(&twice, &seeded).detail.contains("B: 0 (expected 1)"), "{}", balances[0].check(&twice, &seeded).detail);
}

#[test]
fn the_hot_aggregate_is_one_aggregate_in_sequence_with_its_events_where_the_file_puts_them() {
    let books = sample();
    let hot = books.hot_aggregate(100, "reserve-inventory").expect("the sample's books have one");
    assert_eq!((hot.events.len(), hot.consumer.as_str(), hot.inbox_consumer.as_str()), (100, books.consumers()[0].as_str(), "reserve-inventory"));
    assert_eq!(hot.aggregate_id, "proof-hot-r1");
    for (i, e) in hot.events.iter().enumerate() {
        let m = &e.detail["metadata"];
        assert_eq!(
            (m["sequence"].as_u64(), m["subject"].as_str(), m["aggregate_type"].as_str(), m["source"].as_str()),
            (Some(i as u64 + 1), Some("proof-hot-r1"), Some("Order"), Some("example.orders"))
        );
        assert_eq!(m["type"].as_str(), Some(e.detail_type.as_str()));
        // What the producer writes: the latest earlier sequence per type, so the consumer waits
        // for sequence - 1.
        let latest = m["previous"].as_object().map(|p| p.values().filter_map(Value::as_u64).max().unwrap_or(0)).unwrap_or(0);
        assert_eq!(latest, i as u64);
        assert_eq!(e.detail["data"]["order_id"], "proof-hot-r1", "placeholders filled");
    }
    let outcomes: Vec<&str> = hot.events.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(&outcomes[..3], ["reserved", "released", "nothing_to_release"]);
    assert_eq!(outcomes[49], "nothing_to_do", "the middle one (N/2)");
    assert_eq!(outcomes.iter().filter(|o| **o == "nothing_to_do").count(), 1);
    let ids: HashSet<&str> = hot.events.iter().map(HotEvent::id).collect();
    assert_eq!(ids.len(), 100, "one id per event");
}

#[test]
fn roles_come_from_the_file_and_the_one_stream_triggered_function() {
    let template = outbox_template::Template::load(&root().join("template.yaml")).expect("the sample's template");
    let (functions, _) = template.runnable_functions().expect("its functions");
    let books = sample();
    let roles = books.roles(&functions).expect("roles");
    assert_eq!((&roles.producer, &roles.consumers), (&books.file.producer, &books.file.consumers));
    assert_eq!((roles.relay.as_deref(), roles.outbox_table.as_deref()), (Some("Relay/RelayFunction"), Some("OutboxTable")));
}

#[test]
fn the_docs_complete_example_is_a_books_file_with_every_field() {
    let doc = std::fs::read_to_string(root().join("docs/local-runtime.md")).expect("docs/local-runtime.md");
    let section = doc.split_once("\n## The books file").map(|(_, s)| s).expect("the section");
    let yaml = section.split_once("```yaml\n").and_then(|(_, s)| s.split_once("```")).map(|(y, _)| y).expect("its YAML block");
    let file = BooksFile::parse("docs/local-runtime.md", yaml).unwrap_or_else(|e| panic!("{e}"));
    assert!(file.relay.is_some() && file.undo.is_some() && !file.seed.is_empty() && file.hot_aggregate.is_some());
    assert!(!file.request.vary.is_empty() && !file.accepted.status.is_empty() && !file.accepted.when.is_empty());
    assert!(file.effects.iter().any(|e| e.origin) && file.effects.iter().all(|e| e.undone.is_some()));
    assert!(file.balances.iter().any(|b| b.seeded) && file.balances.iter().any(|b| b.parts.is_some()));
    assert!(
        file.effects.iter().any(|e| matches!(e.table, TableRef::Env { .. })) && file.seed.iter().any(|s| matches!(s.table, TableRef::Logical(_)))
    );
}
