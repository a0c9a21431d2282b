//! The local runtime's error: one type, [`Error`], its variants by cause, each carrying its
//! source. The parts with failure modes of their own keep their typed errors (the emulator's,
//! the binaries', a checkpoint's, a fault plan's, the operator's crate's template error) and
//! convert into [`Error::Part`] with `?`, unchanged in their messages; the operator's verbs'
//! error ([`outbox_cli::Error`]) converts into [`Error::Operator`]. A failed AWS call and a failed
//! file operation are the operator's variants ([`outbox_cli::Error::Aws`], [`outbox_cli::Error::Io`])
//! inside [`Error::Operator`], made by [`Error::aws`] and [`Error::io`]: one definition for both
//! binaries.
//!
//! At the bottom of the layers: every folder may use it, it uses none of them.

use std::path::PathBuf;

/// An error of any other library, kept as the source of an [`Error`] (the same type as the
/// operator's crate's [`outbox_cli::error::BoxError`], so its errors convert as they are).
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in the local runtime. The message says what was being done (the AWS
/// operation and its resource, the file, the function, the request) and why, as the commands
/// print it; [`std::error::Error::source`] gives the underlying error where there is one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The template, the stack or a local settings file does not hold what is needed, or holds
    /// a value the runtime cannot use; the message names the field or resource.
    #[error("{0}")]
    Invalid(String),
    /// A function's instance could not be started (its binary, its ports).
    #[error("{function}: {reason}: {source}")]
    Function {
        /// The function's logical id.
        function: String,
        /// What could not be done.
        reason: String,
        /// Why.
        source: Source,
    },
    /// What a scenario (`demo`, `proof`, `dlq practice`) waits for did not happen, or happened
    /// otherwise than the pipeline promises.
    #[error("{0}")]
    Expectation(String),
    /// Another library's error while doing something: what, and the error.
    #[error("{context}: {source}")]
    Other {
        /// What was being done.
        context: String,
        /// The library's error.
        source: Source,
    },
    /// A part of the runtime with its own error type failed (the emulator, the binaries, a
    /// checkpoint, a fault plan, the template): its error, message unchanged.
    #[error(transparent)]
    Part(Source),
    /// A verb of the operator's crate (`outbox-cli`: dead-letter queues, trace, ordering) failed,
    /// or an AWS call or a file operation of the runtime did ([`Error::aws`], [`Error::io`]): the
    /// operator's error, message unchanged.
    #[error(transparent)]
    Operator(#[from] outbox_cli::Error),
}

/// The runtime's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A closure for `map_err`: an AWS SDK error of `operation` (e.g. `format!("Scan {table}")`),
    /// as [`outbox_cli::Error::Aws`] (printed `operation: <the SDK error with its context>`).
    pub fn aws<E: std::error::Error + Send + Sync + 'static>(operation: impl Into<String>) -> impl FnOnce(E) -> Self {
        let aws = outbox_cli::Error::aws(operation);
        move |e| Self::Operator(aws(e))
    }

    /// A closure for `map_err`: an I/O error on `path`, as [`outbox_cli::Error::Io`] (printed
    /// `path: error`).
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let io = outbox_cli::Error::io(path);
        move |e| Self::Operator(io(e))
    }

    /// A closure for `map_err`: another library's error while doing `context`.
    pub fn other<E: Into<Source>>(context: impl Into<String>) -> impl FnOnce(E) -> Self {
        let context = context.into();
        move |e| Self::Other { context, source: e.into() }
    }

    /// A value the runtime cannot use, or a missing one; `message` names the field.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// A scenario's expectation that did not hold.
    pub fn expectation(message: impl Into<String>) -> Self {
        Self::Expectation(message.into())
    }
}

impl From<outbox_template::TemplateError> for Error {
    fn from(e: outbox_template::TemplateError) -> Self {
        Self::Part(Box::new(e))
    }
}

impl From<outbox_template::stack::StackError> for Error {
    fn from(e: outbox_template::stack::StackError) -> Self {
        Self::Part(Box::new(e))
    }
}
