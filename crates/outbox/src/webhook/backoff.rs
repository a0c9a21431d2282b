//! The retry schedule of webhook deliveries: capped exponential backoff with jitter, and the
//! receiver's `Retry-After` honoured.
//!
//! Retry `n` (0 for the first retry) waits `nominal(n) = min(cap, base × 2^n)`, less a random
//! part of at most `jitter × nominal(n)` (so retries of many events spread out and never exceed
//! the cap). A `Retry-After` answer (seconds, or an HTTP date) asks for at least that long: the
//! delay is then `max(backoff, Retry-After)`, itself at most [`MAX_DELAY`] (12 hours, the
//! longest SQS visibility timeout, `ChangeMessageVisibility` API reference:
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>).
//!
//! With the defaults (base 5 s, cap 10 min, jitter 20 %) the nominal delays are 5, 10, 20, 40,
//! 80, 160, 320, 600, 600 … seconds.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The longest delay SQS can give a message (its maximum visibility timeout): 12 hours.
pub const MAX_DELAY: Duration = Duration::from_secs(12 * 60 * 60);

/// Capped exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay of the first retry. Default 5 s.
    pub base: Duration,
    /// Longest backoff delay (a `Retry-After` may ask for more). Default 10 minutes.
    pub cap: Duration,
    /// Fraction of the delay that is random, 0.0 to 1.0. Default 0.2.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { base: Duration::from_secs(5), cap: Duration::from_secs(600), jitter: 0.2 }
    }
}

impl Backoff {
    /// `min(cap, base × 2^retry)`, without jitter.
    pub fn nominal(&self, retry: u32) -> Duration {
        let factor = 2u32.checked_pow(retry).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).unwrap_or(Duration::MAX).min(self.cap)
    }

    /// The delay before retry `retry` with `unit` (in `[0, 1)`) as the random draw:
    /// `nominal × (1 − jitter × unit)`, raised to `retry_after` if that is longer, at most [`MAX_DELAY`].
    pub fn delay_with(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let nominal = self.nominal(retry);
        let cut = (self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0)).min(1.0);
        let backoff = nominal.mul_f64(1.0 - cut);
        retry_after.map_or(backoff, |asked| backoff.max(asked)).min(MAX_DELAY)
    }

    /// [`Backoff::delay_with`] with a fresh random draw.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        self.delay_with(retry, retry_after, rand::random::<f64>())
    }
}

/// Parses a `Retry-After` value: delay seconds (`120`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`, RFC 9110 §10.2.3) relative to `now`. A date in the past is
/// zero; anything else is `None`.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = DateTime::parse_from_rfc2822(value).ok()?;
    Some((date.with_timezone(&Utc) - now).to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_doubles_up_to_the_cap() {
        let b = Backoff::default();
        let secs: Vec<u64> = (0..10).map(|n| b.nominal(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(b.nominal(200), Duration::from_secs(600));
        // Without jitter the delay is the nominal one; with the largest draw, 80 % of it.
        assert_eq!(b.delay_with(3, None, 0.0), Duration::from_secs(40));
        assert_eq!(b.delay_with(3, None, 1.0), Duration::from_secs(32));
        for n in 0..20 {
            let d = b.delay(n, None);
            assert!(d <= b.nominal(n) && d >= b.nominal(n).mul_f64(0.8), "retry {n}: {d:?}");
        }
        let other = Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(30), jitter: 0.0 };
        assert_eq!((0..7).map(|n| other.delay(n, None).as_secs()).collect::<Vec<_>>(), [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn retry_after_lengthens_but_never_shortens_the_delay() {
        let b = Backoff::default();
        assert_eq!(b.delay_with(0, Some(Duration::from_secs(120)), 0.0), Duration::from_secs(120));
        assert_eq!(b.delay_with(7, Some(Duration::from_secs(1)), 0.0), Duration::from_secs(600));
        assert_eq!(b.delay_with(0, Some(Duration::from_secs(3_600)), 0.5), Duration::from_secs(3_600));
        assert_eq!(b.delay_with(0, Some(Duration::from_secs(86_400)), 0.0), MAX_DELAY);
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:27:00Z").unwrap().with_timezone(&Utc);
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
