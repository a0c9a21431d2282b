//! Creating the stack's resources on the emulator (or looking them up): tables with their
//! streams and TTL, queues with their redrive policies, rules.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType, ScalarAttributeType,
    StreamSpecification, StreamViewType, TimeToLiveSpecification,
};

use super::{Mode, QueueInfo, StackError};
use crate::template::{QueueSpec, Resolver, TableSpec, TemplateError};

/// Creates (or updates) the rule `name` on `bus` with event pattern `pattern` (`PutRule`).
pub(super) async fn put_rule(events: &aws_sdk_eventbridge::Client, name: &str, bus: &str, pattern: &serde_json::Value) -> Result<(), StackError> {
    events.put_rule().name(name).event_bus_name(bus).event_pattern(pattern.to_string()).send().await.map_err(aws_err(format!("PutRule {name}")))?;
    Ok(())
}

/// The ARN of archive `name`: `arn:aws:events:<region>:<account>:archive/<name>`.
pub(super) fn archive_arn(region: &str, account: &str, name: &str) -> String {
    format!("arn:aws:events:{region}:{account}:archive/{name}")
}

/// Creates `archive` unless it exists (`DescribeArchive` answering `ResourceNotFoundException`).
///
/// # Errors
/// [`StackError::Aws`] naming `DescribeArchive` (any other failure) or `CreateArchive`.
pub(super) async fn create_archive(events: &aws_sdk_eventbridge::Client, archive: &crate::template::ArchiveSpec) -> Result<(), StackError> {
    match events.describe_archive().archive_name(&archive.name).send().await {
        Ok(_) => return Ok(()),
        Err(e) if !e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
            return Err(aws_err(format!("DescribeArchive {}", archive.name))(e));
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
        .map_err(aws_err(format!("CreateArchive {}", archive.name)))?;
    Ok(())
}

pub(super) fn aws_err<E: std::error::Error + 'static>(action: impl Into<String>) -> impl FnOnce(E) -> StackError {
    let action = action.into();
    move |e| StackError::Aws { action, reason: aws_sdk_sqs::error::DisplayErrorContext(e).to_string() }
}

/// Creates `table` unless it exists; enables its TTL; returns its latest stream ARN.
///
/// # Errors
/// [`StackError::Aws`] naming the call: `DescribeTable` failing otherwise than with
/// `ResourceNotFoundException` (the only answer that means "absent": a throttle, an expired
/// token or a refused permission must not be read as a missing table), `CreateTable`, or the
/// TTL calls.
pub(super) async fn create_table(client: &aws_sdk_dynamodb::Client, table: &TableSpec) -> Result<Option<String>, StackError> {
    let existing = client.describe_table().table_name(&table.name).send().await;
    let description = match existing {
        Ok(out) => out.table,
        Err(e) if !e.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
            return Err(aws_err(format!("DescribeTable {}", table.name))(e));
        }
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
                    .map_err(aws_err(format!("GlobalSecondaryIndex {}", index.name)))?;
                request = request.global_secondary_indexes(index);
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

/// `(AttributeName, KeyType)` pairs as the SDK's key schema.
fn key_schema(pairs: &[(String, String)]) -> Result<Vec<KeySchemaElement>, StackError> {
    pairs
        .iter()
        .map(|(name, kind)| {
            KeySchemaElement::builder().attribute_name(name).key_type(KeyType::from(kind.as_str())).build().map_err(aws_err("KeySchemaElement"))
        })
        .collect()
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
            global_indexes: vec![crate::template::IndexSpec {
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
