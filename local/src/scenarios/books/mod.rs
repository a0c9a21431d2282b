//! The business tables of the service under `proof` (and what `demo` seeds), behind one small
//! trait: [`SampleBooks`]. The proof's own invariants are generic (outbox ↔ stream ↔ bus ↔
//! inbox, nothing lost, dead letters only for what can never succeed); what counts as "the
//! request took effect exactly once" is the service's, and the service says it here.
//!
//! The order sample implements it in [`orders`] (stock per SKU, reservations, orders).
//!
//! # Another service
//! A service of your own (e.g. `examples/my-service`) implements [`SampleBooks`] in a module
//! like [`orders`]:
//! - [`SampleBooks::consumer`]: the logical id of the consumer function whose inbox the proof
//!   checks (its `INBOX_TABLE`, and the `detail-type`s of its rules);
//! - [`SampleBooks::seed`]: what its requests need before the first one (reference data);
//! - [`SampleBooks::request`] / [`SampleBooks::undo`]: the i-th request the proof sends
//!   (`POST` path and JSON body; each gets an `Idempotency-Key`), and the request that undoes
//!   an accepted one (optional: `None` sends none);
//! - [`SampleBooks::check`]: read its tables (names from the functions' environment, as
//!   [`orders::OrderBooks::of`] does) and say, per accepted request, whether its effect is there
//!   exactly once, and that no effect exists without its request.
//!
//! `proof::run` then runs it under the fault plan like the sample.

pub mod orders;

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;

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

/// The business side of a service the proof runs: how to seed it, what to send, and how to
/// judge its tables. Implemented once per service, e.g. [`orders::OrderBooks`].
pub trait SampleBooks: Send + Sync {
    /// The logical id of the consumer function whose inbox the proof checks.
    fn consumer(&self) -> &str;

    /// Writes what the requests need before the first one (e.g. stock).
    ///
    /// # Errors
    /// An AWS call that failed.
    fn seed(&self, dynamodb: &aws_sdk_dynamodb::Client) -> impl Future<Output = crate::Result<()>> + Send;

    /// The `i`-th request: (`POST` path, JSON body).
    fn request(&self, i: usize) -> (String, String);

    /// The request that undoes the accepted request `id` (its id as the API answered it in
    /// `order_id`/`id`): (`POST` path, JSON body); `None` when the service has none.
    fn undo(&self, id: &str) -> Option<(String, String)>;

    /// Reads the service's tables and checks its invariants against `accepted`, the ids the API
    /// answered 2xx for.
    ///
    /// # Errors
    /// An AWS call that failed (a broken invariant is in the result, not an error).
    fn check(&self, dynamodb: &aws_sdk_dynamodb::Client, accepted: &[String]) -> impl Future<Output = crate::Result<Checked>> + Send;
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
