//! The contract between the code and `template.yaml` (`outbox::contract`): every CloudWatch alarm
//! on one of the project's namespaces names a metric the code emits, with the dimensions the code
//! emits it with; every environment variable a library `run_from_env` requires is set on the
//! function that runs it. A rename on either side fails here, instead of silently disarming an
//! alarm or failing a function at its first cold start.
//!
//! `CONTRACT_TEMPLATE=<path>` checks another template (e.g. a scratch copy).

use std::path::{Path, PathBuf};

use outbox::contract::{self, env, namespace};
use outbox_local::template::Template;
use serde_yaml_ng::{Mapping, Value};

/// Which library entry point each function binary runs, and what it requires.
const REQUIRED_BY_BINARY: &[(&str, &[&str])] = &[("outbox-relay", env::RELAY_REQUIRED), ("webhook-dispatcher", env::WEBHOOK_DISPATCHER_REQUIRED)];

fn template() -> Template {
    let path =
        std::env::var_os("CONTRACT_TEMPLATE").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("template.yaml"));
    Template::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text<'a>(props: &'a Mapping, key: &str) -> Option<&'a str> {
    props.get(key).and_then(Value::as_str)
}

/// What is wrong with the alarms of `template`, one line each.
fn alarm_violations(template: &Template) -> Vec<String> {
    let mut wrong = Vec::new();
    for (id, props) in template.resources_of("AWS::CloudWatch::Alarm") {
        let Some(ns) = text(&props, "Namespace").filter(|ns| namespace::ALL.contains(ns)) else { continue };
        let Some(name) = text(&props, "MetricName") else {
            wrong.push(format!("{id}: an alarm on namespace {ns} without a MetricName (metric math is not checked)"));
            continue;
        };
        let mut dimensions: Vec<&str> = props
            .get("Dimensions")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|d| d.get("Name").and_then(Value::as_str))
            .collect();
        dimensions.sort_unstable();
        let emitted = contract::emitted(ns);
        match emitted.iter().find(|m| m.name == name) {
            None => wrong.push(format!(
                "{id}: namespace {ns} metric {name} is not emitted by the code (it emits: {})",
                emitted.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
            )),
            Some(metric) => {
                let mut expected = metric.dimensions.to_vec();
                expected.sort_unstable();
                if dimensions != expected {
                    wrong.push(format!("{id}: {ns}/{name} is emitted with dimensions {expected:?}, the alarm names {dimensions:?}"));
                }
            }
        }
    }
    wrong
}

/// What is missing from the functions' environments, one line each.
fn environment_violations(template: &Template) -> Vec<String> {
    let functions = template.functions().unwrap_or_else(|e| panic!("the template's functions: {e}"));
    let mut wrong = Vec::new();
    for (binary, required) in REQUIRED_BY_BINARY {
        let runs: Vec<_> = functions.iter().filter(|f| f.binary == *binary).collect();
        if runs.is_empty() {
            wrong.push(format!("no function runs {binary}"));
        }
        for function in runs {
            for name in *required {
                if !function.environment.contains_key(*name) {
                    wrong.push(format!("{}: {binary} requires {name}, which the template does not set", function.logical_id));
                }
            }
        }
    }
    wrong
}

#[test]
fn every_alarm_on_a_project_namespace_names_a_metric_the_code_emits_with_its_dimensions() {
    let template = template();
    assert!(
        template.resources_of("AWS::CloudWatch::Alarm").iter().any(|(_, p)| text(p, "Namespace").is_some_and(|ns| namespace::ALL.contains(&ns))),
        "no alarm on the project's namespaces: nothing checked"
    );
    let wrong = alarm_violations(&template);
    assert!(wrong.is_empty(), "template.yaml and outbox::contract disagree:\n{}", wrong.join("\n"));
}

#[test]
fn every_variable_a_run_from_env_requires_is_set_on_its_function() {
    let wrong = environment_violations(&template());
    assert!(wrong.is_empty(), "template.yaml and outbox::contract disagree:\n{}", wrong.join("\n"));
}

/// The check itself: a renamed metric, a dropped dimension and a missing variable are caught, in
/// the building blocks the template is made of (the consumer kit's alarms, the relay's variables).
#[test]
fn a_renamed_metric_or_a_missing_variable_is_caught() {
    let renamed = crate::common::sample_template_with(&[(
        "blocks/consumer-kit/template.yaml",
        "MetricName: EventsDeadLettered",
        "MetricName: EventsDeadLetterd",
    )]);
    let wrong = alarm_violations(&renamed);
    assert!(wrong.iter().any(|w| w.contains("metric EventsDeadLetterd is not emitted")), "{wrong:?}");

    let unset = crate::common::sample_template_with(&[("blocks/relay/template.yaml", "RELAY_DLQ_URL:", "RELAY_DLQ_URL_OLD:")]);
    let wrong = environment_violations(&unset);
    assert!(wrong.iter().any(|w| w.contains("outbox-relay requires RELAY_DLQ_URL")), "{wrong:?}");
}
