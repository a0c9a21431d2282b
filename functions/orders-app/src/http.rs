//! HTTP API (payload format 2.0) responses, with errors as RFC 9457 `application/problem+json`.

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;

/// An RFC 9457 problem document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// A URI reference naming the problem type (`about:blank` when the status says it all).
    #[serde(rename = "type")]
    pub kind: String,
    /// Short summary.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong with this request, in words.
    pub detail: String,
    /// The request field at fault (JSON path such as `lines[0].quantity`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Correlation id of the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

impl Problem {
    /// A problem with `status`, `title` and `detail`.
    pub fn new(status: u16, title: &str, detail: impl Into<String>) -> Self {
        Self { kind: "about:blank".into(), title: title.into(), status, detail: detail.into(), field: None, correlation_id: None }
    }

    /// 400 naming `field`.
    pub fn bad_field(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::new(400, "Invalid request", detail) }
    }
}

/// A JSON response with `status`, `body` and extra `headers`.
pub fn json_response<T: Serialize>(status: u16, content_type: &str, body: &T, headers: &[(&str, &str)]) -> ApiGatewayV2httpResponse {
    let mut map = HeaderMap::new();
    map.insert("content-type", HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("application/json")));
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            map.insert(name, value);
        }
    }
    let mut response = ApiGatewayV2httpResponse::default();
    response.status_code = i64::from(status);
    response.headers = map;
    // Serialising our own response types (strings and integers) cannot fail.
    response.body = Some(Body::Text(serde_json::to_string(body).unwrap_or_else(|_| "{}".into())));
    response
}

/// The problem as a response, with the correlation id header.
pub fn problem_response(mut problem: Problem, correlation_id: &str, extra: &[(&str, &str)]) -> ApiGatewayV2httpResponse {
    problem.correlation_id = Some(correlation_id.to_owned());
    let mut headers = vec![("x-correlation-id", correlation_id)];
    headers.extend_from_slice(extra);
    json_response(problem.status, "application/problem+json", &problem, &headers)
}
