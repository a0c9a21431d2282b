//! The event: a bus event as the delivery queue holds it ([`WebhookEvent`]), read from an SQS
//! body once, and put inline when its payload was claim-checked.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use outbox::envelope::EventMetadata;

/// A bus event as the delivery queue holds it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WebhookEvent {
    /// The envelope metadata (`detail.metadata`): `id` is the `webhook-id`.
    pub metadata: EventMetadata,
    /// The request body: the event's `detail`, verbatim (for a claim-checked event, until the
    /// dispatcher replaced its `data_ref` with the payload: [`WebhookEvent::with_payload`]).
    pub body: String,
    /// `detail.data_ref` of a claim-checked event (its payload is in S3, `detail.data` absent).
    pub data_ref: Option<outbox::envelope::PayloadRef>,
}

/// Why a queue message could not be read as a bus event (a dead letter `WebhookMalformedEvent`),
/// or a claim-checked event's payload could not be put inline (`PayloadCorrupt`). Each
/// message starts "the message is not an EventBridge event with the outbox envelope as detail:"
/// and keeps the JSON error as its source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotAnEvent {
    /// The body is not JSON with a `detail` member.
    #[error("the message is not an EventBridge event with the outbox envelope as detail: {0}")]
    Body(#[source] serde_json::Error),
    /// `detail` is not the outbox envelope (its `metadata` missing or malformed).
    #[error("the message is not an EventBridge event with the outbox envelope as detail: detail: {0}")]
    Detail(#[source] serde_json::Error),
    /// `detail` carries the payload both inline (`data`) and claim-checked (`data_ref`).
    #[error("the message is not an EventBridge event with the outbox envelope as detail: detail: both `data` and `data_ref`")]
    BothPayloads,
    /// `detail` carries no payload: neither `data` nor `data_ref`.
    #[error("the message is not an EventBridge event with the outbox envelope as detail: detail: neither `data` nor `data_ref`")]
    NoPayload,
    /// The claim-checked payload fetched is not JSON.
    #[error("the message is not an EventBridge event with the outbox envelope as detail: the claim-checked payload is not JSON: {0}")]
    Payload(#[source] serde_json::Error),
    /// The event with its payload inline cannot be serialised.
    #[error("the message is not an EventBridge event with the outbox envelope as detail: the event with its payload cannot be written: {0}")]
    Write(#[source] serde_json::Error),
}

impl WebhookEvent {
    /// Reads an EventBridge event (the SQS body an EventBridge rule target delivers).
    ///
    /// # Errors
    /// [`NotAnEvent`] naming what is missing, with the JSON error as its source.
    pub fn parse(message_body: &str) -> Result<Self, NotAnEvent> {
        #[derive(Deserialize)]
        struct Routed<'a> {
            #[serde(borrow)]
            detail: &'a RawValue,
        }
        /// `detail`: the envelope's metadata and its payload, inline (`data`) or claim-checked (`data_ref`).
        #[derive(Deserialize)]
        struct Detail<'a> {
            metadata: EventMetadata,
            // `deserialize_with` runs only for a present key: `"data": null` is a payload.
            #[serde(borrow, default, deserialize_with = "present")]
            data: Option<&'a RawValue>,
            data_ref: Option<outbox::envelope::PayloadRef>,
        }
        fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
            <&RawValue>::deserialize(d).map(Some)
        }
        let routed: Routed<'_> = serde_json::from_str(message_body).map_err(NotAnEvent::Body)?;
        let detail: Detail<'_> = serde_json::from_str(routed.detail.get()).map_err(NotAnEvent::Detail)?;
        let data_ref = match (detail.data, detail.data_ref) {
            (Some(_), None) => None,
            (None, Some(reference)) => Some(reference),
            (Some(_), Some(_)) => return Err(NotAnEvent::BothPayloads),
            (None, None) => return Err(NotAnEvent::NoPayload),
        };
        Ok(Self { metadata: detail.metadata, body: routed.detail.get().to_owned(), data_ref })
    }

    /// This claim-checked event with its payload inline: the body becomes
    /// `{"metadata": …, "data": <payload>}`, what the subscriber would have received had the
    /// payload fitted in the event (a subscriber never sees the S3 reference).
    ///
    /// # Errors
    /// [`NotAnEvent`] when `payload` is not JSON.
    pub fn with_payload(&self, payload: &[u8]) -> Result<Self, NotAnEvent> {
        /// The detail's metadata as the producer wrote it, and the payload.
        #[derive(Deserialize, Serialize)]
        struct Inline<'a> {
            #[serde(borrow)]
            metadata: &'a RawValue,
            #[serde(borrow, default)]
            data: Option<&'a RawValue>,
        }
        let mut detail: Inline<'_> = serde_json::from_str(&self.body).map_err(NotAnEvent::Detail)?;
        detail.data = Some(serde_json::from_slice(payload).map_err(NotAnEvent::Payload)?);
        let body = serde_json::to_string(&detail).map_err(NotAnEvent::Write)?;
        Ok(Self { metadata: self.metadata.clone(), body, data_ref: None })
    }
}
