//! `InvoicingFunction` on Lambda, fed by the consumer kit's delivery queue (an SQS event source
//! mapping with `ReportBatchItemFailures`): what may succeed later comes back after the queue's
//! visibility timeout, what never can goes to the kit's dead-letter queue at once. The business
//! logic and its tests: `lib.rs`.

use invoicing::{Invoicing, OrderPlaced, ORDER_PLACED};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use outbox::consumer::{RawEvent, DEFAULT_METRICS_NAMESPACE};
use outbox_lambda::{Env, LambdaConsumer as _};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let env = Env::process();
    // Lambda's log format and level (`init_default_subscriber`); built with outbox-lambda's
    // feature `opentelemetry`, the spans also go to the ADOT collector layer (docs/tracing.md).
    outbox_lambda::telemetry::init(&env)?;
    // The documented SDK time-outs (SDK_*_TIMEOUT_MS), so a stalled call fails instead of hanging.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    // The consumer kit's inbox table and dead-letter queue, and the consumer's name (INBOX_TABLE,
    // DEAD_LETTER_QUEUE_URL, CONSUMER_NAME in template.yaml): its inbox rows are `<name>#<event id>`
    // (`outbox trace` reads the same variable to find them) and outlive every redelivery.
    let consumer = outbox_lambda::consumer_from_env(&env, &sdk)?
        .handler::<OrderPlaced, _>(ORDER_PLACED, Invoicing { invoices_table: env.required("INVOICES_TABLE")? })
        .build();
    // `handle_any`: an SQS batch in, `batchItemFailures` out; with the `metrics` feature `run`
    // writes the consumer's figures as CloudWatch EMF, which the kit's alarms read.
    outbox_lambda::run(&env, DEFAULT_METRICS_NAMESPACE, service_fn(|event: LambdaEvent<RawEvent>| consumer.handle_any(event))).await
}
