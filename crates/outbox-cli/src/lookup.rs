//! Finding items the way a production table allows: by key, by the outbox table's event-id
//! index, and — only where no key or index leads to the data — by a bounded, announced `Scan`.
//!
//! * **The event-id index.** The outbox table's key is the aggregate and the sequence
//!   (`pk`, `sk`), so an event id alone leads to no item. The templates give the table a global
//!   secondary index whose partition key is `event_id`, projecting the keys only (`KEYS_ONLY`):
//!   it is *sparse* (only items with an `event_id`, the outbox items, are in it), and each
//!   outbox item written costs one more write to the index (its keys and event id, well under
//!   1 KB: one write request unit on demand); a TTL deletion removes the index entry with the
//!   item, and TTL deletions are free. [`event_id_index`] finds the index by its key schema
//!   (`DescribeTable`), whatever its name; [`by_event_id`] is one `Query` of it and one
//!   consistent `GetItem` of the item it names. Sources:
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html> (writes to
//!   an index, sparse indexes), <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html>.
//! * **Bounded scans** ([`scan`]): a `Scan` reads every item of the table, whatever its filter
//!   (a filter only drops items after they were read and paid for:
//!   <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Scan.html>). Where the
//!   data has no key to query by (what a subscriber missed since a time; parked events in an
//!   inbox table without the parked index, [`crate::ordering`]),
//!   the verbs scan, say so, report their progress, and stop after `limit` items read, saying
//!   where they stopped.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, KeyType};

use crate::{Error, Result};

/// One DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// The attribute the outbox table's event-id index is keyed by.
pub const EVENT_ID: &str = "event_id";

/// What [`by_event_id`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum ById {
    /// The outbox item with that event id.
    Found(Item),
    /// The index has no entry for it: never written to this table, or expired.
    Absent,
    /// The table has no global secondary index keyed by `event_id`.
    NoIndex,
}

/// The name of `table`'s global secondary index whose partition key is `event_id`, if it has one.
///
/// # Errors
/// [`Error::Aws`]: `DescribeTable` failed.
pub async fn event_id_index(dynamodb: &aws_sdk_dynamodb::Client, table: &str) -> Result<Option<String>> {
    index_keyed_by(dynamodb, table, EVENT_ID).await
}

/// The name of `table`'s global secondary index whose partition key is `attribute`, if it has
/// one (one `DescribeTable`).
///
/// # Errors
/// [`Error::Aws`]: `DescribeTable` failed.
pub async fn index_keyed_by(dynamodb: &aws_sdk_dynamodb::Client, table: &str, attribute: &str) -> Result<Option<String>> {
    let described = dynamodb.describe_table().table_name(table).send().await.map_err(Error::aws(format!("DescribeTable {table}")))?;
    let indexes = described.table().map(|t| t.global_secondary_indexes()).unwrap_or_default();
    Ok(indexes
        .iter()
        .find(|index| index.key_schema().iter().any(|k| k.key_type() == &KeyType::Hash && k.attribute_name() == attribute))
        .and_then(|index| index.index_name().map(str::to_owned)))
}

/// The outbox item of `table` whose `event_id` is `event_id`: one `Query` of the event-id
/// index ([`event_id_index`]), then one consistent `GetItem` of the item it names (the index
/// holds the keys only, and is eventually consistent).
///
/// # Errors
/// [`Error::Aws`]: a call failed.
pub async fn by_event_id(dynamodb: &aws_sdk_dynamodb::Client, table: &str, event_id: &str) -> Result<ById> {
    let Some(index) = event_id_index(dynamodb, table).await? else { return Ok(ById::NoIndex) };
    let answer = dynamodb
        .query()
        .table_name(table)
        .index_name(&index)
        .key_condition_expression("#id = :id")
        .expression_attribute_names("#id", EVENT_ID)
        .expression_attribute_values(":id", AttributeValue::S(event_id.to_owned()))
        .limit(1)
        .send()
        .await
        .map_err(Error::aws(format!("Query {table} index {index}")))?;
    let Some(keys) = answer.items().first() else { return Ok(ById::Absent) };
    let key: Item = keys.iter().filter(|(name, _)| name.as_str() != EVENT_ID).map(|(k, v)| (k.clone(), v.clone())).collect();
    let item = get(dynamodb, table, key).await?;
    Ok(item.filter(|i| text(i, EVENT_ID).as_deref() == Some(event_id)).map_or(ById::Absent, ById::Found))
}

/// One item by its whole key, read consistently.
///
/// # Errors
/// [`Error::Aws`]: `GetItem` failed.
pub async fn get(dynamodb: &aws_sdk_dynamodb::Client, table: &str, key: Item) -> Result<Option<Item>> {
    let answer = dynamodb.get_item().table_name(table).set_key(Some(key)).consistent_read(true).send().await;
    Ok(answer.map_err(Error::aws(format!("GetItem on {table}")))?.item)
}

/// The string attribute `name` of `item`.
pub fn text(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// A bounded, filtered `Scan`.
#[derive(Debug, Clone, Default)]
pub struct ScanRequest<'a> {
    /// The table.
    pub table: &'a str,
    /// A global secondary index of the table to scan instead (a sparse index reads only the
    /// items it holds; no consistent reads).
    pub index: Option<&'a str>,
    /// The filter expression (empty: none) (`#a`-style names in `names`, `:v`-style values in `values`).
    pub filter: &'a str,
    /// Expression attribute names.
    pub names: Vec<(&'a str, &'a str)>,
    /// Expression attribute values.
    pub values: Vec<(&'a str, AttributeValue)>,
    /// Stop after this many items read (DynamoDB's `ScannedCount`, what a scan costs); `None`:
    /// the whole table.
    pub limit: Option<u64>,
    /// Stop at the first item the filter keeps.
    pub first_only: bool,
    /// Strongly consistent reads.
    pub consistent: bool,
}

/// What a [`scan`] read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scanned {
    /// The items the filter kept.
    pub items: Vec<Item>,
    /// Items read (and paid for).
    pub read: u64,
    /// Whether the whole table was read (false: stopped at the limit, or at the first match).
    pub complete: bool,
}

/// Items read per `Scan` page at most (DynamoDB also stops a page at 1 MB).
const PAGE: u64 = 1_000;

/// Scans `request.table` page by page, calling `progress(read, kept)` after each page, until
/// the table ends, `limit` items were read, or (with `first_only`) an item is kept.
///
/// # Errors
/// [`Error::Aws`]: a `Scan` page failed.
pub async fn scan(dynamodb: &aws_sdk_dynamodb::Client, request: &ScanRequest<'_>, mut progress: impl FnMut(u64, usize)) -> Result<Scanned> {
    let mut scanned = Scanned::default();
    let mut start: Option<Item> = None;
    loop {
        let page = request.limit.map_or(PAGE, |limit| limit.saturating_sub(scanned.read).min(PAGE));
        if page == 0 {
            return Ok(scanned);
        }
        let mut call = dynamodb
            .scan()
            .table_name(request.table)
            .set_index_name(request.index.map(str::to_owned))
            .set_filter_expression(Some(request.filter.to_owned()).filter(|f| !f.is_empty()))
            .consistent_read(request.consistent && request.index.is_none())
            .limit(i32::try_from(page).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start.take());
        for (name, attribute) in &request.names {
            call = call.expression_attribute_names(*name, *attribute);
        }
        for (name, value) in &request.values {
            call = call.expression_attribute_values(*name, value.clone());
        }
        let answer = call.send().await.map_err(Error::aws(format!("Scan on {}", request.table)))?;
        scanned.read += u64::try_from(answer.scanned_count()).unwrap_or(0);
        scanned.items.extend(answer.items().iter().cloned());
        progress(scanned.read, scanned.items.len());
        start = answer.last_evaluated_key().cloned().filter(|k| !k.is_empty());
        if start.is_none() {
            scanned.complete = true;
            return Ok(scanned);
        }
        if request.first_only && !scanned.items.is_empty() {
            return Ok(scanned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_sdk_dynamodb::operation::scan::ScanOutput;
    use aws_sdk_dynamodb::types::{GlobalSecondaryIndexDescription, KeySchemaElement, TableDescription};
    use aws_smithy_mocks::{mock, mock_client, RuleMode};

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn described(index_key: &str) -> DescribeTableOutput {
        let key = KeySchemaElement::builder().attribute_name(index_key).key_type(KeyType::Hash).build().expect("a key element");
        let index = GlobalSecondaryIndexDescription::builder().index_name("by-event-id").key_schema(key).build();
        DescribeTableOutput::builder().table(TableDescription::builder().table_name("s-outbox").global_secondary_indexes(index).build()).build()
    }

    #[tokio::test]
    async fn an_event_id_is_one_query_of_the_index_and_one_get_of_the_item() {
        let describe = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| described(EVENT_ID));
        let query = mock!(aws_sdk_dynamodb::Client::query)
            .match_requests(|r| {
                r.index_name() == Some("by-event-id") && r.expression_attribute_values().and_then(|v| v.get(":id")) == Some(&s("e-1"))
            })
            .then_output(|| {
                QueryOutput::builder().items([("pk".into(), s("Order#o-1")), ("sk".into(), s("1")), (EVENT_ID.into(), s("e-1"))].into()).build()
            });
        let get = mock!(aws_sdk_dynamodb::Client::get_item)
            .match_requests(|r| r.consistent_read() == Some(true) && r.key().is_some_and(|k| k.len() == 2 && k.get("pk") == Some(&s("Order#o-1"))))
            .then_output(|| {
                GetItemOutput::builder()
                    .set_item(Some(
                        [("pk".into(), s("Order#o-1")), ("sk".into(), s("1")), (EVENT_ID.into(), s("e-1")), ("event_type".into(), s("T"))].into(),
                    ))
                    .build()
            });
        let scan = mock!(aws_sdk_dynamodb::Client::scan).then_output(|| ScanOutput::builder().build());
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe, &query, &get, &scan]);
        let ById::Found(item) = by_event_id(&dynamodb, "s-outbox", "e-1").await.expect("looked up") else { panic!("not found") };
        assert_eq!(text(&item, "event_type").as_deref(), Some("T"));
        assert_eq!((describe.num_calls(), query.num_calls(), get.num_calls(), scan.num_calls()), (1, 1, 1, 0), "no scan");
    }

    #[tokio::test]
    async fn without_the_index_nothing_is_scanned_and_it_says_so() {
        let describe = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| described("other"));
        let absent = mock!(aws_sdk_dynamodb::Client::query).then_output(|| QueryOutput::builder().build());
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe, &absent]);
        assert_eq!(by_event_id(&dynamodb, "s-outbox", "e-1").await.expect("looked up"), ById::NoIndex);
        assert_eq!(absent.num_calls(), 0);
        let describe = mock!(aws_sdk_dynamodb::Client::describe_table).then_output(|| described(EVENT_ID));
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&describe, &absent]);
        assert_eq!(by_event_id(&dynamodb, "s-outbox", "e-2").await.expect("looked up"), ById::Absent, "not in the index");
    }

    #[tokio::test]
    async fn a_scan_stops_at_its_limit_and_says_it_did_not_read_everything() {
        // Every page reads as many items as asked and keeps one; the table never ends.
        let page = mock!(aws_sdk_dynamodb::Client::scan).then_compute_output(|r| {
            ScanOutput::builder()
                .scanned_count(r.limit().unwrap_or(0))
                .items([("pk".to_owned(), s("x"))].into())
                .last_evaluated_key("pk", s("x"))
                .build()
        });
        let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&page]);
        let mut seen = Vec::new();
        let request = ScanRequest { table: "t", filter: "kind = :k", values: vec![(":k", s("parked"))], limit: Some(2_500), ..Default::default() };
        let scanned = scan(&dynamodb, &request, |read, kept| seen.push((read, kept))).await.expect("scanned");
        assert_eq!((scanned.read, scanned.items.len(), scanned.complete), (2_500, 3, false));
        assert_eq!(seen, [(1_000, 1), (2_000, 2), (2_500, 3)], "progress after each page; the last page asks only for what is left");
        let first = ScanRequest { first_only: true, ..request };
        assert_eq!(scan(&dynamodb, &first, |_, _| {}).await.expect("scanned").items.len(), 1, "stops at the first match");
    }
}
