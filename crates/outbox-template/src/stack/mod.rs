//! A stack of the template: its tables, buses, queues and rules with the names, ARNs and URLs
//! they have as stack `<name>`, and the functions' environment resolved against them.
//!
//! [`Stack::resolve`] walks the template and asks a [`Backend`] for what only AWS knows (a
//! table's stream ARN, a queue's URL): [`LookUp`] looks a deployed stack up (the operator's
//! `--template`); the local runtime's provisioner (`outbox_local::provision`) creates what is
//! missing on the emulator and adds the rules' delivery queues, the standalone rules and the
//! schedules ([`Stack::rules`], [`Stack::queue_rules`], [`Stack::schedules`]) from which the local
//! runtime invokes the consumer functions (see `outbox_local::mappings::rule_delivery`).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;

use aws_config::SdkConfig;

mod custom_bus;
mod deliveries;

pub use custom_bus::{CustomBusInfo, CustomBusSpec, SubscriberInfo};
pub use deliveries::Delivery;

use crate::names;
use crate::{ArchiveSpec, BucketSpec, BusSpec, FunctionEvent, FunctionSpec, QueueSpec, Resolver, RuleSpec, TableSpec, Template, TemplateError};

/// Why the stack could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The template cannot be used.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// An AWS call failed.
    #[error("{action}: {reason}")]
    Aws {
        /// What was being done.
        action: String,
        /// The SDK's error, with context.
        reason: String,
    },
}

impl StackError {
    /// A mapper from an SDK error to [`StackError::Aws`] naming `action` (e.g. `CreateQueue q`),
    /// the SDK's error with its whole context (`DisplayErrorContext`) as the reason.
    pub fn aws<E: std::error::Error + 'static>(action: impl Into<String>) -> impl FnOnce(E) -> StackError {
        let action = action.into();
        move |e| StackError::Aws { action, reason: aws_sdk_sqs::error::DisplayErrorContext(e).to_string() }
    }
}

/// A queue of the stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueueInfo {
    /// Logical id (or `local:<rule>` for delivery queues).
    pub logical_id: String,
    /// Queue name.
    pub name: String,
    /// Queue URL.
    pub url: String,
    /// Queue ARN.
    pub arn: String,
}

/// An EventBridge rule of a function, as provisioned locally.
#[derive(Debug, Clone)]
pub struct LocalRule {
    /// The function's logical id.
    pub function: String,
    /// The rule as the template has it.
    pub spec: RuleSpec,
    /// Rule name on the bus.
    pub rule_name: String,
    /// Bus name.
    pub bus_name: String,
    /// The delivery queue the local runtime polls.
    pub delivery_queue: QueueInfo,
}

/// A standalone `AWS::Events::Rule` whose targets are queues of the template, as provisioned:
/// EventBridge (moto, inside `PutEvents`) delivers the matching events to the queues itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRule {
    /// The rule's logical id.
    pub logical_id: String,
    /// Rule name on the bus.
    pub rule_name: String,
    /// Bus name.
    pub bus_name: String,
    /// Logical ids of the target queues.
    pub queues: Vec<String>,
}

/// A schedule rule's target queue, as the local runtime plays it: moto stores schedule rules but
/// never fires them, so the runtime sends `input` to the queue every `period`
/// (`outbox_local::mappings::schedule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledSend {
    /// `<rule logical id>.<target id>`.
    pub name: String,
    /// The rule's `rate(…)` period.
    pub period: std::time::Duration,
    /// The target queue.
    pub queue: QueueInfo,
    /// The target's `Input` (the message body); `{}` when it has none.
    pub input: String,
}

/// Where a stream mapping sends a record of the batches it gave up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An SQS queue: the record names the batch (shard, sequence-number range), not its records.
    Sqs {
        /// Queue URL.
        url: String,
    },
    /// An S3 bucket: the record also holds the whole invocation payload (the batch's records).
    S3 {
        /// Bucket name.
        bucket: String,
    },
}

/// The provisioned stack.
#[derive(Debug, Clone)]
pub struct Stack {
    /// The template.
    pub template: Template,
    /// Resolves `!Ref`/`!GetAtt`/`!Sub` to this stack's names.
    pub resolver: Resolver,
    /// Tables.
    pub tables: Vec<TableSpec>,
    /// Stream ARN per table logical id (tables with a stream).
    pub stream_arns: HashMap<String, String>,
    /// Buses.
    pub buses: Vec<BusSpec>,
    /// The buses' archives (`AWS::Events::Archive`): what `replay` replays from.
    pub archives: Vec<ArchiveSpec>,
    /// Queues of the template.
    pub queues: Vec<QueueInfo>,
    /// Buckets of the template (on-failure destinations of stream mappings, the claim check's
    /// payload bucket).
    pub buckets: Vec<BucketSpec>,
    /// Functions the local runtime runs (those with `Metadata.BuildProperties.Binary`).
    pub functions: Vec<FunctionSpec>,
    /// Logical ids of the functions without `Metadata.BuildProperties.Binary` (not Rust
    /// binaries): not run, their events not wired.
    pub skipped_functions: Vec<String>,
    /// Rules with their local delivery queues (empty when not provisioned).
    pub rules: Vec<LocalRule>,
    /// Standalone rules targeting queues of the template (empty when not provisioned).
    pub queue_rules: Vec<QueueRule>,
    /// Schedule rules' sends to queues of the template (empty when not provisioned).
    pub schedules: Vec<ScheduledSend>,
    /// Custom Event Buses (`AWS::EventsV2::EventBus`).
    pub custom_buses: Vec<CustomBusInfo>,
    /// Custom Event Bus subscribers (`AWS::EventsV2::Subscriber`); find a consumer's by its
    /// delivery queue with [`Stack::subscriber_for_queue`].
    pub subscribers: Vec<SubscriberInfo>,
}

/// What only AWS knows about a stack's resources, asked as [`Stack::resolve`] walks the template:
/// a table's stream ARN, a queue's URL. A backend may also create what is missing on its way
/// (the local runtime's provisioner, `outbox_local::provision`); [`LookUp`] only looks up.
///
/// The walk asks in template order: tables, buses, archives, then the queues without a redrive
/// policy before those with one (SQS requires a dead-letter queue to exist before a queue names
/// it), then buckets.
pub trait Backend {
    /// Table `table`: its latest stream ARN, if it has a stream (`None` when not known).
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn table(&self, table: &TableSpec) -> impl Future<Output = Result<Option<String>, StackError>> + Send;
    /// Event bus `bus`.
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn bus(&self, bus: &BusSpec) -> impl Future<Output = Result<(), StackError>> + Send;
    /// Archive `archive`.
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn archive(&self, archive: &ArchiveSpec) -> impl Future<Output = Result<(), StackError>> + Send;
    /// Queue `spec` (its `RedrivePolicy`, if any, resolved into `spec.attributes`): its URL.
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn queue(&self, spec: &QueueSpec) -> impl Future<Output = Result<String, StackError>> + Send;
    /// Bucket `bucket`.
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn bucket(&self, bucket: &BucketSpec) -> impl Future<Output = Result<(), StackError>> + Send;
    /// Custom Event Bus `bus` (`AWS::EventsV2::EventBus`): its `EventBusArn`, when known (the
    /// default, a look-up: `None`, the ARN's random suffix is not derivable from the name).
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn custom_bus(&self, bus: &CustomBusSpec) -> impl Future<Output = Result<Option<String>, StackError>> + Send {
        let _ = bus;
        async { Ok(None) }
    }
    /// Subscriber `subscriber` (`AWS::EventsV2::Subscriber`, its `request` resolved): its
    /// `SubscriberArn`, when known (the default, a look-up: `None`).
    ///
    /// # Errors
    /// [`StackError::Aws`] naming the call that failed.
    fn subscriber(&self, subscriber: &SubscriberInfo) -> impl Future<Output = Result<Option<String>, StackError>> + Send {
        let _ = subscriber;
        async { Ok(None) }
    }
}

/// The [`Backend`] of a deployed stack: creates nothing; a queue's URL is looked up by its name
/// (SQS `GetQueueUrl`), the rest is known from the names alone.
#[derive(Debug, Clone)]
pub struct LookUp {
    sqs: aws_sdk_sqs::Client,
}

impl LookUp {
    /// Looks up with `sdk`'s region and credentials.
    pub fn new(sdk: &SdkConfig) -> Self {
        Self { sqs: aws_sdk_sqs::Client::new(sdk) }
    }
}

impl Backend for LookUp {
    async fn table(&self, _: &TableSpec) -> Result<Option<String>, StackError> {
        Ok(None)
    }

    async fn bus(&self, _: &BusSpec) -> Result<(), StackError> {
        Ok(())
    }

    async fn archive(&self, _: &ArchiveSpec) -> Result<(), StackError> {
        Ok(())
    }

    async fn queue(&self, spec: &QueueSpec) -> Result<String, StackError> {
        let out = self.sqs.get_queue_url().queue_name(&spec.name).send().await.map_err(StackError::aws(format!("GetQueueUrl {}", spec.name)))?;
        out.queue_url.ok_or_else(|| StackError::Aws { action: format!("GetQueueUrl {}", spec.name), reason: "no QueueUrl in the answer".into() })
    }

    async fn bucket(&self, _: &BucketSpec) -> Result<(), StackError> {
        Ok(())
    }
}

/// The region of `sdk`, `us-east-1` when it names none (the SDK's and the emulator's default).
pub fn region_of(sdk: &SdkConfig) -> String {
    sdk.region().map(|r| r.to_string()).unwrap_or_else(|| "us-east-1".into())
}

impl QueueInfo {
    /// Queue `spec` at `url`: its ARN in `region` and in the account the URL names
    /// (`…/<account>/<name>`, so the ARN is right on AWS too), else in `account`.
    pub fn at(spec: &QueueSpec, url: String, region: &str, account: &str) -> Self {
        let account =
            url.trim_end_matches('/').rsplit('/').nth(1).filter(|a| a.chars().all(|c| c.is_ascii_digit()) && !a.is_empty()).unwrap_or(account);
        Self { logical_id: spec.logical_id.clone(), name: spec.name.clone(), arn: queue_arn(region, account, &spec.name), url }
    }
}

/// The ARN of queue `name`.
pub fn queue_arn(region: &str, account: &str, name: &str) -> String {
    format!("arn:aws:sqs:{region}:{account}:{name}")
}

/// The ARN of archive `name`: `arn:aws:events:<region>:<account>:archive/<name>`.
pub fn archive_arn(region: &str, account: &str, name: &str) -> String {
    format!("arn:aws:events:{region}:{account}:archive/{name}")
}

/// A queue's `RedrivePolicy` as the SQS attribute wants it: a JSON string
/// `{"deadLetterTargetArn": "<arn>", "maxReceiveCount": "<n>"}`; `at` names the property in errors.
fn redrive_policy(resolver: &Resolver, policy: &serde_yaml_ng::Value, at: &str) -> Result<String, TemplateError> {
    let target = policy
        .get("deadLetterTargetArn")
        .ok_or_else(|| TemplateError::Unsupported { at: at.into(), reason: "deadLetterTargetArn is required".into() })?;
    let target = resolver.resolve_string(target, &format!("{at}.deadLetterTargetArn"))?;
    let count =
        policy.get("maxReceiveCount").ok_or_else(|| TemplateError::Unsupported { at: at.into(), reason: "maxReceiveCount is required".into() })?;
    let count = resolver.resolve_string(count, &format!("{at}.maxReceiveCount"))?;
    Ok(serde_json::json!({"deadLetterTargetArn": target, "maxReceiveCount": count}).to_string())
}

impl Stack {
    /// Looks up the template's resources as deployed stack `stack_name` in `sdk`'s region
    /// ([`Stack::resolve`] with [`LookUp`]): names resolved, queue URLs looked up, nothing created;
    /// no rules, queue rules or schedules (those are the local runtime's).
    ///
    /// # Errors
    /// [`StackError`] naming the template property or the AWS call that failed.
    pub async fn look_up(sdk: &SdkConfig, template: Template, stack_name: &str, account: &str) -> Result<Self, StackError> {
        Self::resolve(template, stack_name, &region_of(sdk), account, &LookUp::new(sdk)).await
    }

    /// Resolves the template's resources as stack `stack_name` in `region` and `account`, asking
    /// `backend` for what only AWS knows (see [`Backend`]); [`Stack::rules`], [`Stack::queue_rules`]
    /// and [`Stack::schedules`] are left empty for a provisioner to fill.
    ///
    /// # Errors
    /// [`StackError`] naming the template property (a stack name or physical name over AWS's
    /// limits included) or the AWS call that failed.
    pub async fn resolve(template: Template, stack_name: &str, region: &str, account: &str, backend: &impl Backend) -> Result<Self, StackError> {
        names::check_stack_name(stack_name)?;
        let mut resolver = Resolver::new(stack_name, region, account);
        for (parameter, default) in template.parameter_defaults() {
            resolver.set_ref(&parameter, default);
        }

        let tables = template.tables(&resolver)?;
        let mut stream_arns = HashMap::new();
        for table in &tables {
            resolver.set_ref(&table.logical_id, &table.name);
            resolver.set_attr(&table.logical_id, "Arn", format!("arn:aws:dynamodb:{region}:{account}:table/{}", table.name));
            if let Some(arn) = backend.table(table).await? {
                resolver.set_attr(&table.logical_id, "StreamArn", &arn);
                stream_arns.insert(table.logical_id.clone(), arn);
            }
        }

        let buses = template.buses(&resolver)?;
        for bus in &buses {
            resolver.set_ref(&bus.logical_id, &bus.name);
            resolver.set_attr(&bus.logical_id, "Name", &bus.name);
            resolver.set_attr(&bus.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:event-bus/{}", bus.name));
            backend.bus(bus).await?;
        }

        let mut custom_buses = Vec::new();
        for spec in template.custom_buses(&resolver)? {
            let arn = backend.custom_bus(&spec).await?;
            // A looked-up stack knows the name, not the ARN's suffix: references resolve to the
            // ARN without it.
            let known = arn.clone().unwrap_or_else(|| format!("arn:aws:events:{region}:{account}:event-busv2/{}", spec.name));
            resolver.set_ref(&spec.logical_id, &known);
            resolver.set_attr(&spec.logical_id, "EventBusArn", &known);
            resolver.set_attr(&spec.logical_id, "Name", &spec.name);
            custom_buses.push(CustomBusInfo { spec, arn });
        }

        let archives = template.archives(&resolver)?;
        for archive in &archives {
            resolver.set_ref(&archive.logical_id, &archive.name);
            resolver.set_attr(&archive.logical_id, "Arn", archive_arn(region, account, &archive.name));
            backend.archive(archive).await?;
        }

        // Every queue's ARN first (a redrive policy names its dead-letter queue's), then the
        // queues without a redrive policy, then those with one (SQS requires the dead-letter
        // queue to exist).
        let mut specs = template.queues(&resolver)?;
        for spec in &specs {
            resolver.set_attr(&spec.logical_id, "Arn", queue_arn(region, account, &spec.name));
            resolver.set_attr(&spec.logical_id, "QueueName", &spec.name);
        }
        specs.sort_by_key(|s| s.redrive_policy.is_some());
        let mut queues = Vec::new();
        for mut spec in specs {
            if let Some(policy) = spec.redrive_policy.take() {
                let at = format!("{}.Properties.RedrivePolicy", spec.logical_id);
                spec.attributes.insert("RedrivePolicy".into(), redrive_policy(&resolver, &policy, &at)?);
            }
            let info = QueueInfo::at(&spec, backend.queue(&spec).await?, region, account);
            resolver.set_ref(&spec.logical_id, &info.url);
            resolver.set_attr(&spec.logical_id, "QueueUrl", &info.url);
            queues.push(info);
        }

        let buckets = template.buckets(&resolver)?;
        for bucket in &buckets {
            resolver.set_ref(&bucket.logical_id, &bucket.name);
            resolver.set_attr(&bucket.logical_id, "Arn", format!("arn:aws:s3:::{}", bucket.name));
            backend.bucket(bucket).await?;
        }

        custom_bus::declare_roles(&template, &mut resolver);
        let mut subscribers = custom_bus::subscribers(&template, &resolver)?;
        for s in &mut subscribers {
            s.target_queue_url = queues.iter().find(|q| q.arn == s.target_arn).map(|q| q.url.clone());
            s.arn = backend.subscriber(s).await?;
            if let Some(arn) = &s.arn {
                resolver.set_ref(&s.logical_id, arn);
                resolver.set_attr(&s.logical_id, "SubscriberArn", arn);
            }
        }

        let (functions, skipped_functions) = template.runnable_functions()?;
        // A function's own FunctionName is checked against Lambda's limit; locally every function
        // is named as CloudFormation names an unnamed one (`<stack>-<LogicalId>-<SUFFIX>`).
        template.check_function_names(&resolver)?;
        for id in template.function_ids() {
            let name = crate::physical_name(stack_name, &id, &names::FUNCTION);
            resolver.set_attr(&id, "Arn", format!("arn:aws:lambda:{region}:{account}:function:{name}"));
            resolver.set_ref(&id, name);
        }

        Ok(Self {
            template,
            resolver,
            tables,
            stream_arns,
            buses,
            archives,
            queues,
            buckets,
            functions,
            skipped_functions,
            rules: Vec::new(),
            queue_rules: Vec::new(),
            schedules: Vec::new(),
            custom_buses,
            subscribers,
        })
    }

    /// The function's `Environment.Variables`, resolved against this stack.
    ///
    /// # Errors
    /// [`TemplateError`] naming the variable that cannot be resolved.
    pub fn environment(&self, function: &FunctionSpec) -> Result<HashMap<String, String>, TemplateError> {
        function
            .environment
            .iter()
            .map(|(k, v)| {
                let at = format!("{}.Properties.Environment.Variables.{k}", function.logical_id);
                Ok((k.clone(), self.resolver.resolve_string(v, &at)?))
            })
            .collect()
    }

    /// One line per pipeline the local runtime plays: each DynamoDB stream event source mapping
    /// (`stream of <Table> → <Function>`), each EventBridge rule of a function
    /// (`rule <name> on bus <bus> → <Function>`), each standalone rule targeting queues
    /// (`rule <name> on bus <bus> → queue <Queue>`), each schedule rule's target queue
    /// (`schedule <Rule>.<target> every <n> s → queue <Queue>`) and each SQS event source mapping
    /// (`queue <Queue> → <Function> (SQS mapping, batch <n>)`).
    pub fn pipelines(&self) -> Vec<String> {
        let streams = self.functions.iter().flat_map(|f| {
            f.events.iter().filter_map(move |e| match e {
                FunctionEvent::DynamoDb(m) => Some(format!("stream of {} → {}", m.table_logical_id, f.logical_id)),
                _ => None,
            })
        });
        let rules = self.rules.iter().map(|r| format!("rule {} on bus {} → {}", r.rule_name, r.bus_name, r.function));
        let queue_rules = self.queue_rules.iter().map(|r| format!("rule {} on bus {} → queue {}", r.rule_name, r.bus_name, r.queues.join(", ")));
        let sqs = self.functions.iter().flat_map(|f| {
            f.events.iter().filter_map(move |e| match e {
                FunctionEvent::Sqs(m) => Some(format!("queue {} → {} (SQS mapping, batch {})", m.queue_logical_id, f.logical_id, m.batch_size)),
                _ => None,
            })
        });
        let schedules = self.schedules.iter().map(|s| format!("schedule {} every {} s → queue {}", s.name, s.period.as_secs(), s.queue.logical_id));
        streams.chain(rules).chain(queue_rules).chain(schedules).chain(sqs).collect()
    }

    /// The function with `logical_id`.
    pub fn function(&self, logical_id: &str) -> Option<&FunctionSpec> {
        self.functions.iter().find(|f| f.logical_id == logical_id)
    }

    /// The queue of the template whose ARN is `arn`.
    pub fn queue_by_arn(&self, arn: &str) -> Option<&QueueInfo> {
        self.queues.iter().find(|q| q.arn == arn)
    }

    /// URL of the template queue whose ARN `value` resolves to (an on-failure destination);
    /// `at` names the property in errors.
    ///
    /// # Errors
    /// [`TemplateError::Unsupported`] when `value` is not a queue of the stack (only SQS
    /// destinations run locally), or cannot be resolved.
    pub fn destination_url(&self, value: &serde_yaml_ng::Value, at: &str) -> Result<String, TemplateError> {
        let arn = self.resolver.resolve_string(value, at)?;
        self.queue_by_arn(&arn).map(|q| q.url.clone()).ok_or_else(|| TemplateError::Unsupported {
            at: at.to_owned(),
            reason: format!("{arn} is not an SQS queue of the template (only SQS destinations run locally)"),
        })
    }

    /// The on-failure destination `value` resolves to: a queue or a bucket of the template; `at`
    /// names the property in errors.
    ///
    /// # Errors
    /// [`TemplateError::Unsupported`] when `value` is neither (SNS and Kafka destinations do not
    /// run locally), or cannot be resolved.
    pub fn destination(&self, value: &serde_yaml_ng::Value, at: &str) -> Result<Destination, TemplateError> {
        let arn = self.resolver.resolve_string(value, at)?;
        if let Some(q) = self.queue_by_arn(&arn) {
            return Ok(Destination::Sqs { url: q.url.clone() });
        }
        if let Some(b) = self.buckets.iter().find(|b| format!("arn:aws:s3:::{}", b.name) == arn) {
            return Ok(Destination::S3 { bucket: b.name.clone() });
        }
        Err(TemplateError::Unsupported {
            at: at.to_owned(),
            reason: format!("{arn} is not an SQS queue or S3 bucket of the template (only those destinations run locally)"),
        })
    }

    /// The queue of the template with `logical_id`.
    pub fn queue(&self, logical_id: &str) -> Option<&QueueInfo> {
        self.queues.iter().find(|q| q.logical_id == logical_id)
    }

    /// The table with `logical_id`.
    pub fn table(&self, logical_id: &str) -> Option<&TableSpec> {
        self.tables.iter().find(|t| t.logical_id == logical_id)
    }
}

/// The name the local stack gives a rule the template names none for: [`physical_name`] of its
/// logical id (`<Function><Event>` for a function's own rule), within the 64 characters a rule
/// name may have ([`names::EVENT_RULE`]).
///
/// [`physical_name`]: crate::physical_name
pub fn rule_name(stack_name: &str, logical_id: &str) -> String {
    crate::physical_name(stack_name, logical_id, &names::EVENT_RULE)
}

/// The stack name when none is given: `stack_name` of `[default.global.parameters]` (or
/// `[default.deploy.parameters]`) in samconfig.toml in `dir` (the template's directory), else
/// the directory's name sanitised to a CloudFormation stack name (`[A-Za-z0-9-]`, starting with a
/// letter, at most 128 characters).
pub fn default_stack_name(dir: &Path) -> String {
    stack_name_from_samconfig(dir).unwrap_or_else(|| stack_name_of_dir(dir))
}

fn stack_name_from_samconfig(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("samconfig.toml")).ok()?;
    let doc: toml::Table = text.parse().ok()?;
    let default = doc.get("default")?;
    ["global", "deploy"].iter().find_map(|section| default.get(section)?.get("parameters")?.get("stack_name")?.as_str().map(str::to_owned))
}

fn stack_name_of_dir(dir: &Path) -> String {
    let raw = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut name = String::new();
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && (name.is_empty() || name.ends_with('-'))) {
            name.push(c);
        }
    }
    let name = name.trim_end_matches('-');
    let name = if name.starts_with(|c: char| c.is_ascii_alphabetic()) { name.to_owned() } else { format!("stack-{name}") };
    name.trim_end_matches('-').chars().take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployed stack looked up ([`LookUp`]): every queue's URL asked of SQS by its name
    /// (`GetQueueUrl`), its ARN in the account the URL names; nothing else asked (no
    /// `CreateQueue`: the mock answers nothing else), no rules or schedules; a refused
    /// `GetQueueUrl` is an error naming the call and the queue.
    #[tokio::test]
    async fn a_looked_up_stack_asks_sqs_only_for_queue_urls_and_takes_the_account_from_them() {
        use aws_sdk_sqs::operation::get_queue_url::{GetQueueUrlError, GetQueueUrlOutput};
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let template = || Template::load(&root.join("template.yaml")).expect("template.yaml");

        let url = mock!(aws_sdk_sqs::Client::get_queue_url)
            .then_output(|| GetQueueUrlOutput::builder().queue_url("https://sqs.eu-west-1.amazonaws.com/999999999999/q").build());
        let backend = LookUp { sqs: mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&url]) };
        let stack = Stack::resolve(template(), "shop", "eu-west-1", "123456789012", &backend).await.expect("looked up");
        assert!(!stack.queues.is_empty());
        assert_eq!(url.num_calls(), stack.queues.len(), "one GetQueueUrl per queue of the template");
        for q in &stack.queues {
            assert_eq!(q.arn, format!("arn:aws:sqs:eu-west-1:999999999999:{}", q.name), "the URL's account, not the default one");
        }
        assert!(stack.stream_arns.is_empty() && stack.rules.is_empty() && stack.queue_rules.is_empty() && stack.schedules.is_empty());

        let refused = mock!(aws_sdk_sqs::Client::get_queue_url).then_error(|| {
            GetQueueUrlError::QueueDoesNotExist(aws_sdk_sqs::types::error::QueueDoesNotExist::builder().message("no such queue").build())
        });
        let backend = LookUp { sqs: mock_client!(aws_sdk_sqs, RuleMode::MatchAny, [&refused]) };
        let err = Stack::resolve(template(), "shop", "eu-west-1", "123456789012", &backend).await.expect_err("refused").to_string();
        assert!(err.starts_with("GetQueueUrl shop-") && err.contains("no such queue"), "{err}");
    }

    #[test]
    fn the_default_stack_name_is_samconfigs_else_the_template_directorys_name() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert_eq!(default_stack_name(&repo), "outbox-pattern", "this repository's samconfig.toml names it");
        assert_eq!(default_stack_name(&repo.join("tests/fixtures/echo-function")), "echo-function");
        assert_eq!(default_stack_name(Path::new("/srv/my_service.v2")), "my-service-v2");
        assert_eq!(default_stack_name(Path::new("/srv/2024 orders")), "stack-2024-orders");
        assert_eq!(default_stack_name(Path::new("/")), "stack");
    }

    #[test]
    fn the_pipelines_are_the_templates_stream_mappings_and_rules() {
        let text = "Resources:\n  T:\n    Type: AWS::DynamoDB::Table\n  Relay:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: relay}}\n    Properties:\n      Events:\n        S: {Type: DynamoDB, Properties: {Stream: !GetAtt T.StreamArn}}\n";
        let template = Template::parse(Path::new("t.yaml"), text).expect("a template");
        let functions = template.functions().expect("its functions");
        let queue = QueueInfo { logical_id: "local:r".into(), name: "q".into(), url: "http://q".into(), arn: "arn:q".into() };
        let rule = RuleSpec {
            name: "R".into(),
            bus: None,
            pattern: serde_json::json!({}),
            retry_attempts: 1,
            max_event_age_secs: 60,
            dead_letter_arn: None,
        };
        let mut stack = Stack {
            template,
            resolver: Resolver::new("s", "us-east-1", "1"),
            tables: Vec::new(),
            stream_arns: HashMap::new(),
            buses: Vec::new(),
            archives: Vec::new(),
            queues: Vec::new(),
            buckets: Vec::new(),
            functions,
            skipped_functions: Vec::new(),
            rules: Vec::new(),
            queue_rules: Vec::new(),
            schedules: Vec::new(),
            custom_buses: Vec::new(),
            subscribers: Vec::new(),
        };
        assert_eq!(stack.pipelines(), ["stream of T → Relay"]);
        stack.rules.push(LocalRule {
            function: "Relay".into(),
            spec: rule,
            rule_name: "s-RelayR".into(),
            bus_name: "b".into(),
            delivery_queue: queue,
        });
        assert_eq!(stack.pipelines(), ["stream of T → Relay", "rule s-RelayR on bus b → Relay"]);
        stack.queue_rules.push(QueueRule {
            logical_id: "ToWork".into(),
            rule_name: "s-ToWork".into(),
            bus_name: "b".into(),
            queues: vec!["Work".into()],
        });
        stack.functions[0].events.push(FunctionEvent::Sqs(crate::SqsMappingSpec {
            name: "Q".into(),
            queue_logical_id: "Work".into(),
            batch_size: 10,
            max_batching_window_secs: 0,
            report_batch_item_failures: true,
            filters: Vec::new(),
        }));
        assert_eq!(
            stack.pipelines(),
            [
                "stream of T → Relay",
                "rule s-RelayR on bus b → Relay",
                "rule s-ToWork on bus b → queue Work",
                "queue Work → Relay (SQS mapping, batch 10)"
            ]
        );
        stack.queue_rules.clear();
        stack.functions.clear();
        stack.rules.clear();
        assert!(stack.pipelines().is_empty());
    }
}
