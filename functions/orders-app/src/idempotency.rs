//! Idempotency keys for the order API's POSTs (`Idempotency-Key` request header).
//!
//! A client that does not know whether its `POST` took effect (time-out, dropped connection)
//! sends it again with the same key and gets the first answer back — same status code, same
//! body — without a second order write and without a second event.
//!
//! # The key record
//!
//! One item in the **orders table**, written in the SAME `TransactWriteItems` call as the order
//! write and its outbox event, so a crash can never leave an order without its key record or a
//! key record without its order:
//!
//! | attribute | type | meaning |
//! |---|---|---|
//! | `pk` | S | `IDEMPOTENCY#<key>` ([`IdempotencyKey::partition_key`]) |
//! | `record_type` | S | `IDEMPOTENCY` |
//! | `request_hash` | S | hex SHA-256 of method, path and body ([`request_hash`]) |
//! | `status_code` | N | HTTP status of the stored answer (201 create, 200 cancel) |
//! | `response_body` | S | the answer's body, JSON text, replayed byte for byte |
//! | `response_location` | S, optional | the answer's `Location` header |
//! | `created_at` | S | RFC 3339 UTC |
//! | `expires_at` | N | epoch seconds; `IDEMPOTENCY_TTL_SECONDS` (default 24 h) after `created_at` |
//!
//! The put is conditioned on `attribute_not_exists(pk) OR expires_at < :now` and asks for
//! `ReturnValuesOnConditionCheckFailure=ALL_OLD`: when the key is taken, the cancelled
//! transaction's `CancellationReasons` entry for the key put carries the stored record, so the
//! handler replays it (or answers 422 when the request hash differs) without another read.
//! Sources: `TransactWriteItems` and `CancellationReason` in the DynamoDB API reference,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>.
//!
//! # Statuses
//!
//! A record exists only for a request that *succeeded*: it commits with the order write or not
//! at all. There is no "in progress" state to get stuck in:
//!
//! ```text
//! request with key K ──▶ record K live? ──yes──▶ same hash? ──yes──▶ replay stored answer (no write)
//!                              │                     └──no───▶ 422 (no write)
//!                              no (absent or expires_at < now)
//!                              ▼
//!                  ONE TransactWriteItems [ put record K (condition above), order write, outbox put ]
//!                     ├─ committed ──────────────▶ answer (the stored one)
//!                     ├─ record K condition failed ▶ a racing request with K won: replay / 422
//!                     ├─ other condition failed ──▶ 404/409 as without a key (nothing stored)
//!                     └─ conflict / throttled ────▶ 503 + Retry-After (nothing stored; retry with K)
//! ```
//!
//! Rejected requests (400, 404, 409, 413, 415, 503) store nothing: a retry with the same key
//! runs again. Expiry is enforced by the code (an expired record is treated as absent and
//! overwritten), so correctness does not depend on DynamoDB's TTL deleting it, which happens
//! "typically within a few days"
//! (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html>).

use std::collections::HashMap;
use std::time::Duration;

use aws_lambda_events::http::HeaderMap;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use sha2::{Digest, Sha256};

use crate::http::Problem;
use outbox::all_old;

/// The request header, as clients spell it (HTTP header names are case-insensitive).
pub const HEADER: &str = "Idempotency-Key";
/// Longest accepted key, in bytes (characters: keys are ASCII).
pub const MAX_KEY_BYTES: usize = 255;
/// Prefix of the key record's partition key in the orders table.
pub const KEY_PREFIX: &str = "IDEMPOTENCY#";
/// Default time a key is remembered: 24 hours (`IDEMPOTENCY_TTL_SECONDS` overrides it).
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// Response header set on a replayed answer (`true`), as Stripe does.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// A valid idempotency key: 1 to [`MAX_KEY_BYTES`] printable ASCII characters (0x20–0x7E).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Checks a header value.
    ///
    /// # Errors
    /// A message saying what is wrong (empty, too long, a byte outside 0x20–0x7E).
    pub fn parse(value: &[u8]) -> Result<Self, String> {
        if value.is_empty() {
            return Err("is empty; send 1 to 255 printable ASCII characters, e.g. a UUID".into());
        }
        if value.len() > MAX_KEY_BYTES {
            return Err(format!("is {} characters long; the limit is {MAX_KEY_BYTES}", value.len()));
        }
        if let Some(pos) = value.iter().position(|b| !(0x20..=0x7e).contains(b)) {
            return Err(format!("has a byte outside printable ASCII (0x{:02x} at position {pos})", value[pos]));
        }
        // Every byte is printable ASCII (checked just above), so this is valid UTF-8.
        Ok(Self(String::from_utf8_lossy(value).into_owned()))
    }

    /// The key from the request headers: `Ok(None)` when the header is absent.
    ///
    /// # Errors
    /// A 400 problem naming the `Idempotency-Key` header when it is sent more than once or its
    /// value is not a valid key.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, Problem> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(value) = values.next() else { return Ok(None) };
        if values.next().is_some() {
            return Err(Problem::bad_field(HEADER, format!("the {HEADER} header is sent more than once; send one key")));
        }
        Self::parse(value.as_bytes()).map(Some).map_err(|e| Problem::bad_field(HEADER, format!("the {HEADER} header {e}")))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key in the caller's own key space: `<length of subject>:<subject>#<key>` (the length
    /// keeps two callers' keys apart whatever characters either holds). Two callers sending the
    /// same key never see each other's answer.
    pub fn scoped_to(self, subject: &str) -> Self {
        Self(format!("{}:{subject}#{}", subject.len(), self.0))
    }

    /// The key record's partition key: `IDEMPOTENCY#<key>`.
    pub fn partition_key(&self) -> String {
        format!("{KEY_PREFIX}{}", self.0)
    }
}

/// Fingerprint of a request: hex SHA-256 of `method`, LF, `path`, LF, the body bytes (after
/// base64 decoding). Byte-exact: the same JSON with other whitespace is another request.
pub fn request_hash(method: &str, path: &str, body: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method.to_ascii_uppercase().as_bytes());
    hasher.update(b"\n");
    hasher.update(path.as_bytes());
    hasher.update(b"\n");
    hasher.update(body);
    hex::encode(hasher.finalize())
}

/// A key and the fingerprint of the request that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotentRequest {
    /// The client's key.
    pub key: IdempotencyKey,
    /// [`request_hash`] of the request.
    pub request_hash: String,
}

impl IdempotentRequest {
    /// The request with its key scoped to `subject` ([`IdempotencyKey::scoped_to`]); unchanged
    /// when there is no subject (authentication off).
    pub fn scoped_to(self, subject: Option<&str>) -> Self {
        match subject {
            Some(subject) => Self { key: self.key.scoped_to(subject), ..self },
            None => self,
        }
    }
}

/// An answer as stored in a key record and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status code.
    pub status: u16,
    /// Body: JSON text (`content-type: application/json`).
    pub body: String,
    /// `Location` header, if the answer had one.
    pub location: Option<String>,
}

/// A key record (see the module docs for its attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The key, without the `IDEMPOTENCY#` prefix.
    pub key: String,
    /// [`request_hash`] of the request that stored it.
    pub request_hash: String,
    /// The answer to replay.
    pub response: StoredResponse,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Epoch seconds after which the record no longer counts.
    pub expires_at: i64,
}

/// A DynamoDB item that is not a key record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("idempotency record is malformed: {0}")]
pub struct MalformedRecord(pub String);

impl IdempotencyRecord {
    /// Whether the record no longer counts at `now` (epoch seconds): `expires_at < now`, the
    /// same comparison as the put's condition.
    pub fn is_expired(&self, now: i64) -> bool {
        self.expires_at < now
    }

    /// What a request with fingerprint `request_hash` gets from this record.
    pub fn replay_for(&self, request_hash: &str) -> Replay {
        if self.request_hash == request_hash {
            Replay::Response(self.response.clone())
        } else {
            Replay::Mismatch
        }
    }

    /// The record as DynamoDB attributes.
    pub fn to_item(&self) -> HashMap<String, AttributeValue> {
        let mut item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S(format!("{KEY_PREFIX}{}", self.key))),
            ("record_type".to_owned(), AttributeValue::S("IDEMPOTENCY".into())),
            ("request_hash".to_owned(), AttributeValue::S(self.request_hash.clone())),
            ("status_code".to_owned(), AttributeValue::N(self.response.status.to_string())),
            ("response_body".to_owned(), AttributeValue::S(self.response.body.clone())),
            ("created_at".to_owned(), AttributeValue::S(self.created_at.clone())),
            ("expires_at".to_owned(), AttributeValue::N(self.expires_at.to_string())),
        ]);
        if let Some(location) = &self.response.location {
            item.insert("response_location".into(), AttributeValue::S(location.clone()));
        }
        item
    }

    /// Reads a record from DynamoDB attributes.
    ///
    /// # Errors
    /// [`MalformedRecord`] naming the attribute that is missing or mistyped.
    pub fn from_item(item: &HashMap<String, AttributeValue>) -> Result<Self, MalformedRecord> {
        let s = |name: &str| -> Result<String, MalformedRecord> {
            item.get(name).and_then(|v| v.as_s().ok()).cloned().ok_or_else(|| MalformedRecord(format!("`{name}` is not a string")))
        };
        let n = |name: &str| -> Result<i64, MalformedRecord> {
            item.get(name)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| MalformedRecord(format!("`{name}` is not an integer")))
        };
        let pk = s("pk")?;
        let key = pk.strip_prefix(KEY_PREFIX).ok_or_else(|| MalformedRecord(format!("`pk` {pk:?} lacks {KEY_PREFIX}")))?;
        let status = u16::try_from(n("status_code")?).map_err(|_| MalformedRecord("`status_code` is out of range".into()))?;
        Ok(Self {
            key: key.to_owned(),
            request_hash: s("request_hash")?,
            response: StoredResponse { status, body: s("response_body")?, location: s("response_location").ok() },
            created_at: s("created_at")?,
            expires_at: n("expires_at")?,
        })
    }
}

/// What a stored record means for a request with the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Same request: answer this, write nothing.
    Response(StoredResponse),
    /// The key was used for another request (other method, path or body): 422.
    Mismatch,
}

/// Reads and writes key records in the orders table.
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
    ttl: Duration,
}

/// A failed read of a key record.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `GetItem` failed; `retryable` when a later try can succeed (throttling, 5xx, time-out).
    #[error("GetItem on the idempotency record failed: {message}")]
    Sdk {
        /// The SDK error, displayed with its context.
        message: String,
        /// Whether a retry can succeed.
        retryable: bool,
    },
    /// The stored item is not a key record.
    #[error(transparent)]
    Malformed(#[from] MalformedRecord),
}

impl IdempotencyStore {
    /// A store in `table` whose records count for `ttl` after they are written.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>, ttl: Duration) -> Self {
        Self { client, table: table.into(), ttl }
    }

    /// How long a key is remembered.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The record that stores `response` for `request`, written `now`.
    pub fn record(&self, request: &IdempotentRequest, response: StoredResponse, now: chrono::DateTime<chrono::Utc>) -> IdempotencyRecord {
        IdempotencyRecord {
            key: request.key.as_str().to_owned(),
            request_hash: request.request_hash.clone(),
            response,
            created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            expires_at: now.timestamp().saturating_add(i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX)),
        }
    }

    /// The transaction item that stores `record`, conditioned on
    /// `attribute_not_exists(pk) OR expires_at < :now` (`now` in epoch seconds) with
    /// `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a live record with the same key cancels
    /// the transaction and comes back in its `CancellationReasons`.
    pub fn put(&self, record: &IdempotencyRecord, now: i64) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(record.to_item()))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
            .return_values_on_condition_check_failure(all_old())
            .build()
            // table_name and item, the builder's only required fields, are set just above.
            .expect("Put has its required fields");
        TransactWriteItem::builder().put(put).build()
    }

    /// The live record of `key` (strongly consistent `GetItem`), `None` when absent or expired.
    ///
    /// # Errors
    /// [`ReadError`].
    pub async fn get(&self, key: &IdempotencyKey, now: i64) -> Result<Option<IdempotencyRecord>, ReadError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(key.partition_key()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| read_error(&e))?;
        match out.item() {
            None => Ok(None),
            Some(item) => {
                let record = IdempotencyRecord::from_item(item)?;
                Ok((!record.is_expired(now)).then_some(record))
            }
        }
    }
}

/// Whether a failed read can succeed later: throttling, DynamoDB 5xx, time-outs and dispatch
/// failures (after the SDK's own retries). The library's one classification,
/// [`outbox::AwsError`].
pub fn is_retryable_read<E>(error: &aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>) -> bool
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    outbox::AwsError::from_sdk("GetItem", error).is_retryable()
}

/// A failed `GetItem` as [`ReadError::Sdk`]: retryable or not, with the service's code and message.
pub fn read_error<E>(error: &aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>) -> ReadError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let aws = outbox::AwsError::from_sdk("GetItem", error);
    ReadError::Sdk { retryable: aws.is_retryable(), message: aws.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_one_to_255_printable_ascii_characters() {
        assert!(IdempotencyKey::parse(b"a").is_ok());
        assert!(IdempotencyKey::parse(b"0193a4f0-7c1e-7a2b-9c3d-4e5f60718293").is_ok());
        assert!(IdempotencyKey::parse(b"with space and #~!").is_ok());
        assert!(IdempotencyKey::parse("k".repeat(255).as_bytes()).is_ok());
        assert!(IdempotencyKey::parse(b"").unwrap_err().contains("empty"));
        assert!(IdempotencyKey::parse("k".repeat(256).as_bytes()).unwrap_err().contains("255"));
        assert!(IdempotencyKey::parse(b"tab\there").unwrap_err().contains("0x09"));
        assert!(IdempotencyKey::parse("zoë".as_bytes()).is_err());
        assert!(IdempotencyKey::parse(b"del\x7f").is_err());
    }

    #[test]
    fn the_header_is_optional_and_named_when_bad() {
        let mut headers = HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&headers).unwrap(), None);
        headers.insert("idempotency-key", "k-1".parse().unwrap());
        assert_eq!(IdempotencyKey::from_headers(&headers).unwrap().unwrap().partition_key(), "IDEMPOTENCY#k-1");
        headers.insert("idempotency-key", aws_lambda_events::http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        let problem = IdempotencyKey::from_headers(&headers).unwrap_err();
        assert_eq!((problem.status, problem.field.as_deref()), (400, Some(HEADER)));
        headers.insert("idempotency-key", "a".parse().unwrap());
        headers.append("idempotency-key", "b".parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).unwrap_err().detail.contains("more than once"));
    }

    #[test]
    fn the_hash_covers_method_path_and_body() {
        let h = request_hash("POST", "/orders", b"{}");
        assert_eq!(h.len(), 64);
        assert_eq!(h, request_hash("post", "/orders", b"{}"));
        assert_ne!(h, request_hash("POST", "/orders/o-1/cancel", b"{}"));
        assert_ne!(h, request_hash("PUT", "/orders", b"{}"));
        assert_ne!(h, request_hash("POST", "/orders", b"{ }"));
    }

    fn record() -> IdempotencyRecord {
        IdempotencyRecord {
            key: "k-1".into(),
            request_hash: "abc".into(),
            response: StoredResponse { status: 201, body: r#"{"order_id":"o-1"}"#.into(), location: Some("/orders/o-1".into()) },
            created_at: "2026-11-29T08:00:00.000Z".into(),
            expires_at: 1_800_000_000,
        }
    }

    #[test]
    fn records_round_trip_through_dynamodb_attributes() {
        let r = record();
        let item = r.to_item();
        assert_eq!(item["pk"], AttributeValue::S("IDEMPOTENCY#k-1".into()));
        assert_eq!(item["expires_at"], AttributeValue::N("1800000000".into()));
        assert_eq!(IdempotencyRecord::from_item(&item).unwrap(), r);
        let mut without_location = r.clone();
        without_location.response.location = None;
        assert_eq!(IdempotencyRecord::from_item(&without_location.to_item()).unwrap(), without_location);
        let mut broken = item.clone();
        broken.remove("request_hash");
        assert!(IdempotencyRecord::from_item(&broken).unwrap_err().to_string().contains("request_hash"));
    }

    #[test]
    fn same_hash_replays_another_hash_is_a_mismatch() {
        let r = record();
        assert_eq!(r.replay_for("abc"), Replay::Response(r.response.clone()));
        assert_eq!(r.replay_for("abd"), Replay::Mismatch);
    }

    #[test]
    fn expiry_matches_the_put_condition() {
        let r = record();
        assert!(!r.is_expired(r.expires_at));
        assert!(r.is_expired(r.expires_at + 1));
    }

    #[test]
    fn the_put_is_conditioned_and_returns_the_old_record() {
        let conf = aws_sdk_dynamodb::Config::builder().behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest()).build();
        let store = IdempotencyStore::new(aws_sdk_dynamodb::Client::from_conf(conf), "orders", DEFAULT_TTL);
        let request = IdempotentRequest { key: IdempotencyKey::parse(b"k-1").unwrap(), request_hash: "abc".into() };
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-29T08:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let record = store.record(&request, StoredResponse { status: 200, body: "{}".into(), location: None }, now);
        assert_eq!(record.expires_at, now.timestamp() + 86_400);
        let item = store.put(&record, now.timestamp());
        let put = item.put().expect("a put");
        assert_eq!(put.condition_expression(), Some("attribute_not_exists(pk) OR expires_at < :now"));
        assert_eq!(put.expression_attribute_values().unwrap()[":now"], AttributeValue::N(now.timestamp().to_string()));
        assert_eq!(put.return_values_on_condition_check_failure(), Some(&all_old()));
        assert_eq!(put.table_name(), "orders");
    }
}
