//! One invocation payload, read once ([`Message`]): the EventBridge envelope, `detail` split
//! into its raw parts (`metadata`, `data`, `data_ref`), `detail.metadata` (strictly, and
//! leniently for a malformed event's span and dead-letter record) and the event id, all taken
//! from one parse of the body, one split of `detail` and one decoding of the metadata. The
//! consumer passes this value from the SQS batch (or the direct invocation) to the span, the
//! delivery, parking, the drain and the dead-letter queue; only the handler's `detail.data` is
//! decoded later, once, into its own type.

use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{decode_metadata, split_detail, MalformedEvent, RawEventBridgeEvent};
use crate::envelope::EventMetadata;

/// What the consumer parses of a message: the body, `detail` (split into its parts),
/// `detail.metadata` (decoded) and `detail.data` (decoded into the handler's type).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Part {
    Body,
    Detail,
    Metadata,
    Data,
}

/// Parses counted on this thread, by [`Part`].
#[cfg(test)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parses {
    pub(crate) body: usize,
    pub(crate) detail: usize,
    pub(crate) metadata: usize,
    pub(crate) data: usize,
}

#[cfg(test)]
thread_local! {
    /// Parses of a message body, or of a part of it, on this thread ([`Message::read`], the
    /// lenient read of a malformed one, the split of `detail`, the decoding of
    /// `detail.metadata` and `detail.data`): the test of "one read per message" counts them.
    /// Not counted: [`PayloadHash::of`](crate::inbox::PayloadHash::of)'s canonical form of
    /// `detail.data` (a parse of its own, for the hash), and the parses of a claim-checked
    /// payload (its `data_ref`, the fetched bytes checked as JSON).
    pub(crate) static PARSES: std::cell::Cell<Parses> = const { std::cell::Cell::new(Parses { body: 0, detail: 0, metadata: 0, data: 0 }) };
}

/// Counts one parse of `part` (tests only).
pub(crate) fn counted(part: Part) {
    #[cfg(test)]
    PARSES.with(|n| {
        let mut p = n.get();
        match part {
            Part::Body => p.body += 1,
            Part::Detail => p.detail += 1,
            Part::Metadata => p.metadata += 1,
            Part::Data => p.data += 1,
        }
        n.set(p);
    });
    #[cfg(not(test))]
    let _ = part;
}

/// Whatever of `detail.metadata` a payload has, read leniently (a malformed event still gives
/// what it carries), owned.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LooseMetadata {
    #[serde(default)]
    id: Option<String>,
    #[serde(default, rename = "type")]
    event_type: Option<String>,
    #[serde(default)]
    aggregate_type: Option<String>,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    correlation_id: Option<String>,
    #[serde(default)]
    traceparent: Option<String>,
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code, reason = "the event span's parent (feature opentelemetry)"))]
    #[serde(default)]
    tracestate: Option<String>,
}

/// Where `detail`'s parts are in the envelope's `detail` text (`None`: missing, or `null`).
#[derive(Debug, Default, Clone)]
struct Ranges {
    metadata: Option<Range<usize>>,
    data: Option<Range<usize>>,
    data_ref: Option<Range<usize>>,
}

/// `detail`'s parts, as raw JSON text (`None`: missing, or `null`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parts<'a> {
    /// `detail.metadata` (decoded once, by [`Message::read`]: [`Message::decoded_metadata`]).
    #[cfg_attr(not(feature = "claim-check"), allow(dead_code, reason = "read by the claim check"))]
    pub(crate) metadata: Option<&'a str>,
    /// `detail.data`.
    pub(crate) data: Option<&'a str>,
    /// `detail.data_ref` (a claim-checked payload's reference).
    #[cfg_attr(not(feature = "claim-check"), allow(dead_code, reason = "read by the claim check"))]
    pub(crate) data_ref: Option<&'a str>,
}

/// An invocation payload (an EventBridge event, or an SQS message's body), read once.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    /// The payload text as received (what parking and the dead-letter queue store).
    pub(crate) text: &'a str,
    /// The envelope, or why the payload is not one.
    pub(crate) envelope: Result<RawEventBridgeEvent, MalformedEvent>,
    /// `detail` split into its parts (where they are in `envelope.detail`), or why it cannot be
    /// ([`decode_event`](super::decode_event)'s message). Meaningful when `envelope` is `Ok`.
    parts: Result<Ranges, MalformedEvent>,
    /// `detail.metadata`, strictly decoded, or why it does not decode
    /// ([`decode_event`](super::decode_event)'s message); `None`: missing.
    metadata: Option<Result<EventMetadata, MalformedEvent>>,
    /// `detail.metadata`, leniently.
    loose: LooseMetadata,
    /// The payload is not JSON at all (the parser's message).
    pub(crate) not_json: Option<String>,
}

impl<'a> Message<'a> {
    /// Reads `text`: ONE parse of the body (the envelope, `detail` kept raw), ONE split of
    /// `detail` into its parts (`metadata`, `data`, `data_ref`, kept raw) and ONE decoding of
    /// `detail.metadata`. A payload that is not an EventBridge event is read a second time,
    /// leniently, for whatever metadata it carries (its span and dead-letter record).
    pub(crate) fn read(text: &'a str) -> Self {
        counted(Part::Body);
        let (envelope, not_json) = match serde_json::from_str::<RawEventBridgeEvent>(text) {
            Ok(envelope) => (Ok(envelope), None),
            Err(e) => {
                let not_json = matches!(e.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof).then(|| e.to_string());
                (Err(MalformedEvent(format!("not an EventBridge event: {e}"))), not_json)
            }
        };
        let (parts, metadata, loose) = match &envelope {
            Ok(envelope) => read_detail(envelope.detail.get()),
            Err(e) if not_json.is_none() => {
                counted(Part::Body);
                #[derive(Deserialize)]
                struct Lenient<'b> {
                    #[serde(borrow, default)]
                    detail: Option<&'b RawValue>,
                }
                let (_, metadata, loose) = match serde_json::from_str::<Lenient<'_>>(text).ok().and_then(|l| l.detail) {
                    Some(detail) => read_detail(detail.get()),
                    None => (Ok(Ranges::default()), None, LooseMetadata::default()),
                };
                (Err(e.clone()), metadata, loose)
            }
            Err(e) => (Err(e.clone()), None, LooseMetadata::default()),
        };
        Self { text, envelope, parts, metadata, loose, not_json }
    }

    /// `detail.metadata`, if it decodes.
    pub(crate) fn metadata(&self) -> Option<&EventMetadata> {
        self.metadata.as_ref().and_then(|m| m.as_ref().ok())
    }

    /// `detail.metadata` decoded, or why it does not decode (`None`: missing).
    pub(crate) fn decoded_metadata(&self) -> Option<&Result<EventMetadata, MalformedEvent>> {
        self.metadata.as_ref()
    }

    /// `detail`'s parts as raw JSON (taken from the one split of [`Message::read`]), or why
    /// `detail` has none (the payload is not an EventBridge event, or `detail` is not an object).
    pub(crate) fn parts(&self) -> Result<Parts<'_>, MalformedEvent> {
        let envelope = self.envelope.as_ref().map_err(Clone::clone)?;
        let ranges = self.parts.as_ref().map_err(Clone::clone)?;
        let detail = envelope.detail.get();
        let part = |r: &Option<Range<usize>>| r.clone().and_then(|r| detail.get(r));
        Ok(Parts { metadata: part(&ranges.metadata), data: part(&ranges.data), data_ref: part(&ranges.data_ref) })
    }

    /// `detail.metadata.id`, if the payload has one.
    pub(crate) fn event_id(&self) -> Option<&str> {
        self.loose.id.as_deref()
    }

    /// The [`event_span`](crate::envelope::event_span) of the payload, from whatever of
    /// `detail.metadata` it has (a malformed event's span still carries its id when it has one).
    ///
    /// With feature `opentelemetry` the span continues the event's trace: its parent is the
    /// event's `traceparent` (the producer's span), and it links to the span current when it is
    /// made (the invocation's; for a message of a batch, the span current when the batch began)
    /// ([`TraceContext::continue_in`](crate::TraceContext::continue_in)).
    pub(crate) fn span(&self) -> tracing::Span {
        let m = &self.loose;
        let text = |t: &Option<String>| t.as_deref().unwrap_or_default().to_owned();
        let trace_id = crate::envelope::trace_id(m.traceparent.as_deref());
        let span = crate::envelope::event_span(
            &text(&m.id),
            &text(&m.event_type),
            &text(&m.aggregate_type),
            &text(&m.subject),
            &text(&m.correlation_id),
            trace_id,
        );
        #[cfg(feature = "opentelemetry")]
        if let Some(parent) = m.traceparent.as_deref().and_then(|t| crate::TraceContext::parse(t, m.tracestate.as_deref()).ok()) {
            crate::TraceContext::continue_in(&parent, &span);
        }
        span
    }
}

/// A detail (JSON text) split into its parts (where they are in `detail`), and its
/// `detail.metadata` strictly and leniently.
type ReadDetail = (Result<Ranges, MalformedEvent>, Option<Result<EventMetadata, MalformedEvent>>, LooseMetadata);

fn read_detail(detail: &str) -> ReadDetail {
    let parts = match split_detail(detail) {
        Ok(parts) => parts,
        Err(e) => return (Err(e), None, LooseMetadata::default()),
    };
    // A part borrowed from `detail` is a slice of it: its place in `detail`.
    let range = |part: Option<&RawValue>| {
        part.map(|p| {
            let start = p.get().as_ptr() as usize - detail.as_ptr() as usize;
            start..start + p.get().len()
        })
    };
    let ranges = Ranges { metadata: range(parts.metadata), data: range(parts.data), data_ref: range(parts.data_ref) };
    let Some(metadata) = parts.metadata else {
        return (Ok(ranges), None, LooseMetadata::default());
    };
    let strict = decode_metadata(metadata.get());
    let loose = match &strict {
        Ok(m) => LooseMetadata {
            id: Some(m.id.clone()),
            event_type: Some(m.event_type.clone()),
            aggregate_type: Some(m.aggregate_type.clone()),
            subject: Some(m.subject.clone()),
            correlation_id: Some(m.correlation_id.clone()),
            traceparent: m.traceparent.clone(),
            tracestate: m.tracestate.clone(),
        },
        Err(_) => {
            counted(Part::Metadata);
            serde_json::from_str(metadata.get()).unwrap_or_default()
        }
    };
    (Ok(ranges), Some(strict), loose)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::consumer::{Consumer, HandlerError, InvocationAnswer, MemoryDeadLetters};
    use crate::inbox::MemoryInbox;
    use crate::ordering::Ordered;

    fn event(id: &str, sequence: u64) -> String {
        serde_json::json!({
            "version": "0", "id": "envelope", "detail-type": "OrderCreated", "source": "s", "time": "2026-11-29T08:00:00Z",
            "region": "us-east-1", "resources": [],
            "detail": {
                "metadata": {"id": id, "type": "OrderCreated", "version": 1, "source": "s", "time": "2026-11-29T08:00:00.000Z",
                             "subject": "o-1", "aggregate_type": "Order", "sequence": sequence, "correlation_id": "c"},
                "data": {"n": 1}
            }
        })
        .to_string()
    }

    /// The parses counted since the last call.
    fn parses() -> Parses {
        PARSES.with(|n| n.replace(Parses::default()))
    }

    /// `n` messages' worth: per message, one parse of the body, one split of `detail`, one
    /// decoding of `detail.metadata` and one of `detail.data` (into the handler's type).
    fn each_once(n: usize) -> Parses {
        Parses { body: n, detail: n, metadata: n, data: n }
    }

    /// The consumer's happy path reads a message body, and each part of it, once: a direct
    /// invocation, and each message of an SQS batch, through an ordered store (its commit
    /// proves nothing parked). The canonical form of `detail.data` for the payload hash
    /// (PayloadHash::of) is a parse of its own, not counted here.
    #[tokio::test]
    async fn the_happy_path_reads_each_message_body_once() {
        let consumer = Consumer::builder(Ordered::new(MemoryInbox::new("c")), MemoryDeadLetters::new())
            .on::<serde_json::Value, _, _>("OrderCreated", |_event, _tx| async { Ok::<_, HandlerError>("done") })
            .build();
        parses();
        let direct = RawValue::from_string(event("e-1", 1)).unwrap();
        assert_eq!(consumer.handle_payload(&direct).await.unwrap().outcome.kind(), "applied");
        assert_eq!(parses(), each_once(1), "a direct invocation");
        let bodies = [("m-1", event("e-2", 2)), ("m-2", event("e-3", 3))];
        let records: Vec<_> = bodies.iter().map(|(id, body)| serde_json::json!({"messageId": id, "body": body})).collect();
        let batch = RawValue::from_string(serde_json::json!({ "Records": records }).to_string()).unwrap();
        let InvocationAnswer::Batch(answer) = consumer.handle_invocation(&batch, Instant::now() + Duration::from_secs(10)).await.unwrap() else {
            panic!("an SQS event is a batch")
        };
        assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
        assert_eq!(answer.outcomes.len(), 2);
        assert_eq!(parses(), each_once(2), "once per message of a batch");
    }
}
