//! Nested applications and conditions, played when the template is read.
//!
//! A nested application (`AWS::Serverless::Application` with a `Location`, or
//! `AWS::CloudFormation::Stack` with a `TemplateURL`, that is a local template path) is a stack
//! of its own on AWS: its parameters are what the parent passes (else their `Default`), its
//! `Conditions` are evaluated with them, its resources reference each other by their own logical
//! ids, and the parent reads its `Outputs` with `!GetAtt <App>.Outputs.<Name>`. The local
//! runtime plays one stack: the nested template's resources become the parent's, named
//! `<App>/<LogicalId>` (SAM CLI's name for them), with every reference rewritten:
//!
//! * `!Ref <Parameter>` becomes what the parent passes (inlined in a `!Sub` when it is a plain
//!   value, else carried as a `!Sub` variable);
//! * `!Ref X`, `!GetAtt X.Attr`, `${X}`, `${X.Attr}` of its own resources become `<App>/X`;
//! * `AWS::StackName` becomes `<parent stack>-<App>-<SUFFIX>`, the nested stack's name as
//!   CloudFormation forms it (12 random characters on AWS; here derived from `<App>`, so the
//!   name is stable and as long as on AWS: [`super::names::nested_stack_name`]);
//! * the parent's `!GetAtt <App>.Outputs.<Name>` (and `${<App>.Outputs.<Name>}`) becomes the
//!   output's value.
//!
//! A `Location` that is not a local path (an application of the Serverless Application
//! Repository, an `s3://` or `https://` URL) is an error naming it: nothing here can fetch it.
//! Sources: <https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/sam-resource-application.html>,
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/conditions-section-structure.html>.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use super::intrinsics::{get_att, intrinsic, ref_target, scalar, sub_parts};
use super::{unsupported, TemplateError};

/// How deep applications may nest (a template that nests itself stops here).
const MAX_DEPTH: usize = 8;

/// A nested application read with the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedApp {
    /// Its logical id in the flattened template: `Relay`, or `Outer/Inner` for an application
    /// nested in another; its resources are `<logical id>/<their logical id>`.
    pub logical_id: String,
    /// The template read for it.
    pub template: PathBuf,
}

/// A template with its nested applications' resources merged in and its conditions played.
pub(super) struct Flattened {
    /// Every resource, nested ones as `<App>/<LogicalId>`.
    pub resources: Mapping,
    /// `Outputs.<Name>.Value` per output name (outputs whose condition is false left out).
    outputs: Mapping,
    /// The nested applications, outermost first.
    pub nested: Vec<NestedApp>,
}

/// What a parameter is worth when a condition is evaluated.
#[derive(Debug, Clone, PartialEq)]
enum Known {
    /// A plain value.
    Text(String),
    /// A reference to a resource (a name, an ARN, a URL): never empty, not known before the
    /// stack exists.
    Reference,
    /// Not known (a parameter without a `Default`): `why`.
    Unknown(String),
}

/// The root template `doc` read from `path`, flattened; its parameters are their defaults.
pub(super) fn flatten_root(path: &Path, doc: &Value) -> Result<Flattened, TemplateError> {
    let mut known = HashMap::new();
    for (name, p) in doc.get("Parameters").and_then(Value::as_mapping).into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        let value = match p.get("Default").and_then(scalar) {
            Some(v) => Known::Text(v),
            None => Known::Unknown(format!("parameter {name} has no Default")),
        };
        known.insert(name.to_owned(), value);
    }
    flatten(path, doc, &known, 0)
}

fn flatten(path: &Path, doc: &Value, params: &HashMap<String, Known>, depth: usize) -> Result<Flattened, TemplateError> {
    let resources =
        doc.get("Resources").and_then(Value::as_mapping).ok_or_else(|| unsupported("Resources", "the template has no Resources mapping"))?;
    let conditions = Conditions::evaluate(doc.get("Conditions"), params)?;
    let mut kept = Mapping::new();
    for (id, resource) in resources {
        let at = id.as_str().unwrap_or_default();
        if !conditions.holds_for(resource, at)? {
            continue;
        }
        kept.insert(id.clone(), conditions.strip(resource, at)?.unwrap_or(Value::Null));
    }
    if let Some(globals) = doc.get("Globals").and_then(|g| g.get("Function")) {
        for (_, resource) in kept.iter_mut().filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some("AWS::Serverless::Function")) {
            let globals = conditions.strip(globals, "Globals.Function")?.unwrap_or(Value::Null);
            if let Some(map) = resource.as_mapping_mut() {
                let props = map.entry("Properties".into()).or_insert(Value::Mapping(Mapping::new()));
                *props = merged(&globals, props);
            }
        }
    }
    let mut outputs = Mapping::new();
    for (name, output) in doc.get("Outputs").and_then(Value::as_mapping).into_iter().flatten() {
        let at = format!("Outputs.{}", name.as_str().unwrap_or_default());
        if conditions.holds_for(output, &at)? {
            if let Some(value) = output.get("Value").map(|v| conditions.strip(v, &at)).transpose()?.flatten() {
                outputs.insert(name.clone(), value);
            }
        }
    }
    let mut flat = Flattened { resources: kept, outputs, nested: Vec::new() };
    let mut pending: Vec<String> =
        flat.resources.iter().filter(|(_, r)| location_key(r).is_some()).filter_map(|(id, _)| id.as_str().map(str::to_owned)).collect();
    while !pending.is_empty() {
        // An application whose parameters read another's outputs comes after it.
        let ready = pending
            .iter()
            .position(|app| pending.iter().all(|other| !reads_outputs_of(&flat.resources[app.as_str()], other)))
            .ok_or_else(|| unsupported(pending.join(", "), "these applications' Parameters read each other's Outputs (a cycle)"))?;
        let app = pending.remove(ready);
        if depth >= MAX_DEPTH {
            return Err(unsupported(&app, format!("applications nest deeper than {MAX_DEPTH} levels (does a template nest itself?)")));
        }
        nest(path, &app, params, &mut flat, depth)?;
    }
    Ok(flat)
}

/// Reads application `app` of `flat` (a template read from `path`) and merges its resources in.
fn nest(path: &Path, app: &str, params: &HashMap<String, Known>, flat: &mut Flattened, depth: usize) -> Result<(), TemplateError> {
    let resource = &flat.resources[app];
    let child_path = location(app, resource, path)?;
    let text = super::read(&child_path)?;
    let child_doc = super::parse_yaml(&child_path, &text)?;
    let given = resource.get("Properties").and_then(|p| p.get("Parameters")).and_then(Value::as_mapping).cloned().unwrap_or_default();
    let declared = child_doc.get("Parameters").and_then(Value::as_mapping).cloned().unwrap_or_default();
    if let Some(name) = given.keys().find(|k| !declared.contains_key(*k)) {
        let name = name.as_str().unwrap_or_default();
        return Err(unsupported(format!("{app}.Properties.Parameters.{name}"), format!("is not a parameter of {}", child_path.display())));
    }
    let mut values = HashMap::new();
    let mut known = HashMap::new();
    for (name, declaration) in &declared {
        let Some(name) = name.as_str() else { continue };
        let value = given.get(name).or_else(|| declaration.get("Default")).cloned().ok_or_else(|| {
            unsupported(
                format!("{app}.Properties.Parameters.{name}"),
                format!("is required: parameter {name} of {} has no Default", child_path.display()),
            )
        })?;
        known.insert(name.to_owned(), known_value(&value, params));
        // `!Ref` of a CommaDelimitedList parameter is a list of its items.
        let list = declaration.get("Type").and_then(Value::as_str) == Some("CommaDelimitedList");
        let value = match scalar(&value) {
            Some(text) if list => Value::Sequence(text.split(',').map(|item| item.trim().to_owned().into()).collect()),
            _ => value,
        };
        values.insert(name.to_owned(), value);
    }
    let child = flatten(&child_path, &child_doc, &known, depth + 1)?;
    let scope = Scope { app, params: &values, resources: child.resources.keys().filter_map(Value::as_str).collect() };
    for (id, resource) in &child.resources {
        let id = id.as_str().unwrap_or_default();
        flat.resources.insert(format!("{app}/{id}").into(), scope.rewrite(resource));
    }
    let outputs: Mapping = child.outputs.iter().map(|(k, v)| (k.clone(), scope.rewrite(v))).collect();
    flat.nested.push(NestedApp { logical_id: app.to_owned(), template: child_path });
    flat.nested.extend(child.nested.into_iter().map(|n| NestedApp { logical_id: format!("{app}/{}", n.logical_id), ..n }));
    let ids: Vec<Value> = flat.resources.keys().cloned().collect();
    for id in ids {
        let at = id.as_str().unwrap_or_default().to_owned();
        let value = substitute_outputs(&flat.resources[&id], app, &outputs, &at)?;
        flat.resources.insert(id, value);
    }
    let names: Vec<Value> = flat.outputs.keys().cloned().collect();
    for name in names {
        let at = format!("Outputs.{}", name.as_str().unwrap_or_default());
        let value = substitute_outputs(&flat.outputs[&name], app, &outputs, &at)?;
        flat.outputs.insert(name, value);
    }
    Ok(())
}

/// The key naming a nested template: `Location` of an application, `TemplateURL` of a stack.
fn location_key(resource: &Value) -> Option<&'static str> {
    match resource.get("Type").and_then(Value::as_str)? {
        "AWS::Serverless::Application" => Some("Location"),
        "AWS::CloudFormation::Stack" => Some("TemplateURL"),
        _ => None,
    }
}

/// The template file of application `app`, relative to the template at `parent`.
fn location(app: &str, resource: &Value, parent: &Path) -> Result<PathBuf, TemplateError> {
    let key = location_key(resource).unwrap_or("Location");
    let at = format!("{app}.Properties.{key}");
    let value = resource.get("Properties").and_then(|p| p.get(key)).ok_or_else(|| unsupported(&at, "is required"))?;
    if let Some(id) = value.get("ApplicationId") {
        let id = scalar(id).unwrap_or_else(|| "(an intrinsic)".into());
        let version = value.get("SemanticVersion").and_then(scalar).unwrap_or_else(|| "?".into());
        return Err(unsupported(
            at,
            format!("application {id} version {version} is in the AWS Serverless Application Repository, which the local runtime cannot reach: give a path to the application's template instead (e.g. the block's template.yaml in your repository)"),
        ));
    }
    let Some(text) = value.as_str() else { return Err(unsupported(at, "must be a template path (or an ApplicationId, which runs only on AWS)")) };
    if text.contains("://") {
        return Err(unsupported(
            at,
            format!("{text} is not a local template path: the local runtime reads nested templates from this repository only"),
        ));
    }
    let path = parent.parent().unwrap_or(Path::new(".")).join(text);
    let path = if path.is_dir() { path.join("template.yaml") } else { path };
    if !path.is_file() {
        return Err(unsupported(at, format!("{}: no such template file", path.display())));
    }
    Ok(path)
}

/// What `value`, given to a nested application, is worth in its conditions.
fn known_value(value: &Value, params: &HashMap<String, Known>) -> Known {
    if let Some(text) = scalar(value) {
        return Known::Text(text);
    }
    // `Fn::Join [delimiter, list]`, the list given item by item or as a CommaDelimitedList
    // parameter (known as its text): the consumer kit's `!Equals [!Join ["", !Ref EventTypes], ""]`.
    if let Some(args) = intrinsic(value, "Join") {
        let (Some(delimiter), Some(list)) = (args.get(0).and_then(scalar), args.get(1)) else {
            return Known::Unknown("Fn::Join takes a delimiter and a list".into());
        };
        let items: Vec<Known> = match list.as_sequence() {
            Some(items) => items.iter().map(|item| known_value(item, params)).collect(),
            None => match known_value(list, params) {
                Known::Text(text) => text.split(',').map(|item| Known::Text(item.trim().to_owned())).collect(),
                other => vec![other],
            },
        };
        let mut texts = Vec::new();
        for item in items {
            match item {
                Known::Text(text) => texts.push(text),
                other => return other,
            }
        }
        return Known::Text(texts.join(delimiter.as_str()));
    }
    match ref_target(value) {
        Some(name) if params.contains_key(&name) => params[&name].clone(),
        Some(name) if name.starts_with("AWS::") => Known::Unknown(format!("{name} is known only when the stack runs")),
        _ => Known::Reference,
    }
}

/// Whether `resource` (a resource of the parent) reads an output of application `app` in its
/// `Parameters`.
fn reads_outputs_of(resource: &Value, app: &str) -> bool {
    fn reads(v: &Value, app: &str) -> bool {
        if let Some((id, attr)) = intrinsic(v, "GetAtt").and_then(|_| get_att(v)) {
            return id == app && attr.starts_with("Outputs.");
        }
        if let Some((text, _)) = intrinsic(v, "Sub").and_then(sub_parts) {
            if text.contains(&format!("${{{app}.Outputs.")) {
                return true;
            }
        }
        match v {
            Value::Mapping(m) => m.values().any(|v| reads(v, app)),
            Value::Sequence(s) => s.iter().any(|v| reads(v, app)),
            Value::Tagged(t) => reads(&t.value, app),
            _ => false,
        }
    }
    resource.get("Properties").and_then(|p| p.get("Parameters")).is_some_and(|p| reads(p, app))
}

/// `over` with `base`'s keys it lacks, maps merged key by key (SAM's Globals: the resource's
/// own value wins).
fn merged(base: &Value, over: &Value) -> Value {
    match (base.as_mapping(), over.as_mapping()) {
        (Some(b), Some(o)) => {
            let mut out = o.clone();
            for (k, bv) in b {
                let v = match o.get(k) {
                    Some(ov) => merged(bv, ov),
                    None => bv.clone(),
                };
                out.insert(k.clone(), v);
            }
            Value::Mapping(out)
        }
        _ => over.clone(),
    }
}

/// The argument of a condition function (`Fn::Equals`, …, and `Condition`, which has no `Fn::`).
fn condition_fn<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    if name == "Condition" {
        return match v {
            Value::Tagged(t) if t.tag == "Condition" => Some(&t.value),
            Value::Mapping(m) if m.len() == 1 => m.get("Condition"),
            _ => None,
        };
    }
    intrinsic(v, name)
}

/// The template's conditions, evaluated.
struct Conditions(HashMap<String, bool>);

impl Conditions {
    fn evaluate(defs: Option<&Value>, params: &HashMap<String, Known>) -> Result<Self, TemplateError> {
        let defs = defs.and_then(Value::as_mapping).cloned().unwrap_or_default();
        let mut done = HashMap::new();
        for name in defs.keys().filter_map(Value::as_str) {
            evaluate_named(name, &defs, params, &mut done, &mut Vec::new())?;
        }
        Ok(Self(done))
    }

    fn get(&self, name: &str, at: &str) -> Result<bool, TemplateError> {
        self.0.get(name).copied().ok_or_else(|| unsupported(at, format!("condition {name} is not in the template's Conditions")))
    }

    /// Whether the `Condition` of `item` (a resource or an output; none: true) holds.
    fn holds_for(&self, item: &Value, at: &str) -> Result<bool, TemplateError> {
        match item.get("Condition").and_then(Value::as_str) {
            Some(name) => self.get(name, &format!("{at}.Condition")),
            None => Ok(true),
        }
    }

    /// `v` with every `Fn::If` replaced by its chosen branch and `!Ref AWS::NoValue` removed
    /// (`None`: `v` itself is no value).
    fn strip(&self, v: &Value, at: &str) -> Result<Option<Value>, TemplateError> {
        if ref_target(v).as_deref() == Some("AWS::NoValue") {
            return Ok(None);
        }
        if let Some(arg) = intrinsic(v, "If") {
            let parts = arg
                .as_sequence()
                .filter(|s| s.len() == 3)
                .ok_or_else(|| unsupported(at, "Fn::If takes [condition, value if true, value if false]"))?;
            let name = parts[0].as_str().ok_or_else(|| unsupported(at, "Fn::If names a condition"))?;
            let chosen = if self.get(name, at)? { &parts[1] } else { &parts[2] };
            return self.strip(chosen, at);
        }
        Ok(Some(match v {
            Value::Mapping(m) => {
                let mut out = Mapping::new();
                for (k, v) in m {
                    if let Some(v) = self.strip(v, at)? {
                        out.insert(k.clone(), v);
                    }
                }
                Value::Mapping(out)
            }
            Value::Sequence(s) => {
                Value::Sequence(s.iter().map(|v| self.strip(v, at)).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect())
            }
            Value::Tagged(t) => {
                let inner = self.strip(&t.value, at)?.unwrap_or(Value::Null);
                Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue { tag: t.tag.clone(), value: inner }))
            }
            other => other.clone(),
        }))
    }
}

fn evaluate_named(
    name: &str,
    defs: &Mapping,
    params: &HashMap<String, Known>,
    done: &mut HashMap<String, bool>,
    stack: &mut Vec<String>,
) -> Result<bool, TemplateError> {
    if let Some(v) = done.get(name) {
        return Ok(*v);
    }
    let at = format!("Conditions.{name}");
    if stack.iter().any(|n| n == name) {
        return Err(unsupported(at, "refers to itself"));
    }
    let def = defs.get(name).ok_or_else(|| unsupported(&at, "no such condition"))?;
    stack.push(name.to_owned());
    let value = evaluate_expr(def, defs, params, done, stack, &at)?;
    stack.pop();
    done.insert(name.to_owned(), value);
    Ok(value)
}

fn evaluate_expr(
    v: &Value,
    defs: &Mapping,
    params: &HashMap<String, Known>,
    done: &mut HashMap<String, bool>,
    stack: &mut Vec<String>,
    at: &str,
) -> Result<bool, TemplateError> {
    let list = |arg: &Value| arg.as_sequence().cloned().ok_or_else(|| unsupported(at, "a condition function takes a list"));
    if let Some(arg) = condition_fn(v, "Condition") {
        let name = arg.as_str().ok_or_else(|| unsupported(at, "Condition names a condition"))?;
        return evaluate_named(name, defs, params, done, stack);
    }
    if let Some(arg) = intrinsic(v, "Not") {
        let items = list(arg)?;
        let inner = items.first().ok_or_else(|| unsupported(at, "Fn::Not takes one condition"))?;
        return Ok(!evaluate_expr(inner, defs, params, done, stack, at)?);
    }
    for (name, all) in [("And", true), ("Or", false)] {
        if let Some(arg) = intrinsic(v, name) {
            let mut result = all;
            for item in list(arg)? {
                let value = evaluate_expr(&item, defs, params, done, stack, at)?;
                result = if all { result && value } else { result || value };
            }
            return Ok(result);
        }
    }
    if let Some(arg) = intrinsic(v, "Equals") {
        let items = list(arg)?;
        let [a, b] = items.as_slice() else { return Err(unsupported(at, "Fn::Equals takes two values")) };
        return equals(&known_value(a, params), &known_value(b, params), at);
    }
    Err(unsupported(at, "only Fn::Equals, Fn::Not, Fn::And, Fn::Or and Condition are evaluated locally"))
}

fn equals(a: &Known, b: &Known, at: &str) -> Result<bool, TemplateError> {
    match (a, b) {
        (Known::Text(a), Known::Text(b)) => Ok(a == b),
        // A resource's name, ARN or URL is never empty.
        (Known::Reference, Known::Text(t)) | (Known::Text(t), Known::Reference) if t.is_empty() => Ok(false),
        (Known::Unknown(why), _) | (_, Known::Unknown(why)) => Err(unsupported(at, format!("cannot be evaluated locally: {why}"))),
        _ => Err(unsupported(at, "compares a resource reference with a value: cannot be evaluated before the stack exists")),
    }
}

/// Rewrites a nested template's values into its parent's names.
struct Scope<'a> {
    app: &'a str,
    params: &'a HashMap<String, Value>,
    resources: HashSet<&'a str>,
}

fn long(name: &str, arg: Value) -> Value {
    let mut m = Mapping::new();
    m.insert(name.into(), arg);
    Value::Mapping(m)
}

impl Scope<'_> {
    fn rewrite(&self, v: &Value) -> Value {
        if let Some(name) = ref_target(v) {
            return self.reference(&name);
        }
        if let Some((id, attr)) = intrinsic(v, "GetAtt").and_then(|_| get_att(v)) {
            return long("Fn::GetAtt", Value::Sequence(vec![format!("{}/{id}", self.app).into(), attr.into()]));
        }
        if let Some((text, vars)) = intrinsic(v, "Sub").and_then(sub_parts) {
            return self.sub(text, vars);
        }
        match v {
            Value::Mapping(m) => Value::Mapping(m.iter().map(|(k, v)| (k.clone(), self.rewrite(v))).collect()),
            Value::Sequence(s) => Value::Sequence(s.iter().map(|v| self.rewrite(v)).collect()),
            Value::Tagged(t) => Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue { tag: t.tag.clone(), value: self.rewrite(&t.value) })),
            other => other.clone(),
        }
    }

    fn stack_name(&self) -> String {
        super::names::nested_stack_name("${AWS::StackName}", self.app)
    }

    fn reference(&self, name: &str) -> Value {
        if let Some(value) = self.params.get(name) {
            return value.clone();
        }
        match name {
            "AWS::StackName" => long("Fn::Sub", self.stack_name().into()),
            pseudo if pseudo.starts_with("AWS::") => long("Ref", name.into()),
            _ => long("Ref", format!("{}/{name}", self.app).into()),
        }
    }

    fn sub(&self, text: &str, vars: Option<&Mapping>) -> Value {
        let mut new_vars: Mapping = vars.into_iter().flatten().map(|(k, v)| (k.clone(), self.rewrite(v))).collect();
        let out = map_tokens(text, |name| {
            if name.starts_with('!') || vars.is_some_and(|v| v.contains_key(name)) {
                return format!("${{{name}}}");
            }
            if name == "AWS::StackName" {
                return self.stack_name();
            }
            if name.starts_with("AWS::") {
                return format!("${{{name}}}");
            }
            if let Some(value) = self.params.get(name) {
                if let Some(text) = scalar(value) {
                    return text;
                }
                new_vars.insert(name.into(), value.clone());
                return format!("${{{name}}}");
            }
            let id = name.split_once('.').map_or(name, |(id, _)| id);
            if self.resources.contains(id) || !name.contains('.') {
                return format!("${{{}/{name}}}", self.app);
            }
            format!("${{{name}}}")
        });
        if new_vars.is_empty() {
            long("Fn::Sub", out.into())
        } else {
            long("Fn::Sub", Value::Sequence(vec![out.into(), Value::Mapping(new_vars)]))
        }
    }
}

/// `text` with each `${token}` replaced by `f(token)` (an unclosed `${` is left as it is).
fn map_tokens(text: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        out.push_str(&rest[..start]);
        out.push_str(&f(&after[..end]));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `v` with application `app`'s outputs read: `!GetAtt <app>.Outputs.<Name>` becomes the value,
/// `${<app>.Outputs.<Name>}` in a `!Sub` too; `at` names the place in errors.
fn substitute_outputs(v: &Value, app: &str, outputs: &Mapping, at: &str) -> Result<Value, TemplateError> {
    let output = |attr: &str| -> Result<Option<Value>, TemplateError> {
        let Some(name) = attr.strip_prefix("Outputs.") else { return Ok(None) };
        outputs.get(name).cloned().map(Some).ok_or_else(|| {
            unsupported(at, format!("GetAtt {app}.Outputs.{name}: application {app} has no output {name} (or its Condition is false)"))
        })
    };
    if let Some((id, attr)) = intrinsic(v, "GetAtt").and_then(|_| get_att(v)) {
        if id == app {
            if let Some(value) = output(&attr)? {
                return Ok(value);
            }
        }
    }
    if let Some((text, vars)) = intrinsic(v, "Sub").and_then(sub_parts) {
        let mut new_vars: Mapping = vars.cloned().unwrap_or_default();
        let mut failure = None;
        let prefix = format!("{app}.");
        let out = map_tokens(text, |name| match name.strip_prefix(&prefix).map(&output) {
            Some(Ok(Some(value))) => scalar(&value).unwrap_or_else(|| {
                new_vars.insert(name.into(), value);
                format!("${{{name}}}")
            }),
            Some(Err(e)) => {
                failure = Some(e);
                String::new()
            }
            _ => format!("${{{name}}}"),
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let new_vars = Value::Mapping(
            new_vars.into_iter().map(|(k, v)| Ok((k, substitute_outputs(&v, app, outputs, at)?))).collect::<Result<_, TemplateError>>()?,
        );
        return Ok(if new_vars.as_mapping().is_some_and(Mapping::is_empty) {
            long("Fn::Sub", out.into())
        } else {
            long("Fn::Sub", Value::Sequence(vec![out.into(), new_vars]))
        });
    }
    Ok(match v {
        Value::Mapping(m) => {
            Value::Mapping(m.iter().map(|(k, v)| Ok((k.clone(), substitute_outputs(v, app, outputs, at)?))).collect::<Result<_, TemplateError>>()?)
        }
        Value::Sequence(s) => Value::Sequence(s.iter().map(|v| substitute_outputs(v, app, outputs, at)).collect::<Result<_, _>>()?),
        Value::Tagged(t) => {
            Value::Tagged(Box::new(serde_yaml_ng::value::TaggedValue { tag: t.tag.clone(), value: substitute_outputs(&t.value, app, outputs, at)? }))
        }
        other => other.clone(),
    })
}
