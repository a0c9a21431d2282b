//! The JSON log lines a test's code writes, as Lambda's subscriber writes them
//! (`lambda_runtime::tracing::init_default_subscriber` with `AWS_LAMBDA_LOG_FORMAT=JSON` is
//! `tracing_subscriber::fmt().json()`: the line's fields under `fields`, the current span under
//! `span`).

use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

/// What the subscriber wrote; a `MakeWriter` for it.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    /// The log lines (INFO and above) of every test of this binary, from the first call on: the
    /// process's global subscriber. Global, not per thread: `tracing` caches per call site
    /// whether anyone listens, and a test thread without a subscriber would switch off the call
    /// sites of a test with a thread-local one. Tests pick their lines by their own event ids.
    #[allow(dead_code)]
    pub(crate) fn global() -> &'static Self {
        Self::global_at(tracing::Level::INFO)
    }

    /// [`Captured::global`] with the lines at `level` and above (each line's `level` says which
    /// it is). The first call in a test binary fixes the level.
    #[allow(dead_code)]
    pub(crate) fn global_at(level: tracing::Level) -> &'static Self {
        static GLOBAL: OnceLock<Captured> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let captured = Self::default();
            let subscriber = tracing_subscriber::fmt().json().without_time().with_max_level(level).with_writer(captured.clone()).finish();
            // Fails only when a global subscriber is set already; this is the one place that sets it.
            let _ = tracing::subscriber::set_global_default(subscriber);
            captured
        })
    }

    /// The lines (at `level` and above) this thread writes while the guard lives: what a
    /// function deployed at `level` would write. The binary's global subscriber is set first
    /// ([`Captured::global_at`], DEBUG), so the other tests keep theirs. For a
    /// `current_thread` runtime (`#[tokio::test]`'s), where every future runs on this thread.
    #[allow(dead_code)]
    pub(crate) fn this_thread_at(level: tracing::Level) -> (Self, tracing::subscriber::DefaultGuard) {
        Self::global_at(tracing::Level::DEBUG);
        let captured = Self::default();
        let subscriber = tracing_subscriber::fmt().json().without_time().with_max_level(level).with_writer(captured.clone()).finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (captured, guard)
    }

    /// The lines so far, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// The lines so far, parsed.
    pub(crate) fn lines(&self) -> Vec<Value> {
        self.text().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
    }

    /// `(message, span.attempt)` of the lines inside the span of `event_id`.
    pub(crate) fn attempts_of(&self, event_id: &str) -> Vec<(String, u64)> {
        self.lines()
            .iter()
            .filter(|l| l["span"]["event_id"] == event_id)
            .map(|l| (l["fields"]["message"].as_str().unwrap_or_default().to_owned(), l["span"]["attempt"].as_u64().unwrap_or(0)))
            .collect()
    }
}
