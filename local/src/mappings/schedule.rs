//! EventBridge schedule rules → SQS queues, played locally: moto stores a rule with a
//! `ScheduleExpression` but never fires it, so the runtime sends each target queue the target's
//! constant `Input` every period ([`outbox_template::stack::ScheduledSend`]; e.g. the consumer kit's
//! parked check, `{"outbox":"check-parked",…}` to the consumer's delivery queue every 5 minutes).
//!
//! As on AWS, the first send comes one period after the start, not at once, and the period is
//! played in real time even when the runtime compresses retry waits: a schedule is not a retry
//! wait, and a check message every second would add invocations to every test's counts. A test
//! that wants a check sends the message itself (`ParkedCheck::message`).

use std::time::Duration;

use tokio::sync::watch;

use outbox_template::stack::ScheduledSend;

/// Sends `send.input` to `send.queue` every period until `shutdown` is true.
pub async fn run(sqs: aws_sdk_sqs::Client, send: ScheduledSend, mut shutdown: watch::Receiver<bool>) {
    // At least a second: a zero period would make `interval` panic.
    let period = send.period.max(Duration::from_secs(1));
    tracing::debug!(schedule = %send.name, period_ms = period.as_millis() as u64, queue = %send.queue.name, "playing a schedule rule");
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !*shutdown.borrow() {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => break,
        }
        if let Err(e) = sqs.send_message().queue_url(&send.queue.url).message_body(&send.input).send().await {
            // EventBridge would retry within the target's RetryPolicy; the next period sends again.
            tracing::warn!(schedule = %send.name, queue = %send.queue.name, error = %aws_sdk_sqs::error::DisplayErrorContext(e), "schedule send failed");
        }
    }
}
