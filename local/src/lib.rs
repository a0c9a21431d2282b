//! The local runtime: runs the functions of `template.yaml` — their real binaries, each instance
//! a child process served the Lambda Runtime API — against the moto AWS emulator, and plays the
//! AWS glue between them — the HTTP API, the DynamoDB stream and SQS event source mappings, EventBridge
//! rule delivery with Lambda's asynchronous retries, and the dead-letter destinations — so the
//! whole pipeline runs on a machine without Docker or an AWS account. Everything it provisions
//! and runs is read from the template, so the local stack cannot drift from the deployed one,
//! and a function of your own runs like the sample's.
//!
//! Laid out by what it plays, each folder importing only the ones above it in this list:
//! - from other crates, imported from the crate that owns them: the template model and the
//!   stack (`outbox_template`), the SDK configuration and the operator's verbs (`outbox_cli`);
//! - [`error`]: the runtime's one error type, [`Error`], by cause (it uses none of the folders);
//! - [`journal`]: the timeline journal, when each event was published and delivered (`trace`);
//! - [`emulator`]: starting moto;
//! - [`provision`]: the template's resources created on the emulator, and the rules the runtime plays;
//! - [`faults`]: AWS's failures, injected between the functions and the emulator;
//! - [`stats`]: what the runtime observed (and [`stats::status`], for people);
//! - [`options`]: the runtime's knobs ([`options::RuntimeOptions`]);
//! - [`lambda`]: a function as Lambda runs it: the Runtime API, one instance (sandbox), the
//!   instance pool, the binaries, the environment, logs and EMF metrics;
//! - [`mappings`]: what invokes the functions: the stream and SQS event source mappings,
//!   EventBridge rule delivery, filters, lanes and checkpoints;
//! - [`runtime`]: all of it for one stack, and the HTTP API (with its JWT authorizer) in front;
//! - [`scenarios`]: `demo`, `proof` and `dlq practice`, which run the whole thing.

#![warn(missing_docs)]

pub mod custom_bus;
pub mod emulator;
pub mod error;
pub mod faults;
pub mod hint;
pub mod journal;
pub mod lambda;
pub mod mappings;
pub mod options;
pub mod provision;
pub mod runtime;
pub mod scenarios;
pub mod stats;

pub use error::{Error, Result};
