//! Intrinsic functions: recognising them (short `!Ref x` and long `{Ref: x}` forms) and
//! resolving them against a local stack ([`Resolver`]).

use std::collections::HashMap;

use serde_yaml_ng::Value;

use super::{unsupported, TemplateError};

/// A scalar as CloudFormation stringifies it.
pub(super) fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `(logical id, attribute)` of a `!GetAtt` in either form.
pub(super) fn get_att(v: &Value) -> Option<(String, String)> {
    let inner = intrinsic(v, "GetAtt")?;
    match inner {
        Value::String(s) => {
            let (a, b) = s.split_once('.')?;
            Some((a.to_owned(), b.to_owned()))
        }
        Value::Sequence(seq) if seq.len() == 2 => Some((seq[0].as_str()?.to_owned(), seq[1].as_str()?.to_owned())),
        _ => None,
    }
}

/// The argument of intrinsic `name` (`!Name x` or `{"Fn::Name": x}`; `Ref` has no `Fn::`).
pub(super) fn intrinsic<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Tagged(t) if t.tag == name => Some(&t.value),
        Value::Mapping(m) if m.len() == 1 => {
            let long = if name == "Ref" { "Ref".to_owned() } else { format!("Fn::{name}") };
            m.get(long.as_str())
        }
        _ => None,
    }
}

/// The logical id of a `!Ref X` / `{"Ref": "X"}` value.
pub(super) fn ref_target(value: &Value) -> Option<String> {
    intrinsic(value, "Ref")?.as_str().map(str::to_owned)
}

/// The text and variable map of a `Fn::Sub` argument: the string form has no variables.
pub(super) fn sub_parts(arg: &Value) -> Option<(&str, Option<&serde_yaml_ng::Mapping>)> {
    match arg {
        Value::String(text) => Some((text, None)),
        Value::Sequence(seq) if seq.len() == 2 => Some((seq[0].as_str()?, Some(seq[1].as_mapping()?))),
        _ => None,
    }
}

/// Resolves intrinsic functions against a local stack.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// `AWS::StackName`.
    pub stack_name: String,
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::AccountId`.
    pub account: String,
    refs: HashMap<String, String>,
    attrs: HashMap<(String, String), String>,
}

impl Resolver {
    /// A resolver that knows only the pseudo parameters.
    pub fn new(stack_name: &str, region: &str, account: &str) -> Self {
        Self { stack_name: stack_name.into(), region: region.into(), account: account.into(), refs: HashMap::new(), attrs: HashMap::new() }
    }

    /// Declares what `!Ref logical_id` gives.
    pub fn set_ref(&mut self, logical_id: &str, value: impl Into<String>) {
        self.refs.insert(logical_id.into(), value.into());
    }

    /// Declares what `!GetAtt logical_id.attr` gives.
    pub fn set_attr(&mut self, logical_id: &str, attr: &str, value: impl Into<String>) {
        self.attrs.insert((logical_id.into(), attr.into()), value.into());
    }

    fn pseudo(&self, name: &str) -> Option<String> {
        Some(match name {
            "AWS::StackName" => self.stack_name.clone(),
            "AWS::Region" => self.region.clone(),
            "AWS::AccountId" => self.account.clone(),
            "AWS::StackId" => super::names::stack_id(&self.region, &self.account, &self.stack_name),
            "AWS::Partition" => "aws".into(),
            "AWS::URLSuffix" => "amazonaws.com".into(),
            _ => return None,
        })
    }

    fn reference(&self, name: &str, at: &str) -> Result<String, TemplateError> {
        self.pseudo(name)
            .or_else(|| self.refs.get(name).cloned())
            .ok_or_else(|| unsupported(at, format!("Ref {name}: not a resource the local runtime provisions")))
    }

    fn attribute(&self, id: &str, attr: &str, at: &str) -> Result<String, TemplateError> {
        self.attrs
            .get(&(id.to_owned(), attr.to_owned()))
            .cloned()
            .ok_or_else(|| unsupported(at, format!("GetAtt {id}.{attr}: not an attribute the local runtime knows")))
    }

    /// Resolves `v` to a string; `at` names it in errors.
    ///
    /// # Errors
    /// [`TemplateError::Unsupported`] for unknown references or unsupported intrinsics.
    pub fn resolve_string(&self, v: &Value, at: &str) -> Result<String, TemplateError> {
        if let Some(s) = scalar(v) {
            return Ok(s);
        }
        if let Some(name) = intrinsic(v, "Ref") {
            let name = name.as_str().ok_or_else(|| unsupported(at, "Ref takes a name"))?;
            return self.reference(name, at);
        }
        if intrinsic(v, "GetAtt").is_some() {
            let (id, attr) = get_att(v).ok_or_else(|| unsupported(at, "GetAtt takes Resource.Attribute"))?;
            return self.attribute(&id, &attr, at);
        }
        if let Some(arg) = intrinsic(v, "Sub") {
            let (text, vars) = sub_parts(arg).ok_or_else(|| unsupported(at, "Sub takes a string or [string, {variable: value}]"))?;
            return self.substitute(text, vars, at);
        }
        if let Some(arg) = intrinsic(v, "Join") {
            let (Some(delimiter), Some(list)) = (arg.get(0).and_then(scalar), arg.get(1)) else {
                return Err(unsupported(at, "Join takes [delimiter, [values]]"));
            };
            return Ok(self.resolve_list(list, at)?.join(&delimiter));
        }
        if let Some(arg) = intrinsic(v, "Select") {
            let (Some(index), Some(list)) = (arg.get(0).and_then(scalar), arg.get(1)) else {
                return Err(unsupported(at, "Select takes [index, [values]]"));
            };
            let items = self.resolve_list(list, at)?;
            let index: usize = index.parse().map_err(|_| unsupported(at, format!("Select index {index:?} is not a number")))?;
            return items.get(index).cloned().ok_or_else(|| unsupported(at, format!("Select index {index} of a list of {}", items.len())));
        }
        Err(unsupported(at, "expected a string, Ref, GetAtt, Sub, Join or Select"))
    }

    /// Resolves a list: a sequence (each item a string) or `Fn::Split [delimiter, string]`.
    fn resolve_list(&self, v: &Value, at: &str) -> Result<Vec<String>, TemplateError> {
        // Split first: `as_sequence` sees through a tag, so `!Split [d, s]` is also a sequence.
        if let Some(arg) = intrinsic(v, "Split") {
            let (Some(delimiter), Some(text)) = (arg.get(0).and_then(scalar), arg.get(1)) else {
                return Err(unsupported(at, "Split takes [delimiter, string]"));
            };
            return Ok(self.resolve_string(text, at)?.split(delimiter.as_str()).map(str::to_owned).collect());
        }
        if let Value::Sequence(items) = v {
            return items.iter().map(|item| self.resolve_string(item, at)).collect();
        }
        Err(unsupported(at, "expected a list or Split"))
    }

    fn substitute(&self, text: &str, vars: Option<&serde_yaml_ng::Mapping>, at: &str) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or_else(|| unsupported(at, "unclosed ${ in Sub"))?;
            let name = &after[..end];
            if let Some(value) = vars.and_then(|v| v.get(name)) {
                out.push_str(&self.resolve_string(value, at)?);
            } else if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some((id, attr)) = name.split_once('.').filter(|_| !name.starts_with("AWS::")) {
                out.push_str(&self.attribute(id, attr, at)?);
            } else {
                out.push_str(&self.reference(name, at)?);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}
