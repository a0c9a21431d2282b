//! `ReserveInventoryFunction`: on the EventBridge rule for `OrderCreated`; reserves stock
//! exactly once per event through the inbox (see `orders_app::inventory`).

use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use orders_app::inventory::InventoryConsumer;
use outbox::consumer::{metrics, RawEvent};
use outbox_lambda::Env;

// One thread: see functions/outbox-relay/src/main.rs.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let env = Env::process();
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS) are read here, once per cold start.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let consumer = InventoryConsumer::from_env(&sdk, &env)?;
    // EMF metrics (namespace METRICS_NAMESPACE, default OutboxConsumer), flushed per invocation.
    outbox_lambda::run(&env, metrics::DEFAULT_NAMESPACE, service_fn(|event: LambdaEvent<RawEvent>| consumer.handle(event))).await
}
