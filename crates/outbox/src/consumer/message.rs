//! One invocation payload, read once ([`Message`]): the EventBridge envelope, `detail.metadata`
//! (strictly, and leniently for a malformed event's span and dead-letter record) and the event
//! id, all taken from one parse of the body. The consumer passes this value from the SQS batch
//! (or the direct invocation) to the span, the delivery, parking, the drain and the dead-letter
//! queue; only the handler's `detail.data` is decoded later, into its own type.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{MalformedEvent, RawEventBridgeEvent};
use crate::envelope::EventMetadata;

#[cfg(test)]
thread_local! {
    /// Parses of a message body on this thread ([`Message::read`], and the lenient read of a
    /// malformed one): the test of "one read per message" counts them.
    pub(crate) static BODY_PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn counted() {
    #[cfg(test)]
    BODY_PARSES.with(|n| n.set(n.get() + 1));
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
}

/// The detail's parts, as raw JSON.
#[derive(Deserialize)]
struct Detail<'a> {
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

/// An invocation payload (an EventBridge event, or an SQS message's body), read once.
#[derive(Debug)]
pub(crate) struct Message<'a> {
    /// The payload text as received (what parking and the dead-letter queue store).
    pub(crate) text: &'a str,
    /// The envelope, or why the payload is not one.
    pub(crate) envelope: Result<RawEventBridgeEvent, MalformedEvent>,
    /// `detail.metadata`, strictly decoded (`None`: missing or malformed).
    pub(crate) metadata: Option<EventMetadata>,
    /// `detail.metadata`, leniently.
    loose: LooseMetadata,
    /// The payload is not JSON at all (the parser's message).
    pub(crate) not_json: Option<String>,
}

impl<'a> Message<'a> {
    /// Reads `text`: ONE parse of the body (the envelope, `detail` kept raw), then of
    /// `detail.metadata`. A payload that is not an EventBridge event is read a second time,
    /// leniently, for whatever metadata it carries (its span and dead-letter record).
    pub(crate) fn read(text: &'a str) -> Self {
        counted();
        let (envelope, not_json) = match serde_json::from_str::<RawEventBridgeEvent>(text) {
            Ok(envelope) => (Ok(envelope), None),
            Err(e) => {
                let not_json = matches!(e.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof).then(|| e.to_string());
                (Err(MalformedEvent(format!("not an EventBridge event: {e}"))), not_json)
            }
        };
        let (metadata, loose) = match &envelope {
            Ok(envelope) => metadata_of(envelope.detail.get()),
            Err(_) if not_json.is_none() => {
                counted();
                #[derive(Deserialize)]
                struct Lenient<'b> {
                    #[serde(borrow, default)]
                    detail: Option<&'b RawValue>,
                }
                match serde_json::from_str::<Lenient<'_>>(text).ok().and_then(|l| l.detail) {
                    Some(detail) => metadata_of(detail.get()),
                    None => (None, LooseMetadata::default()),
                }
            }
            Err(_) => (None, LooseMetadata::default()),
        };
        Self { text, envelope, metadata, loose, not_json }
    }

    /// `detail.metadata.id`, if the payload has one.
    pub(crate) fn event_id(&self) -> Option<&str> {
        self.loose.id.as_deref()
    }

    /// The [`event_span`](crate::envelope::event_span) of the payload, from whatever of
    /// `detail.metadata` it has (a malformed event's span still carries its id when it has one).
    pub(crate) fn span(&self) -> tracing::Span {
        let m = &self.loose;
        let text = |t: &Option<String>| t.as_deref().unwrap_or_default().to_owned();
        crate::envelope::event_span(&text(&m.id), &text(&m.event_type), &text(&m.aggregate_type), &text(&m.subject), &text(&m.correlation_id))
    }
}

/// `detail.metadata` of a detail (JSON text): strictly, and leniently.
fn metadata_of(detail: &str) -> (Option<EventMetadata>, LooseMetadata) {
    let Some(metadata) = serde_json::from_str::<Detail<'_>>(detail).ok().and_then(|d| d.metadata) else {
        return (None, LooseMetadata::default());
    };
    let strict = serde_json::from_str::<EventMetadata>(metadata.get()).ok();
    let loose = match &strict {
        Some(m) => LooseMetadata {
            id: Some(m.id.clone()),
            event_type: Some(m.event_type.clone()),
            aggregate_type: Some(m.aggregate_type.clone()),
            subject: Some(m.subject.clone()),
            correlation_id: Some(m.correlation_id.clone()),
        },
        None => serde_json::from_str(metadata.get()).unwrap_or_default(),
    };
    (strict, loose)
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

    /// The body parses counted since the last call.
    fn parses() -> usize {
        BODY_PARSES.with(|n| n.replace(0))
    }

    /// The consumer's happy path reads a message body once: a direct invocation, and each
    /// message of an SQS batch, through an ordered store (its commit proves nothing parked).
    #[tokio::test]
    async fn the_happy_path_reads_each_message_body_once() {
        let consumer = Consumer::builder(Ordered::new(MemoryInbox::new("c")), MemoryDeadLetters::new())
            .on::<serde_json::Value, _, _>("OrderCreated", |_event, _tx| async { Ok::<_, HandlerError>("done") })
            .build();
        parses();
        let direct = RawValue::from_string(event("e-1", 1)).unwrap();
        assert_eq!(consumer.handle_payload(&direct).await.unwrap().outcome.kind(), "applied");
        assert_eq!(parses(), 1, "a direct invocation");
        let bodies = [("m-1", event("e-2", 2)), ("m-2", event("e-3", 3))];
        let records: Vec<_> = bodies.iter().map(|(id, body)| serde_json::json!({"messageId": id, "body": body})).collect();
        let batch = RawValue::from_string(serde_json::json!({ "Records": records }).to_string()).unwrap();
        let InvocationAnswer::Batch(answer) = consumer.handle_invocation(&batch, Instant::now() + Duration::from_secs(10)).await.unwrap() else {
            panic!("an SQS event is a batch")
        };
        assert!(answer.batch_item_failures.is_empty(), "{answer:?}");
        assert_eq!(answer.outcomes.len(), 2);
        assert_eq!(parses(), 2, "one per message of a batch");
    }
}
