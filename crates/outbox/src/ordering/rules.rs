//! The ordering rules as data: an ordering row ([`OrderingRow`]) and what one event's
//! transaction asks of it ([`Step`]). [`Step::admits`] is the condition every store evaluates
//! (the DynamoDB table renders it as a condition expression, the in-memory store calls it) and
//! [`Step::advanced`] the row it leaves; [`Ordered`](super::Ordered) decides which step to try
//! and what a refusal means.

/// The ordering row's count of the aggregate's parked rows: parking adds one in the
/// transaction that puts the parked row, every deletion of a parked row takes one off in its
/// own, so the count is exact and "0" proves that nothing is parked.
pub const PARKED_COUNT: &str = "parked_count";

/// One aggregate's ordering row as stored (`<consumer>#aggregate#<type>#<id>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct OrderingRow {
    /// The sequence of the last event applied or released (`None`: parking created the row and
    /// no event was applied yet; read as 0).
    pub last_sequence: Option<u64>,
    /// [`PARKED_COUNT`] (`None` only on a row no store wrote: parking, every commit and an
    /// operator's release all write it).
    pub parked_count: Option<i64>,
}

impl OrderingRow {
    /// A row (for stores and tests).
    pub fn new(last_sequence: Option<u64>, parked_count: Option<i64>) -> Self {
        Self { last_sequence, parked_count }
    }

    /// `last_sequence`, 0 when absent.
    pub fn last(&self) -> u64 {
        self.last_sequence.unwrap_or(0)
    }

    /// The row after parking one more event (`by` 1) or unparking one (`by` -1). A decrement
    /// needs a count (`None`: refused).
    pub fn counted(row: Option<&OrderingRow>, by: i64) -> Option<OrderingRow> {
        let count = row.and_then(|r| r.parked_count);
        if by < 0 && count.is_none() {
            return None;
        }
        let last_sequence = row.and_then(|r| r.last_sequence).or(Some(0));
        Some(OrderingRow { last_sequence, parked_count: Some(count.unwrap_or(0) + by) })
    }

    /// The row after an operator's release through `through` (never down), with a count (0 on a
    /// row the release creates): `None` when the row stands at or beyond it already.
    pub fn released(row: Option<&OrderingRow>, through: u64) -> Option<OrderingRow> {
        match row.and_then(|r| r.last_sequence) {
            Some(last) if last >= through => None,
            _ => Some(OrderingRow { last_sequence: Some(through), parked_count: Some(row.and_then(|r| r.parked_count).unwrap_or(0)) }),
        }
    }
}

/// How an ordered event's transaction treats the aggregate's ordering row besides moving its
/// sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advance {
    /// Also on the condition that nothing is parked on the aggregate (no row, or
    /// [`PARKED_COUNT`] 0): a commit then proves it, and no read follows.
    NoneParked,
    /// The sequence condition alone; a row without a count gets one (0).
    Plain,
    /// The drain's event, settling its parked row, which waits for this sequence: the row is
    /// deleted on the condition that this event holds it, and the count goes down by one.
    Unpark(u64),
}

/// What one event's transaction asks of its aggregate's ordering row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// The sequence the row must have reached ([`Ordered::required_predecessor`](super::Ordered::required_predecessor)).
    pub required: u64,
    /// The event's sequence: the row must stand below it, and moves to it.
    pub sequence: u64,
    /// What else the transaction does with the row.
    pub advance: Advance,
}

impl Step {
    /// The sequence part of the condition: `last_sequence` in `[required, sequence − 1]`, an
    /// absent one counting as 0 (`(attribute_not_exists(last_sequence) AND :required = 0) OR
    /// (last_sequence >= :required AND last_sequence < :seq)`).
    pub fn in_sequence(&self, row: Option<&OrderingRow>) -> bool {
        match row.and_then(|r| r.last_sequence) {
            None => self.required == 0,
            Some(last) => last >= self.required && last < self.sequence,
        }
    }

    /// The whole condition on the ordering row: [`Step::in_sequence`], and for
    /// [`Advance::NoneParked`] no row or a count of 0, for [`Advance::Unpark`] a row with a
    /// count. (The parked row's own condition, `event_id` = the event's, is the store's.)
    pub fn admits(&self, row: Option<&OrderingRow>) -> bool {
        self.in_sequence(row)
            && match self.advance {
                Advance::NoneParked => row.is_none_or(|r| r.parked_count == Some(0)),
                Advance::Plain => true,
                Advance::Unpark(_) => row.is_some_and(|r| r.parked_count.is_some()),
            }
    }

    /// The row this step leaves when it commits.
    pub fn advanced(&self, row: Option<&OrderingRow>) -> OrderingRow {
        let count = row.and_then(|r| r.parked_count).unwrap_or(0);
        let count = match self.advance {
            Advance::Unpark(_) => count - 1,
            Advance::NoneParked | Advance::Plain => count,
        };
        OrderingRow { last_sequence: Some(self.sequence), parked_count: Some(count) }
    }
}

/// What a store answers to one step ([`OrderingStore::apply_step`](super::OrderingStore::apply_step)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StepAnswer {
    /// The transaction committed, or the claim or a business write decided it.
    Settled(crate::inbox::InboxOutcome),
    /// The ordering row's condition ([`Step::admits`]) was false; the row as stored.
    OrderingRefused(Option<OrderingRow>),
    /// [`Advance::Unpark`]: the key holds no row of this event.
    ParkedRowRefused,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(required: u64, sequence: u64, advance: Advance) -> Step {
        Step { required, sequence, advance }
    }

    #[test]
    fn the_condition_reads_absent_values_as_the_table_does() {
        let row = |last, count| Some(OrderingRow::new(last, count));
        assert!(step(0, 1, Advance::NoneParked).admits(None));
        assert!(!step(1, 2, Advance::NoneParked).admits(None), "a missing predecessor");
        assert!(step(0, 1, Advance::NoneParked).admits(row(None, Some(0)).as_ref()), "a row parking created");
        assert!(!step(1, 2, Advance::NoneParked).admits(row(Some(1), Some(1)).as_ref()), "something parked");
        assert!(step(1, 2, Advance::Plain).admits(row(Some(1), Some(1)).as_ref()));
        assert!(!step(1, 2, Advance::Plain).admits(row(Some(2), Some(0)).as_ref()), "a duplicate");
        assert!(!step(1, 2, Advance::Unpark(1)).admits(row(Some(1), None).as_ref()), "no count to take off");
        assert_eq!(step(1, 2, Advance::Unpark(1)).advanced(row(Some(1), Some(1)).as_ref()), OrderingRow::new(Some(2), Some(0)));
        assert_eq!(OrderingRow::counted(None, 1), Some(OrderingRow::new(Some(0), Some(1))));
        assert_eq!(OrderingRow::counted(row(Some(3), None).as_ref(), -1), None);
        assert_eq!(OrderingRow::released(row(Some(3), Some(1)).as_ref(), 2), None, "never down");
        assert_eq!(OrderingRow::released(row(None, Some(1)).as_ref(), 2), Some(OrderingRow::new(Some(2), Some(1))));
    }
}
