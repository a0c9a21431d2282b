//! The demo's inputs: the sample order requests in `events/`, and the events it puts on the bus.

use std::path::Path;

use serde_json::Value;

/// `(body, correlation id)` of every `POST /orders` request in `dir` (HTTP API events).
///
/// # Errors
/// A message naming the file that cannot be read.
pub fn sample_orders(dir: &Path) -> crate::Result<Vec<(String, Option<String>)>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(crate::Error::other(format!("{}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(crate::Error::other(format!("{}", path.display())))?;
        let Ok(event) = serde_json::from_str::<Value>(&text) else { continue };
        let method = event.pointer("/requestContext/http/method").and_then(Value::as_str);
        let route = event.get("rawPath").and_then(Value::as_str);
        if method != Some("POST") || route != Some("/orders") {
            continue;
        }
        let body = event.get("body").and_then(Value::as_str).ok_or_else(|| crate::Error::invalid(format!("{}: no body", path.display())))?;
        let correlation = event.pointer("/headers/x-correlation-id").and_then(Value::as_str).map(str::to_owned);
        out.push((body.to_owned(), correlation));
    }
    Ok(out)
}

/// A `PutEvents` entry of the sample's source on `bus`.
pub(super) fn entry(bus: &str, detail_type: &str, detail: &Value) -> aws_sdk_eventbridge::types::PutEventsRequestEntry {
    aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source("example.orders")
        .detail_type(detail_type)
        .detail(detail.to_string())
        .build()
}

/// Puts `entry` on the bus; an error when the call or the entry failed.
pub(super) async fn put_event(events: &aws_sdk_eventbridge::Client, entry: aws_sdk_eventbridge::types::PutEventsRequestEntry) -> crate::Result<()> {
    let out = events.put_events().entries(entry).send().await.map_err(crate::Error::aws("PutEvents"))?;
    if out.failed_entry_count() > 0 {
        return Err(crate::Error::expectation(format!("PutEvents rejected the entry: {:?}", out.entries())));
    }
    Ok(())
}
