//! The fault plan: what to inject, where, how often and when — a small TOML file
//! (`--faults plan.toml`) or built in code by tests.
//!
//! ```toml
//! seed = 7                      # the decisions repeat for the same seed and the same calls
//!
//! [[fault]]
//! kind = "error"                # error | put_events_entries | unprocessed_keys | latency | lost_answer | crash
//! op = "dynamodb:TransactWriteItems"   # service:Operation, service:* or *
//! function = "consumer"       # only calls from this function: a role or a logical id (optional)
//! code = "ThrottlingException"  # for error / put_events_entries
//! rate = 0.05                   # share of matching calls (entries) hit, 0..=1
//! from_s = 10                   # outage window, seconds since the plan was armed (optional)
//! until_s = 25
//! limit = 50                    # at most this many injections (optional)
//! ```
//!
//! Operations are named `service:Operation` as in IAM: `dynamodb`, `streams` (DynamoDB
//! Streams), `events` (EventBridge), `sqs`.
//!
//! A fault's `function` is a function's logical id, or a role the service's books file resolves
//! ([`Roles`], [`FaultPlan::resolve_roles`]): `producer`, `consumer` (each of the books'
//! consumers) or `relay`; a TTL sweep's `table` may be the role `outbox` (the table whose stream
//! the relay reads). The shipped plans name roles only, so they apply to any service.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Why a plan could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The text is not a plan.
    #[error("{path}: not a fault plan: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A fault is inconsistent.
    #[error("fault #{index} ({kind:?} on {op}): {reason}")]
    Invalid {
        /// 1-based position in the plan.
        index: usize,
        /// Its kind.
        kind: FaultKind,
        /// Its operation.
        op: String,
        /// Why.
        reason: String,
    },
}

/// A whole plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// Seed of the random decisions (`rate`).
    #[serde(default)]
    pub seed: u64,
    /// The faults, checked in order; the first that fires decides a call.
    #[serde(default, rename = "fault")]
    pub faults: Vec<Fault>,
    /// DynamoDB TTL deletion sweeps.
    #[serde(default)]
    pub ttl: Vec<TtlSweep>,
    /// Redrive the dead-letter queues once after the run goes quiet (`proof`), as an operator
    /// would after the faults.
    #[serde(default)]
    pub redrive: bool,
    /// `proof`: send the cancellations only once the orders' effects went quiet, so no
    /// cancellation races its order's reservation (the race the release-in-one-transaction fix
    /// of issue 9 closes; until it is merged, a plan that keeps the race breaks "exactly once").
    #[serde(default)]
    pub cancel_after_quiet: bool,
}

/// What a fault does to a call it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Answer with the error `code` (HTTP 400/500/503 with the service's wire body); the call
    /// never reaches the emulator.
    Error,
    /// `PutEvents` answers 200 with a share `rate` of its entries failed with `code`
    /// (`InternalFailure` or `ThrottlingException`); the other entries are published.
    PutEventsEntries,
    /// `BatchGetItem` answers 200 with every requested key in `UnprocessedKeys` and no item, as
    /// DynamoDB does when the keys' partitions exceed their throughput; the call never reaches
    /// the emulator (which returns unprocessed keys only past 16 MB of answer).
    UnprocessedKeys,
    /// Wait `ms` before forwarding (a stall when longer than the caller's timeout).
    Latency,
    /// Forward the call (it takes effect), then answer HTTP 500 instead of its answer.
    LostAnswer,
    /// Forward the call (it takes effect), then kill the calling instance before it sees the
    /// answer — when the instance has made at least `after_calls` AWS calls.
    Crash,
}

/// One fault.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// What it does.
    pub kind: FaultKind,
    /// `service:Operation`, `service:*` or `*`.
    #[serde(default = "any")]
    pub op: String,
    /// Only calls of this function's instances: a logical id, or a role (`producer`,
    /// `consumer`, `relay`: [`FaultPlan::resolve_roles`]); all when absent.
    #[serde(default)]
    pub function: Option<String>,
    /// Error code ([`ErrorCode`] names; `error` and `put_events_entries`).
    #[serde(default)]
    pub code: Option<String>,
    /// Share of matching calls (or `PutEvents` entries) hit, `0..=1`.
    #[serde(default = "always")]
    pub rate: f64,
    /// Start of the window, seconds after the plan is armed.
    #[serde(default)]
    pub from_s: Option<f64>,
    /// End of the window, seconds after the plan is armed.
    #[serde(default)]
    pub until_s: Option<f64>,
    /// Most injections of this fault.
    #[serde(default)]
    pub limit: Option<u64>,
    /// `latency`: milliseconds added.
    #[serde(default)]
    pub ms: Option<u64>,
    /// `crash`: the instance's AWS calls (this one included) before it can crash.
    #[serde(default)]
    pub after_calls: Option<u64>,
}

fn any() -> String {
    "*".into()
}

fn always() -> f64 {
    1.0
}

impl Fault {
    /// A fault of `kind` on `op`, every call, no window, no limit.
    pub fn new(kind: FaultKind, op: &str) -> Self {
        Self { kind, op: op.into(), function: None, code: None, rate: 1.0, from_s: None, until_s: None, limit: None, ms: None, after_calls: None }
    }

    /// Whether `op` (`service:Operation`) is one this fault applies to.
    pub fn matches_op(&self, op: &str) -> bool {
        if self.op == "*" || self.op == op {
            return true;
        }
        match self.op.strip_suffix(":*") {
            Some(service) => op.split_once(':').is_some_and(|(s, _)| s == service),
            None => false,
        }
    }

    /// Whether `at_s` (seconds since armed) is inside the window.
    pub fn in_window(&self, at_s: f64) -> bool {
        self.from_s.is_none_or(|f| at_s >= f) && self.until_s.is_none_or(|u| at_s < u)
    }

    /// A short label: `kind code op [function]`, the key of the injected-faults table.
    pub fn label(&self) -> String {
        let kind = serde_json::to_value(self.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        let mut label = format!("{kind} {}", self.op);
        if let Some(code) = &self.code {
            label = format!("{kind} {code} {}", self.op);
        }
        if let Some(f) = &self.function {
            label.push_str(&format!(" ({f})"));
        }
        label
    }
}

/// A TTL deletion sweep: every `every_s` seconds, delete the items of `table` (logical id)
/// whose TTL attribute is before now + `advance_s` (the clock moved forward, so a short run
/// sees deletions: with the 7-day retention, `advance_s = 604740` deletes items older than a
/// minute), as DynamoDB's TTL process does: the stream carries a `REMOVE` record with
/// `userIdentity` `{type: Service, principalId: dynamodb.amazonaws.com}`.
/// Source: <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/time-to-live-ttl-streams.html>.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TtlSweep {
    /// The table's logical id, e.g. `OutboxTable`, or the role `outbox`.
    pub table: String,
    /// Seconds added to the clock when deciding what expired.
    #[serde(default)]
    pub advance_s: u64,
    /// Seconds between sweeps.
    #[serde(default = "ten")]
    pub every_s: f64,
    /// Start, seconds after the plan is armed.
    #[serde(default)]
    pub from_s: f64,
    /// The TTL attribute (epoch seconds).
    #[serde(default = "expires_at")]
    pub attribute: String,
}

fn expires_at() -> String {
    "expires_at".into()
}

fn ten() -> f64 {
    10.0
}

/// The error codes a fault can answer with, and their wire form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// HTTP 500 `InternalServerError` (EventBridge: `InternalException`).
    InternalServerError,
    /// HTTP 503 `ServiceUnavailable`.
    ServiceUnavailable,
    /// HTTP 400 `ThrottlingException`.
    ThrottlingException,
    /// HTTP 400 `ProvisionedThroughputExceededException`.
    ProvisionedThroughputExceeded,
    /// HTTP 400 `RequestLimitExceeded`.
    RequestLimitExceeded,
    /// `TransactWriteItems`: HTTP 400 `TransactionCanceledException` with a
    /// `TransactionConflict` cancellation reason; other operations: `TransactionConflictException`.
    TransactionConflict,
    /// `PutEvents` entry code `InternalFailure`.
    InternalFailure,
}

impl ErrorCode {
    /// The code named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "InternalServerError" | "InternalException" | "500" => Self::InternalServerError,
            "ServiceUnavailable" | "503" => Self::ServiceUnavailable,
            "ThrottlingException" => Self::ThrottlingException,
            "ProvisionedThroughputExceededException" => Self::ProvisionedThroughputExceeded,
            "RequestLimitExceeded" => Self::RequestLimitExceeded,
            "TransactionConflict" | "TransactionCanceledException" => Self::TransactionConflict,
            "InternalFailure" => Self::InternalFailure,
            _ => return None,
        })
    }
}

impl FaultPlan {
    /// Reads and checks the plan in `path` (TOML).
    ///
    /// # Errors
    /// [`PlanError`].
    pub fn load(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|source| PlanError::Read { path: path.display().to_string(), source })?;
        Self::parse(&text).map_err(|e| match e {
            PlanError::Parse { reason, .. } => PlanError::Parse { path: path.display().to_string(), reason },
            other => other,
        })
    }

    /// Parses and checks a plan (TOML text).
    ///
    /// # Errors
    /// [`PlanError`].
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        let plan: Self = toml::from_str(text).map_err(|e| PlanError::Parse { path: "(text)".into(), reason: e.to_string() })?;
        plan.check()?;
        Ok(plan)
    }

    /// Checks each fault: a known code where one is needed, a rate in `0..=1`, `ms` for latency.
    ///
    /// # Errors
    /// [`PlanError::Invalid`].
    pub fn check(&self) -> Result<(), PlanError> {
        for (i, f) in self.faults.iter().enumerate() {
            let bad = |reason: &str| PlanError::Invalid { index: i + 1, kind: f.kind, op: f.op.clone(), reason: reason.into() };
            if !(0.0..=1.0).contains(&f.rate) {
                return Err(bad("rate must be between 0 and 1"));
            }
            if !f.op.contains(':') && f.op != "*" {
                return Err(bad("op must be service:Operation, service:* or *"));
            }
            match f.kind {
                FaultKind::Error => match f.code.as_deref().map(ErrorCode::parse) {
                    Some(Some(ErrorCode::InternalFailure)) => return Err(bad("InternalFailure is a PutEvents entry code (kind put_events_entries)")),
                    Some(Some(_)) => {}
                    _ => return Err(bad("needs a code: InternalServerError, ServiceUnavailable, ThrottlingException, ProvisionedThroughputExceededException, RequestLimitExceeded or TransactionConflict")),
                },
                FaultKind::PutEventsEntries => {
                    if !matches!(f.code.as_deref(), Some("InternalFailure" | "ThrottlingException")) {
                        return Err(bad("needs code InternalFailure or ThrottlingException"));
                    }
                    if f.op != "events:PutEvents" {
                        return Err(bad("applies to op events:PutEvents only"));
                    }
                }
                FaultKind::UnprocessedKeys if f.op != "dynamodb:BatchGetItem" => return Err(bad("applies to op dynamodb:BatchGetItem only")),
                FaultKind::Latency if f.ms.is_none() => return Err(bad("needs ms")),
                _ => {}
            }
        }
        Ok(())
    }
}

/// What the roles a plan may name stand for on a template: from the service's books file
/// (`crate::scenarios::books::Books::roles`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roles {
    /// `producer`: the function that takes the requests.
    pub producer: String,
    /// `consumer`: each of the consumers whose inbox the proof checks.
    pub consumers: Vec<String>,
    /// `relay`: the function the outbox table's stream triggers (`None`: not known).
    pub relay: Option<String>,
    /// `outbox` (a TTL sweep's table): the table whose stream the relay reads.
    pub outbox_table: Option<String>,
    /// Why `relay` is not known, for the error.
    pub why_no_relay: String,
}

/// The function roles a fault may name.
pub const FUNCTION_ROLES: [&str; 3] = ["producer", "consumer", "relay"];

impl FaultPlan {
    /// Replaces the roles the plan names by what they stand for in `roles`: a fault of role
    /// `consumer` becomes one fault per consumer (each with the fault's rate and limit); returns
    /// one line per role resolved, for the report (`producer → CreateOrder…`).
    ///
    /// # Errors
    /// A plan that names `relay` or the table `outbox` when the relay is not known.
    pub fn resolve_roles(&mut self, roles: &Roles) -> Result<Vec<String>, String> {
        let mut resolved = std::collections::BTreeMap::<String, usize>::new();
        let mut faults = Vec::with_capacity(self.faults.len());
        for fault in self.faults.drain(..) {
            let targets: Vec<String> = match fault.function.as_deref() {
                Some("producer") => vec![roles.producer.clone()],
                Some("consumer") => roles.consumers.clone(),
                Some("relay") => vec![roles.relay.clone().ok_or_else(|| format!("the plan names the role relay, but {}", roles.why_no_relay))?],
                _ => {
                    faults.push(fault);
                    continue;
                }
            };
            let role = fault.function.clone().unwrap_or_default();
            *resolved.entry(format!("{role} → {}", targets.join(", "))).or_default() += 1;
            faults.extend(targets.into_iter().map(|f| Fault { function: Some(f), ..fault.clone() }));
        }
        self.faults = faults;
        for ttl in self.ttl.iter_mut().filter(|t| t.table == "outbox") {
            let table =
                roles.outbox_table.clone().ok_or_else(|| format!("the plan's TTL sweep names the table outbox, but {}", roles.why_no_relay))?;
            *resolved.entry(format!("outbox → {table}")).or_default() += 1;
            ttl.table = table;
        }
        Ok(resolved.into_iter().map(|(line, n)| format!("{line} ({n} in the plan)")).collect())
    }
}

impl From<PlanError> for crate::Error {
    fn from(e: PlanError) -> Self {
        Self::Part(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_from_toml_with_defaults() {
        let plan = FaultPlan::parse(
            "seed = 3\nredrive = true\n[[fault]]\nkind = \"error\"\nop = \"dynamodb:TransactWriteItems\"\ncode = \"ThrottlingException\"\nrate = 0.1\n\
             [[fault]]\nkind = \"latency\"\nop = \"events:*\"\nms = 50\nfrom_s = 1\nuntil_s = 2\n[[ttl]]\ntable = \"OutboxTable\"\nadvance_s = 1000000\n",
        )
        .expect("a plan");
        assert_eq!(plan.seed, 3);
        assert!(plan.redrive);
        assert_eq!(plan.faults.len(), 2);
        assert_eq!(plan.faults[0].code.as_deref(), Some("ThrottlingException"));
        assert!(plan.faults[1].matches_op("events:PutEvents") && !plan.faults[1].matches_op("sqs:SendMessage"));
        assert!(!plan.faults[1].in_window(0.5) && plan.faults[1].in_window(1.0) && !plan.faults[1].in_window(2.0));
        assert_eq!(plan.ttl[0].every_s, 10.0);
    }

    /// The shipped plans apply to any service: they name roles, never a service's function or
    /// table.
    #[test]
    fn the_shipped_plans_name_roles_only() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        for name in ["default", "ci", "outage", "outage-5min", "consumer-outage"] {
            let plan = FaultPlan::load(&dir.join(format!("faults/{name}.toml"))).expect("a shipped plan");
            for f in plan.faults.iter().filter_map(|f| f.function.as_deref()) {
                assert!(FUNCTION_ROLES.contains(&f), "{name}.toml names function {f}, not a role of {FUNCTION_ROLES:?}");
            }
            for ttl in &plan.ttl {
                assert_eq!(ttl.table, "outbox", "{name}.toml sweeps table {}, not the role outbox", ttl.table);
            }
        }
    }

    #[test]
    fn roles_resolve_to_the_books_functions_and_a_logical_id_stays() {
        let mut plan = FaultPlan::parse(
            "[[fault]]\nkind = \"crash\"\nfunction = \"consumer\"\nlimit = 2\n[[fault]]\nkind = \"lost_answer\"\nfunction = \"producer\"\n\
             [[fault]]\nkind = \"lost_answer\"\nfunction = \"relay\"\n[[fault]]\nkind = \"lost_answer\"\nfunction = \"SomeFunction\"\n\
             [[ttl]]\ntable = \"outbox\"\n",
        )
        .expect("a plan");
        let roles = Roles {
            producer: "P".into(),
            consumers: vec!["C1".into(), "C2".into()],
            relay: Some("R/RelayFunction".into()),
            outbox_table: Some("Outbox".into()),
            why_no_relay: String::new(),
        };
        let lines = plan.clone().resolve_roles(&roles).expect("resolves");
        assert!(lines.contains(&"consumer → C1, C2 (1 in the plan)".to_owned()), "{lines:?}");
        plan.resolve_roles(&roles).expect("resolves");
        let functions: Vec<&str> = plan.faults.iter().filter_map(|f| f.function.as_deref()).collect();
        assert_eq!(functions, ["C1", "C2", "P", "R/RelayFunction", "SomeFunction"]);
        assert_eq!(plan.faults[1].limit, Some(2), "each copy keeps the fault's settings");
        assert_eq!(plan.ttl[0].table, "Outbox");
        let mut relayless = FaultPlan::parse("[[fault]]\nkind = \"lost_answer\"\nfunction = \"relay\"\n").expect("a plan");
        let err = relayless.resolve_roles(&Roles { why_no_relay: "2 functions …".into(), ..Roles::default() }).expect_err("no relay");
        assert!(err.contains("names the role relay, but 2 functions"), "{err}");
    }

    #[test]
    fn the_shipped_plans_parse_and_the_default_one_has_every_fault_kind_and_code() {
        let default = FaultPlan::parse(include_str!("../../faults/default.toml")).expect("the default plan");
        let ci = FaultPlan::parse(include_str!("../../faults/ci.toml")).expect("the ci plan");
        assert!(ci.cancel_after_quiet && !default.cancel_after_quiet);
        for plan in [&default, &ci] {
            let kinds: std::collections::BTreeSet<FaultKind> = plan.faults.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), 6, "{kinds:?}");
            let codes: std::collections::BTreeSet<&str> = plan.faults.iter().filter_map(|f| f.code.as_deref()).collect();
            for code in [
                "InternalServerError",
                "ServiceUnavailable",
                "ThrottlingException",
                "ProvisionedThroughputExceededException",
                "RequestLimitExceeded",
                "TransactionConflict",
                "InternalFailure",
            ] {
                assert!(codes.contains(code), "{code} is missing: {codes:?}");
            }
            assert!(plan.faults.iter().any(|f| f.until_s.is_some()), "an outage window");
            assert!(!plan.ttl.is_empty() && plan.redrive);
        }
    }

    #[test]
    fn inconsistent_faults_are_refused_naming_the_fault() {
        for (text, says) in [
            ("[[fault]]\nkind = \"error\"\nop = \"dynamodb:PutItem\"\n", "needs a code"),
            ("[[fault]]\nkind = \"error\"\nop = \"dynamodb:PutItem\"\ncode = \"Nope\"\n", "needs a code"),
            ("[[fault]]\nkind = \"put_events_entries\"\nop = \"dynamodb:PutItem\"\ncode = \"InternalFailure\"\n", "events:PutEvents only"),
            ("[[fault]]\nkind = \"unprocessed_keys\"\nop = \"dynamodb:*\"\n", "dynamodb:BatchGetItem only"),
            ("[[fault]]\nkind = \"latency\"\nop = \"*\"\n", "needs ms"),
            ("[[fault]]\nkind = \"lost_answer\"\nop = \"*\"\nrate = 2.0\n", "rate must be"),
            ("[[fault]]\nkind = \"lost_answer\"\nop = \"PutItem\"\n", "service:Operation"),
        ] {
            let err = FaultPlan::parse(text).expect_err(text).to_string();
            assert!(err.starts_with("fault #1 ") && err.contains(says), "{err}");
        }
        assert!(FaultPlan::parse("[[fault]]\nkind = \"explode\"\n").expect_err("unknown kind").to_string().contains("not a fault plan"));
    }
}
