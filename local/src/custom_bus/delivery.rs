//! A subscriber's background delivery (like AWS, after `PutEvents` has answered).
//!
//! FIFO: each event group's events go one at a time in publish order; a failed delivery is
//! retried after a wait ([`super::BusOptions::retry_delay`], doubled per attempt, at most
//! [`super::MAX_RETRY_DELAY`]) and holds up the later events of its group
//! ([`FifoBlocking::Group`]) or of the whole subscriber ([`FifoBlocking::Subscriber`]). UNORDERED:
//! every waiting event is attempted at once, no order. An event that failed more than
//! `MaxRetryAttempts` retries, or older than `MaxEventAgeInSeconds` when it fails, is given up
//! on: sent to `OnFailureConfiguration`'s queue (the event's body, with message attributes
//! saying why, as the classic bus's dead-letter queues have: `ERROR_CODE`, `ERROR_MESSAGE`,
//! `EXHAUSTED_RETRY_CONDITION`, `RETRY_ATTEMPTS`, `SUBSCRIBER_ARN`, `TARGET_ARN`), else dropped,
//! logged and counted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::subscriber::{Config, FifoBlocking, Ordering};
use super::target::{body, events_value};
use super::{bump, now_epoch, CustomBus, Pending, MAX_RETRY_DELAY};

/// Most deliveries of one subscriber in flight at once.
const MAX_IN_FLIGHT: usize = 16;

/// Starts subscriber `arn`'s delivery task; it ends when the subscriber is deleted.
pub(super) fn spawn(bus: Arc<CustomBus>, arn: String, wake: Arc<tokio::sync::Notify>) {
    tokio::spawn(run(bus, arn, wake));
}

/// What one round delivers, and when the next retry is due.
fn pick(pending: &std::collections::VecDeque<Pending>, ordering: Ordering, blocking: FifoBlocking, now: Instant) -> (Vec<Pending>, Option<Instant>) {
    let mut picked = Vec::new();
    let mut next = None::<Instant>;
    let mut consider = |p: &Pending, picked: &mut Vec<Pending>| {
        if p.not_before <= now {
            picked.push(p.clone());
        } else {
            next = Some(next.map_or(p.not_before, |n| n.min(p.not_before)));
        }
    };
    match (ordering, blocking) {
        (Ordering::Fifo, FifoBlocking::Subscriber) => {
            if let Some(head) = pending.front() {
                consider(head, &mut picked);
            }
        }
        (Ordering::Fifo, FifoBlocking::Group) => {
            let mut seen = HashSet::new();
            for p in pending {
                // An event without a group is a group of its own.
                let key = p.event.group.clone().unwrap_or_else(|| format!("\u{0}{}", p.event.id));
                if seen.insert(key) {
                    consider(p, &mut picked);
                }
                if picked.len() >= MAX_IN_FLIGHT {
                    break;
                }
            }
        }
        (Ordering::Unordered, _) => {
            for p in pending {
                consider(p, &mut picked);
                if picked.len() >= MAX_IN_FLIGHT {
                    break;
                }
            }
        }
    }
    (picked, next)
}

async fn run(bus: Arc<CustomBus>, arn: String, wake: Arc<tokio::sync::Notify>) {
    loop {
        let blocking = bus.options().blocking;
        let round = {
            let state = bus.lock();
            let Some(s) = state.subscribers.get(&arn) else { return };
            if s.config.running {
                let (picked, next) = pick(&s.pending, s.config.ordering, blocking, Instant::now());
                Some((Arc::new(s.config.clone()), picked, next))
            } else {
                None
            }
        };
        let Some((config, picked, next)) = round else {
            wake.notified().await;
            continue;
        };
        if picked.is_empty() {
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        () = wake.notified() => {}
                    }
                }
                None => wake.notified().await,
            }
            continue;
        }
        let mut attempts = tokio::task::JoinSet::new();
        for p in picked {
            let (bus, config) = (bus.clone(), config.clone());
            attempts.spawn(async move {
                let result = attempt(&bus, &config, &p).await;
                (p, result)
            });
        }
        let mut outcomes = Vec::new();
        while let Some(done) = attempts.join_next().await {
            match done {
                Ok(outcome) => outcomes.push(outcome),
                Err(e) => tracing::error!(error = %e, subscriber = %arn, "custom bus: a delivery attempt panicked"),
            }
        }
        let given_up = settle(&bus, &arn, outcomes);
        for (p, reason, condition) in given_up {
            give_up(&bus, &config, &p, &reason, condition).await;
        }
    }
}

/// Applies a round's outcomes to the backlog: the given-up events with why.
fn settle(bus: &CustomBus, arn: &str, outcomes: Vec<(Pending, Result<(), String>)>) -> Vec<(Pending, String, &'static str)> {
    let retry_delay = bus.options().retry_delay;
    let mut state = bus.lock();
    let Some(s) = state.subscribers.get_mut(arn) else { return Vec::new() };
    let mut given_up = Vec::new();
    for (p, result) in outcomes {
        let Some(i) = s.pending.iter().position(|q| Arc::ptr_eq(&q.event, &p.event)) else { continue };
        match result {
            Ok(()) => {
                s.pending.remove(i);
                s.delivered += 1;
                bump(&bus.counters.delivered, 1);
            }
            Err(reason) => {
                let entry = &mut s.pending[i];
                entry.attempts += 1;
                entry.last_error = Some(reason.clone());
                let age = now_epoch() - entry.event.ingested;
                let condition = if entry.attempts > s.config.max_retry_attempts {
                    Some("MaximumRetryAttempts")
                } else if age > s.config.max_event_age_s as f64 {
                    Some("MaximumEventAgeInSeconds")
                } else {
                    None
                };
                match condition {
                    Some(condition) => {
                        let p = s.pending.remove(i).unwrap_or(p);
                        given_up.push((p, reason, condition));
                    }
                    None => {
                        bump(&bus.counters.retried, 1);
                        let factor = 1u32 << (entry.attempts - 1).min(16);
                        entry.not_before = Instant::now() + retry_delay.saturating_mul(factor).min(MAX_RETRY_DELAY);
                        tracing::debug!(subscriber = %arn, event = %entry.event.id, attempts = entry.attempts, %reason, "custom bus: delivery failed, will retry");
                    }
                }
            }
        }
    }
    given_up
}

/// One delivery attempt of `p` to the subscriber's target.
async fn attempt(bus: &CustomBus, config: &Config, p: &Pending) -> Result<(), String> {
    let injector = bus.faults.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(injector) = injector {
        if let Some(error) = injector.bus_delivery_fault(&config.name).await {
            return Err(error);
        }
    }
    let event = &p.event;
    let events = events_value(&event.data, &event.system_metadata);
    let group = config.group_id.as_ref().map(|t| t.evaluate(&events)).transpose()?;
    let dedup = config.dedup_id.as_ref().map(|t| t.evaluate(&events)).transpose()?;
    bus.sqs.send(&config.target_arn, body(config.transform, &event.data, &event.system_metadata), group, dedup, Vec::new()).await
}

/// Sends a given-up event to the on-failure queue, else drops it (logged, counted).
async fn give_up(bus: &CustomBus, config: &Config, p: &Pending, reason: &str, condition: &str) {
    let event = &p.event;
    let Some(queue) = &config.on_failure_arn else {
        bump(&bus.counters.dropped, 1);
        tracing::warn!(subscriber = %config.arn, event = %event.id, attempts = p.attempts, %condition, %reason, "custom bus: gave up on an event and the subscriber has no OnFailureConfiguration: dropped");
        return;
    };
    let attributes = vec![
        ("ERROR_CODE".to_owned(), "DeliveryFailed".to_owned()),
        ("ERROR_MESSAGE".to_owned(), reason.to_owned()),
        ("EXHAUSTED_RETRY_CONDITION".to_owned(), condition.to_owned()),
        ("RETRY_ATTEMPTS".to_owned(), p.attempts.saturating_sub(1).to_string()),
        ("SUBSCRIBER_ARN".to_owned(), config.arn.clone()),
        ("TARGET_ARN".to_owned(), config.target_arn.clone()),
    ];
    let fifo = queue.ends_with(".fifo");
    let group = fifo.then(|| event.group.clone().unwrap_or_else(|| "on-failure".to_owned()));
    let dedup = fifo.then(|| event.id.clone());
    let body = body(config.transform, &event.data, &event.system_metadata);
    let mut wait = Duration::from_millis(50);
    loop {
        match bus.sqs.send(queue, body.clone(), group.clone(), dedup.clone(), attributes.clone()).await {
            Ok(()) => {
                bump(&bus.counters.sent_to_on_failure, 1);
                tracing::info!(subscriber = %config.arn, event = %event.id, %condition, %reason, "custom bus: gave up on an event: sent to the on-failure queue");
                return;
            }
            // The record must not be lost: the on-failure queue is retried until it takes it.
            Err(e) if wait < Duration::from_secs(30) => {
                tracing::warn!(queue = %queue, error = %e, "custom bus: the on-failure queue refused a record; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => {
                bump(&bus.counters.dropped, 1);
                tracing::error!(queue = %queue, event = %event.id, error = %e, "custom bus: the on-failure queue refused a record for 30 s: dropped");
                return;
            }
        }
    }
}
