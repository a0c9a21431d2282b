//! The webhook dispatcher as a Lambda function (feature `webhooks`): its settings from the
//! environment ([`dispatcher_config`]) and the whole function ([`run_from_env`]).
//!
//! The whole `main.rs` of a dispatcher function is
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> Result<(), lambda_runtime::Error> {
//!     outbox_lambda::webhooks::run_from_env().await
//! }
//! ```

use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use outbox_webhooks::dispatcher::{AttemptLog, Dispatcher, DispatcherConfig};
use outbox_webhooks::RetrySchedule;

use crate::config::{ConfigError, Env};

/// Reads the dispatcher's settings ([`DispatcherConfig`]):
///
/// | variable | meaning | default |
/// |---|---|---|
/// | `WEBHOOK_DELIVERY_QUEUE_URL` | the delivery queue | required |
/// | `WEBHOOK_DLQ_URL` | the dead-letter queue | required |
/// | `WEBHOOK_SUBSCRIBERS_TABLE` | the subscriber table | required |
/// | `WEBHOOK_RETRY_SCHEDULE` | delays between attempts, e.g. `5s,5m,30m,2h,5h,10h,10h` (bare numbers are seconds) | Svix's, that one |
/// | `WEBHOOK_RETRY_JITTER_PERCENT` | largest random lengthening of a delay | 20 |
/// | `WEBHOOK_MAX_RETRY_AFTER_SECONDS` | longest `Retry-After` honoured | 86400 |
/// | `WEBHOOK_BATCH_MARGIN_MS` | time kept free before the deadline | 3000 |
/// | `WEBHOOK_MIN_ATTEMPT_MS` | least time left to start an attempt | 1000 |
/// | `WEBHOOK_BREAKER_FAILURES` | consecutive failures that open a subscriber's breaker (0: off) | 5 |
/// | `WEBHOOK_BREAKER_COOLDOWN_SECONDS` | how long an open breaker waits before a probe | 60 |
/// | `WEBHOOK_DISABLE_AFTER_SECONDS` | a subscriber failing every attempt this long is disabled (0: never) | 259200 (3 days) |
/// | `EVENT_BUS_NAME` | the bus of `WebhookEndpointDisabled` events | none: no event |
/// | `WEBHOOK_EVENT_SOURCE` | their `source` | `outbox.webhooks` |
/// | `WEBHOOK_CONNECT_TIMEOUT_MS` | connect timeout | 3000 |
/// | `WEBHOOK_TIMEOUT_MS` | whole-request timeout | 10000 |
/// | `WEBHOOK_ALLOW_HTTP` | `true` accepts `http://` URLs (local runs only) | `false` |
/// | `WEBHOOK_SECRETS_TTL_SECONDS` | secret cache TTL | 300 |
/// | `WEBHOOK_SUBSCRIBERS_TTL_SECONDS` | subscriber cache TTL | 60 |
///
/// # Errors
/// [`ConfigError`] naming the variable.
pub fn dispatcher_config(env: &Env) -> Result<DispatcherConfig, ConfigError> {
    let mut config = DispatcherConfig::new(
        env.required(outbox::contract::env::WEBHOOK_DELIVERY_QUEUE_URL)?,
        env.required(outbox::contract::env::WEBHOOK_DLQ_URL)?,
        env.required(outbox::contract::env::WEBHOOK_SUBSCRIBERS_TABLE)?,
    );
    let allow_http = env.optional("WEBHOOK_ALLOW_HTTP", "false");
    config.client.allow_http = match allow_http.as_str() {
        "true" | "1" => true,
        "false" | "0" | "" => false,
        _ => return Err(ConfigError::Invalid { name: "WEBHOOK_ALLOW_HTTP", value: allow_http, reason: "expected true or false".into() }),
    };
    config.client.connect_timeout = env.millis("WEBHOOK_CONNECT_TIMEOUT_MS", config.client.connect_timeout)?;
    config.client.timeout = env.millis("WEBHOOK_TIMEOUT_MS", config.client.timeout)?;
    let defaults = RetrySchedule::default();
    config.schedule.delays = match env.optional("WEBHOOK_RETRY_SCHEDULE", "").as_str() {
        "" => defaults.delays.clone(),
        text => RetrySchedule::parse_delays(text).map_err(|e| ConfigError::Invalid {
            name: "WEBHOOK_RETRY_SCHEDULE",
            value: text.to_owned(),
            reason: e.to_string(),
        })?,
    };
    let jitter = env.count("WEBHOOK_RETRY_JITTER_PERCENT", 20)?.min(100);
    config.schedule.jitter = f64::from(jitter) / 100.0;
    config.schedule.max_retry_after = env.seconds("WEBHOOK_MAX_RETRY_AFTER_SECONDS", defaults.max_retry_after)?;
    config.batch_margin = env.millis("WEBHOOK_BATCH_MARGIN_MS", config.batch_margin)?;
    config.min_attempt_time = env.millis("WEBHOOK_MIN_ATTEMPT_MS", config.min_attempt_time)?;
    config.breaker.threshold = env.count("WEBHOOK_BREAKER_FAILURES", config.breaker.threshold)?;
    config.breaker.cooldown = env.seconds("WEBHOOK_BREAKER_COOLDOWN_SECONDS", config.breaker.cooldown)?;
    config.disable_after = env.seconds("WEBHOOK_DISABLE_AFTER_SECONDS", config.disable_after)?;
    config.event_bus = Some(env.optional(outbox::contract::env::EVENT_BUS_NAME, "")).filter(|b| !b.is_empty());
    config.event_source = env.optional("WEBHOOK_EVENT_SOURCE", &config.event_source);
    config.secrets_ttl = env.seconds("WEBHOOK_SECRETS_TTL_SECONDS", config.secrets_ttl)?;
    config.subscribers_ttl = env.seconds("WEBHOOK_SUBSCRIBERS_TTL_SECONDS", config.subscribers_ttl)?;
    Ok(config)
}

/// Default CloudWatch namespace of the dispatcher's metrics.
pub const DEFAULT_METRICS_NAMESPACE: &str = outbox::contract::namespace::WEBHOOKS;

/// The whole `WebhookDispatcherFunction`: Lambda's tracing subscriber (with feature
/// `opentelemetry` exporting spans, [`crate::telemetry::init`]), an EMF metrics recorder
/// (feature `metrics`, namespace `METRICS_NAMESPACE`, default `OutboxWebhooks`), the
/// configuration of [`dispatcher_config`] plus `INBOX_TABLE` (deliveries are recorded there as
/// consumer `WEBHOOK_CONSUMER_NAME`, default `webhook-dispatcher`, kept as the retention rule
/// says, [`crate::inbox_retention`]: a delivery redriven from the webhook dead-letter
/// queue still finds its record), with feature `claim-check` the claim check of
/// `CLAIM_CHECK_BUCKET` / `CLAIM_CHECK_PREFIX` (claim-checked events delivered inline), and
/// [`Dispatcher::handle`] per batch; the guarded lease ends at the invocation's deadline.
///
/// # Errors
/// A missing or invalid variable ends the cold start with a Lambda init error naming it.
pub async fn run_from_env() -> Result<(), lambda_runtime::Error> {
    let env = Env::process();
    // Lambda's log format and level; with feature `opentelemetry` the spans exported too (an
    // invalid endpoint is logged, then the cold start fails naming it).
    if let Err(e) = crate::telemetry::init(&env) {
        tracing::error!(error = %e, "the telemetry configuration is invalid");
        return Err(e.to_string().into());
    }
    // The SDK clients' time-outs (SDK_*_TIMEOUT_MS), once per cold start.
    let sdk = crate::runtime::load_sdk_config(&env).await?;
    let built = (|| -> Result<Dispatcher<outbox::inbox::Inbox>, Box<dyn std::error::Error + Send + Sync>> {
        let (table, consumer) = (env.required(outbox::contract::env::INBOX_TABLE)?, env.optional("WEBHOOK_CONSUMER_NAME", "webhook-dispatcher"));
        let retention = crate::config::inbox_retention(&env)?;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let log = AttemptLog::new(dynamodb.clone(), &table, &consumer, env.retention("WEBHOOK_ATTEMPTS_RETENTION_SECONDS", retention)?);
        let inbox = outbox::inbox::Inbox::new(dynamodb, table, consumer, retention);
        let dispatcher = Dispatcher::new(&sdk, inbox, dispatcher_config(&env)?)?.with_attempt_log(log);
        #[cfg(feature = "claim-check")]
        let dispatcher = match crate::runtime::claim_check(&sdk, &env)? {
            Some(claim_check) => dispatcher.with_claim_check(claim_check),
            None => dispatcher,
        };
        Ok(dispatcher)
    })();
    let dispatcher = match built {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "the dispatcher's configuration is invalid");
            return Err(e.to_string().into());
        }
    };
    let dispatcher = &dispatcher;
    let handler = lambda_runtime::service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        // The batch's time budget ends at the invocation's deadline (less the batch margin).
        let deadline = crate::runtime::lease_until(&event.context, Duration::from_secs(60));
        let (response, _report) = dispatcher.handle(&event.payload, deadline).await;
        Ok::<_, std::convert::Infallible>(response)
    });
    crate::runtime::run(&env, DEFAULT_METRICS_NAMESPACE, handler).await
}
