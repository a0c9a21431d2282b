//! [`Consumer`]: decode → route by `detail-type` → your handler → inbox claim and your writes in
//! one transaction → answer; dead-letter what can never succeed, fail what may (see the
//! [consumer module docs](super)).

use std::collections::BTreeMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::handler::FnHandler;
use super::message::Message;
use super::metrics;
use super::tx::SETTLED_ELSEWHERE;
use super::{checked, decode_data, ConsumerError, DeadLetterSink, DeliveredEvent, EventHandler, Fallback, HandlerError, MalformedEvent, Tx};
use crate::envelope::EventMetadata;
use crate::inbox::{InboxError, InboxOutcome, InboxStore, PayloadHash, RecordedOutcome};
use crate::ordering::{ParkedEvent, Sequencing};
use crate::writer::OutboxWriter;
use tracing::Instrument;

/// How a delivery ended. Serialises as the outcome `O` itself when applied, else as
/// `"nothing_to_do"`, `"duplicate"`, `"parked"` or `"dead_lettered"`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Handled<O> {
    /// The handler's writes committed with the inbox claim; its outcome.
    Applied(O),
    /// A fallback found nothing to do ([`Fallback::Duplicate`], [`Fallback::NothingToDo`]): the
    /// inbox claim was recorded with this reason (and the aggregate's sequence advanced), none of
    /// the handler's writes.
    NothingToDo(String),
    /// The event was applied before (same consumer, same event id): nothing was written.
    Duplicate,
    /// Ordering: the event arrived before its predecessor (sequence `waits_for`) was applied; it
    /// was parked in the inbox table and is applied when the predecessor is
    /// ([`ParkedEvent`](crate::ordering::ParkedEvent)).
    Parked {
        /// The sequence it waits for.
        waits_for: u64,
    },
    /// The event can never be processed and was sent to the dead-letter queue.
    DeadLettered,
}

impl<O> Handled<O> {
    /// The outcome's kind: `applied`, `nothing_to_do`, `duplicate`, `parked`, `dead_lettered`.
    pub fn kind(&self) -> &'static str {
        match self {
            Handled::Applied(_) => "applied",
            Handled::NothingToDo(_) => "nothing_to_do",
            Handled::Duplicate => "duplicate",
            Handled::Parked { .. } => "parked",
            Handled::DeadLettered => "dead_lettered",
        }
    }
}

/// What [`Consumer`]'s drain of parked events did.
#[derive(Default)]
struct Drained {
    /// Parked events settled.
    applied: u32,
    /// Their outcomes, in order.
    settled: Vec<SettledEvent>,
    /// Why some still wait (the invocation then fails).
    pending: Option<ConsumerError>,
}

impl Drained {
    /// Nothing drained: the parked rows around the applied event of `metadata` could not be read
    /// (the invocation fails; its redelivery, a duplicate, drains).
    fn unread(metadata: &EventMetadata, error: InboxError) -> Self {
        let why = format!("reading the parked events failed: {error}");
        let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
        Self { pending: Some(ConsumerError::ParkedPending { aggregate, after: metadata.sequence, why }), ..Self::default() }
    }
}

impl<O: Serialize> Serialize for Handled<O> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Handled::Applied(o) => o.serialize(serializer),
            Handled::NothingToDo(_) => serializer.serialize_str("nothing_to_do"),
            Handled::Duplicate => serializer.serialize_str("duplicate"),
            Handled::Parked { .. } => serializer.serialize_str("parked"),
            Handled::DeadLettered => serializer.serialize_str("dead_lettered"),
        }
    }
}

/// The handler's answer to Lambda: `{"outcome": …, "event_id": …}` (logged by Lambda; the local
/// runtime counts it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ConsumerResponse<O> {
    /// What happened.
    pub outcome: Handled<O>,
    /// `detail.metadata.id` (empty when the event had none).
    pub event_id: String,
    /// Ordering: the events parked behind this one that this invocation applied after it, in
    /// sequence ([`ParkedEvent`](crate::ordering::ParkedEvent)); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parked_applied: Vec<SettledEvent>,
    /// Ordering: the event's own commit proved that nothing is parked on its aggregate
    /// ([`Ordered::apply_checking_parked`](crate::ordering::Ordered::apply_checking_parked)), so no read of parked rows follows.
    #[serde(skip)]
    pub(crate) none_parked: bool,
}

/// An event settled in passing (a parked event applied after its predecessor, a message of
/// an SQS batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SettledEvent {
    /// `detail.metadata.id`.
    pub event_id: String,
    /// Its outcome as [`Handled`] serialises it (e.g. `released`, `duplicate`).
    pub outcome: String,
}

impl SettledEvent {
    /// The event and outcome of `response`.
    pub fn of<O: Serialize>(response: &ConsumerResponse<O>) -> Self {
        let outcome = match serde_json::to_value(&response.outcome) {
            Ok(serde_json::Value::String(s)) => s,
            _ => response.outcome.kind().to_owned(),
        };
        Self { event_id: response.event_id.clone(), outcome }
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a consumer retries a transient failure INSIDE the invocation, before failing it.
///
/// A transient failure ([`ConsumerError::is_transient`]: a `TransactionConflict`, throttling, a
/// 5xx or time-out of the inbox transaction, a condition that failed without a fallback, a
/// [`HandlerError::Retry`]) runs the whole delivery again — handler included, so it reads the
/// data afresh — after a backoff with full jitter, while attempts remain and the invocation's
/// deadline is more than `margin` away. Then the invocation fails, and Lambda's own retries
/// (asynchronous invocation: 2, minutes apart) and its on-failure destination take over. The SDK
/// does not retry a cancelled transaction (`TransactionCanceledException`, which carries the
/// `TransactionConflict` reason), so without this a hot item's conflicts would spend Lambda's
/// few retries. Source: DynamoDB "Transaction conflict handling",
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Most attempts of one delivery within one invocation, the first included (default 5; 1
    /// turns in-invocation retries off).
    pub max_attempts: u32,
    /// First backoff step (default 50 ms): attempt n waits a random time in
    /// `[0, min(max_backoff, base_backoff × 2^n)]`.
    pub base_backoff: Duration,
    /// Longest single backoff (default 1 s).
    pub max_backoff: Duration,
    /// Time kept before the deadline (default 1 s): no retry starts later than
    /// `deadline − margin`, leaving time to answer or dead-letter.
    pub margin: Duration,
    /// Time budget when the invocation has no deadline ([`Consumer::handle_payload`], tests):
    /// default 10 s.
    pub fallback_budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            margin: Duration::from_secs(1),
            fallback_budget: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// No retry within the invocation: the first transient failure fails it.
    pub fn none() -> Self {
        Self { max_attempts: 1, ..Self::default() }
    }
}

/// What [`Consumer::claimed`] found: the event to handle (its payload inline), or a duplicate
/// whose payload was not fetched.
#[cfg(feature = "claim-check")]
enum Claimed {
    /// The payload is inline (or decoding reports what is wrong).
    Inline,
    /// The payload fetched in place of its reference (`detail.data`, JSON text).
    Fetched(String),
    /// Applied before: nothing fetched.
    Duplicate(Box<EventMetadata>),
}

/// What the handler of a decoded event answered.
struct Called<O> {
    hash: PayloadHash,
    result: Result<O, HandlerError>,
}

/// One event type's handler with its data type erased, so one consumer holds many.
///
/// The route is given the event checked ([`checked`]: its metadata, decoded once by
/// [`Message::read`], and `detail.data` as raw JSON); it decodes only `detail.data`, into `T`.
trait Route<O>: Send + Sync {
    fn call<'a>(
        &'a self,
        metadata: &'a EventMetadata,
        data: &'a str,
        envelope_id: Option<&'a str>,
        tx: Tx<O>,
    ) -> BoxFuture<'a, Result<Called<O>, MalformedEvent>>;
}

struct Typed<T, H> {
    handler: H,
    data: PhantomData<fn() -> T>,
}

impl<T, O, H> Route<O> for Typed<T, H>
where
    T: DeserializeOwned + Send + 'static,
    O: Send + 'static,
    H: EventHandler<T, O>,
{
    fn call<'a>(
        &'a self,
        metadata: &'a EventMetadata,
        data: &'a str,
        envelope_id: Option<&'a str>,
        tx: Tx<O>,
    ) -> BoxFuture<'a, Result<Called<O>, MalformedEvent>> {
        Box::pin(async move {
            let decoded: T = decode_data(data)?;
            // The hashes of `detail.data` as delivered: a copy re-serialised by any hop (other
            // whitespace, other member order) is the same payload (PayloadHash::matches). Its
            // canonical form is a parse of `detail.data` of its own, for the hash only.
            let hash = PayloadHash::of(data);
            let delivered =
                DeliveredEvent { metadata: metadata.clone(), data: decoded, raw_data: data.to_owned(), envelope_id: envelope_id.map(str::to_owned) };
            let result = self.handler.handle(delivered, tx).await;
            Ok(Called { hash, result })
        })
    }
}

struct Inner<S, D, O> {
    store: S,
    dead_letters: D,
    writer: Option<Arc<OutboxWriter>>,
    routes: BTreeMap<String, Box<dyn Route<O>>>,
    retry: RetryPolicy,
    parked_budget: u32,
    #[cfg(feature = "claim-check")]
    claim_check: Option<crate::claim_check::ClaimCheck>,
}

/// Default most parked events one invocation applies after their predecessor
/// ([`ConsumerBuilder::parked_budget`]).
pub const DEFAULT_PARKED_BUDGET: u32 = 100;

/// A consumer: an inbox store `S`, a dead-letter sink `D` and one handler per event type, all
/// answering the outcome `O`. Build it once per cold start with [`Consumer::builder`]; clones
/// share it.
pub struct Consumer<S, D, O> {
    inner: Arc<Inner<S, D, O>>,
}

impl<S, D, O> Clone for Consumer<S, D, O> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone() }
    }
}

impl<S: InboxStore, D, O> std::fmt::Debug for Consumer<S, D, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("consumer", &self.inner.store.consumer())
            .field("event_types", &self.inner.routes.keys().collect::<Vec<_>>())
            .field("outbox", &self.inner.writer.as_ref().map(|w| w.table()))
            .finish_non_exhaustive()
    }
}

/// Builds a [`Consumer`].
pub struct ConsumerBuilder<S, D, O> {
    store: S,
    dead_letters: D,
    writer: Option<Arc<OutboxWriter>>,
    routes: BTreeMap<String, Box<dyn Route<O>>>,
    retry: RetryPolicy,
    parked_budget: u32,
    #[cfg(feature = "claim-check")]
    claim_check: Option<crate::claim_check::ClaimCheck>,
}

impl<S, D, O> std::fmt::Debug for ConsumerBuilder<S, D, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerBuilder").field("event_types", &self.routes.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl<S, D, O> Consumer<S, D, O>
where
    S: InboxStore,
    D: DeadLetterSink,
    O: Serialize + Send + 'static,
{
    /// Starts a consumer recording events in `store` (the DynamoDB [`Inbox`](crate::inbox::Inbox), or a
    /// [`MemoryInbox`](crate::inbox::MemoryInbox) in tests) and dead-lettering to `dead_letters`
    /// (a [`ConsumerDeadLetterQueue`](super::ConsumerDeadLetterQueue), an `Option` of one — `None`
    /// fails such invocations instead — or a [`MemoryDeadLetters`](super::MemoryDeadLetters)).
    pub fn builder(store: S, dead_letters: D) -> ConsumerBuilder<S, D, O> {
        ConsumerBuilder {
            store,
            dead_letters,
            writer: None,
            routes: BTreeMap::new(),
            retry: RetryPolicy::default(),
            parked_budget: DEFAULT_PARKED_BUDGET,
            #[cfg(feature = "claim-check")]
            claim_check: None,
        }
    }

    /// The inbox store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The dead-letter sink.
    pub fn dead_letters(&self) -> &D {
        &self.inner.dead_letters
    }

    /// The in-invocation retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// Handles one invocation: `payload` is the EventBridge event as Lambda delivered it. Without
    /// a deadline, the policy's `fallback_budget` bounds the retries ([`Consumer::handle_payload_until`]).
    ///
    /// # Errors
    /// See [`Consumer::handle_payload_until`].
    pub async fn handle_payload(&self, payload: &RawValue) -> Result<ConsumerResponse<O>, ConsumerError> {
        self.handle_payload_until(payload, Instant::now() + self.inner.retry.fallback_budget).await
    }

    /// Handles one invocation that must have answered by `deadline`: transient failures are
    /// retried within the invocation ([`RetryPolicy`]); what still fails fails the invocation;
    /// what can never succeed is dead-lettered at once.
    ///
    /// # Errors
    /// A retryable [`ConsumerError`] (Lambda retries it, then sends it to the on-failure
    /// destination), or a non-retryable one when the dead-letter sink refused it.
    ///
    /// Every line logged meanwhile is inside the event's span
    /// ([`event_span`](crate::envelope::event_span): `event_id`, `event_type`, `aggregate_type`,
    /// `aggregate_id`, `correlation_id`, `attempt`).
    pub async fn handle_payload_until(&self, payload: &RawValue, deadline: Instant) -> Result<ConsumerResponse<O>, ConsumerError> {
        // Boxed: the state machine below (delivery, parking, the drain of parked successors) is
        // deep enough that a caller's own `async fn` holding it inline overflows rustc's default
        // query depth when its layout is computed; one allocation per event keeps callers' futures
        // shallow.
        Box::pin(self.handle_one(&Message::read(payload.get()), deadline, true)).await
    }

    /// One event and the parked events it unblocks; the summary line at INFO for an invocation
    /// of its own (`summary`), at DEBUG for a message of a batch (the batch logs its own).
    pub(crate) async fn handle_one(&self, message: &Message<'_>, deadline: Instant, summary: bool) -> Result<ConsumerResponse<O>, ConsumerError> {
        let span = message.span();
        let response = match self.deliver(message, Delivery::Event, deadline, &span).instrument(span.clone()).await {
            Ok(response) => response,
            Err(error) => {
                if summary {
                    tracing::info!(parent: &span, outcome = "failed", error_type = error.error_type(), "invocation handled");
                } else {
                    tracing::debug!(parent: &span, outcome = "failed", error_type = error.error_type(), "event handled");
                }
                return Err(error);
            }
        };
        // Ordering: what waits for this event (or, after a park, for the predecessor that may
        // have been applied meanwhile) is applied now.
        let ordering = self.inner.store.ordering();
        let drained = match (&response.outcome, message.metadata(), ordering) {
            (Handled::DeadLettered, _, _) | (_, None, _) | (_, _, None) => Drained::default(),
            // Its commit proved nothing parked: no event waits for it, no parked copy of it.
            _ if response.none_parked => Drained::default(),
            (Handled::Parked { .. }, Some(m), Some(ordering)) => {
                self.drain(ordering, &m.aggregate_type, &m.subject, None, deadline).instrument(span.clone()).await
            }
            (outcome, Some(m), Some(ordering)) => {
                // Settled by this delivery: a parked copy of it (from an earlier delivery) goes,
                // and what waits behind the aggregate's last sequence is applied. Applied here,
                // that sequence is this event's (set by its own transaction); a duplicate reads
                // it. All read together, after the commit.
                let applied = matches!(outcome, Handled::Applied(_) | Handled::NothingToDo(_)).then_some(m.sequence);
                match ordering.parked_around(m, applied).await {
                    Ok(around) => {
                        if let Some(own) = around.own {
                            if let Err(e) = ordering.unpark(&own).await {
                                // `ordering parked` lists the row; its event is applied, so a
                                // later drain finds it a duplicate.
                                tracing::warn!(parent: &span, error = %e, "could not remove the event's own parked row; `ordering parked` lists it");
                            }
                        }
                        let first = Some((around.last, around.next));
                        self.drain(ordering, &m.aggregate_type, &m.subject, first, deadline).instrument(span.clone()).await
                    }
                    Err(e) => Drained::unread(m, e),
                }
            }
        };
        if summary {
            tracing::info!(
                parent: &span,
                outcome = response.outcome.kind(),
                parked_applied = drained.applied,
                parked_pending = drained.pending.is_some(),
                "invocation handled"
            );
        } else {
            tracing::debug!(parent: &span, outcome = response.outcome.kind(), parked_applied = drained.applied, "event handled");
        }
        match drained.pending {
            Some(pending) => {
                tracing::warn!(parent: &span, error = %pending, "parked events still wait; failing the invocation so its redelivery applies them");
                metrics::failed();
                Err(pending)
            }
            None => Ok(ConsumerResponse { parked_applied: drained.settled, ..response }),
        }
    }

    /// Applies the events parked on the aggregate behind its last applied sequence, in sequence,
    /// each as its own delivery ([`Consumer::deliver`]: its handler, its transaction with its
    /// inbox claim), until none waits, the parked budget is spent or the deadline nears.
    ///
    /// `first`: the aggregate's last sequence and the event parked behind it, as read after this
    /// invocation's event was settled ([`Ordered::parked_around`](crate::ordering::Ordered::parked_around): the sequence its own
    /// transaction applied, or the one read for a duplicate); the drain then starts from it
    /// without reading the aggregate's ordering row or the parked row again. Safe when the row has moved further meanwhile: sequences only move forward, a
    /// parked event behind the applied sequence is then applied or found a duplicate by its own
    /// transaction, and whoever moved the row further drains behind it.
    async fn drain(
        &self,
        ordering: &dyn Sequencing,
        aggregate_type: &str,
        aggregate_id: &str,
        first: Option<(u64, Option<ParkedEvent>)>,
        deadline: Instant,
    ) -> Drained {
        let aggregate = format!("{aggregate_type}#{aggregate_id}");
        let mut drained = Drained::default();
        let mut known_last = None;
        let mut read = first;
        loop {
            let (known, read_before) = (known_last.take(), read.take());
            let next: BoxFuture<'_, Result<(u64, Option<ParkedEvent>), InboxError>> = match read_before {
                Some(read) => Box::pin(std::future::ready(Ok(read))),
                None => ordering.next_parked(aggregate_type, aggregate_id, known),
            };
            let pending = |after: u64, why: String| Some(ConsumerError::ParkedPending { aggregate: aggregate.clone(), after, why });
            let (last, parked) = match next.await {
                Ok((_, None)) => return drained,
                Ok((last, Some(parked))) => (last, parked),
                Err(e) => {
                    drained.pending = pending(0, format!("reading the parked events failed: {e}"));
                    return drained;
                }
            };
            if drained.applied >= self.inner.parked_budget {
                drained.pending = pending(last, format!("this invocation applied its budget of {} parked events", self.inner.parked_budget));
                return drained;
            }
            if Instant::now() + self.inner.retry.margin >= deadline {
                drained.pending = pending(last, "the invocation's time ran out".into());
                return drained;
            }
            let message = Message::read(&parked.payload);
            let settled = match &message.not_json {
                None => {
                    let span = message.span();
                    tracing::debug!(parent: &span, waits_for = parked.waits_for, "applying a parked event");
                    let delivered: BoxFuture<'_, _> =
                        Box::pin(self.deliver(&message, Delivery::Parked { waits_for: parked.waits_for }, deadline, &span).instrument(span.clone()));
                    delivered.await
                }
                // The row holds what a RawValue once was, so this is a corrupted row: it can never succeed.
                Some(e) => self.dead_letter_text(&parked.payload, &format!("parked event {} is not JSON: {e}", parked.event_id)).await,
            };
            match settled {
                // Parked again: its predecessor moved meanwhile; whoever moved it drains.
                Ok(ConsumerResponse { outcome: Handled::Parked { .. }, .. }) => return drained,
                Ok(response) => {
                    let committed = matches!(response.outcome, Handled::Applied(_) | Handled::NothingToDo(_));
                    // A committed transaction deleted the row already (Advance::Unpark); a
                    // duplicate or a dead-lettered event's did not.
                    if !committed {
                        if let Err(e) = ordering.unpark(&parked).await {
                            drained.pending = pending(last, format!("removing the parked row of {} failed: {e}", parked.event_id));
                            return drained;
                        }
                    }
                    drained.applied += 1;
                    if committed {
                        known_last = Some(parked.sequence);
                    }
                    drained.settled.push(SettledEvent { event_id: parked.event_id.clone(), ..SettledEvent::of(&response) });
                }
                Err(e) => {
                    drained.pending = pending(last, format!("parked event {} failed: {e}", parked.event_id));
                    return drained;
                }
            }
        }
    }

    /// Dead-letters `text` (not a JSON event) with `reason`, as `MalformedEvent`.
    pub(crate) async fn dead_letter_text(&self, text: &str, reason: &str) -> Result<ConsumerResponse<O>, ConsumerError> {
        let event = serde_json::value::to_raw_value(text).map_err(|e| ConsumerError::Malformed(MalformedEvent(e.to_string())))?;
        let sent: BoxFuture<'_, _> = Box::pin(self.inner.dead_letters.send(&event, "MalformedEvent", reason));
        match sent.await {
            Ok(()) => {
                metrics::dead_lettered("MalformedEvent");
                Ok(ConsumerResponse { outcome: Handled::DeadLettered, event_id: String::new(), parked_applied: Vec::new(), none_parked: false })
            }
            Err(e) => Err(HandlerError::retry(format!("{reason}; the dead-letter queue refused it: {e}")).into()),
        }
    }

    /// One delivery: the event's handler and transaction, retried within the invocation while
    /// transient; parked when its predecessor is missing (an ordered store that parks);
    /// dead-lettered when it can never succeed.
    async fn deliver(
        &self,
        message: &Message<'_>,
        delivery: Delivery,
        deadline: Instant,
        span: &tracing::Span,
    ) -> Result<ConsumerResponse<O>, ConsumerError> {
        let policy = &self.inner.retry;
        let mut attempt = 1u32;
        let error = loop {
            span.record("attempt", attempt);
            let error = match self.process(message, delivery).await {
                Ok((metadata, outcome, none_parked)) => {
                    let kind = match &outcome {
                        Handled::Applied(_) => {
                            metrics::applied(&metadata.time);
                            "applied"
                        }
                        Handled::NothingToDo(_) => {
                            metrics::nothing_to_do();
                            "nothing_to_do"
                        }
                        Handled::Duplicate => {
                            metrics::duplicate();
                            "duplicate"
                        }
                        Handled::Parked { .. } => "parked",
                        Handled::DeadLettered => {
                            metrics::dead_lettered("Rejected");
                            "dead_lettered"
                        }
                    };
                    // The event's fields are the span's (handle_payload_until); one INFO line per
                    // invocation summarises ("invocation handled").
                    tracing::debug!(sequence = metadata.sequence, outcome = kind, "event handled");
                    return Ok(ConsumerResponse { outcome, event_id: metadata.id, parked_applied: Vec::new(), none_parked });
                }
                Err(e) => e,
            };
            if !error.is_transient() || attempt >= policy.max_attempts {
                break error;
            }
            let wait = crate::aws_error::full_jitter(policy.base_backoff, policy.max_backoff, attempt);
            if Instant::now() + wait + policy.margin >= deadline {
                break error;
            }
            tracing::warn!(error_type = error.error_type(), error = %error, attempt, wait_ms = wait.as_millis() as u64, "transient failure; retrying within the invocation");
            metrics::retried();
            tokio::time::sleep(wait).await;
            attempt += 1;
        };
        let event_id = message.event_id().unwrap_or_default().to_owned();
        if let ConsumerError::Inbox(gap @ InboxError::SequenceGap { expected, .. }) = &error {
            if let Some(parked) = self.park(message, *expected).await {
                return Ok(parked);
            }
            crate::ordering::report_gap(self.inner.store.consumer(), gap);
        }
        if error.is_retryable() {
            tracing::error!(error_type = error.error_type(), error = %error, "event failed; Lambda retries it");
            metrics::failed();
            return Err(error);
        }
        tracing::error!(error_type = error.error_type(), error = %error, "event can never be processed; dead-lettering it now");
        let reason = error.to_string();
        // The queue keeps the payload verbatim (a RawValue); read again only on this path.
        let payload = match RawValue::from_string(message.text.to_owned()) {
            Ok(payload) => payload,
            Err(e) => return self.dead_letter_text(message.text, &format!("{reason} (the payload is not JSON: {e})")).await,
        };
        // Boxed for the same reason as the store's `apply` in `commit`.
        let sent: BoxFuture<'_, _> = Box::pin(self.inner.dead_letters.send(&payload, error.error_type(), &reason));
        match sent.await {
            Ok(()) => {
                metrics::dead_lettered(error.error_type());
                Ok(ConsumerResponse { outcome: Handled::DeadLettered, event_id, parked_applied: Vec::new(), none_parked: false })
            }
            Err(send_error) => {
                tracing::error!(error = %send_error, "could not dead-letter the event; failing the invocation instead");
                metrics::failed();
                Err(error)
            }
        }
    }

    /// Parks the event of `payload`, which waits for sequence `waits_for`, when the store parks;
    /// `None` when it did not (the invocation then fails as before).
    async fn park(&self, message: &Message<'_>, waits_for: u64) -> Option<ConsumerResponse<O>> {
        let ordering = self.inner.store.ordering()?;
        let metadata = message.metadata()?;
        match ordering.park(metadata, waits_for, message.text).await {
            Ok(true) => {
                metrics::parked();
                tracing::debug!(sequence = metadata.sequence, waits_for, "event parked: it waits for its predecessor");
                Some(ConsumerResponse {
                    outcome: Handled::Parked { waits_for },
                    event_id: metadata.id.clone(),
                    parked_applied: Vec::new(),
                    none_parked: false,
                })
            }
            Ok(false) => {
                tracing::warn!(
                    sequence = metadata.sequence,
                    waits_for,
                    "another event id is parked for the same predecessor; failing the invocation instead"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not park the event; failing the invocation instead");
                None
            }
        }
    }

    /// One attempt at the event of `payload`: its handler and transaction. Also answers whether
    /// the commit proved nothing parked on the aggregate ([`Ordered::apply_checking_parked`](crate::ordering::Ordered::apply_checking_parked)).
    async fn process(&self, message: &Message<'_>, delivery: Delivery) -> Result<(EventMetadata, Handled<O>, bool), ConsumerError> {
        let envelope = message.envelope.as_ref().map_err(Clone::clone)?;
        #[cfg(feature = "claim-check")]
        let fetched = match self.claimed(message).await? {
            Claimed::Inline => None,
            Claimed::Fetched(data) => Some(data),
            Claimed::Duplicate(metadata) => return Ok((*metadata, Handled::Duplicate, false)),
        };
        let Some(route) = self.inner.routes.get(&envelope.detail_type) else {
            let known: Vec<&str> = self.inner.routes.keys().map(String::as_str).collect();
            return Err(MalformedEvent(format!("detail-type {:?} is not handled here ({})", envelope.detail_type, known.join(", "))).into());
        };
        // `detail` as split by Message::read, its metadata as decoded there: checked as
        // decode_event checks them, in its order.
        let parts = message.parts()?;
        #[cfg(feature = "claim-check")]
        let data = fetched.as_deref().or(parts.data);
        #[cfg(not(feature = "claim-check"))]
        let data = parts.data;
        let (metadata, data) = checked(&envelope.detail_type, message.decoded_metadata(), data)?;
        let tx = Tx::new(self.inner.writer.clone());
        // The handler's own events (and those of its fallbacks, built at commit) continue the
        // event's trace: a child of its context (without one, the invocation's:
        // `TraceContext::current`). With OpenTelemetry, from the event span's own context
        // (Message::span made it the child of the event's), so the ids they carry are those of
        // an exported span.
        let trace = crate::TraceContext::next_hop(metadata.trace_context().as_ref());
        let (handled, none_parked) = crate::TraceContext::scope(trace, async {
            let called = route.call(metadata, data, envelope.id.as_deref(), tx.clone()).await?;
            let outcome = called.result?;
            self.commit(metadata, &called.hash, tx, outcome, delivery).await
        })
        .await?;
        Ok((metadata.clone(), handled, none_parked))
    }

    /// `detail.data` for `detail.data_ref`: the payload fetched from S3 and verified (size,
    /// SHA-256). Events with `detail.data` (or without either, which the checks report) pass
    /// unchanged. An event the inbox already holds as applied with the reference's SHA-256
    /// ([`InboxStore::applied_sha256`]: the SHA-256 of the bytes it was applied with) is a
    /// duplicate: nothing is fetched. Any other answer, or a failed read, fetches: the
    /// transaction's claim decides, as for an inline event. `detail`'s parts and its metadata
    /// are the message's (split and decoded once, by [`Message::read`]).
    #[cfg(feature = "claim-check")]
    async fn claimed(&self, message: &Message<'_>) -> Result<Claimed, ConsumerError> {
        let Ok(super::message::Parts { metadata: Some(_), data: None, data_ref: Some(data_ref) }) = message.parts() else {
            return Ok(Claimed::Inline);
        };
        let reference: crate::envelope::PayloadRef = serde_json::from_str(data_ref).map_err(|e| MalformedEvent(format!("detail.data_ref: {e}")))?;
        // Metadata that does not decode is reported by the checks, after the fetch, as before.
        if let Some(decoded) = message.metadata() {
            let applied: BoxFuture<'_, _> = Box::pin(self.inner.store.applied_sha256(&decoded.id));
            match applied.await {
                Ok(Some(hash)) if hash.eq_ignore_ascii_case(&reference.sha256) => {
                    tracing::debug!("claim-checked event already applied; its payload is not fetched");
                    return Ok(Claimed::Duplicate(Box::new(decoded.clone())));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not read the inbox before fetching the payload; fetching it"),
            }
        }
        let Some(claim_check) = &self.inner.claim_check else {
            return Err(MalformedEvent(format!(
                "detail.data_ref: the payload is in s3://{}/{}, but this consumer has no claim check (ConsumerBuilder::claim_check)",
                reference.bucket, reference.key
            ))
            .into());
        };
        let bytes = claim_check.fetch(&reference).await?;
        let mut data = String::from_utf8(bytes)
            .map_err(|_| MalformedEvent(format!("the payload in s3://{}/{} is not UTF-8 text", reference.bucket, reference.key)))?;
        // The fetched bytes must be one JSON value (the route's decoding of `detail.data` does
        // not reject trailing text); no envelope is rebuilt around them. `detail.data` is the
        // value without the whitespace around it, as when it was read from a rebuilt detail.
        let value = serde_json::from_str::<&RawValue>(&data)
            .map_err(|e| MalformedEvent(format!("the payload in s3://{}/{} is not JSON: {e}", reference.bucket, reference.key)))?;
        let start = value.get().as_ptr() as usize - data.as_ptr() as usize;
        let end = start + value.get().len();
        data.truncate(end);
        data.drain(..start);
        Ok(Claimed::Fetched(data))
    }

    /// Commits `tx` with the inbox claim (recording the outcome on it); on a false business
    /// condition, runs the fallback and commits what it wrote instead (as many rounds as
    /// fallbacks are chained). A fallback that finds nothing to do still records the event: its
    /// inbox claim alone, so an ordered aggregate's sequence advances past it. Also answers
    /// whether the commit proved nothing parked on the aggregate.
    async fn commit(
        &self,
        metadata: &EventMetadata,
        hash: &PayloadHash,
        mut tx: Tx<O>,
        mut outcome: O,
        delivery: Delivery,
    ) -> Result<(Handled<O>, bool), ConsumerError> {
        loop {
            let (mut pending, fallback) = tx.take();
            // Claim-checked payloads of the emitted events go to S3 before the transaction that
            // references them (an aborted transaction leaves an orphan the bucket's lifecycle
            // rule deletes).
            match pending.upload_offloads().await {
                Ok(()) => {}
                #[cfg(feature = "claim-check")]
                Err(crate::transaction::CommitError::ClaimCheck(e)) => return Err(e.into()),
                Err(e) => return Err(HandlerError::retry(e).into()),
            }
            let (items, batch) = pending.into_parts();
            let recorded = RecordedOutcome::new(outcome_text(&outcome));
            match self.apply(metadata, hash, items, &recorded, delivery).await? {
                (InboxOutcome::Applied, none_parked) => return Ok((Handled::Applied(outcome), none_parked)),
                (InboxOutcome::Duplicate, _) => return Ok((Handled::Duplicate, false)),
                (InboxOutcome::BusinessConditionFailed { index, item }, _) => {
                    let failed = batch.failed_at(index, item);
                    tracing::debug!(event_id = %metadata.id, failed = %failed, "a business condition failed");
                    let Some(fallback) = fallback else { return Err(ConsumerError::ConditionFailed { event_id: metadata.id.clone(), failed }) };
                    let next = tx.fresh();
                    match fallback(failed, next.clone())? {
                        Fallback::Commit(o) => {
                            outcome = o;
                            tx = next;
                        }
                        Fallback::Duplicate => return self.nothing_to_do(metadata, hash, SETTLED_ELSEWHERE.to_owned(), delivery).await,
                        Fallback::NothingToDo(reason) => return self.nothing_to_do(metadata, hash, reason, delivery).await,
                    }
                }
            }
        }
    }

    /// The event's transaction: through the ordering layer when the store has one (the drain's
    /// event also deletes its parked row, [`Delivery::unparks`]), answering whether the commit
    /// proved nothing parked on the aggregate; else the inbox claim alone (`false`).
    async fn apply(
        &self,
        metadata: &EventMetadata,
        hash: &PayloadHash,
        items: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
        recorded: &RecordedOutcome,
        delivery: Delivery,
    ) -> Result<(InboxOutcome, bool), InboxError> {
        match self.inner.store.ordering() {
            Some(ordering) => ordering.apply(metadata, hash, items, recorded, delivery.unparks()).await,
            None => {
                // Boxed: the SDK's futures are deeply nested, and without a box the future of a
                // whole Lambda `main` exceeds rustc's default query depth when computing its layout.
                let applied: BoxFuture<'_, _> = Box::pin(self.inner.store.apply_recording(metadata, hash, items, recorded));
                Ok((applied.await?, false))
            }
        }
    }

    /// Records the event with nothing to do (`reason`): the inbox claim and the aggregate's
    /// sequence, none of the handler's writes.
    async fn nothing_to_do(
        &self,
        metadata: &EventMetadata,
        hash: &PayloadHash,
        reason: String,
        delivery: Delivery,
    ) -> Result<(Handled<O>, bool), ConsumerError> {
        let recorded = RecordedOutcome::nothing_to_do(reason.clone());
        match self.apply(metadata, hash, Vec::new(), &recorded, delivery).await? {
            (InboxOutcome::Applied, none_parked) => Ok((Handled::NothingToDo(reason), none_parked)),
            // Another delivery of the same event recorded it meanwhile.
            (InboxOutcome::Duplicate, _) => Ok((Handled::Duplicate, false)),
            // No business writes, so no business condition: only a store that misreports gets here.
            (InboxOutcome::BusinessConditionFailed { index, .. }, _) => Err(HandlerError::retry(format!(
                "event {}: the inbox store reported write {index} failed in a transaction without writes",
                metadata.id
            ))
            .into()),
        }
    }
}

/// Where a delivery's event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// The invocation's own event.
    Event,
    /// A parked event applied after its predecessor ([`Consumer::drain`]), its row waiting for
    /// `waits_for`: its transaction also deletes that row ([`Advance::Unpark`](crate::ordering::Advance::Unpark)),
    /// so a crash right after the commit cannot strand the row (the retried invocation drains
    /// from the new `last_sequence` and would never read it again), and no separate
    /// `DeleteItem` is needed.
    Parked {
        /// The sequence the parked row waits for (its key).
        waits_for: u64,
    },
}

impl Delivery {
    /// The parked row this delivery's transaction deletes, by the sequence it waits for.
    fn unparks(self) -> Option<u64> {
        match self {
            Delivery::Event => None,
            Delivery::Parked { waits_for } => Some(waits_for),
        }
    }
}

/// The outcome's text for the inbox row: a JSON string as is (`"reserved"` → `reserved`),
/// anything else as JSON.
fn outcome_text<O: Serialize>(outcome: &O) -> String {
    match serde_json::to_value(outcome) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "applied".to_owned(),
    }
}

impl<S, D, O> ConsumerBuilder<S, D, O>
where
    S: InboxStore,
    D: DeadLetterSink,
    O: Serialize + Send + 'static,
{
    /// The outbox the handlers' [`Tx::emit`] writes to (needed only by consumers that emit).
    pub fn outbox(mut self, writer: OutboxWriter) -> Self {
        self.writer = Some(Arc::new(writer));
        self
    }

    /// Routes `event_type` (the event's `detail-type`) to `handler`, a closure
    /// `|event: DeliveredEvent<T>, tx: Tx<O>| async move { …; Ok(outcome) }`. `detail.data` is
    /// decoded into `T`; a mismatch is a malformed event, dead-lettered naming the field. A second
    /// registration of the same type replaces the first.
    pub fn on<T, F, Fut>(self, event_type: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(DeliveredEvent<T>, Tx<O>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        self.handler::<T, _>(event_type, FnHandler(handler))
    }

    /// Routes `event_type` to an [`EventHandler`] implementation (share one across types with an
    /// `Arc`).
    pub fn handler<T, H>(mut self, event_type: impl Into<String>, handler: H) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        H: EventHandler<T, O> + 'static,
    {
        self.routes.insert(event_type.into(), Box::new(Typed { handler, data: PhantomData::<fn() -> T> }));
        self
    }

    /// Fetches claim-checked payloads (`detail.data_ref`) through `claim_check` before decoding,
    /// verifying size and SHA-256 (see [`crate::claim_check`]); the handler receives `data` as
    /// if it had been inline. Without it such events are malformed (dead-lettered).
    #[cfg(feature = "claim-check")]
    pub fn claim_check(mut self, claim_check: crate::claim_check::ClaimCheck) -> Self {
        self.claim_check = Some(claim_check);
        self
    }

    /// How transient failures are retried within the invocation (default [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Ordering: the most parked events one invocation applies after their predecessor (default
    /// [`DEFAULT_PARKED_BUDGET`]; the invocation's deadline less the retry policy's margin bounds
    /// it too). Beyond it the invocation fails with [`ConsumerError::ParkedPending`] and the
    /// redelivery of its event carries on ([`ParkedEvent`](crate::ordering::ParkedEvent)).
    pub fn parked_budget(mut self, events: u32) -> Self {
        self.parked_budget = events;
        self
    }

    /// The consumer.
    pub fn build(self) -> Consumer<S, D, O> {
        Consumer {
            inner: Arc::new(Inner {
                store: self.store,
                dead_letters: self.dead_letters,
                writer: self.writer,
                routes: self.routes,
                retry: self.retry,
                parked_budget: self.parked_budget,
                #[cfg(feature = "claim-check")]
                claim_check: self.claim_check,
            }),
        }
    }
}
