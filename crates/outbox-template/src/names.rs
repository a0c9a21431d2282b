//! Physical names and the limits AWS puts on them, applied the same way locally as on AWS.
//!
//! * [`RULES`]: per resource type, the property that names it and the longest name the service
//!   accepts, with the page that says so;
//! * [`check`]: a resolved name against its rule (the local runtime refuses what AWS would
//!   refuse, and nothing AWS accepts);
//! * [`check_stack_name`]: CloudFormation's own rule for a stack name;
//! * [`generated_name`]: the name CloudFormation gives a resource whose template names none,
//!   `<stack>-<logical id>-<SUFFIX>`, cut to the service's limit (the suffix kept whole), and a
//!   nested stack's name [`nested_stack_name`], `<parent>-<logical id>-<SUFFIX>`. CloudFormation's
//!   suffixes are random; here they are derived from the names (SHA-256), so a stack provisioned
//!   twice gets the same names and tools and tests can name them.
//!
//! Sources: CloudFormation API reference, `CreateStack` (`StackName`: `[a-zA-Z][-a-zA-Z0-9]*`, at
//! most 128 characters); the "Name type" section of the CloudFormation user guide (a generated
//! name is the stack name, the logical id and a random string, truncated to the resource's
//! limit); `AWS::CloudFormation::Stack` (a nested stack is named `<parent>-<logical id>-<12
//! upper-case letters and digits>`).

use sha2::{Digest, Sha256};

use super::{unsupported, TemplateError};

/// The longest stack name CloudFormation accepts (`CreateStack`, `StackName`).
pub const MAX_STACK_NAME: usize = 128;

/// Characters of the random part CloudFormation adds to a nested stack's or a resource's
/// generated name.
pub const SUFFIX_LEN: usize = 12;

/// How a resource type is named and the longest name its service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameRule {
    /// CloudFormation (or SAM) resource type.
    pub resource_type: &'static str,
    /// The property that names it (absent: CloudFormation generates the name).
    pub property: &'static str,
    /// Fewest characters the service accepts.
    pub min: usize,
    /// Most characters the service accepts.
    pub max: usize,
    /// Whether a generated name is lower case (S3 bucket names are).
    pub lowercase: bool,
    /// The service's page stating the limit.
    pub source: &'static str,
}

const fn rule(resource_type: &'static str, property: &'static str, min: usize, max: usize, source: &'static str) -> NameRule {
    NameRule { resource_type, property, min, max, lowercase: false, source }
}

/// A DynamoDB table.
pub const TABLE: NameRule = rule("AWS::DynamoDB::Table", "TableName", 3, 255, "DynamoDB API reference, CreateTable: TableName, 3-255 characters");
/// An SQS queue.
pub const QUEUE: NameRule =
    rule("AWS::SQS::Queue", "QueueName", 1, 80, "SQS API reference, CreateQueue: QueueName, up to 80 characters (.fifo included)");
/// An S3 bucket (its generated name lower case).
pub const BUCKET: NameRule = NameRule {
    lowercase: true,
    ..rule("AWS::S3::Bucket", "BucketName", 3, 63, "S3 user guide, general purpose bucket naming rules: 3-63 characters, lower case")
};
/// An EventBridge bus.
pub const BUS: NameRule = rule("AWS::Events::EventBus", "Name", 1, 256, "EventBridge API reference, CreateEventBus: Name, 1-256 characters");
/// An EventBridge rule.
pub const EVENT_RULE: NameRule = rule("AWS::Events::Rule", "Name", 1, 64, "EventBridge API reference, PutRule: Name, 1-64 characters");
/// An EventBridge archive (48: a `<stack>-…` name would not fit a long stack name; leave it to
/// CloudFormation).
pub const ARCHIVE: NameRule =
    rule("AWS::Events::Archive", "ArchiveName", 1, 48, "EventBridge API reference, CreateArchive: ArchiveName, 1-48 characters");
/// A Lambda function.
pub const FUNCTION: NameRule =
    rule("AWS::Lambda::Function", "FunctionName", 1, 64, "Lambda API reference, CreateFunction: FunctionName, a name up to 64 characters");
/// A SAM function (a Lambda function).
pub const SERVERLESS_FUNCTION: NameRule = NameRule { resource_type: "AWS::Serverless::Function", ..FUNCTION };
/// An IAM role.
pub const ROLE: NameRule = rule("AWS::IAM::Role", "RoleName", 1, 64, "IAM API reference, CreateRole: RoleName, 1-64 characters");
/// A CloudWatch alarm.
pub const ALARM: NameRule =
    rule("AWS::CloudWatch::Alarm", "AlarmName", 1, 255, "CloudWatch API reference, PutMetricAlarm: AlarmName, 1-255 characters");
/// A CloudWatch dashboard.
pub const DASHBOARD: NameRule =
    rule("AWS::CloudWatch::Dashboard", "DashboardName", 1, 255, "CloudWatch API reference, PutDashboard: DashboardName, up to 255 characters");
/// A CloudWatch Logs log group.
pub const LOG_GROUP: NameRule =
    rule("AWS::Logs::LogGroup", "LogGroupName", 1, 512, "CloudWatch Logs API reference, CreateLogGroup: logGroupName, 1-512 characters");
/// An SNS topic.
pub const TOPIC: NameRule = rule("AWS::SNS::Topic", "TopicName", 1, 256, "SNS API reference, CreateTopic: Name, up to 256 characters");

/// Every resource type whose name this project sets or the local runtime generates.
pub const RULES: &[NameRule] =
    &[TABLE, QUEUE, BUCKET, BUS, EVENT_RULE, ARCHIVE, FUNCTION, SERVERLESS_FUNCTION, ROLE, ALARM, DASHBOARD, LOG_GROUP, TOPIC];

/// A name the template sets, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhysicalName {
    /// The resource's logical id (`<App>/<Id>` in a nested application).
    pub logical_id: String,
    /// Its type's rule (the property and the limit).
    pub rule: &'static NameRule,
    /// The name.
    pub name: String,
}

/// The rule of `resource_type`, if its name is limited here.
pub fn rule_for(resource_type: &str) -> Option<&'static NameRule> {
    RULES.iter().find(|r| r.resource_type == resource_type)
}

/// `name`, resolved for the property at `at`, against `rule`.
///
/// # Errors
/// [`TemplateError::Unsupported`] naming the property, the name, its length and the limit with
/// its source, when AWS would refuse the name's length.
pub fn check(rule: &NameRule, name: &str, at: &str) -> Result<(), TemplateError> {
    let length = name.chars().count();
    if length > rule.max || length < rule.min {
        return Err(unsupported(
            at,
            format!(
                "{name:?} is {length} characters; AWS accepts {}-{} for a {} ({}): shorten the stack name or the template's name",
                rule.min, rule.max, rule.resource_type, rule.source
            ),
        ));
    }
    Ok(())
}

/// Whether CloudFormation accepts `name` as a stack name: a letter, then letters, digits and
/// hyphens, at most [`MAX_STACK_NAME`] characters.
///
/// # Errors
/// [`TemplateError::Unsupported`] saying what is wrong with it.
pub fn check_stack_name(name: &str) -> Result<(), TemplateError> {
    let at = format!("stack name {name:?}");
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(unsupported(at, "must start with a letter (CloudFormation CreateStack: [a-zA-Z][-a-zA-Z0-9]*)"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-')) {
        return Err(unsupported(at, format!("has {c:?}: only letters, digits and hyphens (CloudFormation CreateStack: [a-zA-Z][-a-zA-Z0-9]*)")));
    }
    let length = name.chars().count();
    if length > MAX_STACK_NAME {
        return Err(unsupported(at, format!("is {length} characters; CloudFormation accepts at most {MAX_STACK_NAME} (CreateStack: StackName)")));
    }
    Ok(())
}

/// [`SUFFIX_LEN`] upper-case letters and digits derived from `seed` (in place of CloudFormation's
/// random ones).
pub fn suffix(seed: &str) -> String {
    const ALPHABET: &[u8; 36] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    Sha256::digest(seed.as_bytes()).iter().take(SUFFIX_LEN).map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()])).collect()
}

/// The stack id CloudFormation gives stack `stack_name`:
/// `arn:aws:cloudformation:<region>:<account>:stack/<name>/<UUID>` (the UUID random on AWS,
/// derived from the name here).
pub fn stack_id(region: &str, account: &str, stack_name: &str) -> String {
    let hex: String = Sha256::digest(stack_name.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect();
    let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]);
    format!("arn:aws:cloudformation:{region}:{account}:stack/{stack_name}/{uuid}")
}

/// The name of nested stack `app` (its logical id in the parent) of stack `parent`:
/// `<parent>-<app>-<SUFFIX>`.
pub fn nested_stack_name(parent: &str, app: &str) -> String {
    format!("{parent}-{app}-{}", suffix(app))
}

/// The name CloudFormation gives resource `logical_id` of stack `stack_name` when the template
/// names none: `<stack>-<logical id>-<SUFFIX>`, the part before the suffix cut so that the whole
/// fits `rule.max`, lower case for buckets. A nested resource's logical id is `<App>/<Id>` (the
/// local runtime's name for it): its stack is the nested stack, [`nested_stack_name`].
pub fn generated_name(stack_name: &str, logical_id: &str, rule: &NameRule) -> String {
    let mut stack = stack_name.to_owned();
    let mut parts: Vec<&str> = logical_id.split('/').collect();
    let id = parts.pop().unwrap_or_default();
    for app in parts {
        stack = nested_stack_name(&stack, app);
    }
    let head = format!("{stack}-{id}");
    let tail = format!("-{}", suffix(&head));
    let room = rule.max.saturating_sub(tail.len());
    let name: String = head.chars().take(room).collect::<String>() + &tail;
    if rule.lowercase {
        name.to_ascii_lowercase()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> &'static NameRule {
        &QUEUE
    }

    #[test]
    fn a_name_is_checked_at_the_services_limit_no_stricter_no_looser() {
        let q = queue();
        check(q, &"q".repeat(80), "Q.Properties.QueueName").expect("80 characters: SQS accepts it");
        let err = check(q, &"q".repeat(81), "Q.Properties.QueueName").expect_err("81: SQS refuses it").to_string();
        assert!(err.starts_with("Q.Properties.QueueName: ") && err.contains("is 81 characters; AWS accepts 1-80"), "{err}");
        let bucket = &BUCKET;
        check(bucket, &"b".repeat(63), "B").expect("63");
        check(bucket, &"b".repeat(64), "B").expect_err("64");
        check(bucket, "bb", "B").expect_err("2: under S3's 3");
    }

    #[test]
    fn a_stack_name_is_cloudformations() {
        check_stack_name(&format!("a{}", "-".repeat(127))).expect("128 characters");
        check_stack_name(&"a".repeat(129)).expect_err("129 characters");
        for bad in ["1stack", "-stack", "my_stack", "my.stack", ""] {
            assert!(check_stack_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_generated_name_has_cloudformations_shape_and_fits_its_limit() {
        let q = queue();
        let short = generated_name("shop", "RelayDeadLetterQueue", q);
        assert_eq!(short.len(), "shop-RelayDeadLetterQueue-".len() + SUFFIX_LEN, "{short}");
        assert!(short.starts_with("shop-RelayDeadLetterQueue-"), "{short}");
        assert_eq!(short, generated_name("shop", "RelayDeadLetterQueue", q), "stable");

        let nested = generated_name("shop", "Relay/RelayDeadLetterQueue", q);
        let stack = nested_stack_name("shop", "Relay");
        assert!(stack.starts_with("shop-Relay-") && stack.len() == "shop-Relay-".len() + SUFFIX_LEN, "{stack}");
        assert!(nested.starts_with(&format!("{stack}-RelayDeadLetterQueue-")), "{nested}");

        // The longest stack names: cut to the limit, the suffix kept, and still distinct.
        let long = "s".repeat(MAX_STACK_NAME);
        let a = generated_name(&long, "ConsumerKit/DeliveryQueue", q);
        let b = generated_name(&long, "ConsumerKit/ConsumerDeadLetterQueue", q);
        assert_eq!((a.len(), b.len()), (80, 80));
        assert_ne!(a, b);
        let bucket = generated_name(&format!("Shop{}", "x".repeat(124)), "Relay/FailedBatchesBucket", &BUCKET);
        assert_eq!(bucket.len(), 63);
        assert_eq!(bucket, bucket.to_ascii_lowercase());
    }
}
