//! What invokes the functions, played as AWS plays it: the DynamoDB stream event source mapping
//! ([`stream`], its records in [`lanes`] by `ParallelizationFactor`, its [`checkpoint`] kept
//! across restarts), the SQS event source mapping ([`sqs`]) and EventBridge rule delivery with
//! Lambda's asynchronous-invocation retries ([`rule_delivery`]), schedule rules that send to a
//! queue ([`schedule`]); the mappings' `FilterCriteria`
//! are the operator's crate's `outbox_cli::filter`. Each is set up with a [`Glue`]: what it needs from
//! the runtime, passed in rather than reached through it.

pub mod checkpoint;
pub mod lanes;
pub mod rule_delivery;
pub mod schedule;
pub mod sqs;
pub mod stream;

use std::sync::Arc;

use aws_config::SdkConfig;

use crate::options::RuntimeOptions;
use crate::stats::Stats;
use outbox_template::stack::Stack;

/// What a stream mapping or a rule delivery is set up with.
#[derive(Debug, Clone, Copy)]
pub struct Glue<'a> {
    /// The provisioned stack (stream ARNs, queues, region).
    pub stack: &'a Stack,
    /// SDK configuration for the glue's own AWS calls.
    pub sdk: &'a SdkConfig,
    /// Where the glue counts what it did.
    pub stats: &'a Arc<Stats>,
    /// Timing knobs.
    pub options: &'a RuntimeOptions,
}
