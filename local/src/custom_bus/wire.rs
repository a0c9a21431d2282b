//! The Custom Event Bus's wire protocol, Smithy RPC v2 CBOR, as `aws-sdk-eventbridgev2` speaks
//! it: `POST /service/AWSEventsV2/operation/<Operation>` with a CBOR map body
//! (`Content-Type: application/cbor`, header `smithy-protocol: rpc-v2-cbor`); timestamps are CBOR
//! tag 1 (epoch seconds); an error is a non-2xx answer whose CBOR map has `__type` (the error
//! shape's id) and `message`, which the SDK reads into the error code (its `cbor_errors.rs`).
//! Source: <https://smithy.io/2.0/additional-specs/protocols/smithy-rpc-v2.html>.
//!
//! Bodies are converted to and from JSON values so the operations read like the API reference.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use ciborium::value::Value as Cbor;
use serde_json::{Map, Number, Value};

/// The path prefix of every Custom Event Bus operation.
pub(crate) const PATH_PREFIX: &str = "/service/AWSEventsV2/operation/";

/// Members the API reference types as timestamps (written as CBOR tag 1).
const TIMESTAMP_MEMBERS: [&str; 5] = ["CreationTime", "LastModifiedTime", "StartingPoint", "EndPoint", "Time"];

/// The operation a request path names (`PutEvents`), if it is a Custom Event Bus path.
pub(crate) fn operation_of(path: &str) -> Option<&str> {
    path.strip_prefix(PATH_PREFIX).filter(|op| !op.is_empty() && !op.contains('/'))
}

/// A request body as JSON: a CBOR map (an empty body is an empty object); timestamps become
/// epoch seconds, blobs base64-free byte arrays are refused.
///
/// # Errors
/// [`WireError`] (an InvalidInput answer) when the body is not a CBOR map.
pub(crate) fn decode(body: &[u8]) -> Result<Value, WireError> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let cbor: Cbor = ciborium::de::from_reader(body).map_err(|e| WireError::invalid(format!("the request body is not CBOR: {e}")))?;
    let json = to_json(cbor)?;
    if !json.is_object() {
        return Err(WireError::invalid("the request body must be a CBOR map"));
    }
    Ok(json)
}

fn to_json(v: Cbor) -> Result<Value, WireError> {
    Ok(match v {
        Cbor::Null => Value::Null,
        Cbor::Bool(b) => Value::Bool(b),
        Cbor::Text(s) => Value::String(s),
        Cbor::Integer(i) => {
            let i = i128::from(i);
            match (i64::try_from(i), u64::try_from(i)) {
                (Ok(n), _) => Value::from(n),
                (_, Ok(n)) => Value::from(n),
                _ => return Err(WireError::invalid("an integer out of range")),
            }
        }
        Cbor::Float(f) => Number::from_f64(f).map(Value::Number).ok_or_else(|| WireError::invalid("a float that is not finite"))?,
        Cbor::Tag(1, inner) => to_json(*inner)?,
        Cbor::Array(items) => Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?),
        Cbor::Map(pairs) => {
            let mut map = Map::new();
            for (k, v) in pairs {
                let Cbor::Text(k) = k else { return Err(WireError::invalid("a map key that is not text")) };
                map.insert(k, to_json(v)?);
            }
            Value::Object(map)
        }
        Cbor::Bytes(_) => return Err(WireError::invalid("blob members are not used by the operations played locally")),
        Cbor::Tag(tag, _) => return Err(WireError::invalid(format!("CBOR tag {tag} is not used by this protocol"))),
        _ => return Err(WireError::invalid("an unknown CBOR value")),
    })
}

fn to_cbor(key: Option<&str>, v: &Value) -> Cbor {
    match v {
        Value::Null => Cbor::Null,
        Value::Bool(b) => Cbor::Bool(*b),
        Value::String(s) => Cbor::Text(s.clone()),
        Value::Number(n) if key.is_some_and(|k| TIMESTAMP_MEMBERS.contains(&k)) => Cbor::Tag(1, Box::new(Cbor::Float(n.as_f64().unwrap_or(0.0)))),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cbor::Integer(i.into()),
            (_, Some(u)) => Cbor::Integer(u.into()),
            _ => Cbor::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(items) => Cbor::Array(items.iter().map(|i| to_cbor(None, i)).collect()),
        Value::Object(map) => Cbor::Map(map.iter().map(|(k, v)| (Cbor::Text(k.clone()), to_cbor(Some(k), v))).collect()),
    }
}

/// `value` as a CBOR body.
pub(crate) fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and every JSON value has a CBOR form.
    if let Err(e) = ciborium::ser::into_writer(&to_cbor(None, value), &mut out) {
        tracing::error!(error = %e, "custom bus: could not encode an answer");
    }
    out
}

/// A 200 answer with body `value`.
pub(crate) fn ok(value: &Value) -> Response {
    answer(StatusCode::OK, encode(value))
}

fn answer(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/cbor"));
    headers.insert("smithy-protocol", HeaderValue::from_static("rpc-v2-cbor"));
    response
}

/// An error the service answers: its shape name (`InvalidInputException`), HTTP status and
/// message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub(crate) struct WireError {
    /// The error shape's name, e.g. `ResourceNotFoundException`.
    pub(crate) code: &'static str,
    /// HTTP status (400 for client errors and throttling, 500 for `InternalException`).
    pub(crate) status: u16,
    /// What went wrong.
    pub(crate) message: String,
}

impl WireError {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self { code: "InvalidInputException", status: 400, message: message.into() }
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self { code: "ResourceNotFoundException", status: 404, message: message.into() }
    }
    pub(crate) fn exists(message: impl Into<String>) -> Self {
        Self { code: "ResourceAlreadyExistsException", status: 409, message: message.into() }
    }
    pub(crate) fn limit(message: impl Into<String>) -> Self {
        Self { code: "LimitExceededException", status: 400, message: message.into() }
    }

    /// The answer: `{"__type": "com.amazonaws.eventsv2#<code>", "message": ...}`.
    pub(crate) fn into_response(self) -> Response {
        let body = serde_json::json!({ "__type": format!("com.amazonaws.eventsv2#{}", self.code), "message": self.message });
        let mut response = answer(StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST), encode(&body));
        if let Ok(v) = HeaderValue::from_str(self.code) {
            response.headers_mut().insert("x-amzn-errortype", v);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_round_trip_with_timestamps_as_tag_1() {
        let value = json!({"Name": "b", "CreationTime": 1_700_000_000.5, "Entries": [{"FailedEntryCount": 2}]});
        let bytes = encode(&value);
        let cbor: Cbor = ciborium::de::from_reader(bytes.as_slice()).expect("CBOR");
        let Cbor::Map(pairs) = cbor else { panic!("a map") };
        assert!(pairs.iter().any(|(k, v)| k == &Cbor::Text("CreationTime".into()) && matches!(v, Cbor::Tag(1, _))));
        assert_eq!(decode(&bytes).expect("decoded"), value);
    }

    #[test]
    fn a_body_that_is_not_a_map_is_invalid_input() {
        let mut bytes = Vec::new();
        ciborium::ser::into_writer(&Cbor::Array(vec![]), &mut bytes).expect("CBOR");
        assert_eq!(decode(&bytes).expect_err("refused").code, "InvalidInputException");
        assert_eq!(decode(b"\xff\x00").expect_err("refused").code, "InvalidInputException");
        assert_eq!(operation_of("/service/AWSEventsV2/operation/PutEvents"), Some("PutEvents"));
        assert_eq!(operation_of("/"), None);
    }
}
