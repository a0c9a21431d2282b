//! Consumers as Lambda handlers (feature `consumer`): [`consumer_from_env`] wires a consumer from
//! its function's environment, and [`LambdaConsumer`] adds `handle` and `handle_any` to
//! [`outbox::consumer::Consumer`], taking the invocation's [`LambdaEvent`] and its deadline.
//!
//! ```no_run
//! # async fn example(consumer: outbox::consumer::Consumer<outbox::inbox::MemoryInbox, outbox::consumer::MemoryDeadLetters, ()>) -> Result<(), lambda_runtime::Error> {
//! use lambda_runtime::{service_fn, LambdaEvent};
//! use outbox::consumer::RawEvent;
//! use outbox_lambda::LambdaConsumer as _;
//!
//! lambda_runtime::run(service_fn(|e: LambdaEvent<RawEvent>| consumer.handle(e))).await
//! # }
//! ```

use std::future::Future;

use lambda_runtime::LambdaEvent;
use outbox::consumer::{Consumer, ConsumerBuilder, ConsumerDeadLetterQueue};
use outbox::consumer::{ConsumerResponse, DeadLetterSink, InvocationAnswer, RawEvent};
use outbox::contract::env::{DEAD_LETTER_QUEUE_URL, INBOX_TABLE};
use outbox::inbox::{Inbox, InboxStore};
use serde::Serialize;

use crate::{ConfigError, Env, InvocationError};

/// The consumer of a function on the consumer kit, wired from the function's environment
/// ([`outbox::contract::env::CONSUMER_REQUIRED`]): an [`Inbox`] on `INBOX_TABLE` whose rows are
/// keyed by the consumer's name (`CONSUMER_NAME`, [`consumer_name`](crate::consumer_name)) and
/// kept for [`inbox_retention`](crate::inbox_retention), and a [`ConsumerDeadLetterQueue`] on
/// `DEAD_LETTER_QUEUE_URL`, both with clients of `sdk` (e.g. from
/// [`load_sdk_config`](crate::load_sdk_config), with the SDK time-outs). Add the handlers (and
/// `.outbox(...)` for a consumer that emits), then `build()`:
///
/// ```no_run
/// # async fn example() -> Result<(), lambda_runtime::Error> {
/// use outbox::consumer::{HandlerError, RawEvent, DEFAULT_METRICS_NAMESPACE};
/// use outbox_lambda::LambdaConsumer as _;
///
/// #[derive(serde::Deserialize)]
/// struct OrderPlaced { order_id: String }
///
/// let env = outbox_lambda::Env::process();
/// let sdk = outbox_lambda::load_sdk_config(&env).await?;
/// let consumer = outbox_lambda::consumer_from_env(&env, &sdk)?
///     .on::<OrderPlaced, _, _>("OrderPlaced", |event, _tx| async move {
///         lambda_runtime::tracing::info!(order_id = event.data.order_id, "placed");
///         Ok::<_, HandlerError>("seen")
///     })
///     .build();
/// let handler = lambda_runtime::service_fn(|e: lambda_runtime::LambdaEvent<RawEvent>| consumer.handle_any(e));
/// outbox_lambda::run(&env, DEFAULT_METRICS_NAMESPACE, handler).await
/// # }
/// ```
///
/// A consumer whose inbox is ordered (`Ordered::by_types(inbox, types)`) or that has no dead-letter queue
/// builds the two itself from the same functions (`functions/orders-app/src/inventory.rs`).
///
/// # Errors
/// [`ConfigError::Missing`] for a variable not set, and [`inbox_retention`](crate::inbox_retention)'s
/// errors for its variables.
pub fn consumer_from_env<O>(env: &Env, sdk: &aws_config::SdkConfig) -> Result<ConsumerBuilder<Inbox, ConsumerDeadLetterQueue, O>, ConfigError>
where
    O: Serialize + Send + 'static,
{
    let name = crate::consumer_name(env)?;
    let inbox = Inbox::new(outbox::aws_sdk_dynamodb::Client::new(sdk), env.required(INBOX_TABLE)?, name.clone(), crate::inbox_retention(env)?);
    let dead_letters = ConsumerDeadLetterQueue::new(outbox::aws_sdk_sqs::Client::new(sdk), env.required(DEAD_LETTER_QUEUE_URL)?, name);
    Ok(Consumer::builder(inbox, dead_letters))
}

/// A [`Consumer`] as a Lambda handler: the invocation's deadline (the context's, or the retry
/// policy's `fallback_budget` when it has none) bounds the in-invocation retries.
pub trait LambdaConsumer<O> {
    /// [`Consumer::handle_payload_until`] as a Lambda handler, for a function on an EventBridge
    /// rule: `lambda_runtime::run(service_fn(|e| consumer.handle(e)))`.
    ///
    /// # Errors
    /// [`InvocationError::Consumer`], see [`Consumer::handle_payload_until`].
    fn handle(&self, event: LambdaEvent<RawEvent>) -> impl Future<Output = Result<ConsumerResponse<O>, InvocationError>>;

    /// [`Consumer::handle_invocation`] as a Lambda handler, for a function behind an SQS queue
    /// (or still on an EventBridge rule).
    ///
    /// # Errors
    /// [`InvocationError::Consumer`], see [`Consumer::handle_invocation`].
    fn handle_any(&self, event: LambdaEvent<RawEvent>) -> impl Future<Output = Result<InvocationAnswer<O>, InvocationError>>;
}

impl<S, D, O> LambdaConsumer<O> for Consumer<S, D, O>
where
    S: InboxStore,
    D: DeadLetterSink,
    O: Serialize + Send + 'static,
{
    async fn handle(&self, event: LambdaEvent<RawEvent>) -> Result<ConsumerResponse<O>, InvocationError> {
        let deadline = crate::runtime::deadline(&event.context, self.retry_policy().fallback_budget);
        Ok(self.handle_payload_until(&event.payload, deadline).await?)
    }

    async fn handle_any(&self, event: LambdaEvent<RawEvent>) -> Result<InvocationAnswer<O>, InvocationError> {
        let deadline = crate::runtime::deadline(&event.context, self.retry_policy().fallback_budget);
        Ok(self.handle_invocation(&event.payload, deadline).await?)
    }
}
