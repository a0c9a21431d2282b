//! The outbox operator's tools: what an on-call engineer runs against a deployed stack — dead
//! letters listed by cause, shown, redriven with the permanent-cause guard, archived and purged;
//! the relay's failed stream batches replayed; one event traced; an ordering gap released;
//! webhook deliveries resent and recovered; a time window replayed from the bus's archive (a
//! Custom Event Bus: from its retention, through a replay subscriber).
//!
//! One module per job: [`resources`] is what the verbs act on, found from CloudFormation
//! ([`cloudformation`]) or from a template (the `outbox-template` crate reads it and looks up its
//! stack's resources; the operator compiles no emulator or provisioning code); [`dlq`] reads and redrives dead-letter queues ([`message`] is one
//! dead letter), [`failed_batch`] replays the stream batches a mapping gave up on, [`trace`]
//! follows one event, [`ordering`] releases a consumer's sequence gap, [`webhooks`] resends
//! deliveries, [`replay`] re-delivers a window of the bus's archive to consumers' rules (and
//! [`replay::subscriber`] a window of a Custom bus to consumers' subscribers); [`cli`] makes them commands, shared by the `outbox` binary and `outbox-local`.
//! [`lookup`] finds items by key or index and bounds the scans where none leads to the data;
//! [`aws`] builds the SDK configuration; [`filter`] evaluates EventBridge patterns; [`error`] is
//! the one error type of the verbs, [`Error`].

#![warn(missing_docs)]

pub mod aws;
pub mod cli;
pub mod cloudformation;
pub mod dlq;
pub mod error;
pub mod failed_batch;
pub mod filter;
pub mod lookup;
pub mod message;
pub mod ordering;
pub mod replay;
pub mod republisher;
pub mod resources;
pub mod trace;
pub mod webhooks;

pub use error::{Error, Result};
