//! The injector's answers for Custom Event Bus calls (Smithy RPC v2 CBOR, see
//! `crate::custom_bus::wire`): errors as `{"__type", "message"}` CBOR maps with the status the
//! SDK classifies (`ThrottlingException`: 400, retryable; `InternalException`: 500; 503), and
//! `PutEvents` with some entries failed: HTTP 200, each failed entry's `ErrorCode` and
//! `ErrorMessage` at its position, `FailedEntryCount` counting them with the bus's own.

use std::sync::atomic::Ordering;

use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{json, Value};

use super::{answer, Injector};
use crate::custom_bus::wire::{self, WireError};
use crate::faults::plan::ErrorCode;

/// The Custom bus operation a request path names (`PutEvents`).
pub(super) fn operation_of(parts: &axum::http::request::Parts) -> Option<&str> {
    wire::operation_of(parts.uri.path())
}

/// The answer AWS gives for `code` on the Custom bus.
pub(super) fn error_answer(code: ErrorCode) -> Response {
    let (code, status, message) = match code {
        ErrorCode::ThrottlingException | ErrorCode::ProvisionedThroughputExceeded | ErrorCode::RequestLimitExceeded => {
            ("ThrottlingException", 400, "Rate exceeded")
        }
        ErrorCode::ServiceUnavailable => ("ServiceUnavailable", 503, "Service Unavailable"),
        _ => ("InternalException", 500, "Internal service error"),
    };
    WireError { code, status, message: message.into() }.into_response()
}

/// `PutEvents` with the entries the rolls hit failed (see the module doc); the others are
/// forwarded to the bus.
pub(super) async fn put_events_in_part(
    injector: &Injector,
    parts: &axum::http::request::Parts,
    body: Vec<u8>,
    faults: &[(usize, String, f64)],
) -> crate::Result<Response> {
    let mut request = wire::decode(&body).map_err(crate::Error::other("PutEvents body"))?;
    let entries = request["Entries"].as_array().cloned().unwrap_or_default();
    let failed: Vec<Option<&str>> = entries
        .iter()
        .map(|_| {
            let (index, code, _) = faults.iter().find(|(i, _, rate)| {
                injector.plan.faults[*i].limit.is_none_or(|l| injector.fired[*i].load(Ordering::SeqCst) < l) && injector.roll(*rate)
            })?;
            injector.fired[*index].fetch_add(1, Ordering::SeqCst);
            Some(code.as_str())
        })
        .collect();
    let n_failed = failed.iter().filter(|f| f.is_some()).count() as u64;
    if n_failed == 0 {
        let (status, headers, body) = injector.forward(parts, body).await?;
        return Ok(answer(status, headers, body));
    }
    let kept: Vec<Value> = entries.iter().zip(&failed).filter(|(_, f)| f.is_none()).map(|(e, _)| e.clone()).collect();
    let mut bus_entries = Vec::new().into_iter();
    let mut bus_failed = 0;
    if !kept.is_empty() {
        request["Entries"] = Value::Array(kept);
        let (status, _, answer_body) = injector.forward(parts, wire::encode(&request)).await?;
        if !status.is_success() {
            return Ok(answer(status, HeaderMap::new(), answer_body));
        }
        let answer = wire::decode(&answer_body).map_err(crate::Error::other("PutEvents answer"))?;
        bus_failed = answer["FailedEntryCount"].as_u64().unwrap_or(0);
        bus_entries = answer["Entries"].as_array().cloned().unwrap_or_default().into_iter();
    }
    let message = |code: &str| if code == "ThrottlingException" { "Rate exceeded" } else { "Internal service error" };
    let merged: Vec<Value> = failed
        .iter()
        .map(|f| match f {
            Some(code) => json!({"ErrorCode": code, "ErrorMessage": message(code)}),
            None => bus_entries.next().unwrap_or_else(|| json!({})),
        })
        .collect();
    Ok(wire::ok(&json!({"FailedEntryCount": bus_failed + n_failed, "Entries": merged})))
}

impl Injector {
    /// The fault the plan puts on a Custom bus delivery attempt of subscriber `subscriber`: an
    /// `error` fault whose `op` matches `sqs:SendMessage` and whose `function` names the
    /// subscriber (a plan's faults without a `function` are the functions' and leave the bus
    /// alone); `latency` faults naming it are waited. `Some(why)` fails the attempt.
    pub async fn bus_delivery_fault(&self, subscriber: &str) -> Option<String> {
        for (i, fault) in self.plan.faults.iter().enumerate() {
            if fault.function.as_deref() != Some(subscriber) || !self.applies(fault, "sqs:SendMessage", subscriber, i) || !self.roll(fault.rate) {
                continue;
            }
            match fault.kind {
                crate::faults::FaultKind::Latency => {
                    self.fired[i].fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(fault.ms.unwrap_or(0))).await;
                }
                crate::faults::FaultKind::Error | crate::faults::FaultKind::LostAnswer | crate::faults::FaultKind::Crash => {
                    self.fired[i].fetch_add(1, Ordering::SeqCst);
                    return Some(format!("fault plan: {} (injected on the target)", fault.label()));
                }
                _ => {}
            }
        }
        None
    }
}
