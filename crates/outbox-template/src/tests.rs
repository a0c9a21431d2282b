use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml_ng::Value;

use super::intrinsics::intrinsic;
use super::*;

const T: &str = r#"
Globals:
  Function:
    Timeout: 30
    MemorySize: 256
    LoggingConfig: {LogFormat: JSON, ApplicationLogLevel: INFO}
    Environment:
      Variables:
        SHARED: one
Resources:
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: !Sub ${AWS::StackName}-t
      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
      KeySchema: [{AttributeName: pk, KeyType: HASH}]
      StreamSpecification: {StreamViewType: NEW_IMAGE}
      TimeToLiveSpecification: {AttributeName: expires_at, Enabled: true}
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub "${AWS::StackName}-q"
  Fn:
    Type: AWS::Serverless::Function
    Metadata:
      BuildProperties: {Binary: my-bin}
    Properties:
      Timeout: 60
      ReservedConcurrentExecutions: 2
      LoggingConfig: {LogFormat: JSON, ApplicationLogLevel: DEBUG}
      Environment:
        Variables:
          TABLE: !Ref Table
          QUEUE_ARN: !GetAtt Queue.Arn
          LONG: {"Fn::GetAtt": [Queue, Arn]}
          SUB: !Sub "${Table}/${Queue.Arn}/${!Literal}"
      Events:
        S:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt Table.StreamArn
            BatchSize: 7
            MaximumRetryAttempts: 3
            FunctionResponseTypes: [ReportBatchItemFailures]
            FilterCriteria:
              Filters:
                - Pattern: '{"eventName": ["INSERT"]}'
        R:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [a], detail-type: [B]}
            RetryPolicy: {MaximumRetryAttempts: 4}
      EventInvokeConfig:
        MaximumRetryAttempts: 1
"#;

fn resolver() -> Resolver {
    let mut r = Resolver::new("stack", "us-east-1", "123456789012");
    r.set_ref("Table", "stack-t");
    r.set_attr("Queue", "Arn", "arn:q");
    r
}

#[test]
fn reads_tables_with_stream_and_ttl() {
    let t = Template::parse(Path::new("t.yaml"), T).unwrap();
    let tables = t.tables(&resolver()).unwrap();
    assert_eq!(tables[0].name, "stack-t");
    assert_eq!(tables[0].stream_view_type.as_deref(), Some("NEW_IMAGE"));
    assert_eq!(tables[0].ttl_attribute.as_deref(), Some("expires_at"));
    assert_eq!(t.queues(&resolver()).unwrap()[0].name, "stack-q");
}

#[test]
fn reads_functions_with_globals_events_and_intrinsics() {
    let t = Template::parse(Path::new("t.yaml"), T).unwrap();
    let f = &t.functions().unwrap()[0];
    assert_eq!((f.binary.as_str(), f.timeout_secs, f.memory_mb, f.reserved_concurrency), ("my-bin", 60, 256, Some(2)));
    assert_eq!((f.log_format.as_deref(), f.log_level.as_deref()), (Some("JSON"), Some("DEBUG")), "the function's LoggingConfig wins");
    let r = resolver();
    let env: BTreeMap<_, _> = f.environment.iter().map(|(k, v)| (k.as_str(), r.resolve_string(v, k).unwrap())).collect();
    assert_eq!(env["SHARED"], "one");
    assert_eq!(env["TABLE"], "stack-t");
    assert_eq!(env["QUEUE_ARN"], "arn:q");
    assert_eq!(env["LONG"], "arn:q");
    assert_eq!(env["SUB"], "stack-t/arn:q/${Literal}");
    assert_eq!(f.event_invoke.max_retry_attempts, 1);
    let FunctionEvent::DynamoDb(m) = &f.events[0] else { panic!("{:?}", f.events) };
    assert_eq!((m.table_logical_id.as_str(), m.batch_size, m.max_retry_attempts), ("Table", 7, 3));
    assert!(m.report_batch_item_failures);
    assert_eq!(m.filters[0]["eventName"][0], "INSERT");
    let FunctionEvent::EventBridgeRule(rule) = &f.events[1] else { panic!() };
    assert_eq!(rule.pattern["detail-type"][0], "B");
    assert_eq!(rule.retry_attempts, 4);
}

#[test]
fn reads_sqs_mappings_standalone_rules_and_redrive_policies() {
    let text = r#"
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dead.Arn, maxReceiveCount: 3}
      MaximumMessageSize: 1048576
  Dead:
    Type: AWS::SQS::Queue
  ToWork:
    Type: AWS::Events::Rule
    Properties:
      EventPattern: {detail-type: [A]}
      Targets: [{Id: w, Arn: !GetAtt Work.Arn}]
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: b}}
    Properties:
      Events:
        Q:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            MaximumBatchingWindowInSeconds: 2
            FunctionResponseTypes: [ReportBatchItemFailures]
            FilterCriteria: {Filters: [{Pattern: '{"body": {"a": [1]}}'}]}
"#;
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    let FunctionEvent::Sqs(m) = &t.functions().unwrap()[0].events[0] else { panic!("an SQS mapping") };
    assert_eq!((m.queue_logical_id.as_str(), m.batch_size, m.max_batching_window_secs, m.report_batch_item_failures), ("Work", 10, 2, true));
    assert_eq!(m.filters[0]["body"]["a"][0], 1);
    let rules = t.standalone_rules().unwrap();
    assert_eq!(
        (rules[0].logical_id.as_str(), rules[0].pattern["detail-type"][0].as_str(), rules[0].targets[0].0.as_str()),
        ("ToWork", Some("A"), "w")
    );
    let queues = t.queues(&resolver()).unwrap();
    let work = queues.iter().find(|q| q.logical_id == "Work").unwrap();
    assert_eq!(work.redrive_policy.as_ref().and_then(|p| p.get("maxReceiveCount")).and_then(Value::as_u64), Some(3));
    assert_eq!(work.attributes.get("MaximumMessageSize").map(String::as_str), Some("1048576"), "created with the template's size");
    assert!(!queues.iter().any(|q| q.logical_id == "Dead" && q.attributes.contains_key("MaximumMessageSize")), "unstated: SQS's default");
    let transformed = text.replace("Targets: [{Id: w, Arn: !GetAtt Work.Arn}]", "Targets: [{Id: w, Arn: !GetAtt Work.Arn, InputPath: $.detail}]");
    let err = Template::parse(Path::new("t.yaml"), &transformed).unwrap().standalone_rules().unwrap_err().to_string();
    assert!(err.starts_with("ToWork.Properties.Targets[0].InputPath: is not played locally"), "{err}");
}

#[test]
fn a_function_without_a_binary_is_an_error_naming_it() {
    let text = "Resources:\n  PyFunction:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: python3.13, Handler: app.handler}\n";
    let err = Template::parse(Path::new("t.yaml"), text).unwrap().functions().unwrap_err().to_string();
    assert!(err.starts_with("PyFunction.Metadata.BuildProperties.Binary: is required"), "{err}");
    assert!(err.contains("function PyFunction"), "{err}");
}

#[test]
fn a_template_that_is_not_yaml_is_an_error_with_the_path_line_and_column() {
    let text = "Resources:\n  Fn:\n    Type: AWS::Serverless::Function\n   Properties: {}\n";
    let err = Template::parse(Path::new("/x/template.yaml"), text).unwrap_err().to_string();
    assert!(err.starts_with("/x/template.yaml:4:"), "{err}");
    assert!(err.contains("not valid YAML: did not find expected key, while parsing"), "{err}");
}

#[test]
fn http_routes_under_a_jwt_authorizer_are_known_and_opt_outs_are_not() {
    let text = r#"
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
    Properties:
      Auth:
        DefaultAuthorizer: Jwt
        Authorizers:
          Jwt: {IdentitySource: $request.header.Authorization, JwtConfiguration: {issuer: x, audience: [y]}}
          Custom: {FunctionArn: arn}
  Fn:
    Type: AWS::Serverless::Function
    Metadata: {BuildProperties: {Binary: b}}
    Properties:
      Events:
        Guarded: {Type: HttpApi, Properties: {ApiId: !Ref Api, Path: /a, Method: GET}}
        Open: {Type: HttpApi, Properties: {ApiId: !Ref Api, Path: /b, Method: POST, Auth: {Authorizer: NONE}}}
        Implicit: {Type: HttpApi, Properties: {Path: /c, Method: GET}}
"#;
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    let (functions, _) = t.runnable_functions().unwrap();
    let jwt: Vec<(String, bool)> = functions[0]
        .events
        .iter()
        .filter_map(|e| match e {
            FunctionEvent::HttpApi { name, jwt, .. } => Some((name.clone(), *jwt)),
            _ => None,
        })
        .collect();
    assert_eq!(jwt, [("Guarded".to_owned(), true), ("Open".to_owned(), false), ("Implicit".to_owned(), false)]);
    let lambda = text.replace("DefaultAuthorizer: Jwt", "DefaultAuthorizer: Custom");
    let err = Template::parse(Path::new("t.yaml"), &lambda).unwrap().runnable_functions().unwrap_err();
    assert!(err.to_string().contains("JWT authorizers only"), "{err}");
}

#[test]
fn functions_without_a_binary_are_skipped_and_named() {
    let text = "Resources:\n  PyFunction:\n    Type: AWS::Serverless::Function\n    Properties: {Runtime: python3.13}\n  RustFunction:\n    Type: AWS::Serverless::Function\n    Metadata: {BuildProperties: {Binary: rust-bin}}\n";
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    let (functions, skipped) = t.runnable_functions().unwrap();
    assert_eq!(functions.iter().map(|f| f.logical_id.as_str()).collect::<Vec<_>>(), ["RustFunction"]);
    assert_eq!(skipped, ["PyFunction"]);
    assert_eq!(t.function_ids(), ["PyFunction", "RustFunction"]);
}

#[test]
fn unknown_references_are_errors_that_name_the_place() {
    let err = resolver().resolve_string(&serde_yaml_ng::from_str("!Ref Nope").unwrap(), "X.Env.Y").unwrap_err();
    assert_eq!(err.to_string(), "X.Env.Y: Ref Nope: not a resource the local runtime provisions");
    let err = resolver().resolve_string(&serde_yaml_ng::from_str("!FindInMap [a, b, c]").unwrap(), "X").unwrap_err();
    assert!(err.to_string().contains("expected a string, Ref, GetAtt, Sub, Join or Select"), "{err}");
    assert_eq!(resolver().resolve_string(&serde_yaml_ng::from_str("!Join [a, [b, c]]").unwrap(), "X").unwrap(), "bac");
}

/// The retention rule holds in the project's own template: one parameter sets both
/// dead-letter queues' retention and every inbox consumer's, and each consumer's resolved
/// environment passes the check it runs at start.
#[test]
fn the_template_states_the_retention_rule_once_and_keeps_it() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml");
    let template = Template::load(&path).unwrap();
    let defaults = template.parameter_defaults();
    let (_, retention) = defaults.iter().find(|(name, _)| name == "DeadLetterRetentionSeconds").expect("the parameter exists");
    let mut r = Resolver::new("stack", "us-east-1", "123456789012");
    for (name, value) in &defaults {
        r.set_ref(name, value.clone());
    }
    let by_ref = |v: &Value| intrinsic(v, "Ref").and_then(Value::as_str) == Some("DeadLetterRetentionSeconds");
    let queues = template.resources_of("AWS::SQS::Queue");
    assert!(queues.iter().any(|(id, _)| id.contains("DeadLetter")));
    let default_retention: u64 = retention.parse().unwrap();
    for (id, properties) in &queues {
        let period = properties.get("MessageRetentionPeriod").unwrap_or_else(|| panic!("{id} states its retention"));
        if id.contains("DeadLetter") {
            assert!(by_ref(period), "{id}.MessageRetentionPeriod must be !Ref DeadLetterRetentionSeconds");
        } else {
            // A work queue (e.g. webhook deliveries) redrives into a dead-letter queue, and SQS
            // keeps a message's original enqueue time there: it must not outlive the rule.
            let seconds: u64 = r.resolve_string(period, id).unwrap().parse().unwrap();
            assert!(seconds <= default_retention, "{id} keeps messages {seconds} s, longer than its dead-letter queue");
        }
    }
    let consumers: Vec<FunctionSpec> = template.functions().unwrap().into_iter().filter(|f| f.environment.contains_key("INBOX_TABLE")).collect();
    assert!(!consumers.is_empty());
    for function in consumers {
        let stated = function.environment.get("DEAD_LETTER_RETENTION_SECONDS").unwrap_or_else(|| panic!("{} gets the rule", function.logical_id));
        assert!(by_ref(stated), "{}: DEAD_LETTER_RETENTION_SECONDS must be !Ref DeadLetterRetentionSeconds", function.logical_id);
        let env: std::collections::HashMap<String, String> =
            function.environment.iter().filter_map(|(k, v)| Some((k.clone(), r.resolve_string(v, k).ok()?))).collect();
        let inbox = outbox_lambda::inbox_retention(&outbox_lambda::Env::from_map(env)).unwrap_or_else(|e| panic!("{}: {e}", function.logical_id));
        assert!(inbox.as_secs() > retention.parse::<u64>().unwrap(), "{}: the inbox outlives the dead-letter queues", function.logical_id);
    }
}

/// A template naming `kind`'s resource `X` with `property: <name of length>`.
fn named_template(kind: &str, property: &str, length: usize) -> Template {
    let key = "\n      AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]\n      KeySchema: [{AttributeName: pk, KeyType: HASH}]";
    let table = if kind == "AWS::DynamoDB::Table" { key } else { "" };
    let text = format!("Resources:\n  X:\n    Type: {kind}\n    Properties:\n      {property}: {}{table}\n", "n".repeat(length));
    Template::parse(Path::new("t.yaml"), &text).unwrap()
}

#[test]
fn a_name_the_template_sets_is_refused_over_its_services_limit_and_accepted_up_to_it() {
    let r = resolver();
    assert_eq!(named_template("AWS::SQS::Queue", "QueueName", 80).queues(&r).unwrap()[0].name.len(), 80);
    let err = named_template("AWS::SQS::Queue", "QueueName", 81).queues(&r).unwrap_err().to_string();
    assert!(err.starts_with("X.Properties.QueueName: ") && err.contains("81 characters; AWS accepts 1-80"), "{err}");
    assert_eq!(named_template("AWS::S3::Bucket", "BucketName", 63).buckets(&r).unwrap()[0].name.len(), 63);
    assert!(named_template("AWS::S3::Bucket", "BucketName", 64).buckets(&r).is_err());
    assert!(named_template("AWS::DynamoDB::Table", "TableName", 255).tables(&r).is_ok());
    assert!(named_template("AWS::DynamoDB::Table", "TableName", 256).tables(&r).is_err());
    assert!(named_template("AWS::Events::EventBus", "Name", 256).buses(&r).is_ok());
    assert!(named_template("AWS::Events::EventBus", "Name", 257).buses(&r).is_err());
    assert!(named_template("AWS::Serverless::Function", "FunctionName", 64).check_function_names(&r).is_ok());
    let err = named_template("AWS::Serverless::Function", "FunctionName", 65).check_function_names(&r).unwrap_err().to_string();
    assert!(err.contains("X.Properties.FunctionName") && err.contains("65 characters; AWS accepts 1-64"), "{err}");
}

#[test]
fn an_unnamed_resource_gets_cloudformations_generated_name_within_the_limit() {
    let text = "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n  B:\n    Type: AWS::S3::Bucket\n";
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    let long = "Stack".repeat(25) + "abc"; // 128 characters, CloudFormation's longest
    let r = Resolver::new(&long, "us-east-1", "123456789012");
    let queue = &t.queues(&r).unwrap()[0].name;
    let bucket = &t.buckets(&r).unwrap()[0].name;
    assert_eq!((queue.len(), bucket.len()), (80, 63), "{queue} {bucket}");
    assert!(queue.starts_with("StackStack") && bucket.starts_with("stackstack"), "{queue} {bucket}");
    let r = Resolver::new("shop", "us-east-1", "123456789012");
    let queue = &t.queues(&r).unwrap()[0].name;
    assert!(queue.starts_with("shop-Q-") && queue.len() == "shop-Q-".len() + names::SUFFIX_LEN, "{queue}");
}

#[test]
fn a_name_from_the_stack_id_resolves_locally() {
    let text = r#"
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: !Join ["-", [reserve-inventory, !Select [2, !Split ["/", !Ref AWS::StackId]]]]
"#;
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    for stack in ["s", &"s".repeat(names::MAX_STACK_NAME)] {
        let r = Resolver::new(stack, "us-east-1", "123456789012");
        let found = t.physical_names(&r).unwrap();
        let name = &found[0].name;
        assert_eq!(name.len(), "reserve-inventory-".len() + 36, "{name}: the UUID, whatever the stack name");
        t.check_function_names(&r).unwrap();
    }
    let r = Resolver::new("s", "us-east-1", "123456789012");
    let bad: Value = serde_yaml_ng::from_str("!Select [5, [a, b]]").unwrap();
    let err = r.resolve_string(&bad, "X").unwrap_err().to_string();
    assert!(err.contains("Select index 5 of a list of 2"), "{err}");
}

#[test]
fn an_unnamed_archive_gets_a_name_within_the_48_characters_aws_allows() {
    let name = |stack: &str| super::physical_name(stack, "Relay/EventArchive", &names::ARCHIVE);
    assert!(name("shop").starts_with("shop-Relay-"), "{}", name("shop"));
    let longest = "s".repeat(names::MAX_STACK_NAME); // CloudFormation's longest stack name
    let (a, b) = (name(&longest), name(&format!("{}t", &longest[..127])));
    assert_eq!(a.chars().count(), names::ARCHIVE.max, "{a}");
    assert!(b.chars().count() <= names::ARCHIVE.max && a != b, "names that share a prefix stay apart (their suffixes): {a} {b}");
}

#[test]
fn an_archive_is_read_with_its_bus_pattern_and_retention_and_a_name_over_48_is_refused() {
    let text = "Resources:\n  A:\n    Type: AWS::Events::Archive\n    Properties:\n      SourceArn: arn:aws:events:us-east-1:1:event-bus/b\n      EventPattern: {detail: {metadata: {id: [{exists: true}]}}}\n      RetentionDays: 7\n";
    let template = Template::parse(Path::new("t.yaml"), text).expect("a template");
    let archives = template.archives(&Resolver::new("s", "us-east-1", "1")).expect("its archive");
    assert_eq!(archives.len(), 1);
    assert!(archives[0].name.starts_with("s-A-"), "CloudFormation's shape: {}", archives[0].name);
    assert_eq!((archives[0].source_arn.as_str(), archives[0].retention_days), ("arn:aws:events:us-east-1:1:event-bus/b", 7));
    assert_eq!(archives[0].pattern, Some(serde_json::json!({"detail": {"metadata": {"id": [{"exists": true}]}}})));
    let named = text.replace("    Properties:\n", &format!("    Properties:\n      ArchiveName: {}\n", "a".repeat(49)));
    let template = Template::parse(Path::new("t.yaml"), &named).expect("a template");
    let err = template.archives(&Resolver::new("s", "us-east-1", "1")).expect_err("too long").to_string();
    assert!(err.starts_with("A.Properties.ArchiveName: ") && err.contains("49 characters; AWS accepts 1-48"), "{err}");
}

#[test]
fn a_fifo_queue_is_created_fifo_and_named_with_the_fifo_suffix() {
    let text = "Resources:\n  F:\n    Type: AWS::SQS::Queue\n    Properties: {FifoQueue: true, ContentBasedDeduplication: true}\n  S:\n    Type: AWS::SQS::Queue\n    Properties: {FifoQueue: false}\n";
    let t = Template::parse(Path::new("t.yaml"), text).unwrap();
    let long = "Stack".repeat(25) + "abc";
    for r in [resolver(), Resolver::new(&long, "us-east-1", "123456789012")] {
        let queues = t.queues(&r).unwrap();
        let (f, s) = (&queues.iter().find(|q| q.logical_id == "F").unwrap(), &queues.iter().find(|q| q.logical_id == "S").unwrap());
        assert!(f.name.ends_with(".fifo") && f.name.len() <= 80, "{}", f.name);
        assert_eq!(
            (f.attributes.get("FifoQueue").map(String::as_str), f.attributes.get("ContentBasedDeduplication").map(String::as_str)),
            (Some("true"), Some("true"))
        );
        assert!(!s.name.ends_with(".fifo") && !s.attributes.contains_key("FifoQueue"), "FifoQueue false: a standard queue, {s:?}");
    }
    let named = "Resources:\n  F:\n    Type: AWS::SQS::Queue\n    Properties: {FifoQueue: true, QueueName: orders}\n";
    let err = Template::parse(Path::new("t.yaml"), named).unwrap().queues(&resolver()).unwrap_err().to_string();
    assert!(err.starts_with("F.Properties.QueueName") && err.contains("must end with .fifo"), "{err}");
}
