//! The outbox-relay function: glue between the DynamoDB Streams event source mapping and
//! [`crate::relay::Relay`].

use std::time::Duration;

use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;

use crate::config::{ConfigError, Env};
use crate::outbox::DEFAULT_MAX_PUT_EVENTS_BYTES;
use crate::relay::{Relay, RelayConfig, RelayError, RelayOutcome};

/// Time budget when the context carries no deadline (tests, local runs): the template's
/// relay timeout.
pub const FALLBACK_BUDGET: Duration = Duration::from_secs(60);

/// The outbox-relay function, built once per cold start.
#[derive(Debug, Clone)]
pub struct RelayFunction {
    relay: Relay,
}

impl RelayFunction {
    /// Reads `EVENT_BUS_NAME`, `RELAY_DLQ_URL` and `PUT_EVENTS_MAX_REQUEST_BYTES` (default
    /// 1 MiB).
    ///
    /// # Errors
    /// [`ConfigError`] naming the variable.
    pub fn from_env(sdk: &aws_config::SdkConfig, env: &Env) -> Result<Self, ConfigError> {
        let mut config = RelayConfig::new(env.required("EVENT_BUS_NAME")?, env.required("RELAY_DLQ_URL")?);
        config.max_request_bytes = env.bytes("PUT_EVENTS_MAX_REQUEST_BYTES", DEFAULT_MAX_PUT_EVENTS_BYTES)?;
        Ok(Self { relay: Relay::new(aws_sdk_eventbridge::Client::new(sdk), aws_sdk_sqs::Client::new(sdk), config) })
    }

    /// The relay.
    pub fn relay(&self) -> &Relay {
        &self.relay
    }

    /// Lambda handler: one stream batch in, `batchItemFailures` out.
    ///
    /// # Errors
    /// [`RelayError`]: the whole batch is retried.
    pub async fn handle(&self, event: LambdaEvent<DynamoDbEvent>) -> Result<DynamoDbEventResponse, RelayError> {
        Ok(self.handle_with_report(event).await?.response)
    }

    /// [`RelayFunction::handle`], also returning the [`crate::relay::RelayReport`] (the local
    /// runtime counts it).
    ///
    /// # Errors
    /// [`RelayError`]: the whole batch is retried.
    pub async fn handle_with_report(&self, event: LambdaEvent<DynamoDbEvent>) -> Result<RelayOutcome, RelayError> {
        let deadline = super::deadline_of(&event.context, FALLBACK_BUDGET);
        self.relay.relay(&event.payload, deadline).await
    }
}
