//! The operations: buses, subscribers and `PutEvents`, on the bus's state. Each takes the
//! request as JSON (see the front's `wire.rs`) and answers JSON or a wire error (`WireError`).
//!
//! `PutEvents` (API reference, PutEvents; user guide, eb-custom-bus-*): 1-100 entries and at most
//! [`MAX_REQUEST_BYTES`] of entries, else the whole call is refused (`InvalidInputException`);
//! per entry, `Source` and `DetailType` are required, `Detail` must be a JSON object,
//! `EventGroupId` and `DeduplicationId` are 1-128 characters — a bad entry fails alone
//! (`ErrorCode`, `ErrorMessage`, counted in `FailedEntryCount`) and the others are published.
//! A `DeduplicationId` seen within 300 s answers the first publish's `EventId` and
//! `SequenceNumber` with `SuccessCode` `DEDUPLICATED` and stores nothing. Each event gets an
//! `aws:EventId` and, within its group, the next `SequenceNumber`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};

use super::subscriber::{required, Config};
use super::wire::WireError;
use super::{arn_suffix, bump, now_epoch, Bus, CustomBus, Pending, StoredEvent, Subscriber, DEDUPLICATION_WINDOW};

/// Most entries per `PutEvents` call.
pub const MAX_ENTRIES: usize = 100;

/// Most bytes of entries per `PutEvents` call, counted as the classic bus's "Calculating
/// PutEvents event entry size" page counts them (Time 14 bytes; Source, DetailType, Detail and
/// each Resource by their UTF-8 length; here also the two SystemMetadata ids). 1 MiB: the local
/// runtime's reading of the Custom bus's fixed request limit (not found as a number on the quota
/// page; the classic bus's is 256 KB).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Longest `EventGroupId` / `DeduplicationId`.
pub const MAX_ID_CHARS: usize = 128;

/// Most buses (the `[EventsV2] Event buses` quota's default, 5 per account and region).
pub const MAX_BUSES: usize = 5;

/// The most retention days (`RetentionPeriodInDays`, 1-365) and the default (7).
const RETENTION_DAYS: std::ops::RangeInclusive<u64> = 1..=365;
const DEFAULT_RETENTION_DAYS: u32 = 7;

impl CustomBus {
    /// Runs operation `op` on `request`.
    pub(crate) fn call(self: &Arc<Self>, op: &str, request: &Value) -> Result<Value, WireError> {
        match op {
            "CreateEventBus" => self.create_event_bus(request),
            "DescribeEventBus" => self.with_bus(request, |bus| Ok(describe_bus(bus))),
            "ListEventBuses" => Ok(self.list_event_buses(request)),
            "DeleteEventBus" => self.delete_event_bus(request),
            "CreateSubscriber" => self.create_subscriber(request),
            "DescribeSubscriber" => self.with_subscriber(request, |s| Ok(s.config.describe(s.created, s.modified))),
            "ListSubscribers" => self.list_subscribers(request),
            "UpdateSubscriber" => self.update_subscriber(request),
            "DeleteSubscriber" => self.delete_subscriber(request),
            "PutEvents" => self.put_events(request),
            other => Err(WireError::invalid(format!(
                "operation {other} is not played by the local runtime's Custom Event Bus (it plays CreateEventBus, DescribeEventBus, ListEventBuses, DeleteEventBus, CreateSubscriber, DescribeSubscriber, ListSubscribers, UpdateSubscriber, DeleteSubscriber, PutEvents)"
            ))),
        }
    }

    fn create_event_bus(&self, request: &Value) -> Result<Value, WireError> {
        let name = required(request, "Name")?;
        if name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(WireError::invalid(format!("Name {name:?}: 1-64 letters, digits, '-', '_' or '.'")));
        }
        let retention_days = match request.get("StorageConfiguration").and_then(|s| s.get("RetentionPeriodInDays")) {
            None => DEFAULT_RETENTION_DAYS,
            Some(d) => d
                .as_u64()
                .filter(|d| RETENTION_DAYS.contains(d))
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| WireError::invalid(format!("StorageConfiguration.RetentionPeriodInDays {d}: 1-365")))?,
        };
        let mut state = self.lock();
        if state.buses.values().any(|b| b.name == name) {
            return Err(WireError::exists(format!("event bus {name} already exists")));
        }
        if state.buses.len() >= MAX_BUSES {
            return Err(WireError::limit(format!("{MAX_BUSES} event buses per account and region (the [EventsV2] Event buses quota)")));
        }
        let arn = format!("arn:aws:events:{}:{}:event-busv2/{name}/{}", self.region, self.account, arn_suffix());
        let bus = Bus {
            name: name.to_owned(),
            arn: arn.clone(),
            description: request.get("Description").and_then(Value::as_str).map(str::to_owned),
            retention_days,
            created: now_epoch(),
            events: Vec::new(),
            sequence: Default::default(),
            dedup: Default::default(),
        };
        let answer = describe_bus(&bus);
        state.buses.insert(arn, bus);
        Ok(answer)
    }

    fn with_bus(&self, request: &Value, f: impl FnOnce(&Bus) -> Result<Value, WireError>) -> Result<Value, WireError> {
        let state = self.lock();
        let bus = find_bus(&state.buses, request)?;
        f(bus)
    }

    fn list_event_buses(&self, request: &Value) -> Value {
        let prefix = request.get("NamePrefix").and_then(Value::as_str).unwrap_or_default();
        let state = self.lock();
        let buses: Vec<Value> = state
            .buses
            .values()
            .filter(|b| b.name.starts_with(prefix))
            .map(|b| json!({"EventBusArn": b.arn, "Name": b.name, "State": "ACTIVE", "CreationTime": b.created}))
            .collect();
        json!({ "EventBuses": buses })
    }

    fn delete_event_bus(&self, request: &Value) -> Result<Value, WireError> {
        let mut state = self.lock();
        let arn = find_bus(&state.buses, request)?.arn.clone();
        if state.subscribers.values().any(|s| s.config.bus_arn == arn) {
            return Err(WireError { code: "InvalidStateException", status: 400, message: format!("{arn} still has subscribers: delete them first") });
        }
        state.buses.remove(&arn);
        Ok(json!({}))
    }

    fn create_subscriber(self: &Arc<Self>, request: &Value) -> Result<Value, WireError> {
        let bus_arn = required(request, "EventBusArn")?;
        let name = required(request, "Name")?;
        let mut state = self.lock();
        let bus = state.buses.get(bus_arn).ok_or_else(|| WireError::not_found(format!("event bus {bus_arn} does not exist")))?;
        let arn = format!("arn:aws:events:{}:{}:subscriberv2/{}/{name}", self.region, self.account, bus.name);
        if state.subscribers.contains_key(&arn) {
            return Err(WireError::exists(format!("subscriber {name} already exists on {bus_arn}")));
        }
        let config = Config::from_create(request, arn.clone())?;
        let now = now_epoch();
        // POINT_IN_TIME: the retained events from the starting point (HORIZON: the oldest) up to
        // the end point are the backlog; LATEST: nothing before now.
        let mut pending = std::collections::VecDeque::new();
        if let Some(pit) = &config.point_in_time {
            let start =
                pit.get("StartingPoint").and_then(Value::as_f64).filter(|_| pit.get("PointType").and_then(Value::as_str) == Some("TIMESTAMP"));
            for event in &bus.events {
                let from = start.is_none_or(|s| event.ingested >= s);
                let until = config.end_point.is_none_or(|e| event.ingested <= e);
                if from && until {
                    if config.accepts(&event.data, &event.system_metadata) {
                        pending.push_back(Pending { event: event.clone(), attempts: 0, not_before: Instant::now(), last_error: None });
                    } else {
                        bump(&self.counters.filtered_out, 1);
                    }
                }
            }
        }
        let wake = Arc::new(tokio::sync::Notify::new());
        let answer = json!({
            "SubscriberArn": arn, "Name": config.name, "EventBusArn": config.bus_arn,
            "Type": if config.ordering == super::subscriber::Ordering::Fifo { "FIFO" } else { "UNORDERED" },
            "StartingPosition": config.starting_position,
            "State": if config.running { "RUNNING" } else { "STOPPED" }, "CreationTime": now,
        });
        state.subscribers.insert(arn.clone(), Subscriber { config, created: now, modified: now, pending, delivered: 0, wake: wake.clone() });
        drop(state);
        super::delivery::spawn(self.clone(), arn, wake);
        Ok(answer)
    }

    fn with_subscriber(&self, request: &Value, f: impl FnOnce(&Subscriber) -> Result<Value, WireError>) -> Result<Value, WireError> {
        let arn = required(request, "SubscriberArn")?;
        let state = self.lock();
        let s = state.subscribers.get(arn).ok_or_else(|| WireError::not_found(format!("subscriber {arn} does not exist")))?;
        f(s)
    }

    fn list_subscribers(&self, request: &Value) -> Result<Value, WireError> {
        let state = self.lock();
        let bus = request.get("EventBusArn").and_then(Value::as_str);
        if let Some(bus) = bus {
            if !state.buses.contains_key(bus) {
                return Err(WireError::not_found(format!("event bus {bus} does not exist")));
            }
        }
        let prefix = request.get("NamePrefix").and_then(Value::as_str).unwrap_or_default();
        let list: Vec<Value> = state
            .subscribers
            .values()
            .filter(|s| bus.is_none_or(|b| s.config.bus_arn == b) && s.config.name.starts_with(prefix))
            .map(|s| {
                let d = s.config.describe(s.created, s.modified);
                json!({
                    "SubscriberArn": d["SubscriberArn"], "Name": d["Name"], "EventBusArn": d["EventBusArn"],
                    "TargetArn": s.config.target_arn, "Type": d["Type"], "State": d["State"],
                    "CreationTime": s.created, "LastModifiedTime": s.modified, "SubscriberAccountId": self.account,
                })
            })
            .collect();
        Ok(json!({ "Subscribers": list }))
    }

    fn update_subscriber(&self, request: &Value) -> Result<Value, WireError> {
        let arn = required(request, "SubscriberArn")?;
        let mut state = self.lock();
        let s = state.subscribers.get_mut(arn).ok_or_else(|| WireError::not_found(format!("subscriber {arn} does not exist")))?;
        for fixed in ["StartingPosition", "PointInTimeConfiguration", "Type", "EventBusArn", "Name"] {
            if request.get(fixed).is_some() {
                return Err(WireError::invalid(format!("UpdateSubscriber cannot change {fixed}")));
            }
        }
        let was_running = s.config.running;
        s.config.update(request)?;
        // Resuming at LATEST skips what waited while stopped; LAST_PROCESSED (default) keeps it.
        if !was_running && s.config.running && request.get("ResumePosition").and_then(Value::as_str) == Some("LATEST") {
            s.pending.clear();
        }
        s.modified = now_epoch();
        s.wake.notify_one();
        Ok(s.config.describe(s.created, s.modified))
    }

    fn delete_subscriber(&self, request: &Value) -> Result<Value, WireError> {
        let arn = required(request, "SubscriberArn")?;
        let mut state = self.lock();
        let s = state.subscribers.remove(arn).ok_or_else(|| WireError::not_found(format!("subscriber {arn} does not exist")))?;
        s.wake.notify_one();
        Ok(json!({}))
    }

    fn put_events(&self, request: &Value) -> Result<Value, WireError> {
        let bus_arn = required(request, "EventBusArn")?;
        let entries = request.get("Entries").and_then(Value::as_array).ok_or_else(|| WireError::invalid("Entries is required"))?;
        if entries.is_empty() || entries.len() > MAX_ENTRIES {
            return Err(WireError::invalid(format!("Entries: 1-{MAX_ENTRIES} entries per call, got {}", entries.len())));
        }
        let size: usize = entries.iter().map(entry_size).sum();
        if size > MAX_REQUEST_BYTES {
            return Err(WireError::invalid(format!("the entries total {size} bytes; at most {MAX_REQUEST_BYTES} per PutEvents call")));
        }
        let mut state = self.lock();
        let bus = state.buses.get_mut(bus_arn).ok_or_else(|| WireError::not_found(format!("event bus {bus_arn} does not exist")))?;
        let now = now_epoch();
        let horizon = now - f64::from(bus.retention_days) * 86_400.0;
        bus.events.retain(|e| e.ingested >= horizon);
        bus.dedup.retain(|_, (at, _, _)| at.elapsed() < DEDUPLICATION_WINDOW);
        let mut results = Vec::with_capacity(entries.len());
        let mut published = Vec::new();
        let mut failed = 0u64;
        for entry in entries {
            match check_entry(entry) {
                Err((code, message)) => {
                    failed += 1;
                    results.push(json!({"ErrorCode": code, "ErrorMessage": message}));
                }
                Ok(checked) => {
                    if let Some((_, id, seq)) = checked.dedup.as_ref().and_then(|d| bus.dedup.get(d)) {
                        bump(&self.counters.deduplicated, 1);
                        let mut r = json!({"EventId": id, "SuccessCode": "DEDUPLICATED"});
                        if let Some(seq) = seq {
                            r["SequenceNumber"] = json!(seq);
                        }
                        results.push(r);
                        continue;
                    }
                    let event = self.store(bus, checked, now);
                    let mut r = json!({"EventId": event.id, "SuccessCode": "PUBLISHED"});
                    if let Some(seq) = event.system_metadata.get("aws:SequenceNumber") {
                        r["SequenceNumber"] = seq.clone();
                    }
                    results.push(r);
                    published.push(event);
                }
            }
        }
        bump(&self.counters.failed_entries, failed);
        bump(&self.counters.published, published.len() as u64);
        let bus_arn = bus_arn.to_owned();
        for s in state.subscribers.values_mut().filter(|s| s.config.bus_arn == bus_arn) {
            let mut added = false;
            for event in &published {
                if s.config.end_point.is_some_and(|e| event.ingested > e) {
                    continue;
                }
                if !s.config.accepts(&event.data, &event.system_metadata) {
                    bump(&self.counters.filtered_out, 1);
                    continue;
                }
                s.pending.push_back(Pending { event: event.clone(), attempts: 0, not_before: Instant::now(), last_error: None });
                added = true;
            }
            if added {
                s.wake.notify_one();
            }
        }
        Ok(json!({"FailedEntryCount": failed, "Entries": results}))
    }

    /// Stores a checked entry: its id, sequence number, envelope and system metadata.
    fn store(&self, bus: &mut Bus, entry: Checked, now: f64) -> Arc<StoredEvent> {
        let id = uuid::Uuid::new_v4().to_string();
        let sequence = entry.group.as_ref().map(|g| {
            let n = bus.sequence.entry(g.clone()).or_insert(0);
            *n += 1;
            format!("{n:020}")
        });
        let time = entry.time.unwrap_or(now);
        let time = chrono::DateTime::from_timestamp(time as i64, 0).unwrap_or_default().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let data = json!({
            "version": "0", "id": id, "detail-type": entry.detail_type, "source": entry.source,
            "account": self.account, "time": time, "region": self.region, "resources": entry.resources, "detail": entry.detail,
        });
        let mut system_metadata = json!({"aws:EventId": id, "aws:IngestionTime": format!("{now:.3}"), "aws:Source": entry.source});
        if let (Some(g), Some(seq)) = (&entry.group, &sequence) {
            system_metadata["EventGroupId"] = json!(g);
            system_metadata["aws:SequenceNumber"] = json!(seq);
        }
        if let Some(d) = &entry.dedup {
            system_metadata["DeduplicationId"] = json!(d);
            bus.dedup.insert(d.clone(), (Instant::now(), id.clone(), sequence.clone()));
        }
        let event = Arc::new(StoredEvent { id, group: entry.group, ingested: now, data, system_metadata });
        bus.events.push(event.clone());
        event
    }
}

fn find_bus<'a>(buses: &'a std::collections::BTreeMap<String, Bus>, request: &Value) -> Result<&'a Bus, WireError> {
    let key = request
        .get("EventBusArn")
        .or_else(|| request.get("Name"))
        .and_then(Value::as_str)
        .ok_or_else(|| WireError::invalid("EventBusArn is required"))?;
    buses.get(key).or_else(|| buses.values().find(|b| b.name == key)).ok_or_else(|| WireError::not_found(format!("event bus {key} does not exist")))
}

fn describe_bus(bus: &Bus) -> Value {
    let mut out = json!({
        "EventBusArn": bus.arn, "Name": bus.name, "State": "ACTIVE", "CreationTime": bus.created, "LastModifiedTime": bus.created,
        "StorageConfiguration": {"RetentionPeriodInDays": bus.retention_days},
    });
    if let Some(d) = &bus.description {
        out["Description"] = json!(d);
    }
    out
}

/// An entry that passed the checks.
struct Checked {
    source: String,
    detail_type: String,
    detail: Value,
    resources: Vec<String>,
    time: Option<f64>,
    group: Option<String>,
    dedup: Option<String>,
}

/// An entry's size in bytes (see [`MAX_REQUEST_BYTES`]).
fn entry_size(entry: &Value) -> usize {
    let s = |k: &str| entry.get(k).and_then(Value::as_str).map_or(0, str::len);
    let resources: usize = entry.get("Resources").and_then(Value::as_array).map_or(0, |r| r.iter().filter_map(Value::as_str).map(str::len).sum());
    let meta =
        entry.get("SystemMetadata").map_or(0, |m| ["EventGroupId", "DeduplicationId"].iter().filter_map(|k| m.get(*k)?.as_str()).map(str::len).sum());
    let time = if entry.get("Time").is_some() { 14 } else { 0 };
    s("Source") + s("DetailType") + s("Detail") + resources + meta + time
}

/// Checks one entry: `(ErrorCode, ErrorMessage)` when it cannot be published.
fn check_entry(entry: &Value) -> Result<Checked, (&'static str, String)> {
    let invalid = |m: String| ("InvalidArgument", m);
    let text = |k: &str| entry.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let source = text("Source").ok_or_else(|| invalid("Parameter Source is not valid. Reason: Source is a required argument.".into()))?;
    let detail_type =
        text("DetailType").ok_or_else(|| invalid("Parameter DetailType is not valid. Reason: DetailType is a required argument.".into()))?;
    let detail = match text("Detail") {
        None => json!({}),
        Some(d) => match serde_json::from_str::<Value>(&d) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(("MalformedDetail", "Detail is malformed: it must be a JSON object.".into())),
        },
    };
    let resources =
        entry.get("Resources").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default();
    let meta = entry.get("SystemMetadata");
    let id = |k: &str| -> Result<Option<String>, (&'static str, String)> {
        match meta.and_then(|m| m.get(k)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if (1..=MAX_ID_CHARS).contains(&s.chars().count()) => Ok(Some(s.clone())),
            Some(v) => {
                Err(invalid(format!("SystemMetadata.{k} must be 1-{MAX_ID_CHARS} characters, got {}", v.as_str().map_or(0, |s| s.chars().count()))))
            }
        }
    };
    Ok(Checked {
        source,
        detail_type,
        detail,
        resources,
        time: entry.get("Time").and_then(Value::as_f64),
        group: id("EventGroupId")?,
        dedup: id("DeduplicationId")?,
    })
}
