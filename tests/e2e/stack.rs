//! Provisioning from `template.yaml` is idempotent: setting up an existing stack again changes
//! nothing (no second rule target, no error), and every resource the functions name exists.

use crate::common::Local;
use outbox_local::aws::{sdk_config, Target, EMULATOR_ACCOUNT};
use outbox_local::stack::{Mode, Stack};
use outbox_local::template::Template;

#[tokio::test]
async fn provisioning_an_existing_stack_is_a_no_op() {
    let local = Local::start().await;
    let sdk = sdk_config(&Target { endpoint: Some(crate::common::endpoint().to_owned()), region: "us-east-1".into() }).await;
    let template = Template::load(&crate::common::root().join("template.yaml")).unwrap();
    let again = Stack::set_up(&sdk, template, &local.stack_name, EMULATOR_ACCOUNT, Mode::Provision).await.expect("a second set-up succeeds");
    let first = &local.runtime.stack;
    assert_eq!(again.tables, first.tables);
    assert_eq!(again.stream_arns, first.stream_arns, "the tables were not recreated");
    assert_eq!(again.queues, first.queues);
    assert_eq!(again.rules.len(), 2, "OrderCreated and OrderCancelled rules");
    for rule in &again.rules {
        let targets = local.events.list_targets_by_rule().rule(&rule.rule_name).event_bus_name(&rule.bus_name).send().await.unwrap();
        assert_eq!(targets.targets().len(), 1, "rule {} has exactly its delivery target", rule.rule_name);
    }
    // What the functions' environment names exists.
    for logical_id in
        ["CreateOrderFunction", "OutboxRelayFunction", "ReserveInventoryFunction", "WebhookDispatcherFunction", "PartnerWebhookFunction"]
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
    local.shutdown().await;
}
