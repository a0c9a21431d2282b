//! The emulator shim (`scripts/moto_server.py`) keeps AWS's transaction semantics on the
//! stream: a cancelled TransactWriteItems never appears as a stream record, not even through a
//! shard iterator taken before it ran, and the next committed write is read normally.

mod common;

use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem};
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, Record, ShardIteratorType};
use common::Local;

fn pk(record: &Record) -> Option<String> {
    match record.dynamodb()?.keys()?.get("pk")? {
        StreamValue::S(s) => Some(s.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn a_cancelled_transaction_never_reaches_the_stream() {
    let local = Local::start().await;
    let table = local.table("OutboxTable");
    let streams = aws_sdk_dynamodbstreams::Client::new(&local.runtime.sdk);
    let arn = local.runtime.stack.stream_arns["OutboxTable"].clone();
    let put = |pk: &str| {
        let put =
            Put::builder().table_name(&table).item("pk", AttributeValue::S(pk.into())).item("sk", AttributeValue::S("1".into())).build().unwrap();
        TransactWriteItem::builder().put(put).build()
    };
    let description = streams.describe_stream().stream_arn(&arn).send().await.unwrap();
    let shard = description.stream_description().unwrap().shards()[0].shard_id().unwrap().to_owned();
    let iterator = |kind: ShardIteratorType| {
        let streams = streams.clone();
        let (arn, shard) = (arn.clone(), shard.clone());
        async move { streams.get_shard_iterator().stream_arn(arn).shard_id(shard).shard_iterator_type(kind).send().await.unwrap().shard_iterator.unwrap() }
    };
    let before = iterator(ShardIteratorType::TrimHorizon).await;
    let check = ConditionCheck::builder()
        .table_name(&table)
        .key("pk", AttributeValue::S("absent".into()))
        .key("sk", AttributeValue::S("1".into()))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    let cancelled = local
        .dynamodb
        .transact_write_items()
        .transact_items(put("phantom"))
        .transact_items(TransactWriteItem::builder().condition_check(check).build())
        .send()
        .await;
    assert!(cancelled.is_err(), "the transaction must be cancelled");
    let seen: Vec<String> = streams.get_records().shard_iterator(before).send().await.unwrap().records().iter().filter_map(pk).collect();
    assert!(seen.is_empty(), "a cancelled transaction's write reached the stream: {seen:?}");

    local.dynamodb.transact_write_items().transact_items(put("committed")).send().await.unwrap();
    let all: Vec<String> = streams
        .get_records()
        .shard_iterator(iterator(ShardIteratorType::TrimHorizon).await)
        .send()
        .await
        .unwrap()
        .records()
        .iter()
        .filter_map(pk)
        .collect();
    assert_eq!(all, ["committed"]);
    local.shutdown().await;
}
