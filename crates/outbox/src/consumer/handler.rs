//! [`EventHandler`]: the business logic of one event type. A closure registered with
//! [`ConsumerBuilder::on`](super::ConsumerBuilder::on) is one; implement the trait on your own
//! type when the logic needs shared state (clients, table names) — the future may borrow `&self`.

use std::future::Future;
use std::sync::Arc;

use super::{DeliveredEvent, HandlerError, Tx};

/// Handles events whose `detail.data` decodes into `T`, answering `O` (your outcome, e.g. an enum
/// serialised as `"reserved"`). Add writes and events to `tx`; the library commits them with the
/// inbox claim when you return `Ok`, and writes nothing when you return `Err`.
///
/// ```
/// use outbox::consumer::{DeliveredEvent, EventHandler, HandlerError, Tx};
///
/// #[derive(serde::Deserialize)]
/// struct OrderCancelled { order_id: String }
///
/// struct Release { table: String }
///
/// impl EventHandler<OrderCancelled, &'static str> for Release {
///     async fn handle(&self, event: DeliveredEvent<OrderCancelled>, tx: Tx<&'static str>) -> Result<&'static str, HandlerError> {
///         let _ = (&self.table, &event.data.order_id, tx); // read, then tx.write(…) / tx.emit(…)
///         Ok("released")
///     }
/// }
/// ```
pub trait EventHandler<T, O>: Send + Sync {
    /// Handles one delivery of a decoded event.
    ///
    /// # Errors
    /// [`HandlerError`]: [`HandlerError::Retry`] fails the invocation (Lambda retries it);
    /// [`HandlerError::Reject`] / [`HandlerError::Malformed`] dead-letter the event now.
    fn handle(&self, event: DeliveredEvent<T>, tx: Tx<O>) -> impl Future<Output = Result<O, HandlerError>> + Send;
}

impl<T, O, H: EventHandler<T, O>> EventHandler<T, O> for Arc<H> {
    fn handle(&self, event: DeliveredEvent<T>, tx: Tx<O>) -> impl Future<Output = Result<O, HandlerError>> + Send {
        (**self).handle(event, tx)
    }
}

/// A closure as an [`EventHandler`].
pub(crate) struct FnHandler<F>(pub(crate) F);

impl<T, O, F, Fut> EventHandler<T, O> for FnHandler<F>
where
    F: Fn(DeliveredEvent<T>, Tx<O>) -> Fut + Send + Sync,
    Fut: Future<Output = Result<O, HandlerError>> + Send,
{
    fn handle(&self, event: DeliveredEvent<T>, tx: Tx<O>) -> impl Future<Output = Result<O, HandlerError>> + Send {
        (self.0)(event, tx)
    }
}
