//! `OutboxRelayFunction`: triggered by the outbox table's DynamoDB Stream; publishes new outbox
//! items to EventBridge and answers `batchItemFailures` (see `outbox::relay`).

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use lambda_runtime::{run, service_fn, tracing, Error, LambdaEvent};
use outbox::app::relay::RelayFunction;
use outbox::config::Env;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let sdk = aws_config::load_from_env().await;
    let relay = RelayFunction::from_env(&sdk, &Env::process())?;
    run(service_fn(|event: LambdaEvent<DynamoDbEvent>| relay.handle(event))).await
}
