//! `OutboxRelayFunction`: triggered by the outbox table's DynamoDB Stream; publishes new outbox
//! items to EventBridge and answers `batchItemFailures` (see `outbox::relay`). The relay's counts
//! go to CloudWatch as Embedded Metric Format documents on stdout (namespace `OutboxRelay`),
//! flushed after every invocation.

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use outbox::app::relay::RelayFunction;
use outbox::config::Env;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let function_name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "outbox-relay".into());
    let metrics = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace("OutboxRelay")
        .with_dimension("function", function_name)
        .lambda_cold_start_metric("ColdStart")
        .with_lambda_request_id("RequestId")
        .init()?;
    let sdk = aws_config::load_from_env().await;
    let relay = RelayFunction::from_env(&sdk, &Env::process())?;
    metrics_cloudwatch_embedded::lambda::service::run(metrics, service_fn(|event: LambdaEvent<DynamoDbEvent>| relay.handle(event))).await
}
