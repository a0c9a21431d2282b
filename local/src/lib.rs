//! The local runtime: runs the functions of `template.yaml` — their real binaries, each instance
//! a child process served the Lambda Runtime API — against the moto AWS emulator, and plays the
//! AWS glue between them — the HTTP API, the DynamoDB stream and SQS event source mappings, EventBridge
//! rule delivery with Lambda's asynchronous retries, and the dead-letter destinations — so the
//! whole pipeline runs on a machine without Docker or an AWS account. Everything it provisions
//! and runs is read from the template, so the local stack cannot drift from the deployed one,
//! and a function of your own runs like the sample's.
//!
//! One module per job, dependencies pointing one way: [`template`] reads the template,
//! [`emulator`] starts moto, [`aws`] builds the SDK configuration, [`stack`] provisions,
//! [`binaries`] builds the functions' binaries, [`runtime_api`] serves the Lambda Runtime API to
//! one instance, [`sandbox`] runs one instance (with [`emf`] for its metrics), [`function`] pools
//! a function's instances, [`esm`] plays the stream mapping (with [`filter`] and [`lanes`], and its
//! [`checkpoint`] kept across restarts), [`sqs_mapping`] plays the SQS mapping, [`delivery`]
//! plays rule delivery (all set up through [`glue`], with [`env_vars`] for local settings), [`runtime`] ties them together,
//! [`http_api`] plays API Gateway (with [`authorizer`], its JWT authorizer), [`dlq`] reads dead-letter queues
//! (and [`failed_batch`] replays the stream batches a mapping gave up on), [`trace`] follows one event,
//! [`ordering`] releases a consumer's sequence gap, [`stats`] counts ([`status`] shows), and
//! [`demo`] runs the whole thing; [`faults`] injects AWS's failures between the functions and
//! the emulator, and [`proof`] runs the pipeline under them and checks the invariants.

#![warn(missing_docs)]

// The template reader, the stack and the operator's verbs live in the operator's crate
// (`outbox-cli`), which both binaries use; their paths here stay as they were.
pub use outbox_cli::{aws, dlq, failed_batch, filter, ordering, stack, template, trace, webhooks};

pub mod authorizer;
pub mod binaries;
pub mod checkpoint;
pub mod delivery;
pub mod demo;
pub mod emf;
pub mod emulator;
pub mod env_vars;
pub mod esm;
pub mod faults;
pub mod function;
pub mod glue;
pub mod http_api;
pub mod lanes;
pub mod practice;
pub mod proof;
pub mod runtime;
pub mod runtime_api;
pub mod sandbox;
pub mod sqs_mapping;
pub mod stats;
pub mod status;
