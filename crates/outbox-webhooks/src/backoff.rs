//! The retry schedule of webhook deliveries: a list of delays spanning about a day, with
//! jitter, and the receiver's `Retry-After` honoured.
//!
//! The default is [Svix's schedule]: after the first attempt, retries wait 5 s, 5 min, 30 min,
//! 2 h, 5 h, 10 h and 10 h — 8 attempts over about 27.6 hours — before the message is
//! dead-lettered. Each wait is lengthened by a random part of at most `jitter` (20 %) of it, so
//! retries of many events spread out; it is never shortened (the first retry waits at least the
//! first delay), and it is rounded up to whole seconds (SQS delays and visibility timeouts are
//! whole seconds: a 0.8 s wait written as `0` would retry at once).
//!
//! A `Retry-After` answer (seconds, or an HTTP date) asks for at least that long: the delay is
//! then `max(scheduled, Retry-After)`, the `Retry-After` part at most
//! [`RetrySchedule::max_retry_after`] (default one day). No SQS limit caps it: the dispatcher
//! holds a wait of any length by re-enqueueing the message (`DelaySeconds` ≤ 15 minutes, then a
//! visibility timeout ≤ 12 hours from that copy's first receive; see `dispatcher`).
//!
//! [Svix's schedule]: https://docs.svix.com/retries

use std::time::Duration;

use chrono::{DateTime, Utc};

/// Svix's schedule, seconds: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
pub const DEFAULT_SCHEDULE: [u64; 7] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000];

/// The default longest `Retry-After` honoured: one day.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// The delays between attempts, with jitter.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetrySchedule {
    /// The wait before retry `n` (0 for the first retry); its length + 1 is the number of
    /// attempts. Default [`DEFAULT_SCHEDULE`].
    pub delays: Vec<Duration>,
    /// The largest random lengthening, as a fraction of the delay, 0.0 to 1.0. Default 0.2.
    pub jitter: f64,
    /// The longest `Retry-After` honoured. Default [`DEFAULT_MAX_RETRY_AFTER`].
    pub max_retry_after: Duration,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self { delays: DEFAULT_SCHEDULE.iter().map(|s| Duration::from_secs(*s)).collect(), jitter: 0.2, max_retry_after: DEFAULT_MAX_RETRY_AFTER }
    }
}

/// A schedule that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a retry schedule is a comma-separated list of delays (seconds, or a number with s, m, h or d), at least one: {text}")]
#[non_exhaustive]
pub struct ScheduleError {
    /// The schedule as given.
    pub text: String,
    /// The number that could not be read, when a delay's number was the problem (not its unit,
    /// nor an empty schedule).
    #[source]
    pub number: Option<std::num::ParseIntError>,
}

impl ScheduleError {
    fn new(text: &str, number: Option<std::num::ParseIntError>) -> Self {
        Self { text: text.to_owned(), number }
    }
}

impl RetrySchedule {
    /// The schedule `delays` (its length + 1 attempts) with the default jitter (0.2) and
    /// longest `Retry-After` ([`DEFAULT_MAX_RETRY_AFTER`]); the public fields take others.
    pub fn new(delays: Vec<Duration>) -> Self {
        Self { delays, ..Self::default() }
    }

    /// Attempts in all: the first and one per delay.
    pub fn attempts(&self) -> u32 {
        u32::try_from(self.delays.len()).unwrap_or(u32::MAX).saturating_add(1)
    }

    /// The sum of the delays (without jitter and `Retry-After`): how long a message is retried.
    pub fn span(&self) -> Duration {
        self.delays.iter().sum()
    }

    /// The delay before retry `retry` (0 for the first) without jitter; `None` after the last.
    pub fn nominal(&self, retry: u32) -> Option<Duration> {
        self.delays.get(retry as usize).copied()
    }

    /// The delay before retry `retry` with `unit` (in `[0, 1)`) as the random draw:
    /// `nominal × (1 + jitter × unit)`, raised to `retry_after` (at most `max_retry_after`) if
    /// that is longer, rounded up to whole seconds; `None` after the last retry.
    pub fn delay_with(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Option<Duration> {
        let nominal = self.nominal(retry)?;
        let extra = self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        let scheduled = nominal.mul_f64(1.0 + extra);
        let asked = retry_after.map_or(Duration::ZERO, |a| a.min(self.max_retry_after));
        Some(ceil_seconds(scheduled.max(asked)))
    }

    /// [`RetrySchedule::delay_with`] with a fresh random draw.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        self.delay_with(retry, retry_after, rand::random::<f64>())
    }

    /// Reads a schedule: `5,300,1800` (seconds) or `5s,5m,30m,2h,5h,10h,10h`.
    ///
    /// # Errors
    /// [`ScheduleError`] naming the value.
    pub fn parse_delays(text: &str) -> Result<Vec<Duration>, ScheduleError> {
        let delays = text
            .split(',')
            .map(|part| {
                let part = part.trim();
                let (digits, unit) = match part.find(|c: char| !c.is_ascii_digit()) {
                    Some(at) => part.split_at(at),
                    None => (part, "s"),
                };
                let n: u64 = digits.parse().map_err(|e| ScheduleError::new(text, Some(e)))?;
                let factor = match unit {
                    "s" => 1,
                    "m" => 60,
                    "h" => 3_600,
                    "d" => 86_400,
                    _ => return Err(ScheduleError::new(text, None)),
                };
                Ok(Duration::from_secs(n.saturating_mul(factor)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if delays.is_empty() {
            return Err(ScheduleError::new(text, None));
        }
        Ok(delays)
    }
}

/// `d` rounded up to whole seconds.
pub(crate) fn ceil_seconds(d: Duration) -> Duration {
    if d.subsec_nanos() == 0 {
        d
    } else {
        Duration::from_secs(d.as_secs() + 1)
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
    fn the_default_is_svix_schedule_about_a_day_in_eight_attempts() {
        let s = RetrySchedule::default();
        assert_eq!(s.attempts(), 8);
        assert_eq!(s.span(), Duration::from_secs(99_305), "27 h 35 min 5 s");
        let secs: Vec<u64> = (0..7).map(|n| s.nominal(n).unwrap().as_secs()).collect();
        assert_eq!(secs, [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]);
        assert_eq!(s.nominal(7), None);
        assert_eq!(s.delay(7, None), None, "no retry after the last");
    }

    #[test]
    fn jitter_lengthens_never_shortens_and_rounds_up_to_seconds() {
        let s = RetrySchedule::default();
        assert_eq!(s.delay_with(0, None, 0.0), Some(Duration::from_secs(5)));
        assert_eq!(s.delay_with(0, None, 1.0), Some(Duration::from_secs(6)));
        assert_eq!(s.delay_with(0, None, 0.5), Some(Duration::from_secs(6)), "5.5 s rounds up");
        for n in 0..7 {
            for _ in 0..20 {
                let d = s.delay(n, None).unwrap();
                let nominal = s.nominal(n).unwrap();
                assert!(d >= nominal && d <= nominal.mul_f64(1.2) + Duration::from_secs(1), "retry {n}: {d:?}");
            }
        }
        // A 1 s local schedule: the first retry waits at least 1 s, never 0 (whole seconds).
        let local = RetrySchedule { delays: vec![Duration::from_secs(1)], ..RetrySchedule::default() };
        for _ in 0..50 {
            assert!(local.delay(0, None).unwrap() >= Duration::from_secs(1));
        }
    }

    #[test]
    fn retry_after_lengthens_up_to_its_maximum() {
        let s = RetrySchedule { jitter: 0.0, ..RetrySchedule::default() };
        assert_eq!(s.delay_with(0, Some(Duration::from_secs(120)), 0.0), Some(Duration::from_secs(120)));
        assert_eq!(s.delay_with(2, Some(Duration::from_secs(1)), 0.0), Some(Duration::from_secs(1_800)), "never shorter");
        assert_eq!(s.delay_with(0, Some(Duration::from_secs(86_400)), 0.0), Some(Duration::from_secs(86_400)), "a day: beyond SQS's 12 h");
        assert_eq!(s.delay_with(0, Some(Duration::from_secs(30 * 86_400)), 0.0), Some(DEFAULT_MAX_RETRY_AFTER));
        assert_eq!(s.delay_with(7, Some(Duration::from_secs(10)), 0.0), None, "Retry-After does not add attempts");
    }

    #[test]
    fn schedules_parse_with_units() {
        let svix = RetrySchedule::parse_delays("5s, 5m, 30m, 2h, 5h, 10h, 10h").unwrap();
        assert_eq!(svix, RetrySchedule::default().delays);
        assert_eq!(RetrySchedule::parse_delays("1,2,3").unwrap(), [1, 2, 3].map(Duration::from_secs));
        assert_eq!(RetrySchedule::parse_delays("1d").unwrap(), [Duration::from_secs(86_400)]);
        for bad in ["", "5,", "x", "5w", "-1", "1.5"] {
            assert!(RetrySchedule::parse_delays(bad).is_err(), "{bad:?}");
        }
        // The number's own error is kept as the source; a unit or an empty schedule has none.
        let number = RetrySchedule::parse_delays("5s,x5").unwrap_err();
        assert_eq!(number.text, "5s,x5");
        assert!(std::error::Error::source(&number).is_some_and(|e| e.is::<std::num::ParseIntError>()), "{number:?}");
        let unit = RetrySchedule::parse_delays("5w").unwrap_err();
        assert!(unit.number.is_none() && unit.to_string().ends_with(": 5w"), "{unit}");
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
