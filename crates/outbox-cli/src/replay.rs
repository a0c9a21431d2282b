//! `outbox replay`: re-deliver the events of a time window from the bus's archive to the rules
//! of one consumer (or of every consumer), with EventBridge's own replay. A consumer fed by a
//! Custom Event Bus's subscriber is replayed by [`subscriber`] instead (a replay subscriber).
//!
//! * **The archive**: the relay block's `EventArchive` (`AWS::Events::Archive` on the bus, the
//!   relay's events, kept `ArchiveRetentionDays`); `DescribeArchive` gives its bus, its state, its
//!   retention and when it was created.
//! * **The rules**: a replay is delivered to the rules named in `Destination.FilterArns`, only to
//!   them ("you can specify … one or more rules to replay the events to"); every rule of the stack
//!   that delivers to the chosen consumer (directly, or to the delivery queue it reads) and sits
//!   on the archive's bus. A replayed event carries `replay-name`; the consumer kit's rule does
//!   not exclude it, and EventBridge's managed archive rule keeps it out of the archive.
//! * **Filtering**: `StartReplay` has no event filter (`ReplayDestination` is a bus ARN and rule
//!   ARNs, nothing else): every archived event of the window that a chosen rule matches is
//!   replayed. `--type`/`--source` therefore choose rules, not events: the rules whose pattern
//!   can match one of the given types/sources; a chosen rule that also delivers other types is
//!   named (those events are replayed too; each consumer's inbox absorbs what it applied).
//! * **Why it is safe**: every consumer built on the inbox records each event id it applied;
//!   a replayed copy of an applied event is absorbed as a duplicate, so a replay applies only
//!   what was missed.
//!
//! Refused with a clear error: no archive in the stack, a window that is empty, in the future, or
//! entirely outside what the archive holds (before its creation, or past its retention), a
//! replay of the same archive still running (`ListReplays`), the account's limit of concurrent
//! replays. Sources:
//! <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-replay-archived-event.html>,
//! <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_StartReplay.html>,
//! <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_ReplayDestination.html>.

use aws_sdk_eventbridge::types::{ReplayDestination, ReplayState};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::resources::{FunctionInfo, Named, ResolveError, Resources, RuleInfo};
use crate::{Error, Result};

/// The most characters of a replay name (`ReplayName`, "Maximum length of 64", pattern
/// `[\.\-_A-Za-z0-9]+`).
pub const REPLAY_NAME_MAX: usize = 64;

/// How long an event may take to reach the archive: "There may be a delay between an event being
/// received on an event bus and the event arriving in the archive. We recommend you delay
/// replaying archived events for 10 minutes" (EventBridge user guide, "Archiving events").
pub const ARCHIVE_DELAY_MINUTES: i64 = 10;

/// Which consumers' rules a replay goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumers {
    /// The consumer with this `CONSUMER_NAME`, function logical id or function name.
    One(String),
    /// Every function of the stack that a rule on the archive's bus delivers to.
    All,
}

impl Consumers {
    /// Whether function `f` is one of these consumers (its `CONSUMER_NAME`, logical id or name).
    pub fn takes(&self, f: &FunctionInfo) -> bool {
        match self {
            Self::All => true,
            Self::One(given) => f.environment.get("CONSUMER_NAME") == Some(given) || &f.logical_id == given || &f.name == given,
        }
    }
}

/// How a consumer is named in messages: its `CONSUMER_NAME`, else its function's logical id.
pub fn consumer_label(f: &FunctionInfo) -> String {
    f.environment.get("CONSUMER_NAME").cloned().unwrap_or_else(|| f.logical_id.clone())
}

/// Checks a replay window `[since, until]` at `now`: it starts in the past, before it ends, and
/// it ends at `now` at the latest (a replay delivers what the bus already has).
///
/// # Errors
/// [`Error::InvalidArgument`] naming `--since` or `--until`.
pub fn check_order(since: DateTime<Utc>, until: DateTime<Utc>, now: DateTime<Utc>) -> Result<()> {
    let future = |flag: &'static str, at: DateTime<Utc>| {
        Error::invalid(flag, at.to_rfc3339(), format!("is in the future (now {}): a replay re-delivers events the bus already had", now.to_rfc3339()))
    };
    if since >= now {
        return Err(future("--since", since));
    }
    if since >= until {
        return Err(Error::invalid("--since", since.to_rfc3339(), format!("must be before --until ({})", until.to_rfc3339())));
    }
    if until > now {
        return Err(future("--until", until));
    }
    Ok(())
}

/// What a replay asks for, before anything is sent.
#[derive(Debug, Clone)]
pub struct Request {
    /// The consumers.
    pub consumers: Consumers,
    /// Start of the window (events whose `time` is at or after it).
    pub since: DateTime<Utc>,
    /// End of the window (events whose `time` is at or before it).
    pub until: DateTime<Utc>,
    /// `--type`: only rules that can match one of these `detail-type`s (empty: any).
    pub types: Vec<String>,
    /// `--source`: only rules that can match one of these `source`s (empty: any).
    pub sources: Vec<String>,
    /// `--archive`: the archive, when the stack has more than one.
    pub archive: Option<String>,
}

/// A chosen rule and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChosenRule {
    /// The consumer it delivers to (`CONSUMER_NAME`, else the function's logical id).
    pub consumer: String,
    /// The rule.
    pub rule: RuleInfo,
    /// `detail-type`s the rule also delivers beyond `--type` (`["*"]`: any type); empty without `--type`.
    pub also_types: Vec<String>,
}

/// The rules of the stack a replay for `request` goes to, on bus `bus_name`.
///
/// # Errors
/// [`Error::NotFound`]: no consumer matches `--consumer` (the consumers are listed), or no rule
/// of the chosen consumers is on the bus or can match `--type`/`--source`.
pub fn choose_rules(resources: &Resources, bus_name: &str, request: &Request) -> Result<Vec<ChosenRule>> {
    let label = consumer_label;
    let consumers: Vec<_> = resources.functions.iter().filter(|f| f.rules.iter().any(|(r, _)| r.bus == bus_name)).collect();
    let chosen: Vec<_> = consumers.iter().filter(|f| request.consumers.takes(f)).copied().collect();
    if chosen.is_empty() {
        let listed: String = consumers.iter().map(|f| format!("\n  {} (function {})", label(f), f.logical_id)).collect();
        let given = match &request.consumers {
            Consumers::One(given) => format!("no consumer {given:?} receives events from bus {bus_name}"),
            Consumers::All => format!("no function receives events from bus {bus_name}"),
        };
        return Err(Error::NotFound(format!(
            "{given} in {} (give a consumer's CONSUMER_NAME, function logical id or name); the consumers are:{}",
            resources.source,
            if listed.is_empty() { " none".to_owned() } else { listed }
        )));
    }
    let mut out: Vec<ChosenRule> = Vec::new();
    for f in chosen {
        for (rule, pattern) in f.rules.iter().filter(|(r, _)| r.bus == bus_name) {
            if !may_match(pattern, "detail-type", &request.types) || !may_match(pattern, "source", &request.sources) {
                continue;
            }
            if out.iter().any(|c| c.rule.arn == rule.arn) {
                continue;
            }
            let also_types = if request.types.is_empty() {
                Vec::new()
            } else {
                match pattern.get("detail-type").and_then(Value::as_array) {
                    None => vec!["*".to_owned()],
                    Some(listed) => listed
                        .iter()
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                        .filter(|t| !request.types.contains(t))
                        .collect(),
                }
            };
            out.push(ChosenRule { consumer: label(f), rule: rule.clone(), also_types });
        }
    }
    if out.is_empty() {
        return Err(Error::NotFound(format!(
            "no rule of the chosen consumer(s) on bus {bus_name} can match{}{}: nothing to replay to",
            if request.types.is_empty() { String::new() } else { format!(" --type {}", request.types.join(",")) },
            if request.sources.is_empty() { String::new() } else { format!(" --source {}", request.sources.join(",")) },
        )));
    }
    Ok(out)
}

/// Whether a rule's `pattern` can match an event whose `key` is one of `wanted` (empty: any). A
/// field the pattern does not constrain matches anything; a content filter (an object such as
/// `{"prefix": …}`) is taken as possibly matching (the rule is chosen, never silently dropped).
fn may_match(pattern: &Value, key: &str, wanted: &[String]) -> bool {
    if wanted.is_empty() {
        return true;
    }
    match pattern.get(key).and_then(Value::as_array) {
        None => true,
        Some(listed) => listed.iter().any(|v| match v {
            Value::String(s) => wanted.contains(s),
            Value::Object(_) => true,
            _ => false,
        }),
    }
}

/// The archive as `DescribeArchive` tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchiveState {
    /// Name.
    pub name: String,
    /// ARN (`StartReplay`'s `EventSourceArn`).
    pub arn: String,
    /// The bus it archives (`EventSourceArn` of the archive: a replay goes back to it).
    pub bus_arn: String,
    /// `ENABLED`, `DISABLED`, `CREATING`, …
    pub state: String,
    /// Days it keeps events (0: indefinitely).
    pub retention_days: i32,
    /// When it was created: nothing older was archived.
    pub created: Option<DateTime<Utc>>,
}

impl ArchiveState {
    /// The bus's name (the last segment of its ARN).
    pub fn bus_name(&self) -> &str {
        self.bus_arn.rsplit('/').next().unwrap_or(&self.bus_arn)
    }

    /// Checks the window `[since, until]` against what the archive holds at `now`; `Ok` carries
    /// warnings (a window partly outside).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: `since` not before `now`, `since` not before `until`, `until`
    /// after `now`, the window entirely before the archive's creation or past its retention;
    /// [`Error::Replay`]: the archive is not `ENABLED`.
    pub fn check_window(&self, since: DateTime<Utc>, until: DateTime<Utc>, now: DateTime<Utc>) -> Result<Vec<String>> {
        check_order(since, until, now)?;
        if self.state != "ENABLED" {
            return Err(Error::Replay(format!("archive {} is {} (not ENABLED): it cannot be replayed from now", self.name, self.state)));
        }
        let mut warnings = Vec::new();
        if until > now - chrono::Duration::minutes(ARCHIVE_DELAY_MINUTES) {
            warnings.push(format!(
                "the window ends less than {ARCHIVE_DELAY_MINUTES} minutes ago: events of those minutes may not be in the archive yet (EventBridge's advice: replay them {ARCHIVE_DELAY_MINUTES} minutes later)"
            ));
        }
        if let Some(created) = self.created {
            if until < created {
                return Err(Error::invalid(
                    "--until",
                    until.to_rfc3339(),
                    format!("is before archive {} was created ({}): it holds nothing of that window", self.name, created.to_rfc3339()),
                ));
            }
            if since < created {
                warnings.push(format!(
                    "archive {} was created at {}: events before it were not archived and are not replayed",
                    self.name,
                    created.to_rfc3339()
                ));
            }
        }
        if self.retention_days > 0 {
            let kept_from = now - chrono::Duration::days(i64::from(self.retention_days));
            if until < kept_from {
                return Err(Error::invalid(
                    "--until",
                    until.to_rfc3339(),
                    format!(
                        "is older than archive {}'s retention ({} days, events since {}): nothing of that window is kept",
                        self.name,
                        self.retention_days,
                        kept_from.to_rfc3339()
                    ),
                ));
            }
            if since < kept_from {
                warnings.push(format!(
                    "archive {} keeps {} days: events before {} are gone and are not replayed",
                    self.name,
                    self.retention_days,
                    kept_from.to_rfc3339()
                ));
            }
        }
        Ok(warnings)
    }
}

/// A replay's progress, as `DescribeReplay` tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// The replay's name.
    pub name: String,
    /// `STARTING`, `RUNNING`, `CANCELLING`, `COMPLETED`, `CANCELLED`, `FAILED`.
    pub state: String,
    /// Why it is in that state (`StateReason`), when EventBridge says.
    pub reason: Option<String>,
    /// The time (in the window) of the last event replayed so far.
    pub last_replayed: Option<DateTime<Utc>>,
}

impl Progress {
    /// Whether the replay has ended (completed, cancelled or failed).
    pub fn ended(&self) -> bool {
        matches!(self.state.as_str(), "COMPLETED" | "CANCELLED" | "FAILED")
    }

    /// How far through the window `[since, until]` the replay is, 0–100 (by event time: a
    /// replay goes through its window a minute at a time, oldest first).
    pub fn percent(&self, since: DateTime<Utc>, until: DateTime<Utc>) -> u8 {
        if self.state == "COMPLETED" {
            return 100;
        }
        let Some(last) = self.last_replayed else { return 0 };
        let span = (until - since).num_milliseconds().max(1);
        let done = (last - since).num_milliseconds().clamp(0, span);
        u8::try_from(done * 100 / span).unwrap_or(100)
    }

    /// One line: `replay N: RUNNING, events up to T replayed (42 % of the window)`.
    pub fn line(&self, since: DateTime<Utc>, until: DateTime<Utc>) -> String {
        let upto = self.last_replayed.map_or_else(|| "no event replayed yet".to_owned(), |t| format!("events up to {} replayed", t.to_rfc3339()));
        let reason = self.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        format!("replay {}: {}{reason}, {upto} ({} % of the window)", self.name, self.state, self.percent(since, until))
    }
}

/// A replay name: `outbox-<consumer or all>-<yyyymmddThhmmssZ>`, reduced to the characters and
/// length EventBridge allows ([`REPLAY_NAME_MAX`]).
pub fn replay_name(consumers: &Consumers, now: DateTime<Utc>) -> String {
    let who = match consumers {
        Consumers::One(name) => name.as_str(),
        Consumers::All => "all",
    };
    let stamp = now.format("%Y%m%dT%H%M%SZ").to_string();
    let who: String = who.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '-' }).collect();
    let room = REPLAY_NAME_MAX - "outbox-".len() - 1 - stamp.len();
    let who: String = who.chars().take(room).collect();
    format!("outbox-{who}-{stamp}")
}

/// A replay ready to start: checked against the archive and the replays running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The archive.
    pub archive: ArchiveState,
    /// The rules it goes to.
    pub rules: Vec<ChosenRule>,
    /// What the operator should know (a window partly outside the archive).
    pub warnings: Vec<String>,
    /// The replay's name ([`replay_name`]).
    pub name: String,
}

/// Everything checked before a replay for `request` starts, at `now`: the stack's archive
/// (`DescribeArchive`), the window against it, the rules, and no replay of it still running
/// (`ListReplays`).
///
/// # Errors
/// [`Error::Missing`]: the stack has no archive; [`Error::Resolve`]: `--archive` names none, or
/// several exist and none was named; what [`ArchiveState::check_window`] and [`choose_rules`]
/// return; [`Error::Replay`]: a replay of the archive is still running; [`Error::Aws`].
pub async fn prepare(replayer: &Replayer, resources: &Resources, request: &Request, now: DateTime<Utc>) -> Result<Plan> {
    let archive = resources.archive(request.archive.as_deref()).map_err(|e| match e {
        ResolveError::None { .. } => Error::missing(
            &resources.source,
            "event archive (AWS::Events::Archive)",
            "deploy the relay block of this version: its EventArchive keeps the bus's events for replays (ArchiveRetentionDays)",
        ),
        other => other.into(),
    })?;
    let archive = replayer.archive(archive).await?;
    let warnings = archive.check_window(request.since, request.until, now)?;
    let rules = choose_rules(resources, archive.bus_name(), request)?;
    if let Some(r) = replayer.running(&archive).await?.first() {
        return Err(Error::Replay(format!(
            "replay {} of archive {} is still {}: one replay of an archive at a time; wait for it to end (aws events describe-replay --replay-name {}) or cancel it (aws events cancel-replay --replay-name {})",
            r.name, archive.name, r.state, r.name, r.name
        )));
    }
    Ok(Plan { name: replay_name(&request.consumers, now), archive, rules, warnings })
}

/// EventBridge's replay calls for one stack.
#[derive(Debug, Clone)]
pub struct Replayer {
    events: aws_sdk_eventbridge::Client,
}

fn time_of(t: &aws_sdk_eventbridge::primitives::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.to_millis().ok()?)
}

fn smithy_time(t: DateTime<Utc>) -> aws_sdk_eventbridge::primitives::DateTime {
    aws_sdk_eventbridge::primitives::DateTime::from_millis(t.timestamp_millis())
}

impl Replayer {
    /// The calls through `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { events: aws_sdk_eventbridge::Client::new(sdk) }
    }

    /// The same calls through an EventBridge client of the caller's (tests).
    pub fn with_client(events: aws_sdk_eventbridge::Client) -> Self {
        Self { events }
    }

    /// The archive `archive` as `DescribeArchive` tells it.
    ///
    /// # Errors
    /// [`Error::NotFound`]: the archive is not there (deleted outside the stack);
    /// [`Error::Aws`]: `DescribeArchive` failed otherwise.
    pub async fn archive(&self, archive: &Named) -> Result<ArchiveState> {
        let out = match self.events.describe_archive().archive_name(&archive.name).send().await {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
                return Err(Error::NotFound(format!("archive {} ({}) is not there: DescribeArchive found none", archive.name, archive.logical_id)));
            }
            Err(e) => return Err(Error::aws(format!("DescribeArchive {}", archive.name))(e)),
        };
        Ok(ArchiveState {
            name: archive.name.clone(),
            arn: out.archive_arn().unwrap_or(&archive.arn).to_owned(),
            bus_arn: out.event_source_arn().unwrap_or_default().to_owned(),
            state: out.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            retention_days: out.retention_days().unwrap_or(0),
            created: out.creation_time().and_then(time_of),
        })
    }

    /// The replays of `archive` still running (`STARTING`, `RUNNING` or `CANCELLING`), by name.
    ///
    /// # Errors
    /// [`Error::Aws`]: `ListReplays` failed.
    pub async fn running(&self, archive: &ArchiveState) -> Result<Vec<Progress>> {
        let mut running = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .events
                .list_replays()
                .event_source_arn(&archive.arn)
                .set_next_token(token)
                .send()
                .await
                .map_err(Error::aws(format!("ListReplays of {}", archive.name)))?;
            for r in out.replays() {
                if matches!(r.state(), Some(ReplayState::Starting | ReplayState::Running | ReplayState::Cancelling)) {
                    running.push(Progress {
                        name: r.replay_name().unwrap_or_default().to_owned(),
                        state: r.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                        reason: r.state_reason().map(str::to_owned),
                        last_replayed: r.event_last_replayed_time().and_then(time_of),
                    });
                }
            }
            token = out.next_token().map(str::to_owned);
            if token.is_none() {
                return Ok(running);
            }
        }
    }

    /// Starts replay `name` of `archive`'s window `[since, until]` to `rules`.
    ///
    /// # Errors
    /// [`Error::Replay`] when a replay of that name exists already, or the account runs the most
    /// replays it may (`LimitExceededException`: 10 active per account and Region);
    /// [`Error::Aws`] otherwise.
    pub async fn start(&self, name: &str, archive: &ArchiveState, since: DateTime<Utc>, until: DateTime<Utc>, rules: &[ChosenRule]) -> Result<()> {
        let destination = ReplayDestination::builder()
            .arn(&archive.bus_arn)
            .set_filter_arns(Some(rules.iter().map(|r| r.rule.arn.clone()).collect()))
            .build()
            .map_err(Error::aws("ReplayDestination"))?;
        let sent = self
            .events
            .start_replay()
            .replay_name(name)
            .description(format!("outbox replay {} .. {}", since.to_rfc3339(), until.to_rfc3339()))
            .event_source_arn(&archive.arn)
            .event_start_time(smithy_time(since))
            .event_end_time(smithy_time(until))
            .destination(destination)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_limit_exceeded_exception()) => Err(Error::Replay(format!(
                "EventBridge refused replay {name}: the account runs the most replays it may at once (10 per Region); wait for one to end (aws events list-replays --state RUNNING)"
            ))),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_already_exists_exception()) => {
                Err(Error::Replay(format!("a replay named {name} exists already: run the command again in a second (names carry the time)")))
            }
            Err(e) => Err(Error::aws(format!("StartReplay {name} of {}", archive.name))(e)),
        }
    }

    /// Replay `name`'s progress.
    ///
    /// # Errors
    /// [`Error::Aws`]: `DescribeReplay` failed.
    pub async fn progress(&self, name: &str) -> Result<Progress> {
        let out = self.events.describe_replay().replay_name(name).send().await.map_err(Error::aws(format!("DescribeReplay {name}")))?;
        Ok(Progress {
            name: name.to_owned(),
            state: out.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            reason: out.state_reason().map(str::to_owned),
            last_replayed: out.event_last_replayed_time().and_then(time_of),
        })
    }
}

pub mod subscriber;

#[cfg(test)]
mod tests;
