//! `RelayFunction` of blocks/relay (`Relay/RelayFunction` in the sample): triggered by the outbox
//! table's DynamoDB Stream; publishes new outbox items to EventBridge and answers
//! `batchItemFailures`. Zero code: configured only by environment variables (see
//! `outbox_lambda::relay`).

// mimalloc, not glibc's malloc: allocation was the largest single cost of an AWS call in the
// relay's profile (docs/cost.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// One thread: a Lambda instance handles one invocation at a time, and on one thread the SDK's
// connection tasks and the handler never hand work to each other across threads (docs/cost.md,
// "The functions' cost, measured").
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox_lambda::relay::run_from_env().await
}
