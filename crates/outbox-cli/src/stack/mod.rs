//! The local stack: the template's tables, bus, queues and rules, created on the emulator (or
//! looked up on AWS), and the names and URLs the functions' environment refers to.
//!
//! Provisioning is idempotent: what exists is left as it is, so running it twice against one
//! endpoint is a no-op. One deliberate addition: every EventBridge rule gets an SQS *delivery
//! queue* as its target (`<stack>-local-<Rule>`), from which the local runtime invokes the
//! consumer function the way Lambda's asynchronous invocation would (see `outbox_local::mappings::rule_delivery`).

use std::collections::HashMap;
use std::path::Path;

use aws_config::SdkConfig;

mod deliveries;
mod provision;

pub use deliveries::Delivery;

use crate::template::names;
use crate::template::{
    ArchiveSpec, BucketSpec, BusSpec, FunctionEvent, FunctionSpec, QueueSpec, Resolver, RuleSpec, TableSpec, Template, TemplateError,
};
use provision::{archive_arn, aws_err, create_archive, create_table, put_rule, queue, queue_arn, redrive_policy};

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
}

/// Whether to create what is missing (the emulator) or only look things up (real AWS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Create missing tables, bus, queues, rules and delivery queues.
    Provision,
    /// Only resolve names and look up queue URLs.
    LookUp,
}

impl Stack {
    /// Provisions (or looks up) the template's resources as stack `stack_name`.
    ///
    /// # Errors
    /// [`StackError`] naming the template property or the AWS call that failed.
    pub async fn set_up(sdk: &SdkConfig, template: Template, stack_name: &str, account: &str, mode: Mode) -> Result<Self, StackError> {
        names::check_stack_name(stack_name)?;
        let region = sdk.region().map(|r| r.to_string()).unwrap_or_else(|| "us-east-1".into());
        let mut resolver = Resolver::new(stack_name, &region, account);
        for (parameter, default) in template.parameter_defaults() {
            resolver.set_ref(&parameter, default);
        }
        let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
        let events = aws_sdk_eventbridge::Client::new(sdk);
        let sqs = aws_sdk_sqs::Client::new(sdk);

        let tables = template.tables(&resolver)?;
        let mut stream_arns = HashMap::new();
        for table in &tables {
            resolver.set_ref(&table.logical_id, &table.name);
            resolver.set_attr(&table.logical_id, "Arn", format!("arn:aws:dynamodb:{region}:{account}:table/{}", table.name));
            if mode == Mode::Provision {
                if let Some(arn) = create_table(&dynamodb, table).await? {
                    resolver.set_attr(&table.logical_id, "StreamArn", &arn);
                    stream_arns.insert(table.logical_id.clone(), arn);
                }
            }
        }

        let buses = template.buses(&resolver)?;
        for bus in &buses {
            resolver.set_ref(&bus.logical_id, &bus.name);
            resolver.set_attr(&bus.logical_id, "Name", &bus.name);
            resolver.set_attr(&bus.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:event-bus/{}", bus.name));
            if mode == Mode::Provision && events.describe_event_bus().name(&bus.name).send().await.is_err() {
                events.create_event_bus().name(&bus.name).send().await.map_err(aws_err(format!("CreateEventBus {}", bus.name)))?;
            }
        }

        let archives = template.archives(&resolver)?;
        for archive in &archives {
            resolver.set_ref(&archive.logical_id, &archive.name);
            resolver.set_attr(&archive.logical_id, "Arn", archive_arn(&region, account, &archive.name));
            if mode == Mode::Provision {
                create_archive(&events, archive).await?;
            }
        }

        // Every queue's ARN first (a redrive policy names its dead-letter queue's), then the
        // queues without a redrive policy, then those with one (SQS requires the dead-letter
        // queue to exist).
        let mut specs = template.queues(&resolver)?;
        for spec in &specs {
            resolver.set_attr(&spec.logical_id, "Arn", queue_arn(&region, account, &spec.name));
            resolver.set_attr(&spec.logical_id, "QueueName", &spec.name);
        }
        specs.sort_by_key(|s| s.redrive_policy.is_some());
        let mut queues = Vec::new();
        for mut spec in specs {
            if let Some(policy) = spec.redrive_policy.take() {
                let at = format!("{}.Properties.RedrivePolicy", spec.logical_id);
                spec.attributes.insert("RedrivePolicy".into(), redrive_policy(&resolver, &policy, &at)?);
            }
            let info = queue(&sqs, &spec, &region, account, mode).await?;
            resolver.set_ref(&spec.logical_id, &info.url);
            resolver.set_attr(&spec.logical_id, "QueueUrl", &info.url);
            queues.push(info);
        }

        let s3 = aws_sdk_s3::Client::new(sdk);
        let buckets = template.buckets(&resolver)?;
        for bucket in &buckets {
            resolver.set_ref(&bucket.logical_id, &bucket.name);
            resolver.set_attr(&bucket.logical_id, "Arn", format!("arn:aws:s3:::{}", bucket.name));
            if mode == Mode::Provision && s3.head_bucket().bucket(&bucket.name).send().await.is_err() {
                let mut request = s3.create_bucket().bucket(&bucket.name);
                if region != "us-east-1" {
                    let constraint = aws_sdk_s3::types::BucketLocationConstraint::from(region.as_str());
                    request = request
                        .create_bucket_configuration(aws_sdk_s3::types::CreateBucketConfiguration::builder().location_constraint(constraint).build());
                }
                request.send().await.map_err(aws_err(format!("CreateBucket {}", bucket.name)))?;
            }
        }

        let (functions, skipped_functions) = template.runnable_functions()?;
        // A function's own FunctionName is checked against Lambda's limit; locally every function
        // is named as CloudFormation names an unnamed one (`<stack>-<LogicalId>-<SUFFIX>`).
        template.check_function_names(&resolver)?;
        for id in template.function_ids() {
            let name = crate::template::physical_name(stack_name, &id, &names::FUNCTION);
            resolver.set_attr(&id, "Arn", format!("arn:aws:lambda:{region}:{account}:function:{name}"));
            resolver.set_ref(&id, name);
        }

        let mut rules = Vec::new();
        if mode == Mode::Provision {
            for f in &functions {
                for event in &f.events {
                    let FunctionEvent::EventBridgeRule(spec) = event else { continue };
                    let at = format!("{}.Properties.Events.{}.Properties.EventBusName", f.logical_id, spec.name);
                    let bus_name = match &spec.bus {
                        Some(v) => resolver.resolve_string(v, &at)?,
                        None => "default".into(),
                    };
                    // SAM's rule for the event: logical id <Function><Event>, named by CloudFormation.
                    let rule_name = rule_name(stack_name, &format!("{}{}", f.logical_id, spec.name));
                    let queue_spec = QueueSpec {
                        logical_id: format!("local:{rule_name}"),
                        name: crate::template::physical_name(
                            &format!("{stack_name}-local"),
                            &format!("{}{}", f.logical_id, spec.name),
                            &names::QUEUE,
                        ),
                        attributes: [("VisibilityTimeout".to_owned(), (f.timeout_secs.max(1) * 6).to_string())].into(),
                        redrive_policy: None,
                    };
                    let delivery_queue = queue(&sqs, &queue_spec, &region, account, mode).await?;
                    put_rule(&events, &rule_name, &bus_name, &spec.pattern).await?;
                    let target = aws_sdk_eventbridge::types::Target::builder()
                        .id("local-delivery")
                        .arn(&delivery_queue.arn)
                        .build()
                        .map_err(aws_err("Target"))?;
                    events
                        .put_targets()
                        .rule(&rule_name)
                        .event_bus_name(&bus_name)
                        .targets(target)
                        .send()
                        .await
                        .map_err(aws_err(format!("PutTargets {rule_name}")))?;
                    rules.push(LocalRule { function: f.logical_id.clone(), spec: spec.clone(), rule_name, bus_name, delivery_queue });
                }
            }
        }
        let mut queue_rules = Vec::new();
        if mode == Mode::Provision {
            for spec in template.standalone_rules()? {
                let name_at = format!("{}.Properties.Name", spec.logical_id);
                let rule_name: String = match &spec.name {
                    Some(v) => {
                        let name = resolver.resolve_string(v, &name_at)?;
                        names::check(&names::EVENT_RULE, &name, &name_at)?;
                        name
                    }
                    None => rule_name(stack_name, &spec.logical_id),
                };
                let bus_name = match &spec.bus {
                    Some(v) => resolver.resolve_string(v, &format!("{}.Properties.EventBusName", spec.logical_id))?,
                    None => "default".into(),
                };
                let mut targets = Vec::new();
                for (i, (id, arn)) in spec.targets.iter().enumerate() {
                    let at = format!("{}.Properties.Targets[{i}].Arn", spec.logical_id);
                    let arn = resolver.resolve_string(arn, &at)?;
                    let Some(q) = queues.iter().find(|q| q.arn == arn) else {
                        return Err(TemplateError::Unsupported {
                            at,
                            reason: format!("{arn}: only SQS queues of the template are rule targets locally"),
                        }
                        .into());
                    };
                    let target = aws_sdk_eventbridge::types::Target::builder().id(id).arn(&q.arn).build().map_err(aws_err("Target"))?;
                    targets.push((target, q.logical_id.clone()));
                }
                put_rule(&events, &rule_name, &bus_name, &spec.pattern).await?;
                if !targets.is_empty() {
                    events
                        .put_targets()
                        .rule(&rule_name)
                        .event_bus_name(&bus_name)
                        .set_targets(Some(targets.iter().map(|(t, _)| t.clone()).collect()))
                        .send()
                        .await
                        .map_err(aws_err(format!("PutTargets {rule_name}")))?;
                }
                resolver.set_attr(&spec.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:rule/{bus_name}/{rule_name}"));
                queue_rules.push(QueueRule {
                    logical_id: spec.logical_id,
                    rule_name,
                    bus_name,
                    queues: targets.into_iter().map(|(_, q)| q).collect(),
                });
            }
        }
        let mut schedules = Vec::new();
        if mode == Mode::Provision {
            for spec in template.schedule_rules()? {
                let at = format!("{}.Properties.ScheduleExpression", spec.logical_id);
                let expression = resolver.resolve_string(&spec.schedule, &at)?;
                let Some(period) = crate::template::rate_period(&expression) else {
                    tracing::warn!(rule = %spec.logical_id, expression = %expression, "only rate(…) schedules are played locally; this rule never fires here");
                    continue;
                };
                let rule_name = crate::template::physical_name(stack_name, &spec.logical_id, &names::EVENT_RULE);
                resolver.set_attr(&spec.logical_id, "Arn", format!("arn:aws:events:{region}:{account}:rule/{rule_name}"));
                for (i, (id, arn, input)) in spec.targets.iter().enumerate() {
                    let at = format!("{}.Properties.Targets[{i}]", spec.logical_id);
                    let arn = resolver.resolve_string(arn, &format!("{at}.Arn"))?;
                    let Some(q) = queues.iter().find(|q| q.arn == arn) else {
                        return Err(TemplateError::Unsupported {
                            at: format!("{at}.Arn"),
                            reason: format!("{arn}: only SQS queues of the template are schedule targets locally"),
                        }
                        .into());
                    };
                    let input = match input {
                        Some(v) => resolver.resolve_string(v, &format!("{at}.Input"))?,
                        None => "{}".to_owned(),
                    };
                    schedules.push(ScheduledSend { name: format!("{}.{id}", spec.logical_id), period, queue: q.clone(), input });
                }
            }
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
            rules,
            queue_rules,
            schedules,
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
/// [`physical_name`]: crate::template::physical_name
pub fn rule_name(stack_name: &str, logical_id: &str) -> String {
    crate::template::physical_name(stack_name, logical_id, &names::EVENT_RULE)
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
        stack.functions[0].events.push(FunctionEvent::Sqs(crate::template::SqsMappingSpec {
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
