//! `ReserveInventoryFunction`: on the consumer kit's delivery queue (an SQS event source mapping
//! with `ReportBatchItemFailures`), reserves stock for `OrderCreated` and gives it back for
//! `OrderCancelled`, exactly once per event through the inbox (see `orders_app::inventory`). It
//! also takes a single EventBridge event (`sam local invoke -e events/order-created.json`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use orders_app::inventory::InventoryConsumer;
use outbox::consumer::{RawEvent, DEFAULT_METRICS_NAMESPACE};
use outbox_lambda::Env;

// mimalloc, not glibc's malloc: allocation was the largest single cost of an AWS call in the
// relay's profile (docs/cost.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// One thread: see blocks/relay/function/src/main.rs.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let env = Env::process();
    // Lambda's log format and level (`init_default_subscriber`); built with outbox-lambda's
    // feature `opentelemetry`, the spans are exported to the ADOT collector layer too.
    outbox_lambda::telemetry::init(&env)?;
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS) are read here, once per cold start.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let consumer = InventoryConsumer::from_env(&sdk, &env)?;
    // EMF metrics (namespace METRICS_NAMESPACE, default OutboxConsumer), flushed per invocation.
    // `handle_any`: an SQS batch in, `batchItemFailures` out (and an EventBridge event as well).
    outbox_lambda::run(&env, DEFAULT_METRICS_NAMESPACE, service_fn(|event: LambdaEvent<RawEvent>| consumer.handle_any(event))).await
}
