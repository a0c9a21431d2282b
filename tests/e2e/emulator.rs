//! The emulator shim (`scripts/moto_server.py`) keeps AWS's transaction semantics: a cancelled
//! TransactWriteItems leaves every item it would have written (updated, put or deleted; in
//! hash-only and hash + range tables) as it was, never appears as a stream record, not even
//! through a shard iterator taken before it ran, and the next committed write is read normally.
//! Its SQS sends and receives skip moto's per-message pass over the queue, and the queue's
//! counts (`GetQueueAttributes`) stay right.
//! It keeps HTTP/1.1 connections open, as AWS's endpoints do, and answers every request on them.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::Local;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update};
use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, Record, ShardIteratorType};

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

#[tokio::test]
async fn a_cancelled_transaction_leaves_every_item_it_would_have_written_as_it_was() {
    let local = Local::start().await;
    let outbox = local.table("OutboxTable"); // pk + sk, with a stream
    let inventory = local.table("InventoryTable"); // pk only
    let s = |v: &str| AttributeValue::S(v.into());
    let outbox_key = |pk: &str| HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s("1"))]);
    let inventory_key = |pk: &str| HashMap::from([("pk".to_owned(), s(pk))]);
    for (table, key) in [(&outbox, outbox_key("updated")), (&inventory, inventory_key("updated")), (&inventory, inventory_key("deleted"))] {
        let mut item = key;
        item.insert("v".into(), s("before"));
        local.dynamodb.put_item().table_name(table).set_item(Some(item)).send().await.unwrap();
    }
    let streams = aws_sdk_dynamodbstreams::Client::new(&local.runtime.sdk);
    let arn = local.runtime.stack.stream_arns["OutboxTable"].clone();
    let records = || {
        let streams = streams.clone();
        let arn = arn.clone();
        async move {
            let description = streams.describe_stream().stream_arn(&arn).send().await.unwrap();
            let shard = description.stream_description().unwrap().shards()[0].shard_id().unwrap().to_owned();
            let iterator = streams
                .get_shard_iterator()
                .stream_arn(&arn)
                .shard_id(shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .unwrap()
                .shard_iterator
                .unwrap();
            streams.get_records().shard_iterator(iterator).send().await.unwrap().records().iter().filter_map(pk).collect::<Vec<_>>()
        }
    };
    assert_eq!(records().await, ["updated"]);

    let update = |table: &str, key: HashMap<String, AttributeValue>| {
        let update = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression("SET v = :v")
            .expression_attribute_values(":v", s("after"))
            .build()
            .unwrap();
        TransactWriteItem::builder().update(update).build()
    };
    let put = |table: &str, mut item: HashMap<String, AttributeValue>| {
        item.insert("v".into(), s("after"));
        TransactWriteItem::builder().put(Put::builder().table_name(table).set_item(Some(item)).build().unwrap()).build()
    };
    let delete =
        |table: &str, key| TransactWriteItem::builder().delete(Delete::builder().table_name(table).set_key(Some(key)).build().unwrap()).build();
    let check = ConditionCheck::builder()
        .table_name(&inventory)
        .set_key(Some(inventory_key("absent")))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    let cancelled = local
        .dynamodb
        .transact_write_items()
        .transact_items(update(&outbox, outbox_key("updated")))
        .transact_items(put(&outbox, outbox_key("put")))
        .transact_items(update(&inventory, inventory_key("updated")))
        .transact_items(put(&inventory, inventory_key("put")))
        .transact_items(delete(&inventory, inventory_key("deleted")))
        .transact_items(TransactWriteItem::builder().condition_check(check).build())
        .send()
        .await;
    assert!(cancelled.is_err(), "the transaction must be cancelled");

    let get = |table: &str, key| local.dynamodb.get_item().table_name(table).set_key(Some(key)).consistent_read(true).send();
    let v = |item: Option<&HashMap<String, AttributeValue>>| item.map(|i| i["v"].as_s().unwrap().clone());
    assert_eq!(v(get(&outbox, outbox_key("updated")).await.unwrap().item()).as_deref(), Some("before"));
    assert_eq!(v(get(&outbox, outbox_key("put")).await.unwrap().item()), None);
    assert_eq!(v(get(&inventory, inventory_key("updated")).await.unwrap().item()).as_deref(), Some("before"));
    assert_eq!(v(get(&inventory, inventory_key("put")).await.unwrap().item()), None);
    assert_eq!(v(get(&inventory, inventory_key("deleted")).await.unwrap().item()).as_deref(), Some("before"));
    assert_eq!(local.scan(&outbox).await.len(), 1);
    assert_eq!(local.scan(&inventory).await.len(), 2);
    assert_eq!(records().await, ["updated"], "a cancelled transaction's write reached the stream");
    local.shutdown().await;
}

/// The shim's cheap SQS send and receive (moto_server.py, change 5) leave `GetQueueAttributes`
/// counting as SQS does: messages sent, then received (in flight), then deleted.
#[tokio::test]
async fn queue_counts_stay_right_through_sends_and_receives() {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let target = outbox_cli::aws::Target { endpoint: Some(crate::common::endpoint().to_owned()), region: "us-east-1".into() };
    let sqs = aws_sdk_sqs::Client::new(&outbox_cli::aws::sdk_config(&target).await);
    let url = sqs.create_queue().queue_name(format!("counts-{}", crate::common::short_id())).send().await.unwrap().queue_url.unwrap();
    for i in 0..25 {
        sqs.send_message().queue_url(&url).message_body(i.to_string()).send().await.unwrap();
    }
    let counts = || {
        let (sqs, url) = (sqs.clone(), url.clone());
        async move {
            let out = sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(A::ApproximateNumberOfMessages)
                .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
                .send()
                .await
                .unwrap();
            let get = |a: A| out.attributes().and_then(|m| m.get(&a)).and_then(|v| v.parse::<u32>().ok()).unwrap();
            (get(A::ApproximateNumberOfMessages), get(A::ApproximateNumberOfMessagesNotVisible))
        }
    };
    assert_eq!(counts().await, (25, 0));
    let received = sqs.receive_message().queue_url(&url).max_number_of_messages(10).send().await.unwrap().messages.unwrap_or_default();
    assert_eq!(received.len(), 10, "a receive still returns up to its maximum");
    assert_eq!(counts().await, (15, 10), "the received messages are in flight");
    for m in &received {
        sqs.delete_message().queue_url(&url).receipt_handle(m.receipt_handle().unwrap()).send().await.unwrap();
    }
    assert_eq!(counts().await, (15, 0));
}

/// One HTTP/1.1 request on `stream` and its answer: (status code, lower-cased header names and
/// values, body). The answer must be delimited by its Content-Length.
async fn exchange(stream: &mut tokio::io::BufReader<tokio::net::TcpStream>, request: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    stream.get_mut().write_all(request).await.unwrap();
    let mut status = String::new();
    stream.read_line(&mut status).await.unwrap();
    let code = status.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("a status line, got {status:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.unwrap();
        let Some((name, value)) = line.trim_end().split_once(':') else { break };
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).expect("a Content-Length");
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.unwrap();
    (code, headers, body)
}

/// werkzeug's development server (under moto) closes every connection, and only dropping its
/// `Connection: close` hangs the second request: werkzeug drains the socket after each answer
/// and swallows the next request (scripts/moto_server.py, `KeepAliveRequestHandler`). On one
/// connection: a DynamoDB call, a request whose body moto never reads, a chunked body, and a
/// last call: each answered, none closing the connection.
#[tokio::test]
async fn the_emulator_answers_every_request_on_one_kept_alive_connection() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let emulator = outbox_local::emulator::Emulator::start(&root).await.unwrap();
    let address = emulator.endpoint.trim_start_matches("http://").to_owned();
    let mut stream = tokio::io::BufReader::new(tokio::net::TcpStream::connect(&address).await.unwrap());
    let dynamodb = "x-amz-target: DynamoDB_20120810.ListTables\r\ncontent-type: application/x-amz-json-1.0\r\n\
                    authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0";
    let list_tables = format!("POST / HTTP/1.1\r\nhost: {address}\r\n{dynamodb}\r\ncontent-length: 2\r\n\r\n{{}}");
    let unread = format!("GET /moto-api/data.json HTTP/1.1\r\nhost: {address}\r\ncontent-length: 100000\r\n\r\n{}", "x".repeat(100_000));
    let chunked = format!("POST / HTTP/1.1\r\nhost: {address}\r\n{dynamodb}\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{{\r\n1\r\n}}\r\n0\r\n\r\n");
    for (name, request) in
        [("ListTables", &list_tables), ("unread body", &unread), ("chunked ListTables", &chunked), ("ListTables again", &list_tables)]
    {
        // A guard against the hang this test is about, not a timing: the answer comes or the test fails.
        let answer = tokio::time::timeout(Duration::from_secs(60), exchange(&mut stream, request.as_bytes())).await;
        let (code, headers, body) = answer.unwrap_or_else(|_| panic!("{name}: no answer on the kept-alive connection"));
        assert_eq!(code, 200, "{name}: {}", String::from_utf8_lossy(&body));
        assert!(!headers.iter().any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close")), "{name} closed the connection: {headers:?}");
        if name.contains("ListTables") {
            assert!(String::from_utf8_lossy(&body).contains("TableNames"), "{name}: {}", String::from_utf8_lossy(&body));
        }
    }
}
