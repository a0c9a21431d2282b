//! `WebhookDispatcherFunction` of blocks/webhooks: on `WebhookDeliveryQueue` (SQS event source mapping with
//! `ReportBatchItemFailures`); fans each event out to its subscribers and delivers it signed,
//! once per subscriber, with backoff and dead-lettering (see `outbox_webhooks::dispatcher`, run by `outbox_lambda::webhooks`).

// mimalloc, not glibc's malloc: allocation was the largest single cost of an AWS call in the
// relay's profile (docs/cost.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox_lambda::webhooks::run_from_env().await
}
