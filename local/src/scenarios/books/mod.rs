//! A service's books for `outbox-local proof`: the requests to send and the effect each must
//! leave in the service's tables, read from the file the user writes beside the template,
//! [`file::FILE_NAME`] (`outbox-books.yaml`; format: [`mod@file`], docs/local-runtime.md "The books
//! file"). The proof's own invariants (outbox ↔ stream ↔ bus ↔ inbox, dead letters) hold for
//! every template and need nothing from the file but its consumers; the file adds what is the
//! service's: exactly once per accepted request, no effect without its request, the balances,
//! and the hot-aggregate scenario's events. No service's function name is known here: the file
//! names the producer and the consumers, and fault plans name them by role
//! ([`Books::roles`]).
//!
//! - [`mod@file`]: the format, read and checked (errors name the file, the field, what is allowed);
//! - [`pattern`], [`mod@fill`]: key patterns (`ORDER#{id}`) and placeholders (`{run}`, `{i}`);
//! - [`mod@check`]: the verdict on items already read (pure, unit-tested);
//! - [`Books`]: the file resolved against a running stack: the requests, the seed, the scans.

pub mod check;
pub mod file;
pub mod fill;
pub mod pattern;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde_json::{json, Value};

pub use check::{Checked, Item, Ledger};
use file::{BooksFile, TableRef, FILE_NAME};
use fill::{fill, fill_str};

use crate::faults::Roles;
use crate::runtime::Runtime;
use outbox_template::FunctionEvent;

/// One request the proof sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `POST path` with a JSON `body` through the template's HTTP API (the proof adds an
    /// `Idempotency-Key` to a first request and retries 5xx, 408, 429 and transport errors).
    Post {
        /// The path, e.g. `/orders`.
        path: String,
        /// The JSON body.
        body: String,
    },
    /// A direct invocation of `function` with the JSON `payload` (a producer without an HTTP
    /// API); retried while the function answers with an error.
    Invoke {
        /// The function's logical id.
        function: String,
        /// The JSON event.
        payload: String,
    },
}

/// A final answer to a [`Request`].
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status (`None` for a direct invocation).
    pub status: Option<u16>,
    /// Whether it is a success: 2xx, or the function answered without an error.
    pub ok: bool,
    /// The body (`null` when not JSON) or the function's response.
    pub body: Value,
}

/// One invariant, held or broken.
#[derive(Debug, Clone, Serialize)]
pub struct Invariant {
    /// Its name.
    pub name: String,
    /// Whether it held.
    pub held: bool,
    /// What was found (figures; the first offenders when broken).
    pub detail: String,
}

/// The events of one aggregate the proof publishes itself, shuffled, as the relay would after a
/// backlog, and what the consumer's inbox must then hold ([`Books::hot_aggregate`]).
#[derive(Debug, Clone)]
pub struct HotAggregate {
    /// The consumer's name in its inbox rows (its `CONSUMER_NAME`).
    pub inbox_consumer: String,
    /// The consumer's logical id.
    pub consumer: String,
    /// `metadata.aggregate_type` of the events.
    pub aggregate_type: String,
    /// `metadata.subject`: the aggregate's id.
    pub aggregate_id: String,
    /// The events' `source`.
    pub source: String,
    /// The events, in sequence order (1, 2, …).
    pub events: Vec<HotEvent>,
}

/// One event of a [`HotAggregate`].
#[derive(Debug, Clone)]
pub struct HotEvent {
    /// `detail-type`.
    pub detail_type: String,
    /// `detail` (`metadata.id` is the event id).
    pub detail: Value,
    /// The `outcome` its inbox row must record.
    pub outcome: String,
}

impl HotEvent {
    /// `detail.metadata.id`.
    pub fn id(&self) -> &str {
        self.detail["metadata"]["id"].as_str().unwrap_or_default()
    }
}

/// `detail` of an event as the outbox library's producer writes it (`metadata`: id, type,
/// version 1, source, time, subject, aggregate_type, sequence, correlation_id; then `data`), for
/// the events the proof and the demo put on the bus themselves.
pub fn event_detail(
    event_type: &str,
    id: &str,
    (source, aggregate_type, aggregate_id): (&str, &str, &str),
    sequence: u64,
    correlation_id: &str,
    data: Value,
) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    json!({
        "metadata": {"id": id, "type": event_type, "version": 1, "source": source, "time": now,
                     "subject": aggregate_id, "aggregate_type": aggregate_type, "sequence": sequence, "correlation_id": correlation_id},
        "data": data
    })
}

/// A minimal books file, shown when a template has none.
pub const MINIMAL_EXAMPLE: &str = r#"name: things
producer: ThingsApiFunction             # logical id of the function that takes the requests
consumers: [ThingsConsumerFunction]     # logical ids of the consumers whose inbox is checked
request:
  post: /things                         # through the template's HTTP API; or  invoke: <function>
  body: {thing_id: "proof-{run}-{i}"}
accepted:
  id: /thing_id                         # JSON pointer into the answer
effects:
  - table: {function: ThingsApiFunction, variable: THINGS_TABLE}
    key: {pk: "THING#{id}"}
    origin: true                        # the producer's own record, written with the event
  - table: {function: ThingsConsumerFunction, variable: THING_EFFECTS_TABLE}
    key: {pk: "THING#{id}"}
    items: 1                            # exactly one per accepted request
"#;

/// The books file of a template, read and checked.
#[derive(Debug, Clone)]
pub struct Books {
    /// The file's content.
    pub file: BooksFile,
    /// Where it was read from.
    pub path: PathBuf,
    /// 8 hex digits, new per run: `{run}`, so ids are new on a stack that has older ones.
    run: String,
}

/// Where the books of `template` are: `given` (`proof --books FILE`), else [`FILE_NAME`] in the
/// template's directory.
pub fn path_for(template: &Path, given: Option<&Path>) -> PathBuf {
    match given {
        Some(p) => p.to_owned(),
        None => template.parent().unwrap_or(Path::new(".")).join(FILE_NAME),
    }
}

impl Books {
    /// Reads the books of the template at `template` (see [`path_for`]).
    ///
    /// # Errors
    /// No file there (the error says where it looked and shows [`MINIMAL_EXAMPLE`]), or a bad
    /// one ([`file::BooksError`]: the file, the field, what is allowed).
    pub fn load(template: &Path, given: Option<&Path>) -> crate::Result<Self> {
        let path = path_for(template, given);
        if given.is_none() && !path.exists() {
            return Err(crate::Error::invalid(format!(
                "the proof needs the service's books: no {} beside {} (what to send and what each request must leave in the tables; \
                 docs/local-runtime.md, \"The books file\"). A minimal one:\n\n{MINIMAL_EXAMPLE}",
                path.display(),
                template.display()
            )));
        }
        let file = BooksFile::load(&path).map_err(|e| crate::Error::invalid(e.to_string()))?;
        Ok(Self { file, path, run: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned() })
    }

    /// Books of `file` read from `path`, for tests.
    pub fn of(file: BooksFile, path: PathBuf, run: &str) -> Self {
        Self { file, path, run: run.to_owned() }
    }

    /// What the requests create, for the report.
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// The consumers whose inbox the proof checks.
    pub fn consumers(&self) -> &[String] {
        &self.file.consumers
    }

    /// The roles fault plans name (`producer`, `consumer`, `relay`, the `outbox` table), from the
    /// file and `functions` (the template's, nested ones included): the relay is the file's, or
    /// the one function a DynamoDB stream triggers; the outbox table is its stream's.
    ///
    /// # Errors
    /// A relay named in the file that the template does not have, or a stream that is not
    /// the relay's.
    pub fn roles(&self, functions: &[outbox_template::FunctionSpec]) -> crate::Result<Roles> {
        let streamed: Vec<(&str, &str)> = functions
            .iter()
            .flat_map(|f| {
                f.events.iter().filter_map(move |e| match e {
                    FunctionEvent::DynamoDb(m) => Some((f.logical_id.as_str(), m.table_logical_id.as_str())),
                    _ => None,
                })
            })
            .collect();
        let relay = match &self.file.relay {
            Some(relay) => Some(streamed.iter().find(|(f, _)| f == relay).copied().ok_or_else(|| {
                crate::Error::invalid(format!(
                    "{}: relay: {relay} is no function of the template triggered by a DynamoDB stream",
                    self.path.display()
                ))
            })?),
            None => match streamed.as_slice() {
                [one] => Some(*one),
                _ => None,
            },
        };
        Ok(Roles {
            producer: self.file.producer.clone(),
            consumers: self.file.consumers.clone(),
            relay: relay.map(|(f, _)| f.to_owned()),
            outbox_table: relay.map(|(_, t)| t.to_owned()),
            why_no_relay: format!(
                "{} functions of the template are triggered by a DynamoDB stream ({}): name the relay in {} (`relay: <logical id>`)",
                streamed.len(),
                streamed.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", "),
                self.path.display()
            ),
        })
    }

    fn vars(&self, extra: impl IntoIterator<Item = (&'static str, Value)>) -> HashMap<&str, Value> {
        let mut vars: HashMap<&str, Value> = HashMap::from([("run", Value::String(self.run.clone()))]);
        vars.extend(extra);
        vars
    }

    fn request_of(&self, post: Option<&str>, invoke: Option<&str>, body: &Value, vars: &HashMap<&str, Value>) -> Request {
        let body = fill(body, vars).to_string();
        match (post, invoke) {
            (Some(path), _) => Request::Post { path: fill_str(path, vars), body },
            (None, function) => Request::Invoke { function: function.unwrap_or(&self.file.producer).to_owned(), payload: body },
        }
    }

    /// The `i`-th request.
    pub fn request(&self, i: usize) -> Request {
        let r = &self.file.request;
        let mut vars = self.vars([("i", json!(i))]);
        for (name, list) in &r.vary {
            vars.insert(name.as_str(), list[i % list.len().max(1)].clone());
        }
        self.request_of(r.post.as_deref(), r.invoke.as_deref(), &r.body, &vars)
    }

    /// Undo every n-th accepted request (`None`: the file has no undo).
    pub fn undo_every(&self) -> Option<usize> {
        self.file.undo.as_ref().map(|u| u.every)
    }

    /// The request that undoes the accepted request `id`; `None` without an undo.
    pub fn undo(&self, id: &str) -> Option<Request> {
        let u = self.file.undo.as_ref()?;
        Some(self.request_of(u.post.as_deref(), u.invoke.as_deref(), &u.body, &self.vars([("id", json!(id))])))
    }

    /// The id an accepted `answer` names; `None` when the answer does not count as accepted
    /// (status, `when`) or names no id (a string or a number at `accepted.id`).
    pub fn accepted(&self, answer: &Answer) -> Option<String> {
        let a = &self.file.accepted;
        let status_ok = match answer.status {
            Some(status) if !a.status.is_empty() => a.status.contains(&status),
            _ => answer.ok,
        };
        let when_ok = a.when.iter().all(|(pointer, values)| {
            let found = answer.body.pointer(pointer);
            match values {
                Value::Array(list) => found.is_some_and(|f| list.contains(f)),
                v => found == Some(v),
            }
        });
        if !(status_ok && when_ok) {
            return None;
        }
        match answer.body.pointer(&a.id)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The hot-aggregate scenario's `n` events of ONE aggregate (`proof --hot-aggregate N`):
    /// sequence s takes the file's event `at: s`, `at: middle` at N/2 (at least 3), else
    /// `at: rest`; `metadata.previous` as the library's producer writes it (the latest earlier
    /// sequence per type). `inbox_consumer`: the consumer's `CONSUMER_NAME`.
    ///
    /// # Errors
    /// The file has no `hot_aggregate`.
    pub fn hot_aggregate(&self, n: usize, inbox_consumer: &str) -> crate::Result<HotAggregate> {
        let hot = self.file.hot_aggregate.as_ref().ok_or_else(|| self.no_hot_aggregate())?;
        let aggregate_id = fill_str(&hot.id, &self.vars([]));
        let middle = (n / 2).max(3) as u64;
        let mut previous = serde_json::Map::new();
        let mut events = Vec::with_capacity(n);
        for sequence in 1..=n as u64 {
            let pick = |at: &Value| hot.events.iter().find(|e| &e.at == at);
            let spec = pick(&json!(sequence))
                .or_else(|| (sequence == middle).then(|| pick(&json!("middle"))).flatten())
                .or_else(|| pick(&json!("rest")))
                .ok_or_else(|| crate::Error::invalid(format!("{}: hot_aggregate.events: no `at: rest`", self.path.display())))?;
            let vars = self.vars([("aggregate_id", json!(aggregate_id)), ("sequence", json!(sequence))]);
            let id = format!("{aggregate_id}-{sequence}");
            let mut detail = event_detail(
                &spec.event_type,
                &id,
                (&hot.source, &hot.aggregate_type, &aggregate_id),
                sequence,
                "proof-hot-aggregate",
                fill(&spec.data, &vars),
            );
            if !previous.is_empty() {
                detail["metadata"]["previous"] = Value::Object(previous.clone());
            }
            previous.insert(spec.event_type.clone(), json!(sequence));
            events.push(HotEvent { detail_type: spec.event_type.clone(), detail, outcome: spec.outcome.clone() });
        }
        Ok(HotAggregate {
            inbox_consumer: inbox_consumer.to_owned(),
            consumer: hot.consumer.clone().unwrap_or_else(|| self.file.consumers[0].clone()),
            aggregate_type: hot.aggregate_type.clone(),
            aggregate_id,
            source: hot.source.clone(),
            events,
        })
    }

    /// The error of `--hot-aggregate` on books without a `hot_aggregate`.
    pub fn no_hot_aggregate(&self) -> crate::Error {
        crate::Error::invalid(format!(
            "--hot-aggregate: {} has no `hot_aggregate` (the events of one aggregate of an ordered consumer; docs/local-runtime.md, \"The books file\")",
            self.path.display()
        ))
    }

    /// The consumer of the hot-aggregate scenario (`None` without one).
    pub fn hot_consumer(&self) -> Option<&str> {
        let hot = self.file.hot_aggregate.as_ref()?;
        Some(hot.consumer.as_deref().unwrap_or(&self.file.consumers[0]))
    }

    /// The seed items of each table, as DynamoDB items (by table name).
    fn seed_items(&self, runtime: &Runtime) -> crate::Result<Vec<(String, Item)>> {
        let vars = self.vars([]);
        let mut out = Vec::new();
        for (n, seed) in self.file.seed.iter().enumerate() {
            let table = table_name(runtime, &seed.table).map_err(|e| self.at(&format!("seed[{n}].table"), e))?;
            for (m, item) in seed.items.iter().enumerate() {
                let filled = fill(&Value::Object(item.clone()), &vars);
                let item: Item = serde_dynamo::to_item(filled).map_err(|e| self.at(&format!("seed[{n}].items[{m}]"), e))?;
                out.push((table.clone(), item));
            }
        }
        Ok(out)
    }

    fn at(&self, field: &str, e: impl std::fmt::Display) -> crate::Error {
        crate::Error::invalid(format!("{}: {field}: {e}", self.path.display()))
    }

    /// Puts the seed items (replacing any with the same key).
    ///
    /// # Errors
    /// A table the stack does not have, or the `PutItem` that failed.
    pub async fn seed(&self, runtime: &Runtime, dynamodb: &aws_sdk_dynamodb::Client) -> crate::Result<()> {
        for (table, item) in self.seed_items(runtime)? {
            dynamodb.put_item().table_name(&table).set_item(Some(item)).send().await.map_err(crate::Error::aws(format!("PutItem {table}")))?;
        }
        Ok(())
    }

    /// Puts each seed item whose key no item of its table holds yet (`up` and `invoke`: reference
    /// data for requests sent by hand; existing items are left alone); returns the keys put.
    ///
    /// # Errors
    /// A table the stack does not have, or a `PutItem` that failed for another reason than the
    /// item being there.
    pub async fn seed_missing(&self, runtime: &Runtime, dynamodb: &aws_sdk_dynamodb::Client) -> crate::Result<Vec<String>> {
        let mut put = Vec::new();
        for (table, item) in self.seed_items(runtime)? {
            let Some(spec) = runtime.stack.tables.iter().find(|t| t.name == table) else { continue };
            let Some((hash, _)) = spec.key_schema.iter().find(|(_, kind)| kind == "HASH") else { continue };
            let key = item.get(hash).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
            let answer = dynamodb
                .put_item()
                .table_name(&table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(#k)")
                .expression_attribute_names("#k", hash)
                .send()
                .await;
            match answer {
                Ok(_) => put.push(key),
                Err(e) if e.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => {}
                Err(e) => return Err(crate::Error::aws(format!("PutItem {table}"))(e)),
            }
        }
        Ok(put)
    }

    /// Reads the tables the effects and balances name and judges them against `ledger`.
    ///
    /// # Errors
    /// A table the stack does not have, or a `Scan` that failed (a broken invariant is in the
    /// result, not an error).
    pub async fn check(&self, runtime: &Runtime, dynamodb: &aws_sdk_dynamodb::Client, ledger: &Ledger) -> crate::Result<Checked> {
        let mut effects = Vec::new();
        let mut tables = Vec::new();
        for (n, spec) in self.file.effects.iter().enumerate() {
            let table = table_name(runtime, &spec.table).map_err(|e| self.at(&format!("effects[{n}].table"), e))?;
            effects.push(check::Effect::of(spec, &spec.table.to_string()).map_err(|e| self.at(&format!("effects[{n}].key"), e))?);
            tables.push(table);
        }
        let mut balances = Vec::new();
        for (n, spec) in self.file.balances.iter().enumerate() {
            let table = table_name(runtime, &spec.table).map_err(|e| self.at(&format!("balances[{n}].table"), e))?;
            balances.push((table, check::Balance::of(spec).map_err(|e| self.at(&format!("balances[{n}]"), e))?));
        }
        // One scan per table, of the attributes any check of it reads.
        let mut wanted: HashMap<&str, BTreeSet<String>> = HashMap::new();
        for (effect, table) in effects.iter().zip(&tables) {
            wanted.entry(table).or_default().extend(effect.attributes());
        }
        for (table, balance) in &balances {
            wanted.entry(table).or_default().extend(balance.attributes());
        }
        let mut read: HashMap<&str, Vec<Item>> = HashMap::new();
        for (table, attributes) in wanted {
            let attributes: Vec<&str> = attributes.iter().map(String::as_str).collect();
            read.insert(table, scan(dynamodb, table, &attributes).await?);
        }
        let items: Vec<Vec<Item>> = tables.iter().map(|t| read.get(t.as_str()).cloned().unwrap_or_default()).collect();
        let mut checked = check::check_effects(self.name(), &effects, &items, ledger);
        let seeded = self.seed_items(runtime)?;
        for (table, balance) in &balances {
            let of_table: Vec<Item> = seeded.iter().filter(|(t, _)| t == table).map(|(_, i)| i.clone()).collect();
            checked.invariants.push(balance.check(read.get(table.as_str()).map_or(&[][..], Vec::as_slice), &of_table));
        }
        Ok(checked)
    }
}

/// The name of the table `table` refers to in the runtime's stack.
///
/// # Errors
/// No such table, function or variable.
pub fn table_name(runtime: &Runtime, table: &TableRef) -> crate::Result<String> {
    match table {
        TableRef::Logical(id) => runtime.stack.table(id).map(|t| t.name.clone()).ok_or_else(|| {
            let tables: Vec<&str> = runtime.stack.tables.iter().map(|t| t.logical_id.as_str()).collect();
            crate::Error::invalid(format!("no table {id:?} in the template; its tables: {}", tables.join(", ")))
        }),
        TableRef::Env { function, variable } => env_var(runtime, function, variable),
    }
}

/// The string variable `name` of `function`'s environment, resolved against the runtime's stack.
///
/// # Errors
/// A function the template does not have, or no such variable.
pub fn env_var(runtime: &Runtime, function: &str, name: &str) -> crate::Result<String> {
    let f = runtime.function(function)?;
    let env = runtime.stack.environment(&f.spec)?;
    env.get(name).cloned().ok_or_else(|| crate::Error::invalid(format!("no {name} in {function}'s environment")))
}

/// Every item of `table`, with the `attributes` the verdict reads only (the emulator's cost of a
/// Scan answer grows with every attribute of every item in it).
///
/// # Errors
/// The `Scan` that failed.
pub async fn scan(dynamodb: &aws_sdk_dynamodb::Client, table: &str, attributes: &[&str]) -> crate::Result<Vec<HashMap<String, AttributeValue>>> {
    let mut items = Vec::new();
    let names: Vec<String> = (0..attributes.len()).map(|i| format!("#a{i}")).collect();
    let mut scan = dynamodb.scan().table_name(table).consistent_read(true).projection_expression(names.join(", "));
    for (name, attribute) in names.iter().zip(attributes) {
        scan = scan.expression_attribute_names(name, *attribute);
    }
    let mut pages = scan.into_paginator().items().send();
    while let Some(item) = pages.next().await {
        items.push(item.map_err(crate::Error::aws(format!("Scan {table}")))?);
    }
    Ok(items)
}

/// The string attribute `name` of `item` (empty when absent).
pub(crate) fn text(item: &HashMap<String, AttributeValue>, name: &str) -> String {
    item.get(name).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default()
}

/// A number attribute (0 when absent or not a whole number).
pub(crate) fn number(v: &AttributeValue) -> u64 {
    v.as_n().ok().and_then(|n| n.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests;
