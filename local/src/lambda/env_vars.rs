//! Local settings of the functions: environment variables set on top of the template's, read
//! from a JSON file in the shape of `sam local invoke --env-vars`:
//!
//! ```text
//! {
//!   "Parameters": {"LOG_LEVEL": "debug"},                       every function
//!   "Webhooks/WebhookDispatcherFunction": {"WEBHOOK_ALLOW_HTTP": "true"}  one function, by logical id
//! }
//! ```
//!
//! Values may be strings, numbers or booleans. A function's own entry wins over `Parameters`.
//! Unlike SAM, a variable the template does not declare is added too (a local-only setting such
//! as a cache TTL). `outbox-local` reads `local/env.json` beside the template when it exists, or
//! the file given with `--env-vars`. Source:
//! <https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/serverless-sam-cli-using-invoke.html>
//! ("Environment variable file").

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Variables by function logical id.
pub type Overrides = BTreeMap<String, BTreeMap<String, String>>;

/// Reads `path` and gives each of `functions` its variables (`Parameters` merged under its own
/// entry); functions without any are left out.
///
/// # Errors
/// A message naming the file and what is wrong in it (not JSON, not an object of objects, a
/// value that is an array or object, an entry for a function that is not in `functions`).
pub fn load(path: &Path, functions: &[String]) -> crate::Result<Overrides> {
    let text = std::fs::read_to_string(path).map_err(crate::Error::io(path))?;
    parse(&text, functions).map_err(|e| crate::Error::invalid(format!("{}: {e}", path.display())))
}

/// [`load`] of a file's text.
///
/// # Errors
/// As [`load`].
pub fn parse(text: &str, functions: &[String]) -> crate::Result<Overrides> {
    let doc: BTreeMap<String, BTreeMap<String, Value>> =
        serde_json::from_str(text).map_err(|e| crate::Error::invalid(format!("expected {{\"<Function>\": {{\"VAR\": \"value\"}}}}: {e}")))?;
    let strings = |entry: &str, vars: &BTreeMap<String, Value>| -> crate::Result<BTreeMap<String, String>> {
        vars.iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                Value::Number(_) | Value::Bool(_) => Ok((k.clone(), v.to_string())),
                _ => Err(crate::Error::invalid(format!("{entry}.{k}: expected a string, number or boolean"))),
            })
            .collect()
    };
    if let Some(unknown) = doc.keys().find(|k| *k != "Parameters" && !functions.contains(k)) {
        return Err(crate::Error::invalid(format!("{unknown}: not a function of the template (functions: {})", functions.join(", "))));
    }
    let shared = doc.get("Parameters").map(|v| strings("Parameters", v)).transpose()?.unwrap_or_default();
    let mut out = Overrides::new();
    for function in functions {
        let mut vars = shared.clone();
        if let Some(own) = doc.get(function) {
            vars.extend(strings(function, own)?);
        }
        if !vars.is_empty() {
            out.insert(function.clone(), vars);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_functions_entry_wins_over_parameters() {
        let functions = ["A".to_owned(), "B".to_owned()];
        let got = parse(r#"{"Parameters": {"X": "1", "Y": true}, "A": {"X": 2}}"#, &functions).expect("valid");
        assert_eq!(got["A"], BTreeMap::from([("X".to_owned(), "2".to_owned()), ("Y".to_owned(), "true".to_owned())]));
        assert_eq!(got["B"], BTreeMap::from([("X".to_owned(), "1".to_owned()), ("Y".to_owned(), "true".to_owned())]));
    }

    #[test]
    fn mistakes_are_named() {
        let functions = ["A".to_owned()];
        assert!(parse(r#"{"Typo": {"X": "1"}}"#, &functions).expect_err("unknown").to_string().starts_with("Typo: not a function"));
        assert_eq!(parse(r#"{"A": {"X": [1]}}"#, &functions).expect_err("array").to_string(), "A.X: expected a string, number or boolean");
        assert!(parse("[]", &functions).is_err());
        assert!(parse("{}", &functions).expect("empty is fine").is_empty());
    }
}
