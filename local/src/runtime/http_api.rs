//! The HTTP API (API Gateway HTTP API, payload format 2.0), played locally: every `HttpApi`
//! event of the template becomes a route on a loopback port; a request is turned into the
//! payload-2.0 event API Gateway would send, the function runs (its real binary), and its response
//! (`statusCode`, `headers`, `body`, `isBase64Encoded`, `cookies`) becomes the HTTP response.
//! Unmatched routes answer 404 and function errors 500 `{"message":"Internal Server Error"}`,
//! as API Gateway does. Source:
//! <https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html>.
//!
//! Routes under a JWT authorizer in the template are authorized first ([`crate::runtime::authorizer`]):
//! without a valid token of the local issuer, `401 {"message":"Unauthorized"}` and the function
//! is not invoked; with one, its claims are in `requestContext.authorizer.jwt`. The local
//! issuer's JWKS is served at [`JWKS_PATH`].
//!
//! API Gateway's size quotas for HTTP APIs are enforced (quota page "Quotas for configuring and
//! running an HTTP API in API Gateway"): a request whose request line and header values add up
//! to more than [`MAX_REQUEST_LINE_AND_HEADER_BYTES`] (10,240 bytes) is refused before routing,
//! authorization or invocation, and a body over [`MAX_BODY_BYTES`] (10 MB) before invocation.
//!
//! A client that sends less body than its `Content-Length` gets `408 {"message":"Request
//! Timeout"}` after [`Limits::body_timeout`] (never held open); a client that half-closes its
//! connection after the request still gets the answer (HTTP/1 half-close is served), and an
//! invocation runs to its end even when the client goes away — the effect may be committed, as
//! behind API Gateway.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use base64::Engine;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::lambda::function::LocalFunction;
use crate::runtime::authorizer::{LocalIssuer, JWKS_PATH};
use crate::runtime::Runtime;
use outbox_template::FunctionEvent;

/// Largest request body accepted, bytes: API Gateway's HTTP API "Payload size" quota, 10 MB
/// (quota page "Quotas for configuring and running an HTTP API in API Gateway"), read as MiB.
/// A larger body is `413 {"message":"Request Entity Too Large"}` and the function is not
/// invoked. The quota page gives the limit, not the answer: the status is HTTP's for a body too
/// large, the body API Gateway's `{"message": …}` shape.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Most bytes of the request line (`METHOD target HTTP/1.1`) plus every header value: API
/// Gateway's HTTP API quota "Total combined size of request line and header values", 10,240
/// bytes, not adjustable (quota page "Quotas for configuring and running an HTTP API in API
/// Gateway"). Header names are not counted (the quota names values). A request over it is
/// [`HEADERS_TOO_LARGE`] and the function is not invoked. API Gateway does not document which
/// status it answers; 431 is HTTP's status for header fields too large (RFC 6585, section 5),
/// and the one reported by users who crossed this quota.
pub const MAX_REQUEST_LINE_AND_HEADER_BYTES: usize = 10_240;

/// The answer to a request over [`MAX_REQUEST_LINE_AND_HEADER_BYTES`]:
/// `431 {"message":"Request Header Fields Too Large"}`.
pub const HEADERS_TOO_LARGE: StatusCode = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;

/// Timeouts of the local HTTP API.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest wait for a request's headers and for its whole body; then `408` (headers: the
    /// connection is closed). Default 30 s (API Gateway's integration timeout).
    pub body_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self { body_timeout: std::time::Duration::from_secs(30) }
    }
}

/// One route: method and path template (`/orders/{id}`, `/{proxy+}`).
#[derive(Debug, Clone)]
pub struct Route {
    /// Upper-case method or `ANY`.
    pub method: String,
    /// Path template.
    pub path: String,
    /// The function behind it.
    pub function: Arc<LocalFunction>,
    /// Whether the route is under a JWT authorizer.
    pub jwt: bool,
}

impl Route {
    /// `Some(path parameters)` when `method` and `path` match this route.
    pub fn matches(&self, method: &str, path: &str) -> Option<HashMap<String, String>> {
        match_route(&self.method, &self.path, method, path)
    }
}

/// `Some(path parameters)` when `method` and `path` match the route `route_method route_path`.
pub fn match_route(route_method: &str, route_path: &str, method: &str, path: &str) -> Option<HashMap<String, String>> {
    {
        if route_method != "ANY" && !route_method.eq_ignore_ascii_case(method) {
            return None;
        }
        let template: Vec<&str> = route_path.trim_matches('/').split('/').collect();
        let actual: Vec<&str> = path.trim_matches('/').split('/').collect();
        let mut params = HashMap::new();
        for (i, part) in template.iter().enumerate() {
            if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix("+}")) {
                params.insert(name.to_owned(), actual.get(i..)?.join("/"));
                return Some(params);
            }
            let value = actual.get(i)?;
            match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(name) if !value.is_empty() => {
                    params.insert(name.to_owned(), (*value).to_owned());
                }
                Some(_) => return None,
                None if part == value => {}
                None => return None,
            }
        }
        (template.len() == actual.len()).then_some(params)
    }
}

struct Api {
    routes: Vec<Route>,
    account: String,
    limits: Limits,
    issuer: Arc<LocalIssuer>,
}

/// The routes of every `HttpApi` event of the runtime's functions.
pub fn routes(runtime: &Runtime) -> Vec<Route> {
    let mut routes = Vec::new();
    for function in runtime.functions.values() {
        for event in &function.spec.events {
            if let FunctionEvent::HttpApi { path, method, jwt, .. } = event {
                routes.push(Route { method: method.clone(), path: path.clone(), function: function.clone(), jwt: *jwt });
            }
        }
    }
    // Literal segments before parameters, as API Gateway prefers the most specific route.
    routes.sort_by_key(|r| (r.path.contains('{'), std::cmp::Reverse(r.path.len())));
    routes
}

/// Serves the HTTP API on `addr` (port 0 picks a free one) until `shutdown` is true; returns
/// the bound address.
///
/// # Errors
/// The bind error.
pub async fn serve(
    runtime: &Runtime,
    addr: SocketAddr,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    serve_with(runtime, addr, shutdown, Limits::default()).await
}

/// [`serve`] with other [`Limits`].
///
/// # Errors
/// When `addr` cannot be bound.
pub async fn serve_with(
    runtime: &Runtime,
    addr: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let api = Arc::new(Api { routes: routes(runtime), account: runtime.stack.resolver.account.clone(), limits, issuer: runtime.issuer.clone() });
    let app = axum::Router::new().fallback(handle).with_state(api);
    let service = hyper_util::service::TowerToHyperService::new(app);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "HTTP API: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        return;
                    }
                    continue;
                }
            };
            let service = service.clone();
            tokio::spawn(async move {
                let mut http1 = hyper::server::conn::http1::Builder::new();
                // A client may shut down its writing side and wait for the answer.
                http1.half_close(true).timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.body_timeout);
                let _ = http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
            });
        }
    });
    Ok((bound, task))
}

/// The `curl` line `up` suggests: a POST to the first POST route of `routes`
/// (`(method, path template, under a JWT authorizer)`), path parameters written as their names;
/// `None` when the template has no POST route. The body is the sample order for the sample's
/// `/orders`, else `{}`. A route under a JWT authorizer gets `-H "authorization: Bearer $TOKEN"`
/// (`TOKEN=$(outbox-local token --sub alice)`).
pub fn curl_hint<'a>(api: &str, routes: impl IntoIterator<Item = (&'a str, &'a str, bool)>) -> Option<String> {
    let (_, path, jwt) = routes.into_iter().find(|(method, _, _)| *method == "POST")?;
    let path: Vec<String> = path
        .split('/')
        .map(|part| match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) => name.trim_end_matches('+').to_owned(),
            None => part.to_owned(),
        })
        .collect();
    let path = path.join("/");
    let body = if path == "/orders" {
        r#"{"customer_id":"c-1","currency":"EUR","lines":[{"sku":"SKU-RED-MUG","quantity":1,"unit_price":"12.50"}]}"#
    } else {
        "{}"
    };
    let token = if jwt { " -H \"authorization: Bearer $TOKEN\"" } else { "" };
    Some(format!("curl -s -X POST 'http://{api}{path}' -H 'content-type: application/json'{token} -d '{body}'"))
}

fn plain(status: StatusCode, message: &str) -> Response {
    let mut response = Response::new(Body::from(json!({ "message": message }).to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

/// Bytes of `parts`' request line (`METHOD target HTTP/x.y`, single spaces) plus its header
/// values, as API Gateway counts them for [`MAX_REQUEST_LINE_AND_HEADER_BYTES`].
pub fn request_line_and_header_bytes(parts: &axum::http::request::Parts) -> usize {
    let target = parts.uri.path_and_query().map_or(parts.uri.path().len(), |p| p.as_str().len());
    let version = match parts.version {
        axum::http::Version::HTTP_09 => "HTTP/0.9",
        axum::http::Version::HTTP_10 => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    let line = parts.method.as_str().len() + 1 + target + 1 + version.len();
    line + parts.headers.values().map(HeaderValue::len).sum::<usize>()
}

async fn handle(State(api): State<Arc<Api>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let method = parts.method.as_str().to_owned();
    // Before routing and the authorizer, as API Gateway's quota applies to every request.
    let size = request_line_and_header_bytes(&parts);
    if size > MAX_REQUEST_LINE_AND_HEADER_BYTES {
        tracing::info!(route = %format!("{method} {path}"), bytes = size, limit = MAX_REQUEST_LINE_AND_HEADER_BYTES, "HTTP API: request line and headers too large");
        return plain(HEADERS_TOO_LARGE, "Request Header Fields Too Large");
    }
    let Some((route, params)) = api.routes.iter().find_map(|r| r.matches(&method, &path).map(|p| (r, p))) else {
        if method == "GET" && path == JWKS_PATH {
            return match api.issuer.jwks() {
                Ok(jwks) => {
                    let mut response = Response::new(Body::from(jwks.to_string()));
                    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
                    response
                }
                Err(e) => {
                    tracing::error!(error = %e, "HTTP API: the local issuer's JWKS");
                    plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
                }
            };
        }
        return plain(StatusCode::NOT_FOUND, "Not Found");
    };
    // The authorizer runs before the integration: a refused request never reaches the function.
    let authorizer = if route.jwt {
        let authorization = parts.headers.get("authorization").and_then(|v| v.to_str().ok());
        match api.issuer.authorize(authorization, chrono::Utc::now().timestamp()) {
            Ok(authorizer) => Some(authorizer),
            Err(refused) => {
                tracing::info!(route = %format!("{method} {path}"), reason = %refused, "HTTP API: unauthorized");
                let mut response = plain(StatusCode::UNAUTHORIZED, "Unauthorized");
                response.headers_mut().insert("www-authenticate", HeaderValue::from_static("Bearer error=\"invalid_token\""));
                return response;
            }
        }
    } else {
        None
    };
    let bytes = match tokio::time::timeout(api.limits.body_timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) if is_too_large(&e) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large"),
        // The client closed the connection before sending its whole body: no one to answer.
        Ok(Err(_)) => return plain(StatusCode::BAD_REQUEST, "Bad Request"),
        Err(_) => return plain(StatusCode::REQUEST_TIMEOUT, "Request Timeout"),
    };
    let mut headers = serde_json::Map::new();
    let mut cookies = Vec::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if name == "cookie" {
            cookies.extend(value.split(';').map(|c| Value::String(c.trim().to_owned())));
            continue;
        }
        match headers.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    let query = parts.uri.query().unwrap_or("").to_owned();
    let mut query_parameters = serde_json::Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        query_parameters.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    let (body, is_base64) = match std::str::from_utf8(&bytes) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (base64::engine::general_purpose::STANDARD.encode(&bytes), true),
    };
    let route_key = format!("{} {}", route.method.replace("ANY", "$default"), route.path);
    let now = chrono::Utc::now();
    let user_agent = parts.headers.get("user-agent").and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": api.account,
            "apiId": "local",
            "domainName": parts.headers.get("host").and_then(|v| v.to_str().ok()).unwrap_or("localhost"),
            "domainPrefix": "local",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": user_agent},
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.format("%d/%b/%Y:%H:%M:%S %z").to_string(),
            "timeEpoch": now.timestamp_millis(),
        },
        "isBase64Encoded": is_base64,
    });
    if !bytes.is_empty() {
        event["body"] = Value::String(body);
    }
    if !cookies.is_empty() {
        event["cookies"] = Value::Array(cookies);
    }
    if !query_parameters.is_empty() {
        event["queryStringParameters"] = Value::Object(query_parameters);
    }
    if !params.is_empty() {
        event["pathParameters"] = json!(params);
    }
    if let Some(authorizer) = authorizer {
        event["requestContext"]["authorizer"] = authorizer;
    }
    // Its own task: the invocation runs to its end even if the client goes away meanwhile.
    let function = route.function.clone();
    let invocation = tokio::spawn(async move { function.invoke(&event.to_string()).await }).await;
    let Ok(invocation) = invocation else { return plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error") };
    match invocation.result {
        Ok(response) => into_http(&response),
        Err(diagnostic) => {
            tracing::error!(function = %route.function.spec.logical_id, error_type = %diagnostic.error_type, error = %diagnostic.error_message, "function failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
        }
    }
}

/// Whether reading a body failed on [`MAX_BODY_BYTES`].
fn is_too_large(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A function's payload-2.0 response as HTTP.
fn into_http(response: &Value) -> Response {
    let status = response.get("statusCode").and_then(Value::as_u64).and_then(|s| StatusCode::from_u16(s as u16).ok()).unwrap_or(StatusCode::OK);
    let body = match (response.get("body"), response.get("isBase64Encoded").and_then(Value::as_bool).unwrap_or(false)) {
        (Some(Value::String(b)), true) => base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_default(),
        (Some(Value::String(b)), false) => b.clone().into_bytes(),
        _ => Vec::new(),
    };
    let mut http = Response::new(Body::from(body));
    *http.status_mut() = status;
    if let Some(Value::Object(headers)) = response.get("headers") {
        for (k, v) in headers {
            if let (Ok(name), Some(Ok(value))) = (HeaderName::from_bytes(k.as_bytes()), v.as_str().map(HeaderValue::from_str)) {
                http.headers_mut().insert(name, value);
            }
        }
    }
    if let Some(Value::Array(cookies)) = response.get("cookies") {
        for cookie in cookies.iter().filter_map(Value::as_str) {
            if let Ok(value) = HeaderValue::from_str(cookie) {
                http.headers_mut().append("set-cookie", value);
            }
        }
    }
    http
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API without routes: a request that passes the size check is a 404.
    fn api() -> Arc<Api> {
        let issuer = Arc::new(LocalIssuer::generate().unwrap());
        Arc::new(Api { routes: Vec::new(), account: "123456789012".into(), limits: Limits::default(), issuer })
    }

    /// `GET /x` (request line `GET /x HTTP/1.1`, 15 bytes) with an `authorization` value of `n` bytes.
    fn get_with_header_of(n: usize) -> Request {
        axum::http::Request::builder().uri("/x").header("authorization", "a".repeat(n)).body(Body::empty()).unwrap()
    }

    async fn body_of(response: Response) -> String {
        String::from_utf8(axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_request_line_and_headers_over_10240_bytes_are_refused_before_routing_and_at_the_limit_pass() {
        let line = "GET /x HTTP/1.1".len();
        let (parts, _) = get_with_header_of(100).into_parts();
        assert_eq!(request_line_and_header_bytes(&parts), line + 100);

        let at_limit = handle(State(api()), get_with_header_of(MAX_REQUEST_LINE_AND_HEADER_BYTES - line)).await;
        assert_eq!(at_limit.status(), StatusCode::NOT_FOUND, "exactly 10,240 bytes pass the check (and find no route)");

        let over = handle(State(api()), get_with_header_of(MAX_REQUEST_LINE_AND_HEADER_BYTES - line + 1)).await;
        assert_eq!(over.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        assert_eq!(body_of(over).await, r#"{"message":"Request Header Fields Too Large"}"#);

        // Values are counted across headers, and the query string is part of the request line.
        let split = axum::http::Request::builder()
            .uri(format!("/x?{}", "q".repeat(5_000)))
            .header("cookie", "c".repeat(3_000))
            .header("authorization", "a".repeat(3_000))
            .body(Body::empty())
            .unwrap();
        assert_eq!(handle(State(api()), split).await.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }

    #[tokio::test]
    async fn the_jwks_is_served_and_its_route_is_under_the_size_limit_too() {
        let api = api();
        let get = |uri: &str| axum::http::Request::builder().uri(uri).body(Body::empty()).unwrap();
        let jwks = handle(State(api.clone()), get(JWKS_PATH)).await;
        assert_eq!(jwks.status(), StatusCode::OK);
        let keys: Value = serde_json::from_str(&body_of(jwks).await).unwrap();
        assert_eq!(keys["keys"][0]["kid"], api.issuer.kid().as_str());
        let long = handle(State(api), get(&format!("{JWKS_PATH}?{}", "q".repeat(MAX_REQUEST_LINE_AND_HEADER_BYTES)))).await;
        assert_eq!(long.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    }

    #[test]
    fn the_curl_hint_posts_to_the_templates_first_post_route_or_is_omitted() {
        let hint =
            curl_hint("127.0.0.1:3000", [("GET", "/orders/{id}", false), ("POST", "/customers/{tenant}/register", false), ("POST", "/x", false)]);
        assert_eq!(
            hint.as_deref(),
            Some("curl -s -X POST 'http://127.0.0.1:3000/customers/tenant/register' -H 'content-type: application/json' -d '{}'")
        );
        assert!(curl_hint("a:1", [("POST", "/orders", false)]).is_some_and(|h| h.contains("SKU-RED-MUG")), "the sample's order API");
        assert!(curl_hint("a:1", [("POST", "/orders", true)]).is_some_and(|h| h.contains(r#"-H "authorization: Bearer $TOKEN""#)));
        assert_eq!(curl_hint("a:1", [("GET", "/orders/{id}", false), ("ANY", "/{proxy+}", false)]), None);
    }

    #[test]
    fn path_templates_match_like_api_gateway() {
        let route = |method: &'static str, path: &'static str| (method, path);
        let m = |(method, path): (&str, &str), m: &str, p: &str| match_route(method, path, m, p);
        assert_eq!(m(route("POST", "/orders"), "POST", "/orders"), Some(HashMap::new()));
        assert_eq!(m(route("POST", "/orders"), "GET", "/orders"), None);
        assert_eq!(m(route("GET", "/orders/{id}"), "GET", "/orders/o-1").unwrap()["id"], "o-1");
        assert_eq!(m(route("POST", "/orders/{id}/cancel"), "POST", "/orders/o-1/cancel").unwrap()["id"], "o-1");
        assert_eq!(m(route("GET", "/orders/{id}"), "GET", "/orders"), None);
        assert_eq!(m(route("ANY", "/{proxy+}"), "DELETE", "/a/b").unwrap()["proxy"], "a/b");
    }
}
