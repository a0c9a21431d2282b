//! `OutboxRelayFunction`: triggered by the outbox table's DynamoDB Stream; publishes new outbox
//! items to EventBridge and answers `batchItemFailures`. Zero code: configured only by
//! environment variables (see `outbox::relay::lambda`).

// One thread: a Lambda instance handles one invocation at a time, and on one thread the SDK's
// connection tasks and the handler never hand work to each other across threads (README "The
// functions' cost, measured").
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox::relay::lambda::run_from_env().await
}
