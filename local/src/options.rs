//! The local runtime's knobs: timing (stream polling, Lambda's asynchronous-invocation retry
//! waits), instances, fault injection, kept state and local environment variables. Read by the
//! functions' pools (`lambda`) and the mappings (`mappings`), set by the commands and the tests.

use std::sync::Arc;
use std::time::Duration;

/// Timing and process knobs of the local runtime. AWS's own values are in the comments. By
/// default the runtime plays Lambda's asynchronous-invocation retry timing (about 1 minute, then
/// 2 minutes) and the SQS queues' visibility timeouts in real time; [`RuntimeOptions::compressed`]
/// shortens the waits to milliseconds (and a failed SQS message's wait by the same factor,
/// `mappings::sqs::retry_visibility`), which the tests, the demo and the proof turn on
/// explicitly and say so (`--compress-retries`).
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Wait between polls of an idle stream (Lambda polls each shard about 4 times a second).
    pub stream_poll_interval: Duration,
    /// Wait before retrying a failed stream batch.
    pub stream_retry_delay: Duration,
    /// Wait before the n-th retry of a failed asynchronous invocation is `n ×` this: by default
    /// [`LAMBDA_ASYNC_RETRY_DELAY`] (Lambda waits about 1 minute, then 2 minutes; source:
    /// <https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html>).
    pub async_retry_delay: Duration,
    /// Most instances of one function running at once, unless the function sets
    /// `ReservedConcurrentExecutions` (Lambda's account default is 1,000 for all functions).
    pub max_instances: usize,
    /// Print the functions' log lines on stderr, prefixed with their logical id.
    pub verbose: bool,
    /// Fault injection between the functions and the emulator ([`crate::faults`]); none by default.
    pub faults: Option<Arc<crate::faults::Injector>>,
    /// Where the runtime keeps state across restarts (the stream mappings' checkpoints,
    /// `mappings::checkpoint`); `None`: nothing is kept, every start reads the streams from
    /// `TRIM_HORIZON`.
    pub state_dir: Option<std::path::PathBuf>,
    /// Environment variables set on top of the template's, by function logical id (the shape of
    /// `sam local invoke --env-vars`, see `lambda::env_vars`); e.g. the webhook dispatcher's
    /// short local backoff and `WEBHOOK_ALLOW_HTTP=true` from `local/env.json`.
    pub environment: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// Where the mappings record when they hand each event to a function (the timeline journal in
    /// the state directory, `crate::journal`, read by `outbox-local trace`); `None`: not recorded.
    pub journal: Option<Arc<crate::journal::Journal>>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            stream_poll_interval: Duration::from_millis(100),
            stream_retry_delay: Duration::from_millis(200),
            async_retry_delay: LAMBDA_ASYNC_RETRY_DELAY,
            max_instances: 4,
            verbose: false,
            faults: None,
            state_dir: None,
            environment: std::collections::BTreeMap::new(),
            journal: None,
        }
    }
}

/// Lambda's wait before the first retry of a failed asynchronous invocation (the second waits
/// twice as long), the local runtime's default.
pub const LAMBDA_ASYNC_RETRY_DELAY: Duration = Duration::from_secs(60);

/// The compressed wait of [`RuntimeOptions::compressed`].
pub const COMPRESSED_ASYNC_RETRY_DELAY: Duration = Duration::from_millis(200);

impl RuntimeOptions {
    /// These options with retry waits compressed to milliseconds ([`COMPRESSED_ASYNC_RETRY_DELAY`]
    /// instead of Lambda's minutes): more pessimistic than AWS, which the tests, the demo and the
    /// proof accept to finish in seconds, and say so.
    pub fn compressed(self) -> Self {
        Self { async_retry_delay: COMPRESSED_ASYNC_RETRY_DELAY, ..self }
    }

    /// Whether the retry waits are compressed (shorter than Lambda's).
    pub fn is_compressed(&self) -> bool {
        self.async_retry_delay < LAMBDA_ASYNC_RETRY_DELAY
    }

    /// One line saying how asynchronous retries are timed, for the commands' banners.
    pub fn retry_timing(&self) -> String {
        if self.is_compressed() {
            format!(
                "asynchronous-invocation retries COMPRESSED: {} ms, then {} ms (Lambda: about 1 min, then 2 min); SQS visibility timeouts scaled alike",
                self.async_retry_delay.as_millis(),
                2 * self.async_retry_delay.as_millis()
            )
        } else {
            format!(
                "asynchronous-invocation retries as Lambda times them: {} s, then {} s",
                self.async_retry_delay.as_secs(),
                2 * self.async_retry_delay.as_secs()
            )
        }
    }
}
