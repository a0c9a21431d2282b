//! What the local runtime reads of each resource kind: plain data, references left unresolved
//! where they can only be resolved once the stack exists.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml_ng::Value;

/// A DynamoDB table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Logical id.
    pub logical_id: String,
    /// `TableName`.
    pub name: String,
    /// `(AttributeName, AttributeType)` of `AttributeDefinitions`.
    pub attributes: Vec<(String, String)>,
    /// `(AttributeName, KeyType)` of `KeySchema`.
    pub key_schema: Vec<(String, String)>,
    /// `StreamSpecification.StreamViewType`.
    pub stream_view_type: Option<String>,
    /// `TimeToLiveSpecification.AttributeName`, when enabled.
    pub ttl_attribute: Option<String>,
    /// `GlobalSecondaryIndexes`.
    pub global_indexes: Vec<IndexSpec>,
}

/// A global secondary index of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSpec {
    /// `IndexName`.
    pub name: String,
    /// `(AttributeName, KeyType)` of `KeySchema`.
    pub key_schema: Vec<(String, String)>,
    /// `Projection.ProjectionType`: `KEYS_ONLY`, `INCLUDE` or `ALL`.
    pub projection: String,
    /// `Projection.NonKeyAttributes` (with `INCLUDE`).
    pub non_key_attributes: Vec<String>,
}

/// An EventBridge bus.
#[derive(Debug, Clone, PartialEq)]
pub struct BusSpec {
    /// Logical id.
    pub logical_id: String,
    /// `Name`.
    pub name: String,
}

/// An S3 bucket (an on-failure destination of a stream mapping, the claim check's payload bucket).
#[derive(Debug, Clone, PartialEq)]
pub struct BucketSpec {
    /// Logical id.
    pub logical_id: String,
    /// `BucketName` (default CloudFormation's generated shape, `<stack>-<logical id>-<SUFFIX>` in
    /// lower case within S3's 63 characters: [`super::names::generated_name`]).
    pub name: String,
}

/// An EventBridge archive (`AWS::Events::Archive`): what a bus keeps for replays.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveSpec {
    /// Logical id.
    pub logical_id: String,
    /// `ArchiveName`, else CloudFormation's generated shape ([`super::physical_name`] with
    /// [`super::names::ARCHIVE`]: at most 48 characters, as AWS allows).
    pub name: String,
    /// `SourceArn` (the bus), resolved.
    pub source_arn: String,
    /// `EventPattern`, as JSON (`None`: every event of the bus).
    pub pattern: Option<serde_json::Value>,
    /// `RetentionDays` (0: indefinitely, EventBridge's default).
    pub retention_days: u32,
}

/// An SQS queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    /// Logical id.
    pub logical_id: String,
    /// `QueueName`.
    pub name: String,
    /// Attributes the emulator understands (`MessageRetentionPeriod`, `VisibilityTimeout`, …).
    pub attributes: BTreeMap<String, String>,
    /// `RedrivePolicy` (`deadLetterTargetArn`, `maxReceiveCount`), unresolved: the dead-letter
    /// queue's ARN is resolved once every queue of the stack has one.
    pub redrive_policy: Option<Value>,
}

/// A serverless function and the triggers the local runtime plays.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    /// Logical id, e.g. `CreateOrderFunction`.
    pub logical_id: String,
    /// `Metadata.BuildProperties.Binary` (the cargo binary name).
    pub binary: String,
    /// `CodeUri` (Globals merged), the directory `sam build` builds the function in: resolved
    /// against the directory of the template that declares the function (a nested application's
    /// own template for `<App>/<Id>`), `.` when absent as SAM CLI takes it. `None` when it is not
    /// a local path (an S3 location: `s3://…` or a `Bucket`/`Key` mapping), which nothing here
    /// can build. Source: "AWS::Serverless::Function", CodeUri (AWS SAM developer guide).
    pub code_uri: Option<PathBuf>,
    /// `Timeout`, seconds (Globals merged; default 3 as in Lambda).
    pub timeout_secs: u64,
    /// `MemorySize`, MB (Globals merged; default 128 as in Lambda). Passed to the function as
    /// `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`; not enforced locally.
    pub memory_mb: u64,
    /// `ReservedConcurrentExecutions`: the most instances that run at once, when set.
    pub reserved_concurrency: Option<u32>,
    /// `LoggingConfig.LogFormat` (`Text` or `JSON`), passed as `AWS_LAMBDA_LOG_FORMAT`.
    pub log_format: Option<String>,
    /// `LoggingConfig.ApplicationLogLevel`, passed as `AWS_LAMBDA_LOG_LEVEL`.
    pub log_level: Option<String>,
    /// `Environment.Variables` (Globals merged), unresolved.
    pub environment: BTreeMap<String, Value>,
    /// `Events`.
    pub events: Vec<FunctionEvent>,
    /// `EventInvokeConfig` (asynchronous invocation).
    pub event_invoke: EventInvokeSpec,
}

/// Asynchronous-invocation settings (`EventInvokeConfig`), with Lambda's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EventInvokeSpec {
    /// `MaximumRetryAttempts` (0-2, default 2).
    pub max_retry_attempts: u32,
    /// `MaximumEventAgeInSeconds` (60-21600, default 21600).
    pub max_event_age_secs: u64,
    /// `DestinationConfig.OnFailure.Destination`, unresolved.
    pub on_failure: Option<Value>,
}

impl Default for EventInvokeSpec {
    fn default() -> Self {
        Self { max_retry_attempts: 2, max_event_age_secs: 21_600, on_failure: None }
    }
}

/// One entry of a function's `Events`.
#[derive(Debug, Clone, PartialEq)]
pub enum FunctionEvent {
    /// `Type: HttpApi`.
    HttpApi {
        /// Event name.
        name: String,
        /// `Path`, e.g. `/orders/{id}`.
        path: String,
        /// `Method`, upper case (`ANY` for any).
        method: String,
        /// Whether the route is under a JWT authorizer: the `ApiId` API's `Auth.DefaultAuthorizer`
        /// names one with a `JwtConfiguration` and the event does not say `Auth: {Authorizer:
        /// NONE}` (`outbox_local::runtime::authorizer` plays it).
        jwt: bool,
    },
    /// `Type: DynamoDB` (a stream event source mapping).
    DynamoDb(StreamMappingSpec),
    /// `Type: EventBridgeRule`.
    EventBridgeRule(RuleSpec),
    /// `Type: SQS` (an SQS event source mapping).
    Sqs(SqsMappingSpec),
}

/// An SQS event source mapping (SAM event `Type: SQS`).
#[derive(Debug, Clone, PartialEq)]
pub struct SqsMappingSpec {
    /// Event name.
    pub name: String,
    /// Logical id of the queue whose `Arn` is the `Queue`.
    pub queue_logical_id: String,
    /// `BatchSize` (1 to 10,000, default 10).
    pub batch_size: usize,
    /// `MaximumBatchingWindowInSeconds` (0 to 300, default 0): how long Lambda gathers messages
    /// before invoking with fewer than `BatchSize`.
    pub max_batching_window_secs: u64,
    /// `FunctionResponseTypes` contains `ReportBatchItemFailures`.
    pub report_batch_item_failures: bool,
    /// `FilterCriteria.Filters[].Pattern`, parsed.
    pub filters: Vec<serde_json::Value>,
}

/// A standalone `AWS::Events::Rule` (not a function's `EventBridgeRule` event), with the targets
/// the local stack can wire: SQS queues of the template.
#[derive(Debug, Clone, PartialEq)]
pub struct StandaloneRuleSpec {
    /// Logical id (the rule's name on the bus is `<stack>-<logical id>-<SUFFIX>` within
    /// EventBridge's 64 characters, unless `Name` is set).
    pub logical_id: String,
    /// `Name`, unresolved.
    pub name: Option<Value>,
    /// `EventBusName`, unresolved (default: the `default` bus).
    pub bus: Option<Value>,
    /// `EventPattern`, as JSON.
    pub pattern: serde_json::Value,
    /// `Targets[]`: `(Id, Arn unresolved)`.
    pub targets: Vec<(String, Value)>,
}

/// A standalone `AWS::Events::Rule` with a `ScheduleExpression` (and no `EventPattern`): it sends
/// each target its constant `Input` every period (e.g. the consumer kit's parked check).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRuleSpec {
    /// Logical id.
    pub logical_id: String,
    /// `ScheduleExpression`, unresolved (`rate(5 minutes)`; `cron(…)` is not played locally).
    pub schedule: Value,
    /// `Targets[]`: `(Id, Arn unresolved, Input unresolved)`.
    pub targets: Vec<(String, Value, Option<Value>)>,
}

/// The period of a schedule expression `rate(<n> minute(s)|hour(s)|day(s))`; `None` for
/// anything else (`cron(…)`, a malformed rate). Source:
/// <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html>.
pub fn rate_period(expression: &str) -> Option<std::time::Duration> {
    let inner = expression.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let (n, unit) = inner.trim().split_once(char::is_whitespace)?;
    let n: u64 = n.parse().ok().filter(|n| *n > 0)?;
    let unit = match unit.trim() {
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3_600,
        "day" | "days" => 86_400,
        _ => return None,
    };
    Some(std::time::Duration::from_secs(n * unit))
}

/// A DynamoDB stream event source mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMappingSpec {
    /// Event name.
    pub name: String,
    /// Logical id of the table whose `StreamArn` is the `Stream`.
    pub table_logical_id: String,
    /// `BatchSize` (default 100).
    pub batch_size: usize,
    /// `ParallelizationFactor` (1 to 10, default 1): concurrent batches per shard.
    pub parallelization_factor: usize,
    /// `MaximumRetryAttempts` (default -1: until the record expires).
    pub max_retry_attempts: i64,
    /// `MaximumRecordAgeInSeconds` (default -1: until the record expires, 24 h on a DynamoDB
    /// stream); older records are discarded to the `OnFailure` destination.
    pub max_record_age_secs: i64,
    /// `BisectBatchOnFunctionError`.
    pub bisect_on_error: bool,
    /// `FunctionResponseTypes` contains `ReportBatchItemFailures`.
    pub report_batch_item_failures: bool,
    /// `DestinationConfig.OnFailure.Destination`, unresolved.
    pub on_failure: Option<Value>,
    /// `FilterCriteria.Filters[].Pattern`, parsed.
    pub filters: Vec<serde_json::Value>,
}

/// An EventBridge rule that targets a function.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// Event name (SAM names the rule `<FunctionLogicalId><EventName>`).
    pub name: String,
    /// `EventBusName`, unresolved.
    pub bus: Option<Value>,
    /// `Pattern`, as JSON.
    pub pattern: serde_json::Value,
    /// `RetryPolicy.MaximumRetryAttempts` (default 185).
    pub retry_attempts: u32,
    /// `RetryPolicy.MaximumEventAgeInSeconds` (default 86400).
    pub max_event_age_secs: u64,
    /// `DeadLetterConfig.Arn`, unresolved.
    pub dead_letter_arn: Option<Value>,
}
