//! `RegisterCustomerFunction` of a user's own service: saves a customer and its
//! `CustomerRegistered` event in ONE DynamoDB transaction with the outbox library's writer.
//! Invoked directly (`{"customer_id": "c-42", "email": "ada@example.com"}`); the answer says
//! whether the customer was registered or already existed.

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use lambda_runtime::{service_fn, Error, LambdaEvent};
use outbox::{CommitError, ConditionFailed, Event, OutboxWriter};
use outbox_lambda::Env;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
struct RegisterCustomer {
    customer_id: String,
    email: String,
}

#[derive(Debug, Serialize)]
struct Answer {
    customer_id: String,
    status: &'static str,
    event_id: Option<String>,
}

struct Service {
    dynamodb: aws_sdk_dynamodb::Client,
    customers_table: String,
    outbox: OutboxWriter,
}

impl Service {
    async fn register(&self, request: RegisterCustomer) -> Result<Answer, Error> {
        let customer = Put::builder()
            .table_name(&self.customers_table)
            .item("pk", AttributeValue::S(format!("CUSTOMER#{}", request.customer_id)))
            .item("email", AttributeValue::S(request.email.clone()))
            .condition_expression("attribute_not_exists(pk)")
            .build()?;
        let mut tx = self.outbox.transaction();
        tx.write(TransactWriteItem::builder().put(customer).build());
        // The payload is serialised by the library; the X-Ray trace header comes from the Lambda
        // environment (`_X_AMZN_TRACE_ID`).
        let event = Event::new("CustomerRegistered", "example.customers", ("Customer", request.customer_id.as_str()), 1, &request)?;
        tx.emit(event)?;
        match tx.execute(&self.dynamodb).await {
            Ok(events) => Ok(Answer { customer_id: request.customer_id, status: "registered", event_id: events.first().map(|e| e.event_id.clone()) }),
            // Write 0 (the first of ours) is the customer put: the customer exists, nothing was written.
            Err(CommitError::ConditionFailed(ConditionFailed::Write { index: 0, .. })) => {
                Ok(Answer { customer_id: request.customer_id, status: "exists", event_id: None })
            }
            Err(e) => Err(e.into()),
        }
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
    let service = Service {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        customers_table: env.required("CUSTOMERS_TABLE")?,
        outbox: OutboxWriter::new(env.required("OUTBOX_TABLE")?, outbox_lambda::DEFAULT_RETENTION),
    };
    let service = &service;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<RegisterCustomer>| async move { service.register(event.payload).await })).await
}
