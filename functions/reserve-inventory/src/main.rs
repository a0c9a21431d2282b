//! `ReserveInventoryFunction`: on the EventBridge rule for `OrderCreated`; reserves stock
//! exactly once per event through the inbox (see `orders_app::inventory`).

use lambda_runtime::{run, service_fn, tracing, Error, LambdaEvent};
use orders_app::inventory::InventoryConsumer;
use outbox::consumer::RawEvent;
use outbox::Env;

// One thread: see functions/outbox-relay/src/main.rs.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let sdk = aws_config::load_from_env().await;
    let consumer = InventoryConsumer::from_env(&sdk, &Env::process())?;
    run(service_fn(|event: LambdaEvent<RawEvent>| consumer.handle(event))).await
}
