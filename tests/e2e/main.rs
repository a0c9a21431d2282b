//! The end-to-end tests of the pipeline, ONE test binary: each module was a test binary of
//! its own, and each compiled and linked the SDKs again and started its own emulator. They
//! share [`common`]'s emulator (each test provisions its own stack), so they run in parallel
//! like tests of one file.
//!
//! Run one module: `cargo test -p outbox-pipeline-tests --test e2e relay_outage::`.

mod common;

mod claim_check;
mod consumer;
mod contract;
mod demo;
mod dlq_practice;
mod emulator;
mod event_schemas;
mod faults;
mod inbox;
mod inventory;
mod my_service;
mod orders_api;
mod parked_gap;
mod partner_webhooks;
mod producer;
mod relay_emulator;
mod relay_outage;
mod replay;
mod sqs_mapping;
mod stack;
mod trace_context;
mod webhook_delivery;
mod webhook_dispatcher;
