//! The functions of the template, run in-process: the same library handlers the Lambda
//! binaries call, built once from the environment the template gives each function.
//!
//! Functions are matched by `Metadata.BuildProperties.Binary`. A new function binary needs one
//! line in [`Handler::build`] to be runnable locally.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_config::SdkConfig;
use lambda_http::request::LambdaRequest;
use lambda_http::Service;
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use orders_app::inventory::InventoryConsumer;
use orders_app::orders::OrdersApi;
use outbox::config::Env;
use outbox::relay::lambda::RelayFunction;
use outbox::relay::RelayReport;
use serde::de::DeserializeOwned;

use crate::template::FunctionSpec;

/// A function's in-process handler.
#[derive(Debug, Clone)]
pub enum Handler {
    /// `create-order`: the order API's router, called through `lambda_http`'s adapter.
    CreateOrder(axum::Router),
    /// `outbox-relay`.
    Relay(RelayFunction),
    /// `reserve-inventory`.
    ReserveInventory(InventoryConsumer),
}

/// The result of one invocation: the JSON response, or the error Lambda would report.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `Ok(response)` or `Err(Diagnostic)` (`errorType`, `errorMessage`).
    pub result: Result<serde_json::Value, Diagnostic>,
    /// The relay's counts, for relay invocations.
    pub relay_report: Option<RelayReport>,
}

impl Handler {
    /// Builds the handler of `spec` with `environment`.
    ///
    /// # Errors
    /// A message naming the function when its binary is unknown or its configuration is bad.
    pub fn build(spec: &FunctionSpec, sdk: &SdkConfig, environment: HashMap<String, String>) -> Result<Self, String> {
        let env = Env::from_map(environment);
        let bad = |e: outbox::config::ConfigError| format!("{}: {e}", spec.logical_id);
        Ok(match spec.binary.as_str() {
            "create-order" => Handler::CreateOrder(orders_app::http::router(OrdersApi::from_env(sdk, &env).map_err(bad)?)),
            "outbox-relay" => Handler::Relay(RelayFunction::from_env(sdk, &env).map_err(bad)?),
            "reserve-inventory" => Handler::ReserveInventory(InventoryConsumer::from_env(sdk, &env).map_err(bad)?),
            other => return Err(format!("{}: binary {other:?} has no in-process handler; add it to local/src/functions.rs", spec.logical_id)),
        })
    }

    /// Invokes the handler with `payload` (the event as JSON text) and a context whose deadline
    /// is `timeout` from now, as Lambda would.
    pub async fn invoke(&self, payload: &str, function_arn: &str, timeout: Duration) -> Invocation {
        let context = context(function_arn, timeout);
        match self {
            // As `lambda_http::run` does: the payload (1.0 or 2.0) as an `http::Request`, the
            // router's answer as the matching Lambda response. The adapter is dropped before the
            // await (its future is `Send`, the adapter is not); a Router is always ready.
            Handler::CreateOrder(router) => {
                call(payload, context, |event: LambdaEvent<LambdaRequest>| lambda_http::Adapter::from(router.clone()).call(event)).await
            }
            Handler::Relay(relay) => match decode(payload) {
                Ok(event) => match relay.handle_with_report(LambdaEvent::new(event, context)).await {
                    Ok(outcome) => Invocation { result: to_json(outcome.response), relay_report: Some(outcome.report) },
                    Err(e) => Invocation { result: Err(e.into()), relay_report: None },
                },
                Err(e) => Invocation { result: Err(e), relay_report: None },
            },
            Handler::ReserveInventory(consumer) => call(payload, context, |event| consumer.handle(event)).await,
        }
    }
}

/// Decodes `payload` into the handler's event type, runs it, encodes its response — as the
/// Lambda runtime does around a `service_fn`.
async fn call<E, R, Err, Fut>(payload: &str, context: Context, handler: impl FnOnce(LambdaEvent<E>) -> Fut) -> Invocation
where
    E: DeserializeOwned,
    R: serde::Serialize,
    Err: Into<Diagnostic>,
    Fut: std::future::Future<Output = Result<R, Err>>,
{
    let result = match decode(payload) {
        Ok(event) => handler(LambdaEvent::new(event, context)).await.map_err(Into::into).and_then(to_json),
        Err(e) => Err(e),
    };
    Invocation { result, relay_report: None }
}

fn decode<T: DeserializeOwned>(payload: &str) -> Result<T, Diagnostic> {
    serde_json::from_str(payload).map_err(|e| Diagnostic {
        error_type: "Runtime.UnmarshalError".into(),
        error_message: format!("the event does not match the handler's event type: {e}"),
    })
}

fn to_json<T: serde::Serialize>(response: T) -> Result<serde_json::Value, Diagnostic> {
    serde_json::to_value(response).map_err(|e| Diagnostic { error_type: "Runtime.MarshalError".into(), error_message: e.to_string() })
}

fn context(function_arn: &str, timeout: Duration) -> Context {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let mut context = Context::default();
    context.request_id = uuid::Uuid::new_v4().to_string();
    context.deadline = now_ms + timeout.as_millis() as u64;
    context.invoked_function_arn = function_arn.to_owned();
    context
}
