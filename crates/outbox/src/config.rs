//! Configuration from environment variables, as `template.yaml` sets them on each function.
//!
//! Every reader takes an [`Env`], a lookup over variable names, so the same code reads the
//! process environment in Lambda ([`Env::process`]) and the template's resolved environment in
//! the local runtime ([`Env::from_map`]).

use std::collections::HashMap;
use std::time::Duration;

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

    /// A positive whole number of seconds (default `default`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if set but not a positive integer.
    pub fn seconds(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        Ok(self.parsed(name, |s: &u64| *s > 0, "expected a positive number of seconds")?.map_or(default, Duration::from_secs))
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

    /// A whole number of milliseconds, 0 allowed (default `default`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] if set but not a non-negative integer.
    pub fn millis(&self, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
        Ok(self.parsed(name, |_: &u64| true, "expected a whole number of milliseconds")?.map_or(default, Duration::from_millis))
    }
}

/// Default retention of outbox items and inbox rows (TTL): 7 days, longer than EventBridge's
/// 24-hour retry window and the time people need to replay a dead-letter queue.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

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
    }
}
