//! A deployed stack's resources as the operator's verbs need them — tables, queues, buses,
//! buckets, and the functions with their environment, stream mappings and rules — found from
//! CloudFormation (`cloudformation`, which builds on this module) or from a template ([`Resources::from_stack`]),
//! and every resource option matched against them by what a person has in hand: the logical id,
//! the name, the URL (queues) or the ARN.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use outbox_template::stack::{Destination, QueueInfo, Stack};
use outbox_template::{FunctionEvent, TemplateError};

/// A table, bus or bucket of the stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Named {
    /// Logical id in the template.
    pub logical_id: String,
    /// Physical name.
    pub name: String,
    /// ARN.
    pub arn: String,
}

/// An EventBridge rule that delivers to a function (directly, or to a queue the function reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleInfo {
    /// Logical id in the template (`<Function><Event>` for a function's own rule).
    pub logical_id: String,
    /// Rule name.
    pub name: String,
    /// The bus it is on.
    pub bus: String,
    /// ARN: `arn:aws:events:<region>:<account>:rule/<bus>/<name>` (`rule/<name>` on the default bus).
    pub arn: String,
}

impl RuleInfo {
    /// The ARN of rule `name` on `bus`, as EventBridge forms it.
    pub fn arn_of(region: &str, account: &str, bus: &str, name: &str) -> String {
        if bus == "default" {
            format!("arn:aws:events:{region}:{account}:rule/{name}")
        } else {
            format!("arn:aws:events:{region}:{account}:rule/{bus}/{name}")
        }
    }
}

/// A subscriber of a Custom Event Bus (`AWS::EventsV2::Subscriber`): the bus's way to a consumer
/// (`outbox replay` on a Custom bus copies it into a replay subscriber). Its configuration
/// (filter, type, retry policy, …) is read with `DescribeSubscriber` when needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SubscriberInfo {
    /// Logical id in the template.
    pub logical_id: String,
    /// Subscriber name (`Name`: 1-256 characters, `[A-Za-z0-9][.\-_A-Za-z0-9]*`).
    pub name: String,
    /// ARN (`Ref` of an `AWS::EventsV2::Subscriber`, its `SubscriberArn`).
    pub arn: String,
    /// The ARN of its bus, `arn:aws:events:<region>:<account>:event-busv2/<name>/<id>`.
    pub bus_arn: String,
    /// The ARN of its target (`InvokeConfiguration.TargetArn`): a queue a consumer reads, or a
    /// function.
    pub target_arn: String,
}

impl SubscriberInfo {
    /// A subscriber: logical id, name, ARN, its bus's ARN, its target's ARN.
    pub fn new(
        logical_id: impl Into<String>,
        name: impl Into<String>,
        arn: impl Into<String>,
        bus_arn: impl Into<String>,
        target_arn: impl Into<String>,
    ) -> Self {
        Self { logical_id: logical_id.into(), name: name.into(), arn: arn.into(), bus_arn: bus_arn.into(), target_arn: target_arn.into() }
    }

    /// Whether it delivers to `function`: its target is the function itself
    /// (`arn:aws:lambda:…:function:<name>[:<qualifier>]`) or a queue the function's SQS event
    /// source mappings read ([`FunctionInfo::queues`]).
    pub fn delivers_to(&self, function: &FunctionInfo) -> bool {
        let direct = self.target_arn.split(":function:").nth(1).map(|f| f.split(':').next().unwrap_or(f));
        direct == Some(function.name.as_str()) || function.queues.contains(&self.target_arn)
    }
}

/// A function of the stack, with what the verbs read from it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FunctionInfo {
    /// Logical id in the template.
    pub logical_id: String,
    /// Function name.
    pub name: String,
    /// Its environment variables (`INBOX_TABLE`, `CONSUMER_NAME`, `EVENT_BUS_NAME`, …).
    pub environment: HashMap<String, String>,
    /// Names of the tables whose DynamoDB stream feeds it (its stream event source mappings).
    pub stream_tables: Vec<String>,
    /// S3 on-failure buckets of its stream mappings.
    pub failure_buckets: Vec<String>,
    /// ARNs of the SQS queues its event source mappings read (the consumer kit's delivery queue).
    pub queues: Vec<String>,
    /// Event patterns of the EventBridge rules that deliver to it: rules targeting it, and (from
    /// a template) rules targeting a queue its SQS event source mapping reads.
    pub rule_patterns: Vec<serde_json::Value>,
    /// The EventBridge rules with an event pattern that deliver to it, as [`Self::rule_patterns`]
    /// (the rules a replay to this function names in `Destination.FilterArns`), each with its pattern.
    pub rules: Vec<(RuleInfo, serde_json::Value)>,
}

/// The stack's resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Resources {
    /// Where they were found, for messages: `stack S (CloudFormation)` or `template T as stack S`.
    pub source: String,
    /// Tables.
    pub tables: Vec<Named>,
    /// Queues.
    pub queues: Vec<QueueInfo>,
    /// Event buses.
    pub buses: Vec<Named>,
    /// The buses' archives (`AWS::Events::Archive`: what `replay` replays from).
    pub archives: Vec<Named>,
    /// Custom Event Buses (`AWS::EventsV2::EventBus`): name, and ARN (`event-busv2`).
    pub custom_buses: Vec<Named>,
    /// The Custom buses' subscribers (`AWS::EventsV2::Subscriber`: what `replay` copies on a
    /// Custom bus).
    pub subscribers: Vec<SubscriberInfo>,
    /// Buckets.
    pub buckets: Vec<Named>,
    /// Functions.
    pub functions: Vec<FunctionInfo>,
    /// The stack's outputs (CloudFormation only).
    pub outputs: BTreeMap<String, String>,
}

/// A resource option that matches nothing (or more than one thing) of the stack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Nothing matches; the candidates are listed.
    #[error("no {kind} of {stack} matches {given:?} (give its logical id, name, URL or ARN); the {kind}s are:{}", list(.candidates))]
    NoMatch {
        /// What was looked for: `dead-letter queue`, `table`, `bus`, `bucket`.
        kind: &'static str,
        /// The value given.
        given: String,
        /// Where the stack came from.
        stack: String,
        /// What would match: one line each.
        candidates: Vec<String>,
    },
    /// The stack has none of that kind.
    #[error("{stack} has no {kind}")]
    None {
        /// What was looked for.
        kind: &'static str,
        /// Where the stack came from.
        stack: String,
    },
}

fn list(candidates: &[String]) -> String {
    candidates.iter().map(|c| format!("\n  {c}")).collect()
}

/// The last segment of a queue URL, `https://sqs.<region>.amazonaws.com/<account>/<name>`.
pub fn queue_name_of_url(url: &str) -> &str {
    url.trim_end_matches('/').rsplit('/').next().unwrap_or(url)
}

/// The resource of `items` that `given` names by logical id, name, URL or ARN (`s3://bucket` too).
fn find<'a, T>(items: &'a [T], given: &str, kind: &'static str, source: &str, keys: impl Fn(&T) -> Vec<&str>) -> Result<&'a T, ResolveError> {
    let given_trimmed = given.trim().trim_start_matches("s3://").trim_end_matches('/');
    if items.is_empty() {
        return Err(ResolveError::None { kind, stack: source.to_owned() });
    }
    items.iter().find(|item| keys(item).contains(&given_trimmed)).ok_or_else(|| ResolveError::NoMatch {
        kind,
        given: given.to_owned(),
        stack: source.to_owned(),
        candidates: items.iter().map(|i| keys(i).join("  ")).collect(),
    })
}

impl Resources {
    /// The dead-letter queues: the queues whose logical id says so (`…DeadLetter…`, `…Dlq…`).
    pub fn dead_letter_queues(&self) -> Vec<QueueInfo> {
        self.queues.iter().filter(|q| q.logical_id.contains("DeadLetter") || q.logical_id.contains("Dlq")).cloned().collect()
    }

    /// The dead-letter queue `given` names (logical id, name, URL or ARN).
    ///
    /// # Errors
    /// [`ResolveError`] listing the dead-letter queues.
    pub fn dead_letter_queue(&self, given: &str) -> Result<QueueInfo, ResolveError> {
        let queues = self.dead_letter_queues();
        find(&queues, given, "dead-letter queue", &self.source, |q| vec![&q.logical_id, &q.name, &q.url, &q.arn]).cloned()
    }

    /// The table `given` names (logical id, name or ARN).
    ///
    /// # Errors
    /// [`ResolveError`] listing the tables.
    pub fn table(&self, given: &str) -> Result<&Named, ResolveError> {
        find(&self.tables, given, "table", &self.source, |t| vec![&t.logical_id, &t.name, &t.arn])
    }

    /// The bus `given` names (logical id, name or ARN).
    ///
    /// # Errors
    /// [`ResolveError`] listing the buses.
    pub fn bus(&self, given: &str) -> Result<&Named, ResolveError> {
        find(&self.buses, given, "event bus", &self.source, |b| vec![&b.logical_id, &b.name, &b.arn])
    }

    /// The bucket `given` names (logical id, name, `s3://name` or ARN).
    ///
    /// # Errors
    /// [`ResolveError`] listing the buckets.
    pub fn bucket(&self, given: &str) -> Result<&Named, ResolveError> {
        find(&self.buckets, given, "bucket", &self.source, |b| vec![&b.logical_id, &b.name, &b.arn])
    }

    /// The archive `given` names (logical id, name or ARN); with `None`, the stack's only archive.
    ///
    /// # Errors
    /// [`ResolveError`]: no archive, none matching, or (with `None`) more than one (listed).
    pub fn archive(&self, given: Option<&str>) -> Result<&Named, ResolveError> {
        fn keys(a: &Named) -> Vec<&str> {
            vec![a.logical_id.as_str(), a.name.as_str(), a.arn.as_str()]
        }
        match (given, self.archives.as_slice()) {
            (Some(given), archives) => find(archives, given, "event archive", &self.source, keys),
            (None, [only]) => Ok(only),
            (None, []) => Err(ResolveError::None { kind: "event archive", stack: self.source.clone() }),
            (None, archives) => Err(ResolveError::NoMatch {
                kind: "event archive",
                given: "(none given: pass --archive)".into(),
                stack: self.source.clone(),
                candidates: archives.iter().map(|a| keys(a).join("  ")).collect(),
            }),
        }
    }

    /// The names of the tables whose stream feeds a function: the outbox tables.
    pub fn outbox_tables(&self) -> Vec<String> {
        let mut tables: Vec<String> = self.functions.iter().flat_map(|f| f.stream_tables.iter().cloned()).collect();
        tables.sort();
        tables.dedup();
        tables
    }

    /// The S3 on-failure buckets of the stack's stream mappings.
    pub fn failure_buckets(&self) -> Vec<String> {
        let mut buckets: Vec<String> = self.functions.iter().flat_map(|f| f.failure_buckets.iter().cloned()).collect();
        buckets.sort();
        buckets.dedup();
        buckets
    }

    /// Every consumer's inbox: (`INBOX_TABLE`, `CONSUMER_NAME`) of the functions that have both
    /// (the name read as the function reads it, [`outbox_lambda::consumer_name`]).
    pub fn inboxes(&self) -> Vec<(String, String)> {
        self.functions
            .iter()
            .filter_map(|f| {
                let name = outbox_lambda::consumer_name(&outbox_lambda::Env::from_map(f.environment.clone())).ok()?;
                Some((f.environment.get(outbox::contract::env::INBOX_TABLE)?.clone(), name))
            })
            .collect()
    }

    /// The resources of `stack` (a template's, looked up or provisioned).
    ///
    /// # Errors
    /// [`TemplateError`] naming a function's environment variable that cannot be resolved.
    pub fn from_stack(stack: &Stack) -> Result<Self, TemplateError> {
        let (region, account) = (&stack.resolver.region, &stack.resolver.account);
        let named = |logical_id: &str, name: &str, arn: String| Named { logical_id: logical_id.to_owned(), name: name.to_owned(), arn };
        let deliveries = stack.deliveries()?;
        let mut functions = Vec::new();
        for f in &stack.functions {
            let mut info = FunctionInfo {
                logical_id: f.logical_id.clone(),
                name: outbox_template::physical_name(&stack.resolver.stack_name, &f.logical_id, &outbox_template::names::FUNCTION),
                environment: stack.environment(f)?,
                ..Default::default()
            };
            for event in &f.events {
                match event {
                    FunctionEvent::DynamoDb(m) => {
                        info.stream_tables.extend(stack.table(&m.table_logical_id).map(|t| t.name.clone()));
                        if let Some(Ok(Destination::S3 { bucket })) = m.on_failure.as_ref().map(|d| stack.destination(d, &f.logical_id)) {
                            info.failure_buckets.push(bucket);
                        }
                    }
                    FunctionEvent::EventBridgeRule(rule) => info.rule_patterns.push(rule.pattern.clone()),
                    FunctionEvent::Sqs(m) => info.queues.extend(stack.queue(&m.queue_logical_id).map(|q| q.arn.clone())),
                    _ => {}
                }
            }
            // The rules feeding the queues its SQS mappings read (the consumer kit's delivery).
            info.rule_patterns.extend(deliveries.iter().filter(|d| d.function == f.logical_id && d.queue.is_some()).map(|d| d.pattern.clone()));
            info.rules = deliveries
                .iter()
                .filter(|d| d.function == f.logical_id)
                .map(|d| {
                    let rule = RuleInfo {
                        logical_id: d.rule.clone(),
                        name: d.rule_name.clone(),
                        bus: d.bus_name.clone(),
                        arn: RuleInfo::arn_of(region, account, &d.bus_name, &d.rule_name),
                    };
                    (rule, d.pattern.clone())
                })
                .collect();
            functions.push(info);
        }
        Ok(Self {
            source: format!("template {} as stack {}", stack.template.path.display(), stack.resolver.stack_name),
            tables: stack
                .tables
                .iter()
                .map(|t| named(&t.logical_id, &t.name, format!("arn:aws:dynamodb:{region}:{account}:table/{}", t.name)))
                .collect(),
            queues: stack.queues.clone(),
            buses: stack
                .buses
                .iter()
                .map(|b| named(&b.logical_id, &b.name, format!("arn:aws:events:{region}:{account}:event-bus/{}", b.name)))
                .collect(),
            buckets: stack.buckets.iter().map(|b| named(&b.logical_id, &b.name, format!("arn:aws:s3:::{}", b.name))).collect(),
            archives: stack
                .archives
                .iter()
                .map(|a| named(&a.logical_id, &a.name, format!("arn:aws:events:{region}:{account}:archive/{}", a.name)))
                .collect(),
            // A looked-up stack knows neither a Custom bus's ARN suffix nor a subscriber's ARN:
            // empty here, found by name when a verb needs them (`replay::subscriber`).
            custom_buses: stack.custom_buses.iter().map(|b| named(&b.spec.logical_id, &b.spec.name, b.arn.clone().unwrap_or_default())).collect(),
            subscribers: stack
                .subscribers
                .iter()
                .map(|s| SubscriberInfo::new(&s.logical_id, &s.name, s.arn.clone().unwrap_or_default(), &s.bus_arn, &s.target_arn))
                .collect(),
            functions,
            outputs: BTreeMap::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources() -> Resources {
        Resources {
            source: "stack s".into(),
            queues: vec![
                QueueInfo {
                    logical_id: "ConsumerDeadLetterQueue".into(),
                    name: "s-consumer-dlq".into(),
                    url: "https://sqs.eu-west-1.amazonaws.com/111122223333/s-consumer-dlq".into(),
                    arn: "arn:aws:sqs:eu-west-1:111122223333:s-consumer-dlq".into(),
                },
                QueueInfo { logical_id: "WorkQueue".into(), name: "s-work".into(), url: "u".into(), arn: "a".into() },
            ],
            buckets: vec![Named { logical_id: "FailedBatches".into(), name: "s-failed".into(), arn: "arn:aws:s3:::s-failed".into() }],
            ..Default::default()
        }
    }

    #[test]
    fn a_queue_is_found_by_logical_id_name_url_or_arn() {
        let r = resources();
        for given in [
            "ConsumerDeadLetterQueue",
            "s-consumer-dlq",
            "https://sqs.eu-west-1.amazonaws.com/111122223333/s-consumer-dlq",
            "arn:aws:sqs:eu-west-1:111122223333:s-consumer-dlq",
        ] {
            assert_eq!(r.dead_letter_queue(given).map(|q| q.name), Ok("s-consumer-dlq".to_owned()), "{given}");
        }
        assert_eq!(r.bucket("s3://s-failed").map(|b| b.logical_id.as_str()), Ok("FailedBatches"));
    }

    #[test]
    fn a_wrong_queue_lists_the_candidates_and_only_dead_letter_queues_count() {
        let err = resources().dead_letter_queue("s-work").expect_err("not a dead-letter queue").to_string();
        assert!(err.starts_with("no dead-letter queue of stack s matches \"s-work\""), "{err}");
        assert!(err.contains("\n  ConsumerDeadLetterQueue  s-consumer-dlq  https://"), "{err}");
        assert!(!err.contains("WorkQueue"), "{err}");
        assert_eq!(resources().table("t").expect_err("no tables").to_string(), "stack s has no table");
    }

    #[test]
    fn queue_names_come_from_urls() {
        assert_eq!(queue_name_of_url("https://sqs.us-east-1.amazonaws.com/1/q-1"), "q-1");
        assert_eq!(queue_name_of_url("http://127.0.0.1:5000/123456789012/q-2/"), "q-2");
    }
}
