//! Stack discovery: a deployed stack's [`Resources`] from CloudFormation alone, no template.
//!
//! * `DescribeStacks`: the stack's outputs, and its ARN (region and account for the ARNs built
//!   below);
//! * `ListStackResources` (paginated): every resource's logical id, physical id and type; a
//!   nested stack (`AWS::CloudFormation::Stack`, which SAM's `AWS::Serverless::Application`
//!   becomes) is followed by its physical id, the nested stack's ARN;
//! * per function (`AWS::Lambda::Function`, physical id = name): `GetFunctionConfiguration` (its
//!   environment) and `ListEventSourceMappings` (its streams and their on-failure destinations);
//! * per rule (`AWS::Events::Rule`, physical id = `<bus>|<rule>` on a custom bus, else the rule
//!   name): `DescribeRule` (its pattern and ARN) and `ListTargetsByRule` (the functions it
//!   invokes);
//! * an archive (`AWS::Events::Archive`, physical id = its name): named, its ARN built;
//! * a Custom Event Bus (`AWS::EventsV2::EventBus`, physical id = its ARN, `event-busv2/<name>/<id>`):
//!   named from its ARN;
//! * a Custom bus's subscriber (`AWS::EventsV2::Subscriber`, physical id = its ARN):
//!   `DescribeSubscriber` (its name, bus and target: the queue a consumer reads, or a function).
//!
//! Physical ids as CloudFormation documents them (the resource type reference's "Return values",
//! `Ref`): a table's and a bus's and a bucket's name, a queue's URL, a function's name.
//! Sources: <https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ListStackResources.html>,
//! <https://docs.aws.amazon.com/lambda/latest/api/API_ListEventSourceMappings.html>.
//!
//! moto's CloudFormation does not know the local runtime's stack (the runtime provisions the
//! template's resources itself), so on the emulator the verbs read the template instead
//! (`--template`); this path is tested with aws-smithy-mocks answers.

use std::collections::BTreeMap;

use aws_sdk_cloudformation::types::StackResourceSummary;

use crate::resources::{queue_name_of_url, FunctionInfo, Named, Resources, RuleInfo, SubscriberInfo};
use outbox_template::stack::QueueInfo;

/// Why a stack could not be discovered.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// An AWS call failed.
    #[error("{action}: {reason}")]
    Aws {
        /// The call, with what it was about.
        action: String,
        /// The SDK's error with its context.
        reason: String,
    },
    /// The stack is not there.
    #[error("no stack {0:?} (DescribeStacks found none): check the name and the region (AWS_REGION, --region)")]
    NoStack(String),
}

fn aws<E: std::error::Error + 'static>(action: impl Into<String>) -> impl FnOnce(E) -> DiscoveryError {
    let action = action.into();
    move |e| DiscoveryError::Aws { action, reason: aws_sdk_cloudformation::error::DisplayErrorContext(e).to_string() }
}

/// The clients discovery uses.
#[derive(Debug, Clone)]
pub struct Clients {
    /// CloudFormation.
    pub cloudformation: aws_sdk_cloudformation::Client,
    /// Lambda.
    pub lambda: aws_sdk_lambda::Client,
    /// EventBridge.
    pub events: aws_sdk_eventbridge::Client,
    /// The EventBridge Custom Event Bus.
    pub bus: aws_sdk_eventbridgev2::Client,
}

impl Clients {
    /// The clients of `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            cloudformation: aws_sdk_cloudformation::Client::new(sdk),
            lambda: aws_sdk_lambda::Client::new(sdk),
            events: aws_sdk_eventbridge::Client::new(sdk),
            bus: aws_sdk_eventbridgev2::Client::new(sdk),
        }
    }
}

/// `(region, account)` of a CloudFormation stack ARN `arn:aws:cloudformation:<region>:<account>:stack/…`.
fn region_account(stack_arn: &str) -> (String, String) {
    let parts: Vec<&str> = stack_arn.split(':').collect();
    (parts.get(3).copied().unwrap_or_default().to_owned(), parts.get(4).copied().unwrap_or_default().to_owned())
}

/// The resources of stack `name` (a name or stack ARN) and of its nested stacks.
///
/// # Errors
/// [`DiscoveryError`] naming the call that failed.
pub async fn discover(clients: &Clients, name: &str) -> Result<Resources, DiscoveryError> {
    let described = clients.cloudformation.describe_stacks().stack_name(name).send().await.map_err(aws(format!("DescribeStacks {name}")))?;
    let stack = described.stacks().first().ok_or_else(|| DiscoveryError::NoStack(name.to_owned()))?;
    let (region, account) = region_account(stack.stack_id().unwrap_or_default());
    let mut resources = Resources { source: format!("stack {name} (CloudFormation)"), ..Default::default() };
    resources.outputs =
        stack.outputs().iter().filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned()))).collect::<BTreeMap<_, _>>();

    let mut summaries = Vec::new();
    let mut stacks = vec![name.to_owned()];
    while let Some(stack_name) = stacks.pop() {
        let mut pages = clients.cloudformation.list_stack_resources().stack_name(&stack_name).into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(aws(format!("ListStackResources {stack_name}")))?;
            for summary in page.stack_resource_summaries() {
                if summary.resource_type() == Some("AWS::CloudFormation::Stack") {
                    stacks.extend(summary.physical_resource_id().map(str::to_owned));
                } else {
                    summaries.push(summary.clone());
                }
            }
        }
    }

    let mut rules = Vec::new();
    let mut subscribers = Vec::new();
    // Queue ARNs each function's SQS event source mappings read, by function name: a rule
    // targeting such a queue delivers to the function (the consumer kit's delivery queue).
    let mut queue_readers: Vec<(String, String)> = Vec::new();
    for summary in &summaries {
        let (Some(logical_id), Some(physical), Some(kind)) = (summary.logical_resource_id(), summary.physical_resource_id(), summary.resource_type())
        else {
            continue;
        };
        let named = |arn: String| Named { logical_id: logical_id.to_owned(), name: physical.to_owned(), arn };
        match kind {
            "AWS::DynamoDB::Table" => resources.tables.push(named(format!("arn:aws:dynamodb:{region}:{account}:table/{physical}"))),
            "AWS::Events::EventBus" => resources.buses.push(named(format!("arn:aws:events:{region}:{account}:event-bus/{physical}"))),
            "AWS::S3::Bucket" => resources.buckets.push(named(format!("arn:aws:s3:::{physical}"))),
            "AWS::Events::Archive" => resources.archives.push(named(format!("arn:aws:events:{region}:{account}:archive/{physical}"))),
            "AWS::SQS::Queue" => {
                let queue_name = queue_name_of_url(physical).to_owned();
                resources.queues.push(QueueInfo {
                    logical_id: logical_id.to_owned(),
                    arn: format!("arn:aws:sqs:{region}:{account}:{queue_name}"),
                    name: queue_name,
                    url: physical.to_owned(),
                });
            }
            "AWS::Lambda::Function" => {
                let (info, queues) = function(clients, logical_id, physical).await?;
                queue_readers.extend(queues.into_iter().map(|q| (q, physical.to_owned())));
                resources.functions.push(info);
            }
            "AWS::Events::Rule" => rules.push(summary),
            "AWS::EventsV2::EventBus" => resources.custom_buses.push(Named {
                logical_id: logical_id.to_owned(),
                name: physical.rsplit('/').nth(1).unwrap_or(physical).to_owned(),
                arn: physical.to_owned(),
            }),
            "AWS::EventsV2::Subscriber" => subscribers.push((logical_id, physical)),
            _ => {}
        }
    }
    for rule in rules {
        attach_rule(clients, rule, (&region, &account), &queue_readers, &mut resources.functions).await?;
    }
    for (logical_id, arn) in subscribers {
        resources.subscribers.push(subscriber(clients, logical_id, arn).await?);
    }
    Ok(resources)
}

/// Subscriber `arn` of a Custom bus: its name, bus and target (`DescribeSubscriber`).
async fn subscriber(clients: &Clients, logical_id: &str, arn: &str) -> Result<SubscriberInfo, DiscoveryError> {
    let d = clients.bus.describe_subscriber().subscriber_arn(arn).send().await.map_err(aws(format!("DescribeSubscriber {arn}")))?;
    Ok(SubscriberInfo::new(
        logical_id,
        d.name().unwrap_or_default(),
        arn,
        d.event_bus_arn().unwrap_or_default(),
        d.invoke_configuration().map(|c| c.target_arn()).unwrap_or_default(),
    ))
}

/// Function `name`: its environment and its stream mappings, and the ARNs of the queues its SQS
/// event source mappings read.
async fn function(clients: &Clients, logical_id: &str, name: &str) -> Result<(FunctionInfo, Vec<String>), DiscoveryError> {
    let configuration =
        clients.lambda.get_function_configuration().function_name(name).send().await.map_err(aws(format!("GetFunctionConfiguration {name}")))?;
    let environment = configuration.environment().and_then(|e| e.variables()).cloned().unwrap_or_default().into_iter().collect();
    let mut info = FunctionInfo { logical_id: logical_id.to_owned(), name: name.to_owned(), environment, ..Default::default() };
    let mut queues = Vec::new();
    let mut pages = clients.lambda.list_event_source_mappings().function_name(name).into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(aws(format!("ListEventSourceMappings {name}")))?;
        for mapping in page.event_source_mappings() {
            let source = mapping.event_source_arn().unwrap_or_default();
            // arn:aws:dynamodb:<region>:<account>:table/<table>/stream/<label>
            if let Some(table) = source.split_once(":table/").and_then(|(_, rest)| rest.split('/').next()).filter(|_| source.contains("/stream/")) {
                info.stream_tables.push(table.to_owned());
                let destination = mapping.destination_config().and_then(|d| d.on_failure()).and_then(|f| f.destination()).unwrap_or_default();
                if let Some(bucket) = destination.strip_prefix("arn:aws:s3:::") {
                    info.failure_buckets.push(bucket.to_owned());
                }
            } else if source.starts_with("arn:aws:sqs:") {
                queues.push(source.to_owned());
            }
        }
    }
    info.queues.clone_from(&queues);
    Ok((info, queues))
}

/// Adds the pattern of `rule` to the functions it targets, and to those reading a queue it
/// targets (`queue_readers`: queue ARN, function name).
async fn attach_rule(
    clients: &Clients,
    rule: &StackResourceSummary,
    (region, account): (&str, &str),
    queue_readers: &[(String, String)],
    functions: &mut [FunctionInfo],
) -> Result<(), DiscoveryError> {
    let physical = rule.physical_resource_id().unwrap_or_default();
    let (bus, name) = match physical.split_once('|') {
        Some((bus, name)) => (Some(bus), name),
        None => (None, physical),
    };
    let described = clients
        .events
        .describe_rule()
        .name(name)
        .set_event_bus_name(bus.map(str::to_owned))
        .send()
        .await
        .map_err(aws(format!("DescribeRule {name}")))?;
    let Some(pattern) = described.event_pattern().and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok()) else { return Ok(()) };
    let bus_name = bus.unwrap_or("default");
    let info = RuleInfo {
        logical_id: rule.logical_resource_id().unwrap_or_default().to_owned(),
        name: name.to_owned(),
        bus: bus_name.to_owned(),
        arn: described.arn().map_or_else(|| RuleInfo::arn_of(region, account, bus_name, name), str::to_owned),
    };
    let targets = clients
        .events
        .list_targets_by_rule()
        .rule(name)
        .set_event_bus_name(bus.map(str::to_owned))
        .send()
        .await
        .map_err(aws(format!("ListTargetsByRule {name}")))?;
    for target in targets.targets() {
        // arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>], or a queue some
        // functions read (arn:aws:sqs:<region>:<account>:<queue>).
        let readers: Vec<&str> = queue_readers.iter().filter(|(queue, _)| queue == target.arn()).map(|(_, f)| f.as_str()).collect();
        let direct = target.arn().split(":function:").nth(1).map(|f| f.split(':').next().unwrap_or(f));
        for f in functions.iter_mut().filter(|f| direct == Some(f.name.as_str()) || readers.contains(&f.name.as_str())) {
            f.rule_patterns.push(pattern.clone());
            f.rules.push((info.clone(), pattern.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_cloudformation::types::{Output, Stack, StackResourceSummary, StackStatus};
    use aws_smithy_mocks::{mock, mock_client, RuleMode};

    const CUSTOM_BUS: &str = "arn:aws:events:eu-west-1:111122223333:event-busv2/shop-orders/abcdefghijklmnopqrstuvwxy";
    const SUBSCRIBER: &str = "arn:aws:events:eu-west-1:111122223333:subscriber/shop-orders/shop-reserve-subscriber";

    fn summary(logical: &str, physical: &str, kind: &str) -> StackResourceSummary {
        StackResourceSummary::builder()
            .logical_resource_id(logical)
            .physical_resource_id(physical)
            .resource_type(kind)
            .last_updated_timestamp(aws_sdk_cloudformation::primitives::DateTime::from_secs(0))
            .resource_status(aws_sdk_cloudformation::types::ResourceStatus::CreateComplete)
            .build()
    }

    #[tokio::test]
    async fn a_stack_name_alone_gives_its_resources_nested_stacks_included() {
        use aws_sdk_cloudformation::operation::describe_stacks::DescribeStacksOutput;
        use aws_sdk_cloudformation::operation::list_stack_resources::ListStackResourcesOutput;
        let arn = "arn:aws:cloudformation:eu-west-1:111122223333:stack/shop/guid";
        let nested = "arn:aws:cloudformation:eu-west-1:111122223333:stack/shop-Webhooks-1/guid2";
        let stack = Stack::builder()
            .stack_name("shop")
            .stack_id(arn)
            .creation_time(aws_sdk_cloudformation::primitives::DateTime::from_secs(0))
            .stack_status(StackStatus::CreateComplete)
            .outputs(Output::builder().output_key("OrdersApi").output_value("https://api").build())
            .build();
        let describe =
            mock!(aws_sdk_cloudformation::Client::describe_stacks).then_output(move || DescribeStacksOutput::builder().stacks(stack.clone()).build());
        let root = mock!(aws_sdk_cloudformation::Client::list_stack_resources).match_requests(|r| r.stack_name() == Some("shop")).then_output(|| {
            ListStackResourcesOutput::builder()
                .stack_resource_summaries(summary("OutboxTable", "shop-outbox", "AWS::DynamoDB::Table"))
                .stack_resource_summaries(summary(
                    "ConsumerDeadLetterQueue",
                    "https://sqs.eu-west-1.amazonaws.com/111122223333/shop-consumer-dlq",
                    "AWS::SQS::Queue",
                ))
                .stack_resource_summaries(summary("OrdersEventBus", "shop-orders", "AWS::Events::EventBus"))
                .stack_resource_summaries(summary("RelayFunction", "shop-relay", "AWS::Lambda::Function"))
                .stack_resource_summaries(summary("ReserveRule", "shop-orders|shop-reserve", "AWS::Events::Rule"))
                .stack_resource_summaries(summary("EventArchive", "EventArchive-abc123", "AWS::Events::Archive"))
                .stack_resource_summaries(summary("CustomBus", CUSTOM_BUS, "AWS::EventsV2::EventBus"))
                .stack_resource_summaries(summary(
                    "Webhooks",
                    "arn:aws:cloudformation:eu-west-1:111122223333:stack/shop-Webhooks-1/guid2",
                    "AWS::CloudFormation::Stack",
                ))
                .build()
        });
        let child =
            mock!(aws_sdk_cloudformation::Client::list_stack_resources).match_requests(move |r| r.stack_name() == Some(nested)).then_output(|| {
                ListStackResourcesOutput::builder()
                    .stack_resource_summaries(summary("FailedBatches", "shop-failed-batches", "AWS::S3::Bucket"))
                    .stack_resource_summaries(summary("ReserveFunction", "shop-reserve", "AWS::Lambda::Function"))
                    .stack_resource_summaries(summary("DeliverySubscriber", SUBSCRIBER, "AWS::EventsV2::Subscriber"))
                    .build()
            });
        let cloudformation = mock_client!(aws_sdk_cloudformation, RuleMode::MatchAny, [&describe, &root, &child]);

        use aws_sdk_lambda::operation::get_function_configuration::GetFunctionConfigurationOutput;
        use aws_sdk_lambda::operation::list_event_source_mappings::ListEventSourceMappingsOutput;
        use aws_sdk_lambda::types::{DestinationConfig, EnvironmentResponse, EventSourceMappingConfiguration, OnFailure};
        let configuration = mock!(aws_sdk_lambda::Client::get_function_configuration).then_compute_output(|r| {
            let vars: std::collections::HashMap<String, String> = match r.function_name() {
                Some("shop-relay") => [("EVENT_BUS_NAME".to_owned(), "shop-orders".to_owned())].into(),
                _ => [("INBOX_TABLE".to_owned(), "shop-inbox".to_owned()), ("CONSUMER_NAME".to_owned(), "reserve".to_owned())].into(),
            };
            GetFunctionConfigurationOutput::builder().environment(EnvironmentResponse::builder().set_variables(Some(vars)).build()).build()
        });
        let mappings = mock!(aws_sdk_lambda::Client::list_event_source_mappings).then_compute_output(|r| {
            let out = ListEventSourceMappingsOutput::builder();
            if r.function_name() == Some("shop-reserve") {
                // The consumer reads its delivery queue (the consumer kit's), which the rule targets.
                let queue = "arn:aws:sqs:eu-west-1:111122223333:shop-consumer-delivery";
                return out.event_source_mappings(EventSourceMappingConfiguration::builder().event_source_arn(queue).build()).build();
            }
            if r.function_name() != Some("shop-relay") {
                return out.build();
            }
            out.event_source_mappings(
                EventSourceMappingConfiguration::builder()
                    .event_source_arn("arn:aws:dynamodb:eu-west-1:111122223333:table/shop-outbox/stream/2026-12-01T00:00:00.000")
                    .destination_config(
                        DestinationConfig::builder().on_failure(OnFailure::builder().destination("arn:aws:s3:::shop-failed-batches").build()).build(),
                    )
                    .build(),
            )
            .build()
        });
        let lambda = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&configuration, &mappings]);

        use aws_sdk_eventbridge::operation::describe_rule::DescribeRuleOutput;
        use aws_sdk_eventbridge::operation::list_targets_by_rule::ListTargetsByRuleOutput;
        let rule = mock!(aws_sdk_eventbridge::Client::describe_rule)
            .match_requests(|r| r.name() == Some("shop-reserve") && r.event_bus_name() == Some("shop-orders"))
            .then_output(|| DescribeRuleOutput::builder().event_pattern(r#"{"detail-type":["OrderCreated"]}"#).build());
        let targets = mock!(aws_sdk_eventbridge::Client::list_targets_by_rule).then_output(|| {
            ListTargetsByRuleOutput::builder()
                .targets(
                    aws_sdk_eventbridge::types::Target::builder()
                        .id("q")
                        .arn("arn:aws:sqs:eu-west-1:111122223333:shop-consumer-delivery")
                        .build()
                        .expect("a target"),
                )
                .targets(
                    aws_sdk_eventbridge::types::Target::builder()
                        .id("f")
                        .arn("arn:aws:lambda:eu-west-1:111122223333:function:shop-relay")
                        .build()
                        .expect("a target"),
                )
                .build()
        });
        let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&rule, &targets]);

        use aws_sdk_eventbridgev2::operation::describe_subscriber::DescribeSubscriberOutput;
        use aws_sdk_eventbridgev2::types::InvokeConfiguration;
        let described =
            mock!(aws_sdk_eventbridgev2::Client::describe_subscriber).match_requests(|r| r.subscriber_arn() == Some(SUBSCRIBER)).then_output(|| {
                let target = InvokeConfiguration::builder()
                    .target_arn("arn:aws:sqs:eu-west-1:111122223333:shop-consumer-delivery")
                    .role_arn("arn:aws:iam::111122223333:role/deliver")
                    .build()
                    .expect("an invoke configuration");
                DescribeSubscriberOutput::builder().name("shop-reserve-subscriber").event_bus_arn(CUSTOM_BUS).invoke_configuration(target).build()
            });
        let bus = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, [&described]);

        let found = discover(&Clients { cloudformation, lambda, events, bus }, "shop").await.expect("discovered");
        assert_eq!(found.outputs.get("OrdersApi").map(String::as_str), Some("https://api"));
        let dlq = found.dead_letter_queue("shop-consumer-dlq").expect("the dead-letter queue by name");
        assert_eq!(dlq.arn, "arn:aws:sqs:eu-west-1:111122223333:shop-consumer-dlq");
        assert_eq!(found.table("arn:aws:dynamodb:eu-west-1:111122223333:table/shop-outbox").map(|t| t.logical_id.as_str()), Ok("OutboxTable"));
        assert_eq!(found.bus("OrdersEventBus").map(|b| b.name.as_str()), Ok("shop-orders"));
        assert_eq!(found.failure_buckets(), ["shop-failed-batches"], "the nested stack's bucket, as the relay's on-failure destination");
        assert_eq!(found.bucket("FailedBatches").map(|b| b.name.as_str()), Ok("shop-failed-batches"), "nested stacks are followed");
        assert_eq!(found.outbox_tables(), ["shop-outbox"]);
        assert_eq!(found.inboxes(), [("shop-inbox".to_owned(), "reserve".to_owned())]);
        // Through the queue its SQS mapping reads, and (the relay, here) as a direct target.
        let reserve = found.functions.iter().find(|f| f.logical_id == "ReserveFunction").expect("the nested stack's function");
        assert_eq!(reserve.rule_patterns, [serde_json::json!({"detail-type": ["OrderCreated"]})]);
        let relay = found.functions.iter().find(|f| f.logical_id == "RelayFunction").expect("the relay");
        assert_eq!(relay.rule_patterns, [serde_json::json!({"detail-type": ["OrderCreated"]})]);
        // What a replay to the consumer names: the rule's ARN (on the custom bus), and the archive.
        let rule_arns: Vec<&str> = reserve.rules.iter().map(|(r, _)| r.arn.as_str()).collect();
        assert_eq!(rule_arns, ["arn:aws:events:eu-west-1:111122223333:rule/shop-orders/shop-reserve"]);
        assert_eq!(
            found.archive(None).map(|a| a.arn.as_str()),
            Ok("arn:aws:events:eu-west-1:111122223333:archive/EventArchive-abc123"),
            "the stack's only archive"
        );
        // The Custom bus, named from its ARN, and its subscriber, which delivers to the consumer
        // through the queue its SQS mapping reads (what a replay on the Custom bus copies).
        assert_eq!(found.custom_buses.iter().map(|b| (b.name.as_str(), b.arn.as_str())).collect::<Vec<_>>(), [("shop-orders", CUSTOM_BUS)]);
        assert_eq!(
            found.subscribers,
            [SubscriberInfo::new(
                "DeliverySubscriber",
                "shop-reserve-subscriber",
                SUBSCRIBER,
                CUSTOM_BUS,
                "arn:aws:sqs:eu-west-1:111122223333:shop-consumer-delivery"
            )]
        );
        assert!(found.subscribers[0].delivers_to(reserve) && !found.subscribers[0].delivers_to(relay));
    }

    #[tokio::test]
    async fn a_missing_stack_is_named() {
        let describe = mock!(aws_sdk_cloudformation::Client::describe_stacks).then_http_response(|| {
            aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(400).expect("a status"),
                aws_smithy_types::body::SdkBody::from(
                    "<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id nope does not exist</Message></Error></ErrorResponse>",
                ),
            )
        });
        let cloudformation = mock_client!(aws_sdk_cloudformation, RuleMode::MatchAny, [&describe]);
        let lambda = mock_client!(aws_sdk_lambda, RuleMode::MatchAny, []);
        let events = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, []);
        let bus = mock_client!(aws_sdk_eventbridgev2, RuleMode::MatchAny, []);
        let err = discover(&Clients { cloudformation, lambda, events, bus }, "nope").await.expect_err("no such stack").to_string();
        assert!(err.starts_with("DescribeStacks nope: ") && err.contains("does not exist"), "{err}");
    }
}
