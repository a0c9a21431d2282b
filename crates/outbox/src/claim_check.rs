//! Claim check for large payloads (feature `claim-check`): a payload too large for the outbox
//! item (DynamoDB's 400 KB) or for one `PutEvents` entry is stored in S3, and the outbox item and
//! the bus event carry a [`PayloadRef`] (bucket, key, size, SHA-256) instead of the bytes.
//!
//! - **Producer**: an [`OutboxWriter`](crate::OutboxWriter) with
//!   [`with_claim_check`](crate::OutboxWriter::with_claim_check) accepts payloads up to
//!   [`ClaimCheck::max_bytes`] (default [`DEFAULT_MAX_BYTES`], 10 MiB). Whether a payload is
//!   inline is computed by the writer's own checks (item size, entry size): inline when both pass,
//!   offloaded otherwise. The object is uploaded (`PutObject`, key `<prefix>/<event_id>`) BEFORE
//!   the transaction ([`OutboxTransaction::execute`](crate::OutboxTransaction::execute),
//!   [`OutboxTransaction::into_items`](crate::OutboxTransaction::into_items)). If the transaction then fails,
//!   the object is an orphan nobody references: the bucket's lifecycle rule deletes it (the
//!   template's `OutboxPayloadBucket` expires objects after the outbox retention plus the longest
//!   redelivery window); nothing else cleans it up.
//! - **Relay**: publishes `detail.data_ref` (the reference), never the bytes
//!   ([`OutboxItem::to_bus_event`](crate::envelope::OutboxItem::to_bus_event)).
//! - **Consumer**: with [`ConsumerBuilder::claim_check`](crate::consumer::ConsumerBuilder::claim_check),
//!   an event with `detail.data_ref` and no `detail.data` is fetched (`GetObject`) and verified
//!   (size, SHA-256) before decoding, so handlers are the same for small and large events and the
//!   inbox's payload hash is over the real payload. It is fetched only when the inbox does not
//!   already hold the event as applied with that hash
//!   ([`InboxStore::applied_sha256`](crate::inbox::InboxStore::applied_sha256), one consistent read):
//!   a duplicate costs no download. A missing or corrupt object is dead-lettered
//!   ([`ClaimCheckError::Missing`], [`ClaimCheckError::Corrupt`]); a transient S3 failure is
//!   retried like any other ([`AwsError`]).
//!
//! Permissions: the producer needs `s3:PutObject` on `arn:aws:s3:::<bucket>/<prefix>/*`, the
//! consumer `s3:GetObject` on the same objects; nothing else. Without `s3:ListBucket`, S3 answers
//! a missing object with 403 `AccessDenied` instead of 404 `NoSuchKey` ("GetObject", Permissions,
//! <https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetObject.html>): both are permanent and
//! dead-lettered, the 403 as [`ClaimCheckError::S3`] naming the code.

use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;
use sha2::{Digest, Sha256};

use crate::aws_error::AwsError;
use crate::envelope::PayloadRef;

/// Default largest payload the claim check stores: 10 MiB.
pub const DEFAULT_MAX_BYTES: usize = 10 * 1024 * 1024;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "outbox";

/// Why a payload could not be stored or fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimCheckError {
    /// The object does not exist (deleted, expired by the lifecycle rule, or never uploaded).
    /// Permanent.
    #[error("payload object s3://{bucket}/{key} does not exist (NoSuchKey)")]
    Missing {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// The object's size or SHA-256 differs from the reference. Permanent.
    #[error("payload object s3://{bucket}/{key} is corrupt: {reason}")]
    Corrupt {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// Which check failed, with expected and actual values.
        reason: String,
    },
    /// The payload is larger than [`ClaimCheck::max_bytes`]. Permanent.
    #[error("payload of {bytes} bytes exceeds the claim check's maximum of {limit} bytes")]
    TooLarge {
        /// Payload size in bytes.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// `PutObject` or `GetObject` failed; retryable as [`AwsError`] classifies it.
    #[error("payload object s3://{bucket}/{key}: {source}")]
    S3 {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The classified AWS error.
        source: Box<AwsError>,
    },
    /// The object's body could not be read to its end (connection lost): retryable.
    #[error("payload object s3://{bucket}/{key}: reading the body failed: {reason}")]
    Read {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The stream error.
        reason: String,
    },
}

impl ClaimCheckError {
    /// Whether a later attempt can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClaimCheckError::S3 { source, .. } => source.retryable,
            ClaimCheckError::Read { .. } => true,
            ClaimCheckError::Missing { .. } | ClaimCheckError::Corrupt { .. } | ClaimCheckError::TooLarge { .. } => false,
        }
    }

    /// Short machine-readable name (a dead letter's `error_type`): `PayloadMissing`,
    /// `PayloadCorrupt`, `PayloadTooLarge`, `Retryable` or `PayloadStoreError`.
    pub fn error_type(&self) -> &'static str {
        match self {
            ClaimCheckError::Missing { .. } => "PayloadMissing",
            ClaimCheckError::Corrupt { .. } => "PayloadCorrupt",
            ClaimCheckError::TooLarge { .. } => "PayloadTooLarge",
            e if e.is_retryable() => "Retryable",
            _ => "PayloadStoreError",
        }
    }
}

/// Stores and fetches payloads in one S3 bucket under one key prefix. Cheap to clone (the SDK
/// client is shared).
#[derive(Debug, Clone)]
pub struct ClaimCheck {
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
    max_bytes: usize,
}

impl ClaimCheck {
    /// A claim check storing under `s3://<bucket>/<prefix>/…` (no prefix when `prefix` is
    /// empty), accepting payloads of at most [`DEFAULT_MAX_BYTES`].
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into().trim_matches('/').to_owned();
        Self { client, bucket: bucket.into(), prefix, max_bytes: DEFAULT_MAX_BYTES }
    }

    /// Sets the largest payload accepted, in bytes.
    pub fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// The largest payload accepted, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object key of `event_id`: `<prefix>/<event_id>`.
    pub fn key(&self, event_id: &str) -> String {
        if self.prefix.is_empty() {
            event_id.to_owned()
        } else {
            format!("{}/{event_id}", self.prefix)
        }
    }

    /// The reference `payload` will have once stored for `event_id` (computed, nothing sent).
    ///
    /// # Errors
    /// [`ClaimCheckError::TooLarge`] above [`ClaimCheck::max_bytes`].
    pub fn reference(&self, event_id: &str, payload: &[u8]) -> Result<PayloadRef, ClaimCheckError> {
        if payload.len() > self.max_bytes {
            return Err(ClaimCheckError::TooLarge { bytes: payload.len(), limit: self.max_bytes });
        }
        Ok(PayloadRef { bucket: self.bucket.clone(), key: self.key(event_id), size: payload.len() as u64, sha256: sha256_hex(payload) })
    }

    /// Uploads `payload` as the object `reference` names (`PutObject`; S3 encrypts it with the
    /// bucket's default encryption). Overwriting is harmless: the key is the event id, the bytes
    /// the same.
    ///
    /// # Errors
    /// [`ClaimCheckError::S3`], retryable or not as [`AwsError`] classifies it.
    pub async fn upload(&self, reference: &PayloadRef, payload: Vec<u8>) -> Result<(), ClaimCheckError> {
        self.client
            .put_object()
            .bucket(&reference.bucket)
            .key(&reference.key)
            .content_type("application/json")
            .metadata("sha256", &reference.sha256)
            .body(ByteStream::from(payload))
            .send()
            .await
            .map_err(|e| ClaimCheckError::S3 {
                bucket: reference.bucket.clone(),
                key: reference.key.clone(),
                source: Box::new(AwsError::from_sdk("PutObject", &e)),
            })?;
        Ok(())
    }

    /// Stores `payload` for `event_id` and returns its reference.
    ///
    /// # Errors
    /// See [`ClaimCheck::reference`] and [`ClaimCheck::upload`].
    pub async fn store(&self, event_id: &str, payload: Vec<u8>) -> Result<PayloadRef, ClaimCheckError> {
        let reference = self.reference(event_id, &payload)?;
        self.upload(&reference, payload).await?;
        Ok(reference)
    }

    /// Fetches the payload `reference` names (`GetObject`) and verifies its size and SHA-256.
    ///
    /// # Errors
    /// [`ClaimCheckError::Missing`] (`NoSuchKey`, HTTP 404), [`ClaimCheckError::Corrupt`],
    /// [`ClaimCheckError::S3`] / [`ClaimCheckError::Read`] for other failures.
    pub async fn fetch(&self, reference: &PayloadRef) -> Result<Vec<u8>, ClaimCheckError> {
        let (bucket, key) = (reference.bucket.clone(), reference.key.clone());
        if reference.size > self.max_bytes as u64 {
            return Err(ClaimCheckError::Corrupt {
                bucket,
                key,
                reason: format!("the reference's size {} exceeds the maximum {}", reference.size, self.max_bytes),
            });
        }
        let answer = match self.client.get_object().bucket(&reference.bucket).key(&reference.key).send().await {
            Ok(answer) => answer,
            Err(e) => {
                let missing = matches!(e.as_service_error(), Some(GetObjectError::NoSuchKey(_)))
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404);
                if missing {
                    return Err(ClaimCheckError::Missing { bucket, key });
                }
                return Err(ClaimCheckError::S3 { bucket, key, source: Box::new(AwsError::from_sdk("GetObject", &e)) });
            }
        };
        if let Some(length) = answer.content_length() {
            if length as u64 != reference.size {
                return Err(ClaimCheckError::Corrupt { bucket, key, reason: format!("size {length} bytes, the reference says {}", reference.size) });
            }
        }
        let body =
            answer.body.collect().await.map_err(|e| ClaimCheckError::Read { bucket: bucket.clone(), key: key.clone(), reason: e.to_string() })?;
        let bytes = body.into_bytes().to_vec();
        verify(reference, &bytes)?;
        Ok(bytes)
    }
}

/// Checks `bytes` against `reference`: size, then SHA-256.
///
/// # Errors
/// [`ClaimCheckError::Corrupt`] naming the check, the expected and the actual value.
pub fn verify(reference: &PayloadRef, bytes: &[u8]) -> Result<(), ClaimCheckError> {
    let corrupt = |reason: String| ClaimCheckError::Corrupt { bucket: reference.bucket.clone(), key: reference.key.clone(), reason };
    if bytes.len() as u64 != reference.size {
        return Err(corrupt(format!("size {} bytes, the reference says {}", bytes.len(), reference.size)));
    }
    let actual = sha256_hex(bytes);
    if !actual.eq_ignore_ascii_case(&reference.sha256) {
        return Err(corrupt(format!("SHA-256 {actual}, the reference says {}", reference.sha256)));
    }
    Ok(())
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> ClaimCheck {
        let config = aws_sdk_s3::Config::builder().behavior_version(aws_sdk_s3::config::BehaviorVersion::latest()).build();
        ClaimCheck::new(aws_sdk_s3::Client::from_conf(config), "payloads", "/orders/")
    }

    #[test]
    fn reference_names_the_key_size_and_digest() {
        let r = check().reference("evt-1", b"{\"a\":1}").unwrap();
        assert_eq!(r.bucket, "payloads");
        assert_eq!(r.key, "orders/evt-1");
        assert_eq!(r.size, 7);
        assert_eq!(r.sha256, "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862");
        assert_eq!(ClaimCheck::new(check().client, "b", "").key("e"), "e");
    }

    #[test]
    fn too_large_payloads_are_refused_before_any_upload() {
        let err = check().with_max_bytes(3).reference("e", b"1234").unwrap_err();
        assert_eq!(err, ClaimCheckError::TooLarge { bytes: 4, limit: 3 });
        assert!(!err.is_retryable());
    }

    #[test]
    fn verify_names_the_failed_check() {
        let r = check().reference("e", b"\"abc\"").unwrap();
        assert!(verify(&r, b"\"abc\"").is_ok());
        let size = verify(&r, b"\"abcd\"").unwrap_err();
        assert!(size.to_string().contains("size 6 bytes, the reference says 5"), "{size}");
        let digest = verify(&r, b"\"abd\"").unwrap_err();
        assert!(digest.to_string().contains("is corrupt: SHA-256"), "{digest}");
        assert_eq!(digest.error_type(), "PayloadCorrupt");
        assert!(!digest.is_retryable());
    }
}
