//! Configuration from environment variables, as `template.yaml` sets them on each function.
//!
//! Every reader takes an [`Env`], a lookup over variable names, so the same code reads the
//! process environment in Lambda ([`Env::process`]) and the template's resolved environment in
//! the local runtime ([`Env::from_map`]).

use std::collections::HashMap;
use std::time::Duration;

pub(crate) use outbox::envelope::MAX_RETENTION;

/// A missing or unusable setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required variable is not set (or empty).
    #[error("environment variable {0} is required but not set")]
    Missing(&'static str),
    /// A variable is set to something that does not parse.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
}

/// The largest `*_MS` setting ([`Env::millis`]): 900,000 ms, Lambda's longest function time-out
/// (15 minutes; "Configure Lambda function timeout",
/// <https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html>).
pub const MAX_MILLIS: u64 = 900_000;

type Lookup = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A lookup of environment variables.
pub struct Env {
    lookup: Lookup,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self { lookup: Box::new(|name| std::env::var(name).ok()) }
    }

    /// A fixed map, e.g. a function's `Environment.Variables` from the template.
    pub fn from_map(map: HashMap<String, String>) -> Self {
        Self { lookup: Box::new(move |name| map.get(name).cloned()) }
    }

    /// A required, non-empty variable.
    ///
    /// # Errors
    /// [`ConfigError::Missing`].
    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty()).ok_or(ConfigError::Missing(name))
    }

    /// The variable parsed as `T` if set (and non-empty), `None` if not.
    fn parsed<T: std::str::FromStr>(&self, name: &'static str, accept: impl Fn(&T) -> bool, reason: &str) -> Result<Option<T>, ConfigError> {
        let Some(value) = (self.lookup)(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
        match value.trim().parse::<T>() {
            Ok(parsed) if accept(&parsed) => Ok(Some(parsed)),
            _ => Err(ConfigError::Invalid { name, value, reason: reason.into() }),
        }
    }

    /// An optional variable with a default.
    pub fn optional(&self, name: &str, default: &str) -> String {
        (self.lookup)(name).filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
    }

    /// A positive whole number of seconds, at most [`MAX_RETENTION`]'s 315,360,000 (3,650 days:
    /// no span this project configures is longer, and the bound keeps `now + value` far from
    /// overflowing, in seconds or milliseconds), default `default`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable and the range if set but not a whole number
    /// in it.
    pub fn seconds(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        self.seconds_in(name, default, 1, MAX_RETENTION.as_secs())
    }

    /// A whole number of seconds in `min..=max` (default `default`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable and the range if set but not a whole number
    /// in it.
    pub fn seconds_in(&self, name: &'static str, default: Duration, min: u64, max: u64) -> Result<Duration, ConfigError> {
        let reason = format!("expected a whole number of seconds from {min} to {max}");
        Ok(self.parsed(name, |s: &u64| (min..=max).contains(s), &reason)?.map_or(default, Duration::from_secs))
    }

    /// A retention (a TTL: how long an item is kept) of 1 to [`MAX_RETENTION`] seconds (default
    /// `default`), e.g. `OUTBOX_RETENTION_SECONDS`. `expires_at` = now + retention, in epoch
    /// seconds: the bound keeps it in range (see [`MAX_RETENTION`] for why this one).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable and the range.
    pub fn retention(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        self.seconds(name, default)
    }

    /// A positive byte count (default `default`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if set but not a positive integer.
    pub fn bytes(&self, name: &'static str, default: usize) -> Result<usize, ConfigError> {
        Ok(self.parsed(name, |b: &usize| *b > 0, "expected a positive number of bytes")?.unwrap_or(default))
    }
    /// A positive byte count of at most `max` (default `default`), e.g. a setting bounded by an
    /// AWS limit.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if set but not a positive integer, or above `max`.
    pub fn bytes_at_most(&self, name: &'static str, default: usize, max: usize) -> Result<usize, ConfigError> {
        let bytes = self.bytes(name, default)?;
        if bytes > max {
            let value = (self.lookup)(name).unwrap_or_default();
            return Err(ConfigError::Invalid { name, value, reason: format!("at most {max} bytes") });
        }
        Ok(bytes)
    }

    /// A positive whole count (default `default`), e.g. a number of attempts.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if set but not a positive integer.
    pub fn count(&self, name: &'static str, default: u32) -> Result<u32, ConfigError> {
        Ok(self.parsed(name, |n: &u32| *n > 0, "expected a positive whole number")?.unwrap_or(default))
    }

    /// A whole number of milliseconds from 0 to [`MAX_MILLIS`] (default `default`). Every `*_MS`
    /// setting is a time within one invocation (a time-out, a safety margin), added to the
    /// current instant: the bound refuses a value that would overflow it (a panic in every
    /// invocation) or could never be meant.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the variable and the range if set but not a whole number
    /// in it.
    pub fn millis(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        let reason = format!("expected a whole number of milliseconds from 0 to {MAX_MILLIS} (15 minutes, Lambda's longest time-out)");
        Ok(self.parsed(name, |ms: &u64| *ms <= MAX_MILLIS, &reason)?.map_or(default, Duration::from_millis))
    }
}

/// Time-outs of every AWS SDK client the library and the functions build
/// ([`load_sdk_config`](crate::load_sdk_config)), so that a stalled call fails (retryably,
/// `outbox::aws_error`) instead of running the invocation into its Lambda timeout.
///
/// | variable | meaning | default |
/// |---|---|---|
/// | `SDK_CONNECT_TIMEOUT_MS` | establishing a connection | 3000 |
/// | `SDK_ATTEMPT_TIMEOUT_MS` | one HTTP attempt, connection to last byte of the answer | 5000 |
/// | `SDK_OPERATION_TIMEOUT_MS` | one call, all its attempts and backoffs | 15000 |
///
/// The defaults are far above DynamoDB's, EventBridge's and SQS's usual latencies (single-digit
/// to tens of milliseconds) and leave, under the functions' 30 s timeout, room for the consumer's
/// in-invocation retries and for answering; the relay does not start a `PutEvents` call with
/// less than `SDK_OPERATION_TIMEOUT_MS` + its safety margin left. Source: "Timeouts" in the AWS
/// SDK for Rust developer guide, <https://docs.aws.amazon.com/sdk-for-rust/latest/dg/timeouts.html>.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdkTimeouts {
    /// Connect time-out.
    pub connect: Duration,
    /// Per-attempt time-out.
    pub attempt: Duration,
    /// Per-operation time-out (all attempts).
    pub operation: Duration,
}

impl Default for SdkTimeouts {
    fn default() -> Self {
        Self { connect: Duration::from_millis(3000), attempt: Duration::from_millis(5000), operation: Duration::from_millis(15_000) }
    }
}

impl SdkTimeouts {
    /// Reads the variables of the table above.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a value that is not a positive number of milliseconds, or an
    /// attempt time-out longer than the operation time-out.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = Self::default();
        let positive = |name: &'static str, default: Duration| -> Result<Duration, ConfigError> {
            let v = env.millis(name, default)?;
            if v.is_zero() {
                return Err(ConfigError::Invalid { name, value: "0".into(), reason: "expected a positive number of milliseconds".into() });
            }
            Ok(v)
        };
        let t = Self {
            connect: positive("SDK_CONNECT_TIMEOUT_MS", d.connect)?,
            attempt: positive("SDK_ATTEMPT_TIMEOUT_MS", d.attempt)?,
            operation: positive("SDK_OPERATION_TIMEOUT_MS", d.operation)?,
        };
        if t.attempt > t.operation {
            return Err(ConfigError::Invalid {
                name: "SDK_ATTEMPT_TIMEOUT_MS",
                value: t.attempt.as_millis().to_string(),
                reason: format!("longer than SDK_OPERATION_TIMEOUT_MS ({} ms)", t.operation.as_millis()),
            });
        }
        Ok(t)
    }

    /// As the SDK's `TimeoutConfig`, for `aws_config::from_env().timeout_config(…)` (what
    /// [`load_sdk_config`](crate::load_sdk_config) does).
    pub fn timeout_config(&self) -> aws_smithy_types::timeout::TimeoutConfig {
        aws_smithy_types::timeout::TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

/// Default retention of outbox items (TTL): 7 days, longer than EventBridge's 24-hour retry
/// window and the stream's 24-hour retention. Inbox rows follow [`inbox_retention`] instead.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Default retention of the dead-letter queues (`MessageRetentionPeriod`): 14 days, SQS's maximum.
/// The template states it once, as parameter `DeadLetterRetentionSeconds`, for the queues and
/// (as `DEAD_LETTER_RETENTION_SECONDS`) for the consumers.
pub const DEFAULT_DEAD_LETTER_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);

/// The range of `DEAD_LETTER_RETENTION_SECONDS`: SQS's `MessageRetentionPeriod`, 60 seconds to
/// 1,209,600 (14 days). Source: the `SetQueueAttributes` API reference,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html>.
pub const DEAD_LETTER_RETENTION_RANGE: std::ops::RangeInclusive<u64> = 60..=1_209_600;

/// Default time between an event leaving a dead-letter queue's retention window and the last
/// moment it can still arrive at a consumer (`REDRIVE_MARGIN_SECONDS`): 2 days, covering
/// EventBridge's retries (24 h), Lambda's asynchronous event age (up to 6 h) and an operator's
/// redrive running late.
pub const DEFAULT_REDRIVE_MARGIN: Duration = Duration::from_secs(2 * 24 * 3600);

/// The consumer's name, `CONSUMER_NAME` ([`outbox::contract::env::CONSUMER_NAME`]): the prefix of
/// its inbox rows' keys (`<name>#<event id>`, `outbox::inbox::Inbox::key`). The one place it is
/// read: a consumer function passes it to `outbox::inbox::Inbox::new` and its dead-letter
/// queue, and `outbox trace` / `outbox ordering` find the function's rows by the same call on
/// the function's configured environment, so the name a function runs with is always the name
/// the operator's tools look up. Required, with no default: a default in the code would be
/// invisible to the tools, which then report an applied event as absent. Keep it fixed for the
/// function's life: rows under an old name no longer deduplicate.
///
/// # Errors
/// [`ConfigError::Missing`] naming `CONSUMER_NAME` when it is not set (or empty).
pub fn consumer_name(env: &Env) -> Result<String, ConfigError> {
    env.required(outbox::contract::env::CONSUMER_NAME).map(|name| name.trim().to_owned())
}

/// The retention rule: an inbox row lives at least as long as anything can redeliver its event,
/// i.e. the dead-letter queues' retention plus the redrive margin. Otherwise a message redriven
/// after the row expired is applied again by any consumer without a natural key.
///
/// Reads `DEAD_LETTER_RETENTION_SECONDS` (default [`DEFAULT_DEAD_LETTER_RETENTION`]),
/// `REDRIVE_MARGIN_SECONDS` (default [`DEFAULT_REDRIVE_MARGIN`]) and `INBOX_RETENTION_SECONDS`
/// (default: the minimum the rule allows, 16 days with the defaults).
///
/// # Errors
/// [`ConfigError::Invalid`] naming `INBOX_RETENTION_SECONDS` when it is shorter than the rule
/// allows or longer than [`MAX_RETENTION`]; naming `DEAD_LETTER_RETENTION_SECONDS` outside
/// [`DEAD_LETTER_RETENTION_RANGE`], `REDRIVE_MARGIN_SECONDS` outside 1..=[`MAX_RETENTION`] or
/// when the rule's minimum exceeds [`MAX_RETENTION`] (all checked at function start, so a
/// misconfigured consumer never runs).
pub fn inbox_retention(env: &Env) -> Result<Duration, ConfigError> {
    let (min, max) = (*DEAD_LETTER_RETENTION_RANGE.start(), *DEAD_LETTER_RETENTION_RANGE.end());
    let dead_letters = env.seconds_in("DEAD_LETTER_RETENTION_SECONDS", DEFAULT_DEAD_LETTER_RETENTION, min, max)?;
    let margin = env.retention("REDRIVE_MARGIN_SECONDS", DEFAULT_REDRIVE_MARGIN)?;
    // Both are bounded above, far below `Duration`'s range: the sum cannot overflow.
    let minimum = dead_letters + margin;
    if minimum > MAX_RETENTION {
        return Err(ConfigError::Invalid {
            name: "REDRIVE_MARGIN_SECONDS",
            value: margin.as_secs().to_string(),
            reason: format!(
                "DEAD_LETTER_RETENTION_SECONDS + REDRIVE_MARGIN_SECONDS = {} seconds, over the longest retention of {} seconds",
                minimum.as_secs(),
                MAX_RETENTION.as_secs()
            ),
        });
    }
    let retention = env.retention("INBOX_RETENTION_SECONDS", minimum)?;
    if retention < minimum {
        return Err(ConfigError::Invalid {
            name: "INBOX_RETENTION_SECONDS",
            value: retention.as_secs().to_string(),
            reason: format!(
                "inbox rows must outlive every redelivery: at least DEAD_LETTER_RETENTION_SECONDS ({}) + REDRIVE_MARGIN_SECONDS ({}) = {} seconds, \
                 or a message redriven after its row expired is applied twice",
                dead_letters.as_secs(),
                margin.as_secs(),
                minimum.as_secs()
            ),
        });
    }
    Ok(retention)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_map(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn required_variables_are_named_when_missing_or_empty() {
        assert_eq!(env(&[]).required("OUTBOX_TABLE"), Err(ConfigError::Missing("OUTBOX_TABLE")));
        assert_eq!(env(&[("OUTBOX_TABLE", " ")]).required("OUTBOX_TABLE"), Err(ConfigError::Missing("OUTBOX_TABLE")));
        assert_eq!(env(&[("OUTBOX_TABLE", "t")]).required("OUTBOX_TABLE").unwrap(), "t");
    }

    #[test]
    fn numbers_have_defaults_and_reject_garbage() {
        assert_eq!(env(&[]).seconds("S", DEFAULT_RETENTION).unwrap(), DEFAULT_RETENTION);
        assert_eq!(env(&[("S", "60")]).seconds("S", DEFAULT_RETENTION).unwrap(), Duration::from_secs(60));
        assert!(env(&[("S", "0")]).seconds("S", DEFAULT_RETENTION).is_err());
        assert!(env(&[("B", "1MB")]).bytes("B", 1).is_err());
        assert_eq!(env(&[("B", "262144")]).bytes("B", 1).unwrap(), 262_144);
        assert_eq!(env(&[("B", "1048576")]).bytes_at_most("B", 1, 1_048_576).unwrap(), 1_048_576);
        let err = env(&[("B", "99999999999")]).bytes_at_most("B", 1, 1_048_576).unwrap_err();
        assert!(err.to_string().contains("at most 1048576 bytes"), "{err}");
        assert_eq!(env(&[("N", "3")]).count("N", 5).unwrap(), 3);
        assert!(env(&[("N", "0")]).count("N", 5).is_err());
        assert_eq!(env(&[("M", "0")]).millis("M", Duration::from_secs(2)).unwrap(), Duration::ZERO);
        assert!(env(&[("M", "-1")]).millis("M", Duration::from_secs(2)).is_err());
        assert_eq!(env(&[("M", "900000")]).millis("M", Duration::from_secs(2)).unwrap(), Duration::from_secs(900));
    }

    #[test]
    fn the_inbox_outlives_every_redelivery() {
        let fourteen_days = 14 * 24 * 3600;
        assert_eq!(inbox_retention(&env(&[])).unwrap(), Duration::from_secs(fourteen_days + 2 * 24 * 3600));
        let err = inbox_retention(&env(&[("INBOX_RETENTION_SECONDS", "604800")])).unwrap_err();
        assert!(err.to_string().contains("INBOX_RETENTION_SECONDS") && err.to_string().contains("applied twice"), "{err}");
        let short_queues = [("DEAD_LETTER_RETENTION_SECONDS", "86400"), ("REDRIVE_MARGIN_SECONDS", "3600")];
        assert_eq!(inbox_retention(&env(&short_queues)).unwrap(), Duration::from_secs(90_000));
        let longer = [("DEAD_LETTER_RETENTION_SECONDS", "86400"), ("INBOX_RETENTION_SECONDS", "604800")];
        assert_eq!(inbox_retention(&env(&longer)).unwrap(), Duration::from_secs(604_800));
    }

    /// A retention beyond what an epoch-seconds TTL can hold (or a unit mistake: milliseconds
    /// in a `*_SECONDS` variable) is refused at start, naming the variable and the range.
    #[test]
    fn out_of_range_retention_is_refused_at_start() {
        for huge in ["18446744073709551615", "9223372036854775807", "1382400000000"] {
            let result = inbox_retention(&env(&[("INBOX_RETENTION_SECONDS", huge)]));
            let err = result.expect_err(&format!("INBOX_RETENTION_SECONDS={huge} was accepted"));
            assert!(err.to_string().contains("INBOX_RETENTION_SECONDS") && err.to_string().contains("315360000"), "{err}");
        }
        assert_eq!(env(&[("R", "315360000")]).retention("R", DEFAULT_RETENTION).unwrap(), MAX_RETENTION);
        let err = env(&[("R", "315360001")]).retention("R", DEFAULT_RETENTION).unwrap_err();
        assert!(err.to_string().contains("from 1 to 315360000"), "{err}");
        assert!(env(&[("R", "0")]).retention("R", DEFAULT_RETENTION).is_err());
        let err = inbox_retention(&env(&[("DEAD_LETTER_RETENTION_SECONDS", "30")])).unwrap_err();
        assert!(err.to_string().contains("DEAD_LETTER_RETENTION_SECONDS") && err.to_string().contains("from 60 to 1209600"), "{err}");
        let err = inbox_retention(&env(&[("REDRIVE_MARGIN_SECONDS", "315360000")])).unwrap_err();
        assert!(err.to_string().contains("REDRIVE_MARGIN_SECONDS") && err.to_string().contains("over the longest retention"), "{err}");
        // The sum of the rule's two parts must not overflow either (a panic at start today).
        let huge = [("DEAD_LETTER_RETENTION_SECONDS", "18446744073709551615"), ("REDRIVE_MARGIN_SECONDS", "18446744073709551615")];
        let result = std::panic::catch_unwind(|| inbox_retention(&env(&huge)));
        let err = result.expect("no panic").unwrap_err();
        assert!(err.to_string().contains("DEAD_LETTER_RETENTION_SECONDS"), "{err}");
    }

    /// Durations from the environment are added to "now" (an `Instant`, epoch milliseconds):
    /// a value that overflows it is refused at start, naming the variable, instead of panicking
    /// in every invocation.
    #[test]
    fn durations_that_would_overflow_now_are_refused_at_start() {
        let err = env(&[("RELAY_SAFETY_MARGIN_MS", "18446744073709551615")]).millis("RELAY_SAFETY_MARGIN_MS", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("RELAY_SAFETY_MARGIN_MS") && err.to_string().contains("from 0 to 900000"), "{err}");
        assert!(env(&[("M", "900001")]).millis("M", Duration::ZERO).is_err());
        let err = SdkTimeouts::from_env(&env(&[("SDK_OPERATION_TIMEOUT_MS", "18446744073709551615")])).unwrap_err();
        assert!(err.to_string().contains("SDK_OPERATION_TIMEOUT_MS"), "{err}");
        let err =
            env(&[("WEBHOOK_MAX_RETRY_AFTER_SECONDS", "9223372036854775")]).seconds("WEBHOOK_MAX_RETRY_AFTER_SECONDS", Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("WEBHOOK_MAX_RETRY_AFTER_SECONDS") && err.to_string().contains("from 1 to 315360000"), "{err}");
    }

    #[test]
    fn sdk_timeouts_have_documented_defaults_and_are_overridable() {
        let d = SdkTimeouts::from_env(&env(&[])).unwrap();
        assert_eq!((d.connect, d.attempt, d.operation), (Duration::from_secs(3), Duration::from_secs(5), Duration::from_secs(15)));
        let t = SdkTimeouts::from_env(&env(&[("SDK_ATTEMPT_TIMEOUT_MS", "200"), ("SDK_OPERATION_TIMEOUT_MS", "900")])).unwrap();
        assert_eq!((t.attempt, t.operation), (Duration::from_millis(200), Duration::from_millis(900)));
        assert!(SdkTimeouts::from_env(&env(&[("SDK_ATTEMPT_TIMEOUT_MS", "0")])).is_err());
        let err = SdkTimeouts::from_env(&env(&[("SDK_ATTEMPT_TIMEOUT_MS", "20000")])).unwrap_err();
        assert!(err.to_string().contains("longer than SDK_OPERATION_TIMEOUT_MS"), "{err}");
    }
}
