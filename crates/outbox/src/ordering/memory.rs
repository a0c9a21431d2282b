//! [`OrderingStore`] on the in-memory store ([`MemoryInbox`]): rows in a map, each step's
//! condition evaluated by [`Step::admits`] (the rule the DynamoDB table renders as a condition
//! expression), so [`Ordered`](super::Ordered)'s rules run on it unchanged. Test helpers to
//! look at and age parked rows, and to fail reads and deletions, are here too.

use std::future::Future;

use aws_sdk_dynamodb::types::TransactWriteItem;
use chrono::{DateTime, Utc};

use super::{OrderingRow, OrderingStore, ParkedEvent, ParkedList, Rows, Step, StepAnswer};
use crate::envelope::EventMetadata;
use crate::inbox::{InboxError, MemoryInbox, PayloadHash, RecordedOutcome};
use crate::transaction::TransactionError;

impl MemoryInbox {
    /// Operator release ([`OrderingStore::release_through`]) in one call: moves the aggregate's
    /// (`<aggregate_type>#<aggregate_id>`) last sequence up to `through`; returns the one before.
    pub fn release_through_now(&self, aggregate: &str, through: u64) -> u64 {
        let mut state = self.lock();
        let row = state.ordering.get(aggregate).copied();
        if let Some(released) = OrderingRow::released(row.as_ref(), through) {
            state.ordering.insert(aggregate.to_owned(), released);
        }
        row.map_or(0, |r| r.last())
    }

    /// The aggregate's (`<aggregate_type>#<aggregate_id>`) last applied or released sequence.
    pub fn last_sequence_of(&self, aggregate: &str) -> Option<u64> {
        self.lock().ordering.get(aggregate).and_then(|r| r.last_sequence)
    }

    /// The aggregate's ordering row, as stored.
    pub fn ordering_row(&self, aggregate: &str) -> Option<OrderingRow> {
        self.lock().ordering.get(aggregate).copied()
    }

    /// The events parked now (waiting for their predecessor), in no particular order.
    pub fn parked_events(&self) -> Vec<ParkedEvent> {
        self.lock().parked.values().cloned().collect()
    }

    /// Moves the `parked_at` of parked event `event_id` back by `age` (to test the parked
    /// check and gap listings without waiting). Returns whether it was parked.
    pub fn backdate_parked(&self, event_id: &str, age: std::time::Duration) -> bool {
        let mut state = self.lock();
        let Some(parked) = state.parked.values_mut().find(|p| p.event_id == event_id) else { return false };
        let at = DateTime::parse_from_rfc3339(&parked.parked_at).map(|t| t.with_timezone(&Utc)).unwrap_or_else(|_| Utc::now());
        let back = chrono::Duration::from_std(age).ok().and_then(|age| at.checked_sub_signed(age)).unwrap_or(at);
        parked.parked_at = back.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        true
    }

    /// Makes the next `n` separate `unpark` calls fail (a throttled `DeleteItem`, or the
    /// invocation crashing right after the transaction that settled the parked event).
    pub fn fail_next_unparks(&self, n: usize) -> &Self {
        self.lock().unparks_to_fail = n;
        self
    }

    /// Makes the next `n` reads of one parked row (the drain's read of what waits behind an
    /// event it applied) fail (a throttled `GetItem`, or the invocation crashing right after the
    /// transaction before it).
    pub fn fail_next_parked_reads(&self, n: usize) -> &Self {
        self.lock().parked_reads_to_fail = n;
        self
    }
}

impl OrderingStore for MemoryInbox {
    fn apply_step(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        step: Step,
    ) -> impl Future<Output = Result<StepAnswer, InboxError>> + Send {
        std::future::ready(self.apply_now(metadata, payload_hash, writes, outcome, Some(step)))
    }

    fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> impl Future<Output = Result<bool, InboxError>> + Send {
        let aggregate = format!("{}#{}", metadata.aggregate_type, metadata.subject);
        let key = format!("{aggregate}#{waits_for}");
        let mut state = self.lock();
        if let Some(held) = state.parked.get(&key) {
            return std::future::ready(Ok(held.event_id == metadata.id));
        }
        let at = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let parked = ParkedEvent::new(
            &metadata.id,
            &metadata.event_type,
            &metadata.aggregate_type,
            &metadata.subject,
            metadata.sequence,
            waits_for,
            payload,
            at,
        );
        // An increment always has a row to give (OrderingRow::counted refuses decrements only).
        if let Some(row) = OrderingRow::counted(state.ordering.get(&aggregate), 1) {
            state.ordering.insert(aggregate, row);
        }
        state.parked.insert(key, parked);
        std::future::ready(Ok(true))
    }

    fn unpark(&self, parked: &ParkedEvent) -> impl Future<Output = Result<(), InboxError>> + Send {
        let aggregate = parked.aggregate();
        let key = format!("{aggregate}#{}", parked.waits_for);
        let mut state = self.lock();
        if state.unparks_to_fail > 0 {
            state.unparks_to_fail -= 1;
            let injected = crate::aws_error::AwsError::cancelled(&["ThrottlingException (injected)".to_owned()], true, None, None);
            return std::future::ready(Err(InboxError::Transaction(TransactionError::Retryable(injected))));
        }
        if state.parked.get(&key).is_some_and(|p| p.event_id == parked.event_id) {
            if let Some(row) = OrderingRow::counted(state.ordering.get(&aggregate), -1) {
                state.parked.remove(&key);
                state.ordering.insert(aggregate, row);
            }
        }
        std::future::ready(Ok(()))
    }

    fn read(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: &[u64],
        ordering_row: bool,
    ) -> impl Future<Output = Result<Rows, InboxError>> + Send {
        let aggregate = format!("{aggregate_type}#{aggregate_id}");
        let mut state = self.lock();
        if waits_for.len() == 1 && !ordering_row && state.parked_reads_to_fail > 0 {
            state.parked_reads_to_fail -= 1;
            let injected = crate::aws_error::AwsError::service("GetItem", "ThrottlingException", "injected", 400);
            return std::future::ready(Err(InboxError::Sdk { action: "read parked", error: injected }));
        }
        let mut parked: Vec<ParkedEvent> = Vec::new();
        for w in waits_for {
            if let Some(p) = state.parked.get(&format!("{aggregate}#{w}")) {
                if !parked.contains(p) {
                    parked.push(p.clone());
                }
            }
        }
        let ordering = ordering_row.then(|| state.ordering.get(&aggregate).copied()).flatten();
        std::future::ready(Ok(Rows::new(ordering, parked)))
    }

    /// As the DynamoDB index answers: oldest first, without the payload.
    fn parked_oldest(&self, limit: usize) -> impl Future<Output = Result<ParkedList, InboxError>> + Send {
        let mut events: Vec<ParkedEvent> = self.lock().parked.values().cloned().map(|p| ParkedEvent { payload: String::new(), ..p }).collect();
        events.sort_by(|a, b| a.parked_at.cmp(&b.parked_at));
        let complete = events.len() <= limit;
        events.truncate(limit);
        std::future::ready(Ok(ParkedList { events, complete }))
    }

    fn release_through(&self, aggregate: &str, through: u64) -> impl Future<Output = Result<u64, InboxError>> + Send {
        std::future::ready(Ok(self.release_through_now(aggregate, through)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::{InboxOutcome, InboxStore, Injected};
    use crate::ordering::Ordered;

    use crate::fixtures::metadata;

    #[tokio::test]
    async fn duplicates_mismatches_ordering_and_injected_answers() {
        let inbox = Ordered::new(MemoryInbox::new("c"));
        assert_eq!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
        assert_eq!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
        assert!(matches!(inbox.apply(&metadata("e-1", 1), &PayloadHash::of("x"), vec![]).await, Err(InboxError::PayloadMismatch { .. })));
        assert!(matches!(
            inbox.apply(&metadata("e-3", 3), &PayloadHash::of("h"), vec![]).await,
            Err(InboxError::SequenceGap { expected: 2, got: 3, .. })
        ));
        inbox.store().fail_next(Injected::ConditionFailed { index: 1 }).fail_next(Injected::Conflict);
        assert_eq!(
            inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap(),
            InboxOutcome::BusinessConditionFailed { index: 1, item: None }
        );
        let err = inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap_err();
        assert!(err.is_retryable(), "{err}");
        assert_eq!(inbox.apply(&metadata("e-2", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
        assert_eq!(inbox.apply(&metadata("e-2-again", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
        assert_eq!(inbox.store().applied().iter().map(|a| a.event_id.as_str()).collect::<Vec<_>>(), ["e-1", "e-2"]);
    }
}
