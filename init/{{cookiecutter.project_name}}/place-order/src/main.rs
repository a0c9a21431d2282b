//! `PlaceOrderFunction` on Lambda: the clients and settings once per instance, then
//! `Orders::place` per invocation (the logic and its tests: `lib.rs`).

use lambda_runtime::{service_fn, Error, LambdaEvent};
use outbox::OutboxWriter;
use outbox_lambda::Env;
use place_order::{Orders, PlaceOrder};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let env = Env::process();
    // Lambda's log format and level (`init_default_subscriber`); built with outbox-lambda's
    // feature `opentelemetry`, the spans also go to the ADOT collector layer (docs/tracing.md).
    outbox_lambda::telemetry::init(&env)?;
    // The documented SDK time-outs (SDK_*_TIMEOUT_MS), so a stalled call fails instead of hanging.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let orders = Orders {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        orders_table: env.required("ORDERS_TABLE")?,
        event_source: env.required("EVENT_SOURCE")?,
        outbox: OutboxWriter::new(env.required("OUTBOX_TABLE")?, outbox_lambda::DEFAULT_RETENTION),
    };
    let orders = &orders;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<PlaceOrder>| async move { orders.place(event.payload).await })).await
}
