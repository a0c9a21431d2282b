//! One dead-letter message as the `dlq` verbs show it: an SQS dead-letter queue's message or a
//! failed stream batch's S3 object, with its recognised shape and cause.

use std::collections::BTreeMap;

use serde::Serialize;

/// One dead-letter message.
#[derive(Debug, Clone, Serialize)]
pub struct DlqMessage {
    /// Queue name.
    pub queue: String,
    /// SQS message id.
    pub message_id: String,
    /// When SQS received it: RFC 3339 UTC.
    pub sent_at: Option<String>,
    /// Age, seconds.
    pub age_secs: Option<i64>,
    /// Times received (listing counts too).
    pub receive_count: Option<u32>,
    /// Recognised shape: `relay-failure`, `invocation-record`, `eventbridge-event`, `unknown`.
    pub shape: String,
    /// Event id it concerns, if known.
    pub event_id: Option<String>,
    /// Why it failed, in one line.
    pub reason: String,
    /// The failure cause to group by ([`outbox::dead_letter::DeadLetter::cause`]; a rule target's dead letter takes
    /// its `ERROR_CODE` attribute).
    pub cause: String,
    /// Whether no redrive can fix it ([`outbox::dead_letter::DeadLetter::is_permanent`]).
    pub permanent: bool,
    /// Message attributes (e.g. EventBridge's `ERROR_CODE`, the relay's `error_code`).
    pub attributes: BTreeMap<String, String>,
    /// The body, as stored.
    pub body: String,
}
