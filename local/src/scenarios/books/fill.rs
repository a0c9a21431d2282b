//! Placeholders in the books file's texts: `{run}`, `{i}`, `{id}`, a `vary` list's name, … A
//! text that is one placeholder alone takes the value itself (a number stays a number); inside
//! a longer text the value is written as text. `{{` and `}}` stand for `{` and `}`.

use std::collections::HashMap;

use serde_json::Value;

/// The placeholders of `text`, in order.
///
/// # Errors
/// An unclosed `{`, an empty `{}` or a lone `}`.
pub fn placeholders(text: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(['{', '}']) {
        let (c, after) = (&rest[at..at + 1], &rest[at + 1..]);
        if after.starts_with(c) {
            rest = &after[1..];
            continue;
        }
        if c == "}" {
            return Err(format!("{text:?}: a lone }} (write }}}} for the character)"));
        }
        let Some(end) = after.find('}') else { return Err(format!("{text:?}: an unclosed {{ (write {{{{ for the character)")) };
        let name = &after[..end];
        if name.is_empty() || name.contains('{') {
            return Err(format!("{text:?}: {{{name}}} is not a placeholder"));
        }
        names.push(name);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `value` with every placeholder of its texts replaced by `vars` (a placeholder `vars` does
/// not hold stays as it is: the file was checked when read).
pub fn fill(value: &Value, vars: &HashMap<&str, Value>) -> Value {
    match value {
        Value::String(s) => fill_text(s, vars),
        Value::Array(list) => Value::Array(list.iter().map(|v| fill(v, vars)).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), fill(v, vars))).collect()),
        other => other.clone(),
    }
}

/// `text` filled: the value itself when the text is one placeholder alone, else a string.
pub fn fill_text(text: &str, vars: &HashMap<&str, Value>) -> Value {
    if let Some(name) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        if let Some(v) = vars.get(name).filter(|_| !name.contains(['{', '}'])) {
            return v.clone();
        }
    }
    Value::String(fill_str(text, vars))
}

/// `text` with its placeholders written as text.
pub fn fill_str(text: &str, vars: &HashMap<&str, Value>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let (c, after) = (&rest[at..at + 1], &rest[at + 1..]);
        if after.starts_with(c) {
            out.push_str(c);
            rest = &after[1..];
            continue;
        }
        match (c, after.find('}')) {
            ("{", Some(end)) => {
                let name = &after[..end];
                match vars.get(name) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(v) => out.push_str(&v.to_string()),
                    None => out.push_str(&rest[at..at + 2 + end]),
                }
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str(c);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_lone_placeholder_keeps_its_type_and_one_in_a_text_is_written_as_text() {
        let vars = HashMap::from([("i", json!(3)), ("run", json!("r1")), ("sku", json!("SKU-A"))]);
        let body = json!({"id": "proof-{run}-{i}", "n": "{i}", "lines": [{"sku": "{sku}"}], "literal": "{{x}}", "k": 1});
        assert_eq!(fill(&body, &vars), json!({"id": "proof-r1-3", "n": 3, "lines": [{"sku": "SKU-A"}], "literal": "{x}", "k": 1}));
        assert_eq!(placeholders("a{run}-{i}{{").unwrap(), ["run", "i"]);
        for bad in ["{", "a}", "{}", "{a{b}"] {
            assert!(placeholders(bad).is_err(), "{bad}");
        }
    }
}
