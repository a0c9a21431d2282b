//! Provisioning from `template.yaml` is idempotent: setting up an existing stack again changes
//! nothing (no second rule target, no error), and every resource the functions name exists;
//! the consumer's events come through the consumer kit's rule and delivery queue.
//! A template made of nested applications (`tests/fixtures/nested`) provisions as one stack.

use crate::common::Local;
use outbox_cli::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_template::{self as outbox_template, names, Template};

#[tokio::test]
async fn provisioning_an_existing_stack_is_a_no_op() {
    let local = Local::start().await;
    let sdk = sdk_config(&Target { endpoint: Some(crate::common::endpoint().to_owned()), region: "us-east-1".into() }).await;
    let template = Template::load(&crate::common::root().join("template.yaml")).unwrap();
    let again = outbox_local::provision::provision(&sdk, template, &local.stack_name, EMULATOR_ACCOUNT).await.expect("a second set-up succeeds");
    let first = &local.runtime.stack;
    assert_eq!(again.tables, first.tables);
    assert_eq!(again.stream_arns, first.stream_arns, "the tables were not recreated");
    assert_eq!(again.queues, first.queues);
    assert!(again.rules.is_empty(), "no function of the sample is invoked by a rule of its own: {:?}", again.rules);
    assert_eq!(again.queue_rules, first.queue_rules);
    assert!(again.queue_rules.iter().any(|r| r.logical_id == "ConsumerKit/DeliveryRule"), "{:?}", again.queue_rules);
    for rule in &again.queue_rules {
        let targets = local.events.list_targets_by_rule().rule(&rule.rule_name).event_bus_name(&rule.bus_name).send().await.unwrap();
        assert_eq!(targets.targets().len(), rule.queues.len(), "rule {} has exactly its targets", rule.rule_name);
    }
    // reserve-inventory's events: the kit's rule → the kit's delivery queue → its SQS mapping.
    let deliveries = again.deliveries_of("ReserveInventoryFunction").expect("resolves");
    let via: Vec<_> = deliveries.iter().map(|d| (d.rule.as_str(), d.queue.as_deref())).collect();
    assert_eq!(via, [("ConsumerKit/DeliveryRule", Some("ConsumerKit/DeliveryQueue"))]);
    // What the functions' environment names exists.
    for logical_id in
        ["CreateOrderFunction", "Relay/RelayFunction", "ReserveInventoryFunction", "Webhooks/WebhookDispatcherFunction", "PartnerWebhookFunction"]
    {
        for (name, value) in local.env_of(logical_id) {
            if name.ends_with("_TABLE") {
                local.dynamodb.describe_table().table_name(&value).send().await.unwrap_or_else(|e| panic!("{logical_id} {name}={value}: {e}"));
            }
            if name.ends_with("_URL") {
                local.sqs.get_queue_attributes().queue_url(&value).send().await.unwrap_or_else(|e| panic!("{logical_id} {name}={value}: {e}"));
            }
        }
    }
    provisions_a_stack_of_nested_applications(&sdk, &local).await;
    the_longest_stack_name_provisions_and_a_longer_one_is_refused(&sdk).await;
    local.shutdown().await;
}

/// The parent and two nested applications of `tests/fixtures/nested`, on the same emulator as
/// stack `shop`: every resource under its nested name, references across applications resolved.
async fn provisions_a_stack_of_nested_applications(sdk: &aws_config::SdkConfig, local: &Local) {
    let template = Template::load(&crate::common::root().join("tests/fixtures/nested/template.yaml")).unwrap();
    let stack = outbox_local::provision::provision(sdk, template, "shop", EMULATOR_ACCOUNT).await.expect("the nested stack provisions");
    let bus = stack.buses.iter().find(|b| b.logical_id == "Relay/Bus").expect("the relay block's bus");
    local.events.describe_event_bus().name(&bus.name).send().await.expect("the bus exists");
    let relay_stack = names::nested_stack_name("shop", "Relay");
    assert_eq!(bus.name, format!("{relay_stack}-bus"), "<stack>-<App>-<SUFFIX>, the nested stack's name as on AWS");
    let dlq = stack.queue("Kit/DeadLetterQueue").expect("the kit's dead-letter queue");
    local.sqs.get_queue_attributes().queue_url(&dlq.url).send().await.expect("the queue exists");
    let rule = outbox_template::physical_name("shop", "ConsumerCreated", &names::EVENT_RULE);
    assert_eq!(
        stack.pipelines(),
        ["stream of OutboxTable → Relay/RelayFunction".to_owned(), format!("rule {rule} on bus {relay_stack}-bus → Consumer")]
    );
    let relay = stack.function("Relay/RelayFunction").expect("the relay");
    let env = stack.environment(relay).expect("the relay's environment resolves");
    assert_eq!(env["EVENT_BUS_NAME"], format!("{relay_stack}-bus"));
    assert_eq!(env["DLQ_URL"], stack.queue("Relay/DeadLetterQueue").expect("the relay's queue").url);
    let outbox_template::FunctionEvent::DynamoDb(stream) = &relay.events[0] else { panic!("a stream mapping") };
    let destination = stack.destination(stream.on_failure.as_ref().expect("an on-failure destination"), "on failure").expect("a bucket of the stack");
    let bucket = outbox_template::physical_name("shop", "Relay/FailedBatches", &names::BUCKET);
    assert!(bucket.starts_with("shop-relay-") && bucket == bucket.to_ascii_lowercase(), "{bucket}");
    assert_eq!(destination, outbox_template::stack::Destination::S3 { bucket });
    let consumer = stack.environment(stack.function("Consumer").expect("the consumer")).expect("its environment");
    local.dynamodb.describe_table().table_name(&consumer["INBOX_TABLE"]).send().await.expect("the kit's inbox table exists");
}

/// The sample provisions as a stack of the longest name CloudFormation accepts (128 characters:
/// its tables, bus and the blocks' queues and buckets are all within their limits, as on AWS),
/// and a 129-character name is refused before anything is created.
async fn the_longest_stack_name_provisions_and_a_longer_one_is_refused(sdk: &aws_config::SdkConfig) {
    let template = || Template::load(&crate::common::root().join("template.yaml")).unwrap();
    let longest = format!("long{}", "x".repeat(names::MAX_STACK_NAME - 4));
    let stack = outbox_local::provision::provision(sdk, template(), &longest, EMULATOR_ACCOUNT)
        .await
        .unwrap_or_else(|e| panic!("a 128-character stack name provisions: {e}"));
    let dlq = stack.queue("ConsumerKit/ConsumerDeadLetterQueue").expect("the kit's dead-letter queue");
    assert!(dlq.name.len() <= 80 && dlq.name.starts_with("longxxx"), "{}", dlq.name);
    let bucket = stack.buckets.iter().find(|b| b.logical_id == "OutboxPayloadBucket").expect("the payload bucket");
    assert!(bucket.name.len() <= 63, "{}", bucket.name);
    let refused =
        outbox_local::provision::provision(sdk, template(), &format!("{longest}x"), EMULATOR_ACCOUNT).await.map(|_| ()).unwrap_err().to_string();
    assert!(refused.contains("is 129 characters; CloudFormation accepts at most 128"), "{refused}");
}
