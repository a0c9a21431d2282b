//! `CreateOrderFunction`: the order API (`POST /orders`, `GET /orders/{id}`,
//! `POST /orders/{id}/cancel`) as an axum router served by `lambda_http` (see
//! `orders_app::http`). Each write is one DynamoDB transaction with its outbox item.

use lambda_http::{tracing, Adapter, Error};
use orders_app::{http::router, orders::OrdersApi, serve::Base64Guard};
use outbox_lambda::Env;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let env = Env::process();
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS) are read here, once per cold start.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let api = OrdersApi::from_env(&sdk, &env)?;
    // EMF metrics (namespace METRICS_NAMESPACE, default OutboxProducer): the library's
    // transaction figures (EventsWritten, TransactionsCancelled, ...), flushed per request.
    // Base64Guard: a body marked base64 that is not is a 400, not a panic in lambda_http.
    let service = Base64Guard::new(Adapter::from(router(api)));
    match outbox_lambda::emf_metrics(&env, "OutboxProducer") {
        Some(metrics) => metrics_cloudwatch_embedded::lambda::service::run(metrics, service).await,
        // Another recorder was installed first (never in this function): the runtime alone.
        None => outbox_lambda::lambda_runtime::run(service).await,
    }
}
