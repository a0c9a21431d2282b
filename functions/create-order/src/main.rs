//! `CreateOrderFunction`: the order API (`POST /orders`, `GET /orders/{id}`,
//! `POST /orders/{id}/cancel`) as an axum router served by `lambda_http` (see
//! `orders_app::http`). Each write is one DynamoDB transaction with its outbox item.

use lambda_http::Error;
use orders_app::{http::router, orders::OrdersApi};
use outbox_lambda::Env;

// mimalloc, not glibc's malloc: allocation was the largest single cost of an AWS call in the
// relay's profile (docs/cost.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let env = Env::process();
    // Lambda's log format and level (`init_default_subscriber`); built with outbox-lambda's
    // feature `opentelemetry`, the spans are exported to the ADOT collector layer too.
    outbox_lambda::telemetry::init(&env)?;
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS) are read here, once per cold start.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let api = OrdersApi::from_env(&sdk, &env)?;
    // orders_app::serve::run: lambda_http::run behind the base64 body guard (a body marked
    // base64 that is not is a 400, not a panic in lambda_http), with EMF metrics (namespace
    // METRICS_NAMESPACE, default OutboxProducer: EventsWritten, TransactionsCancelled,
    // AwsCallsFailed, ...) flushed per request.
    orders_app::serve::run(&env, router(api)).await
}
