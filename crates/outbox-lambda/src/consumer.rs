//! Consumers as Lambda handlers (feature `consumer`): [`LambdaConsumer`] adds `handle` and
//! `handle_any` to [`outbox::Consumer`], taking the invocation's [`LambdaEvent`] and its
//! deadline.
//!
//! ```no_run
//! # async fn example(consumer: outbox::Consumer<outbox::MemoryInbox, outbox::consumer::MemoryDeadLetters, ()>) -> Result<(), lambda_runtime::Error> {
//! use lambda_runtime::{service_fn, LambdaEvent};
//! use outbox::consumer::RawEvent;
//! use outbox_lambda::LambdaConsumer as _;
//!
//! lambda_runtime::run(service_fn(|e: LambdaEvent<RawEvent>| consumer.handle(e))).await
//! # }
//! ```

use std::future::Future;

use lambda_runtime::LambdaEvent;
use outbox::consumer::{ConsumerResponse, DeadLetterSink, InvocationAnswer, RawEvent};
use outbox::{Consumer, InboxStore};
use serde::Serialize;

use crate::InvocationError;

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
