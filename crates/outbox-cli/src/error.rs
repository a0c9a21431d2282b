//! The operator's error: one type, [`Error`], its variants by cause, each keeping its source.
//! The parts with failure modes of their own keep their typed errors and convert with `?`,
//! their messages unchanged: the template's ([`TemplateError`]), the stack's ([`StackError`]),
//! a resource option's ([`ResolveError`]), stack discovery's ([`DiscoveryError`]); three
//! record readers say why a record cannot be used ([`crate::filter::PatternError`],
//! [`crate::failed_batch::BatchError`], [`crate::dlq::NotRedrivable`]).
//!
//! Every message is what the `outbox` binary prints after `outbox: ` (exit status 1): what was
//! being done, on which resource, and what to do about it.

use std::path::PathBuf;

use crate::cloudformation::DiscoveryError;
use crate::resources::ResolveError;
use outbox_template::stack::StackError;
use outbox_template::TemplateError;

/// An error of another library, kept as the source of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in an operator's verb.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An AWS call failed: the operation and the resource it was on (e.g. `GetItem on
    /// s-inbox`); the SDK's error, printed with its context (service error code and message).
    #[error("{operation}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(source.as_ref()))]
    Aws {
        /// The operation and its resource.
        operation: String,
        /// The SDK's error.
        source: BoxError,
    },
    /// A value given on the command line (or in the environment) cannot be used: the option,
    /// the value, and what it takes.
    #[error("{option} {value:?}: {expected}")]
    InvalidArgument {
        /// The option, e.g. `--aggregate`.
        option: &'static str,
        /// The value given.
        value: String,
        /// What it takes, with an example.
        expected: String,
    },
    /// The verb needs a stack and none was named.
    #[error("which stack? pass --stack NAME (the deployed CloudFormation stack) or --template PATH")]
    NoStack,
    /// The stack has no resource the verb needs: what is missing, and what to pass instead.
    #[error("{stack} has no {what}{hint}")]
    Missing {
        /// Where the stack came from.
        stack: String,
        /// What it lacks, e.g. `event bus`.
        what: String,
        /// What to do, starting with `; ` (or empty).
        hint: String,
    },
    /// What the verb was asked about is not there (a subscriber, an event, a message, an
    /// aggregate's ordering row): the message says where it looked and what to check.
    #[error("{0}")]
    NotFound(String),
    /// A destructive verb was not confirmed: nothing was done. The message says how to do it.
    #[error("{0}")]
    NotConfirmed(String),
    /// A stored record cannot be used (a subscriber item, an outbox item, a parked event, a
    /// dead letter's event): which one, and why.
    #[error("{what}: {source}")]
    Record {
        /// The record, e.g. `subscriber partner-a`.
        what: String,
        /// Why.
        source: BoxError,
    },
    /// The bus refused an event the verb re-published; it stays where it was.
    #[error("the bus refused {what}: {reason} ({left})")]
    Refused {
        /// The event.
        what: String,
        /// EventBridge's answer.
        reason: String,
        /// Where the event stays.
        left: String,
    },
    /// A dead letter with a permanent cause was not redriven (without `--force`).
    #[error("{cause}: a permanent cause, redriving would only dead-letter it again; fix the cause, then --force")]
    Permanent {
        /// The cause, as `dlq list` groups it.
        cause: String,
    },
    /// A replayed stream batch still has records the relay could not publish; it stays.
    #[error("{failed} of {records} record(s) still fail (is the bus reachable?)")]
    StillFailing {
        /// Records that failed again.
        failed: usize,
        /// Records replayed.
        records: usize,
    },
    /// An archive replay cannot be started, or ended without completing: which one, why, and
    /// what to do.
    #[error("{0}")]
    Replay(String),
    /// A dead letter's event cannot be re-published.
    #[error(transparent)]
    NotRedrivable(#[from] crate::dlq::NotRedrivable),
    /// A message or object is not a stream mapping's on-failure record.
    #[error(transparent)]
    NotABatch(#[from] crate::failed_batch::BatchError),
    /// The outbox library (inbox, relay, webhook dispatcher) failed while doing something.
    #[error("{context}: {source}")]
    Library {
        /// What was being done.
        context: String,
        /// The library's error.
        source: BoxError,
    },
    /// A file or the terminal could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file (`-` for the terminal).
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The answer could not be written as JSON.
    #[error("writing JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A resource option names nothing of the stack (the candidates are listed).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The deployed stack could not be discovered.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The template's stack could not be set up or looked up.
    #[error(transparent)]
    Stack(#[from] StackError),
    /// The template cannot be used.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// The operator's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A closure for `map_err`: an AWS SDK error of `operation` (e.g. `format!("Scan on {table}")`).
    pub fn aws<E: std::error::Error + Send + Sync + 'static>(operation: impl Into<String>) -> impl FnOnce(E) -> Self {
        let operation = operation.into();
        move |e| Self::Aws { operation, source: Box::new(e) }
    }

    /// A closure for `map_err`: record `what` cannot be used.
    pub fn record<E: Into<BoxError>>(what: impl Into<String>) -> impl FnOnce(E) -> Self {
        let what = what.into();
        move |e| Self::Record { what, source: e.into() }
    }

    /// A closure for `map_err`: the outbox library failed while doing `context`.
    pub fn library<E: Into<BoxError>>(context: impl Into<String>) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| Self::Library { context, source: e.into() }
    }

    /// A closure for `map_err`: an I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    /// `value` of `option` cannot be used; `expected` says what it takes.
    pub fn invalid(option: &'static str, value: impl Into<String>, expected: impl Into<String>) -> Self {
        Self::InvalidArgument { option, value: value.into(), expected: expected.into() }
    }

    /// The stack of `resources_source` has no `what`; `hint` (e.g. `pass --bus`) says what to do.
    pub fn missing(stack: impl Into<String>, what: impl Into<String>, hint: &str) -> Self {
        let hint = if hint.is_empty() { String::new() } else { format!("; {hint}") };
        Self::Missing { stack: stack.into(), what: what.into(), hint }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_resource_and_what_to_do_and_keep_their_source() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = Error::io("/tmp/a.jsonl")(io);
        assert_eq!(e.to_string(), "/tmp/a.jsonl: denied");
        assert!(std::error::Error::source(&e).is_some(), "the I/O error is kept");
        let e = Error::missing("stack s (CloudFormation)", "event bus", "pass --bus");
        assert_eq!(e.to_string(), "stack s (CloudFormation) has no event bus; pass --bus");
        let e = Error::invalid("--through", "0", "the sequence the gap waits for (1 or more)");
        assert_eq!(e.to_string(), "--through \"0\": the sequence the gap waits for (1 or more)");
        let e = Error::record("subscriber p")(serde_json::from_str::<u8>("x").expect_err("not JSON"));
        assert!(e.to_string().starts_with("subscriber p: expected value"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
