//! A function as Lambda runs it: its real binary ([`binaries`] builds them), each instance a
//! child process ([`sandbox`], Lambda's execution environment) served the Lambda Runtime API
//! ([`runtime_api`]), instances pooled per function ([`function`]) with the environment the
//! template and the local settings give it ([`env_vars`]); its log lines are read for CloudWatch
//! Embedded Metric Format metrics ([`emf`]).

pub mod binaries;
pub mod emf;
pub mod env_vars;
pub mod function;
pub mod runtime_api;
pub mod sandbox;
