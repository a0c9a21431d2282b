//! The books file (`outbox-books.yaml` beside the template): what `outbox-local proof` sends to
//! a service and what each request must leave in its tables. Read with `serde_yaml_ng` and
//! `serde_path_to_error` (unknown fields and wrong types name the field), then checked as a
//! whole by [`BooksFile::parse`] (what serde cannot say: one of two fields, the placeholders a
//! text may use, a key pattern with its id). Every field: docs/local-runtime.md, "The books
//! file".

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::pattern::KeyPattern;

/// The file's name, looked for in the template's directory.
pub const FILE_NAME: &str = "outbox-books.yaml";

/// Why a books file was refused: the file, the field (a path such as `effects[1].key`) and
/// what is allowed there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {field}: {reason}")]
pub struct BooksError {
    /// The file.
    pub file: String,
    /// The field, as a path from the document's root (`.` for the whole document).
    pub field: String,
    /// What is wrong and what is allowed.
    pub reason: String,
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BooksFile {
    /// What the requests create, for the report (e.g. `orders`).
    pub name: String,
    /// Logical id of the function that takes the requests (the `producer` of fault plans).
    pub producer: String,
    /// Logical ids of the consumers whose inbox the proof checks (the `consumer` of fault plans);
    /// at least one. Each needs `INBOX_TABLE` and a delivery from the bus.
    pub consumers: Vec<String>,
    /// Logical id of the relay (the `relay` of fault plans); default: the template's one
    /// function triggered by a DynamoDB stream.
    #[serde(default)]
    pub relay: Option<String>,
    /// The request the proof sends `--orders` times.
    pub request: RequestSpec,
    /// How an answer is judged accepted and where the id of what it created is.
    pub accepted: AcceptedSpec,
    /// The request that undoes an accepted one (optional).
    #[serde(default)]
    pub undo: Option<UndoSpec>,
    /// Items written before the first request (reference data).
    #[serde(default)]
    pub seed: Vec<SeedSpec>,
    /// What each accepted (and each undone) request must leave in the tables; at least one.
    pub effects: Vec<EffectSpec>,
    /// Sums over items that must equal what the effects imply (or what was seeded).
    #[serde(default)]
    pub balances: Vec<BalanceSpec>,
    /// The hot-aggregate scenario (`proof --hot-aggregate N`), for an ordered consumer.
    #[serde(default)]
    pub hot_aggregate: Option<HotSpec>,
}

/// A table: its logical id (`InventoryTable`, `ConsumerKit/InboxTable`), or a function's
/// environment variable that names it (`{function: F, variable: V}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableRef {
    /// A table resource of the template (or of a nested application, `App/Table`).
    Logical(String),
    /// The value of `variable` in `function`'s environment.
    Env {
        /// The function's logical id.
        function: String,
        /// The variable.
        variable: String,
    },
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Logical(id) => f.write_str(id),
            Self::Env { function, variable } => write!(f, "{function}'s {variable}"),
        }
    }
}

impl<'de> Deserialize<'de> for TableRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TableVisitor;
        impl<'de> Visitor<'de> for TableVisitor {
            type Value = TableRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table's logical id, or {function: <logical id>, variable: <environment variable>}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TableRef, E> {
                Ok(TableRef::Logical(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TableRef, A::Error> {
                let (mut function, mut variable) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "function" => function = Some(map.next_value::<String>()?),
                        "variable" => variable = Some(map.next_value::<String>()?),
                        other => return Err(de::Error::unknown_field(other, &["function", "variable"])),
                    }
                }
                match (function, variable) {
                    (Some(function), Some(variable)) => Ok(TableRef::Env { function, variable }),
                    (None, _) => Err(de::Error::missing_field("function")),
                    (_, None) => Err(de::Error::missing_field("variable")),
                }
            }
        }
        deserializer.deserialize_any(TableVisitor)
    }
}

/// Where a request goes: `post` (a path of the template's HTTP API) or `invoke` (a function's
/// logical id, invoked directly), exactly one; and its JSON `body` (the payload of an
/// invocation).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    /// `POST` this path through the template's HTTP API (JWT-signed when it has an authorizer).
    #[serde(default)]
    pub post: Option<String>,
    /// Invoke this function (logical id) directly with `body` as its event.
    #[serde(default)]
    pub invoke: Option<String>,
    /// The JSON body (payload); its texts may hold `{run}`, `{i}` and the `vary` names.
    #[serde(default)]
    pub body: Value,
    /// Lists the i-th request takes entry `i % len` of: `{sku}` in `body` is `vary.sku[i % n]`.
    #[serde(default)]
    pub vary: BTreeMap<String, Vec<Value>>,
}

/// How an answer counts as accepted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptedSpec {
    /// JSON pointer (RFC 6901) to the id in the answer's body, e.g. `/order_id`.
    pub id: String,
    /// HTTP statuses that count (default: any 2xx); a direct invocation counts when the
    /// function answered without an error.
    #[serde(default)]
    pub status: Vec<u16>,
    /// JSON pointer → the value (or the list of values) the answer must hold there.
    #[serde(default)]
    pub when: BTreeMap<String, Value>,
}

/// The request that undoes an accepted one, sent for every `every`-th accepted request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoSpec {
    /// Undo every n-th accepted request (1: all); `proof --cancel-every N` overrides it.
    pub every: usize,
    /// As [`RequestSpec::post`]; its texts may hold `{id}` (the accepted id) and `{run}`.
    #[serde(default)]
    pub post: Option<String>,
    /// As [`RequestSpec::invoke`].
    #[serde(default)]
    pub invoke: Option<String>,
    /// As [`RequestSpec::body`].
    #[serde(default)]
    pub body: Value,
}

/// Items put into a table before the first request (replacing any with the same key).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedSpec {
    /// The table.
    pub table: TableRef,
    /// The items, as JSON objects (strings → S, numbers → N, booleans → BOOL, lists → L,
    /// objects → M); their texts may hold `{run}`.
    pub items: Vec<serde_json::Map<String, Value>>,
}

/// What one accepted request leaves in one table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EffectSpec {
    /// For the report (default: the table).
    #[serde(default)]
    pub name: Option<String>,
    /// The table.
    pub table: TableRef,
    /// Key attribute → pattern: one holds `{id}` (the accepted id), the others are literal or
    /// end in `*` (any rest). An item of the table whose key matches belongs to that id.
    pub key: BTreeMap<String, String>,
    /// The request's own record, written with its event in the producer's transaction: an item
    /// here is a request that committed (its answer may have been lost), and its attributes say
    /// whether it was undone.
    #[serde(default)]
    pub origin: bool,
    /// How many items an accepted request leaves (default 1).
    #[serde(default = "one")]
    pub items: usize,
    /// Attribute → the value (or the list of values) each of them must hold.
    #[serde(default)]
    pub attributes: BTreeMap<String, Value>,
    /// What an undone request leaves instead (default: the same as accepted).
    #[serde(default)]
    pub undone: Option<UndoneSpec>,
}

fn one() -> usize {
    1
}

/// An effect once its request was undone: each field defaults to the accepted one's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoneSpec {
    /// How many items.
    #[serde(default)]
    pub items: Option<usize>,
    /// Attribute → value(s).
    #[serde(default)]
    pub attributes: Option<BTreeMap<String, Value>>,
}

/// A sum over items that must balance: per group, the sum of `totals.sum` of the item whose key
/// matches `totals.key` (`{group}` captured) equals either what was seeded (`seeded: true`) or
/// the sum of `parts.amounts[group]` over the items matching `parts`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalanceSpec {
    /// The invariant's name in the report.
    pub name: String,
    /// The table of the totals (and of the parts).
    pub table: TableRef,
    /// The items holding the totals.
    pub totals: TotalsSpec,
    /// The totals equal the same sum in the seed items with the same key.
    #[serde(default)]
    pub seeded: bool,
    /// The totals equal the sum of the parts' amounts.
    #[serde(default)]
    pub parts: Option<PartsSpec>,
}

/// The items holding a balance's totals.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TotalsSpec {
    /// Key attribute → pattern; one holds `{group}`.
    pub key: BTreeMap<String, String>,
    /// The number attributes summed per item (absent: 0).
    pub sum: Vec<String>,
}

/// The items whose amounts add up to a balance's totals.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartsSpec {
    /// Key attribute → pattern (`{id}` allowed, or literal, or ending in `*`).
    pub key: BTreeMap<String, String>,
    /// Attribute → value(s): only these items count.
    #[serde(default, rename = "where")]
    pub filter: BTreeMap<String, Value>,
    /// A map attribute `{group: number}` of each part.
    pub amounts: String,
}

/// The hot-aggregate scenario: N events of ONE aggregate put on the bus shuffled.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotSpec {
    /// The ordered consumer (default: the first of `consumers`).
    #[serde(default)]
    pub consumer: Option<String>,
    /// The events' `source`.
    pub source: String,
    /// `metadata.aggregate_type`.
    pub aggregate_type: String,
    /// The aggregate's id; may hold `{run}`.
    pub id: String,
    /// Which event is at which sequence: `at` a number, `middle` (N/2, at least 3) or `rest`
    /// (every other sequence; exactly one entry).
    pub events: Vec<HotEventSpec>,
}

/// One kind of event of the hot aggregate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HotEventSpec {
    /// A sequence number (1, 2, …), `middle` or `rest`.
    pub at: Value,
    /// The `detail-type` (and `metadata.type`).
    #[serde(rename = "type")]
    pub event_type: String,
    /// The `outcome` the consumer's inbox row must record.
    pub outcome: String,
    /// `detail.data`; its texts may hold `{aggregate_id}`, `{sequence}` and `{run}`.
    #[serde(default)]
    pub data: Value,
}

impl BooksFile {
    /// Reads and checks the books file at `path`.
    ///
    /// # Errors
    /// [`BooksError`]: the file cannot be read, or a field is unknown or holds a bad value
    /// (the error names the file, the field and what is allowed).
    pub fn load(path: &Path) -> Result<Self, BooksError> {
        let text = std::fs::read_to_string(path).map_err(|e| BooksError {
            file: path.display().to_string(),
            field: ".".into(),
            reason: format!("cannot be read: {e}"),
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses and checks `text`, read from `file` (named in errors).
    ///
    /// # Errors
    /// [`BooksError`] naming the field and what is allowed.
    pub fn parse(file: &str, text: &str) -> Result<Self, BooksError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let books: Self = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let field = if field.is_empty() { ".".to_owned() } else { field };
            // serde_yaml_ng starts with the path too (once is enough) and ends with " at line L
            // column C" (kept: it helps).
            let reason = e.into_inner().to_string();
            let reason = reason.strip_prefix(&format!("{field}: ")).map(str::to_owned).unwrap_or(reason);
            BooksError { file: file.to_owned(), field, reason }
        })?;
        books.check().map_err(|(field, reason)| BooksError { file: file.to_owned(), field, reason })?;
        Ok(books)
    }

    /// What serde cannot check; `(field, reason)` of the first problem.
    fn check(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, reason: &str| Err((field.to_owned(), reason.to_owned()));
        for (field, id) in [("name", &self.name), ("producer", &self.producer)] {
            if id.trim().is_empty() {
                return bad(field, "must not be empty");
            }
        }
        if self.consumers.is_empty() {
            return bad("consumers", "must list at least one consumer (a function's logical id)");
        }
        let vary: Vec<&str> = self.request.vary.keys().map(String::as_str).collect();
        for (name, list) in &self.request.vary {
            if list.is_empty() {
                return Err((format!("request.vary.{name}"), "must list at least one value".into()));
            }
            if ["run", "i", "id"].contains(&name.as_str()) {
                return Err((format!("request.vary.{name}"), "is a placeholder of its own: name the list otherwise".into()));
            }
        }
        check_target("request", self.request.post.as_deref(), self.request.invoke.as_deref())?;
        let mut allowed = vec!["run", "i"];
        allowed.extend(&vary);
        check_placeholders("request.body", &self.request.body, &allowed)?;
        if let Some(post) = &self.request.post {
            check_text("request.post", post, &allowed)?;
        }
        check_pointer("accepted.id", &self.accepted.id)?;
        for (pointer, values) in &self.accepted.when {
            check_pointer(&format!("accepted.when.{pointer}"), pointer)?;
            check_scalars(&format!("accepted.when.{pointer}"), values)?;
        }
        if let Some(s) = self.accepted.status.iter().find(|s| !(100..=599).contains(*s)) {
            return Err(("accepted.status".into(), format!("{s} is not an HTTP status (100 to 599)")));
        }
        if let Some(undo) = &self.undo {
            if undo.every == 0 {
                return bad("undo.every", "must be at least 1 (1: every accepted request); leave `undo` out for none");
            }
            check_target("undo", undo.post.as_deref(), undo.invoke.as_deref())?;
            check_placeholders("undo.body", &undo.body, &["run", "id"])?;
            if let Some(post) = &undo.post {
                check_text("undo.post", post, &["run", "id"])?;
            }
        }
        for (n, seed) in self.seed.iter().enumerate() {
            for (m, item) in seed.items.iter().enumerate() {
                check_placeholders(&format!("seed[{n}].items[{m}]"), &Value::Object(item.clone()), &["run"])?;
            }
        }
        if self.effects.is_empty() {
            return bad("effects", "must list at least one effect (what an accepted request leaves in a table)");
        }
        if self.effects.iter().filter(|e| e.origin).count() > 1 {
            return bad("effects", "at most one effect is the `origin` (the request's own record)");
        }
        for (n, effect) in self.effects.iter().enumerate() {
            let at = format!("effects[{n}]");
            check_key(&format!("{at}.key"), &effect.key, "id", true)?;
            for (name, values) in &effect.attributes {
                check_scalars(&format!("{at}.attributes.{name}"), values)?;
            }
            if let Some(attributes) = effect.undone.as_ref().and_then(|u| u.attributes.as_ref()) {
                for (name, values) in attributes {
                    check_scalars(&format!("{at}.undone.attributes.{name}"), values)?;
                }
            }
        }
        for (n, balance) in self.balances.iter().enumerate() {
            let at = format!("balances[{n}]");
            check_key(&format!("{at}.totals.key"), &balance.totals.key, "group", true)?;
            if balance.totals.sum.is_empty() {
                return Err((format!("{at}.totals.sum"), "must list at least one number attribute".into()));
            }
            match (&balance.parts, balance.seeded) {
                (Some(_), true) | (None, false) => {
                    return Err((
                        at,
                        "needs exactly one of `seeded: true` (the totals as seeded) and `parts` (the totals as the parts add up)".into(),
                    ))
                }
                (Some(parts), false) => {
                    check_key(&format!("{at}.parts.key"), &parts.key, "id", false)?;
                    for (name, values) in &parts.filter {
                        check_scalars(&format!("{at}.parts.where.{name}"), values)?;
                    }
                }
                (None, true) => {}
            }
        }
        if let Some(hot) = &self.hot_aggregate {
            check_text("hot_aggregate.id", &hot.id, &["run"])?;
            if hot.events.iter().filter(|e| e.at == "rest").count() != 1 {
                return bad("hot_aggregate.events", "needs exactly one event `at: rest` (every sequence no other entry names)");
            }
            let mut seen = Vec::new();
            for (n, e) in hot.events.iter().enumerate() {
                let at = format!("hot_aggregate.events[{n}]");
                match &e.at {
                    Value::Number(s) if s.as_u64().is_some_and(|s| s >= 1) => {}
                    Value::String(s) if s == "middle" || s == "rest" => {}
                    other => return Err((format!("{at}.at"), format!("{other} is not a sequence number (1, 2, …), `middle` or `rest`"))),
                }
                if seen.contains(&&e.at) {
                    return Err((format!("{at}.at"), format!("{} is named twice", e.at)));
                }
                seen.push(&e.at);
                check_placeholders(&format!("{at}.data"), &e.data, &["aggregate_id", "sequence", "run"])?;
            }
        }
        Ok(())
    }
}

fn check_target(at: &str, post: Option<&str>, invoke: Option<&str>) -> Result<(), (String, String)> {
    match (post, invoke) {
        (Some(path), None) if path.starts_with('/') => Ok(()),
        (Some(path), None) => Err((format!("{at}.post"), format!("{path:?} is not a path (it starts with /)"))),
        (None, Some(f)) if !f.trim().is_empty() => Ok(()),
        _ => Err((at.into(), "needs exactly one of `post: /path` (through the HTTP API) and `invoke: <function logical id>`".into())),
    }
}

fn check_pointer(at: &str, pointer: &str) -> Result<(), (String, String)> {
    if pointer.starts_with('/') {
        Ok(())
    } else {
        Err((at.into(), format!("{pointer:?} is not a JSON pointer (RFC 6901: /field/0/inner)")))
    }
}

/// A scalar (string, number, boolean) or a non-empty list of them.
fn check_scalars(at: &str, value: &Value) -> Result<(), (String, String)> {
    let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_));
    let fine = match value {
        Value::Array(list) => !list.is_empty() && list.iter().all(scalar),
        v => scalar(v),
    };
    if fine {
        Ok(())
    } else {
        Err((at.into(), format!("{value} is not a string, number or boolean, or a list of them")))
    }
}

fn check_key(at: &str, key: &BTreeMap<String, String>, placeholder: &str, required: bool) -> Result<(), (String, String)> {
    if key.is_empty() {
        return Err((at.into(), "must name at least one key attribute".into()));
    }
    let mut captures = 0;
    for (attribute, pattern) in key {
        let parsed = KeyPattern::parse(pattern, placeholder).map_err(|reason| (format!("{at}.{attribute}"), reason))?;
        captures += usize::from(parsed.captures());
    }
    match captures {
        0 if required => Err((at.into(), format!("one key attribute's pattern must hold {{{placeholder}}}"))),
        0 | 1 => Ok(()),
        _ => Err((at.into(), format!("only one key attribute's pattern may hold {{{placeholder}}}"))),
    }
}

/// Every text in `value` uses only the placeholders `allowed`.
fn check_placeholders(at: &str, value: &Value, allowed: &[&str]) -> Result<(), (String, String)> {
    match value {
        Value::String(s) => check_text(at, s, allowed),
        Value::Array(list) => list.iter().enumerate().try_for_each(|(i, v)| check_placeholders(&format!("{at}[{i}]"), v, allowed)),
        Value::Object(map) => map.iter().try_for_each(|(k, v)| check_placeholders(&format!("{at}.{k}"), v, allowed)),
        _ => Ok(()),
    }
}

fn check_text(at: &str, text: &str, allowed: &[&str]) -> Result<(), (String, String)> {
    for name in super::fill::placeholders(text).map_err(|reason| (at.to_owned(), reason))? {
        if !allowed.contains(&name) {
            let list = allowed.iter().map(|a| format!("{{{a}}}")).collect::<Vec<_>>().join(", ");
            return Err((at.into(), format!("unknown placeholder {{{name}}}; allowed here: {list}")));
        }
    }
    Ok(())
}
