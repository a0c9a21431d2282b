//! [`OrderingStore`] on the DynamoDB inbox table ([`Inbox`]): the ordering row and the parked
//! rows live in the inbox's own table, beside the claims (keys in `ordering/parked.rs`). Each
//! [`Step`] is rendered as one `TransactWriteItems` whose condition on the ordering row is
//! [`Step::admits`] written as a condition expression, and whose cancellation reasons are read
//! back as a [`StepAnswer`]. Source for the transaction semantics: the `TransactWriteItems` API
//! reference, <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem, Update};
use chrono::{SecondsFormat, Utc};

use super::parked::{PARKED_AT, PARKED_CONSUMER, PARKED_INDEX, PARKED_KIND};
use super::{Advance, OrderingRow, OrderingStore, ParkedEvent, ParkedList, Rows, Step, StepAnswer, PARKED_COUNT};
use crate::aws_error::{AwsError, AwsErrorKind};
use crate::envelope::EventMetadata;
use crate::inbox::{Inbox, InboxError, InboxOutcome, PayloadHash, RecordedOutcome};
use crate::transaction::{all_old, transact_write, TransactionError};

/// Most `BatchGetItem` calls one consistent read of parked rows makes while DynamoDB answers
/// `UnprocessedKeys`; then it fails (retryable), never answering "absent" for a key it could
/// not read.
pub const UNPROCESSED_KEYS_ATTEMPTS: u32 = 5;
/// First backoff step before unprocessed keys are requested again (full jitter, doubling).
const UNPROCESSED_KEYS_BACKOFF: Duration = Duration::from_millis(25);
/// Longest backoff before unprocessed keys are requested again.
const UNPROCESSED_KEYS_MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Most transactions [`OrderingStore::park`] makes while DynamoDB cancels it as retryable (a
/// `TransactionConflict` with the predecessor's own transaction on the ordering row, throttling).
pub const PARK_ATTEMPTS: u32 = 3;

/// One DynamoDB item, by attribute name.
type Item = HashMap<String, AttributeValue>;

/// A parked row as stored ([`ParkedEvent`]), `None` when it lacks a field; `payload` is empty
/// when the item comes from [`PARKED_INDEX`] (which does not project it).
pub fn parked_from_item(item: &Item) -> Option<ParkedEvent> {
    let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let num = |k: &str| item.get(k).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    Some(ParkedEvent {
        event_id: text("event_id")?,
        event_type: text("event_type").unwrap_or_default(),
        aggregate_type: text("aggregate_type")?,
        aggregate_id: text("subject")?,
        sequence: num("sequence")?,
        waits_for: num("waits_for")?,
        payload: text("payload").unwrap_or_default(),
        parked_at: text(PARKED_AT).unwrap_or_default(),
    })
}

/// The ordering row an item holds (`None`: no item).
fn ordering_row(item: Option<&Item>) -> Option<OrderingRow> {
    let text = |i: &Item, k: &str| i.get(k).and_then(|v| v.as_n().ok()).cloned();
    item.map(|i| OrderingRow::new(text(i, "last_sequence").and_then(|n| n.parse().ok()), text(i, PARKED_COUNT).and_then(|n| n.parse().ok())))
}

fn sdk<E>(
    action: &'static str,
    operation: &'static str,
    error: &aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> InboxError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    InboxError::Sdk { action, error: AwsError::from_sdk(operation, error) }
}

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Partition key of the ordering row of the aggregate: `<consumer>#aggregate#<type>#<id>`.
fn ordering_key(inbox: &Inbox, aggregate_type: &str, aggregate_id: &str) -> String {
    format!("{}#aggregate#{aggregate_type}#{aggregate_id}", inbox.consumer())
}

/// Partition key of the parked row of the aggregate's event that waits for `waits_for`:
/// `<consumer>#parked#<type>#<id>#<waits_for>`.
fn parked_key(inbox: &Inbox, aggregate_type: &str, aggregate_id: &str, waits_for: u64) -> String {
    format!("{}#parked#{aggregate_type}#{aggregate_id}#{waits_for}", inbox.consumer())
}

/// The ordering row's part of an event's transaction: [`Step::admits`] as a condition
/// expression, [`Step::advanced`] as an update expression. No `expires_at`: the row never
/// expires.
fn advance_update(inbox: &Inbox, metadata: &EventMetadata, step: Step) -> TransactWriteItem {
    const IN_SEQUENCE: &str =
        "((attribute_not_exists(last_sequence) AND :required = :zero) OR (last_sequence >= :required AND last_sequence < :seq))";
    const SET: &str = "SET last_sequence = :seq, updated_at = :now, parked_count = if_not_exists(parked_count, :zero)";
    let (update, condition) = match step.advance {
        Advance::NoneParked => (SET, format!("{IN_SEQUENCE} AND (attribute_not_exists(pk) OR parked_count = :zero)")),
        Advance::Plain => (SET, IN_SEQUENCE.to_owned()),
        Advance::Unpark(_) => {
            ("SET last_sequence = :seq, updated_at = :now ADD parked_count :minus_one", format!("{IN_SEQUENCE} AND attribute_exists(parked_count)"))
        }
    };
    let mut builder = Update::builder()
        .table_name(inbox.table())
        .key("pk", AttributeValue::S(ordering_key(inbox, &metadata.aggregate_type, &metadata.subject)))
        .update_expression(update)
        .condition_expression(condition)
        .expression_attribute_values(":seq", AttributeValue::N(step.sequence.to_string()))
        .expression_attribute_values(":required", AttributeValue::N(step.required.to_string()))
        .expression_attribute_values(":zero", AttributeValue::N("0".into()))
        .expression_attribute_values(":now", AttributeValue::S(now_text()))
        .return_values_on_condition_check_failure(all_old());
    if let Advance::Unpark(_) = step.advance {
        builder = builder.expression_attribute_values(":minus_one", AttributeValue::N("-1".into()));
    }
    let update = builder
        .build()
        // table_name, key and update_expression are set above, the only required fields.
        .expect("Update has its required fields");
    TransactWriteItem::builder().update(update).build()
}

/// The deletion of the parked row at `key` on the condition that the event `event_id` holds it.
fn delete_parked(inbox: &Inbox, key: String, event_id: &str) -> TransactWriteItem {
    let delete = Delete::builder()
        .table_name(inbox.table())
        .key("pk", AttributeValue::S(key))
        .condition_expression("event_id = :id")
        .expression_attribute_values(":id", AttributeValue::S(event_id.to_owned()))
        .build()
        // table_name and key are set above, the only required fields.
        .expect("Delete has its required fields");
    TransactWriteItem::builder().delete(delete).build()
}

/// The update adding `by` to the [`PARKED_COUNT`] of the aggregate's ordering row
/// ([`OrderingRow::counted`]): an increment creates the row when absent, with `last_sequence`
/// 0 (every ordering row then holds both attributes); a decrement only on a row that has a count.
fn count_parked(inbox: &Inbox, aggregate_type: &str, aggregate_id: &str, by: i64) -> TransactWriteItem {
    let mut update = Update::builder()
        .table_name(inbox.table())
        .key("pk", AttributeValue::S(ordering_key(inbox, aggregate_type, aggregate_id)))
        .expression_attribute_values(":by", AttributeValue::N(by.to_string()));
    update = if by < 0 {
        update.update_expression("ADD parked_count :by").condition_expression("attribute_exists(parked_count)")
    } else {
        update
            .update_expression("SET last_sequence = if_not_exists(last_sequence, :zero) ADD parked_count :by")
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
    };
    let update = update
        .build()
        // table_name, key and update_expression are set above, the only required fields.
        .expect("Update has its required fields");
    TransactWriteItem::builder().update(update).build()
}

impl Inbox {
    /// The items of partition keys `keys` (duplicates read once; at most 100, the call's limit),
    /// by key, absent ones missing: one consistent `GetItem` for one key, else one
    /// `BatchGetItem` with `ConsistentRead: true`, whose `UnprocessedKeys` (a key DynamoDB did
    /// not read, e.g. throughput exceeded on its partition) are requested again after a backoff
    /// with full jitter, up to [`UNPROCESSED_KEYS_ATTEMPTS`] calls in all. A key still
    /// unprocessed then is an error, never "absent". The SDK does not retry unprocessed keys
    /// itself: the call succeeded. Source:
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html>.
    async fn read_consistent(&self, action: &'static str, keys: &[String]) -> Result<HashMap<String, Item>, InboxError> {
        let mut pending: Vec<Item> = Vec::with_capacity(keys.len());
        for key in keys {
            let key = HashMap::from([("pk".to_owned(), AttributeValue::S(key.clone()))]);
            if !pending.contains(&key) {
                pending.push(key);
            }
        }
        let mut found = HashMap::with_capacity(pending.len());
        if let [key] = pending.as_slice() {
            let out = self.client().get_item().table_name(self.table()).set_key(Some(key.clone())).consistent_read(true).send().await;
            let out = out.map_err(|e| sdk(action, "GetItem", &e))?;
            if let Some(item) = out.item {
                found.insert(keys[0].clone(), item);
            }
            return Ok(found);
        }
        let mut attempt = 1;
        loop {
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut pending)))
                .consistent_read(true)
                .build()
                .map_err(|e| InboxError::Sdk { action, error: AwsError::construction("BatchGetItem", e.to_string()) })?;
            let out =
                self.client().batch_get_item().request_items(self.table(), request).send().await.map_err(|e| sdk(action, "BatchGetItem", &e))?;
            for item in out.responses.and_then(|mut r| r.remove(self.table())).unwrap_or_default() {
                if let Some(pk) = item.get("pk").and_then(|v| v.as_s().ok()).cloned() {
                    found.insert(pk, item);
                }
            }
            pending = out.unprocessed_keys.and_then(|mut u| u.remove(self.table())).map(|k| k.keys).unwrap_or_default();
            if pending.is_empty() {
                return Ok(found);
            }
            if attempt >= UNPROCESSED_KEYS_ATTEMPTS {
                let detail = format!("{} of {} keys still unprocessed after {attempt} calls", pending.len(), keys.len());
                return Err(InboxError::Sdk { action, error: AwsError::new("BatchGetItem", AwsErrorKind::Service, true, detail) });
            }
            tokio::time::sleep(crate::aws_error::full_jitter(UNPROCESSED_KEYS_BACKOFF, UNPROCESSED_KEYS_MAX_BACKOFF, attempt)).await;
            attempt += 1;
        }
    }
}

impl OrderingStore for Inbox {
    async fn apply_step(
        &self,
        metadata: &EventMetadata,
        payload_hash: &PayloadHash,
        writes: Vec<TransactWriteItem>,
        outcome: Option<&RecordedOutcome>,
        step: Step,
    ) -> Result<StepAnswer, InboxError> {
        let mut items = Vec::with_capacity(writes.len() + 3);
        items.push(self.claim_recording(metadata, payload_hash, Utc::now(), outcome));
        items.push(advance_update(self, metadata, step));
        if let Advance::Unpark(waits_for) = step.advance {
            // The drain read this row (the event's own, at this key) after the predecessor was
            // applied, and nothing parks behind an applied predecessor (parking needs a sequence
            // gap, and sequences only move forward), so the key holds this event's row or nothing.
            items.push(delete_parked(self, parked_key(self, &metadata.aggregate_type, &metadata.subject, waits_for), &metadata.id));
        }
        let business_offset = items.len();
        items.extend(writes);
        match transact_write(self.client(), items).await {
            Ok(()) => Ok(StepAnswer::Settled(InboxOutcome::Applied)),
            Err(TransactionError::ConditionFailed { index: 0, item }) => {
                Ok(StepAnswer::Settled(crate::inbox::claim_refused(metadata, payload_hash, item.as_ref())?))
            }
            Err(TransactionError::ConditionFailed { index: 1, item }) => Ok(StepAnswer::OrderingRefused(ordering_row(item.as_ref()))),
            Err(TransactionError::ConditionFailed { index: 2, .. }) if business_offset == 3 => Ok(StepAnswer::ParkedRowRefused),
            Err(TransactionError::ConditionFailed { index, item }) => {
                Ok(StepAnswer::Settled(InboxOutcome::BusinessConditionFailed { index: index - business_offset, item }))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// ONE transaction of the parked row's put (on the condition that the key holds no row) and
    /// the count's increment; a row the same event holds already is left as it is, counted
    /// once. A transaction cancelled as retryable is made again after a jittered backoff,
    /// [`PARK_ATTEMPTS`] in all. A payload over the 400 KB item limit fails.
    async fn park(&self, metadata: &EventMetadata, waits_for: u64, payload: &str) -> Result<bool, InboxError> {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: u64| AttributeValue::N(v.to_string());
        let put = Put::builder()
            .table_name(self.table())
            .item("pk", s(&parked_key(self, &metadata.aggregate_type, &metadata.subject, waits_for)))
            .item("kind", s(PARKED_KIND))
            // Only parked rows carry it: the partition key of the sparse PARKED_INDEX.
            .item(PARKED_CONSUMER, s(self.consumer()))
            .item("consumer", s(self.consumer()))
            .item("event_id", s(&metadata.id))
            .item("event_type", s(&metadata.event_type))
            .item("aggregate_type", s(&metadata.aggregate_type))
            .item("subject", s(&metadata.subject))
            .item("sequence", n(metadata.sequence))
            .item("waits_for", n(waits_for))
            .item("payload", s(payload))
            .item(PARKED_AT, s(&now_text()))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(all_old())
            .build()
            // table_name and item are set above, the only required fields.
            .expect("Put has its required fields");
        let count = count_parked(self, &metadata.aggregate_type, &metadata.subject, 1);
        let mut attempt = 1;
        loop {
            let items = vec![TransactWriteItem::builder().put(put.clone()).build(), count.clone()];
            match transact_write(self.client(), items).await {
                Ok(()) => return Ok(true),
                Err(TransactionError::ConditionFailed { index: 0, item }) => {
                    let holder = item.as_ref().and_then(|i| i.get("event_id")).and_then(|v| v.as_s().ok());
                    return Ok(holder == Some(&metadata.id));
                }
                Err(e) if e.is_retryable() && attempt < PARK_ATTEMPTS => {
                    tokio::time::sleep(crate::aws_error::full_jitter(UNPROCESSED_KEYS_BACKOFF, UNPROCESSED_KEYS_MAX_BACKOFF, attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// One transaction of the row's deletion (on the condition that `parked`'s event holds it)
    /// and the count's decrement; a false condition (no row of this event) deletes nothing.
    async fn unpark(&self, parked: &ParkedEvent) -> Result<(), InboxError> {
        let key = parked_key(self, &parked.aggregate_type, &parked.aggregate_id, parked.waits_for);
        let items = vec![delete_parked(self, key, &parked.event_id), count_parked(self, &parked.aggregate_type, &parked.aggregate_id, -1)];
        match transact_write(self.client(), items).await {
            Ok(()) | Err(TransactionError::ConditionFailed { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn read(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
        waits_for: &[u64],
        ordering_row_too: bool,
    ) -> impl Future<Output = Result<Rows, InboxError>> + Send {
        let mut keys: Vec<String> = waits_for.iter().map(|w| parked_key(self, aggregate_type, aggregate_id, *w)).collect();
        let ordering = ordering_key(self, aggregate_type, aggregate_id);
        if ordering_row_too {
            keys.push(ordering.clone());
        }
        async move {
            let items = self.read_consistent("read parked events", &keys).await?;
            let ordering = ordering_row(items.get(&ordering));
            let parked = items.values().filter_map(parked_from_item).collect();
            Ok(Rows::new(ordering, parked))
        }
    }

    /// A paginated `Query` of the table's sparse index [`PARKED_INDEX`] (eventually
    /// consistent; reads only parked rows, [`ParkedEvent`] explains the index).
    async fn parked_oldest(&self, limit: usize) -> Result<ParkedList, InboxError> {
        let mut list = ParkedList::default();
        let mut start = None;
        loop {
            let page = (limit - list.events.len()).clamp(1, 1000) as i32;
            let out = self
                .client()
                .query()
                .table_name(self.table())
                .index_name(PARKED_INDEX)
                .key_condition_expression("#c = :c")
                .expression_attribute_names("#c", PARKED_CONSUMER)
                .expression_attribute_values(":c", AttributeValue::S(self.consumer().to_owned()))
                .scan_index_forward(true)
                .limit(page)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk("list parked events", "Query", &e))?;
            list.events.extend(out.items().iter().filter_map(parked_from_item));
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                list.complete = true;
                return Ok(list);
            }
            if list.events.len() >= limit {
                list.events.truncate(limit);
                return Ok(list);
            }
        }
    }

    /// One conditional `UpdateItem` ([`OrderingRow::released`]), recording `released_through`
    /// and `released_at` on the row.
    async fn release_through(&self, aggregate: &str, through: u64) -> Result<u64, InboxError> {
        let n = |v: u64| AttributeValue::N(v.to_string());
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .key("pk", AttributeValue::S(format!("{}#aggregate#{aggregate}", self.consumer())))
            // The count too (0 on a row this release creates), so every ordering row has one.
            .update_expression(
                "SET last_sequence = :through, parked_count = if_not_exists(parked_count, :zero), released_through = :through, released_at = :now",
            )
            // A row parking created has a count and no sequence yet.
            .condition_expression("attribute_not_exists(last_sequence) OR last_sequence < :through")
            .expression_attribute_values(":through", n(through))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":now", AttributeValue::S(now_text()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .return_values_on_condition_check_failure(aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let last = |item: Option<&Item>| ordering_row(item).map_or(0, |r| r.last());
        match result {
            Ok(out) => Ok(last(out.attributes())),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(cfe)) => Ok(last(cfe.item())),
                _ => Err(sdk("release_through", "UpdateItem", &e)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ordering::Ordered;
    use aws_sdk_dynamodb::Client;

    use crate::fixtures::first_event as metadata;

    /// A parked row as [`OrderingStore::park`] writes it, for event `id` (sequence `sequence`, waiting
    /// for `waits_for`) of aggregate `Order#o-1`, consumer `c`.
    fn parked_row(id: &str, sequence: u64, waits_for: u64) -> Item {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let n = |v: u64| AttributeValue::N(v.to_string());
        HashMap::from([
            ("pk".to_owned(), s(&format!("c#parked#Order#o-1#{waits_for}"))),
            ("event_id".to_owned(), s(id)),
            ("event_type".to_owned(), s("OrderUpdated")),
            ("aggregate_type".to_owned(), s("Order")),
            ("subject".to_owned(), s("o-1")),
            ("sequence".to_owned(), n(sequence)),
            ("waits_for".to_owned(), n(waits_for)),
            ("payload".to_owned(), s("{}")),
        ])
    }

    /// A `BatchGetItem` that reads `table` (items by `pk`) for every key, except that the first
    /// `unprocessed_calls` calls leave every key unprocessed (throughput exceeded), answering
    /// none; it checks each request reads consistently.
    fn batch_get(table: Vec<Item>, unprocessed_calls: usize) -> aws_smithy_mocks::Rule {
        use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
        let calls = std::sync::atomic::AtomicUsize::new(0);
        aws_smithy_mocks::mock!(Client::batch_get_item).then_compute_output(move |request| {
            let asked = &request.request_items().expect("request items")["inbox"];
            assert_eq!(asked.consistent_read(), Some(true), "every read is strongly consistent");
            let keys = asked.keys().to_vec();
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < unprocessed_calls {
                let again = KeysAndAttributes::builder().set_keys(Some(keys)).consistent_read(true).build().expect("keys set");
                return BatchGetItemOutput::builder().responses("inbox", Vec::new()).unprocessed_keys("inbox", again).build();
            }
            let found: Vec<Item> = table.iter().filter(|item| keys.iter().any(|k| k.get("pk") == item.get("pk"))).cloned().collect();
            BatchGetItemOutput::builder().responses("inbox", found).set_unprocessed_keys(Some(HashMap::new())).build()
        })
    }

    fn sequenced(id: &str, sequence: u64) -> EventMetadata {
        EventMetadata { id: id.into(), sequence, ..metadata() }
    }

    /// After an ordered event's commit, its own parked copy and the event waiting for it are one
    /// consistent `BatchGetItem`; a row at the own key held by another event is not "own".
    #[tokio::test]
    async fn parked_around_reads_both_rows_in_one_consistent_batch() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let table = vec![parked_row("e-2", 2, 1), parked_row("e-3", 3, 2)];
        let rule = batch_get(table, 0);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let around = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.unwrap();
        assert_eq!(around.own.map(|p| p.event_id).as_deref(), Some("e-2"), "e-2 was parked before it was applied");
        assert_eq!(around.next.map(|p| (p.event_id, p.waits_for)), Some(("e-3".to_owned(), 2)));
        let other = inbox.parked_around(&sequenced("e-2-other-id", 2), Some(2)).await.unwrap();
        assert_eq!(other.own, None, "another event id holds the row at the own key");
        assert_eq!(rule.num_calls(), 2, "one call per applied event");
    }

    /// A key `BatchGetItem` leaves unprocessed is requested again, never taken as absent: the
    /// parked successor is found on the second call.
    #[tokio::test]
    async fn an_unprocessed_key_is_read_again_not_taken_as_absent() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let rule = batch_get(vec![parked_row("e-3", 3, 2)], 1);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let around = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.unwrap();
        assert_eq!(around.next.map(|p| p.event_id).as_deref(), Some("e-3"));
        assert_eq!(rule.num_calls(), 2);
    }

    /// Keys unprocessed through every retry fail the read (retryable): the consumer's drain
    /// then fails the invocation, and its redelivery drains; nothing is reported absent.
    #[tokio::test]
    async fn keys_unprocessed_through_every_retry_fail_the_read() {
        use aws_smithy_mocks::{mock_client, RuleMode};
        let rule = batch_get(vec![parked_row("e-3", 3, 2)], usize::MAX);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let error = inbox.parked_around(&sequenced("e-2", 2), Some(2)).await.expect_err("never read");
        assert!(error.is_retryable(), "{error}");
        assert!(error.to_string().contains("unprocessed"), "{error}");
        assert_eq!(rule.num_calls(), UNPROCESSED_KEYS_ATTEMPTS as usize);
    }

    /// A duplicate does not know the aggregate's last sequence: the batch reads the ordering row
    /// too, with the row waiting for the event's own sequence; when the ordering row has moved
    /// further, one consistent `GetItem` reads the row waiting for it.
    #[tokio::test]
    async fn a_duplicate_reads_the_ordering_row_in_the_same_batch() {
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let ordering = |last: u64| {
            let pk = AttributeValue::S("c#aggregate#Order#o-1".into());
            HashMap::from([("pk".to_owned(), pk), ("last_sequence".to_owned(), AttributeValue::N(last.to_string()))])
        };
        let rule = batch_get(vec![ordering(2), parked_row("e-3", 3, 2)], 0);
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let around = inbox.parked_around(&sequenced("e-2", 2), None).await.unwrap();
        assert_eq!((around.last, around.next.map(|p| p.event_id)), (2, Some("e-3".to_owned())));
        assert_eq!(rule.num_calls(), 1, "one call when the aggregate stands at the duplicate's sequence");

        let rule = batch_get(vec![ordering(3), parked_row("e-3", 3, 2)], 0);
        let e4 = parked_row("e-4", 4, 3);
        let get = mock!(Client::get_item)
            .match_requests(|r| {
                r.consistent_read() == Some(true)
                    && r.key().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok()).map(String::as_str) == Some("c#parked#Order#o-1#3")
            })
            .then_output(move || GetItemOutput::builder().set_item(Some(e4.clone())).build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule, &get]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let around = inbox.parked_around(&sequenced("e-2", 2), None).await.unwrap();
        assert_eq!((around.last, around.next.map(|p| p.event_id)), (3, Some("e-4".to_owned())));
        assert_eq!((rule.num_calls(), get.num_calls()), (1, 1));
    }

    /// A `TransactWriteItems` cancellation: item `failed` (0-based) `ConditionalCheckFailed` with
    /// `item` as stored (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), `None` for the others.
    fn cancelled_at(failed: usize, items: usize, item: Option<Item>) -> aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError {
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        use aws_sdk_dynamodb::types::CancellationReason;
        let reasons = (0..items)
            .map(|i| match i == failed {
                true => CancellationReason::builder().code("ConditionalCheckFailed").set_item(item.clone()).build(),
                false => CancellationReason::builder().code("None").build(),
            })
            .collect();
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
            TransactionCanceledException::builder().set_cancellation_reasons(Some(reasons)).message("Transaction cancelled").build(),
        )
    }

    fn ordering_row(last: Option<u64>, parked: Option<i64>) -> Item {
        let mut item = HashMap::from([("pk".to_owned(), AttributeValue::S("c#aggregate#Order#o-1".into()))]);
        if let Some(last) = last {
            item.insert("last_sequence".to_owned(), AttributeValue::N(last.to_string()));
        }
        if let Some(parked) = parked {
            item.insert(PARKED_COUNT.to_owned(), AttributeValue::N(parked.to_string()));
        }
        item
    }

    /// The ordering update of a transaction request (its second item).
    fn ordering_update(request: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput) -> (String, String) {
        let update = request.transact_items()[1].update().expect("the ordering row's update");
        (update.update_expression().to_owned(), update.condition_expression().unwrap_or_default().to_owned())
    }

    /// Nothing parked: ONE transaction, on the condition that the count is 0 (or the row absent),
    /// proves it; the consumer then reads nothing.
    #[tokio::test]
    async fn an_ordered_event_with_nothing_parked_is_one_transaction_that_proves_it() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let rule = mock!(Client::transact_write_items)
            .match_requests(|r| ordering_update(r).1.contains("parked_count = :zero"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let applied = inbox.apply_checking_parked(&sequenced("e-2", 2), &PayloadHash::of("h"), Vec::new(), None, None).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, true));
        assert_eq!(rule.num_calls(), 1);
    }

    /// The race the count closes: sequence 3 parked (its row and the count in one transaction)
    /// just before sequence 2's transaction. That transaction's condition is then false on the
    /// count alone (the sequence is in order): it is made again without it, and the answer is
    /// "read" (`false`), never "nothing parked" — the consumer's read then finds 3 and drains it.
    #[tokio::test]
    async fn a_park_before_the_commit_makes_the_commit_say_read() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let refused = mock!(Client::transact_write_items)
            .match_requests(|r| ordering_update(r).1.contains("parked_count = :zero"))
            .then_error(|| cancelled_at(1, 2, Some(ordering_row(Some(1), Some(1)))));
        let plain = mock!(Client::transact_write_items)
            .match_requests(|r| !ordering_update(r).1.contains("parked_count") && ordering_update(r).0.contains("if_not_exists(parked_count"))
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&refused, &plain]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        let applied = inbox.apply_checking_parked(&sequenced("e-2", 2), &PayloadHash::of("h"), Vec::new(), None, None).await.unwrap();
        assert_eq!(applied, (InboxOutcome::Applied, false));
        assert_eq!((refused.num_calls(), plain.num_calls()), (1, 1));
    }

    /// The count's condition never hides a gap or a duplicate: a refusal whose stored sequence is
    /// out of order is reported as before, in one transaction.
    #[tokio::test]
    async fn a_gap_or_a_duplicate_under_the_count_condition_is_reported_as_before() {
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        for (last, sequence) in [(Some(1), 3), (Some(5), 3), (None, 2)] {
            let rule = mock!(Client::transact_write_items).then_error(move || cancelled_at(1, 2, Some(ordering_row(last, Some(0)))));
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
            let applied = inbox.apply_checking_parked(&sequenced("e", sequence), &PayloadHash::of("h"), Vec::new(), None, None).await;
            match last {
                Some(5) => assert_eq!(applied.unwrap(), (InboxOutcome::Duplicate, false)),
                _ => assert!(matches!(applied, Err(InboxError::SequenceGap { .. })), "{applied:?}"),
            }
            assert_eq!(rule.num_calls(), 1);
        }
    }

    /// The drain's event deletes its parked row and takes it off the count in its own
    /// transaction; when the key holds no row of this event (gone, or another event's), the
    /// event commits without touching it or the count (two transactions), and the row stays for
    /// the drain or the parked check.
    #[tokio::test]
    async fn the_drain_deletes_its_row_with_the_count_and_leaves_a_row_that_is_not_its_own() {
        use aws_sdk_dynamodb::operation::transact_write_items::{TransactWriteItemsInput, TransactWriteItemsOutput};
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let delete_condition = |r: &TransactWriteItemsInput| {
            r.transact_items().get(2).and_then(|i| i.delete()).and_then(|d| d.condition_expression()).unwrap_or_default().to_owned()
        };
        let unparking = move |r: &TransactWriteItemsInput| {
            delete_condition(r) == "event_id = :id" && ordering_update(r).0.contains("ADD parked_count :minus_one")
        };
        let plain = |r: &TransactWriteItemsInput| r.transact_items().len() == 2 && !ordering_update(r).0.contains("ADD");
        for (own_row, calls) in [(true, (1, 0)), (false, (1, 1))] {
            let first = mock!(Client::transact_write_items).match_requests(unparking);
            let first = match own_row {
                true => first.then_output(|| TransactWriteItemsOutput::builder().build()),
                false => first.then_error(|| cancelled_at(2, 3, None)),
            };
            let second = mock!(Client::transact_write_items).match_requests(plain).then_output(|| TransactWriteItemsOutput::builder().build());
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&first, &second]);
            let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
            let drained = RecordedOutcome::new("applied");
            let applied =
                inbox.apply_checking_parked(&sequenced("e-3", 3), &PayloadHash::of("h"), Vec::new(), Some(&drained), Some(2)).await.unwrap();
            assert_eq!(applied, (InboxOutcome::Applied, false));
            assert_eq!((first.num_calls(), second.num_calls()), calls, "own row: {own_row}");
        }
    }

    /// Parking is one transaction of the row and the count; a `TransactionConflict` (the
    /// predecessor's transaction on the ordering row) is made again; the same event parked again
    /// is not counted twice; another event id at the key is "not parked".
    #[tokio::test]
    async fn parking_counts_once_and_survives_a_conflict_with_the_predecessor() {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_smithy_mocks::{mock, mock_client, RuleMode};
        let conflict = || {
            let reasons = vec![CancellationReason::builder().code("None").build(), CancellationReason::builder().code("TransactionConflict").build()];
            aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(
                TransactionCanceledException::builder().set_cancellation_reasons(Some(reasons)).message("Transaction cancelled").build(),
            )
        };
        let is_park = |r: &aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput| {
            r.transact_items().len() == 2
                && r.transact_items()[0].put().is_some_and(|p| p.item().get("kind") == Some(&AttributeValue::S(PARKED_KIND.into())))
                && r.transact_items()[1].update().is_some_and(|u| u.update_expression().contains("ADD parked_count :by"))
        };
        let first = mock!(Client::transact_write_items).match_requests(is_park).then_error(conflict);
        let second = mock!(Client::transact_write_items).match_requests(is_park).then_output(|| TransactWriteItemsOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&first, &second]);
        let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
        assert!(inbox.park(&sequenced("e-3", 3), 2, "{}").await.unwrap());
        assert_eq!((first.num_calls(), second.num_calls()), (1, 1));

        for (holder, parked) in [("e-3", true), ("e-3-other", false)] {
            let row = parked_row(holder, 3, 2);
            let rule = mock!(Client::transact_write_items).then_error(move || cancelled_at(0, 2, Some(row.clone())));
            let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&rule]);
            let inbox = Ordered::new(Inbox::new(client, "inbox", "c", Duration::from_secs(60)));
            assert_eq!(inbox.park(&sequenced("e-3", 3), 2, "{}").await.unwrap(), parked, "row held by {holder}");
            assert_eq!(rule.num_calls(), 1, "no second count");
        }
    }
}
