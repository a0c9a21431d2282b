//! EventBridge rule → Lambda function delivery, played locally.
//!
//! On AWS the rule's target is the function, which EventBridge invokes *asynchronously*; Lambda
//! then retries a failing invocation `EventInvokeConfig.MaximumRetryAttempts` times (default 2)
//! and, when retries are exhausted or the event is older than `MaximumEventAgeInSeconds`, sends
//! an invocation record (`requestPayload` = the event, `responsePayload` = the error) to the
//! `OnFailure` destination. Source:
//! <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>.
//!
//! Locally the rule targets a delivery queue (see `outbox_local::provision`); this module receives from
//! it, invokes the function (its real binary, see [`crate::lambda::function`]) with the same retry and
//! destination rules (retry waits are compressed, see [`crate::options::RuntimeOptions`]), and
//! deletes the message once the event is settled. The rule target's own
//! `RetryPolicy`/`DeadLetterConfig` cover failures to *invoke* the function (throttling, a
//! missing function), which the local runtime does not produce; they are read, not exercised.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::Glue;
use crate::lambda::function::LocalFunction;
use crate::lambda::runtime_api::FunctionError;
use crate::options::RuntimeOptions;
use crate::stats::Stats;
use outbox_cli::trace::timeline::StageKind;
use outbox_template::stack::LocalRule;

/// Lambda's asynchronous-invocation record, as sent to an on-failure destination.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct InvocationRecord<'a> {
    version: &'static str,
    timestamp: String,
    request_context: Value,
    response_context: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_payload: Option<Value>,
    request_payload: &'a RawValue,
}

/// Most events of one rule received from its delivery queue and not yet settled (SQS's largest
/// receive).
const IN_FLIGHT: usize = 10;

/// Delivery of one rule's events to its function.
pub struct RuleDelivery {
    function: Arc<LocalFunction>,
    rule: LocalRule,
    on_failure_url: Option<String>,
    sqs: aws_sdk_sqs::Client,
    stats: Arc<Stats>,
    options: RuntimeOptions,
}

impl std::fmt::Debug for RuleDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleDelivery").field("rule", &self.rule).finish_non_exhaustive()
    }
}

impl RuleDelivery {
    /// Sets up delivery for `rule`.
    ///
    /// # Errors
    /// A message when the on-failure destination is not a queue of the stack.
    pub fn new(glue: Glue<'_>, function: Arc<LocalFunction>, rule: LocalRule) -> crate::Result<Self> {
        let at = format!("{}.Properties.EventInvokeConfig.DestinationConfig.OnFailure.Destination", function.spec.logical_id);
        let on_failure_url = function.spec.event_invoke.on_failure.as_ref().map(|d| glue.stack.destination_url(d, &at)).transpose()?;
        Ok(Self { function, rule, on_failure_url, sqs: aws_sdk_sqs::Client::new(glue.sdk), stats: glue.stats.clone(), options: glue.options.clone() })
    }

    /// Runs until `shutdown` is true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        // Lambda runs asynchronous invocations concurrently, each event on its own: an event
        // that is retried (or waits for an instance) does not hold back the ones received with
        // it. At most IN_FLIGHT events are received and not yet settled; as each settles,
        // another is received.
        let mut in_flight = tokio::task::JoinSet::new();
        while !*shutdown.borrow() {
            while in_flight.try_join_next().is_some() {}
            if in_flight.len() >= IN_FLIGHT {
                let _ = in_flight.join_next().await;
                continue;
            }
            let room = (IN_FLIGHT - in_flight.len()) as i32;
            let received = this
                .sqs
                .receive_message()
                .queue_url(&this.rule.delivery_queue.url)
                .max_number_of_messages(room)
                .wait_time_seconds(1)
                .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
                .send()
                .await;
            let messages = match received {
                Ok(out) => out.messages.unwrap_or_default(),
                Err(e) => {
                    tracing::warn!(queue = %this.rule.delivery_queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "receiving events failed; retrying");
                    let _ = tokio::time::timeout(Duration::from_millis(500), shutdown.changed()).await;
                    continue;
                }
            };
            for m in messages {
                let this = this.clone();
                in_flight.spawn(async move { this.deliver(m).await });
            }
        }
        while in_flight.join_next().await.is_some() {}
    }

    async fn deliver(&self, message: aws_sdk_sqs::types::Message) {
        let body = message.body().unwrap_or_default().to_owned();
        // Only for bookkeeping (ids, times); the function gets the body untouched.
        let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let event_id = parsed.pointer("/detail/metadata/id").and_then(Value::as_str).map(str::to_owned);
        let event_time = parsed
            .pointer("/detail/metadata/time")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(SystemTime::from);
        // The age counts from when the event was queued for the function (Lambda: queued for
        // asynchronous invocation; here: received by the delivery queue), never from the event's
        // `time`, which its producer sets (the relay: when the outbox item occurred).
        let queued = queued_at(&message).unwrap_or_else(SystemTime::now);
        let max_attempts = 1 + self.function.spec.event_invoke.max_retry_attempts;
        let max_age = Duration::from_secs(self.function.spec.event_invoke.max_event_age_secs);

        let mut last_error: Option<FunctionError> = None;
        let mut attempts = 0;
        let mut condition = "RetriesExhausted";
        while attempts < max_attempts {
            let age = SystemTime::now().duration_since(queued).unwrap_or_default();
            if age > max_age {
                condition = "EventAgeExceeded";
                break;
            }
            attempts += 1;
            if let (Some(journal), Some(id)) = (&self.options.journal, &event_id) {
                let record = crate::journal::Record::now(
                    id,
                    StageKind::Delivered,
                    &format!("{} by rule {}", self.function.spec.logical_id, self.rule.spec.name),
                );
                journal.record(if attempts > 1 { record.with_detail(format!("attempt {attempts}")) } else { record });
            }
            let invocation = self.function.invoke(&body).await;
            self.stats.update(|c| c.consumer_invocations += 1);
            match invocation.result {
                Ok(response) => {
                    let outcome = response.get("outcome").and_then(Value::as_str).unwrap_or("ok");
                    let id = event_id.clone().unwrap_or_else(|| message.message_id().unwrap_or_default().to_owned());
                    self.stats.add_outcome(&id, outcome, event_time);
                    // Ordering: parked events the invocation applied after this one
                    // (`outbox::consumer::ConsumerResponse::parked_applied`).
                    for settled in response.get("parked_applied").and_then(Value::as_array).into_iter().flatten() {
                        if let (Some(id), Some(outcome)) =
                            (settled.get("event_id").and_then(Value::as_str), settled.get("outcome").and_then(Value::as_str))
                        {
                            self.stats.add_outcome(id, outcome, None);
                        }
                    }
                    self.delete(&message).await;
                    return;
                }
                Err(diagnostic) => {
                    self.stats.update(|c| c.consumer_errors += 1);
                    tracing::warn!(
                        function = %self.function.spec.logical_id,
                        event_id = event_id.as_deref().unwrap_or(""),
                        attempt = attempts,
                        error_type = %diagnostic.error_type,
                        error = %diagnostic.error_message,
                        "asynchronous invocation failed"
                    );
                    last_error = Some(diagnostic);
                    if attempts < max_attempts {
                        tokio::time::sleep(self.options.async_retry_delay * attempts).await;
                    }
                }
            }
        }
        if self.dead_letter(&body, condition, attempts, last_error.as_ref()).await {
            self.delete(&message).await;
        }
    }

    /// Sends the invocation record to the on-failure destination; true when the message may be
    /// deleted (sent, or no destination is configured: the event is discarded, as on AWS).
    async fn dead_letter(&self, body: &str, condition: &str, attempts: u32, error: Option<&FunctionError>) -> bool {
        let Some(url) = &self.on_failure_url else {
            tracing::error!(function = %self.function.spec.logical_id, "no OnFailure destination: the event is discarded, as on AWS");
            return true;
        };
        // The event goes in verbatim (a RawValue: no re-encoding of its numbers); a body that is
        // not JSON is carried as a JSON string.
        let quoted;
        let payload: &RawValue = match serde_json::from_str(body) {
            Ok(raw) => raw,
            Err(_) => {
                quoted = Value::String(body.to_owned()).to_string();
                match serde_json::from_str(&quoted) {
                    Ok(raw) => raw,
                    Err(e) => {
                        tracing::error!(error = %e, "the event cannot be carried in an invocation record; it stays in the delivery queue");
                        return false;
                    }
                }
            }
        };
        let record = InvocationRecord {
            version: "1.0",
            timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            request_context: json!({
                "requestId": uuid::Uuid::new_v4().to_string(),
                "functionArn": format!("{}:$LATEST", self.function.arn),
                "condition": condition,
                "approximateInvokeCount": attempts,
            }),
            response_context: match error {
                Some(_) => json!({"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"}),
                None => json!({"statusCode": 200, "executedVersion": "$LATEST"}),
            },
            response_payload: error.map(|e| json!({"errorType": e.error_type, "errorMessage": e.error_message})),
            request_payload: payload,
        };
        let record = match serde_json::to_string(&record) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "the invocation record does not serialise; the event stays in the delivery queue");
                return false;
            }
        };
        match outbox::dead_letter::send(&self.sqs, url, record, &[]).await {
            Ok(_) => {
                self.stats.update(|c| c.consumer_dead_lettered += 1);
                tracing::error!(function = %self.function.spec.logical_id, condition, attempts, "event sent to the on-failure destination");
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "on-failure destination unreachable; the event stays in the delivery queue");
                false
            }
        }
    }

    async fn delete(&self, message: &aws_sdk_sqs::types::Message) {
        let Some(handle) = message.receipt_handle() else { return };
        if let Err(e) = self.sqs.delete_message().queue_url(&self.rule.delivery_queue.url).receipt_handle(handle).send().await {
            tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "deleting a delivered event failed; it may be delivered again (the inbox absorbs it)");
        }
    }
}

/// When the delivery queue received `message` (its `SentTimestamp` system attribute, epoch
/// milliseconds), if the answer carried it.
fn queued_at(message: &aws_sdk_sqs::types::Message) -> Option<SystemTime> {
    let millis: u64 = message.attributes()?.get(&MessageSystemAttributeName::SentTimestamp)?.parse().ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_age_counts_from_when_the_delivery_queue_received_it_not_from_its_time() {
        let sent = SystemTime::now() - Duration::from_secs(5);
        let sent_ms = sent.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default();
        // Two days old by its `time` (an outbox item relayed after an outage).
        let body = json!({"id": "e-1", "time": "2020-01-01T00:00:00Z", "detail": {}}).to_string();
        let message =
            aws_sdk_sqs::types::Message::builder().body(body).attributes(MessageSystemAttributeName::SentTimestamp, sent_ms.to_string()).build();
        let queued = queued_at(&message).expect("SentTimestamp is read");
        let age = SystemTime::now().duration_since(queued).expect("queued in the past");
        assert!(age >= Duration::from_secs(4) && age < Duration::from_secs(60), "{age:?}");
        assert_eq!(queued_at(&aws_sdk_sqs::types::Message::builder().build()), None);
    }
}
