//! `InvoicingFunction` on Lambda, fed by the consumer kit's delivery queue (an SQS event source
//! mapping with `ReportBatchItemFailures`): what may succeed later comes back after the queue's
//! visibility timeout, what never can goes to the kit's dead-letter queue at once. The business
//! logic and its tests: `lib.rs`.

use invoicing::{Invoicing, OrderPlaced, ORDER_PLACED};
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use outbox::consumer::{Consumer, ConsumerDeadLetterQueue, RawEvent, DEFAULT_METRICS_NAMESPACE};
use outbox::inbox::Inbox;
use outbox_lambda::{Env, LambdaConsumer as _};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let env = Env::process();
    // The documented SDK time-outs (SDK_*_TIMEOUT_MS), so a stalled call fails instead of hanging.
    let sdk = outbox_lambda::load_sdk_config(&env).await?;
    // The consumer's name (CONSUMER_NAME in template.yaml): its inbox rows are
    // `<name>#<event id>`, and `outbox trace` reads the same variable to find them.
    let consumer_name = outbox_lambda::consumer_name(&env)?;
    // Inbox rows outlive every redelivery: the dead-letter queue's retention plus a redrive margin.
    let inbox =
        Inbox::new(aws_sdk_dynamodb::Client::new(&sdk), env.required("INBOX_TABLE")?, consumer_name.clone(), outbox_lambda::inbox_retention(&env)?);
    let dead_letters = ConsumerDeadLetterQueue::new(aws_sdk_sqs::Client::new(&sdk), env.required("DEAD_LETTER_QUEUE_URL")?, consumer_name);
    let consumer = Consumer::builder(inbox, dead_letters)
        .handler::<OrderPlaced, _>(ORDER_PLACED, Invoicing { invoices_table: env.required("INVOICES_TABLE")? })
        .build();
    // `handle_any`: an SQS batch in, `batchItemFailures` out; with the `metrics` feature `run`
    // writes the consumer's figures as CloudWatch EMF, which the kit's alarms read.
    outbox_lambda::run(&env, DEFAULT_METRICS_NAMESPACE, service_fn(|event: LambdaEvent<RawEvent>| consumer.handle_any(event))).await
}
