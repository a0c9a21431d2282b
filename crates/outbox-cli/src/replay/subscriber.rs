//! `outbox replay` on the Custom Event Bus: a window of the bus's retained events re-delivered to
//! one consumer (or every consumer) through a **replay subscriber**.
//!
//! * **No replay API**: "There is no separate replay API: a subscriber reads retained events from
//!   its starting position" (EventBridge user guide, "Replaying retained events to a
//!   subscriber", eb-custom-bus-replay). A replay is a new subscriber with `StartingPosition:
//!   POINT_IN_TIME` and `PointInTimeConfiguration { PointType: TIMESTAMP, StartingPoint: since,
//!   EndPoint: until }` ("An optional `EndPoint` stops the subscriber at that time"). The
//!   starting position cannot be changed later (`UpdateSubscriber` has none), so the consumer's
//!   own subscriber is never touched.
//! * **A copy of the consumer's subscriber**: the subscriber of the stack that delivers to the
//!   consumer (its target is the queue the consumer's SQS mapping reads, or the function)
//!   is read with `DescribeSubscriber`, and its target, role, SQS parameters, filters, type
//!   (FIFO keeps each event group in order in the replay too), batching, transformer, retry
//!   policy, on-failure destination and logging are copied; the consumer's reading is unchanged.
//! * **The window**: `since` must lie in the bus's retention window, "at or after
//!   `RetentionWindowStartTime` and not in the future" (`DescribeEventBus`'s
//!   `StorageConfiguration`; without it, now − `RetentionPeriodInDays`), before `until`, and
//!   `until` not in the future (a replay re-delivers what the bus already had).
//! * **Names**: `<subscriber>-replay-<yyyymmddThhmmssZ>` ([`replay_subscriber_name`]), the
//!   subscriber's name shortened to fit [`SUBSCRIBER_NAME_MAX`]; the description names the
//!   subscriber whole (`outbox replay of <subscriber> for <consumer>: <since> .. <until>`).
//!   `--cleanup` finds a consumer's replay subscribers by both (`ListSubscribers` with
//!   `NamePrefix`, then the description).
//! * **Removing them**: a replay subscriber stays after its `EndPoint` (it delivers nothing new);
//!   `--cleanup` deletes those whose end has passed by the subscriber's retry window
//!   (`RetryPolicy.MaxEventAgeInSeconds`, default 300 s: "When an event reaches this age,
//!   retries stop", AWS::EventsV2::Subscriber RetryPolicy), so no delivery of the window is still
//!   being retried; `--force` deletes those whose end has passed at all.
//! * **Why it is safe**: the replayed events carry their event id (`detail.metadata.id`); the
//!   consumer's inbox absorbs what it already applied, and applies what it missed.
//!
//! Sources: <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-custom-bus-replay.html>,
//! <https://docs.aws.amazon.com/eventbridgev2/latest/APIReference/API_CreateSubscriber.html>,
//! <https://docs.aws.amazon.com/eventbridgev2/latest/APIReference/API_PointInTimeConfiguration.html>.

use aws_sdk_eventbridgev2::operation::describe_subscriber::DescribeSubscriberOutput;
use aws_sdk_eventbridgev2::types::{InvokeConfiguration, PointInTimeConfiguration, PointType, StartingPosition, SubscriberState};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{check_order, consumer_label, Consumers};
use crate::resources::{Resources, SubscriberInfo};
use crate::{Error, Result};

/// The most characters a replay subscriber's `Name` gets: 64, the stricter of the limits met
/// (AWS::EventsV2::Subscriber's schema allows 256, the local runtime's Custom bus 64).
pub const SUBSCRIBER_NAME_MAX: usize = 64;

/// What a replay subscriber's name adds to its subscriber's, before the time stamp.
pub const REPLAY_MARK: &str = "-replay-";

/// A subscriber's retry window when its `RetryPolicy` gives none, seconds
/// (`MaxEventAgeInSeconds`, "The default is 300", AWS::EventsV2::Subscriber RetryPolicy).
pub const DEFAULT_MAX_EVENT_AGE_SECONDS: i64 = 300;

/// A consumer's Custom-bus subscriber, chosen for a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Chosen {
    /// The consumer (`CONSUMER_NAME`, else its function's logical id).
    pub consumer: String,
    /// Its subscriber.
    pub subscriber: SubscriberInfo,
}

/// The Custom-bus subscribers of `consumers`: `Ok(None)` when none of them receives events from
/// a Custom bus (they are on the classic bus: the archive replay applies).
///
/// # Errors
/// [`Error::NotFound`]: no function of the stack is the consumer given (the consumers, classic
/// and Custom, are listed).
pub fn choose_subscribers(resources: &Resources, consumers: &Consumers) -> Result<Option<Vec<Chosen>>> {
    let functions: Vec<_> = resources.functions.iter().filter(|f| consumers.takes(f)).collect();
    if let (Consumers::One(given), true) = (consumers, functions.is_empty()) {
        let listed: String = resources
            .functions
            .iter()
            .filter(|f| !f.rules.is_empty() || resources.subscribers.iter().any(|s| s.delivers_to(f)))
            .map(|f| format!("\n  {} (function {})", consumer_label(f), f.logical_id))
            .collect();
        return Err(Error::NotFound(format!(
            "no consumer {given:?} in {} (give a consumer's CONSUMER_NAME, function logical id or name); the consumers are:{}",
            resources.source,
            if listed.is_empty() { " none".to_owned() } else { listed }
        )));
    }
    let mut chosen = Vec::new();
    for f in functions {
        for s in resources.subscribers.iter().filter(|s| s.delivers_to(f)) {
            if !chosen.iter().any(|c: &Chosen| c.subscriber.arn == s.arn) {
                chosen.push(Chosen { consumer: consumer_label(f), subscriber: s.clone() });
            }
        }
    }
    Ok((!chosen.is_empty()).then_some(chosen))
}

/// The name of a replay subscriber of subscriber `name` made at `now`:
/// `<name>-replay-<yyyymmddThhmmssZ>`, `name` shortened to fit [`SUBSCRIBER_NAME_MAX`].
pub fn replay_subscriber_name(name: &str, now: DateTime<Utc>) -> String {
    format!("{}{}", replay_prefix(name), now.format("%Y%m%dT%H%M%SZ"))
}

/// The prefix every replay subscriber of subscriber `name` starts with (`--cleanup` lists them by it).
pub fn replay_prefix(name: &str) -> String {
    let room = SUBSCRIBER_NAME_MAX - REPLAY_MARK.len() - "yyyymmddThhmmssZ".len();
    let name: String = name.chars().take(room).collect();
    format!("{name}{REPLAY_MARK}")
}

/// How a replay subscriber's description of subscriber `name` starts (then the consumer and the
/// window): what tells it from another subscriber's whose name has the same shortened prefix.
pub fn replay_description(name: &str) -> String {
    format!("outbox replay of {name} for ")
}

/// A Custom bus's retention, as `DescribeEventBus` tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BusRetention {
    /// The bus's ARN.
    pub arn: String,
    /// Its name.
    pub name: String,
    /// `StorageConfiguration.RetentionPeriodInDays` (1-365), when given.
    pub retention_days: Option<i32>,
    /// `StorageConfiguration.RetentionWindowStartTime`: the earliest point a subscriber can
    /// read from (the bus's creation time on a bus younger than its retention), when given.
    pub window_start: Option<DateTime<Utc>>,
}

impl BusRetention {
    /// The earliest time a replay can start from at `now`: `RetentionWindowStartTime`, else now
    /// − `RetentionPeriodInDays`; `None` when the bus says neither.
    pub fn earliest(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.window_start.or_else(|| self.retention_days.map(|d| now - chrono::Duration::days(i64::from(d))))
    }

    /// Checks the window `[since, until]` at `now` against the bus's retention.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]: what [`check_order`] refuses, or `since` before the retention
    /// window (the earliest time allowed is named).
    pub fn check_window(&self, since: DateTime<Utc>, until: DateTime<Utc>, now: DateTime<Utc>) -> Result<()> {
        check_order(since, until, now)?;
        if let Some(earliest) = self.earliest(now) {
            if since < earliest {
                let kept = self.retention_days.map(|d| format!(", it keeps {d} days")).unwrap_or_default();
                return Err(Error::invalid(
                    "--since",
                    since.to_rfc3339(),
                    format!(
                        "is beyond what bus {} retains (its retention window starts at {}{kept}): those events are gone; give --since {} or later",
                        self.name,
                        earliest.to_rfc3339(),
                        earliest.to_rfc3339()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A replay subscriber as `DescribeSubscriber` tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReplaySubscriber {
    /// Its name.
    pub name: String,
    /// Its ARN.
    pub arn: String,
    /// `PointInTimeConfiguration.StartingPoint`.
    pub since: Option<DateTime<Utc>>,
    /// `PointInTimeConfiguration.EndPoint`: it delivers nothing of later times.
    pub until: Option<DateTime<Utc>>,
    /// `RetryPolicy.MaxEventAgeInSeconds` ([`DEFAULT_MAX_EVENT_AGE_SECONDS`] when not given).
    pub max_event_age_seconds: i64,
    /// `RUNNING`, `STOPPED`.
    pub state: String,
}

/// What `--cleanup` does with one replay subscriber.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Cleanup {
    /// Delete it: its window and retry window are over (or `--force` and its window is over).
    Delete,
    /// Leave it: it still delivers (its end has not passed), or its deliveries may still be
    /// retried until the time given (its end plus its retry window).
    Wait(DateTime<Utc>),
    /// Leave it: it has no `EndPoint` (made by hand): delete it yourself when it is done.
    NoEnd,
}

impl ReplaySubscriber {
    /// What `--cleanup` does with it at `now` (`force`: do not wait for its retry window).
    pub fn cleanup(&self, now: DateTime<Utc>, force: bool) -> Cleanup {
        let Some(until) = self.until else { return Cleanup::NoEnd };
        let done = if force { until } else { until + chrono::Duration::seconds(self.max_event_age_seconds) };
        if now >= done {
            Cleanup::Delete
        } else {
            Cleanup::Wait(done)
        }
    }
}

/// A replay ready to be created: the consumer's subscriber as it is, and the bus's retention.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Plan {
    /// The consumer and its subscriber.
    pub chosen: Chosen,
    /// The replay subscriber's name ([`replay_subscriber_name`]).
    pub name: String,
    /// The bus.
    pub bus: BusRetention,
    /// The consumer's subscriber as `DescribeSubscriber` tells it (what is copied).
    pub original: DescribeSubscriberOutput,
}

/// The replay subscriber made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Created {
    /// The consumer.
    pub consumer: String,
    /// The replay subscriber's name.
    pub name: String,
    /// Its ARN.
    pub arn: String,
}

/// The Custom bus's calls for replays.
#[derive(Debug, Clone)]
pub struct SubscriberReplayer {
    bus: aws_sdk_eventbridgev2::Client,
}

fn time_of(t: &aws_sdk_eventbridgev2::primitives::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(t.to_millis().ok()?)
}

fn smithy_time(t: DateTime<Utc>) -> aws_sdk_eventbridgev2::primitives::DateTime {
    aws_sdk_eventbridgev2::primitives::DateTime::from_millis(t.timestamp_millis())
}

/// The last but one segment of a Custom bus ARN (`…:event-busv2/<name>/<id>`): its name.
/// The replay subscriber's `InvokeConfiguration`: the original's, with an SQS FIFO target's
/// `MessageDeduplicationId` made unique to replay `replay` (`… & '#<replay>'`). A replay sends the
/// same events again (the same `aws:EventId`), and SQS drops a FIFO message whose deduplication id
/// it took in the last 5 minutes (SQS API reference, SendMessage: `MessageDeduplicationId`, "any
/// messages sent with the same message deduplication ID are accepted successfully but aren't
/// delivered during the 5-minute deduplication interval"): without the suffix, a replay of events
/// delivered minutes ago would be dropped by the queue. The consumer's inbox absorbs what it had
/// applied.
pub fn replay_invoke_configuration(original: Option<&InvokeConfiguration>, replay: &str) -> Option<InvokeConfiguration> {
    let mut config = original?.clone();
    if let Some(dedup) = config.sqs_parameters.as_mut().and_then(|p| p.message_deduplication_id.as_mut()) {
        let trimmed = dedup.trim();
        *dedup = match trimmed.strip_prefix("{%").and_then(|t| t.strip_suffix("%}")) {
            Some(expression) => format!("{{% {} & '#{replay}' %}}", expression.trim()),
            None => format!("{trimmed}#{replay}"),
        };
    }
    Some(config)
}

fn bus_name_of(arn: &str) -> &str {
    arn.rsplit('/').nth(1).unwrap_or(arn)
}

impl SubscriberReplayer {
    /// The calls through `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self { bus: aws_sdk_eventbridgev2::Client::new(sdk) }
    }

    /// The same calls through a client of the caller's (tests).
    pub fn with_client(bus: aws_sdk_eventbridgev2::Client) -> Self {
        Self { bus }
    }

    /// `subscriber` with its ARN and its bus's whole ARN: as given when both are known, else
    /// found by its name (`ListSubscribers` with `NamePrefix`, the exact name on the bus of that
    /// name): a stack looked up from a template knows neither the subscriber's ARN nor the
    /// random suffix of its bus's (`event-busv2/<name>/<id>`).
    ///
    /// # Errors
    /// [`Error::NotFound`]: no subscriber of that name on that bus; [`Error::Aws`].
    pub async fn locate(&self, subscriber: &SubscriberInfo) -> Result<SubscriberInfo> {
        let complete_bus = subscriber.bus_arn.split('/').count() == 3;
        if !subscriber.arn.is_empty() && complete_bus {
            return Ok(subscriber.clone());
        }
        let bus_name = subscriber.bus_arn.split('/').nth(1).filter(|n| !n.is_empty());
        let mut pages = self
            .bus
            .list_subscribers()
            .set_event_bus_arn(complete_bus.then(|| subscriber.bus_arn.clone()))
            .name_prefix(&subscriber.name)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(Error::aws(format!("ListSubscribers {}", subscriber.name)))?;
            let found = page.subscribers().iter().find(|s| {
                s.name() == Some(subscriber.name.as_str()) && bus_name.is_none_or(|b| s.event_bus_arn().is_some_and(|arn| bus_name_of(arn) == b))
            });
            if let Some(s) = found {
                let mut located = subscriber.clone();
                located.arn = s.subscriber_arn().unwrap_or_default().to_owned();
                located.bus_arn = s.event_bus_arn().map_or_else(|| subscriber.bus_arn.clone(), str::to_owned);
                return Ok(located);
            }
        }
        Err(Error::NotFound(format!(
            "subscriber {} ({}) is not on bus {}: ListSubscribers found none of that name; is the stack deployed (the region)?",
            subscriber.name,
            subscriber.logical_id,
            bus_name.unwrap_or("(any)")
        )))
    }

    /// Bus `arn`'s retention (`DescribeEventBus`).
    ///
    /// # Errors
    /// [`Error::NotFound`]: no such bus; [`Error::Aws`]: the call failed otherwise.
    pub async fn bus(&self, arn: &str) -> Result<BusRetention> {
        let out = match self.bus.describe_event_bus().event_bus_arn(arn).send().await {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
                return Err(Error::NotFound(format!("Custom bus {arn} is not there: DescribeEventBus found none")));
            }
            Err(e) => return Err(Error::aws(format!("DescribeEventBus {arn}"))(e)),
        };
        let storage = out.storage_configuration();
        Ok(BusRetention {
            arn: arn.to_owned(),
            name: out.name().unwrap_or_else(|| bus_name_of(arn)).to_owned(),
            retention_days: storage.and_then(|s| s.retention_period_in_days()),
            window_start: storage.and_then(|s| s.retention_window_start_time()).and_then(time_of),
        })
    }

    /// Subscriber `arn` as `DescribeSubscriber` tells it.
    ///
    /// # Errors
    /// [`Error::NotFound`]: no such subscriber (deleted outside the stack); [`Error::Aws`].
    pub async fn describe(&self, arn: &str) -> Result<DescribeSubscriberOutput> {
        match self.bus.describe_subscriber().subscriber_arn(arn).send().await {
            Ok(out) => Ok(out),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
                Err(Error::NotFound(format!("subscriber {arn} is not there: DescribeSubscriber found none")))
            }
            Err(e) => Err(Error::aws(format!("DescribeSubscriber {arn}"))(e)),
        }
    }

    /// Creates replay subscriber `plan.name`: a copy of `plan.original` reading `[since, until]`.
    ///
    /// # Errors
    /// [`Error::Replay`]: a subscriber of that name exists, the bus's quota of subscribers is
    /// reached, or the bus refused the window (`InvalidInputException`, its message); [`Error::Aws`].
    pub async fn create(&self, plan: &Plan, since: DateTime<Utc>, until: DateTime<Utc>) -> Result<Created> {
        let o = &plan.original;
        let point = PointInTimeConfiguration::builder()
            .point_type(PointType::Timestamp)
            .starting_point(smithy_time(since))
            .end_point(smithy_time(until))
            .build()
            .map_err(Error::aws("PointInTimeConfiguration"))?;
        let sent = self
            .bus
            .create_subscriber()
            .name(&plan.name)
            .event_bus_arn(&plan.chosen.subscriber.bus_arn)
            .description(format!(
                "{}{}: {} .. {}",
                replay_description(&plan.chosen.subscriber.name),
                plan.chosen.consumer,
                since.to_rfc3339(),
                until.to_rfc3339()
            ))
            .set_invoke_configuration(replay_invoke_configuration(o.invoke_configuration(), &plan.name))
            .set_filter_configuration(o.filter_configuration().cloned())
            .set_type(o.r#type().cloned())
            .set_batch_configuration(o.batch_configuration().cloned())
            .set_transformer(o.transformer().cloned())
            .set_retry_policy(o.retry_policy().cloned())
            .set_on_failure_configuration(o.on_failure_configuration().cloned())
            .set_log_configuration(o.log_configuration().cloned())
            .state(SubscriberState::Running)
            .starting_position(StartingPosition::PointInTime)
            .point_in_time_configuration(point)
            .send()
            .await;
        let name = &plan.name;
        match sent {
            Ok(out) => Ok(Created { consumer: plan.chosen.consumer.clone(), name: name.clone(), arn: out.subscriber_arn().unwrap_or_default().to_owned() }),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_already_exists_exception()) => {
                Err(Error::Replay(format!("a subscriber named {name} exists already: run the command again in a second (names carry the time)")))
            }
            Err(e) if e.as_service_error().is_some_and(|e| e.is_limit_exceeded_exception()) => Err(Error::Replay(format!(
                "bus {} refused replay subscriber {name}: its quota of subscribers is reached; remove finished replays (outbox replay --consumer {} --cleanup) or raise the quota",
                plan.bus.name, plan.chosen.consumer
            ))),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_invalid_input_exception()) => Err(Error::Replay(format!(
                "bus {} refused replay subscriber {name}: {}",
                plan.bus.name,
                aws_sdk_eventbridgev2::error::DisplayErrorContext(&e)
            ))),
            Err(e) => Err(Error::aws(format!("CreateSubscriber {name} on {}", plan.bus.name))(e)),
        }
    }

    /// The replay subscribers of `subscriber` (`ListSubscribers` by [`replay_prefix`], each
    /// described; those whose description is not [`replay_description`] of it are left out).
    ///
    /// # Errors
    /// [`Error::Aws`]: a call failed.
    pub async fn replays(&self, subscriber: &SubscriberInfo) -> Result<Vec<ReplaySubscriber>> {
        let prefix = replay_prefix(&subscriber.name);
        let mut arns = Vec::new();
        let mut pages = self.bus.list_subscribers().event_bus_arn(&subscriber.bus_arn).name_prefix(&prefix).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(Error::aws(format!("ListSubscribers {prefix}* on {}", bus_name_of(&subscriber.bus_arn))))?;
            // The prefix is the service's filter; checked again so that nothing else is ever deleted.
            arns.extend(
                page.subscribers()
                    .iter()
                    .filter(|s| s.name().is_some_and(|n| n.starts_with(&prefix)))
                    .filter_map(|s| s.subscriber_arn().map(str::to_owned)),
            );
        }
        let mut out = Vec::new();
        let description = replay_description(&subscriber.name);
        for arn in arns {
            let d = match self.describe(&arn).await {
                Ok(d) => d,
                // Deleted since it was listed (another --cleanup): nothing to do with it.
                Err(Error::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            // Another subscriber's replay whose shortened name has the same prefix, or not a
            // replay this command made: never touched.
            if !d.description().is_some_and(|text| text.starts_with(&description)) {
                continue;
            }
            let point = d.point_in_time_configuration();
            out.push(ReplaySubscriber {
                name: d.name().unwrap_or_default().to_owned(),
                arn,
                since: point.and_then(PointInTimeConfiguration::starting_point).and_then(time_of),
                until: point.and_then(PointInTimeConfiguration::end_point).and_then(time_of),
                max_event_age_seconds: d.retry_policy().and_then(|r| r.max_event_age_in_seconds()).map_or(DEFAULT_MAX_EVENT_AGE_SECONDS, i64::from),
                state: d.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Deletes subscriber `arn` (a replay subscriber); one already gone counts as deleted.
    ///
    /// # Errors
    /// [`Error::Aws`]: `DeleteSubscriber` failed.
    pub async fn delete(&self, arn: &str) -> Result<()> {
        match self.bus.delete_subscriber().subscriber_arn(arn).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => Ok(()),
            Err(e) => Err(Error::aws(format!("DeleteSubscriber {arn}"))(e)),
        }
    }
}

/// Everything checked before replay subscribers for `chosen` are created at `now`: each bus's
/// retention against the window (`DescribeEventBus`), each consumer's subscriber as it is
/// (`DescribeSubscriber`).
///
/// # Errors
/// What [`BusRetention::check_window`] returns; [`Error::NotFound`]: a bus or subscriber of the
/// stack is not there; [`Error::Record`]: a subscriber without an invoke configuration;
/// [`Error::Aws`].
pub async fn prepare(
    replayer: &SubscriberReplayer,
    chosen: &[Chosen],
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<Plan>> {
    let mut plans = Vec::new();
    for c in chosen {
        let c = Chosen { consumer: c.consumer.clone(), subscriber: replayer.locate(&c.subscriber).await? };
        let bus = replayer.bus(&c.subscriber.bus_arn).await?;
        bus.check_window(since, until, now)?;
        let original = replayer.describe(&c.subscriber.arn).await?;
        if original.invoke_configuration().is_none() {
            return Err(Error::record(format!("subscriber {}", c.subscriber.name))(
                "DescribeSubscriber gave no InvokeConfiguration: nothing to copy",
            ));
        }
        plans.push(Plan { name: replay_subscriber_name(&c.subscriber.name, now), chosen: c, bus, original });
    }
    Ok(plans)
}

#[cfg(test)]
mod tests;
