//! `OutboxRelayFunction`: triggered by the outbox table's DynamoDB Stream; publishes new outbox
//! items to EventBridge and answers `batchItemFailures`. Zero code: configured only by
//! environment variables (see `outbox::relay::lambda`).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox::relay::lambda::run_from_env().await
}
