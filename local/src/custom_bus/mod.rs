//! The EventBridge Custom Event Bus (API "Amazon EventBridge Custom Event Bus", `aws eventsv2`,
//! crate `aws-sdk-eventbridgev2`), played by the local runtime: moto does not have it.
//!
//! [`front`] serves the one endpoint the runtime hands out: `/service/AWSEventsV2/operation/*`
//! is answered here, in Smithy RPC v2 CBOR (`wire.rs`); every other request is forwarded to moto
//! unchanged. The SDK talks to it through `endpoint_url` unchanged.
//!
//! * [`ops`]: the operations (buses, subscribers, `PutEvents` with groups, deduplication over
//!   300 s, a per-group `SequenceNumber`, retention).
//! * `subscriber.rs`: a subscriber's configuration as `CreateSubscriber` takes it, checked.
//! * `delivery.rs`: each subscriber's background delivery to its SQS target: FIFO per event
//!   group in publish order, a failed delivery retried per `RetryPolicy` and blocking its group
//!   ([`FifoBlocking::Group`], the default) or the whole subscriber ([`FifoBlocking::Subscriber`]),
//!   exhausted → `OnFailureConfiguration`'s queue with a record saying why; UNORDERED: no order.
//!
//! Sources: the user guide's `eb-custom-bus-*` pages and the API reference `eventbridgev2`.

mod delivery;
pub mod front;
pub mod ops;
mod subscriber;
mod target;
pub(crate) mod wire;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use subscriber::FifoBlocking;

/// How long `PutEvents` deduplicates by `DeduplicationId` (300 s: user guide,
/// eb-custom-bus-deduplication).
pub const DEDUPLICATION_WINDOW: Duration = Duration::from_secs(300);

/// The wait before the first retry of a failed delivery (doubled per attempt, at most
/// [`MAX_RETRY_DELAY`]); [`BusOptions::compressed`] divides it like the runtime's other waits.
pub const RETRY_DELAY: Duration = Duration::from_secs(1);

/// The longest wait between two delivery attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// How the local bus behaves where AWS's pages leave a choice, and its timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BusOptions {
    /// What a FIFO subscriber's failing delivery holds up (`--fifo-blocking`).
    pub blocking: FifoBlocking,
    /// The wait before the first retry of a failed delivery (then doubled, at most
    /// [`MAX_RETRY_DELAY`]).
    pub retry_delay: Duration,
}

impl Default for BusOptions {
    fn default() -> Self {
        Self { blocking: FifoBlocking::Group, retry_delay: RETRY_DELAY }
    }
}

impl BusOptions {
    /// These options with the retry wait compressed to milliseconds (the tests, the demo and the
    /// proof: `RuntimeOptions::compressed`).
    pub fn compressed(self) -> Self {
        Self { retry_delay: Duration::from_millis(20), ..self }
    }

    /// These options with `blocking`.
    pub fn with_blocking(self, blocking: FifoBlocking) -> Self {
        Self { blocking, ..self }
    }
}

/// What the bus did, since it started (the runtime's stats and `up`'s status).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BusStats {
    /// Entries `PutEvents` accepted and stored (deduplicated ones excluded).
    pub published: u64,
    /// Entries answered `DEDUPLICATED` (their `DeduplicationId` seen within 300 s).
    pub deduplicated: u64,
    /// Entries refused with a per-entry error.
    pub failed_entries: u64,
    /// Events delivered to a subscriber's target (one per subscriber).
    pub delivered: u64,
    /// Failed delivery attempts that were retried.
    pub retried: u64,
    /// Events given up on and sent to the subscriber's `OnFailureConfiguration` queue.
    pub sent_to_on_failure: u64,
    /// Events given up on without an `OnFailureConfiguration` (dropped, logged).
    pub dropped: u64,
    /// Events a subscriber's filters left out.
    pub filtered_out: u64,
}

#[derive(Debug, Default)]
struct Counters {
    published: AtomicU64,
    deduplicated: AtomicU64,
    failed_entries: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    sent_to_on_failure: AtomicU64,
    dropped: AtomicU64,
    filtered_out: AtomicU64,
}

fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// One event as the bus stores it (retained for the bus's `RetentionPeriodInDays`).
#[derive(Debug)]
struct StoredEvent {
    /// `aws:EventId`.
    id: String,
    /// `EventGroupId` (`None`: published without one).
    group: Option<String>,
    /// When the bus accepted it, epoch seconds.
    ingested: f64,
    /// The event's `Data`: the envelope `{version, id, detail-type, source, account, time,
    /// region, resources, detail}`.
    data: Value,
    /// The system metadata: `aws:EventId`, `aws:SequenceNumber`, `aws:IngestionTime`,
    /// `EventGroupId`, `DeduplicationId`.
    system_metadata: Value,
}

/// A bus.
#[derive(Debug)]
struct Bus {
    name: String,
    arn: String,
    description: Option<String>,
    retention_days: u32,
    created: f64,
    events: Vec<Arc<StoredEvent>>,
    /// The last `SequenceNumber` given per group.
    sequence: HashMap<String, u64>,
    /// `DeduplicationId` → (when, event id, sequence number) of the first publish.
    dedup: HashMap<String, (Instant, String, Option<String>)>,
}

/// A delivery waiting to be made.
#[derive(Debug, Clone)]
struct Pending {
    event: Arc<StoredEvent>,
    /// Failed attempts so far.
    attempts: u32,
    /// Not before this instant (a retry's wait).
    not_before: Instant,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

/// A subscriber with its delivery backlog.
#[derive(Debug)]
struct Subscriber {
    config: subscriber::Config,
    created: f64,
    modified: f64,
    pending: VecDeque<Pending>,
    /// The delivered count (for `DescribeSubscriber`'s callers and the tests).
    delivered: u64,
    wake: Arc<tokio::sync::Notify>,
}

#[derive(Debug, Default)]
struct State {
    buses: BTreeMap<String, Bus>,
    subscribers: BTreeMap<String, Subscriber>,
}

/// The local Custom Event Bus: its buses, subscribers and events, and their delivery.
pub struct CustomBus {
    state: Mutex<State>,
    options: Mutex<BusOptions>,
    counters: Counters,
    region: String,
    account: String,
    /// Sends to SQS targets (moto, directly: AWS's own delivery does not pass the functions'
    /// fault proxies).
    sqs: target::Sqs,
    /// Faults the plan puts on the bus's deliveries (`op = "sqs:SendMessage"`, `function` = the
    /// subscriber's name).
    faults: Mutex<Option<Arc<crate::faults::Injector>>>,
}

impl std::fmt::Debug for CustomBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomBus").field("region", &self.region).field("account", &self.account).finish_non_exhaustive()
    }
}

impl CustomBus {
    /// A bus with no resources, in `region` and `account`, delivering to the SQS of `moto`
    /// (`http://127.0.0.1:PORT`).
    pub async fn new(moto: &str, region: &str, account: &str) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            options: Mutex::new(BusOptions::default()),
            counters: Counters::default(),
            region: region.to_owned(),
            account: account.to_owned(),
            sqs: target::Sqs::new(moto, region).await,
            faults: Mutex::new(None),
        })
    }

    /// Sets the blocking mode and retry timing (the runtime's options, once known).
    pub fn configure(&self, options: BusOptions) {
        *self.options.lock().unwrap_or_else(|p| p.into_inner()) = options;
    }

    /// The options in force.
    pub fn options(&self) -> BusOptions {
        *self.options.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `injector`'s plan to the bus's deliveries: a fault whose `op` matches
    /// `sqs:SendMessage` and whose `function` is the subscriber's name (or absent) fails the
    /// delivery attempt as the target's error would.
    pub fn set_faults(&self, injector: Option<Arc<crate::faults::Injector>>) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = injector;
    }

    /// What the bus did so far.
    pub fn stats(&self) -> BusStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BusStats {
            published: load(&c.published),
            deduplicated: load(&c.deduplicated),
            failed_entries: load(&c.failed_entries),
            delivered: load(&c.delivered),
            retried: load(&c.retried),
            sent_to_on_failure: load(&c.sent_to_on_failure),
            dropped: load(&c.dropped),
            filtered_out: load(&c.filtered_out),
        }
    }

    /// Deliveries waiting (not yet delivered nor given up on), all subscribers together.
    pub fn backlog(&self) -> usize {
        self.lock().subscribers.values().map(|s| s.pending.len()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Now, epoch seconds.
fn now_epoch() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// 25 lowercase alphanumerics (the suffix of a bus or subscriber ARN).
fn arn_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string().chars().take(25).collect()
}

#[cfg(test)]
mod tests;
