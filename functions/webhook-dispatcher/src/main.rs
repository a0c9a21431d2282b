//! `WebhookDispatcherFunction` of blocks/webhooks: on `WebhookDeliveryQueue` (SQS event source mapping with
//! `ReportBatchItemFailures`); fans each event out to its subscribers and delivers it signed,
//! once per subscriber, with backoff and dead-lettering (see `outbox_webhooks::dispatcher`, run by `outbox_lambda::webhooks`).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox_lambda::webhooks::run_from_env().await
}
