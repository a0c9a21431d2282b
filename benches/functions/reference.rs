//! The reference every CPU figure of this benchmark is divided by, measured in the same run.
//!
//! Absolute CPU figures move 2–3× from one day to the next on a shared machine (other
//! processes' load, frequency scaling, caches shared between cores), while a fixed CPU-bound
//! workload measured just before and just after a figure moves with them: the figure ÷ the
//! reference moves much less, so figures of different sessions are compared by their ratio.
//!
//! The reference is SHA-256 (the `sha2` crate) of a fixed 64 KiB buffer, hashed [`ROUNDS`]
//! times, timed by the CPU clock of the calling thread (`CLOCK_THREAD_CPUTIME_ID`: the time this
//! thread ran, not the time it waited for a core), and reported as CPU ms per hash. It
//! runs in the bench process, so it is compiled with the bench's profile (`--profile dev` in
//! the documented commands: `sha2` unoptimised): a ratio compares with ratios measured with the
//! same command only.

use std::hint::black_box;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Bytes hashed per round.
pub(crate) const BUFFER: usize = 64 * 1024;

/// Hashes of [`BUFFER`] per measurement of the reference (~0.5 s of CPU in a `dev` build).
pub(crate) const ROUNDS: usize = 256;

/// The reference measured before a workload and after it, CPU ms per SHA-256 of [`BUFFER`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reference {
    before_ms: f64,
    after_ms: f64,
}

impl Reference {
    /// Measures the reference before the workload; [`Reference::after`] measures it again.
    pub(crate) fn before() -> Reference {
        let ms = measure();
        Reference { before_ms: ms, after_ms: ms }
    }

    /// Measures the reference again, after the workload.
    pub(crate) fn after(mut self) -> Reference {
        self.after_ms = measure();
        self
    }

    /// The reference for the run: the mean of before and after, CPU ms per hash.
    pub(crate) fn ms(&self) -> f64 {
        (self.before_ms + self.after_ms) / 2.0
    }

    /// `figure_ms` (a CPU time in ms) ÷ the reference.
    pub(crate) fn ratio(&self, figure_ms: f64) -> f64 {
        figure_ms / self.ms()
    }

    /// One line saying what the reference is and its values in this run.
    pub(crate) fn describe(&self) -> String {
        format!(
            "reference (SHA-256 of a fixed {} KiB buffer, {ROUNDS} times, this thread's CPU, the bench's build): {:.3} ms per hash before, {:.3} after, mean {:.3}; \"÷ ref\" = the figure's CPU ms ÷ that mean",
            BUFFER / 1024,
            self.before_ms,
            self.after_ms,
            self.ms()
        )
    }
}

/// CPU ms of this thread per SHA-256 of a fixed [`BUFFER`] bytes, over [`ROUNDS`] hashes.
fn measure() -> f64 {
    let buffer: Vec<u8> = (0..BUFFER as u32).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let started = thread_cpu();
    for _ in 0..ROUNDS {
        black_box(Sha256::digest(black_box(&buffer)));
    }
    (thread_cpu().saturating_sub(started)).as_secs_f64() * 1e3 / ROUNDS as f64
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
#[allow(unsafe_code)]
fn thread_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID): {}", std::io::Error::last_os_error());
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
