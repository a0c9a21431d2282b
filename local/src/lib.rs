//! The local runtime: runs the functions of `template.yaml` in-process against the moto AWS
//! emulator, and plays the AWS glue between them — the HTTP API, the DynamoDB stream event
//! source mapping, EventBridge rule delivery with Lambda's asynchronous retries, and the
//! dead-letter destinations — so the whole pipeline runs on a machine without Docker or an AWS
//! account. Everything it provisions is read from the template, so the local stack cannot
//! drift from the deployed one.
//!
//! One module per job: [`template`] reads the template, [`emulator`] starts moto, [`aws`] builds
//! the SDK configuration, [`stack`] provisions, [`functions`] builds the in-process handlers,
//! [`runtime`] ties them together, [`esm`] plays the stream mapping (with [`filter`]),
//! [`delivery`] plays rule delivery, [`http_api`] plays API Gateway, [`dlq`] reads dead-letter
//! queues, [`stats`] counts, and [`demo`] runs the whole thing.

#![warn(missing_docs)]

pub mod aws;
pub mod delivery;
pub mod demo;
pub mod dlq;
pub mod emulator;
pub mod esm;
pub mod filter;
pub mod functions;
pub mod http_api;
pub mod runtime;
pub mod stack;
pub mod stats;
pub mod template;
