//! The relay as a Lambda function (feature `relay`): glue between the DynamoDB Streams event
//! source mapping and [`Relay`].
//!
//! The whole `main.rs` of a relay function is
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> Result<(), lambda_runtime::Error> {
//!     outbox_lambda::relay::run_from_env().await
//! }
//! ```
//!
//! It works for any outbox table that follows the item contract of [`outbox::envelope`],
//! including a table shared with other item types (items without `event_id` are skipped).
//!
//! # Environment
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `EVENT_BUS_TYPE` | `Classic` or `Custom` (the EventBridge Custom Event Bus: feature `custom-bus`, [`outbox::relay::bus`]); anything else is a configuration error naming the variable | `Classic` |
//! | `EVENT_BUS_NAME` | the bus to publish to: with `Classic` its name or ARN; with `Custom` its `event-busv2` ARN (`arn:aws:events:<region>:<account>:event-busv2/<name>/<id>`; anything else is a configuration error) | required |
//! | `RELAY_DLQ_URL` | SQS queue URL for poison records | required |
//! | `PUT_EVENTS_MAX_REQUEST_BYTES` | most bytes in one `PutEvents` request, at most 1048576 (the API's limit; 262144 where the old limit holds) | 1048576 |
//! | `RELAY_MAX_ATTEMPTS` | `PutEvents` attempts per entry within one invocation | 5 |
//! | `OUTBOX_TABLE` | the outbox table (name, table ARN or stream ARN): records whose `eventSourceARN` is another table's stream are skipped and counted (`RecordsSkipped`, reason `foreign_stream`) | unset: every record of the attached stream is relayed |
//! | `RELAY_MAX_CALLS_IN_FLIGHT` | most `PutEvents` calls of one invocation in flight at once (calls that carry events of one aggregate never overlap) | 10 |
//! | `RELAY_SAFETY_MARGIN_MS` | time kept before the deadline, milliseconds | 2000 |
//! | `SDK_CONNECT_TIMEOUT_MS`, `SDK_ATTEMPT_TIMEOUT_MS`, `SDK_OPERATION_TIMEOUT_MS` | the SDK clients' time-outs ([`crate::SdkTimeouts`]); no `PutEvents` call starts with less than the operation time-out + the safety margin left | 3000, 5000, 15000 |
//! | `OUTBOX_ATTRIBUTE_NAMES` | the table's names for contract attributes that it names differently: `contract=table` pairs, comma-separated, e.g. `event_id=EventId,payload=Body` | the contract's names |
//! | `METRICS_NAMESPACE` | CloudWatch namespace of the EMF metrics (feature `metrics`) | `OutboxRelay` |
//! | `AWS_LAMBDA_LOG_FORMAT`, `AWS_LAMBDA_LOG_LEVEL` | Lambda's logging controls (`LoggingConfig`): at `INFO` the relay writes one summary line per batch; `DEBUG` adds one line per event and `PutEvents` attempt, inside the event's span | Lambda's (the template: JSON, `INFO`) |

use std::time::Duration;

use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;

use crate::config::{ConfigError, Env};
use outbox::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES;
use outbox::relay::stream::StreamBatch;
use outbox::relay::{BusType, Relay, RelayConfig, RelayError, RelayOutcome};

use crate::InvocationError;

/// Time budget when the context carries no deadline (tests, local runs): the template's
/// relay timeout.
pub const FALLBACK_BUDGET: Duration = Duration::from_secs(60);

/// Default CloudWatch namespace of the relay's metrics.
pub const DEFAULT_METRICS_NAMESPACE: &str = outbox::contract::namespace::RELAY;

/// The relay function, built once per cold start.
#[derive(Debug, Clone)]
pub struct RelayFunction {
    relay: Relay,
}

impl RelayFunction {
    /// Reads the variables of the module docs.
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable: `EVENT_BUS_TYPE` neither `Classic` nor `Custom` (or
    /// `Custom` in a build without feature `custom-bus`), `EVENT_BUS_NAME` not an `event-busv2`
    /// ARN with `Custom`, a missing or unparsable setting.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let bus_type = env.optional(outbox::contract::env::EVENT_BUS_TYPE, BusType::Classic.as_str());
        let bus_type: BusType = bus_type.parse().map_err(|e: outbox::relay::BusTypeError| ConfigError::Invalid {
            name: outbox::contract::env::EVENT_BUS_TYPE,
            value: bus_type.clone(),
            reason: e.to_string(),
        })?;
        let mut config = RelayConfig::new(env.required(outbox::contract::env::EVENT_BUS_NAME)?, env.required(outbox::contract::env::RELAY_DLQ_URL)?);
        config.max_request_bytes = env.bytes_at_most("PUT_EVENTS_MAX_REQUEST_BYTES", DEFAULT_MAX_PUT_EVENTS_BYTES, DEFAULT_MAX_PUT_EVENTS_BYTES)?;
        config.max_attempts = env.count("RELAY_MAX_ATTEMPTS", config.max_attempts)?;
        config.max_calls_in_flight = env.count("RELAY_MAX_CALLS_IN_FLIGHT", config.max_calls_in_flight as u32)? as usize;
        let table = env.optional("OUTBOX_TABLE", "");
        config.outbox_table = Some(table).filter(|t| !t.is_empty());
        config.safety_margin = env.millis("RELAY_SAFETY_MARGIN_MS", config.safety_margin)?;
        config.call_budget = crate::config::SdkTimeouts::from_env(env)?.operation;
        let names = env.optional("OUTBOX_ATTRIBUTE_NAMES", "");
        config.rename_attributes(&names).map_err(|e| ConfigError::Invalid {
            name: "OUTBOX_ATTRIBUTE_NAMES",
            value: names.clone(),
            reason: e.to_string(),
        })?;
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let relay = match bus_type {
            BusType::Custom => Self::custom_relay(sdk, sqs, config)?,
            _ => Relay::new(aws_sdk_eventbridge::Client::new(sdk), sqs, config),
        };
        Ok(Self { relay })
    }

    /// The relay on the Custom Event Bus `config.event_bus_name`.
    #[cfg(feature = "custom-bus")]
    fn custom_relay(sdk: &aws_config::SdkConfig, sqs: aws_sdk_sqs::Client, config: RelayConfig) -> Result<Relay, ConfigError> {
        let value = config.event_bus_name.clone();
        Relay::custom(aws_sdk_eventbridgev2::Client::new(sdk), sqs, config).map_err(|e| ConfigError::Invalid {
            name: outbox::contract::env::EVENT_BUS_NAME,
            value,
            reason: format!("{e} (EVENT_BUS_TYPE=Custom)"),
        })
    }

    /// Without feature `custom-bus` there is no Custom Event Bus client: a configuration error.
    #[cfg(not(feature = "custom-bus"))]
    fn custom_relay(_: &aws_config::SdkConfig, _: aws_sdk_sqs::Client, _: RelayConfig) -> Result<Relay, ConfigError> {
        Err(ConfigError::Invalid {
            name: outbox::contract::env::EVENT_BUS_TYPE,
            value: BusType::Custom.as_str().into(),
            reason: "this relay was built without the Custom Event Bus (outbox-lambda feature `custom-bus`)".into(),
        })
    }

    /// The relay.
    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    /// Lambda handler: one stream batch in, `batchItemFailures` out.
    ///
    /// # Errors
    /// [`InvocationError::Relay`]: the whole batch is retried.
    pub async fn handle(&self, event: LambdaEvent<StreamBatch>) -> Result<DynamoDbEventResponse, InvocationError> {
        Ok(self.handle_with_report(event).await?.response)
    }

    /// [`RelayFunction::handle`], also returning the [`outbox::relay::RelayReport`].
    ///
    /// # Errors
    /// [`RelayError`]: the whole batch is retried.
    pub async fn handle_with_report(&self, event: LambdaEvent<StreamBatch>) -> Result<RelayOutcome, RelayError> {
        let deadline = crate::runtime::deadline(&event.context, FALLBACK_BUDGET);
        self.relay.relay_batch(event.payload, deadline).await
    }
}

/// The whole relay function: installs Lambda's tracing subscriber (honouring
/// `AWS_LAMBDA_LOG_FORMAT`/`AWS_LAMBDA_LOG_LEVEL`; with feature `opentelemetry` exporting spans,
/// [`crate::telemetry::init`]), with feature `metrics` an Embedded Metric
/// Format recorder (namespace `METRICS_NAMESPACE`, dimension `function`, flushed after every
/// invocation), loads the AWS configuration once, reads the environment (module docs) and runs
/// [`RelayFunction::handle`] until the runtime stops.
///
/// # Errors
/// A missing or invalid variable ([`ConfigError`]) ends the cold start with a Lambda init error
/// naming it; runtime errors are `lambda_runtime`'s.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let env = Env::process();
    // Lambda's log format and level; with feature `opentelemetry` the spans exported too (an
    // invalid endpoint is logged, then the cold start fails naming it).
    if let Err(e) = crate::telemetry::init(&env) {
        tracing::error!(error = %e, "the telemetry configuration is invalid");
        return Err(e.to_string().into());
    }
    let relay = match crate::runtime::load_sdk_config(&env).await.and_then(|sdk| RelayFunction::from_env(&sdk, &env)) {
        Ok(relay) => relay,
        Err(e) => {
            // Logged and returned as text: Lambda's init error (and the log) then read
            // "environment variable EVENT_BUS_NAME is required but not set", not a Debug dump.
            tracing::error!(error = %e, "the relay's configuration is invalid");
            return Err(e.to_string().into());
        }
    };
    // The payload is decoded once, straight into what the relay reads (`relay::stream`).
    let handler = lambda_runtime::service_fn(|event: LambdaEvent<StreamBatch>| relay.handle(event));
    crate::runtime::run(&env, DEFAULT_METRICS_NAMESPACE, handler).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        let base = [("EVENT_BUS_NAME", "bus"), ("RELAY_DLQ_URL", "https://sqs/relay-dlq")];
        Env::from_map(base.iter().chain(pairs).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[tokio::test]
    async fn reads_the_calls_in_flight_and_the_outbox_table() {
        let sdk = aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        let config = RelayFunction::from_env(&sdk, &env(&[])).unwrap().relay().config().clone();
        assert_eq!((config.max_calls_in_flight, config.outbox_table), (outbox::relay::DEFAULT_MAX_CALLS_IN_FLIGHT, None));

        let set = env(&[("RELAY_MAX_CALLS_IN_FLIGHT", "3"), ("OUTBOX_TABLE", "outbox")]);
        let config = RelayFunction::from_env(&sdk, &set).unwrap().relay().config().clone();
        assert_eq!((config.max_calls_in_flight, config.outbox_table.as_deref()), (3, Some("outbox")));

        let err = RelayFunction::from_env(&sdk, &env(&[("RELAY_MAX_CALLS_IN_FLIGHT", "0")])).unwrap_err();
        assert!(err.to_string().contains("RELAY_MAX_CALLS_IN_FLIGHT"), "{err}");
    }

    #[tokio::test]
    async fn the_bus_type_is_classic_unless_set_and_anything_else_is_refused() {
        let sdk = aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        assert_eq!(RelayFunction::from_env(&sdk, &env(&[])).unwrap().relay().bus_type(), BusType::Classic);
        let classic = env(&[("EVENT_BUS_TYPE", "Classic")]);
        assert_eq!(RelayFunction::from_env(&sdk, &classic).unwrap().relay().bus_type(), BusType::Classic);
        let err = RelayFunction::from_env(&sdk, &env(&[("EVENT_BUS_TYPE", "v2")])).unwrap_err();
        assert_eq!(err.to_string(), r#"environment variable EVENT_BUS_TYPE="v2" is invalid: "v2" is not a bus type: use Classic or Custom"#);
    }

    #[cfg(feature = "custom-bus")]
    #[tokio::test]
    async fn the_custom_bus_needs_an_event_busv2_arn() {
        let sdk = aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        let arn = "arn:aws:events:us-east-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno";
        let custom = env(&[("EVENT_BUS_TYPE", "Custom"), ("EVENT_BUS_NAME", arn)]);
        let function = RelayFunction::from_env(&sdk, &custom).unwrap();
        assert_eq!((function.relay().bus_type(), function.relay().config().event_bus_name.as_str()), (BusType::Custom, arn));
        // The base environment's EVENT_BUS_NAME is a bus name: refused with Custom.
        let err = RelayFunction::from_env(&sdk, &env(&[("EVENT_BUS_TYPE", "Custom")])).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with(r#"environment variable EVENT_BUS_NAME="bus" is invalid: "bus" is not a Custom Event Bus ARN"#), "{text}");
        assert!(text.ends_with("(EVENT_BUS_TYPE=Custom)"), "{text}");
    }

    #[cfg(not(feature = "custom-bus"))]
    #[tokio::test]
    async fn a_build_without_the_custom_bus_refuses_it() {
        let sdk = aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        let err = RelayFunction::from_env(&sdk, &env(&[("EVENT_BUS_TYPE", "Custom")])).unwrap_err();
        assert!(err.to_string().contains("built without the Custom Event Bus"), "{err}");
    }
}
