//! The HTTP API's JWT authorizer, played locally, and the local issuer whose tokens it accepts.
//!
//! A route whose template event is under a JWT authorizer (the `HttpApi`'s
//! `Auth.DefaultAuthorizer` with a `JwtConfiguration`, unless the event says
//! `Auth: {Authorizer: NONE}`) is checked the way API Gateway checks it
//! (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html>):
//! the token is the `Authorization` header (a `Bearer ` prefix is allowed); its header must name
//! an RSA algorithm and a `kid` of the issuer's JWKS, its signature must verify with that key,
//! `iss` must be the issuer, `aud` (or, absent, `client_id`) the audience; `exp` must be after
//! the current time, `nbf` and `iat` (when present) before it, with no clock skew allowed. At the
//! whole seconds the claims count in, a token is refused from the second of its `exp`
//! (`exp <= now`) and accepted from the second of its `nbf`/`iat` (`nbf <= now`, `iat <= now`).
//! Anything else, a token signed with `alg: none` included, is `401 {"message":"Unauthorized"}`
//! and the function is not invoked. An accepted token's claims reach the function as API Gateway
//! passes them in payload 2.0: `requestContext.authorizer.jwt.claims` (every value a string; a
//! list as `[a b]`) and `requestContext.authorizer.jwt.scopes` (from the `scope` or `scp` claim).
//!
//! The deployed authorizer trusts the template's `JwtIssuer`; locally there is no such issuer, so
//! the runtime is its own: [`LocalIssuer`] holds an RSA key (generated once, kept in the state
//! directory `.local/<stack>/issuer-key.der` so tokens survive a restart of `up`), serves its
//! public key as a JWKS at `GET /.well-known/jwks.json` on the HTTP API port, and signs tokens for
//! `outbox-local token --sub <subject>`, the demo and the tests. When the key file changes while
//! `up` runs (`token` creates a new one after it was deleted), `up` picks the new key up at the
//! first token that names it, without a restart ([`crate::runtime::issuer_keys`]). Its issuer is
//! [`LOCAL_ISSUER`] and its audience [`LOCAL_AUDIENCE`], whatever the template's parameters say.
//! Signatures are checked by the `jsonwebtoken` crate (aws-lc-rs backend), the times here.

use std::path::Path;

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{json, Map, Value};

pub use crate::runtime::issuer_keys::KEY_FILE;
use crate::runtime::issuer_keys::{IssuerKey, KeyRing};

/// `iss` of the local issuer's tokens.
pub const LOCAL_ISSUER: &str = "outbox-local";
/// `aud` of the local issuer's tokens, the audience the local authorizer requires.
pub const LOCAL_AUDIENCE: &str = "outbox-local";
/// Where the local issuer's JWKS is served on the HTTP API port.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";
/// Default lifetime of a token, seconds.
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// The local issuer: its keys ([`crate::runtime::issuer_keys`]: a rotated key file is picked up
/// while the runtime runs), its JWKS, and the validation API Gateway would do.
#[derive(Debug)]
pub struct LocalIssuer {
    keys: KeyRing,
}

/// Why a request was refused (the 401's `www-authenticate` description).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl LocalIssuer {
    /// A new issuer with a fresh RSA-2048 key, kept in memory only.
    ///
    /// # Errors
    /// The key generation's error, in words.
    pub fn generate() -> crate::Result<Self> {
        Self::from_pkcs8(&IssuerKey::generate_pkcs8()?)
    }

    /// The issuer of an RSA private key in PKCS#8 DER, kept in memory only.
    ///
    /// # Errors
    /// The key is not an RSA PKCS#8 key.
    pub fn from_pkcs8(der: &[u8]) -> crate::Result<Self> {
        Ok(Self { keys: KeyRing::of_pkcs8(der)? })
    }

    /// The issuer whose key is in `dir/`[`KEY_FILE`], created (owner-only file) when absent;
    /// when the file changes later, its new key is picked up (module docs).
    ///
    /// # Errors
    /// The file cannot be read, written or parsed.
    pub fn load_or_create(dir: &Path) -> crate::Result<Self> {
        Ok(Self { keys: KeyRing::load_or_create(dir)? })
    }

    /// The JWKS (`{"keys": [...]}`) API Gateway would fetch from the issuer: every key this
    /// issuer served since it started, the key file read again first.
    ///
    /// # Errors
    /// The key file changed and cannot be read or parsed.
    pub fn jwks(&self) -> crate::Result<Value> {
        self.keys.jwks()
    }

    /// The `kid` tokens are signed with now.
    pub fn kid(&self) -> String {
        self.keys.current().kid().to_owned()
    }

    /// A token for `sub` valid for `seconds`, with `scopes` in its `scope` claim (when any).
    pub fn token(&self, sub: &str, scopes: &[String], seconds: i64) -> String {
        let now = chrono::Utc::now().timestamp();
        let mut claims = json!({"iss": LOCAL_ISSUER, "aud": LOCAL_AUDIENCE, "sub": sub, "iat": now, "nbf": now, "exp": now + seconds});
        if !scopes.is_empty() {
            claims["scope"] = scopes.join(" ").into();
        }
        self.sign(&claims)
    }

    /// `claims` signed RS256 with this issuer's current key and `kid` (tests use it for tokens
    /// with odd claims).
    pub fn sign(&self, claims: &Value) -> String {
        self.keys.current().sign(claims)
    }

    /// Checks `authorization` (the request's `Authorization` header) as API Gateway's JWT
    /// authorizer does (module docs) at `now` (epoch seconds, the request's second); returns the
    /// `requestContext.authorizer` object of the payload 2.0 event.
    ///
    /// # Errors
    /// [`Refused`] saying why: the request is answered 401 and the function is not invoked.
    pub fn authorize(&self, authorization: Option<&str>, now: i64) -> Result<Value, Refused> {
        let refused = |why: &str| Refused(why.to_owned());
        let value = authorization.map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| refused("no Authorization header"))?;
        let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")).unwrap_or(value).trim();
        let header = jsonwebtoken::decode_header(token).map_err(|e| Refused(format!("the token's header: {e}")))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::RS384 | Algorithm::RS512) {
            return Err(Refused(format!("algorithm {:?}: only RSA signatures are accepted", header.alg)));
        }
        let kid = header.kid.as_deref().ok_or_else(|| refused("the token's header has no kid"))?;
        let key = self
            .keys
            .find(kid)
            .map_err(|e| Refused(format!("the issuer's key file: {e}")))?
            .ok_or_else(|| refused("the token's kid is not a key of the issuer's JWKS"))?;
        let mut validation = Validation::new(header.alg);
        // No clock skew allowed, as API Gateway; exp/nbf/iat are checked below against `now`
        // (jsonwebtoken's own check reads the system clock and accepts exp == now).
        validation.leeway = 0;
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false; // `aud` or `client_id`, checked below as API Gateway does
        validation.set_issuer(&[LOCAL_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key.decoding(), &validation).map_err(|e| Refused(format!("the token: {e}")))?;
        let claims = data.claims;
        check_times(&claims, now)?;
        let audience_ok = match claims.get("aud") {
            Some(Value::String(aud)) => aud == LOCAL_AUDIENCE,
            Some(Value::Array(auds)) => auds.iter().any(|a| a == LOCAL_AUDIENCE),
            Some(_) => false,
            None => claims.get("client_id").and_then(Value::as_str) == Some(LOCAL_AUDIENCE),
        };
        if !audience_ok {
            return Err(refused("the token's audience (aud, or client_id) is not the API's"));
        }
        let rendered: Map<String, Value> = claims.iter().map(|(k, v)| (k.clone(), Value::String(render_claim(v)))).collect();
        let scopes: Option<Vec<Value>> = claims.get("scope").or_else(|| claims.get("scp")).map(|s| match s {
            Value::String(text) => text.split_whitespace().map(|w| Value::String(w.to_owned())).collect(),
            Value::Array(list) => list.iter().map(|w| Value::String(render_claim(w))).collect(),
            other => vec![Value::String(render_claim(other))],
        });
        Ok(json!({"jwt": {"claims": rendered, "scopes": scopes}}))
    }
}

/// The token's times as API Gateway checks them, at `now` (epoch seconds; a NumericDate may have
/// a fraction): `exp` must be after the current time, so `exp <= now` is refused (a token is
/// expired in the second of its `exp`); `nbf` and `iat`, when present, must not be after it
/// (`nbf <= now`, `iat <= now`). Each must be a number.
fn check_times(claims: &Map<String, Value>, now: i64) -> Result<(), Refused> {
    let number = |name: &str| match claims.get(name) {
        None => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| Refused(format!("the token's {name} is not a number of seconds"))),
    };
    let now_f = now as f64;
    let exp = number("exp")?.ok_or_else(|| Refused("the token has no exp".to_owned()))?;
    if exp <= now_f {
        return Err(Refused(format!("the token expired (exp {exp} is not after {now})")));
    }
    if let Some(nbf) = number("nbf")?.filter(|nbf| *nbf > now_f) {
        return Err(Refused(format!("the token is not valid yet (nbf {nbf} is after {now})")));
    }
    if let Some(iat) = number("iat")?.filter(|iat| *iat > now_f) {
        return Err(Refused(format!("the token was issued in the future (iat {iat} is after {now})")));
    }
    Ok(())
}

/// An HTTP client builder that sends a token of `sub` from `issuer` (valid 12 hours) on every
/// request: how the demo, the proof and the tests call routes under the JWT authorizer.
pub fn client_as(issuer: &LocalIssuer, sub: &str) -> reqwest::ClientBuilder {
    let mut headers = reqwest::header::HeaderMap::new();
    // A JWT is base64url text and dots: always a valid header value.
    if let Ok(value) = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", issuer.token(sub, &[], 12 * 3600))) {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder().default_headers(headers)
}

/// A claim as API Gateway passes it to the function: strings as they are, lists as `[a b]`,
/// everything else as its JSON text.
fn render_claim(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(render_claim).collect::<Vec<_>>().join(" ")),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use jsonwebtoken::{EncodingKey, Header};

    use super::*;

    fn issuer() -> LocalIssuer {
        LocalIssuer::generate().unwrap()
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    #[test]
    fn a_token_of_the_issuer_passes_its_claims_as_api_gateway_does() {
        let issuer = issuer();
        let token = issuer.token("alice", &["orders/admin".into(), "openid".into()], 60);
        let authorizer = issuer.authorize(Some(&format!("Bearer {token}")), now()).unwrap();
        let claims = &authorizer["jwt"]["claims"];
        assert_eq!(
            (claims["sub"].as_str(), claims["iss"].as_str(), claims["aud"].as_str()),
            (Some("alice"), Some(LOCAL_ISSUER), Some(LOCAL_AUDIENCE))
        );
        assert!(claims["exp"].is_string(), "numbers are passed as strings: {claims}");
        assert_eq!(authorizer["jwt"]["scopes"], json!(["orders/admin", "openid"]));
        assert!(issuer.authorize(Some(&token), now()).is_ok(), "without the Bearer prefix too");
        let keys = &issuer.jwks().unwrap()["keys"][0];
        assert_eq!((keys["kty"].as_str(), keys["alg"].as_str()), (Some("RSA"), Some("RS256")));
    }

    #[test]
    fn missing_expired_foreign_unsigned_and_misaddressed_tokens_are_refused() {
        let issuer = issuer();
        let now = now();
        let claims = |f: &dyn Fn(&mut Value)| {
            let mut c = json!({"iss": LOCAL_ISSUER, "aud": LOCAL_AUDIENCE, "sub": "alice", "iat": now - 10, "exp": now + 60});
            f(&mut c);
            c
        };
        assert!(issuer.authorize(None, now).is_err());
        assert!(issuer.authorize(Some("Bearer "), now).is_err());
        assert!(issuer.authorize(Some("Bearer not-a-jwt"), now).is_err());
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["exp"] = (now - 1).into()))), now).is_err(), "expired");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["nbf"] = (now + 60).into()))), now).is_err(), "not yet valid");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["iat"] = (now + 60).into()))), now).is_err(), "issued in the future");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["exp"] = "soon".into()))), now).is_err(), "exp not a number");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["nbf"] = "now".into()))), now).is_err(), "nbf not a number");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["iss"] = "https://elsewhere".into()))), now).is_err(), "wrong issuer");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["aud"] = "another-api".into()))), now).is_err(), "wrong audience");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c.as_object_mut().unwrap().retain(|k, _| k != "exp")))), now).is_err(), "no exp");
        let client_id = claims(&|c| {
            c.as_object_mut().unwrap().remove("aud");
            c["client_id"] = LOCAL_AUDIENCE.into();
        });
        assert!(issuer.authorize(Some(&issuer.sign(&client_id)), now).is_ok(), "client_id stands for aud (Cognito access tokens)");
        // Another issuer's key, with this issuer's name and kid: the signature does not verify.
        let forged = IssuerKey::from_pkcs8(&IssuerKey::generate_pkcs8().unwrap()).unwrap().with_kid(&issuer.kid()).sign(&claims(&|_| {}));
        assert!(issuer.authorize(Some(&forged), now).is_err(), "signed by another key");
        // alg none: the claims are fine, the signature empty.
        let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let none = format!("{}.{}.", part(&json!({"alg": "none", "typ": "JWT", "kid": issuer.kid()})), part(&claims(&|_| {})));
        assert!(issuer.authorize(Some(&none), now).is_err(), "alg none");
        let hs256 = jsonwebtoken::encode(
            &Header { kid: Some(issuer.kid()), ..Header::new(Algorithm::HS256) },
            &claims(&|_| {}),
            &EncodingKey::from_secret(b"guessable"),
        )
        .unwrap();
        assert!(issuer.authorize(Some(&hs256), now).is_err(), "HMAC");
    }

    /// API Gateway validates `exp` strictly: a token is expired in the second of its `exp`
    /// (`exp <= now`); `nbf` and `iat` are valid from their own second on. No leeway either way.
    #[test]
    fn a_token_is_refused_from_the_second_of_its_exp_and_accepted_from_the_second_of_its_nbf_and_iat() {
        let issuer = issuer();
        let now = 2_000_000_000;
        let at = |exp: i64, nbf: i64, iat: i64| {
            issuer.sign(&json!({"iss": LOCAL_ISSUER, "aud": LOCAL_AUDIENCE, "sub": "alice", "exp": exp, "nbf": nbf, "iat": iat}))
        };
        let refusal = issuer.authorize(Some(&at(now, now - 10, now - 10)), now).expect_err("exp == now is refused");
        assert!(refusal.0.contains("expired"), "{refusal}");
        assert!(issuer.authorize(Some(&at(now + 1, now - 10, now - 10)), now).is_ok(), "exp == now + 1 is accepted");
        assert!(issuer.authorize(Some(&at(now + 60, now, now)), now).is_ok(), "nbf == iat == now is accepted");
        assert!(issuer.authorize(Some(&at(now + 60, now + 1, now)), now).is_err(), "nbf == now + 1: no leeway");
        assert!(issuer.authorize(Some(&at(now + 60, now, now + 1)), now).is_err(), "iat == now + 1: no leeway");
        // The time is the request's, not the system clock's: the same token at two instants.
        let token = at(now + 60, now - 10, now - 10);
        assert!(issuer.authorize(Some(&token), now + 59).is_ok());
        assert!(issuer.authorize(Some(&token), now + 60).is_err());
    }

    #[test]
    fn a_token_signed_with_a_rotated_key_file_is_accepted_without_a_restart() {
        let dir = std::env::temp_dir().join(format!("outbox-local-issuer-{}", uuid::Uuid::new_v4()));
        let running = LocalIssuer::load_or_create(&dir).unwrap();
        let before = running.token("alice", &[], 60);
        // `outbox-local token` after the key file was deleted: a new key, in a new file.
        std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
        let after = LocalIssuer::load_or_create(&dir).unwrap().token("alice", &[], 60);
        assert!(running.authorize(Some(&after), now()).is_ok(), "the rotated key is picked up");
        assert!(running.authorize(Some(&before), now()).is_ok(), "the previous key still verifies its tokens");
        assert_eq!(running.jwks().unwrap()["keys"].as_array().map(Vec::len), Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_key_is_kept_in_the_state_directory() {
        let dir = std::env::temp_dir().join(format!("outbox-local-issuer-{}", uuid::Uuid::new_v4()));
        let first = LocalIssuer::load_or_create(&dir).unwrap();
        let second = LocalIssuer::load_or_create(&dir).unwrap();
        let token = first.token("alice", &[], 60);
        assert!(second.authorize(Some(&token), now()).is_ok(), "a restart accepts the tokens of before");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join(KEY_FILE)).unwrap().permissions());
        assert_eq!(mode & 0o077, 0, "owner-only");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
