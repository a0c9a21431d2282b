//! The circuit breaker of one subscriber: after `threshold` consecutive failed attempts its
//! messages wait, without calling it, until the breaker's cool-down ends; then one probe at a
//! time decides whether it is healthy again.
//!
//! | state | stored on the subscriber item | what a message of this subscriber does |
//! |---|---|---|
//! | closed | `breaker_failures` < threshold, no `breaker_open_until` | is attempted |
//! | open | `breaker_open_until` in the future | waits until then (not an attempt) |
//! | half-open | `breaker_open_until` passed, no live `breaker_probe_until` | the message that wins the conditional write of `breaker_probe_until` is the probe; the others wait |
//! | probing | `breaker_probe_until` in the future | waits until the probe's lease ends |
//!
//! A success resets the item (`breaker_failures = 0`, the rest removed); a failure adds one and
//! sets `failing_since` if absent; reaching the threshold (or a failed probe) opens the breaker
//! for `cooldown`.
//!
//! **Why the state lives on the subscriber's item** (DynamoDB, conditional updates) and not in
//! memory: Lambda runs many execution environments of the dispatcher at once, each polling the
//! queue; a count in one environment's memory would let every other environment keep calling
//! a dead endpoint, and a probe "one at a time" needs one arbiter. A conditional `UpdateItem` on
//! the item is that arbiter ("Condition expressions", DynamoDB developer guide: exactly one of
//! racing writers wins), at one read per subscriber per batch and one write per attempt outcome
//! that changes the state.

use std::time::Duration;

/// Settings of the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failed attempts that open the breaker; 0 turns the breaker off. Default 5.
    pub threshold: u32,
    /// How long an open breaker holds its subscriber's messages before a probe. Default 60 s.
    pub cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self { threshold: 5, cooldown: Duration::from_secs(60) }
    }
}

/// The breaker attributes of a subscriber item (epoch milliseconds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerState {
    /// `breaker_failures`: consecutive failed attempts.
    pub failures: u32,
    /// `breaker_open_until`.
    pub open_until: Option<i64>,
    /// `breaker_probe_until`: the lease of the probe in flight.
    pub probe_until: Option<i64>,
    /// `failing_since`: the first of the consecutive failures.
    pub failing_since: Option<i64>,
}

/// What a message of the subscriber may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Attempt it.
    Closed,
    /// Wait until this time (epoch ms) without calling the subscriber.
    Open {
        /// When to look again.
        until: i64,
    },
    /// The cool-down is over: one message may try to become the probe.
    HalfOpen,
}

impl BreakerState {
    /// The gate at `now` (epoch ms).
    pub fn gate(&self, now: i64) -> Gate {
        match (self.open_until, self.probe_until) {
            (None, _) => Gate::Closed,
            (Some(until), _) if until > now => Gate::Open { until },
            (Some(_), Some(probe)) if probe > now => Gate::Open { until: probe },
            (Some(_), _) => Gate::HalfOpen,
        }
    }

    /// Whether the item holds anything a success must reset.
    pub fn is_clean(&self) -> bool {
        *self == BreakerState::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_gate() {
        let now = 1_000_000;
        assert_eq!(BreakerState::default().gate(now), Gate::Closed);
        assert_eq!(BreakerState { failures: 4, failing_since: Some(1), ..Default::default() }.gate(now), Gate::Closed);
        let open = BreakerState { failures: 5, open_until: Some(now + 60_000), ..Default::default() };
        assert_eq!(open.gate(now), Gate::Open { until: now + 60_000 });
        let half = BreakerState { open_until: Some(now - 1), ..open };
        assert_eq!(half.gate(now), Gate::HalfOpen);
        let probing = BreakerState { probe_until: Some(now + 5_000), ..half };
        assert_eq!(probing.gate(now), Gate::Open { until: now + 5_000 }, "one probe at a time");
        let probe_died = BreakerState { probe_until: Some(now - 1), ..half };
        assert_eq!(probe_died.gate(now), Gate::HalfOpen, "a probe whose lease ended is replaced");
        assert!(BreakerState::default().is_clean() && !half.is_clean());
    }
}
