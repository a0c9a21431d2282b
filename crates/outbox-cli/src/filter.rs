//! Event filtering of an event source mapping (`FilterCriteria`), as Lambda applies it before
//! invoking: a record is delivered if it matches ANY filter pattern; the others are dropped.
//!
//! Supported pattern syntax (the subset Lambda documents for DynamoDB streams that this
//! runtime implements): exact values (strings, numbers, booleans, null), `{"exists": bool}`,
//! `{"prefix": "..."}`, `{"anything-but": [...]}`, nested objects. Anything else is rejected by
//! [`validate`] so a pattern is never silently misread. Source:
//! <https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html>.

use serde_json::Value;

/// Why a filter pattern cannot be used: the field (`a.b`, empty for the whole pattern) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern (or a nested one) is not a JSON object.
    #[error("a filter pattern must be a JSON object")]
    NotAnObject,
    /// A field's rule is neither an array of values nor a nested pattern.
    #[error("{field}: a pattern field must be an array or an object")]
    NotArrayOrObject {
        /// The field, dotted from the top.
        field: String,
    },
    /// A field uses an operator this runtime does not evaluate.
    #[error("{field}: operator {operator:?} is not supported locally")]
    Unsupported {
        /// The field, dotted from the top.
        field: String,
        /// The operator, e.g. `numeric`.
        operator: String,
    },
}

impl PatternError {
    /// The same error, its field under `parent`.
    fn under(self, parent: &str) -> Self {
        let join = |field: String| format!("{parent}.{field}");
        match self {
            Self::NotAnObject => Self::NotArrayOrObject { field: parent.to_owned() },
            Self::NotArrayOrObject { field } => Self::NotArrayOrObject { field: join(field) },
            Self::Unsupported { field, operator } => Self::Unsupported { field: join(field), operator },
        }
    }
}

/// Checks that `pattern` uses only the supported syntax.
///
/// # Errors
/// [`PatternError`] naming the unsupported part.
pub fn validate(pattern: &Value) -> Result<(), PatternError> {
    let Value::Object(fields) = pattern else { return Err(PatternError::NotAnObject) };
    for (key, rule) in fields {
        match rule {
            Value::Object(_) => validate(rule).map_err(|e| e.under(key))?,
            Value::Array(values) => {
                for v in values {
                    if let Value::Object(op) = v {
                        let name = op.keys().next().map(String::as_str).unwrap_or("");
                        if !matches!(name, "exists" | "prefix" | "anything-but") || op.len() != 1 {
                            return Err(PatternError::Unsupported { field: key.clone(), operator: name.to_owned() });
                        }
                    }
                }
            }
            _ => return Err(PatternError::NotArrayOrObject { field: key.clone() }),
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
        assert_eq!(
            validate(&json!({"a": {"b": [{"numeric": [">", 1]}]}})).expect_err("numeric").to_string(),
            "a.b: operator \"numeric\" is not supported locally"
        );
        assert_eq!(validate(&json!({"a": 1})).expect_err("a number").to_string(), "a: a pattern field must be an array or an object");
    }
}
