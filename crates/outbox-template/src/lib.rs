//! The SAM template model both command-line tools read (the operator's `outbox` and the local
//! runtime `outbox-local`): `template.yaml` read with its nested applications, CloudFormation
//! intrinsic functions resolved the way CloudFormation resolves them, what is read of each
//! resource kind, AWS's name limits, and a [`stack`] of the template: its resources' names, ARNs
//! and URLs as stack `<name>`, resolved, or looked up on a deployed stack. No emulator code:
//! creating the resources is the local runtime's (`outbox_local::provision`).
//!
//! One file per job: `specs` holds what is read of each resource kind, `read` the tables,
//! buses, buckets, queues and rules, `functions` the functions and their events, `intrinsics`
//! the intrinsic functions and the [`Resolver`], `nested` the nested applications and the
//! conditions, [`names`] the physical names and their limits, [`stack`] a stack of the template.
//!
//! Supported intrinsics (short and long form): `Ref`, `Fn::GetAtt` (`A.B` and `[A, B]`),
//! `Fn::Sub` (`${Name}`, `${Name.Attr}`, `${!Literal}`; the string form, and the list form with
//! a variable map), `Fn::Join`, `Fn::Select` and `Fn::Split`. Pseudo parameters:
//! `AWS::StackName`, `AWS::StackId` (its UUID derived from the name: [`names::stack_id`]),
//! `AWS::Region`, `AWS::AccountId`, `AWS::Partition`, `AWS::URLSuffix`. Physical names are
//! checked against AWS's limits as they are resolved ([`names`]). `Conditions` (`Fn::Equals`, `Fn::Not`, `Fn::And`,
//! `Fn::Or`, `Condition`), a resource's `Condition` and `Fn::If` (with `AWS::NoValue`) are
//! evaluated when the template is read, with each parameter's `Default`.
//!
//! Nested applications (`AWS::Serverless::Application`, `AWS::CloudFormation::Stack`) whose
//! `Location`/`TemplateURL` is a local path are read with the template and their resources
//! become the template's, named `<App>/<LogicalId>` as SAM CLI names them
//! (`sam local invoke Relay/RelayFunction`); see [`NestedApp`]. Anything else in a place the local
//! runtime reads is an error naming the resource and property — never silently ignored.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

mod functions;
mod intrinsics;
pub mod names;
mod nested;
#[cfg(test)]
mod nested_tests;
mod read;
mod specs;
pub mod stack;
#[cfg(test)]
mod tests;

pub use functions::no_binary;
pub use intrinsics::Resolver;
pub use nested::NestedApp;
pub use specs::rate_period;
pub use specs::{
    ArchiveSpec, BucketSpec, BusSpec, EventInvokeSpec, FunctionEvent, FunctionSpec, IndexSpec, QueueSpec, RuleSpec, ScheduleRuleSpec, SqsMappingSpec,
    StandaloneRuleSpec, StreamMappingSpec, TableSpec,
};

/// A template the local runtime cannot use.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The file could not be read or is not YAML.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// Template path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file is not valid YAML.
    #[error("{path}:{line}:{column}: not valid YAML: {reason}")]
    Yaml {
        /// Template path.
        path: PathBuf,
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// A value the runtime needs is missing or of an unsupported form.
    #[error("{at}: {reason}")]
    Unsupported {
        /// `Resource.Property.Path`.
        at: String,
        /// Why.
        reason: String,
    },
}

fn unsupported(at: impl Into<String>, reason: impl Into<String>) -> TemplateError {
    TemplateError::Unsupported { at: at.into(), reason: reason.into() }
}

/// A parsed SAM template, its nested applications' resources included.
#[derive(Debug, Clone)]
pub struct Template {
    /// Where it was read from.
    pub path: PathBuf,
    resources: Mapping,
    parameters: Mapping,
    nested: Vec<NestedApp>,
}

/// The physical name the local stack gives resource `logical_id` (named under `rule`) of
/// stack `stack_name` when the template names none: CloudFormation's shape,
/// `<stack>-<logical id>-<SUFFIX>` cut to the service's limit ([`names::generated_name`]; a
/// nested resource `<App>/<Id>` is named after its nested stack,
/// `shop-Relay-<SUFFIX>-RelayDeadLetterQueue-<SUFFIX>`). The suffixes are derived from the names
/// (CloudFormation's are random), so names are stable across runs.
pub fn physical_name(stack_name: &str, logical_id: &str, rule: &names::NameRule) -> String {
    names::generated_name(stack_name, logical_id, rule)
}

impl Template {
    /// Reads and parses `path`, and the local templates of its nested applications.
    ///
    /// # Errors
    /// [`TemplateError::Read`], or what [`Template::parse`] returns.
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let text = read(path)?;
        Self::parse(path, &text)
    }

    /// Parses template `text` read from `path` (nested applications' `Location`s are relative
    /// to `path`'s directory).
    ///
    /// # Errors
    /// [`TemplateError`] naming what cannot be read: YAML, a condition, a nested application.
    pub fn parse(path: &Path, text: &str) -> Result<Self, TemplateError> {
        Self::parse_with_overrides(path, text, &[])
    }

    /// [`Template::load`] with the root template's parameters overridden (`sam deploy
    /// --parameter-overrides Key=Value ...`): conditions, nested applications' parameters and
    /// `!Ref <Parameter>` see the given values.
    ///
    /// # Errors
    /// What [`Template::parse_with_overrides`] returns.
    pub fn load_with_overrides(path: &Path, overrides: &[(String, String)]) -> Result<Self, TemplateError> {
        let text = read(path)?;
        Self::parse_with_overrides(path, &text, overrides)
    }

    /// [`Template::parse`] with `overrides` `(name, value)` replacing the parameters' defaults.
    ///
    /// # Errors
    /// [`TemplateError::Unsupported`] naming an override that is not a parameter of the template
    /// or whose value is not one of the parameter's `AllowedValues`; what [`Template::parse`]
    /// returns.
    pub fn parse_with_overrides(path: &Path, text: &str, overrides: &[(String, String)]) -> Result<Self, TemplateError> {
        let mut doc = parse_yaml(path, text)?;
        apply_overrides(path, &mut doc, overrides)?;
        let parameters = doc.get("Parameters").and_then(Value::as_mapping).cloned().unwrap_or_default();
        let flat = nested::flatten_root(path, &doc)?;
        Ok(Self { path: path.to_owned(), resources: flat.resources, parameters, nested: flat.nested })
    }

    /// `(logical id, Properties)` of every resource of `kind`, in template order.
    pub fn resources_of(&self, kind: &str) -> Vec<(String, Mapping)> {
        self.resources
            .iter()
            .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some(kind))
            .filter_map(|(id, r)| {
                let props = r.get("Properties").and_then(Value::as_mapping).cloned().unwrap_or_default();
                Some((id.as_str()?.to_owned(), props))
            })
            .collect()
    }

    /// The `Type` of resource `logical_id`.
    pub fn resource_type(&self, logical_id: &str) -> Option<&str> {
        self.resources.get(logical_id)?.get("Type")?.as_str()
    }

    /// The nested applications read with the template (their resources are the template's,
    /// named `<App>/<LogicalId>`), outermost first.
    pub fn nested_apps(&self) -> &[NestedApp] {
        &self.nested
    }

    /// Each template parameter with its `Default` (what `!Ref <parameter>` gives in a stack
    /// deployed without overrides), in template order; parameters without a default are left out.
    pub fn parameter_defaults(&self) -> Vec<(String, String)> {
        self.parameters.iter().filter_map(|(name, p)| Some((name.as_str()?.to_owned(), intrinsics::scalar(p.get("Default")?)?))).collect()
    }
}

/// Sets each override as its parameter's `Default` in `doc`, checked against `AllowedValues`.
fn apply_overrides(path: &Path, doc: &mut Value, overrides: &[(String, String)]) -> Result<(), TemplateError> {
    if overrides.is_empty() {
        return Ok(());
    }
    let Some(parameters) = doc.get_mut("Parameters").and_then(Value::as_mapping_mut) else {
        return Err(unsupported("--parameter-overrides", format!("{} has no Parameters", path.display())));
    };
    let names: Vec<String> = parameters.keys().filter_map(Value::as_str).map(str::to_owned).collect();
    for (name, value) in overrides {
        let at = format!("--parameter-overrides {name}={value}");
        let Some(parameter) = parameters.get_mut(name.as_str()).and_then(Value::as_mapping_mut) else {
            return Err(unsupported(at, format!("{name} is not a parameter of {} (its parameters: {})", path.display(), names.join(", "))));
        };
        if let Some(allowed) = parameter.get("AllowedValues").and_then(Value::as_sequence) {
            let allowed: Vec<String> = allowed.iter().filter_map(intrinsics::scalar).collect();
            if !allowed.contains(value) {
                return Err(unsupported(at, format!("{value:?} is not one of {name}'s AllowedValues: {}", allowed.join(", "))));
            }
        }
        parameter.insert(Value::from("Default"), Value::from(value.as_str()));
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, TemplateError> {
    std::fs::read_to_string(path).map_err(|e| TemplateError::Read { path: path.to_owned(), reason: e.to_string() })
}

fn parse_yaml(path: &Path, text: &str) -> Result<Value, TemplateError> {
    serde_yaml_ng::from_str(text).map_err(|e| match e.location() {
        Some(at) => {
            // The message may repeat the location; it is said once, first.
            let reason = e.to_string().replacen(&format!(" at line {} column {}", at.line(), at.column()), "", 1);
            TemplateError::Yaml { path: path.to_owned(), line: at.line(), column: at.column(), reason }
        }
        None => TemplateError::Read { path: path.to_owned(), reason: e.to_string() },
    })
}
