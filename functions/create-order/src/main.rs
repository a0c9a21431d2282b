//! `CreateOrderFunction`: `POST /orders` on the HTTP API. Writes the order and its
//! `OrderCreated` outbox item in one DynamoDB transaction (see `orders_app::orders`).

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use lambda_runtime::{run, service_fn, tracing, Error, LambdaEvent};
use orders_app::orders::OrdersApi;
use outbox::Env;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let sdk = aws_config::load_from_env().await;
    let api = OrdersApi::from_env(&sdk, &Env::process())?;
    run(service_fn(|event: LambdaEvent<ApiGatewayV2httpRequest>| api.handle(event))).await
}
