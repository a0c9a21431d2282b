//! The books' verdict on items already read: per accepted request, its effects exactly once
//! (each effect's items, as many as the file says, with the attribute values it says, in the
//! state accepted or undone); no effect without its request (orphans); and the balances. Pure:
//! the proof reads the tables ([`super::Books::check`]) and calls these.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::Value;

use super::file::{BalanceSpec, EffectSpec};
use super::pattern::KeyPattern;
use super::Invariant;

/// A DynamoDB item as the SDK reads it.
pub type Item = HashMap<String, AttributeValue>;

/// What the proof sent and was answered: the facts the tables are judged against.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// The ids the accepted answers named.
    pub accepted: Vec<String>,
    /// Per id an undo was sent for: whether it got a final answer (`false`: every attempt
    /// failed, so either state is right).
    pub undo: HashMap<String, bool>,
    /// Ids whose effects come without a request of the proof's (the hot aggregate's).
    pub excused: HashSet<String>,
}

/// The books' verdict.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Requests that committed: accepted, or found in the origin effect.
    pub committed: usize,
    /// Of those, how many are undone.
    pub undone: usize,
    /// Exactly once, no orphans, then each balance.
    pub invariants: Vec<Invariant>,
}

/// What an effect must show in one state.
#[derive(Debug, Clone, PartialEq)]
struct Expect {
    items: usize,
    attributes: BTreeMap<String, Vec<Value>>,
}

/// An effect of the file, its patterns parsed.
#[derive(Debug, Clone)]
pub struct Effect {
    /// For the report.
    pub name: String,
    key: Vec<(String, KeyPattern)>,
    origin: bool,
    accepted: Expect,
    undone: Expect,
}

fn allowed(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(list) => list.clone(),
        v => vec![v.clone()],
    }
}

fn allowed_map(map: &BTreeMap<String, Value>) -> BTreeMap<String, Vec<Value>> {
    map.iter().map(|(k, v)| (k.clone(), allowed(v))).collect()
}

fn patterns(key: &BTreeMap<String, String>, placeholder: &str) -> Result<Vec<(String, KeyPattern)>, String> {
    key.iter().map(|(attribute, text)| Ok((attribute.clone(), KeyPattern::parse(text, placeholder)?))).collect()
}

/// The value captured by `key`'s patterns from `item`: `None` when a pattern does not match;
/// `Some("")` when they match and none captures.
fn captured(key: &[(String, KeyPattern)], item: &Item) -> Option<String> {
    let mut id = String::new();
    for (attribute, pattern) in key {
        let value = item.get(attribute).and_then(|v| v.as_s().ok())?;
        if let Some(c) = pattern.matches(value)? {
            id = c.to_owned();
        }
    }
    Some(id)
}

/// Whether `value` is one of `allowed` (strings to S, numbers to N compared as numbers,
/// booleans to BOOL).
pub fn value_is(value: Option<&AttributeValue>, allowed: &[Value]) -> bool {
    allowed.iter().any(|a| match (value, a) {
        (Some(AttributeValue::S(s)), Value::String(t)) => s == t,
        (Some(AttributeValue::N(n)), Value::Number(m)) => number_of(n).zip(m.as_f64()).is_some_and(|(x, y)| same(x, y)),
        (Some(AttributeValue::Bool(b)), Value::Bool(c)) => b == c,
        _ => false,
    })
}

fn number_of(n: &str) -> Option<f64> {
    n.trim().parse().ok()
}

/// Numbers compared as 64-bit floats, to a relative 1e-9 (sums of decimal amounts).
fn same(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
}

fn describe(value: Option<&AttributeValue>) -> String {
    match value {
        None => "absent".into(),
        Some(AttributeValue::S(s)) => s.clone(),
        Some(AttributeValue::N(n)) => n.clone(),
        Some(AttributeValue::Bool(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
    }
}

fn list(values: &[Value]) -> String {
    values.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect::<Vec<_>>().join("|")
}

impl Effect {
    /// The effect `spec` of the file (`n`-th, for its default name `table`).
    ///
    /// # Errors
    /// A key pattern the file check should have refused.
    pub fn of(spec: &EffectSpec, table: &str) -> Result<Self, String> {
        let accepted = Expect { items: spec.items, attributes: allowed_map(&spec.attributes) };
        let undone = match &spec.undone {
            Some(u) => Expect {
                items: u.items.unwrap_or(accepted.items),
                attributes: u.attributes.as_ref().map_or_else(|| accepted.attributes.clone(), allowed_map),
            },
            None => accepted.clone(),
        };
        Ok(Self {
            name: spec.name.clone().unwrap_or_else(|| table.to_owned()),
            key: patterns(&spec.key, "id")?,
            origin: spec.origin,
            accepted,
            undone,
        })
    }

    /// The attributes a scan must read for this effect.
    pub fn attributes(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self.key.iter().map(|(a, _)| a.clone()).collect();
        names.extend(self.accepted.attributes.keys().cloned());
        names.extend(self.undone.attributes.keys().cloned());
        names
    }

    /// The request id `item` belongs to, when its key matches.
    pub fn id_of(&self, item: &Item) -> Option<String> {
        captured(&self.key, item).filter(|id| !id.is_empty())
    }

    /// What is wrong with `items` for `expect`; `None` when they are right.
    fn wrong(expect: &Expect, items: &[&Item]) -> Option<String> {
        if items.len() != expect.items {
            return Some(format!("{} items (expected {})", items.len(), expect.items));
        }
        for item in items {
            for (attribute, values) in &expect.attributes {
                if !value_is(item.get(attribute), values) {
                    return Some(format!("{attribute} {} (expected {})", describe(item.get(attribute)), list(values)));
                }
            }
        }
        None
    }
}

/// The state a request's effects must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Accepted,
    Undone,
    /// Its undo got no final answer: either.
    Either,
}

/// Judges `effects` (each with the items of its table, `items[n]` for `effects[n]`) against
/// `ledger`: the invariants **every accepted request took effect exactly once** and **no effect
/// without its request**.
///
/// A request is committed when it was accepted, or when the origin effect (the producer's own
/// record) holds it. Its state: undone when an undo was answered for it; with an origin effect
/// whose undone attributes differ from its accepted ones, the origin says, and an origin that
/// disagrees with what was answered is a fault. Excused ids (the hot aggregate's) are judged by
/// their own scenario, not here.
pub fn check_effects(name: &str, effects: &[Effect], items: &[Vec<Item>], ledger: &Ledger) -> Checked {
    let grouped: Vec<HashMap<String, Vec<&Item>>> = effects
        .iter()
        .zip(items)
        .map(|(effect, items)| {
            let mut by_id: HashMap<String, Vec<&Item>> = HashMap::new();
            for item in items {
                if let Some(id) = effect.id_of(item) {
                    by_id.entry(id).or_default().push(item);
                }
            }
            by_id
        })
        .collect();
    let origin = effects.iter().position(|e| e.origin);
    let mut committed: BTreeSet<&str> = ledger.accepted.iter().map(String::as_str).collect();
    if let Some(o) = origin {
        committed.extend(grouped[o].keys().map(String::as_str));
    }
    let committed: Vec<&str> = committed.into_iter().filter(|id| !ledger.excused.contains(*id)).collect();
    let mut wrong = Vec::new();
    let mut undone = 0;
    for id in &committed {
        let answered = match ledger.undo.get(*id) {
            None => State::Accepted,
            Some(true) => State::Undone,
            Some(false) => State::Either,
        };
        let told = origin.filter(|o| effects[*o].undone != effects[*o].accepted).and_then(|o| grouped[o].get(*id).map(|items| (o, items))).and_then(
            |(o, items)| {
                let e = &effects[o];
                if Effect::wrong(&e.undone, items).is_none() {
                    Some(State::Undone)
                } else if Effect::wrong(&e.accepted, items).is_none() {
                    Some(State::Accepted)
                } else {
                    None
                }
            },
        );
        let state = match (answered, told) {
            (State::Either, Some(s)) => s,
            (a, Some(t)) if a != t => {
                wrong.push(format!(
                    "{id}: {} shows it {} but its undo {}",
                    effects[origin.unwrap_or_default()].name,
                    if t == State::Undone { "undone" } else { "not undone" },
                    if a == State::Undone { "was answered" } else { "was never sent" }
                ));
                t
            }
            (a, _) => a,
        };
        if state == State::Undone {
            undone += 1;
        }
        for (effect, by_id) in effects.iter().zip(&grouped) {
            let found: &[&Item] = by_id.get(*id).map_or(&[], Vec::as_slice);
            let problem = match state {
                State::Accepted => Effect::wrong(&effect.accepted, found),
                State::Undone => Effect::wrong(&effect.undone, found),
                State::Either => Effect::wrong(&effect.accepted, found).and(Effect::wrong(&effect.undone, found)),
            };
            if let Some(problem) = problem {
                wrong.push(format!("{id}: {}: {problem}", effect.name));
            }
        }
    }
    let committed_set: HashSet<&str> = committed.iter().copied().collect();
    let mut orphans = Vec::new();
    for (effect, by_id) in effects.iter().zip(&grouped) {
        let mut ids: Vec<&String> = by_id.keys().filter(|id| !committed_set.contains(id.as_str()) && !ledger.excused.contains(id.as_str())).collect();
        ids.sort();
        orphans.extend(ids.into_iter().map(|id| format!("{}: {id}", effect.name)));
    }
    let first = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    let unanswered = committed.len() - committed.iter().filter(|id| ledger.accepted.iter().any(|a| a == *id)).count();
    let per_effect: Vec<String> =
        effects.iter().zip(&grouped).map(|(e, g)| format!("{} {}", g.values().map(Vec::len).sum::<usize>(), e.name)).collect();
    Checked {
        committed: committed.len(),
        undone,
        invariants: vec![
            Invariant {
                name: "every accepted request took effect exactly once".into(),
                held: wrong.is_empty(),
                detail: format!(
                    "{} {name} committed ({} accepted, {unanswered} committed without an accepted answer), {undone} undone; items: {}; {} wrong [{}]",
                    committed.len(),
                    ledger.accepted.len(),
                    per_effect.join(", "),
                    wrong.len(),
                    first(&wrong)
                ),
            },
            Invariant {
                name: "no effect without its request".into(),
                held: orphans.is_empty(),
                detail: format!("{} effects of no committed request [{}]", orphans.len(), first(&orphans)),
            },
        ],
    }
}

/// A balance of the file, its patterns parsed.
#[derive(Debug, Clone)]
pub struct Balance {
    /// The invariant's name.
    pub name: String,
    totals: Vec<(String, KeyPattern)>,
    /// The totals' key as the file writes it, for the report (`pk SKU#{group}`).
    totals_text: String,
    sum: Vec<String>,
    parts: Option<Parts>,
}

#[derive(Debug, Clone)]
struct Parts {
    key: Vec<(String, KeyPattern)>,
    filter: BTreeMap<String, Vec<Value>>,
    amounts: String,
}

impl Balance {
    /// The balance `spec` of the file.
    ///
    /// # Errors
    /// A key pattern the file check should have refused.
    pub fn of(spec: &BalanceSpec) -> Result<Self, String> {
        let parts = match &spec.parts {
            Some(p) => Some(Parts { key: patterns(&p.key, "id")?, filter: allowed_map(&p.filter), amounts: p.amounts.clone() }),
            None => None,
        };
        let totals_text = spec.totals.key.iter().map(|(a, p)| format!("{a} {p}")).collect::<Vec<_>>().join(", ");
        Ok(Self { name: spec.name.clone(), totals: patterns(&spec.totals.key, "group")?, totals_text, sum: spec.totals.sum.clone(), parts })
    }

    /// The attributes a scan must read for this balance.
    pub fn attributes(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self.totals.iter().map(|(a, _)| a.clone()).collect();
        names.extend(self.sum.iter().cloned());
        if let Some(p) = &self.parts {
            names.extend(p.key.iter().map(|(a, _)| a.clone()));
            names.extend(p.filter.keys().cloned());
            names.insert(p.amounts.clone());
        }
        names
    }

    /// Per group, the sum of the total attributes of the items of `items` that hold totals.
    fn totals(&self, items: &[Item]) -> BTreeMap<String, f64> {
        let mut totals = BTreeMap::new();
        for item in items {
            if let Some(group) = captured(&self.totals, item).filter(|g| !g.is_empty()) {
                let sum: f64 = self.sum.iter().filter_map(|a| item.get(a).and_then(|v| v.as_n().ok()).and_then(|n| number_of(n))).sum();
                *totals.entry(group).or_insert(0.0) += sum;
            }
        }
        totals
    }

    /// Judges the table's `items`; `seeded`: the seed items of the same table.
    pub fn check(&self, items: &[Item], seeded: &[Item]) -> Invariant {
        let actual = self.totals(items);
        let (expected, whence) = match &self.parts {
            None => (self.totals(seeded), "as seeded"),
            Some(parts) => {
                let mut expected: BTreeMap<String, f64> = BTreeMap::new();
                for item in items {
                    if captured(&parts.key, item).is_none() || !parts.filter.iter().all(|(a, values)| value_is(item.get(a), values)) {
                        continue;
                    }
                    if let Some(map) = item.get(&parts.amounts).and_then(|v| v.as_m().ok()) {
                        for (group, n) in map {
                            *expected.entry(group.clone()).or_insert(0.0) += n.as_n().ok().and_then(|n| number_of(n)).unwrap_or(0.0);
                        }
                    }
                }
                (expected, "as the parts add up")
            }
        };
        // Seeded: the seeded groups; parts: every group either side knows (a total without
        // parts must be 0).
        let groups: BTreeSet<&String> = if self.parts.is_none() { expected.keys().collect() } else { actual.keys().chain(expected.keys()).collect() };
        let off: Vec<String> = groups
            .iter()
            .filter_map(|g| {
                let (a, e) = (actual.get(*g).copied(), expected.get(*g).copied().unwrap_or(0.0));
                match a {
                    Some(a) if same(a, e) => None,
                    Some(a) => Some(format!("{g}: {a} (expected {e})")),
                    None if self.parts.is_some() && same(e, 0.0) => None,
                    None => Some(format!("{g}: no item (expected {e})")),
                }
            })
            .collect();
        Invariant {
            name: self.name.clone(),
            held: off.is_empty(),
            detail: format!(
                "{} groups ({}), {} per group {whence}; {} off [{}]",
                groups.len(),
                self.totals_text,
                self.sum.join(" + "),
                off.len(),
                off.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            ),
        }
    }
}
