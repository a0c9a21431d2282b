//! The runtime's timeline journal: per event id, the times AWS does not store — when the bus
//! accepted the relay's `PutEvents` entry (the runtime's endpoint answers or forwards every
//! `PutEvents`, classic and Custom bus: [`crate::custom_bus::front`]) and when the runtime
//! handed the event to each function (the SQS event source mapping, EventBridge rule delivery:
//! [`crate::mappings`]). `outbox-local trace` adds them to the event's timeline
//! ([`Journal::stages_of`], marked `recorded by the local runtime`).
//!
//! One JSON object a line in `<state dir>/`[`FILE`] (`.local/<stack>/timeline.jsonl`):
//! `{"event_id", "stage": "published" | "delivered", "who", "at", "detail"?}`.
//! Off the hot path and best effort: a record is a non-blocking send to a writer thread, which
//! writes through a buffer and flushes when it has nothing more to write; a full channel drops
//! the record, a failed write is a warning; neither ever fails a delivery. Bounded: past
//! [`MAX_BYTES`] the file becomes `timeline.jsonl.1` (the one before is dropped) and a new one
//! starts, so the journal holds at most about twice that.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use chrono::{DateTime, SecondsFormat, Utc};
use outbox_cli::trace::timeline::{Stage, StageKind, LOCAL_RUNTIME};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The journal's file name in the state directory.
pub const FILE: &str = "timeline.jsonl";

/// Size past which the file is rotated, bytes.
pub const MAX_BYTES: u64 = 8 * 1024 * 1024;

/// Records waiting for the writer before new ones are dropped.
const QUEUED: usize = 16 * 1024;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The event's id (`detail.metadata.id`).
    pub event_id: String,
    /// `published` or `delivered`.
    pub stage: String,
    /// The bus, or the function (and queue) it was delivered to.
    pub who: String,
    /// RFC 3339 UTC, milliseconds.
    pub at: String,
    /// E.g. the attempt number of a retried delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Record {
    /// The record of `stage` of `event_id` to `who`, now.
    pub fn now(event_id: &str, stage: StageKind, who: &str) -> Self {
        Self::at(event_id, stage, who, Utc::now())
    }

    /// The record of `stage` of `event_id` to `who` at `time`.
    pub fn at(event_id: &str, stage: StageKind, who: &str, time: DateTime<Utc>) -> Self {
        Self {
            event_id: event_id.to_owned(),
            stage: stage.name().to_owned(),
            who: who.to_owned(),
            at: time.to_rfc3339_opts(SecondsFormat::Millis, true),
            detail: None,
        }
    }

    /// This record with `detail`.
    #[must_use]
    pub fn with_detail(self, detail: impl Into<String>) -> Self {
        Self { detail: Some(detail.into()), ..self }
    }

    /// The timeline stage it stands for (`None`: a stage this version does not know).
    pub fn stage(&self) -> Option<Stage> {
        let kind = match self.stage.as_str() {
            "published" => StageKind::Published,
            "delivered" => StageKind::Delivered,
            _ => return None,
        };
        let stage = Stage::parse(kind, Some(self.who.clone()), &self.at)?.recorded_by(LOCAL_RUNTIME);
        Some(match &self.detail {
            Some(d) => stage.with_detail(d.clone()),
            None => stage,
        })
    }
}

enum Message {
    Record(Record),
    Flush(mpsc::Sender<()>),
}

/// The journal of one state directory: records go to its writer thread.
#[derive(Debug)]
pub struct Journal {
    sender: SyncSender<Message>,
    path: PathBuf,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("journal message")
    }
}

impl Journal {
    /// The journal in `state_dir` (created when missing), appended to by a writer thread.
    ///
    /// # Errors
    /// The directory or the file cannot be created, or the thread not started.
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(state_dir)?;
        let path = state_dir.join(FILE);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let written = file.metadata()?.len();
        let (sender, receiver) = mpsc::sync_channel(QUEUED);
        let writer = Writer { path: path.clone(), out: BufWriter::new(file), written };
        std::thread::Builder::new().name("timeline-journal".into()).spawn(move || writer.run(&receiver))?;
        Ok(Self { sender, path })
    }

    /// Where it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues `record` for writing; never blocks (a full queue drops it, with a warning).
    pub fn record(&self, record: Record) {
        match self.sender.try_send(Message::Record(record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => tracing::warn!("timeline journal: the writer is behind, a record was dropped"),
            Err(TrySendError::Disconnected(_)) => tracing::warn!("timeline journal: the writer has stopped, a record was dropped"),
        }
    }

    /// Waits (at most a second) until everything recorded before is written to the file.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.sender.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(std::time::Duration::from_secs(1));
        }
    }

    /// The stages recorded for `event_id` in `state_dir`'s journal (the rotated file's first),
    /// as timeline stages recorded by the local runtime; none when there is no journal.
    pub fn stages_of(state_dir: &Path, event_id: &str) -> Vec<Stage> {
        let path = state_dir.join(FILE);
        let mut stages = Vec::new();
        for file in [rotated(&path), path] {
            let Ok(f) = File::open(&file) else { continue };
            for line in BufReader::new(f).lines().map_while(Result::ok) {
                // Cheap before parsing: most lines are other events'.
                if !line.contains(event_id) {
                    continue;
                }
                match serde_json::from_str::<Record>(&line) {
                    Ok(r) if r.event_id == event_id => stages.extend(r.stage()),
                    Ok(_) => {}
                    Err(e) => tracing::debug!(file = %file.display(), error = %e, "timeline journal: a line is not a record"),
                }
            }
        }
        stages
    }

    /// Records `published` at `received` for each entry of a `PutEvents` `request` that its
    /// `answer` accepted (an `EventId` and no `ErrorCode`), by the event id in the entry's detail
    /// (entries that hold none, e.g. not this project's events, are skipped), on bus `who`.
    /// `received` is when the call arrived: moto delivers to the rules' queues *inside* the call,
    /// so a function may be handed the event before the answer leaves; the arrival keeps
    /// published before delivered.
    pub fn record_put_events(&self, who: &str, received: DateTime<Utc>, request: &Value, answer: &Value) {
        let now = received;
        let entries = request.get("Entries").and_then(Value::as_array).into_iter().flatten();
        let answers = answer.get("Entries").and_then(Value::as_array).into_iter().flatten();
        for (entry, answered) in entries.zip(answers) {
            if answered.get("EventId").is_none() || answered.get("ErrorCode").is_some_and(|c| !c.is_null()) {
                continue;
            }
            let bus = entry.get("EventBusName").and_then(Value::as_str).map(|b| format!("{who} {}", bus_name(b))).unwrap_or_else(|| who.to_owned());
            let detail = entry.get("Detail").or_else(|| entry.get("Data")).unwrap_or(&Value::Null);
            if let Some(id) = event_id_in(detail) {
                let record = Record::at(&id, StageKind::Published, &bus, now);
                self.record(match answered.get("SuccessCode").and_then(Value::as_str) {
                    Some("DEDUPLICATED") => record.with_detail("deduplicated: the bus had it already"),
                    _ => record,
                });
            }
        }
    }
}

/// The rotated file beside `path` (`timeline.jsonl.1`).
fn rotated(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// The name of a bus given by name or ARN.
fn bus_name(bus: &str) -> &str {
    bus.rsplit_once('/').map_or(bus, |(_, name)| name)
}

/// The event id of this project's event in `value`: the `id` of the first object named
/// `metadata` (an EventBridge event's `detail.metadata`, a Custom bus message's `Data`, a
/// `Detail` string of JSON), searched at most a few levels deep.
pub fn event_id_in(value: &Value) -> Option<String> {
    fn find(value: &Value, depth: usize) -> Option<String> {
        if depth == 0 {
            return None;
        }
        match value {
            Value::Object(map) => map
                .get("metadata")
                .and_then(|m| m.get("id"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| map.values().find_map(|v| find(v, depth - 1))),
            Value::String(text) if text.contains("\"metadata\"") => serde_json::from_str::<Value>(text).ok().and_then(|v| find(&v, depth - 1)),
            _ => None,
        }
    }
    find(value, 4)
}

/// The writer thread's side.
struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
}

impl Writer {
    fn run(mut self, receiver: &Receiver<Message>) {
        let mut warned = false;
        while let Ok(first) = receiver.recv() {
            let mut next = Some(first);
            // Everything queued, then one flush.
            while let Some(message) = next {
                match message {
                    Message::Record(r) => {
                        if let Err(e) = self.write(&r) {
                            if !warned {
                                tracing::warn!(file = %self.path.display(), error = %e, "timeline journal: cannot write (later failures are not logged)");
                                warned = true;
                            }
                        }
                    }
                    Message::Flush(done) => {
                        let _ = self.out.flush();
                        let _ = done.send(());
                    }
                }
                next = receiver.try_recv().ok();
            }
            let _ = self.out.flush();
        }
        let _ = self.out.flush();
    }

    fn write(&mut self, record: &Record) -> std::io::Result<()> {
        if self.written >= MAX_BYTES {
            self.out.flush()?;
            std::fs::rename(&self.path, rotated(&self.path))?;
            self.out = BufWriter::new(OpenOptions::new().create(true).append(true).open(&self.path)?);
            self.written = 0;
        }
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.out.write_all(&line)?;
        self.written += line.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("outbox-local-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn records_are_read_back_as_the_events_stages() {
        let dir = temp_dir("read");
        let journal = Journal::open(&dir).expect("journal");
        let t = DateTime::parse_from_rfc3339("2026-12-04T12:00:00.135Z").expect("time").with_timezone(&Utc);
        journal.record(Record::at("e-1", StageKind::Published, "bus orders", t));
        journal.record(Record::at("e-2", StageKind::Published, "bus orders", t));
        journal.record(Record::at("e-1", StageKind::Delivered, "InventoryFunction", t).with_detail("attempt 2"));
        journal.flush();
        let stages = Journal::stages_of(&dir, "e-1");
        assert_eq!(stages.len(), 2);
        assert_eq!(
            (stages[0].stage, stages[0].who.as_deref(), stages[0].at.as_str()),
            (StageKind::Published, Some("bus orders"), "2026-12-04T12:00:00.135Z")
        );
        assert_eq!(stages[1].detail.as_deref(), Some("attempt 2"));
        assert!(stages.iter().all(|s| s.recorded_by.as_deref() == Some(LOCAL_RUNTIME)));
        assert!(Journal::stages_of(&dir.join("none"), "e-1").is_empty(), "no journal, no stages");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn accepted_put_events_entries_are_published_by_their_event_id() {
        let dir = temp_dir("put");
        let journal = Journal::open(&dir).expect("journal");
        let detail = |id: &str| json!({"metadata": {"id": id, "type": "OrderCreated"}, "data": {}}).to_string();
        let request = json!({"Entries": [
            {"EventBusName": "arn:aws:events:us-east-1:123456789012:event-bus/orders", "Detail": detail("e-1")},
            {"EventBusName": "orders", "Detail": detail("e-2")},
            {"EventBusName": "orders", "Detail": "{\"not\": \"ours\"}"},
        ]});
        let answer = json!({"FailedEntryCount": 1, "Entries": [{"EventId": "a"}, {"ErrorCode": "InternalFailure"}, {"EventId": "c"}]});
        journal.record_put_events("classic bus", Utc::now(), &request, &answer);
        journal.flush();
        let stages = Journal::stages_of(&dir, "e-1");
        assert_eq!(stages.len(), 1);
        assert_eq!(stages[0].who.as_deref(), Some("classic bus orders"));
        assert!(Journal::stages_of(&dir, "e-2").is_empty(), "a failed entry was not published");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_event_id_is_found_in_every_shape_a_delivery_has() {
        let metadata = json!({"id": "e-1", "type": "OrderCreated"});
        assert_eq!(event_id_in(&json!({"detail": {"metadata": metadata}})).as_deref(), Some("e-1"), "an EventBridge event");
        assert_eq!(event_id_in(&json!({"Data": {"metadata": metadata}, "Metadata": {}})).as_deref(), Some("e-1"), "a Custom bus message");
        assert_eq!(event_id_in(&json!(json!({"metadata": metadata}).to_string())).as_deref(), Some("e-1"), "a Detail string");
        assert_eq!(event_id_in(&json!({"detail": {"orderId": "o-1"}})), None);
    }

    #[test]
    fn past_its_size_the_file_is_rotated_and_both_are_read() {
        let dir = temp_dir("rotate");
        std::fs::create_dir_all(&dir).expect("dir");
        // A file already at the limit: the next record starts a new one.
        let old = serde_json::to_string(&Record::now("e-1", StageKind::Published, "bus")).expect("json");
        let filler = format!("{old}\n{}", " ".repeat(MAX_BYTES as usize));
        std::fs::write(dir.join(FILE), filler).expect("write");
        let journal = Journal::open(&dir).expect("journal");
        journal.record(Record::now("e-1", StageKind::Delivered, "F"));
        journal.flush();
        assert!(dir.join(format!("{FILE}.1")).is_file());
        assert!(std::fs::metadata(dir.join(FILE)).expect("new file").len() < 1024);
        let kinds: Vec<StageKind> = Journal::stages_of(&dir, "e-1").iter().map(|s| s.stage).collect();
        assert_eq!(kinds, [StageKind::Published, StageKind::Delivered]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
