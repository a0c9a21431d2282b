//! The local stack provisioned on the emulator: the template's tables with their streams, TTL
//! and indexes, buses, archives, queues with their redrive policies and buckets created where
//! missing (the [`Emulator`] backend of [`Stack::resolve`]), then the rules the local runtime
//! plays: each function's EventBridge rule with an SQS *delivery queue* as its target
//! (`<stack>-local-<Rule>`, from which [`crate::mappings::rule_delivery`] invokes the function
//! the way Lambda's asynchronous invocation would), the standalone rules targeting queues of the
//! template, and the `rate(…)` schedules' sends.
//!
//! The Custom Event Bus's resources (`AWS::EventsV2::EventBus`, `AWS::EventsV2::Subscriber`) are
//! created through its own API (`CreateEventBus`, `CreateSubscriber`, RPC v2 CBOR) on the
//! runtime's endpoint, which plays that bus ([`crate::custom_bus`]); moto does not have it.
//!
//! Provisioning is idempotent: what exists is left as it is, so running it twice against one
//! endpoint is a no-op.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType,
    StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use outbox_template::names;
use outbox_template::stack::{region_of, Backend, CustomBusSpec, LocalRule, QueueInfo, QueueRule, ScheduledSend, Stack, StackError, SubscriberInfo};
use outbox_template::{physical_name, rate_period, ArchiveSpec, BucketSpec, BusSpec, FunctionEvent, QueueSpec, TableSpec, Template, TemplateError};

/// Provisions the template's resources as stack `stack_name` on the emulator `sdk` points at
/// (in `account`): the resources created where missing, then the rules the local runtime plays
/// ([`Stack::rules`], [`Stack::queue_rules`], [`Stack::schedules`]).
///
/// # Errors
/// [`StackError`] naming the template property or the AWS call that failed.
pub async fn provision(sdk: &SdkConfig, template: Template, stack_name: &str, account: &str) -> Result<Stack, StackError> {
    let emulator = Emulator::new(sdk);
    let mut stack = Stack::resolve(template, stack_name, &emulator.region, account, &emulator).await?;
    stack.rules = emulator.function_rules(&stack, account).await?;
    stack.queue_rules = emulator.queue_rules(&mut stack, account).await?;
    stack.schedules = schedules(&mut stack, account)?;
    Ok(stack)
}

/// The [`Backend`] that creates what is missing (on the emulator).
#[derive(Debug, Clone)]
pub struct Emulator {
    dynamodb: aws_sdk_dynamodb::Client,
    events: aws_sdk_eventbridge::Client,
    sqs: aws_sdk_sqs::Client,
    s3: aws_sdk_s3::Client,
    region: String,
    /// The endpoint (`None`: AWS itself, where the Custom bus is not created by this runtime).
    endpoint: Option<String>,
    http: reqwest::Client,
}

impl Emulator {
    /// Creates with `sdk`'s endpoint, region and credentials.
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            events: aws_sdk_eventbridge::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            s3: aws_sdk_s3::Client::new(sdk),
            region: region_of(sdk),
            endpoint: sdk.endpoint_url().map(|e| e.trim_end_matches('/').to_owned()),
            http: reqwest::Client::new(),
        }
    }

    /// Calls Custom Event Bus operation `op` with `request` on the endpoint (RPC v2 CBOR).
    async fn custom_bus_call(&self, op: &str, request: &serde_json::Value) -> Result<serde_json::Value, StackError> {
        use crate::custom_bus::wire;
        let action = format!("{op} (Custom Event Bus)");
        let fail = |reason: String| StackError::Aws { action: action.clone(), reason };
        let endpoint = self
            .endpoint
            .as_deref()
            .ok_or_else(|| fail("the Custom Event Bus resources are provisioned on the local runtime's endpoint only".into()))?;
        let answer = self
            .http
            .post(format!("{endpoint}{}{op}", wire::PATH_PREFIX))
            .header("content-type", "application/cbor")
            .header("accept", "application/cbor")
            .header("smithy-protocol", "rpc-v2-cbor")
            .body(wire::encode(request))
            .send()
            .await
            .map_err(|e| fail(format!("{endpoint} did not answer: {e}")))?;
        let status = answer.status();
        let cbor = answer.headers().get("smithy-protocol").is_some();
        let body = answer.bytes().await.map_err(|e| fail(e.to_string()))?;
        if !cbor {
            return Err(fail(format!(
                "{endpoint} does not play the Custom Event Bus (HTTP {status}): it is played by outbox-local's own endpoint (the one `outbox-local up` prints), not by moto itself"
            )));
        }
        let value = wire::decode(&body).map_err(|e| fail(e.message))?;
        if !status.is_success() {
            let code = value.get("__type").and_then(serde_json::Value::as_str).unwrap_or_default().rsplit('#').next().unwrap_or_default().to_owned();
            return Err(fail(format!("{code}: {}", value.get("message").and_then(serde_json::Value::as_str).unwrap_or_default())));
        }
        Ok(value)
    }

    /// Each function's EventBridge rules (SAM's `EventBridgeRule` events), each with a delivery
    /// queue as its target.
    async fn function_rules(&self, stack: &Stack, account: &str) -> Result<Vec<LocalRule>, StackError> {
        let stack_name = &stack.resolver.stack_name;
        let mut rules = Vec::new();
        for f in &stack.functions {
            for event in &f.events {
                let FunctionEvent::EventBridgeRule(spec) = event else { continue };
                let at = format!("{}.Properties.Events.{}.Properties.EventBusName", f.logical_id, spec.name);
                let bus_name = match &spec.bus {
                    Some(v) => stack.resolver.resolve_string(v, &at)?,
                    None => "default".into(),
                };
                // SAM's rule for the event: logical id <Function><Event>, named by CloudFormation.
                let rule_name = outbox_template::stack::rule_name(stack_name, &format!("{}{}", f.logical_id, spec.name));
                let queue_spec = QueueSpec {
                    logical_id: format!("local:{rule_name}"),
                    name: physical_name(&format!("{stack_name}-local"), &format!("{}{}", f.logical_id, spec.name), &names::QUEUE),
                    attributes: [("VisibilityTimeout".to_owned(), (f.timeout_secs.max(1) * 6).to_string())].into(),
                    redrive_policy: None,
                };
                let delivery_queue = QueueInfo::at(&queue_spec, self.queue(&queue_spec).await?, &self.region, account);
                put_rule(&self.events, &rule_name, &bus_name, &spec.pattern).await?;
                let target = aws_sdk_eventbridge::types::Target::builder()
                    .id("local-delivery")
                    .arn(&delivery_queue.arn)
                    .build()
                    .map_err(StackError::aws("Target"))?;
                self.events
                    .put_targets()
                    .rule(&rule_name)
                    .event_bus_name(&bus_name)
                    .targets(target)
                    .send()
                    .await
                    .map_err(StackError::aws(format!("PutTargets {rule_name}")))?;
                rules.push(LocalRule { function: f.logical_id.clone(), spec: spec.clone(), rule_name, bus_name, delivery_queue });
            }
        }
        Ok(rules)
    }

    /// The standalone `AWS::Events::Rule`s, their targets queues of the template (each rule's
    /// `Arn` set on the resolver).
    async fn queue_rules(&self, stack: &mut Stack, account: &str) -> Result<Vec<QueueRule>, StackError> {
        let region = &self.region;
        let mut queue_rules = Vec::new();
        for spec in stack.template.standalone_rules()? {
            let name_at = format!("{}.Properties.Name", spec.logical_id);
            let rule_name: String = match &spec.name {
                Some(v) => {
                    let name = stack.resolver.resolve_string(v, &name_at)?;
                    names::check(&names::EVENT_RULE, &name, &name_at)?;
                    name
                }
                None => outbox_template::stack::rule_name(&stack.resolver.stack_name, &spec.logical_id),
            };
            let bus_name = match &spec.bus {
                Some(v) => stack.resolver.resolve_string(v, &format!("{}.Properties.EventBusName", spec.logical_id))?,
                None => "default".into(),
            };
            let mut targets = Vec::new();
            for (i, (id, arn)) in spec.targets.iter().enumerate() {
                let at = format!("{}.Properties.Targets[{i}].Arn", spec.logical_id);
                let arn = stack.resolver.resolve_string(arn, &at)?;
                let Some(q) = stack.queue_by_arn(&arn) else {
                    return Err(TemplateError::Unsupported {
                        at,
                        reason: format!("{arn}: only SQS queues of the template are rule targets locally"),
                    }
                    .into());
                };
                let target = aws_sdk_eventbridge::types::Target::builder().id(id).arn(&q.arn).build().map_err(StackError::aws("Target"))?;
                targets.push((target, q.logical_id.clone()));
            }
            put_rule(&self.events, &rule_name, &bus_name, &spec.pattern).await?;
            if !targets.is_empty() {
                self.events
                    .put_targets()
                    .rule(&rule_name)
                    .event_bus_name(&bus_name)
                    .set_targets(Some(targets.iter().map(|(t, _)| t.clone()).collect()))
                    .send()
                    .await
                    .map_err(StackError::aws(format!("PutTargets {rule_name}")))?;
            }
            stack.resolver.set_attr(&spec.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:rule/{bus_name}/{rule_name}"));
            queue_rules.push(QueueRule { logical_id: spec.logical_id, rule_name, bus_name, queues: targets.into_iter().map(|(_, q)| q).collect() });
        }
        Ok(queue_rules)
    }
}

/// The schedule rules' sends to queues of the template (moto stores schedule rules but never fires
/// them: the runtime plays `rate(…)` ones, [`crate::mappings::schedule`]); each rule's `Arn` set
/// on the resolver. A `cron(…)` rule is warned about and never fires locally.
fn schedules(stack: &mut Stack, account: &str) -> Result<Vec<ScheduledSend>, StackError> {
    let region = stack.resolver.region.clone();
    let mut schedules = Vec::new();
    for spec in stack.template.schedule_rules()? {
        let at = format!("{}.Properties.ScheduleExpression", spec.logical_id);
        let expression = stack.resolver.resolve_string(&spec.schedule, &at)?;
        let Some(period) = rate_period(&expression) else {
            tracing::warn!(rule = %spec.logical_id, expression = %expression, "only rate(…) schedules are played locally; this rule never fires here");
            continue;
        };
        let rule_name = physical_name(&stack.resolver.stack_name, &spec.logical_id, &names::EVENT_RULE);
        stack.resolver.set_attr(&spec.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:rule/{rule_name}"));
        for (i, (id, arn, input)) in spec.targets.iter().enumerate() {
            let at = format!("{}.Properties.Targets[{i}]", spec.logical_id);
            let arn = stack.resolver.resolve_string(arn, &format!("{at}.Arn"))?;
            let Some(q) = stack.queue_by_arn(&arn) else {
                return Err(TemplateError::Unsupported {
                    at: format!("{at}.Arn"),
                    reason: format!("{arn}: only SQS queues of the template are schedule targets locally"),
                }
                .into());
            };
            let queue = q.clone();
            let input = match input {
                Some(v) => stack.resolver.resolve_string(v, &format!("{at}.Input"))?,
                None => "{}".to_owned(),
            };
            schedules.push(ScheduledSend { name: format!("{}.{id}", spec.logical_id), period, queue, input });
        }
    }
    Ok(schedules)
}

impl Backend for Emulator {
    async fn table(&self, table: &TableSpec) -> Result<Option<String>, StackError> {
        create_table(&self.dynamodb, table).await
    }

    async fn bus(&self, bus: &BusSpec) -> Result<(), StackError> {
        if self.events.describe_event_bus().name(&bus.name).send().await.is_err() {
            self.events.create_event_bus().name(&bus.name).send().await.map_err(StackError::aws(format!("CreateEventBus {}", bus.name)))?;
        }
        Ok(())
    }

    async fn archive(&self, archive: &ArchiveSpec) -> Result<(), StackError> {
        create_archive(&self.events, archive).await
    }

    /// Creates the queue (`CreateQueue` is idempotent for equal attributes): its URL.
    async fn queue(&self, spec: &QueueSpec) -> Result<String, StackError> {
        let mut request = self.sqs.create_queue().queue_name(&spec.name);
        for (k, v) in &spec.attributes {
            request = request.attributes(aws_sdk_sqs::types::QueueAttributeName::from(k.as_str()), v);
        }
        let out = request.send().await.map_err(StackError::aws(format!("CreateQueue {}", spec.name)))?;
        out.queue_url.ok_or_else(|| StackError::Aws { action: format!("CreateQueue {}", spec.name), reason: "no QueueUrl in the answer".into() })
    }

    /// Creates the bus unless one of its name exists (`ListEventBuses`): its ARN.
    async fn custom_bus(&self, bus: &CustomBusSpec) -> Result<Option<String>, StackError> {
        let listed = self.custom_bus_call("ListEventBuses", &serde_json::json!({ "NamePrefix": bus.name })).await?;
        let existing = listed["EventBuses"].as_array().into_iter().flatten().find(|b| b["Name"] == bus.name.as_str());
        let answer = match existing {
            Some(b) => b.clone(),
            None => {
                let mut request = serde_json::json!({ "Name": bus.name });
                if let Some(days) = bus.retention_days {
                    request["StorageConfiguration"] = serde_json::json!({ "RetentionPeriodInDays": days });
                }
                self.custom_bus_call("CreateEventBus", &request).await?
            }
        };
        let arn = answer["EventBusArn"]
            .as_str()
            .ok_or_else(|| StackError::Aws { action: format!("CreateEventBus {}", bus.name), reason: "no EventBusArn in the answer".into() })?;
        Ok(Some(arn.to_owned()))
    }

    /// Creates the subscriber unless one of its name is on its bus (`ListSubscribers`): its ARN.
    async fn subscriber(&self, subscriber: &SubscriberInfo) -> Result<Option<String>, StackError> {
        let listed = self.custom_bus_call("ListSubscribers", &serde_json::json!({ "EventBusArn": subscriber.bus_arn })).await?;
        let existing = listed["Subscribers"].as_array().into_iter().flatten().find(|s| s["Name"] == subscriber.name.as_str());
        let answer = match existing {
            Some(s) => s.clone(),
            None => self.custom_bus_call("CreateSubscriber", &subscriber.request).await.map_err(|e| match e {
                StackError::Aws { reason, .. } => {
                    StackError::Aws { action: format!("{}: CreateSubscriber {}", subscriber.logical_id, subscriber.name), reason }
                }
                other => other,
            })?,
        };
        let arn = answer["SubscriberArn"].as_str().ok_or_else(|| StackError::Aws {
            action: format!("CreateSubscriber {}", subscriber.name),
            reason: "no SubscriberArn in the answer".into(),
        })?;
        Ok(Some(arn.to_owned()))
    }

    async fn bucket(&self, bucket: &BucketSpec) -> Result<(), StackError> {
        if self.s3.head_bucket().bucket(&bucket.name).send().await.is_ok() {
            return Ok(());
        }
        let mut request = self.s3.create_bucket().bucket(&bucket.name);
        if self.region != "us-east-1" {
            let constraint = aws_sdk_s3::types::BucketLocationConstraint::from(self.region.as_str());
            request =
                request.create_bucket_configuration(aws_sdk_s3::types::CreateBucketConfiguration::builder().location_constraint(constraint).build());
        }
        request.send().await.map_err(StackError::aws(format!("CreateBucket {}", bucket.name)))?;
        Ok(())
    }
}

/// Creates (or updates) the rule `name` on `bus` with event pattern `pattern` (`PutRule`).
async fn put_rule(events: &aws_sdk_eventbridge::Client, name: &str, bus: &str, pattern: &serde_json::Value) -> Result<(), StackError> {
    events
        .put_rule()
        .name(name)
        .event_bus_name(bus)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .map_err(StackError::aws(format!("PutRule {name}")))?;
    Ok(())
}

/// Creates `archive` unless it exists (`DescribeArchive` answering `ResourceNotFoundException`).
///
/// # Errors
/// [`StackError::Aws`] naming `DescribeArchive` (any other failure) or `CreateArchive`.
async fn create_archive(events: &aws_sdk_eventbridge::Client, archive: &ArchiveSpec) -> Result<(), StackError> {
    match events.describe_archive().archive_name(&archive.name).send().await {
        Ok(_) => return Ok(()),
        Err(e) if !e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
            return Err(StackError::aws(format!("DescribeArchive {}", archive.name))(e));
        }
        Err(_) => {}
    }
    events
        .create_archive()
        .archive_name(&archive.name)
        .event_source_arn(&archive.source_arn)
        .set_event_pattern(archive.pattern.as_ref().map(ToString::to_string))
        .retention_days(i32::try_from(archive.retention_days).unwrap_or(i32::MAX))
        .send()
        .await
        .map_err(StackError::aws(format!("CreateArchive {}", archive.name)))?;
    Ok(())
}

/// Creates `table` unless it exists; enables its TTL; returns its latest stream ARN.
///
/// # Errors
/// [`StackError::Aws`] naming the call: `DescribeTable` failing otherwise than with
/// `ResourceNotFoundException` (the only answer that means "absent": a throttle, an expired
/// token or a refused permission must not be read as a missing table), `CreateTable`, or the
/// TTL calls.
async fn create_table(client: &aws_sdk_dynamodb::Client, table: &TableSpec) -> Result<Option<String>, StackError> {
    let existing = client.describe_table().table_name(&table.name).send().await;
    let description = match existing {
        Ok(out) => out.table,
        Err(e) if !e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
            return Err(StackError::aws(format!("DescribeTable {}", table.name))(e));
        }
        Err(_) => {
            let mut request = client.create_table().table_name(&table.name).billing_mode(BillingMode::PayPerRequest);
            for (name, kind) in &table.attributes {
                let definition = AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::from(kind.as_str()))
                    .build()
                    .map_err(StackError::aws("AttributeDefinition"))?;
                request = request.attribute_definitions(definition);
            }
            for element in key_schema(&table.key_schema)? {
                request = request.key_schema(element);
            }
            for index in &table.global_indexes {
                let projection = Projection::builder()
                    .projection_type(ProjectionType::from(index.projection.as_str()))
                    .set_non_key_attributes(Some(index.non_key_attributes.clone()).filter(|a| !a.is_empty()))
                    .build();
                let index = GlobalSecondaryIndex::builder()
                    .index_name(&index.name)
                    .set_key_schema(Some(key_schema(&index.key_schema)?))
                    .projection(projection)
                    .build()
                    .map_err(StackError::aws(format!("GlobalSecondaryIndex {}", index.name)))?;
                request = request.global_secondary_indexes(index);
            }
            if let Some(view) = &table.stream_view_type {
                let spec = StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::from(view.as_str()))
                    .build()
                    .map_err(StackError::aws("StreamSpecification"))?;
                request = request.stream_specification(spec);
            }
            request.send().await.map_err(StackError::aws(format!("CreateTable {}", table.name)))?.table_description
        }
    };
    if let Some(attribute) = &table.ttl_attribute {
        let ttl = client
            .describe_time_to_live()
            .table_name(&table.name)
            .send()
            .await
            .map_err(StackError::aws(format!("DescribeTimeToLive {}", table.name)))?;
        let enabled = ttl
            .time_to_live_description()
            .and_then(|d| d.time_to_live_status())
            .is_some_and(|s| matches!(s, aws_sdk_dynamodb::types::TimeToLiveStatus::Enabled | aws_sdk_dynamodb::types::TimeToLiveStatus::Enabling));
        if !enabled {
            let spec = TimeToLiveSpecification::builder()
                .attribute_name(attribute)
                .enabled(true)
                .build()
                .map_err(StackError::aws("TimeToLiveSpecification"))?;
            client
                .update_time_to_live()
                .table_name(&table.name)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(StackError::aws(format!("UpdateTimeToLive {}", table.name)))?;
        }
    }
    Ok(description.and_then(|d| d.latest_stream_arn))
}

/// `(AttributeName, KeyType)` pairs as the SDK's key schema.
fn key_schema(pairs: &[(String, String)]) -> Result<Vec<KeySchemaElement>, StackError> {
    pairs
        .iter()
        .map(|(name, kind)| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(KeyType::from(kind.as_str()))
                .build()
                .map_err(StackError::aws("KeySchemaElement"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::create_table::CreateTableOutput;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
    use aws_sdk_dynamodb::types::error::ResourceNotFoundException;
    use aws_smithy_mocks::{mock, mock_client, RuleMode};

    fn spec() -> TableSpec {
        TableSpec {
            logical_id: "OutboxTable".into(),
            name: "s-outbox".into(),
            attributes: vec![("pk".into(), "S".into()), ("event_id".into(), "S".into())],
            key_schema: vec![("pk".into(), "HASH".into())],
            stream_view_type: None,
            ttl_attribute: None,
            global_indexes: vec![outbox_template::IndexSpec {
                name: "by-event-id".into(),
                key_schema: vec![("event_id".into(), "HASH".into())],
                projection: "KEYS_ONLY".into(),
                non_key_attributes: Vec::new(),
            }],
        }
    }

    fn http(status: u16, body: &'static str) -> aws_smithy_runtime_api::http::Response {
        aws_smithy_runtime_api::http::Response::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(status).expect("a status"),
            aws_smithy_types::body::SdkBody::from(body),
        )
    }

    #[tokio::test]
    async fn only_resource_not_found_means_absent() {
        // Absent: created, with its event-id index.
        let absent = mock!(aws_sdk_dynamodb::Client::describe_table)
            .then_error(|| DescribeTableError::ResourceNotFoundException(ResourceNotFoundException::builder().message("no table").build()));
        let create = mock!(aws_sdk_dynamodb::Client::create_table)
            .match_requests(|r| r.global_secondary_indexes().first().map(|i| i.index_name()) == Some("by-event-id"))
            .then_output(|| CreateTableOutput::builder().build());
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&absent, &create]);
        create_table(&dynamodb, &spec()).await.expect("created");
        assert_eq!(create.num_calls(), 1);

        // Any other error (a refused permission, a throttle) is an error, and nothing is created.
        let denied = mock!(aws_sdk_dynamodb::Client::describe_table).then_http_response(|| {
            http(400, r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"not allowed to DescribeTable"}"#)
        });
        let create = mock!(aws_sdk_dynamodb::Client::create_table).then_output(|| CreateTableOutput::builder().build());
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&denied, &create]);
        let err = create_table(&dynamodb, &spec()).await.expect_err("not read as absent").to_string();
        assert!(err.starts_with("DescribeTable s-outbox: ") && err.contains("AccessDenied"), "{err}");
        assert_eq!(create.num_calls(), 0, "no CreateTable over a table that may exist");
    }
}
