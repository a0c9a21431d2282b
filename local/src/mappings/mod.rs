//! What invokes the functions, played as AWS plays it: the DynamoDB stream event source mapping
//! ([`stream`], its records in [`lanes`] by `ParallelizationFactor`, its [`checkpoint`] kept
//! across restarts), the SQS event source mapping ([`sqs`]) and EventBridge rule delivery with
//! Lambda's asynchronous-invocation retries ([`rule_delivery`]); the mappings' `FilterCriteria`
//! are the operator's crate's [`crate::filter`].

pub mod checkpoint;
pub mod lanes;
pub mod rule_delivery;
pub mod sqs;
pub mod stream;
