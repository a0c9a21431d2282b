//! The HTTP API's JWT authorizer, played locally, and the local issuer whose tokens it accepts.
//!
//! A route whose template event is under a JWT authorizer (the `HttpApi`'s
//! `Auth.DefaultAuthorizer` with a `JwtConfiguration`, unless the event says
//! `Auth: {Authorizer: NONE}`) is checked the way API Gateway checks it
//! (<https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html>):
//! the token is the `Authorization` header (a `Bearer ` prefix is allowed); its header must name
//! an RSA algorithm and a `kid` of the issuer's JWKS, its signature must verify with that key,
//! `iss` must be the issuer, `aud` (or, absent, `client_id`) the audience, `exp` in the future and
//! `nbf`/`iat` not in the future. Anything else, a token signed with `alg: none` included, is
//! `401 {"message":"Unauthorized"}` and the function is not invoked. An accepted token's claims
//! reach the function as API Gateway passes them in payload 2.0:
//! `requestContext.authorizer.jwt.claims` (every value a string; a list as `[a b]`) and
//! `requestContext.authorizer.jwt.scopes` (from the `scope` or `scp` claim).
//!
//! The deployed authorizer trusts the template's `JwtIssuer`; locally there is no such issuer, so
//! the runtime is its own: [`LocalIssuer`] holds an RSA key (generated once, kept in the state
//! directory `.local/<stack>/issuer-key.der` so tokens survive a restart of `up`), serves its
//! public key as a JWKS at `GET /.well-known/jwks.json` on the HTTP API port, and signs tokens for
//! `outbox-local token --sub <subject>`, the demo and the tests. Its issuer is [`LOCAL_ISSUER`] and
//! its audience [`LOCAL_AUDIENCE`], whatever the template's parameters say.
//! Signatures and claims are checked by the `jsonwebtoken` crate (aws-lc-rs backend).

use std::path::Path;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize, PublicKeyComponents};
use aws_lc_rs::signature::KeyPair as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{json, Map, Value};

/// `iss` of the local issuer's tokens.
pub const LOCAL_ISSUER: &str = "outbox-local";
/// `aud` of the local issuer's tokens, the audience the local authorizer requires.
pub const LOCAL_AUDIENCE: &str = "outbox-local";
/// Where the local issuer's JWKS is served on the HTTP API port.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";
/// File name of the issuer's private key (PKCS#8 DER) in the runtime's state directory.
pub const KEY_FILE: &str = "issuer-key.der";
/// Default lifetime of a token, seconds.
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// The local issuer: one RSA key, its JWKS, and the validation API Gateway would do.
pub struct LocalIssuer {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    jwks: Value,
}

impl std::fmt::Debug for LocalIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalIssuer").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// Why a request was refused (the 401's `www-authenticate` description).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl LocalIssuer {
    /// A new issuer with a fresh RSA-2048 key.
    ///
    /// # Errors
    /// The key generation's error, in words.
    pub fn generate() -> crate::Result<Self> {
        let pair = KeyPair::generate(KeySize::Rsa2048).map_err(crate::Error::other("generating the local issuer's RSA key"))?;
        let der = pair.as_der().map_err(crate::Error::other("encoding the local issuer's key"))?;
        Self::from_pkcs8(der.as_ref())
    }

    /// The issuer of an RSA private key in PKCS#8 DER.
    ///
    /// # Errors
    /// The key is not an RSA PKCS#8 key.
    pub fn from_pkcs8(der: &[u8]) -> crate::Result<Self> {
        let pair = KeyPair::from_pkcs8(der).map_err(crate::Error::other("the local issuer's key is not an RSA PKCS#8 key"))?;
        let public = PublicKeyComponents::<Vec<u8>>::from(pair.public_key());
        let (n, e) = (URL_SAFE_NO_PAD.encode(&public.n), URL_SAFE_NO_PAD.encode(&public.e));
        let kid = format!("local-{}", n.chars().take(16).collect::<String>());
        let body = STANDARD.encode(der).as_bytes().chunks(64).map(|c| String::from_utf8_lossy(c).into_owned()).collect::<Vec<_>>().join("\n");
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n");
        let encoding = EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(crate::Error::other("the local issuer's key"))?;
        let decoding = DecodingKey::from_rsa_components(&n, &e).map_err(crate::Error::other("the local issuer's public key"))?;
        let jwks = json!({"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": n, "e": e}]});
        Ok(Self { kid, encoding, decoding, jwks })
    }

    /// The issuer whose key is in `dir/`[`KEY_FILE`], created (owner-only file) when absent.
    ///
    /// # Errors
    /// The file cannot be read, written or parsed.
    pub fn load_or_create(dir: &Path) -> crate::Result<Self> {
        let path = dir.join(KEY_FILE);
        if let Ok(der) = std::fs::read(&path) {
            return Self::from_pkcs8(&der).map_err(crate::Error::other(path.display().to_string()));
        }
        let pair = KeyPair::generate(KeySize::Rsa2048).map_err(crate::Error::other("generating the local issuer's RSA key"))?;
        let der = pair.as_der().map_err(crate::Error::other("encoding the local issuer's key"))?;
        std::fs::create_dir_all(dir).map_err(crate::Error::io(dir))?;
        write_private(&path, der.as_ref()).map_err(crate::Error::io(&path))?;
        Self::from_pkcs8(der.as_ref())
    }

    /// The JWKS (`{"keys": [...]}`) API Gateway would fetch from the issuer.
    pub fn jwks(&self) -> &Value {
        &self.jwks
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

    /// `claims` signed RS256 with this issuer's key and `kid` (tests use it for tokens with odd claims).
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        // RS256 with an RSA key, claims that are JSON: encoding cannot fail.
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap_or_default()
    }

    /// Checks `authorization` (the request's `Authorization` header) as API Gateway's JWT
    /// authorizer does (module docs) at `now` (epoch seconds); returns the
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
        if header.kid.as_deref() != Some(self.kid.as_str()) {
            return Err(refused("the token's kid is not a key of the issuer's JWKS"));
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = 0;
        validation.validate_nbf = true;
        validation.validate_aud = false; // `aud` or `client_id`, checked below as API Gateway does
        validation.set_issuer(&[LOCAL_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &self.decoding, &validation).map_err(|e| Refused(format!("the token: {e}")))?;
        let claims = data.claims;
        let audience_ok = match claims.get("aud") {
            Some(Value::String(aud)) => aud == LOCAL_AUDIENCE,
            Some(Value::Array(auds)) => auds.iter().any(|a| a == LOCAL_AUDIENCE),
            Some(_) => false,
            None => claims.get("client_id").and_then(Value::as_str) == Some(LOCAL_AUDIENCE),
        };
        if !audience_ok {
            return Err(refused("the token's audience (aud, or client_id) is not the API's"));
        }
        if claims.get("iat").and_then(Value::as_i64).is_some_and(|iat| iat > now) {
            return Err(refused("the token was issued in the future (iat)"));
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

/// Writes `bytes` to a new file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
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
        let keys = &issuer.jwks()["keys"][0];
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
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["iss"] = "https://elsewhere".into()))), now).is_err(), "wrong issuer");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c["aud"] = "another-api".into()))), now).is_err(), "wrong audience");
        assert!(issuer.authorize(Some(&issuer.sign(&claims(&|c| c.as_object_mut().unwrap().retain(|k, _| k != "exp")))), now).is_err(), "no exp");
        let client_id = claims(&|c| {
            c.as_object_mut().unwrap().remove("aud");
            c["client_id"] = LOCAL_AUDIENCE.into();
        });
        assert!(issuer.authorize(Some(&issuer.sign(&client_id)), now).is_ok(), "client_id stands for aud (Cognito access tokens)");
        // Another issuer's key, with this issuer's name and kid: the signature does not verify.
        let forged = LocalIssuer { kid: issuer.kid.clone(), ..LocalIssuer::generate().unwrap() }.sign(&claims(&|_| {}));
        assert!(issuer.authorize(Some(&forged), now).is_err(), "signed by another key");
        // alg none: the claims are fine, the signature empty.
        let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let none = format!("{}.{}.", part(&json!({"alg": "none", "typ": "JWT", "kid": issuer.kid})), part(&claims(&|_| {})));
        assert!(issuer.authorize(Some(&none), now).is_err(), "alg none");
        let hs256 = jsonwebtoken::encode(
            &Header { kid: Some(issuer.kid.clone()), ..Header::new(Algorithm::HS256) },
            &claims(&|_| {}),
            &EncodingKey::from_secret(b"guessable"),
        )
        .unwrap();
        assert!(issuer.authorize(Some(&hs256), now).is_err(), "HMAC");
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
