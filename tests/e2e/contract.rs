//! The contract between the code and `template.yaml` (`outbox::contract`): every CloudWatch alarm
//! on one of the project's namespaces names a metric the code emits, with the dimensions the code
//! emits it with; every environment variable a library `run_from_env` requires is set on the
//! function that runs it. A rename on either side fails here, instead of silently disarming an
//! alarm or failing a function at its first cold start. Every SQS queue (the delivery queues an
//! event travels through, the dead-letter queues) takes a message as large as the bus delivers
//! inline, so no event the consumer accepts is refused on the way.
//!
//! And the contract between the templates and AWS's name limits: every physical name the sample
//! (and examples/my-service) sets, its blocks' included, fits its service's limit for a stack name
//! of the longest length CloudFormation allows (128), a nested stack named as CloudFormation names
//! it (`<parent>-<App>-<12 characters>`). A name that would fail the deploy for some allowed stack
//! name fails here.
//!
//! `CONTRACT_TEMPLATE=<path>` checks another template (e.g. a scratch copy).

use std::path::{Path, PathBuf};

use outbox::contract::{self, env, namespace};
use outbox_template::names::{self, MAX_STACK_NAME};
use outbox_template::{Resolver, Template};
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

/// Every SQS queue whose `MaximumMessageSize` is missing (SQS's default was 256 KiB) or under the
/// bus's inline limit ([`outbox::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES`], 1 MiB: what a consumer
/// accepts inline), one line each.
fn message_size_violations(template: &Template) -> Vec<String> {
    let inline = outbox::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES;
    let mut wrong = Vec::new();
    for (id, props) in template.resources_of("AWS::SQS::Queue") {
        let size = match props.get("MaximumMessageSize") {
            None => {
                wrong.push(format!("{id}: no MaximumMessageSize (the default may be 256 KiB); at least {inline} bytes"));
                continue;
            }
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.parse().ok(),
            Some(_) => None,
        };
        match size {
            Some(bytes) if bytes >= inline as u64 => {}
            Some(bytes) => wrong.push(format!("{id}: MaximumMessageSize {bytes} bytes is under the bus's inline limit of {inline}")),
            None => wrong.push(format!("{id}: MaximumMessageSize is not a number of bytes")),
        }
    }
    wrong
}

#[test]
fn every_queue_takes_a_message_as_large_as_the_bus_delivers_inline() {
    let template = template();
    assert!(!template.resources_of("AWS::SQS::Queue").is_empty(), "no queue: nothing checked");
    let wrong = message_size_violations(&template);
    assert!(wrong.is_empty(), "queues that would refuse an event the consumer accepts inline:\n{}", wrong.join("\n"));
}

/// The check itself: a queue that states no size, or 256 KiB, is caught.
#[test]
fn a_queue_without_a_large_enough_maximum_message_size_is_caught() {
    let kit = "blocks/consumer-kit/template.yaml";
    let smaller = crate::common::sample_template_with(&[(kit, "MaximumMessageSize: 1048576", "MaximumMessageSize: 262144")]);
    let wrong = message_size_violations(&smaller);
    assert!(wrong.iter().any(|w| w.contains("DeliveryQueue: MaximumMessageSize 262144 bytes is under")), "{wrong:?}");
    let unstated = crate::common::sample_template_with(&[("blocks/webhooks/template.yaml", "MaximumMessageSize: 1048576", "DelaySeconds: 0")]);
    let wrong = message_size_violations(&unstated);
    assert!(wrong.iter().any(|w| w.contains("WebhookDeliveryQueue: no MaximumMessageSize")), "{wrong:?}");
}

/// Each physical name `template` sets, resolved for a stack name of `stack_len` characters (an
/// account id's 12 digits, a 14-character Region), with its length and its service's limit:
/// `(line, over the limit)`, one line per name, e.g.
/// `ConsumerKit/ConsumerErrorsAlarm AlarmName 185/255`.
fn longest_names(template: &Template, stack_len: usize) -> Vec<(String, bool)> {
    let mut resolver = Resolver::new(&"S".repeat(stack_len), "ap-southeast-7", "123456789012");
    for (parameter, default) in template.parameter_defaults() {
        resolver.set_ref(&parameter, default);
    }
    let found = template.physical_names(&resolver).unwrap_or_else(|e| panic!("{}: a name that cannot be computed: {e}", template.path.display()));
    found
        .into_iter()
        .map(|n| {
            let length = n.name.chars().count();
            (format!("{} {} {length}/{}", n.logical_id, n.rule.property, n.rule.max), length > n.rule.max)
        })
        .collect()
}

/// The names of `template` over their limit for a stack name of `stack_len` characters.
fn name_violations(template: &Template, stack_len: usize) -> Vec<String> {
    longest_names(template, stack_len).into_iter().filter(|(_, over)| *over).map(|(line, _)| line).collect()
}

#[test]
fn every_physical_name_fits_its_services_limit_for_the_longest_stack_name() {
    for path in ["template.yaml", "examples/my-service/template.yaml"] {
        let template = Template::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let names = longest_names(&template, MAX_STACK_NAME);
        assert!(names.iter().any(|(line, _)| line.contains("/ConsumerDeadLetterQueueAlarm AlarmName")), "{path}: nothing checked: {names:?}");
        // The longest name of each resource, for the record (cargo test -- --nocapture).
        eprintln!("{path}, stack name of {MAX_STACK_NAME} characters:\n  {}", names.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>().join("\n  "));
        let wrong = name_violations(&template, MAX_STACK_NAME);
        assert!(wrong.is_empty(), "{path}: names over their service's limit for a {MAX_STACK_NAME}-character stack name:\n{}", wrong.join("\n"));
    }
}

/// The check itself: the queue name the consumer kit had before (`<stack>-consumer-delivery`, in
/// a nested stack) passes for a short stack name and fails for the longest; a stack name past the
/// longest is refused by CloudFormation's own rule.
#[test]
fn a_name_over_its_limit_for_a_long_stack_name_is_caught() {
    let named = crate::common::sample_template_with(&[(
        "blocks/consumer-kit/template.yaml",
        "      VisibilityTimeout: !Ref VisibilityTimeoutSeconds\n",
        "      QueueName: !Sub ${AWS::StackName}-consumer-delivery\n      VisibilityTimeout: !Ref VisibilityTimeoutSeconds\n",
    )]);
    assert!(name_violations(&named, 20).is_empty(), "{:?}", name_violations(&named, 20));
    // <stack>-ConsumerKit-<12>-consumer-delivery: 43 characters more than the stack name, 81 from
    // a stack name of 38 on.
    assert_eq!(name_violations(&named, 37), Vec::<String>::new());
    assert_eq!(name_violations(&named, 38), ["ConsumerKit/DeliveryQueue QueueName 81/80"]);
    assert_eq!(name_violations(&named, MAX_STACK_NAME), [format!("ConsumerKit/DeliveryQueue QueueName {}/80", MAX_STACK_NAME + 43)]);
    assert!(names::check_stack_name(&"S".repeat(MAX_STACK_NAME)).is_ok());
    assert!(names::check_stack_name(&"S".repeat(MAX_STACK_NAME + 1)).is_err());
}
