//! The inbox's guarded mode and ordering against the emulator: claim/complete/release with
//! leases, a crash between claim and effect, lease takeover by two racing takers, payload
//! conflicts, and per-aggregate sequence checks.

use std::time::Duration;

use crate::common::Local;
use chrono::Utc;
use outbox::envelope::EventMetadata;
use outbox::inbox::{Claim, Inbox, InboxError, InboxOutcome, InboxStore, PayloadHash};
use outbox::ordering::Ordered;

fn metadata(id: &str, aggregate: &str, sequence: u64) -> EventMetadata {
    let mut metadata = EventMetadata::new(id, "OrderCreated", "example.orders", ("Order", aggregate), sequence);
    metadata.time = "2026-11-29T08:00:00.000Z".into();
    metadata.correlation_id = "c".into();
    metadata
}

fn inbox(local: &Local, consumer: &str) -> Inbox {
    Inbox::new(local.dynamodb.clone(), local.table("ConsumerKit/InboxTable"), consumer, Duration::from_secs(3600))
}

#[tokio::test]
async fn guarded_mode_claims_completes_and_returns_the_stored_result_to_duplicates() {
    let local = Local::start().await;
    let inbox = inbox(&local, "mailer");
    let meta = metadata("e-1", "o-1", 1);
    let until = Utc::now() + chrono::Duration::seconds(30);
    let Claim::Acquired(lease) = inbox.begin(&meta, &PayloadHash::of("h"), until).await.unwrap() else { panic!("first claim must be acquired") };
    // A duplicate while the lease is live: retryable, not a silent success.
    let err = inbox.begin(&meta, &PayloadHash::of("h"), until).await.unwrap_err();
    assert!(matches!(err, InboxError::InProgress { .. }) && err.is_retryable(), "{err}");
    inbox.complete(&lease, Some(r#"{"message_id":"m-1"}"#)).await.unwrap();
    assert_eq!(inbox.begin(&meta, &PayloadHash::of("h"), until).await.unwrap(), Claim::Completed { result: Some(r#"{"message_id":"m-1"}"#.into()) });
    // Another consumer of the same event is not blocked.
    assert!(matches!(self::inbox(&local, "audit").begin(&meta, &PayloadHash::of("h"), until).await.unwrap(), Claim::Acquired(_)));
    local.shutdown().await;
}

#[tokio::test]
async fn a_crash_between_claim_and_effect_only_delays_the_retry() {
    let local = Local::start().await;
    let inbox = inbox(&local, "mailer");
    let meta = metadata("e-2", "o-2", 1);
    let mut effects = 0;
    // First invocation claims with a short lease, then "crashes" (never completes or releases).
    let Claim::Acquired(_) = inbox.begin(&meta, &PayloadHash::of("h"), Utc::now() + chrono::Duration::milliseconds(300)).await.unwrap() else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The retry takes the expired lease over and performs the effect once.
    let Claim::Acquired(lease) = inbox.begin(&meta, &PayloadHash::of("h"), Utc::now() + chrono::Duration::seconds(30)).await.unwrap() else {
        panic!("expired lease must be taken over")
    };
    effects += 1;
    inbox.complete(&lease, None).await.unwrap();
    assert!(matches!(inbox.begin(&meta, &PayloadHash::of("h"), Utc::now()).await.unwrap(), Claim::Completed { .. }));
    assert_eq!(effects, 1);
    local.shutdown().await;
}

#[tokio::test]
async fn two_racing_takers_of_an_expired_lease_one_wins_and_the_loser_cannot_complete() {
    let local = Local::start().await;
    let inbox = inbox(&local, "mailer");
    let meta = metadata("e-3", "o-3", 1);
    let Claim::Acquired(stale) = inbox.begin(&meta, &PayloadHash::of("h"), Utc::now() + chrono::Duration::milliseconds(200)).await.unwrap() else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let until = Utc::now() + chrono::Duration::seconds(30);
    let hash = PayloadHash::of("h");
    let (a, b) = tokio::join!(inbox.begin(&meta, &hash, until), inbox.begin(&meta, &hash, until));
    let acquired = [&a, &b].iter().filter(|r| matches!(r, Ok(Claim::Acquired(_)))).count();
    let in_progress = [&a, &b].iter().filter(|r| matches!(r, Err(InboxError::InProgress { .. }))).count();
    assert_eq!((acquired, in_progress), (1, 1), "{a:?} {b:?}");
    // The first, crashed owner's late completion must not overwrite the new owner.
    assert!(matches!(inbox.complete(&stale, None).await, Err(InboxError::LeaseLost(_))));
    local.shutdown().await;
}

#[tokio::test]
async fn release_lets_a_retry_run_at_once_and_payload_conflicts_are_errors() {
    let local = Local::start().await;
    let inbox = inbox(&local, "mailer");
    let meta = metadata("e-4", "o-4", 1);
    let until = Utc::now() + chrono::Duration::seconds(30);
    let Claim::Acquired(lease) = inbox.begin(&meta, &PayloadHash::of("h1"), until).await.unwrap() else { panic!() };
    inbox.release(&lease).await.unwrap();
    let Claim::Acquired(lease) = inbox.begin(&meta, &PayloadHash::of("h1"), until).await.unwrap() else {
        panic!("released claims can be taken at once")
    };
    inbox.complete(&lease, None).await.unwrap();
    let err = inbox.begin(&meta, &PayloadHash::of("h2"), until).await.unwrap_err();
    assert!(matches!(err, InboxError::PayloadMismatch { .. }) && !err.is_retryable(), "{err}");
    // Transactional mode detects the same conflict.
    let tx = self::inbox(&local, "tx");
    assert_eq!(tx.apply(&meta, &PayloadHash::of("h1"), vec![]).await.unwrap(), InboxOutcome::Applied);
    assert!(matches!(tx.apply(&meta, &PayloadHash::of("h2"), vec![]).await, Err(InboxError::PayloadMismatch { .. })));
    assert_eq!(tx.apply(&meta, &PayloadHash::of("h1"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
    local.shutdown().await;
}

/// The payload is compared by meaning (RFC 8785 canonical form) on the table itself, in both
/// modes; a row a version before that wrote (the bare SHA-256 of the bytes) keeps answering as it
/// did: the same bytes are a duplicate, anything else a conflict.
#[tokio::test]
async fn a_re_serialised_payload_is_a_duplicate_and_rows_of_the_byte_hash_keep_working() {
    use aws_sdk_dynamodb::types::AttributeValue;
    const DATA: &str = r#"{"order_id":"o-1","lines":[{"sku":"s-1","quantity":2}],"total":10.0}"#;
    const RESERIALISED: &str = "{\n  \"total\": 10,\n  \"lines\": [ { \"quantity\": 2, \"sku\": \"s-1\" } ],\n  \"order_id\": \"o-1\"\n}";
    const OTHER: &str = r#"{"order_id":"o-1","lines":[{"sku":"s-1","quantity":3}],"total":10.0}"#;
    let local = Local::start().await;
    let until = Utc::now() + chrono::Duration::seconds(30);
    let row = |inbox: &Inbox, id: &str| {
        let (dynamodb, table, key) = (local.dynamodb.clone(), local.table("ConsumerKit/InboxTable"), inbox.key(id));
        async move {
            let item =
                dynamodb.get_item().table_name(table).key("pk", AttributeValue::S(key)).consistent_read(true).send().await.expect("GetItem").item;
            let text = |name: &str| item.as_ref().and_then(|i| i.get(name)).and_then(|v| v.as_s().ok()).cloned();
            (text("payload_hash"), text("payload_sha256"))
        }
    };

    let tx = self::inbox(&local, "canonical");
    let meta = metadata("j-1", "o-11", 1);
    assert_eq!(tx.apply(&meta, &PayloadHash::of(DATA), vec![]).await.unwrap(), InboxOutcome::Applied);
    let stored = row(&tx, "j-1").await;
    assert_eq!(stored, (Some(PayloadHash::of(DATA).stored().to_owned()), Some(PayloadHash::of(DATA).sha256().to_owned())));
    assert!(stored.0.as_deref().is_some_and(|h| h.starts_with("jcs1:")), "{stored:?}");
    assert_eq!(tx.apply(&meta, &PayloadHash::of(RESERIALISED), vec![]).await.unwrap(), InboxOutcome::Duplicate);
    let err = tx.apply(&meta, &PayloadHash::of(OTHER), vec![]).await.unwrap_err();
    assert!(
        matches!(&err, InboxError::PayloadMismatch { stored, delivered, .. } if stored.starts_with("jcs1:") && delivered.starts_with("jcs1:")),
        "{err}"
    );
    assert_eq!(tx.applied_sha256("j-1").await.unwrap().as_deref(), Some(PayloadHash::of(DATA).sha256()));

    let guarded = self::inbox(&local, "canonical-guarded");
    let Claim::Acquired(lease) = guarded.begin(&meta, &PayloadHash::of(DATA), until).await.unwrap() else { panic!("first claim") };
    guarded.complete(&lease, Some("1")).await.unwrap();
    assert_eq!(guarded.begin(&meta, &PayloadHash::of(RESERIALISED), until).await.unwrap(), Claim::Completed { result: Some("1".into()) });
    assert!(matches!(guarded.begin(&meta, &PayloadHash::of(OTHER), until).await, Err(InboxError::PayloadMismatch { .. })));

    // A row as the version before wrote it: `payload_hash` the bare SHA-256 of the bytes.
    let legacy = self::inbox(&local, "legacy");
    let old = metadata("j-2", "o-12", 1);
    let claim = legacy.claim(&old, &PayloadHash::of(DATA), Utc::now());
    let mut item = claim.put().expect("a put").item().clone();
    item.insert("payload_hash".into(), AttributeValue::S(PayloadHash::of(DATA).sha256().to_owned()));
    item.remove("payload_sha256");
    local.dynamodb.put_item().table_name(local.table("ConsumerKit/InboxTable")).set_item(Some(item)).send().await.expect("PutItem");
    assert_eq!(legacy.apply(&old, &PayloadHash::of(DATA), vec![]).await.unwrap(), InboxOutcome::Duplicate, "the same bytes");
    let err = legacy.apply(&old, &PayloadHash::of(OTHER), vec![]).await.unwrap_err();
    assert!(
        matches!(&err, InboxError::PayloadMismatch { stored, delivered, .. } if !stored.contains(':') && delivered == PayloadHash::of(OTHER).sha256()),
        "{err}"
    );
    // Against the bytes' hash only the bytes count: a re-serialised copy is a conflict, as it was.
    assert!(matches!(legacy.apply(&old, &PayloadHash::of(RESERIALISED), vec![]).await, Err(InboxError::PayloadMismatch { .. })));
    assert_eq!(legacy.applied_sha256("j-2").await.unwrap().as_deref(), Some(PayloadHash::of(DATA).sha256()), "the claim check's shortcut");
    local.shutdown().await;
}

#[tokio::test]
async fn ordering_applies_in_sequence_absorbs_old_events_and_rejects_gaps() {
    let local = Local::start().await;
    let inbox = Ordered::new(inbox(&local, "ledger"));
    let apply = |id: &'static str, seq| {
        let inbox = inbox.clone();
        async move { inbox.apply(&metadata(id, "o-5", seq), &PayloadHash::of("h"), vec![]).await }
    };
    assert_eq!(apply("s1", 1).await.unwrap(), InboxOutcome::Applied);
    // Sequence 3 before 2: a gap, retryable.
    let err = apply("s3", 3).await.unwrap_err();
    assert!(matches!(err, InboxError::SequenceGap { expected: 2, got: 3, .. }) && err.is_retryable(), "{err}");
    assert!(err.to_string().contains("sequence gap"));
    assert_eq!(apply("s2", 2).await.unwrap(), InboxOutcome::Applied);
    assert_eq!(apply("s3", 3).await.unwrap(), InboxOutcome::Applied);
    // An old event with a new id (e.g. re-emitted) at or below the last sequence: a duplicate.
    assert_eq!(apply("s2-again", 2).await.unwrap(), InboxOutcome::Duplicate);
    // The first event of an aggregate must be sequence 1.
    let err = inbox.apply(&metadata("t2", "o-6", 2), &PayloadHash::of("h"), vec![]).await.unwrap_err();
    assert!(matches!(err, InboxError::SequenceGap { expected: 1, got: 2, .. }), "{err}");
    local.shutdown().await;
}

/// Claim rows expire after the retention; ordering rows never do (see
/// `ordering_rows_outlive_the_inbox_retention`).
#[tokio::test]
async fn every_claim_row_carries_a_ttl_and_ordering_rows_none() {
    let local = Local::start().await;
    let tx = Ordered::new(inbox(&local, "tx"));
    tx.apply(&metadata("ttl-1", "o-7", 1), &PayloadHash::of("h"), vec![]).await.unwrap();
    let guarded = inbox(&local, "guarded");
    let Claim::Acquired(_) = guarded.begin(&metadata("ttl-2", "o-7", 1), &PayloadHash::of("h"), Utc::now()).await.unwrap() else { panic!() };
    let rows = local.scan(&local.table("ConsumerKit/InboxTable")).await;
    assert_eq!(rows.len(), 3, "claim + ordering row + guarded claim");
    let now = Utc::now().timestamp();
    for row in rows {
        let ordering = crate::common::s(&row, "pk").contains("#aggregate#");
        let expires: Option<i64> = row.get("expires_at").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok());
        match (ordering, expires) {
            (true, None) => {}
            (false, Some(expires)) => assert!(expires > now + 3000 && expires <= now + 3601, "{expires} vs now {now}"),
            _ => panic!("claim rows need expires_at, ordering rows must have none: {row:?}"),
        }
    }
    local.shutdown().await;
}

/// Ordering rows never expire: the row carries no `expires_at`, so after DynamoDB's TTL process
/// deleted everything it could (emulated: every item with `expires_at` deleted, as if the
/// retention had long passed; moto never deletes), the aggregate's next event still applies.
#[tokio::test]
async fn ordering_rows_outlive_the_inbox_retention() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let local = Local::start().await;
    let table = local.table("ConsumerKit/InboxTable");
    let inbox = Ordered::new(Inbox::new(local.dynamodb.clone(), &table, "slow-aggregate", Duration::from_secs(1)));
    assert_eq!(inbox.apply(&metadata("r1", "o-7", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
    let row = local.query_pk(&table, "slow-aggregate#aggregate#Order#o-7").await;
    assert_eq!(row.len(), 1);
    assert_eq!(row[0].get("last_sequence"), Some(&AttributeValue::N("1".into())));
    assert!(!row[0].contains_key("expires_at"), "the ordering row must carry no TTL: {:?}", row[0]);

    // Everything DynamoDB's TTL may delete, deleted.
    for item in local.scan(&table).await {
        if item.contains_key("expires_at") {
            local.dynamodb.delete_item().table_name(&table).key("pk", item["pk"].clone()).send().await.unwrap();
        }
    }
    assert_eq!(inbox.apply(&metadata("r2", "o-7", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied, "months later: no gap");
    local.shutdown().await;
}

/// A sequence that will never come (dead-lettered at the relay): the waiting event fails with a
/// `SequenceGap` naming what it waits for; `outbox ordering release` (its function,
/// against the emulator) moves the aggregate past it, and the event applies.
#[tokio::test]
async fn a_permanently_missing_sequence_is_released_by_the_ordering_release_command() {
    let local = Local::start().await;
    let table = local.table("ConsumerKit/InboxTable");
    let inbox = Ordered::new(inbox(&local, "reserve-inventory"));
    assert_eq!(inbox.apply(&metadata("m1", "o-9", 1), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
    let err = inbox.apply(&metadata("m3", "o-9", 3), &PayloadHash::of("h"), vec![]).await.unwrap_err();
    assert!(matches!(err, InboxError::SequenceGap { expected: 2, got: 3, last_applied: 1, .. }), "{err}");

    let bad = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "o-9", 2, false).await.unwrap_err().to_string();
    assert!(bad.contains("<aggregate_type>#<aggregate_id>"), "{bad}");
    // A mistyped consumer or aggregate is refused (it would create a row nobody reads).
    let typo = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve_inventory", "Order#o-9", 2, false).await.unwrap_err().to_string();
    assert!(typo.contains("no ordering row") && typo.contains("--create"), "{typo}");
    let typo = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "order#o-9", 2, false).await.unwrap_err().to_string();
    assert!(typo.contains("no ordering row"), "{typo}");
    assert!(outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "Order#o-9", 0, false).await.is_err());
    let released = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "Order#o-9", 2, false).await.unwrap();
    assert_eq!(released, outbox_cli::ordering::Released { before: 1, after: 2 });
    assert_eq!(inbox.apply(&metadata("m3", "o-9", 3), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
    // Released twice, or below the current sequence: nothing moves back.
    let again = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "Order#o-9", 2, false).await.unwrap();
    assert_eq!(again, outbox_cli::ordering::Released { before: 3, after: 3 });
    // The late sequence 2, if it ever comes, is absorbed.
    assert_eq!(inbox.apply(&metadata("m2", "o-9", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Duplicate);
    // A gap at an aggregate's very first event: no row yet, released with --create.
    let first = outbox_cli::ordering::release(&local.dynamodb, &table, "reserve-inventory", "Order#o-10", 1, true).await.unwrap();
    assert_eq!(first, outbox_cli::ordering::Released { before: 0, after: 1 });
    assert_eq!(inbox.apply(&metadata("n2", "o-10", 2), &PayloadHash::of("h"), vec![]).await.unwrap(), InboxOutcome::Applied);
    local.shutdown().await;
}

/// The ordering row counts its aggregate's parked rows (`outbox::ordering::PARKED_COUNT`), checked
/// from the table on the emulator: a commit that finds the count at 0 proves nothing is parked
/// (the consumer then reads nothing); a park before a commit makes that commit answer "read";
/// the drain's transaction and `unpark` take their row off the count; parking the same event
/// twice counts it once; an ordering row that parking created (a count, `last_sequence` 0) lets
/// the aggregate's first event apply. The count equals the parked rows after every step.
#[tokio::test]
async fn the_ordering_rows_parked_count_is_exact_and_proves_only_what_is_true() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use outbox::inbox::RecordedOutcome;
    let local = Local::start().await;
    let table = local.table("ConsumerKit/InboxTable");
    let inbox = Ordered::new(inbox(&local, "counted"));
    let apply = |id: &'static str, aggregate: &'static str, sequence: u64, unparks: Option<u64>| {
        let inbox = inbox.clone();
        async move {
            let recorded = RecordedOutcome::new("applied");
            inbox.apply_checking_parked(&metadata(id, aggregate, sequence), &PayloadHash::of("h"), vec![], Some(&recorded), unparks).await.unwrap()
        }
    };
    // (the ordering row's count, the parked rows) of an aggregate, from the table.
    let counts = |aggregate: &'static str| {
        let (local, table) = (&local, &table);
        async move {
            let ordering = local.query_pk(table, &format!("counted#aggregate#Order#{aggregate}")).await;
            let count = ordering.first().and_then(|r| r.get("parked_count")).and_then(|v| v.as_n().ok()).map(|n| n.parse::<i64>().unwrap());
            let prefix = format!("counted#parked#Order#{aggregate}#");
            let rows = local.scan(table).await.iter().filter(|r| crate::common::s(r, "pk").starts_with(&prefix)).count();
            (count, rows as i64)
        }
    };
    assert_eq!(apply("c1", "o-9", 1, None).await, (InboxOutcome::Applied, true), "nothing parked: proved by the commit");
    assert_eq!(counts("o-9").await, (Some(0), 0));
    // Sequence 3 before 2: parked with its count, once however often it is parked.
    let m3 = metadata("c3", "o-9", 3);
    assert!(inbox.park(&m3, 2, "{}").await.unwrap());
    assert!(inbox.park(&m3, 2, "{}").await.unwrap(), "the same event parked again");
    assert!(!inbox.park(&metadata("c3-other", "o-9", 3), 2, "{}").await.unwrap(), "another event id waits for 2 already");
    assert_eq!(counts("o-9").await, (Some(1), 1));
    // Sequence 2: applied, and its commit must not say "nothing parked": 3 waits for it.
    assert_eq!(apply("c2", "o-9", 2, None).await, (InboxOutcome::Applied, false));
    // The drain applies 3: its row deleted and taken off the count in the same transaction.
    assert_eq!(apply("c3", "o-9", 3, Some(2)).await, (InboxOutcome::Applied, false));
    assert_eq!(counts("o-9").await, (Some(0), 0));
    assert_eq!(apply("c4", "o-9", 4, None).await, (InboxOutcome::Applied, true));
    // The drain's event whose key holds no row of it (settled meanwhile): applied without
    // touching the count, which never goes below the rows.
    assert_eq!(apply("c5", "o-9", 5, Some(4)).await, (InboxOutcome::Applied, false));
    assert_eq!(counts("o-9").await, (Some(0), 0));
    // `unpark` (a duplicate settled by the drain, the operator's release) takes its row off too.
    assert!(inbox.park(&metadata("c7", "o-9", 7), 6, "{}").await.unwrap());
    let parked = inbox.parked("Order", "o-9", 6).await.unwrap().expect("parked");
    inbox.unpark(&parked).await.unwrap();
    inbox.unpark(&parked).await.unwrap();
    assert_eq!(counts("o-9").await, (Some(0), 0), "unparked once, counted off once");
    // An aggregate whose first event arrives second: parking creates its ordering row with a
    // count and no sequence, and the first event still applies.
    assert!(inbox.park(&metadata("d2", "o-10", 2), 1, "{}").await.unwrap());
    assert_eq!(counts("o-10").await, (Some(1), 1));
    // ... with `last_sequence` 0: every ordering row holds both attributes.
    let ordering = local.query_pk(&table, "counted#aggregate#Order#o-10").await;
    assert_eq!(ordering[0].get("last_sequence"), Some(&AttributeValue::N("0".into())), "{ordering:?}");
    assert_eq!(apply("d1", "o-10", 1, None).await, (InboxOutcome::Applied, false));
    assert_eq!(apply("d2", "o-10", 2, Some(1)).await, (InboxOutcome::Applied, false));
    assert_eq!(counts("o-10").await, (Some(0), 0));
    assert_eq!(apply("d3", "o-10", 3, None).await, (InboxOutcome::Applied, true));
    // The operator's release on a row that has a count and no sequence yet.
    assert!(inbox.park(&metadata("f5", "o-11", 5), 4, "{}").await.unwrap());
    assert_eq!(inbox.release_through("Order#o-11", 4).await.unwrap(), 0);
    assert_eq!(inbox.last_sequence("Order", "o-11").await.unwrap(), 4);
    local.shutdown().await;
}
