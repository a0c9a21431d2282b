//! An SQS target: the message a subscriber sends for an event (body by `Transformer`, the
//! `MessageGroupId` / `MessageDeduplicationId` from `SqsParameters`), and the sending.
//!
//! `SqsParameters` values are literals or JSONata of the forms AWS documents for these
//! parameters: `{% $events.SystemMetadata.EventGroupId %}`,
//! `{% $events.SystemMetadata.'aws:EventId' %}` (a segment with a colon quoted with `'`, `"` or
//! backticks), `{% $events.Data.<dotted.path> %}`, and such paths joined with string literals by
//! `&` (`{% $events.SystemMetadata.'aws:EventId' & '#replay' %}`). Any other JSONata is refused
//! with `InvalidInputException` when the subscriber is created.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::subscriber::Transform;
use super::wire::WireError;

/// A literal, or a JSONata expression of `$events` paths and string literals joined by `&`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Template {
    Literal(String),
    /// The terms of `{% a & b & ... %}`, concatenated.
    Expr(Vec<Term>),
}

/// One term of a [`Template::Expr`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Term {
    /// A string literal (`'…'` or `"…"`).
    Text(String),
    /// Segments after `$events`: `["SystemMetadata", "aws:EventId"]`.
    Path(Vec<String>),
}

impl Template {
    /// Reads `text` (the value of `field`).
    pub(crate) fn parse(text: &str, field: &str) -> Result<Self, WireError> {
        let trimmed = text.trim();
        let Some(inner) = trimmed.strip_prefix("{%").and_then(|t| t.strip_suffix("%}")) else {
            return Ok(Self::Literal(text.to_owned()));
        };
        let unsupported = || {
            WireError::invalid(format!(
                "{field} {text:?}: the local runtime evaluates only $events.Data.<path>, $events.Metadata.<path> and $events.SystemMetadata.<path> expressions, and string literals, joined by &"
            ))
        };
        let terms = split_terms(inner).ok_or_else(unsupported)?;
        let terms = terms.iter().map(|t| term(t.trim()).ok_or_else(unsupported)).collect::<Result<Vec<_>, _>>()?;
        if !terms.iter().any(|t| matches!(t, Term::Path(_))) {
            return Err(unsupported());
        }
        Ok(Self::Expr(terms))
    }

    /// The value for an event whose `$events` is `events`.
    ///
    /// # Errors
    /// A path names nothing, or an object or list.
    pub(crate) fn evaluate(&self, events: &Value) -> Result<String, String> {
        match self {
            Self::Literal(s) => Ok(s.clone()),
            Self::Expr(terms) => {
                let mut out = String::new();
                for t in terms {
                    match t {
                        Term::Text(s) => out.push_str(s),
                        Term::Path(segments) => {
                            let value = segments
                                .iter()
                                .try_fold(events, |v, s| v.get(s))
                                .ok_or_else(|| format!("$events.{} is absent", segments.join(".")))?;
                            match value {
                                Value::String(s) => out.push_str(s),
                                Value::Number(n) => out.push_str(&n.to_string()),
                                Value::Bool(b) => out.push_str(&b.to_string()),
                                _ => return Err(format!("$events.{} is not a string, number or boolean", segments.join("."))),
                            }
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

/// `inner` split at each `&` outside quotes; `None` on an unclosed quote.
fn split_terms(inner: &str) -> Option<Vec<&str>> {
    let mut terms = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in inner.char_indices() {
        match (quote, c) {
            (None, '\'' | '"' | '`') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '&') => {
                terms.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (quote.is_none()).then(|| {
        terms.push(&inner[start..]);
        terms
    })
}

/// One term: a quoted string, or `$events.<Data|Metadata|SystemMetadata>.<path>` (a segment
/// with a colon quoted with `'`, `"` or backticks).
fn term(text: &str) -> Option<Term> {
    for q in ['\'', '"'] {
        if let Some(body) = text.strip_prefix(q).and_then(|t| t.strip_suffix(q)) {
            return (!body.contains(q)).then(|| Term::Text(body.to_owned()));
        }
    }
    let path = text.strip_prefix("$events.")?;
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        let (segment, after) = match rest.chars().next() {
            Some(q @ ('\'' | '"' | '`')) => {
                let end = rest[1..].find(q)?;
                (&rest[1..=end], &rest[end + 2..])
            }
            _ => match rest.find('.') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            },
        };
        if segment.is_empty() || (!segment.chars().all(|c| c.is_ascii_alphanumeric() || "_-:".contains(c))) {
            return None;
        }
        segments.push(segment.to_owned());
        rest = match after.strip_prefix('.') {
            Some(r) if !r.is_empty() => r,
            Some(_) => return None,
            None if after.is_empty() => "",
            None => return None,
        };
    }
    if !matches!(segments.first().map(String::as_str), Some("Data" | "Metadata" | "SystemMetadata")) || segments.len() < 2 {
        return None;
    }
    Some(Term::Path(segments))
}

/// `$events` for an event: `{"Data", "Metadata", "SystemMetadata"}`.
pub(crate) fn events_value(data: &Value, system_metadata: &Value) -> Value {
    json!({"Data": data, "Metadata": {}, "SystemMetadata": system_metadata})
}

/// The message body by transform: RAW, the `Data` (for `PutEvents`, the envelope JSON);
/// WITH_METADATA, `$events` whole.
pub(crate) fn body(transform: Transform, data: &Value, system_metadata: &Value) -> String {
    match transform {
        Transform::Raw => data.to_string(),
        Transform::WithMetadata => events_value(data, system_metadata).to_string(),
    }
}

/// Sends to the queues of moto, by ARN.
#[derive(Debug)]
pub(crate) struct Sqs {
    client: aws_sdk_sqs::Client,
    urls: Mutex<HashMap<String, String>>,
}

impl Sqs {
    pub(crate) async fn new(moto: &str, region: &str) -> Self {
        let sdk = outbox_cli::aws::sdk_config(&outbox_cli::aws::Target { endpoint: Some(moto.to_owned()), region: region.to_owned() }).await;
        Self { client: aws_sdk_sqs::Client::new(&sdk), urls: Mutex::new(HashMap::new()) }
    }

    async fn url(&self, arn: &str) -> Result<String, String> {
        if let Some(url) = self.urls.lock().unwrap_or_else(|p| p.into_inner()).get(arn) {
            return Ok(url.clone());
        }
        let mut parts = arn.split(':');
        let (Some(name), Some(account)) = (parts.clone().nth(5), parts.nth(4)) else { return Err(format!("{arn} is not an SQS queue ARN")) };
        let out = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|e| format!("GetQueueUrl {name}: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
        let url = out.queue_url.ok_or_else(|| format!("GetQueueUrl {name}: no QueueUrl"))?;
        self.urls.lock().unwrap_or_else(|p| p.into_inner()).insert(arn.to_owned(), url.clone());
        Ok(url)
    }

    /// Sends `body` to queue `arn` with string message attributes `attributes`.
    pub(crate) async fn send(
        &self,
        arn: &str,
        body: String,
        group: Option<String>,
        dedup: Option<String>,
        attributes: Vec<(String, String)>,
    ) -> Result<(), String> {
        let url = self.url(arn).await?;
        let mut request = self.client.send_message();
        for (name, value) in attributes {
            let value = aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|e| format!("message attribute {name}: {e}"))?;
            request = request.message_attributes(name, value);
        }
        request
            .queue_url(&url)
            .message_body(body)
            .set_message_group_id(group)
            .set_message_deduplication_id(dedup)
            .send()
            .await
            .map_err(|e| format!("SendMessage {arn}: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqs_parameters_are_literals_or_events_paths() {
        assert_eq!(Template::parse("orders", "f").expect("literal"), Template::Literal("orders".into()));
        let group = Template::parse("{% $events.SystemMetadata.EventGroupId %}", "f").expect("path");
        let id = Template::parse("{% $events.SystemMetadata.'aws:EventId' %}", "f").expect("quoted");
        let detail = Template::parse("{%$events.Data.detail.order_id%}", "f").expect("data path");
        let events = events_value(&json!({"detail": {"order_id": 42}}), &json!({"EventGroupId": "Order#1", "aws:EventId": "e-1"}));
        assert_eq!(group.evaluate(&events).as_deref(), Ok("Order#1"));
        assert_eq!(id.evaluate(&events).as_deref(), Ok("e-1"));
        assert_eq!(detail.evaluate(&events).as_deref(), Ok("42"));
        assert_eq!(Template::parse("{% $events.SystemMetadata.\"aws:EventId\" %}", "f").expect("double quotes"), id);
        assert!(Template::parse("{% $events.Data.missing %}", "f").expect("path").evaluate(&events).is_err());
        let joined = Template::parse("{% $events.SystemMetadata.`aws:EventId` & '#replay-1' %}", "f").expect("a path and a literal");
        assert_eq!(joined.evaluate(&events).as_deref(), Ok("e-1#replay-1"));
        let amp = Template::parse("{% 'a&b:' & $events.SystemMetadata.EventGroupId %}", "f").expect("& inside a literal");
        assert_eq!(amp.evaluate(&events).as_deref(), Ok("a&b:Order#1"));
        for bad in [
            "{% $uppercase($events.Data.a) %}",
            "{% $events.Other.a %}",
            "{% $events.Data %}",
            "{% $events.Data..a %}",
            "{% 'only a literal' %}",
            "{% $events.Data.a & 'unclosed %}",
            "{% $events.Data.a & %}",
        ] {
            let err = Template::parse(bad, "SqsParameters.MessageGroupId").expect_err(bad);
            assert!(err.message.contains("SqsParameters.MessageGroupId") && err.code == "InvalidInputException", "{err}");
        }
    }
}
