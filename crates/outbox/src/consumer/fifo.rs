//! Lambda's rule for a batch from an SQS **FIFO** queue with `ReportBatchItemFailures`: after a
//! message fails, the later messages of its message group are not processed but reported failed
//! with it, so SQS hands them back, in order, behind it.
//!
//! The Lambda developer guide ("Handling errors for an SQS event source in Lambda",
//! services-sqs-errorhandling) says: "If you're using this feature with a FIFO queue, your
//! function should stop processing messages after the first failure and return all failed and
//! unprocessed messages in `batchItemFailures`. This helps preserve the ordering of messages in
//! your queue." SQS orders a FIFO queue **per message group** only ("messages that belong to the
//! same message group are always processed one by one, in a strict order relative to the message
//! group", SQS developer guide, "Amazon SQS FIFO queue key terms"), and Lambda deletes every
//! message not reported. So the rule is applied per message group (`attributes.MessageGroupId`):
//! a failure stops its own group only, which keeps each group's order exactly as stopping the
//! batch would, without handing back other groups' messages, whose every extra receive counts
//! towards the queue's `maxReceiveCount` and would dead-letter them without their ever failing
//! (one failing aggregate would push its batch neighbours towards the dead-letter queue). A
//! FIFO message without a `MessageGroupId` stops the whole rest of the batch (Lambda's words
//! taken literally). A message from a standard queue is never stopped.
//!
//! A record is from a FIFO queue when its `eventSourceARN` ends in `.fifo` (a FIFO queue's name
//! must end in `.fifo`: SQS API reference, CreateQueue, `QueueName`).

use std::collections::HashSet;

/// Where a record stands towards the FIFO rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fifo<'a> {
    /// From a standard queue: no order to keep.
    Standard,
    /// From a FIFO queue, in this message group.
    Group(&'a str),
    /// From a FIFO queue, without a `MessageGroupId` (not a Lambda event as AWS sends it): its
    /// failure stops the whole rest of the batch.
    UnknownGroup,
}

impl<'a> Fifo<'a> {
    /// Classifies a record by its `eventSourceARN` and `attributes.MessageGroupId`.
    pub(crate) fn of(event_source_arn: Option<&str>, message_group_id: Option<&'a str>) -> Self {
        if !event_source_arn.is_some_and(|arn| arn.ends_with(".fifo")) {
            return Fifo::Standard;
        }
        match message_group_id {
            Some(group) if !group.is_empty() => Fifo::Group(group),
            _ => Fifo::UnknownGroup,
        }
    }
}

/// The message groups of one batch stopped by a failure, as the batch is handled in order.
#[derive(Debug, Default)]
pub(crate) struct Stops {
    groups: HashSet<String>,
    all: bool,
}

impl Stops {
    /// Whether a record must not be processed (a message before it in its group failed): it is
    /// reported failed with them.
    pub(crate) fn stopped(&self, fifo: Fifo<'_>) -> bool {
        match fifo {
            Fifo::Standard => false,
            Fifo::Group(group) => self.all || self.groups.contains(group),
            Fifo::UnknownGroup => self.all,
        }
    }

    /// Records that a record failed (or was not attempted): the later messages of its group
    /// stop too.
    pub(crate) fn failed(&mut self, fifo: Fifo<'_>) {
        match fifo {
            Fifo::Standard => {}
            Fifo::Group(group) => {
                self.groups.insert(group.to_owned());
            }
            Fifo::UnknownGroup => self.all = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIFO: Option<&str> = Some("arn:aws:sqs:us-east-1:123456789012:delivery.fifo");

    #[test]
    fn a_record_is_fifo_by_its_source_arn() {
        assert_eq!(Fifo::of(Some("arn:aws:sqs:us-east-1:123456789012:delivery"), Some("g")), Fifo::Standard);
        assert_eq!(Fifo::of(None, Some("g")), Fifo::Standard);
        assert_eq!(Fifo::of(FIFO, Some("Order#o-1")), Fifo::Group("Order#o-1"));
        assert_eq!(Fifo::of(FIFO, None), Fifo::UnknownGroup);
        assert_eq!(Fifo::of(FIFO, Some("")), Fifo::UnknownGroup);
    }

    #[test]
    fn a_failure_stops_its_own_group_only() {
        let mut stops = Stops::default();
        stops.failed(Fifo::Group("a"));
        assert!(stops.stopped(Fifo::Group("a")));
        assert!(!stops.stopped(Fifo::Group("b")));
        assert!(!stops.stopped(Fifo::UnknownGroup));
        assert!(!stops.stopped(Fifo::Standard));
    }

    #[test]
    fn a_failure_without_a_group_stops_every_fifo_record_after_it() {
        let mut stops = Stops::default();
        stops.failed(Fifo::Standard);
        assert!(!stops.stopped(Fifo::Group("a")), "a standard queue's failure stops nothing");
        stops.failed(Fifo::UnknownGroup);
        assert!(stops.stopped(Fifo::Group("a")));
        assert!(stops.stopped(Fifo::UnknownGroup));
        assert!(!stops.stopped(Fifo::Standard));
    }
}
