//! CloudWatch Embedded Metric Format (EMF): metrics a function writes as JSON log lines, which
//! CloudWatch Logs turns into metrics. A line is an EMF document when it is a JSON object with an
//! `_aws` member whose `CloudWatchMetrics[].Metrics[].Name` name top-level members holding a
//! number or an array of numbers (a batch of values). Source:
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>.
//!
//! The relay (`outbox_lambda::relay::run_from_env`, feature `metrics`) writes one document per
//! invocation through `metrics_cloudwatch_embedded`: its counters (`EventsPublished`,
//! `PutEventsCalls`, `RecordsSeen`, …) hold the *delta* since the previous document, so summing
//! the values of every document gives the totals. The local runtime reads its functions'
//! output line by line and adds what this module finds to [`crate::stats::Stats`].

use serde_json::Value;

/// The `(metric name, value)` pairs of an EMF document, or `None` when `line` is not one. An
/// array value (several samples in one document) counts as the sum of its numbers; metrics
/// without a numeric value are left out. A metric with dimensions besides `function` (the
/// function is who reports it) is given a second time as `Name{dimension=value,…}`, e.g.
/// `AwsCallsFailed{service=DynamoDB}`.
pub fn parse(line: &str) -> Option<Vec<(String, f64)>> {
    let line = line.trim();
    if !line.starts_with('{') || !line.contains("\"_aws\"") {
        return None;
    }
    let doc: Value = serde_json::from_str(line).ok()?;
    let directives = doc.get("_aws")?.get("CloudWatchMetrics")?.as_array()?;
    let mut values = Vec::new();
    for directive in directives {
        let dimensions: Vec<String> = directive
            .get("Dimensions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_array)
            .flatten()
            .filter_map(Value::as_str)
            .filter(|d| *d != outbox::contract::dimension::FUNCTION)
            .map(|d| format!("{d}={}", doc.get(d).and_then(Value::as_str).unwrap_or_default()))
            .collect();
        for metric in directive.get("Metrics").and_then(Value::as_array).into_iter().flatten() {
            let Some(name) = metric.get("Name").and_then(Value::as_str) else { continue };
            let value = match doc.get(name) {
                Some(Value::Number(n)) => n.as_f64(),
                Some(Value::Array(samples)) => Some(samples.iter().filter_map(Value::as_f64).sum()),
                _ => None,
            };
            if let Some(v) = value {
                values.push((name.to_owned(), v));
                if !dimensions.is_empty() {
                    values.push((format!("{name}{{{}}}", dimensions.join(",")), v));
                }
            }
        }
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_metrics_of_a_relay_document() {
        let line = r#"{"_aws":{"Timestamp":1764547200000,"CloudWatchMetrics":[{"Namespace":"OutboxRelay","Dimensions":[["function"]],"Metrics":[{"Name":"EventsPublished"},{"Name":"PutEventsCalls"},{"Name":"LagMilliseconds","Unit":"Milliseconds"}]}]},"function":"stack-OutboxRelayFunction","RequestId":"r-1","EventsPublished":7,"PutEventsCalls":1,"LagMilliseconds":[12.0,30.0]}"#;
        let values = parse(line).expect("an EMF document");
        assert_eq!(values, [("EventsPublished".to_owned(), 7.0), ("PutEventsCalls".to_owned(), 1.0), ("LagMilliseconds".to_owned(), 42.0)]);
    }

    #[test]
    fn a_metric_with_more_dimensions_is_also_named_with_their_values() {
        let line = r#"{"_aws":{"Timestamp":1764547200000,"CloudWatchMetrics":[{"Namespace":"OutboxProducer","Dimensions":[["function","service"]],"Metrics":[{"Name":"AwsCallsFailed"}]}]},"function":"stack-ProducerFunction","service":"DynamoDB","RequestId":"r-1","AwsCallsFailed":2}"#;
        let values = parse(line).expect("an EMF document");
        assert_eq!(values, [("AwsCallsFailed".to_owned(), 2.0), ("AwsCallsFailed{service=DynamoDB}".to_owned(), 2.0)]);
    }

    #[test]
    fn other_lines_are_not_documents() {
        assert_eq!(parse(r#"{"level":"INFO","fields":{"message":"published"}}"#), None);
        assert_eq!(parse("INFO published 3 events"), None);
        assert_eq!(parse(r#"{"_aws": "#), None, "truncated JSON");
        assert_eq!(parse(r#"{"_aws":{"CloudWatchMetrics":[{"Metrics":[{"Name":"X"}]}]}}"#), Some(vec![]), "a metric without a value is left out");
    }
}
