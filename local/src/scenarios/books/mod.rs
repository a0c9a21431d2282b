//! The business tables of the service under `proof` (and what `demo` seeds and reads), behind
//! one small trait: [`SampleBooks`]. The proof's own invariants are generic (outbox ↔ stream ↔
//! bus ↔ inbox, nothing lost, dead letters only for what can never succeed); what counts as "the
//! request took effect exactly once" is the service's, and the service says it here.
//!
//! Two services implement it:
//! - [`orders`]: the order sample (`template.yaml`): stock per SKU, reservations, orders; its
//!   requests go through the HTTP API (`POST /orders`, `POST /orders/{id}/cancel`);
//! - [`customers`]: `examples/my-service`: customers and their welcome mails; its producer has no
//!   HTTP API, so its requests are direct invocations of `RegisterCustomerFunction`.
//!
//! [`detect`] picks the books from the template's functions (the proof needs no flag), and names
//! the books it knows when the template matches none.
//!
//! # Another service
//! A service of your own implements [`SampleBooks`] in a module like [`customers`]:
//! - [`SampleBooks::producer`] / [`SampleBooks::consumer`]: the logical ids of the function that
//!   takes the requests and of the consumer whose inbox the proof checks (its `INBOX_TABLE`, and
//!   the `detail-type`s delivered to it); the shipped fault plans name the sample's producer and
//!   consumer, and `proof` points those faults at these two;
//! - [`SampleBooks::seed`]: what its requests need before the first one (reference data);
//! - [`SampleBooks::request`] / [`SampleBooks::undo`]: the i-th [`Request`] the proof sends (an
//!   HTTP `POST` with an `Idempotency-Key`, or a direct invocation), and the request that undoes
//!   an accepted one (optional: `None` sends none); [`SampleBooks::accepted`] reads the id of
//!   what a request created from its answer;
//! - [`SampleBooks::check`]: read its tables (names from the functions' environment, as
//!   [`orders::OrderBooks::of`] does) and say, per accepted request, whether its effect is there
//!   exactly once, and that no effect exists without its request.
//!
//! Then add it to [`detect`]; `proof::run` runs it under the fault plan like the sample.

pub mod customers;
pub mod orders;
pub mod stock;

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde_json::Value;

use crate::runtime::Runtime;

/// What the proof found in the service's own tables.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Requests whose business item is in the table (e.g. orders committed).
    pub committed: usize,
    /// Of those, how many were undone (e.g. orders cancelled).
    pub undone: usize,
    /// The service's invariants (each request took effect exactly once; no effect without a
    /// request), held or broken, with the first offenders.
    pub invariants: Vec<Invariant>,
}

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

/// The business side of a service the proof runs: how to seed it, what to send, and how to
/// judge its tables. Implemented once per service, e.g. [`orders::OrderBooks`].
pub trait SampleBooks: Send + Sync {
    /// What the service's requests create, for the report (e.g. `orders`, `customers`).
    fn name(&self) -> &'static str;

    /// The logical id of the function that takes the requests.
    fn producer(&self) -> &str;

    /// The logical id of the consumer function whose inbox the proof checks.
    fn consumer(&self) -> &str;

    /// Writes what the requests need before the first one (e.g. stock).
    ///
    /// # Errors
    /// An AWS call that failed.
    fn seed(&self, dynamodb: &aws_sdk_dynamodb::Client) -> impl Future<Output = crate::Result<()>> + Send;

    /// The `i`-th request.
    fn request(&self, i: usize) -> Request;

    /// The id of what a request created, read from its successful answer (an HTTP 2xx body or
    /// the function's response); `None` when the answer does not name one.
    fn accepted(&self, answer: &Value) -> Option<String>;

    /// The request that undoes the accepted request `id`; `None` when the service has none.
    fn undo(&self, id: &str) -> Option<Request>;

    /// Reads the service's tables and checks its invariants against `accepted`, the ids the
    /// requests answered for.
    ///
    /// # Errors
    /// An AWS call that failed (a broken invariant is in the result, not an error).
    fn check(&self, dynamodb: &aws_sdk_dynamodb::Client, accepted: &[String]) -> impl Future<Output = crate::Result<Checked>> + Send;

    /// The hot-aggregate scenario's `n` events (`proof --hot-aggregate N`): ONE aggregate of the
    /// ordered consumer's, its event types repeating, one of them settled by a `Duplicate`
    /// fallback; `None` (the default) when the service's consumer is not ordered.
    fn hot_aggregate(&self, n: usize) -> Option<HotAggregate> {
        let _ = n;
        None
    }
}

/// The events of one aggregate the proof publishes itself, shuffled, as the relay would after a
/// backlog, and what the consumer's inbox must then hold ([`SampleBooks::hot_aggregate`]).
#[derive(Debug, Clone)]
pub struct HotAggregate {
    /// The consumer's name in its inbox rows (`<consumer>#<event id>`, `<consumer>#aggregate#…`).
    pub inbox_consumer: String,
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
    /// The `outcome` its inbox row must record (e.g. `reserved`, `nothing_to_do`).
    pub outcome: &'static str,
}

impl HotEvent {
    /// `detail.metadata.id`.
    pub fn id(&self) -> &str {
        self.detail["metadata"]["id"].as_str().unwrap_or_default()
    }
}

/// The books of a template the proof knows.
#[derive(Debug, Clone)]
pub enum Detected {
    /// The order sample's.
    Orders(orders::OrderBooks),
    /// `examples/my-service`'s.
    Customers(customers::CustomerBooks),
}

/// The books of the runtime's template, chosen by its functions: the order sample's
/// (`CreateOrderFunction` and `ReserveInventoryFunction`) or `examples/my-service`'s
/// (`RegisterCustomerFunction` and `WelcomeMailFunction`).
///
/// # Errors
/// A template with neither pair (the error lists both and the template's functions), or a
/// function without the table variables its books read.
pub fn detect(runtime: &Runtime) -> crate::Result<Detected> {
    let has = |ids: [&str; 2]| ids.iter().all(|id| runtime.functions.contains_key(*id));
    if has(orders::FUNCTIONS) {
        return Ok(Detected::Orders(orders::OrderBooks::of(runtime)?));
    }
    if has(customers::FUNCTIONS) {
        return Ok(Detected::Customers(customers::CustomerBooks::of(runtime)?));
    }
    let mut functions: Vec<&str> = runtime.functions.keys().map(String::as_str).collect();
    functions.sort_unstable();
    Err(crate::Error::invalid(format!(
        "the proof has no books for {}: it knows the order sample's ({}) and examples/my-service's ({}); this template's functions are {}. \
         A service of its own implements SampleBooks (local/src/scenarios/books/mod.rs)",
        runtime.stack.template.path.display(),
        orders::FUNCTIONS.join(" + "),
        customers::FUNCTIONS.join(" + "),
        functions.join(", ")
    )))
}

/// The shipped fault plans name the sample's producer and consumer (`CreateOrderFunction`,
/// `ReserveInventoryFunction`). For a template with another service's books (its function ids
/// `functions`), the pairs `(the sample's function, this service's)` that play the same part, so
/// `proof` can point those faults at this service's functions; empty for the sample.
pub fn stand_ins(functions: &[String]) -> Vec<(&'static str, &'static str)> {
    let has = |ids: [&str; 2]| ids.iter().all(|id| functions.iter().any(|f| f == id));
    if !has(orders::FUNCTIONS) && has(customers::FUNCTIONS) {
        orders::FUNCTIONS.into_iter().zip(customers::FUNCTIONS).collect()
    } else {
        Vec::new()
    }
}

/// The string variable `name` of `function`'s environment, resolved against the runtime's stack.
///
/// # Errors
/// A function the template does not have, or no such variable.
pub(crate) fn env_var(runtime: &Runtime, function: &str, name: &str) -> crate::Result<String> {
    let f = runtime.function(function)?;
    let env = runtime.stack.environment(&f.spec)?;
    env.get(name).cloned().ok_or_else(|| crate::Error::invalid(format!("no {name} in {function}'s environment")))
}

/// One invariant, held or broken.
#[derive(Debug, Clone, Serialize)]
pub struct Invariant {
    /// Its name.
    pub name: &'static str,
    /// Whether it held.
    pub held: bool,
    /// What was found (figures; the first offenders when broken).
    pub detail: String,
}

/// Every item of `table`, with the `attributes` the verdict reads only (the emulator's cost of a
/// Scan answer grows with every attribute of every item in it).
pub(crate) async fn scan(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    attributes: &[&str],
) -> crate::Result<Vec<HashMap<String, AttributeValue>>> {
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
mod tests {
    use super::*;

    #[test]
    fn the_sample_plans_faults_stand_in_for_my_services_functions_only_on_its_template() {
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let my_service = ids(&["RegisterCustomerFunction", "WelcomeMailFunction", "Relay/RelayFunction"]);
        assert_eq!(
            stand_ins(&my_service),
            [("CreateOrderFunction", "RegisterCustomerFunction"), ("ReserveInventoryFunction", "WelcomeMailFunction")]
        );
        assert!(stand_ins(&ids(&["CreateOrderFunction", "ReserveInventoryFunction", "Relay/RelayFunction"])).is_empty());
        assert!(stand_ins(&ids(&["SomethingElse"])).is_empty());
    }
}
