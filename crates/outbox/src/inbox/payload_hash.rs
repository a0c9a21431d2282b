//! The inbox's payload hash ([`PayloadHash`]): what tells a duplicate from an event id reused for
//! another payload.

use sha2::{Digest, Sha256};

/// Prefix of a stored payload hash over the RFC 8785 canonical form (version 1 of the scheme).
pub const CANONICAL_PREFIX: &str = "jcs1:";

/// What the inbox compares to tell a duplicate from an event id reused for another payload: the
/// SHA-256 of the payload's JSON in its RFC 8785 canonical form (JSON Canonicalization Scheme,
/// <https://www.rfc-editor.org/rfc/rfc8785>), so that a copy of the event whose `detail.data` was
/// re-serialised by some hop (a replay, a redrive, an input transformer, another SDK, the local
/// runtime's bus) is still a duplicate.
///
/// # What is compared
///
/// The payload (`detail.data` of a consumer's event, the body of a webhook) is parsed as JSON and
/// written out canonically: no whitespace, object members sorted by their names' UTF-16 code
/// units, strings with the minimal escapes (`"\u00e9"` and `"é"` are one string), numbers as
/// IEEE 754 doubles in ECMAScript's shortest form (RFC 8785 section 3.2.2.3). So:
///
/// | the same payload | a different payload |
/// |---|---|
/// | other whitespace, other member order (nested objects too) | another value anywhere, another array order |
/// | `1`, `1.0`, `1e0`, `10e-1` (one number) | `1` and `"1"` (number and string) |
/// | `"\u00e9"` and `"é"`, `"\/"` and `"/"` | a member added or removed |
///
/// **Integers beyond ±2^53** (9007199254740992) have no exact double: RFC 8785 would make, e.g.,
/// `9007199254740993` and `9007199254740992` one number, and an event id reused for a payload
/// that differs only there would be absorbed as a duplicate, silently. A payload holding such an
/// integer is therefore compared **byte for byte** (as before this scheme): its redelivery with
/// the same bytes is a duplicate, a re-serialised one a conflict (dead-lettered as
/// `PayloadMismatch`, never lost). Send such numbers as JSON strings (RFC 8785 section 6 and
/// I-JSON, RFC 7493 section 2.2, advise the same). Decimals with more significant digits than a
/// double holds (17) compare by their nearest double, as RFC 8785 says. An object with a
/// duplicated member name keeps its last value (I-JSON forbids duplicates). A payload that is not
/// JSON at all is compared byte for byte.
///
/// # What is stored, and rows of earlier versions
///
/// The inbox row's `payload_hash` attribute is `jcs1:` followed by the hex SHA-256 (64
/// characters) of the canonical form; a payload compared byte for byte (above) stores the bare
/// hex SHA-256 of its bytes, which is also what every row written before this scheme holds. A
/// stored hash with the `jcs1:` prefix is compared with the delivery's canonical hash, one
/// without a prefix with the SHA-256 of the delivery's bytes exactly as before
/// ([`PayloadHash::matches`]): rows written by an earlier version keep detecting the duplicates
/// and conflicts they did, and no row needs migrating (they expire with the inbox's retention).
/// The row also holds `payload_sha256`, the SHA-256 of the bytes as delivered: the consumer's
/// claim check compares it with the S3 reference's SHA-256 to absorb a duplicate without a
/// download ([`InboxStore::applied_sha256`](super::InboxStore::applied_sha256)).
///
/// A value holds the hashes of one delivered payload: the form to store and the forms a stored
/// hash is compared with, computed once per delivery ([`PayloadHash::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadHash {
    /// `jcs1:<hex SHA-256 of the canonical form>`, or `None` when the payload is compared byte
    /// for byte (not JSON, or an integer beyond ±2^53).
    canonical: Option<String>,
    /// Hex SHA-256 (64 characters) of the bytes as delivered.
    sha256: String,
}

impl PayloadHash {
    /// The hashes of `data`, the payload as delivered (JSON text; any other text is hashed byte
    /// for byte). Never fails: see [`PayloadHash`] for what is compared.
    pub fn of(data: &str) -> Self {
        let sha256 = hex::encode(Sha256::digest(data.as_bytes()));
        let canonical = canonical_form(data).map(|form| format!("{CANONICAL_PREFIX}{}", hex::encode(Sha256::digest(form.as_bytes()))));
        Self { canonical, sha256 }
    }

    /// The value to store as the row's `payload_hash`: the canonical hash (`jcs1:…`), or the
    /// bare SHA-256 of the bytes when the payload is compared byte for byte.
    pub fn stored(&self) -> &str {
        self.canonical.as_deref().unwrap_or(&self.sha256)
    }

    /// The hex SHA-256 (64 characters) of the bytes as delivered (the row's `payload_sha256`).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether `stored` (a row's `payload_hash`, written by this or an earlier version) names
    /// this payload: a `jcs1:` hash equal to this payload's canonical hash, or an unprefixed
    /// hash equal to the SHA-256 of this payload's bytes. Any other stored value (a later
    /// version's prefix this version does not know) does not match: a conflict, dead-lettered,
    /// never silently absorbed.
    pub fn matches(&self, stored: &str) -> bool {
        self.compared_with(stored) == stored
    }

    /// This payload's hash in the form `stored` has (for [`matches`](Self::matches) and the
    /// `delivered` hash of a [`PayloadMismatch`](super::InboxError::PayloadMismatch)).
    pub fn compared_with(&self, stored: &str) -> &str {
        if stored.starts_with(CANONICAL_PREFIX) {
            self.canonical.as_deref().unwrap_or(&self.sha256)
        } else {
            &self.sha256
        }
    }
}

impl std::fmt::Display for PayloadHash {
    /// The stored form ([`PayloadHash::stored`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.stored())
    }
}

/// The RFC 8785 form of `data`, or `None` when `data` is compared byte for byte: not JSON, or an
/// integer no double holds exactly.
fn canonical_form(data: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(data).ok()?;
    if !doubles_exact(&value) {
        return None;
    }
    // Fails only for a number that is not finite, which parsed JSON never holds.
    serde_json_canonicalizer::to_string(&value).ok()
}

/// Largest integer whose neighbours a double still tells apart: 2^53.
const EXACT_INTEGER: u64 = 1 << 53;

/// Whether every integer in `value` is within ±2^53 (so its double is exact).
fn doubles_exact(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u <= EXACT_INTEGER,
            (None, Some(i)) => i.unsigned_abs() <= EXACT_INTEGER,
            // A float (parsed to the nearest double, which is what RFC 8785 compares).
            (None, None) => true,
        },
        Value::Array(items) => items.iter().all(doubles_exact),
        Value::Object(members) => members.values().all(doubles_exact),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &str, b: &str) {
        let (ha, hb) = (PayloadHash::of(a), PayloadHash::of(b));
        assert!(ha.matches(hb.stored()) && hb.matches(ha.stored()), "{a} and {b} must be one payload");
    }

    fn different(a: &str, b: &str) {
        let (ha, hb) = (PayloadHash::of(a), PayloadHash::of(b));
        assert!(!ha.matches(hb.stored()) && !hb.matches(ha.stored()), "{a} and {b} must be two payloads");
    }

    #[test]
    fn whitespace_and_member_order_do_not_matter() {
        same(r#"{"order_id":"o-1","quantity":2}"#, "{ \"quantity\" : 2,\n  \"order_id\" : \"o-1\" }");
        same(r#"{"a":{"y":[1,{"q":true,"p":null}],"x":"s"},"b":[]}"#, r#"{"b": [ ], "a": {"x": "s", "y": [1, {"p": null, "q": true}]}}"#);
    }

    #[test]
    fn values_array_order_types_and_members_matter() {
        different(r#"{"order_id":"o-1","quantity":2}"#, r#"{"order_id":"o-1","quantity":3}"#);
        different(r#"{"a":{"b":{"c":1}}}"#, r#"{"a":{"b":{"c":2}}}"#);
        different(r#"[1,2]"#, r#"[2,1]"#);
        different(r#"{"n":1}"#, r#"{"n":"1"}"#);
        different(r#"{"n":1}"#, r#"{"n":1,"m":null}"#);
        different(r#"{"s":"é"}"#, r#"{"s":"e"}"#);
    }

    #[test]
    fn numbers_compare_as_doubles() {
        same(r#"{"n":1}"#, r#"{"n":1.0}"#);
        same(r#"{"n":1}"#, r#"{"n":1e0}"#);
        same(r#"{"n":0.5}"#, r#"{"n":5E-1}"#);
        same(r#"{"n":-0}"#, r#"{"n":0}"#);
        different(r#"{"n":1}"#, r#"{"n":1.5}"#);
        same(r#"{"n":9007199254740992}"#, r#"{ "n": 9007199254740992 }"#);
    }

    #[test]
    fn an_integer_no_double_holds_is_compared_byte_for_byte() {
        // One double, two integers: never one payload.
        different(r#"{"id":9007199254740993}"#, r#"{"id":9007199254740992}"#);
        different(r#"{"id":-9007199254740993}"#, r#"{"id":-9007199254740992}"#);
        let hash = PayloadHash::of(r#"{"id":18446744073709551615}"#);
        assert_eq!(hash.stored(), hash.sha256(), "stored unprefixed: the bytes' hash");
        assert!(hash.matches(PayloadHash::of(r#"{"id":18446744073709551615}"#).stored()));
        different(r#"{"id":18446744073709551615}"#, r#"{ "id": 18446744073709551615 }"#);
    }

    #[test]
    fn unicode_escapes_are_one_string() {
        same(r#"{"s":"caf\u00e9"}"#, r#"{"s":"café"}"#);
        same(r#"{"s":"a\/b"}"#, r#"{"s":"a/b"}"#);
        same(r#"{"s":"\ud83d\ude00"}"#, r#"{"s":"😀"}"#);
        // Member names too, sorted by UTF-16 code units.
        same(r#"{"\u00e9":1,"z":2}"#, r#"{"z":2,"é":1}"#);
    }

    #[test]
    fn the_stored_form_is_versioned_and_pinned() {
        let hash = PayloadHash::of("{ \"b\": 1, \"a\": [1.0, \"x\"] }");
        // SHA-256 of the canonical form `{"a":[1,"x"],"b":1}`.
        assert_eq!(hash.stored(), format!("jcs1:{}", hex::encode(Sha256::digest(br#"{"a":[1,"x"],"b":1}"#))));
        assert_eq!(hash.sha256(), hex::encode(Sha256::digest("{ \"b\": 1, \"a\": [1.0, \"x\"] }".as_bytes())));
        assert_eq!(hash.to_string(), hash.stored());
    }

    #[test]
    fn rows_hashed_byte_for_byte_by_an_earlier_version_keep_working() {
        let data = r#"{"order_id":"o-1","quantity":2}"#;
        let legacy = hex::encode(Sha256::digest(data.as_bytes()));
        assert!(PayloadHash::of(data).matches(&legacy), "the same bytes: a duplicate");
        assert_eq!(PayloadHash::of(data).compared_with(&legacy), legacy);
        // Against a legacy row only the bytes count: a re-serialised copy is a conflict, as it was.
        assert!(!PayloadHash::of(r#"{"quantity":2,"order_id":"o-1"}"#).matches(&legacy));
        assert!(!PayloadHash::of(r#"{"order_id":"o-1","quantity":3}"#).matches(&legacy));
    }

    #[test]
    fn text_that_is_not_json_is_compared_byte_for_byte() {
        let hash = PayloadHash::of("not json");
        assert_eq!(hash.stored(), hash.sha256());
        assert!(hash.matches(PayloadHash::of("not json").stored()));
        different("not json", "not  json");
    }

    #[test]
    fn an_unknown_version_never_matches() {
        let data = r#"{"a":1}"#;
        assert!(!PayloadHash::of(data).matches(&format!("jcs2:{}", PayloadHash::of(data).sha256())));
        assert!(!PayloadHash::of(data).matches(""));
    }
}
