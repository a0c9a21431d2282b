//! Creating the stack's resources on the emulator (or looking them up): tables with their
//! streams and TTL, queues with their redrive policies, rules.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};

use super::{Mode, QueueInfo, StackError};
use crate::template::{QueueSpec, Resolver, TableSpec, TemplateError};

/// Creates (or updates) the rule `name` on `bus` with event pattern `pattern` (`PutRule`).
pub(super) async fn put_rule(events: &aws_sdk_eventbridge::Client, name: &str, bus: &str, pattern: &serde_json::Value) -> Result<(), StackError> {
    events.put_rule().name(name).event_bus_name(bus).event_pattern(pattern.to_string()).send().await.map_err(aws_err(format!("PutRule {name}")))?;
    Ok(())
}

pub(super) fn aws_err<E: std::error::Error + 'static>(action: impl Into<String>) -> impl FnOnce(E) -> StackError {
    let action = action.into();
    move |e| StackError::Aws { action, reason: aws_sdk_sqs::error::DisplayErrorContext(e).to_string() }
}

/// Creates `table` unless it exists; enables its TTL; returns its latest stream ARN.
pub(super) async fn create_table(client: &aws_sdk_dynamodb::Client, table: &TableSpec) -> Result<Option<String>, StackError> {
    let existing = client.describe_table().table_name(&table.name).send().await;
    let description = match existing {
        Ok(out) => out.table,
        Err(_) => {
            let mut request = client.create_table().table_name(&table.name).billing_mode(BillingMode::PayPerRequest);
            for (name, kind) in &table.attributes {
                let definition = AttributeDefinition::builder()
                    .attribute_name(name)
                    .attribute_type(ScalarAttributeType::from(kind.as_str()))
                    .build()
                    .map_err(aws_err("AttributeDefinition"))?;
                request = request.attribute_definitions(definition);
            }
            for (name, kind) in &table.key_schema {
                let element = KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(KeyType::from(kind.as_str()))
                    .build()
                    .map_err(aws_err("KeySchemaElement"))?;
                request = request.key_schema(element);
            }
            if let Some(view) = &table.stream_view_type {
                let spec = StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::from(view.as_str()))
                    .build()
                    .map_err(aws_err("StreamSpecification"))?;
                request = request.stream_specification(spec);
            }
            request.send().await.map_err(aws_err(format!("CreateTable {}", table.name)))?.table_description
        }
    };
    if let Some(attribute) = &table.ttl_attribute {
        let ttl =
            client.describe_time_to_live().table_name(&table.name).send().await.map_err(aws_err(format!("DescribeTimeToLive {}", table.name)))?;
        let enabled = ttl
            .time_to_live_description()
            .and_then(|d| d.time_to_live_status())
            .is_some_and(|s| matches!(s, aws_sdk_dynamodb::types::TimeToLiveStatus::Enabled | aws_sdk_dynamodb::types::TimeToLiveStatus::Enabling));
        if !enabled {
            let spec =
                TimeToLiveSpecification::builder().attribute_name(attribute).enabled(true).build().map_err(aws_err("TimeToLiveSpecification"))?;
            client
                .update_time_to_live()
                .table_name(&table.name)
                .time_to_live_specification(spec)
                .send()
                .await
                .map_err(aws_err(format!("UpdateTimeToLive {}", table.name)))?;
        }
    }
    Ok(description.and_then(|d| d.latest_stream_arn))
}

/// The ARN of queue `name`.
pub(super) fn queue_arn(region: &str, account: &str, name: &str) -> String {
    format!("arn:aws:sqs:{region}:{account}:{name}")
}

/// A queue's `RedrivePolicy` as the SQS attribute wants it: a JSON string
/// `{"deadLetterTargetArn": "<arn>", "maxReceiveCount": "<n>"}`; `at` names the property in errors.
pub(super) fn redrive_policy(resolver: &Resolver, policy: &serde_yaml_ng::Value, at: &str) -> Result<String, TemplateError> {
    let target = policy
        .get("deadLetterTargetArn")
        .ok_or_else(|| TemplateError::Unsupported { at: at.into(), reason: "deadLetterTargetArn is required".into() })?;
    let target = resolver.resolve_string(target, &format!("{at}.deadLetterTargetArn"))?;
    let count =
        policy.get("maxReceiveCount").ok_or_else(|| TemplateError::Unsupported { at: at.into(), reason: "maxReceiveCount is required".into() })?;
    let count = resolver.resolve_string(count, &format!("{at}.maxReceiveCount"))?;
    Ok(serde_json::json!({"deadLetterTargetArn": target, "maxReceiveCount": count}).to_string())
}

/// Creates `spec` (CreateQueue is idempotent for equal attributes) or looks it up.
pub(super) async fn queue(sqs: &aws_sdk_sqs::Client, spec: &QueueSpec, region: &str, account: &str, mode: Mode) -> Result<QueueInfo, StackError> {
    let url = match mode {
        Mode::Provision => {
            let mut request = sqs.create_queue().queue_name(&spec.name);
            for (k, v) in &spec.attributes {
                request = request.attributes(aws_sdk_sqs::types::QueueAttributeName::from(k.as_str()), v);
            }
            request.send().await.map_err(aws_err(format!("CreateQueue {}", spec.name)))?.queue_url
        }
        Mode::LookUp => sqs.get_queue_url().queue_name(&spec.name).send().await.map_err(aws_err(format!("GetQueueUrl {}", spec.name)))?.queue_url,
    };
    let url = url.ok_or_else(|| StackError::Aws { action: format!("queue {}", spec.name), reason: "no QueueUrl in the answer".into() })?;
    // The URL names the queue's account (`…/<account>/<name>`): the ARN is right on AWS too.
    let account = url.trim_end_matches('/').rsplit('/').nth(1).filter(|a| a.chars().all(|c| c.is_ascii_digit()) && !a.is_empty()).unwrap_or(account);
    Ok(QueueInfo { logical_id: spec.logical_id.clone(), name: spec.name.clone(), arn: queue_arn(region, account, &spec.name), url })
}
