//! `WelcomeMailFunction` of a user's own service: on each `CustomerRegistered`, "sends" the
//! customer a welcome mail — a stand-in that writes one row per mail sent to its own table — once
//! per event, although the delivery queue delivers at least once. The mail row and the inbox
//! claim (`welcome-mail#<event id>`) are ONE transaction: a redelivered event finds its claim and
//! sends nothing. The table alone would take a second row (its key is the time sent); only the
//! inbox keeps it to one.
//!
//! Fed by the consumer kit's delivery queue (an SQS event source mapping with
//! `ReportBatchItemFailures`): what may succeed later comes back after the queue's visibility
//! timeout, what never can (an address that is not one) goes to the kit's dead-letter queue at once.

use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use outbox::consumer::{DeliveredEvent, EventHandler, HandlerError, RawEvent, Tx, DEFAULT_METRICS_NAMESPACE};
use outbox_lambda::{Env, LambdaConsumer as _};
use serde::Deserialize;

/// `detail.data` of `CustomerRegistered` (what my-service's producer writes).
#[derive(Debug, Deserialize)]
struct CustomerRegistered {
    customer_id: String,
    email: String,
}

/// Writes the mail row into the handler's transaction.
struct WelcomeMail {
    mails_table: String,
}

impl EventHandler<CustomerRegistered, &'static str> for WelcomeMail {
    async fn handle(&self, event: DeliveredEvent<CustomerRegistered>, tx: Tx<&'static str>) -> Result<&'static str, HandlerError> {
        let customer = event.data;
        if !customer.email.contains('@') {
            // No retry can fix it: dead-lettered now, with the reason.
            return Err(HandlerError::reject(format!("{:?} is not an e-mail address", customer.email)));
        }
        let sent_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
        let mail = Put::builder()
            .table_name(&self.mails_table)
            .item("pk", AttributeValue::S(format!("CUSTOMER#{}", customer.customer_id)))
            .item("sk", AttributeValue::S(format!("MAIL#{sent_at:020}")))
            .item("email", AttributeValue::S(customer.email))
            .item("event_id", AttributeValue::S(event.metadata.id))
            .build()
            .map_err(HandlerError::reject)?;
        tx.write(TransactWriteItem::builder().put(mail).build());
        Ok("sent")
    }
}

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
        .handler::<CustomerRegistered, _>("CustomerRegistered", WelcomeMail { mails_table: env.required("WELCOME_MAILS_TABLE")? })
        .build();
    // `handle_any`: an SQS batch in, `batchItemFailures` out (and an EventBridge event as well).
    outbox_lambda::run(&env, DEFAULT_METRICS_NAMESPACE, service_fn(|event: LambdaEvent<RawEvent>| consumer.handle_any(event))).await
}
