//! Nested applications and conditions, read from the parent and child templates in
//! `tests/fixtures/nested`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/nested/template.yaml")
}

/// What `outbox_template::stack::Stack::resolve` declares for the fixture's resources (names as
/// the stack gives them, URLs and ARNs made up).
fn resolver(t: &Template) -> Resolver {
    let mut r = Resolver::new("shop", "us-east-1", "123456789012");
    for (name, value) in t.parameter_defaults() {
        r.set_ref(&name, value);
    }
    for table in t.tables(&r.clone()).unwrap() {
        r.set_ref(&table.logical_id, &table.name);
        r.set_attr(&table.logical_id, "StreamArn", format!("stream:{}", table.name));
    }
    for bus in t.buses(&r.clone()).unwrap() {
        r.set_ref(&bus.logical_id, &bus.name);
    }
    for q in t.queues(&r.clone()).unwrap() {
        r.set_ref(&q.logical_id, format!("url:{}", q.name));
        r.set_attr(&q.logical_id, "Arn", format!("arn:{}", q.name));
    }
    for b in t.buckets(&r.clone()).unwrap() {
        r.set_attr(&b.logical_id, "Arn", format!("arn:aws:s3:::{}", b.name));
    }
    r
}

/// The name the local stack generates for `id` of stack `shop` (CloudFormation's shape).
fn gen(id: &str, rule: &names::NameRule) -> String {
    names::generated_name("shop", id, rule)
}

/// The name of nested stack `app` of stack `shop`: `shop-<App>-<SUFFIX>`.
fn nested(app: &str) -> String {
    names::nested_stack_name("shop", app)
}

fn env(t: &Template, r: &Resolver, id: &str) -> BTreeMap<String, String> {
    let f = t.functions().unwrap().into_iter().find(|f| f.logical_id == id).unwrap_or_else(|| panic!("function {id}"));
    f.environment.iter().map(|(k, v)| (k.clone(), r.resolve_string(v, k).unwrap_or_else(|e| panic!("{e}")))).collect()
}

#[test]
fn a_nested_applications_resources_are_the_parents_named_app_slash_logical_id() {
    let t = Template::load(&fixture()).unwrap();
    let apps: Vec<(&str, bool)> = t.nested_apps().iter().map(|a| (a.logical_id.as_str(), a.template.ends_with("template.yaml"))).collect();
    assert_eq!(apps, [("Relay", true), ("Kit", true)], "the kit reads the relay's outputs: the relay is read first");
    let r = resolver(&t);
    let tables: Vec<(String, String)> = t.tables(&r).unwrap().into_iter().map(|t| (t.logical_id, t.name)).collect();
    assert_eq!(tables, [("OutboxTable".into(), "shop-outbox".into()), ("Kit/InboxTable".into(), gen("Kit/InboxTable", &names::TABLE))]);
    assert!(tables[1].1.starts_with(&format!("{}-InboxTable-", nested("Kit"))), "<nested stack>-<LogicalId>-<SUFFIX>: {tables:?}");
    let buses: Vec<(String, String)> = t.buses(&r).unwrap().into_iter().map(|b| (b.logical_id, b.name)).collect();
    assert_eq!(
        buses,
        [("Relay/Bus".to_owned(), format!("{}-bus", nested("Relay")))],
        "AWS::StackName in a nested template is <parent>-<App>-<SUFFIX>"
    );
    let queues = t.queues(&r).unwrap();
    let queue_names: Vec<(&str, &str)> = queues.iter().map(|q| (q.logical_id.as_str(), q.name.as_str())).collect();
    let (relay_dlq, kit_dlq) = (gen("Relay/DeadLetterQueue", &names::QUEUE), format!("{}-dlq", nested("Kit")));
    assert_eq!(queue_names, [("Relay/DeadLetterQueue", relay_dlq.as_str()), ("Kit/DeadLetterQueue", kit_dlq.as_str())]);
    assert_eq!(queues[0].attributes["MessageRetentionPeriod"], "1209600", "the parent's parameter, passed on, beats the child's default");
    assert_eq!(t.buckets(&r).unwrap()[0].name, gen("Relay/FailedBatches", &names::BUCKET));
    assert!(t.buckets(&r).unwrap()[0].name.starts_with("shop-relay-"), "lower case");
    assert_eq!(t.resource_type("Relay/RelayFunction"), Some("AWS::Serverless::Function"));
}

#[test]
fn a_nested_functions_parameters_globals_and_references_are_its_own() {
    let t = Template::load(&fixture()).unwrap();
    let r = resolver(&t);
    let functions = t.functions().unwrap();
    let relay = functions.iter().find(|f| f.logical_id == "Relay/RelayFunction").unwrap();
    let consumer = functions.iter().find(|f| f.logical_id == "Consumer").unwrap();
    assert_eq!((relay.timeout_secs, consumer.timeout_secs), (45, 10), "each template's Globals apply to its own functions");
    let FunctionEvent::DynamoDb(stream) = &relay.events[0] else { panic!("{:?}", relay.events) };
    assert_eq!((stream.table_logical_id.as_str(), stream.batch_size, stream.bisect_on_error), ("OutboxTable", 25, true));
    let destination = r.resolve_string(stream.on_failure.as_ref().unwrap(), "d").unwrap();
    assert_eq!(destination, format!("arn:aws:s3:::{}", gen("Relay/FailedBatches", &names::BUCKET)));
    let relay_env = env(&t, &r, "Relay/RelayFunction");
    assert_eq!(relay_env["SHARED"], "relay");
    let (bus, dlq) = (format!("{}-bus", nested("Relay")), gen("Relay/DeadLetterQueue", &names::QUEUE));
    assert_eq!(relay_env["EVENT_BUS_NAME"], bus, "no bus given: the block's condition creates one");
    assert_eq!(relay_env["OUTBOX_TABLE"], "shop-outbox");
    assert_eq!(relay_env["DLQ_URL"], format!("url:{dlq}"));
    assert_eq!(relay_env["WHERE"], format!("{}/arn:{dlq}/shop-outbox/25", nested("Relay")));
    let consumer_env = env(&t, &r, "Consumer");
    assert!(!consumer_env.contains_key("SHARED"));
    assert_eq!(consumer_env["INBOX_TABLE"], gen("Kit/InboxTable", &names::TABLE));
    assert_eq!(consumer_env["DLQ"], format!("dlq=url:{}-dlq", nested("Kit")));
    let FunctionEvent::EventBridgeRule(rule) = &consumer.events[0] else { panic!() };
    assert_eq!(r.resolve_string(rule.bus.as_ref().unwrap(), "b").unwrap(), bus);
    assert_eq!(r.resolve_string(rule.dead_letter_arn.as_ref().unwrap(), "d").unwrap(), format!("arn:{}-dlq", nested("Kit")));
}

#[test]
fn a_parameter_given_turns_the_nested_condition_off() {
    let text = std::fs::read_to_string(fixture()).unwrap().replace("BatchSize: 25", "BatchSize: 25\n        EventBusName: existing-bus");
    let t = Template::parse(&fixture(), &text).unwrap();
    let r = resolver(&t);
    assert!(t.buses(&r).unwrap().is_empty(), "the block's bus has Condition: CreateBus");
    assert_eq!(env(&t, &r, "Relay/RelayFunction")["EVENT_BUS_NAME"], "existing-bus");
    assert_eq!(env(&t, &r, "Consumer")["INBOX_TABLE"], gen("Kit/InboxTable", &names::TABLE));
}

#[test]
fn root_conditions_pick_branches_and_drop_no_values() {
    let text = r#"
Parameters:
  Reserved: {Type: Number, Default: 0}
  Email: {Type: String, Default: ""}
Conditions:
  HasReserved: !Not [!Equals [!Ref Reserved, "0"]]
  HasEmail: !Not [{"Fn::Equals": [!Ref Email, ""]}]
  Either: !Or [!Condition HasReserved, {Condition: HasEmail}]
Resources:
  Subscription:
    Type: AWS::SQS::Queue
    Condition: Either
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: b}}
    Properties:
      ReservedConcurrentExecutions: !If [HasReserved, !Ref Reserved, !Ref AWS::NoValue]
      Timeout: !If [HasEmail, 1, 7]
"#;
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    assert!(t.resources_of("AWS::SQS::Queue").is_empty());
    let f = &t.functions().unwrap()[0];
    assert_eq!((f.reserved_concurrency, f.timeout_secs), (None, 7));
    let t = Template::parse(Path::new("t.yaml"), &text.replace("Default: 0", "Default: 5")).unwrap();
    assert_eq!(t.resources_of("AWS::SQS::Queue").len(), 1);
    let err = Template::parse(Path::new("t.yaml"), &text.replace("Default: \"\"", "Description: none")).unwrap_err().to_string();
    assert_eq!(err, "Conditions.HasEmail: cannot be evaluated locally: parameter Email has no Default");
}

fn parse_with(replace: &str, by: &str) -> Result<Template, TemplateError> {
    let text = std::fs::read_to_string(fixture()).unwrap();
    assert!(text.contains(replace), "{replace}");
    Template::parse(&fixture(), &text.replace(replace, by))
}

#[test]
fn a_location_the_runtime_cannot_read_is_an_error_naming_it() {
    let sar =
        "Location:\n        ApplicationId: arn:aws:serverlessrepo:us-east-1:123456789012:applications/outbox-relay\n        SemanticVersion: 1.2.0";
    let err = parse_with("Location: ./relay/template.yaml", sar).unwrap_err().to_string();
    assert!(
        err.starts_with("Relay.Properties.Location: application arn:aws:serverlessrepo:us-east-1:123456789012:applications/outbox-relay version 1.2.0 is in the AWS Serverless Application Repository"),
        "{err}"
    );
    let err = parse_with("Location: ./relay/template.yaml", "Location: https://example.com/relay.yaml").unwrap_err().to_string();
    assert!(err.starts_with("Relay.Properties.Location: https://example.com/relay.yaml is not a local template path"), "{err}");
    let err = parse_with("Location: kit", "Location: nope/template.yaml").unwrap_err().to_string();
    assert!(err.starts_with("Kit.Properties.Location: ") && err.ends_with("nope/template.yaml: no such template file"), "{err}");
}

#[test]
fn parameters_and_outputs_that_do_not_match_are_errors_naming_them() {
    let err = parse_with("        BatchSize: 25\n", "        BatchSize: 25\n        Colour: red\n").unwrap_err().to_string();
    assert!(err.starts_with("Relay.Properties.Parameters.Colour: is not a parameter of ") && err.ends_with("relay/template.yaml"), "{err}");
    let err = parse_with("        OutboxTableName: !Ref OutboxTable\n", "").unwrap_err().to_string();
    assert!(err.starts_with("Relay.Properties.Parameters.OutboxTableName: is required: parameter OutboxTableName of "), "{err}");
    let err = parse_with("Kit.Outputs.InboxTableName", "Kit.Outputs.Nope").unwrap_err().to_string();
    assert_eq!(err, "Consumer: GetAtt Kit.Outputs.Nope: application Kit has no output Nope (or its Condition is false)");
    let err = parse_with("OutboxTableName: !Ref OutboxTable", "OutboxTableName: !GetAtt Kit.Outputs.Bus").unwrap_err().to_string();
    assert_eq!(err, "Kit, Relay: these applications' Parameters read each other's Outputs (a cycle)");
}

/// What a user takes is what the sample runs: the root template builds the order service from
/// the three blocks, so the relay, the inbox and consumer dead-letter queue, and the webhooks are
/// defined once (in blocks/), wired to the sample's own outbox table, bus and consumers.
#[test]
fn the_sample_is_built_from_the_blocks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sample = Template::load(&root.join("template.yaml")).unwrap();
    let apps: Vec<(&str, PathBuf)> = sample.nested_apps().iter().map(|a| (a.logical_id.as_str(), a.template.clone())).collect();
    let blocks: Vec<(&str, PathBuf)> = ["Relay:relay", "ConsumerKit:consumer-kit", "Webhooks:webhooks"]
        .map(|a| a.split_once(':').unwrap())
        .map(|(app, dir)| (app, root.join(format!("blocks/{dir}/template.yaml"))))
        .to_vec();
    assert_eq!(apps, blocks);
    let functions = sample.functions().unwrap();
    let ids = |binary: &str| functions.iter().filter(|f| f.binary == binary).map(|f| f.logical_id.as_str()).collect::<Vec<_>>();
    assert_eq!(ids("outbox-relay"), ["Relay/RelayFunction"], "one relay, the block's");
    assert_eq!(ids("webhook-dispatcher"), ["Webhooks/WebhookDispatcherFunction"], "one dispatcher, the block's");
    let relay = functions.iter().find(|f| f.logical_id == "Relay/RelayFunction").unwrap();
    assert!(
        matches!(&relay.events[..], [FunctionEvent::DynamoDb(m)] if m.table_logical_id == "OutboxTable"),
        "on the sample's outbox: {:?}",
        relay.events
    );

    let mut r = resolver(&sample);
    for b in sample.buckets(&r.clone()).unwrap() {
        r.set_ref(&b.logical_id, &b.name);
    }
    let tables: Vec<String> = sample.tables(&r).unwrap().into_iter().map(|t| t.logical_id).collect();
    assert_eq!(tables, ["OrdersTable", "OutboxTable", "InventoryTable", "ConsumerKit/InboxTable", "Webhooks/WebhookSubscribersTable"]);
    let inbox = gen("ConsumerKit/InboxTable", &names::TABLE);
    let kit_dlq = gen("ConsumerKit/ConsumerDeadLetterQueue", &names::QUEUE);
    let bus = "shop-orders";
    for consumer in ["ReserveInventoryFunction", "PartnerWebhookFunction", "Webhooks/WebhookDispatcherFunction"] {
        assert_eq!(env(&sample, &r, consumer)["INBOX_TABLE"], inbox, "{consumer} records its events in the kit's inbox");
    }
    assert_eq!(env(&sample, &r, "Relay/RelayFunction")["EVENT_BUS_NAME"], bus, "the relay publishes to the sample's bus");
    assert_eq!(env(&sample, &r, "Webhooks/WebhookDispatcherFunction")["EVENT_BUS_NAME"], bus);
    let reserve = env(&sample, &r, "ReserveInventoryFunction");
    assert_eq!(reserve["DEAD_LETTER_QUEUE_URL"], format!("url:{kit_dlq}"), "the kit's dead-letter queue");
    assert_eq!(reserve["DEAD_LETTER_RETENTION_SECONDS"], "1209600", "the retention rule, the kit's output");
    // reserve-inventory reads the kit's delivery queue (its retry window, its redrive to the
    // kit's dead-letter queue), fed by the kit's rule with the sample's two order event types.
    let consumer = functions.iter().find(|f| f.logical_id == "ReserveInventoryFunction").unwrap();
    assert!(
        matches!(&consumer.events[..], [FunctionEvent::Sqs(m)] if m.queue_logical_id == "ConsumerKit/DeliveryQueue" && m.report_batch_item_failures),
        "on the kit's delivery queue, with ReportBatchItemFailures: {:?}",
        consumer.events
    );
    let queues = sample.queues(&r).unwrap();
    let delivery = queues.iter().find(|q| q.logical_id == "ConsumerKit/DeliveryQueue").expect("the kit's delivery queue");
    let redrive = delivery.redrive_policy.as_ref().expect("a redrive policy");
    assert_eq!(r.resolve_string(&redrive["deadLetterTargetArn"], "redrive").unwrap(), format!("arn:{kit_dlq}"));
    let rules = sample.standalone_rules().unwrap();
    let rule = rules.iter().find(|rule| rule.logical_id == "ConsumerKit/DeliveryRule").expect("the kit's rule");
    assert_eq!(rule.pattern, serde_json::json!({"source": ["example.orders"], "detail-type": ["OrderCreated", "OrderCancelled"]}));
    assert_eq!(r.resolve_string(rule.bus.as_ref().unwrap(), "bus").unwrap(), bus, "on the sample's bus");
}

/// The webhooks block's rule reads its event pattern from CommaDelimitedList parameters.
#[test]
fn a_comma_delimited_list_parameter_is_a_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = "Resources:\n  Webhooks:\n    Type: AWS::Serverless::Application\n    Properties:\n      Location: blocks/webhooks/template.yaml\n      Parameters:\n        EventBusName: bus\n        EventSources: a.b, c\n        EventTypes: Created\n        InboxTableName: inbox\n";
    let t = Template::parse(&root.join("parent.yaml"), text).unwrap();
    let rules = t.standalone_rules().unwrap();
    assert_eq!(rules[0].logical_id, "Webhooks/WebhookDeliveryRule");
    assert_eq!(rules[0].pattern, serde_json::json!({"source": ["a.b", "c"], "detail-type": ["Created"]}));
    let dispatcher = t.functions().unwrap().into_iter().find(|f| f.logical_id == "Webhooks/WebhookDispatcherFunction").unwrap();
    assert!(!dispatcher.environment.contains_key("CLAIM_CHECK_BUCKET"), "no payload bucket given: no claim check");
}

/// The consumer kit creates its delivery queue and rule only when it is told what to deliver
/// (`HasDeliveryQueue: !Not [!Equals [!Join ["", !Ref EventTypes], ""]]`).
#[test]
fn the_consumer_kits_delivery_queue_follows_its_event_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kit = |extra: &str| {
        let text = format!("Resources:\n  Kit:\n    Type: AWS::Serverless::Application\n    Properties:\n      Location: blocks/consumer-kit/template.yaml\n      Parameters:\n        EventBusName: bus\n{extra}");
        Template::parse(&root.join("parent.yaml"), &text).unwrap()
    };
    let r = Resolver::new("s", "us-east-1", "1");
    let queues = |t: &Template| t.queues(&r).unwrap().into_iter().map(|q| q.logical_id).collect::<Vec<_>>();
    let with = kit("        EventSources: example.customers\n        EventTypes: CustomerRegistered, CustomerDeleted\n");
    assert_eq!(queues(&with), ["Kit/DeliveryQueue", "Kit/ConsumerDeadLetterQueue"]);
    let rules = with.standalone_rules().unwrap();
    assert_eq!(rules[0].pattern, serde_json::json!({"source": ["example.customers"], "detail-type": ["CustomerRegistered", "CustomerDeleted"]}));
    let without = kit("");
    assert_eq!(queues(&without), ["Kit/ConsumerDeadLetterQueue"]);
    assert!(without.standalone_rules().unwrap().is_empty());
}

/// The consumer kit schedules its parked check (a schedule rule, read apart from the rules with
/// an event pattern) only with a delivery queue and a consumer function, and its inbox table has
/// the sparse parked index.
#[test]
fn the_consumer_kit_schedules_the_parked_check_with_a_queue_and_a_function() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kit = |extra: &str| {
        let text = format!("Resources:\n  Kit:\n    Type: AWS::Serverless::Application\n    Properties:\n      Location: blocks/consumer-kit/template.yaml\n      Parameters:\n        EventBusName: bus\n{extra}");
        Template::parse(&root.join("parent.yaml"), &text).unwrap()
    };
    let r = Resolver::new("s", "us-east-1", "1");
    let queued = "        EventSources: a.b\n        EventTypes: Created\n";
    let with = kit(&format!("{queued}        ConsumerFunctionName: s-consumer\n        SequenceGapAlarmSeconds: 600\n"));
    let schedules = with.schedule_rules().unwrap();
    assert_eq!(schedules.len(), 1, "{schedules:?}");
    assert_eq!(schedules[0].logical_id, "Kit/ParkedCheckRule");
    assert_eq!(r.resolve_string(&schedules[0].schedule, "ScheduleExpression").unwrap(), "rate(5 minutes)");
    let (id, _, input) = &schedules[0].targets[0];
    assert_eq!(id, "parked-check");
    let input = r.resolve_string(input.as_ref().expect("an Input"), "Input").unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&input).unwrap(), serde_json::json!({"outbox": "check-parked", "gap_after_seconds": 600}));
    assert!(with.standalone_rules().unwrap().iter().all(|rule| rule.logical_id != "Kit/ParkedCheckRule"));
    assert!(kit(queued).schedule_rules().unwrap().is_empty(), "no consumer function: no check");
    assert!(kit("        ConsumerFunctionName: s-consumer\n").schedule_rules().unwrap().is_empty(), "no queue: no check");

    let tables = with.tables(&r).unwrap();
    let index = &tables.iter().find(|t| t.logical_id == "Kit/InboxTable").unwrap().global_indexes[0];
    assert_eq!(index.name, outbox::ordering::PARKED_INDEX, "the name the library queries");
    let key = [(outbox::ordering::PARKED_CONSUMER.to_owned(), "HASH".to_owned()), (outbox::ordering::PARKED_AT.to_owned(), "RANGE".to_owned())];
    assert_eq!(index.key_schema, key);
    assert_eq!(index.projection, "INCLUDE");
    assert_eq!(index.non_key_attributes, outbox::ordering::PARKED_INDEX_ATTRIBUTES, "what parked_from_item reads, not the payload");
    assert_eq!(crate::rate_period("rate(1 hour)"), Some(std::time::Duration::from_secs(3600)));
    assert_eq!(crate::rate_period("cron(0 12 * * ? *)"), None);
}

/// `sam build` builds a function in its `CodeUri`, relative to the template that declares it: a
/// nested application's function from the nested template's directory; `.` when absent; an S3
/// location is no directory.
#[test]
fn a_functions_code_uri_is_relative_to_the_template_that_declares_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let sample = Template::load(&root.join("template.yaml")).unwrap();
    let code = |id: &str| sample.functions().unwrap().into_iter().find(|f| f.logical_id == id).unwrap().code_uri;
    assert_eq!(code("Relay/RelayFunction"), Some(root.join("blocks/relay/function")));
    assert_eq!(code("Webhooks/WebhookDispatcherFunction"), Some(root.join("blocks/webhooks/function")));
    assert_eq!(code("CreateOrderFunction"), Some(root.join(".")));

    let nested = Template::load(&fixture()).unwrap();
    let code = |id: &str| nested.functions().unwrap().into_iter().find(|f| f.logical_id == id).unwrap().code_uri;
    let dir = fixture().parent().unwrap().to_owned();
    assert_eq!(code("Relay/RelayFunction"), Some(dir.join("relay/.")), "no CodeUri: the nested template's directory");
    assert_eq!(code("Consumer"), Some(dir.join(".")));

    let s3 = "Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: f}}\n    Properties: {CodeUri: s3://bucket/f.zip}\n  G:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: g}}\n    Properties: {CodeUri: {Bucket: b, Key: g.zip}}\n";
    let t = Template::parse(Path::new("/srv/t.yaml"), s3).unwrap();
    assert_eq!(t.functions().unwrap().into_iter().map(|f| f.code_uri).collect::<Vec<_>>(), [None, None]);
}
