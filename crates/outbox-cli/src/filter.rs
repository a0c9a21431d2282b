//! Event filtering of an event source mapping (`FilterCriteria`), as Lambda applies it before
//! invoking: a record is delivered if it matches ANY filter pattern; the others are dropped.
//!
//! Supported pattern syntax (the subset Lambda documents for DynamoDB streams that this
//! runtime implements): exact values (strings, numbers, booleans, null), `{"exists": bool}`,
//! `{"prefix": "..."}`, `{"anything-but": [...]}`, nested objects. Anything else is rejected by
//! [`validate`] so a pattern is never silently misread. Source:
//! <https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>.

use serde_json::Value;

/// Checks that `pattern` uses only the supported syntax.
///
/// # Errors
/// A message naming the unsupported part.
pub fn validate(pattern: &Value) -> Result<(), String> {
    let Value::Object(fields) = pattern else { return Err("a filter pattern must be a JSON object".into()) };
    for (key, rule) in fields {
        match rule {
            Value::Object(_) => validate(rule).map_err(|e| format!("{key}.{e}"))?,
            Value::Array(values) => {
                for v in values {
                    if let Value::Object(op) = v {
                        let name = op.keys().next().map(String::as_str).unwrap_or("");
                        if !matches!(name, "exists" | "prefix" | "anything-but") || op.len() != 1 {
                            return Err(format!("{key}: operator {name:?} is not supported locally"));
                        }
                    }
                }
            }
            _ => return Err(format!("{key}: a pattern field must be an array or an object")),
        }
    }
    Ok(())
}

/// Whether `record` (the record as Lambda would deliver it) matches `pattern`.
pub fn matches(pattern: &Value, record: &Value) -> bool {
    let Value::Object(fields) = pattern else { return false };
    fields.iter().all(|(key, rule)| {
        let value = record.get(key);
        match rule {
            Value::Object(_) => value.is_some_and(|v| matches(rule, v)),
            Value::Array(alternatives) => alternatives.iter().any(|alt| matches_value(alt, value)),
            _ => false,
        }
    })
}

fn matches_value(alternative: &Value, value: Option<&Value>) -> bool {
    match alternative {
        Value::Object(op) => {
            if let Some(Value::Bool(want)) = op.get("exists") {
                return value.is_some() == *want;
            }
            if let Some(Value::String(prefix)) = op.get("prefix") {
                return value.and_then(Value::as_str).is_some_and(|s| s.starts_with(prefix.as_str()));
            }
            if let Some(excluded) = op.get("anything-but") {
                let excluded: Vec<&Value> = match excluded {
                    Value::Array(a) => a.iter().collect(),
                    other => vec![other],
                };
                return value.is_some_and(|v| !excluded.contains(&v));
            }
            false
        }
        literal => value == Some(literal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_template_filter_keeps_only_outbox_inserts() {
        let pattern = json!({"eventName": ["INSERT"], "dynamodb": {"NewImage": {"event_id": {"S": [{"exists": true}]}}}});
        validate(&pattern).unwrap();
        let insert = json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"event_id": {"S": "e"}}}});
        let modify = json!({"eventName": "MODIFY", "dynamodb": {"NewImage": {"event_id": {"S": "e"}}}});
        let other = json!({"eventName": "INSERT", "dynamodb": {"NewImage": {"pk": {"S": "x"}}}});
        assert!(matches(&pattern, &insert));
        assert!(!matches(&pattern, &modify));
        assert!(!matches(&pattern, &other));
    }

    #[test]
    fn prefix_anything_but_and_exists_false() {
        assert!(matches(&json!({"a": [{"prefix": "ab"}]}), &json!({"a": "abc"})));
        assert!(!matches(&json!({"a": [{"anything-but": ["x"]}]}), &json!({"a": "x"})));
        assert!(matches(&json!({"a": [{"exists": false}]}), &json!({"b": 1})));
        assert!(validate(&json!({"a": [{"numeric": [">", 1]}]})).is_err());
    }
}
