//! The sample application beside the `outbox` library: an order API (producer, `POST /orders`,
//! `GET /orders/{id}`, `POST /orders/{id}/cancel`) and an inventory consumer
//! (`OrderCreated` → reserve stock, `OrderCancelled` → release it). Each Lambda function's
//! `main.rs` builds one of these once at cold start: `functions/create-order` hands
//! [`http::router`] to `lambda_http::run`, `functions/reserve-inventory` hands the consumer's
//! `handle` method to `lambda_runtime::run`. Nothing here is part of the library: it shows how a
//! service uses it.

// A `Problem` (RFC 9457 document) is the error of every request check; it is built at most once
// per rejected request, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]
#![warn(missing_docs)]

pub mod auth;
pub mod http;
pub mod idempotency;
pub mod inventory;
pub mod orders;
pub mod partner;
pub mod serve;
