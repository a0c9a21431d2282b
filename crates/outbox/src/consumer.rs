//! Reading an event as a consumer receives it from an EventBridge rule.
//!
//! The Lambda target gets the EventBridge envelope (`id`, `detail-type`, `source`, `time`,
//! `detail`, …). This module checks that `detail` follows the envelope of
//! [`crate::envelope`] (`{"metadata": …, "data": …}`), that `detail-type`/`source` agree with the
//! metadata, and decodes `data` into the consumer's own type, naming the offending field when
//! anything is wrong. Such an event is *malformed*: no retry can fix it, so
//! [`ConsumerDeadLetterQueue`] sends it to the dead-letter queue on the first attempt instead of
//! letting Lambda retry it (the asynchronous-invocation retries are for failures that may pass).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dead_letter::{ConsumerFailureRecord, CONSUMER_FAILURE_KIND};
use crate::envelope::EventMetadata;

/// An event as a Lambda EventBridge target receives it, with `detail` kept as raw JSON so that
/// nothing in it is rounded before the consumer decodes it.
pub type RawEventBridgeEvent = EventBridgeEvent<Box<RawValue>>;

/// The invocation payload of a consumer, undecoded. Consumers take this rather than
/// [`RawEventBridgeEvent`] so that an event without `detail-type` or `source` reaches their code
/// (and the dead-letter queue, with the reason) instead of failing in the runtime's
/// deserialisation, which Lambda would retry as if it could pass.
pub type RawEvent = Box<RawValue>;

/// Reads the EventBridge envelope of `payload`.
///
/// # Errors
/// [`MalformedEvent`] naming what is missing (`detail-type`, `source`, `detail`).
pub fn decode_envelope(payload: &RawValue) -> Result<RawEventBridgeEvent, MalformedEvent> {
    serde_json::from_str(payload.get()).map_err(|e| MalformedEvent(format!("not an EventBridge event: {e}")))
}

/// A delivered event, decoded.
#[derive(Debug, Clone)]
pub struct DeliveredEvent<T> {
    /// `detail.metadata`; `metadata.id` is the idempotency key.
    pub metadata: EventMetadata,
    /// `detail.data`, decoded.
    pub data: T,
    /// `detail.data` as delivered (JSON text), for hashing.
    pub raw_data: String,
    /// The EventBridge envelope id of this delivery (differs between duplicates).
    pub envelope_id: Option<String>,
}

/// Why a delivered event can never be processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MalformedEvent(pub String);

#[derive(Deserialize)]
struct DetailParts<'a> {
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

/// Decodes `event` into [`DeliveredEvent<T>`].
///
/// # Errors
/// [`MalformedEvent`] naming the field: `detail` not an object (e.g. a JSON string), missing
/// `detail.metadata` or `detail.data`, a metadata field missing or of the wrong type,
/// `detail-type` different from `detail.metadata.type`, or `data` not matching `T`.
pub fn decode_event<T: DeserializeOwned>(event: &RawEventBridgeEvent) -> Result<DeliveredEvent<T>, MalformedEvent> {
    let detail = event.detail.get();
    if !detail.trim_start().starts_with('{') {
        return Err(MalformedEvent(format!("detail must be a JSON object, got {}", json_kind(detail))));
    }
    let parts: DetailParts<'_> = serde_json::from_str(detail).map_err(|e| MalformedEvent(format!("detail: {e}")))?;
    let metadata = parts.metadata.ok_or_else(|| MalformedEvent("detail.metadata is missing".into()))?;
    let data = parts.data.ok_or_else(|| MalformedEvent("detail.data is missing".into()))?;
    let metadata: EventMetadata = decode_at("detail.metadata", metadata.get())?;
    if metadata.id.trim().is_empty() {
        return Err(MalformedEvent("detail.metadata.id is empty".into()));
    }
    if event.detail_type != metadata.event_type {
        return Err(MalformedEvent(format!("detail-type {:?} differs from detail.metadata.type {:?}", event.detail_type, metadata.event_type)));
    }
    let decoded: T = decode_at("detail.data", data.get())?;
    Ok(DeliveredEvent { metadata, data: decoded, raw_data: data.get().to_owned(), envelope_id: event.id.clone() })
}

/// A consumer's own route to its dead-letter queue, for events no retry can fix.
#[derive(Debug, Clone)]
pub struct ConsumerDeadLetterQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    consumer: String,
}

impl ConsumerDeadLetterQueue {
    /// Sends to the queue at `url` on behalf of `consumer`.
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>, consumer: impl Into<String>) -> Self {
        Self { sqs, url: url.into(), consumer: consumer.into() }
    }

    /// Sends a [`ConsumerFailureRecord`] holding `event` (as received) and the reason.
    /// The message attributes `error_type` and `reason` repeat them for the SQS console.
    ///
    /// # Errors
    /// The SQS error as text; the caller must then fail the invocation so nothing is lost.
    pub async fn send(&self, event: &RawValue, error_type: &str, reason: &str) -> Result<(), String> {
        // The event is embedded verbatim (a RawValue), so no number is rounded.
        #[derive(Deserialize)]
        struct Envelope<'a> {
            #[serde(borrow)]
            detail: Option<Detail<'a>>,
        }
        #[derive(Deserialize)]
        struct Detail<'a> {
            #[serde(borrow)]
            metadata: Option<Metadata<'a>>,
        }
        #[derive(Deserialize)]
        struct Metadata<'a> {
            #[serde(borrow)]
            id: Option<std::borrow::Cow<'a, str>>,
        }
        let event_id = serde_json::from_str::<Envelope<'_>>(event.get())
            .ok()
            .and_then(|e| e.detail)
            .and_then(|d| d.metadata)
            .and_then(|m| m.id)
            .map(|id| id.into_owned());
        let event_raw = event;
        let record = ConsumerFailureRecord {
            kind: CONSUMER_FAILURE_KIND.into(),
            consumer: self.consumer.clone(),
            error_type: error_type.into(),
            reason: reason.into(),
            event_id,
            failed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            event: event_raw,
        };
        let body = serde_json::to_string(&record).map_err(|e| e.to_string())?;
        crate::dead_letter::send(&self.sqs, &self.url, body, &[("error_type", error_type), ("reason", reason)]).await
    }
}

fn decode_at<T: DeserializeOwned>(prefix: &str, json: &str) -> Result<T, MalformedEvent> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { prefix.to_owned() } else { format!("{prefix}.{path}") };
        MalformedEvent(format!("{path}: {}", e.inner()))
    })
}

fn json_kind(json: &str) -> &'static str {
    match json.trim_start().chars().next() {
        Some('"') => "a string",
        Some('[') => "an array",
        Some('n') => "null",
        Some('t' | 'f') => "a boolean",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Data {
        n: u32,
    }

    fn event(detail: &str) -> RawEventBridgeEvent {
        serde_json::from_str(&format!(
            r#"{{"version":"0","id":"env-1","detail-type":"T","source":"s","time":"2026-11-29T08:00:00Z","region":"us-east-1","resources":[],"detail":{detail}}}"#
        ))
        .unwrap()
    }

    const META: &str = r#"{"id":"e-1","type":"T","version":1,"source":"s","time":"2026-11-29T08:00:00.000Z","subject":"a","aggregate_type":"A","sequence":1,"correlation_id":"c"}"#;

    #[test]
    fn decodes_a_well_formed_event() {
        let ev = decode_event::<Data>(&event(&format!(r#"{{"metadata":{META},"data":{{"n":3}}}}"#))).unwrap();
        assert_eq!(ev.metadata.id, "e-1");
        assert_eq!(ev.data.n, 3);
        assert_eq!(ev.raw_data, r#"{"n":3}"#);
        assert_eq!(ev.envelope_id.as_deref(), Some("env-1"));
    }

    #[test]
    fn names_what_is_wrong() {
        let err = |d: &str| decode_event::<Data>(&event(d)).unwrap_err().0;
        assert!(err(r#""{\"metadata\":1}""#).contains("detail must be a JSON object, got a string"));
        assert!(err(r#"{"data":{"n":1}}"#).contains("detail.metadata is missing"));
        assert!(err(&format!(r#"{{"metadata":{META}}}"#)).contains("detail.data is missing"));
        assert!(err(&format!(r#"{{"metadata":{META},"data":{{"n":"x"}}}}"#)).starts_with("detail.data.n: invalid type"));
        assert!(err(r#"{"metadata":{"id":"e"},"data":{}}"#).starts_with("detail.metadata: missing field"));
        let wrong_type = META.replace(r#""type":"T""#, r#""type":"U""#);
        assert!(err(&format!(r#"{{"metadata":{wrong_type},"data":{{"n":1}}}}"#)).contains("differs from detail.metadata.type"));
    }
}
