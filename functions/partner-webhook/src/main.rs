//! `PartnerWebhookFunction`: `POST /webhooks/{partner}` on the HTTP API, served by `lambda_http`
//! (see `orders_app::partner`): a verified partner webhook takes effect once, through the inbox,
//! in one transaction with its outbox event.

use lambda_http::Error;
use orders_app::partner::{router, PartnerWebhooks};
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
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS), once per cold start.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    let webhooks = PartnerWebhooks::from_env(&sdk, &env)?;
    // orders_app::serve::run: lambda_http::run behind the base64 body guard, with EMF metrics
    // (namespace METRICS_NAMESPACE, default OutboxProducer) flushed per request.
    orders_app::serve::run(&env, router(webhooks)).await
}
