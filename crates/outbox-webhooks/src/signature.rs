//! Signing and verifying webhooks by the Standard Webhooks scheme (symmetric `v1`):
//! <https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md>.
//!
//! * headers `webhook-id` (the message id, stable across retries), `webhook-timestamp` (epoch
//!   seconds of this attempt) and `webhook-signature`;
//! * the signature is `v1,<base64 of HMAC-SHA256(secret, "<id>.<timestamp>.<body>")>`; the header
//!   holds one or more of them separated by spaces, so a sender can sign with the old and the new
//!   secret while a secret is rotated, and a receiver accepts any that matches;
//! * secrets are written `whsec_<base64 of 24 to 64 random bytes>`;
//! * the receiver rejects a timestamp more than a tolerance (default 5 minutes) away from its
//!   clock, which bounds replays of a captured request.
//!
//! Comparison is constant-time: the expected tag is checked with the `hmac` crate's
//! [`Mac::verify_slice`] (`subtle` underneath), never with `==`. The HMAC over the body is
//! computed once per secret, however many signatures the header lists, and only for a body of at
//! most [`Verifier::with_max_body_bytes`] (default [`DEFAULT_MAX_BODY_BYTES`]): what a request
//! costs the receiver is bounded before any hashing.

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Header carrying the message id (the outbox event id): the receiver's deduplication key.
pub const WEBHOOK_ID: &str = "webhook-id";
/// Header carrying the attempt's time, epoch seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying the space-separated `v1,<base64>` signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// The prefix of a serialised secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Shortest accepted secret, bytes: the Standard Webhooks minimum ("between 24 bytes and 64
/// bytes"); a shorter HMAC key is refused when it is loaded.
pub const MIN_SECRET_BYTES: usize = 24;
/// Default tolerance between the sender's timestamp and the receiver's clock: 5 minutes.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// Default largest body a [`Verifier`] hashes: 1 MiB, the largest event a bus carries inline
/// (one `PutEvents` entry, `outbox::envelope::DEFAULT_MAX_PUT_EVENTS_BYTES`), so every event this
/// library's dispatcher delivers without a claim check fits. A receiver that accepts larger
/// bodies (claim-checked events delivered inline) raises it with
/// [`Verifier::with_max_body_bytes`]; one that knows its bodies are small lowers it.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Decodes padded and unpadded base64 alike, ignoring stray trailing bits (the reference
/// libraries accept such secrets).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent).with_decode_allow_trailing_bits(true),
);

/// A secret that is not `whsec_<base64>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Not base64 after the prefix.
    #[error("the webhook secret is not base64 after `whsec_`: {0}")]
    NotBase64(#[source] base64::DecodeError),
    /// Empty after decoding.
    #[error("the webhook secret is empty")]
    Empty,
    /// Shorter than [`MIN_SECRET_BYTES`] after decoding.
    #[error("the webhook secret is {0} bytes; Standard Webhooks secrets are at least 24 bytes")]
    TooShort(usize),
}

/// A symmetric signing secret (its bytes; never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes, redacted)", self.0.len())
    }
}

impl Secret {
    /// Parses `whsec_<base64>` (the prefix is optional, padding too, as in the reference libraries).
    ///
    /// # Errors
    /// [`SecretError`] when the text is not base64, decodes to nothing, or to fewer than
    /// [`MIN_SECRET_BYTES`] bytes.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.trim();
        let encoded = encoded.strip_prefix(SECRET_PREFIX).unwrap_or(encoded);
        let bytes = LENIENT.decode(encoded).map_err(SecretError::NotBase64)?;
        if bytes.is_empty() {
            return Err(SecretError::Empty);
        }
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort(bytes.len()));
        }
        Ok(Self(bytes))
    }

    /// Several secrets separated by whitespace (how a secret value holds the current secret and,
    /// during a rotation, the previous one).
    ///
    /// # Errors
    /// The first [`SecretError`]; [`SecretError::Empty`] when there is none.
    pub fn parse_list(text: &str) -> Result<Vec<Self>, SecretError> {
        let secrets = text.split_whitespace().map(Self::parse).collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(secrets)
    }

    /// A new random secret of 32 bytes (the spec asks for 24 to 64).
    pub fn generate() -> Self {
        Self(rand::random::<[u8; 32]>().to_vec())
    }

    /// The serialised form, `whsec_<base64>`.
    pub fn to_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        #[cfg(test)]
        tests::MACS.with(|n| n.set(n.get() + 1));
        // HMAC takes keys of any length (longer ones are hashed first): this cannot fail.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC accepts keys of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// One signature: `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!("v1,{}", STANDARD.encode(self.mac(id, timestamp, body).finalize().into_bytes()))
    }
}

/// The `webhook-signature` value: one signature per secret, space-separated, in order.
pub fn signature_header(secrets: &[Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets.iter().map(|s| s.sign(id, timestamp, body)).collect::<Vec<_>>().join(" ")
}

/// Why a request's signature was not accepted. [`VerifyError::header`] names the header at fault
/// (for the receiver's 401 problem document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A required header is absent.
    #[error("missing header {header}")]
    Missing {
        /// Header name.
        header: &'static str,
    },
    /// `webhook-timestamp` is not an integer.
    #[error("header {header} is not epoch seconds")]
    Invalid {
        /// Header name.
        header: &'static str,
    },
    /// The timestamp is further from the receiver's clock than the tolerance.
    #[error("header webhook-timestamp is {skew_secs} s away from now (tolerance {tolerance_secs} s)")]
    Stale {
        /// Receiver's now minus the timestamp, seconds (negative: in the future).
        skew_secs: i64,
        /// The tolerance, seconds.
        tolerance_secs: u64,
    },
    /// No `v1` signature in the header matches any current secret.
    #[error("no signature in header webhook-signature matches")]
    NoMatch,
    /// The body is larger than the verifier hashes ([`Verifier::with_max_body_bytes`]): refused
    /// before any HMAC is computed (a receiver answers 413).
    #[error("the body is {bytes} bytes, over the limit of {limit}")]
    BodyTooLarge {
        /// The body's size.
        bytes: usize,
        /// The verifier's limit.
        limit: usize,
    },
}

impl VerifyError {
    /// The header at fault (`body` for [`VerifyError::BodyTooLarge`], the one error about the
    /// body rather than a header).
    pub fn header(&self) -> &'static str {
        match self {
            VerifyError::Missing { header } | VerifyError::Invalid { header } => header,
            VerifyError::Stale { .. } => WEBHOOK_TIMESTAMP,
            VerifyError::NoMatch => WEBHOOK_SIGNATURE,
            VerifyError::BodyTooLarge { .. } => "body",
        }
    }
}

/// The three headers of a signed request, as received (any may be missing).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct SignedHeaders<'a> {
    /// `webhook-id`.
    pub id: Option<&'a str>,
    /// `webhook-timestamp`.
    pub timestamp: Option<&'a str>,
    /// `webhook-signature`.
    pub signature: Option<&'a str>,
}

impl<'a> SignedHeaders<'a> {
    /// The three header values as received (`None`: the header is missing).
    pub fn new(id: Option<&'a str>, timestamp: Option<&'a str>, signature: Option<&'a str>) -> Self {
        Self { id, timestamp, signature }
    }

    /// Reads the three headers through `get` (e.g. `|name| headers.get(name)?.to_str().ok()`
    /// over an `http::HeaderMap`, whose names are case-insensitive).
    pub fn from_fn(get: impl Fn(&'static str) -> Option<&'a str>) -> Self {
        Self { id: get(WEBHOOK_ID), timestamp: get(WEBHOOK_TIMESTAMP), signature: get(WEBHOOK_SIGNATURE) }
    }

    /// The first header that is absent (or, for `webhook-id`, empty), in the order
    /// [`Verifier::verify`] checks them: a receiver can refuse such a request before it looks up
    /// any secret.
    pub fn missing(&self) -> Option<&'static str> {
        if self.id.is_none_or(str::is_empty) {
            Some(WEBHOOK_ID)
        } else if self.timestamp.is_none() {
            Some(WEBHOOK_TIMESTAMP)
        } else if self.signature.is_none() {
            Some(WEBHOOK_SIGNATURE)
        } else {
            None
        }
    }
}

/// Verifies signed requests against a sender's current secrets.
#[derive(Debug, Clone)]
pub struct Verifier {
    secrets: Vec<Secret>,
    tolerance: Duration,
    max_body_bytes: usize,
}

impl Verifier {
    /// A verifier accepting any of `secrets` (during a rotation: the new and the old one), with
    /// the default tolerance of 5 minutes and bodies of at most [`DEFAULT_MAX_BODY_BYTES`].
    pub fn new(secrets: Vec<Secret>) -> Self {
        Self { secrets, tolerance: DEFAULT_TOLERANCE, max_body_bytes: DEFAULT_MAX_BODY_BYTES }
    }

    /// Sets the largest body, in bytes, that [`Verifier::verify`] hashes (default
    /// [`DEFAULT_MAX_BODY_BYTES`]); a larger one is [`VerifyError::BodyTooLarge`].
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the timestamp tolerance.
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Checks the headers in the order id → timestamp (present, integer, within the tolerance of
    /// `now`, epoch seconds) → signature header present → body within the size limit →
    /// signature (any `v1` entry matching any secret; other versions are skipped). Returns the
    /// message id.
    ///
    /// Cost: one HMAC-SHA256 pass over the body per secret (at most), whatever the number of
    /// entries the header lists, and none for a body over the limit or a header without a
    /// well-formed `v1` entry.
    ///
    /// # Errors
    /// [`VerifyError`], naming the header at fault.
    pub fn verify<'a>(&self, headers: &SignedHeaders<'a>, body: &[u8], now: i64) -> Result<&'a str, VerifyError> {
        let id = headers.id.filter(|v| !v.is_empty()).ok_or(VerifyError::Missing { header: WEBHOOK_ID })?;
        let timestamp = headers.timestamp.ok_or(VerifyError::Missing { header: WEBHOOK_TIMESTAMP })?;
        let timestamp: i64 = timestamp.trim().parse().map_err(|_| VerifyError::Invalid { header: WEBHOOK_TIMESTAMP })?;
        let skew = now.saturating_sub(timestamp);
        if skew.unsigned_abs() > self.tolerance.as_secs() {
            return Err(VerifyError::Stale { skew_secs: skew, tolerance_secs: self.tolerance.as_secs() });
        }
        let signatures = headers.signature.ok_or(VerifyError::Missing { header: WEBHOOK_SIGNATURE })?;
        if body.len() > self.max_body_bytes {
            return Err(VerifyError::BodyTooLarge { bytes: body.len(), limit: self.max_body_bytes });
        }
        // The listed tags, decoded once; entries of other versions or not base64 are skipped.
        let tags: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .filter_map(|(_, signature)| STANDARD.decode(signature).ok())
            .collect();
        if tags.is_empty() {
            return Err(VerifyError::NoMatch);
        }
        // One pass over the body per secret; each listed tag is then compared (in constant time)
        // against a copy of that secret's finished state.
        let matched = self.secrets.iter().any(|secret| {
            let mac = secret.mac(id, timestamp, body);
            tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
        });
        if matched {
            Ok(id)
        } else {
            Err(VerifyError::NoMatch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published vectors of the Standard Webhooks reference libraries
    // (libraries/rust/src/lib.rs `test_sign`, libraries/python/tests/test_webhooks.py `test_sign_function`).
    const RUST_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const RUST_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const RUST_TS: i64 = 1649367553;
    const RUST_BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;
    const RUST_SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";
    const PY_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const PY_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const PY_TS: i64 = 1614265330;
    const PY_BODY: &str = r#"{"test": 2432232314}"#;
    const PY_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret(text: &str) -> Secret {
        Secret::parse(text).unwrap()
    }

    fn headers<'a>(id: &'a str, ts: &'a str, sig: &'a str) -> SignedHeaders<'a> {
        SignedHeaders::new(Some(id), Some(ts), Some(sig))
    }

    #[test]
    fn signs_the_published_vectors() {
        assert_eq!(secret(RUST_SECRET).sign(RUST_ID, RUST_TS, RUST_BODY.as_bytes()), RUST_SIGNATURE);
        assert_eq!(secret(PY_SECRET).sign(PY_ID, PY_TS, PY_BODY.as_bytes()), PY_SIGNATURE);
        // Without the prefix, and unpadded, the secret is the same.
        assert_eq!(secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), secret(PY_SECRET));
        assert_eq!(secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYqrTwjUPD8"), secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYqrTwjUPD8="));
    }

    #[test]
    fn verifies_the_published_vectors_within_the_tolerance() {
        let v = Verifier::new(vec![secret(PY_SECRET)]);
        let ts = PY_TS.to_string();
        assert_eq!(v.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS + 299), Ok(PY_ID));
        assert_eq!(v.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS - 300), Ok(PY_ID));
        let v = Verifier::new(vec![secret(RUST_SECRET)]);
        let ts = RUST_TS.to_string();
        assert_eq!(v.verify(&headers(RUST_ID, &ts, RUST_SIGNATURE), RUST_BODY.as_bytes(), RUST_TS), Ok(RUST_ID));
        // The reference library's negative vector (a signature of another message).
        let forged = "v1,R3PTzyfHASBKHH98a7yexTwaJ4yNIcGhFQc1yuN+BPU=";
        assert_eq!(v.verify(&headers(RUST_ID, &ts, forged), RUST_BODY.as_bytes(), RUST_TS), Err(VerifyError::NoMatch));
    }

    #[test]
    fn tampered_body_id_or_timestamp_and_wrong_secret_are_rejected() {
        let v = Verifier::new(vec![secret(PY_SECRET)]);
        let ts = PY_TS.to_string();
        let tampered = r#"{"test": 2432232315}"#;
        assert_eq!(v.verify(&headers(PY_ID, &ts, PY_SIGNATURE), tampered.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        assert_eq!(v.verify(&headers("msg_other", &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        let moved = (PY_TS + 1).to_string();
        assert_eq!(v.verify(&headers(PY_ID, &moved, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        let wrong = Verifier::new(vec![Secret::generate()]);
        assert_eq!(wrong.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        // A one-bit change of the tag, a v2 entry with the right tag, and garbage.
        let flipped = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=";
        assert_eq!(v.verify(&headers(PY_ID, &ts, flipped), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        let v2 = PY_SIGNATURE.replacen("v1,", "v2,", 1);
        assert_eq!(v.verify(&headers(PY_ID, &ts, &v2), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
        assert_eq!(v.verify(&headers(PY_ID, &ts, "v1,%%% v1"), PY_BODY.as_bytes(), PY_TS), Err(VerifyError::NoMatch));
    }

    #[test]
    fn stale_future_missing_and_invalid_headers_name_the_header() {
        let v = Verifier::new(vec![secret(PY_SECRET)]);
        let ts = PY_TS.to_string();
        let err = v.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS + 301).unwrap_err();
        assert_eq!(err, VerifyError::Stale { skew_secs: 301, tolerance_secs: 300 });
        assert_eq!(err.header(), WEBHOOK_TIMESTAMP);
        let err = v.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS - 301).unwrap_err();
        assert_eq!(err, VerifyError::Stale { skew_secs: -301, tolerance_secs: 300 });
        let shorter = v.clone().with_tolerance(Duration::from_secs(10));
        assert!(matches!(shorter.verify(&headers(PY_ID, &ts, PY_SIGNATURE), PY_BODY.as_bytes(), PY_TS + 11), Err(VerifyError::Stale { .. })));
        let none = SignedHeaders::default();
        assert_eq!(v.verify(&none, b"", PY_TS).unwrap_err().header(), WEBHOOK_ID);
        assert_eq!(none.missing(), Some(WEBHOOK_ID));
        assert_eq!(SignedHeaders { id: Some(""), ..headers(PY_ID, &ts, PY_SIGNATURE) }.missing(), Some(WEBHOOK_ID));
        assert_eq!(SignedHeaders { timestamp: None, ..headers(PY_ID, &ts, PY_SIGNATURE) }.missing(), Some(WEBHOOK_TIMESTAMP));
        assert_eq!(SignedHeaders { signature: None, ..headers(PY_ID, &ts, PY_SIGNATURE) }.missing(), Some(WEBHOOK_SIGNATURE));
        assert_eq!(headers(PY_ID, "x", "y").missing(), None);
        let no_ts = SignedHeaders { id: Some(PY_ID), ..Default::default() };
        assert_eq!(v.verify(&no_ts, b"", PY_TS).unwrap_err(), VerifyError::Missing { header: WEBHOOK_TIMESTAMP });
        let no_sig = SignedHeaders::new(Some(PY_ID), Some(&ts), None);
        assert_eq!(v.verify(&no_sig, b"", PY_TS).unwrap_err(), VerifyError::Missing { header: WEBHOOK_SIGNATURE });
        assert_eq!(v.verify(&headers(PY_ID, "soon", PY_SIGNATURE), b"", PY_TS).unwrap_err(), VerifyError::Invalid { header: WEBHOOK_TIMESTAMP });
    }

    #[test]
    fn rotation_signs_with_both_secrets_and_either_verifies() {
        let (old, new) = (Secret::generate(), Secret::generate());
        let header = signature_header(&[new.clone(), old.clone()], "evt_1", 1_700_000_000, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        let ts = "1700000000";
        for receiver in [vec![old.clone()], vec![new.clone()], vec![old, new]] {
            assert_eq!(Verifier::new(receiver).verify(&headers("evt_1", ts, &header), b"{}", 1_700_000_000), Ok("evt_1"));
        }
        assert_eq!(Verifier::new(vec![Secret::generate()]).verify(&headers("evt_1", ts, &header), b"{}", 1_700_000_000), Err(VerifyError::NoMatch));
    }

    // The tags computed for one verification, thread by thread (each test runs on its own thread).
    thread_local! {
        pub(super) static MACS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn macs_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
        MACS.with(|n| n.set(0));
        let result = f();
        (result, MACS.with(std::cell::Cell::get))
    }

    /// The HMAC over the body is computed once per secret, however many signatures the sender
    /// lists (a header of 50 entries must not cost 50 passes over the body).
    #[test]
    fn verification_computes_one_tag_per_secret_whatever_the_header_lists() {
        let secrets = vec![Secret::generate(), Secret::generate()];
        let body = vec![b'x'; 64 * 1024];
        let ts = 1_700_000_000;
        let mut entries: Vec<String> = (0..50).map(|_| Secret::generate().sign("evt_1", ts, &body)).collect();
        let header = entries.join(" ");
        let v = Verifier::new(secrets.clone());
        let (result, macs) = macs_during(|| v.verify(&headers("evt_1", "1700000000", &header), &body, ts));
        assert_eq!(result, Err(VerifyError::NoMatch));
        assert_eq!(macs, secrets.len(), "one HMAC per secret, not per (entry, secret)");
        // The matching entry listed last, signed by the second secret, is still found.
        entries.push(secrets[1].sign("evt_1", ts, &body));
        let header = entries.join(" ");
        let (result, macs) = macs_during(|| v.verify(&headers("evt_1", "1700000000", &header), &body, ts));
        assert_eq!(result, Ok("evt_1"));
        assert!(macs <= secrets.len(), "{macs}");
    }

    /// A body over the verifier's cap is refused before any HMAC is computed.
    #[test]
    fn a_body_over_the_cap_is_refused_without_hashing_it() {
        let secret = Secret::generate();
        let ts = 1_700_000_000;
        let body = vec![b'x'; 2 * 1024 * 1024];
        let header = secret.sign("evt_1", ts, &body);
        let v = Verifier::new(vec![secret.clone()]);
        let (result, macs) = macs_during(|| v.verify(&headers("evt_1", "1700000000", &header), &body, ts));
        assert_eq!(result, Err(VerifyError::BodyTooLarge { bytes: 2 * 1024 * 1024, limit: DEFAULT_MAX_BODY_BYTES }));
        assert_eq!(result.unwrap_err().header(), "body");
        assert_eq!(macs, 0, "refused before hashing");
        // At the limit it verifies; the limit is the receiver's to set.
        let at = &body[..DEFAULT_MAX_BODY_BYTES];
        let header_at = secret.sign("evt_1", ts, at);
        assert_eq!(v.verify(&headers("evt_1", "1700000000", &header_at), at, ts), Ok("evt_1"));
        let raised = v.clone().with_max_body_bytes(4 * 1024 * 1024);
        assert_eq!(raised.verify(&headers("evt_1", "1700000000", &header), &body, ts), Ok("evt_1"));
        let lowered = v.with_max_body_bytes(1024);
        let small = &body[..2048];
        let err = lowered.verify(&headers("evt_1", "1700000000", &header), small, ts).unwrap_err();
        assert_eq!(err.to_string(), "the body is 2048 bytes, over the limit of 1024");
    }

    #[test]
    fn secrets_round_trip_and_bad_ones_are_refused() {
        let s = Secret::generate();
        assert_eq!(Secret::parse(&s.to_whsec()), Ok(s.clone()));
        assert!(!format!("{s:?}").contains(&s.to_whsec()[6..]));
        let not_base64 = Secret::parse("whsec_not base64!").unwrap_err();
        assert!(matches!(not_base64, SecretError::NotBase64(_)));
        assert!(std::error::Error::source(&not_base64).is_some_and(|e| e.is::<base64::DecodeError>()), "the decoder's error kept: {not_base64:?}");
        assert_eq!(Secret::parse("whsec_"), Err(SecretError::Empty));
        // Below the Standard Webhooks minimum of 24 bytes: 1 byte, 23 bytes.
        assert_eq!(Secret::parse("whsec_AA=="), Err(SecretError::TooShort(1)));
        assert_eq!(Secret::parse(&format!("whsec_{}", STANDARD.encode([7u8; 23]))), Err(SecretError::TooShort(23)));
        assert!(Secret::parse(&format!("whsec_{}", STANDARD.encode([7u8; 24]))).is_ok());
        assert_eq!(Secret::parse_list("  "), Err(SecretError::Empty));
        assert_eq!(Secret::parse_list(&format!("{} {}", RUST_SECRET, PY_SECRET)).map(|l| l.len()), Ok(2));
    }
}
