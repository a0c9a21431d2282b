//! Who calls the order API, and which orders they may see.
//!
//! On AWS the HTTP API's JWT authorizer (template `OrdersHttpApi`, issuer `JwtIssuer`, audience
//! `JwtAudience`) has checked the token's signature, `iss`, `aud`, `exp` and `nbf` before the
//! function runs, and hands the token's claims over in the payload 2.0 event
//! (`requestContext.authorizer.jwt.claims`, every value a string; `scopes` from the `scope`
//! claim): <https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html>.
//! The function does not check the token again; it reads the caller from those claims:
//!
//! * the subject is the `sub` claim; an order records the subject that created it (`owner`);
//! * an admin is a caller with the scope [`ADMIN_SCOPE`] (in `scopes` or the `scope` claim) or in
//!   the Cognito group [`ADMIN_GROUP`] (`cognito:groups`); an admin may read and cancel any order;
//! * anyone else sees only their own orders: `GET` or cancel of another subject's order answers
//!   404, exactly as for an order that does not exist, so order ids (UUIDv7, partly predictable
//!   from time) reveal nothing.
//!
//! A request without claims or without `sub` is refused with 401 ([`AuthMode::Jwt`], the
//! default): behind the authorizer that cannot happen, so it means the route lost its authorizer.
//! [`AuthMode::None`] (`ORDER_API_AUTH=none`) turns authentication and ownership OFF, for an
//! internal API that nobody outside can reach; it is logged as a warning at every cold start.

use std::collections::HashMap;

use lambda_http::request::RequestContext;

use crate::http::Problem;

/// The scope that makes a caller an admin (Cognito resource-server scopes read `<server>/<scope>`).
pub const ADMIN_SCOPE: &str = "orders/admin";
/// The Cognito group that makes a caller an admin.
pub const ADMIN_GROUP: &str = "orders-admin";

/// Whether the API requires an authenticated caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// The caller is the JWT's `sub`; each order is visible to its owner and admins only (default).
    #[default]
    Jwt,
    /// No authentication, no ownership: every caller may read and cancel every order.
    None,
}

impl AuthMode {
    /// Parses `ORDER_API_AUTH`: `jwt` or `none` (case-insensitive).
    ///
    /// # Errors
    /// The value, when it is neither.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.to_ascii_lowercase().as_str() {
            "jwt" => Ok(Self::Jwt),
            "none" => Ok(Self::None),
            _ => Err(format!("{value:?} is not an auth mode; use jwt or none")),
        }
    }
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's `sub`; `None` when authentication is off ([`AuthMode::None`]).
    pub subject: Option<String>,
    /// Whether the caller may see every order.
    pub admin: bool,
}

impl Caller {
    /// The caller when authentication is off: may see everything.
    pub fn anonymous() -> Self {
        Self { subject: None, admin: true }
    }

    /// Whether the caller may read or change an order owned by `owner` (`None`: an order
    /// written before owners were recorded, visible to admins only).
    pub fn may_access(&self, owner: Option<&str>) -> bool {
        self.admin || (self.subject.is_some() && self.subject.as_deref() == owner)
    }
}

/// What the authorizer said about a request: its claims and scopes, as API Gateway passes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `requestContext.authorizer.jwt.claims`.
    pub claims: HashMap<String, String>,
    /// `requestContext.authorizer.jwt.scopes`.
    pub scopes: Vec<String>,
}

impl Identity {
    /// The authorizer's output in `context`: an HTTP API JWT authorizer's
    /// `authorizer.jwt.claims` and `scopes` (payload 2.0), or a REST API Cognito authorizer's
    /// `authorizer.claims` (payload 1.0); `None` when there is none.
    pub fn from_context(context: Option<&RequestContext>) -> Option<Self> {
        match context? {
            RequestContext::ApiGatewayV2(c) => {
                let jwt = c.authorizer.as_ref()?.jwt.as_ref()?;
                Some(Self { claims: jwt.claims.clone(), scopes: jwt.scopes.clone().unwrap_or_default() })
            }
            RequestContext::ApiGatewayV1(c) => {
                let claims = c.authorizer.fields.get("claims")?.as_object()?;
                let text = |v: &serde_json::Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                Some(Self { claims: claims.iter().map(|(k, v)| (k.clone(), text(v))).collect(), scopes: Vec::new() })
            }
            _ => None,
        }
    }

    /// Whether the identity carries [`ADMIN_SCOPE`] or [`ADMIN_GROUP`]. API Gateway renders a
    /// list claim as `[a b]`, a Cognito group list as `[g1 g2]` too.
    fn is_admin(&self) -> bool {
        let words = |claim: &str| -> Vec<String> {
            self.claims
                .get(claim)
                .map(|v| v.trim_matches(|c| c == '[' || c == ']').split([' ', ',']).map(str::to_owned).collect())
                .unwrap_or_default()
        };
        self.scopes.iter().any(|s| s == ADMIN_SCOPE)
            || words("scope").iter().any(|s| s == ADMIN_SCOPE)
            || words("cognito:groups").iter().any(|g| g == ADMIN_GROUP)
    }
}

/// The caller of a request under `mode`.
///
/// # Errors
/// 401 when `mode` is [`AuthMode::Jwt`] and the request has no claims or no `sub`.
pub fn caller(mode: AuthMode, identity: Option<&Identity>) -> Result<Caller, Problem> {
    if mode == AuthMode::None {
        return Ok(Caller::anonymous());
    }
    let Some(identity) = identity else {
        return Err(Problem::new(401, "Unauthorized", "the request carries no token claims; send Authorization: Bearer <JWT>"));
    };
    let subject = identity.claims.get("sub").filter(|s| !s.is_empty()).cloned();
    let Some(subject) = subject else {
        return Err(Problem::new(401, "Unauthorized", "the token has no `sub` claim"));
    };
    Ok(Caller { subject: Some(subject), admin: identity.is_admin() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(claims: &[(&str, &str)], scopes: &[&str]) -> Identity {
        Identity {
            claims: claims.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_subject_owns_and_admins_see_everything() {
        let alice = caller(AuthMode::Jwt, Some(&identity(&[("sub", "alice")], &[]))).unwrap();
        assert!(alice.may_access(Some("alice")) && !alice.may_access(Some("bob")) && !alice.may_access(None));
        for admin in [
            identity(&[("sub", "ops")], &[ADMIN_SCOPE]),
            identity(&[("sub", "ops"), ("scope", "openid orders/admin")], &[]),
            identity(&[("sub", "ops"), ("cognito:groups", "[staff orders-admin]")], &[]),
        ] {
            let ops = caller(AuthMode::Jwt, Some(&admin)).unwrap();
            assert!(ops.admin && ops.may_access(Some("alice")) && ops.may_access(None), "{admin:?}");
        }
        let not_admin = caller(AuthMode::Jwt, Some(&identity(&[("sub", "x"), ("scope", "orders/administrator")], &["orders/read"]))).unwrap();
        assert!(!not_admin.admin);
    }

    #[test]
    fn no_claims_or_no_subject_is_a_401_unless_auth_is_off() {
        assert_eq!(caller(AuthMode::Jwt, None).unwrap_err().status, 401);
        assert_eq!(caller(AuthMode::Jwt, Some(&identity(&[("sub", "")], &[]))).unwrap_err().status, 401);
        assert_eq!(caller(AuthMode::Jwt, Some(&identity(&[("iss", "x")], &[]))).unwrap_err().status, 401);
        assert_eq!(caller(AuthMode::None, None).unwrap(), Caller::anonymous());
        assert_eq!(AuthMode::parse("NONE"), Ok(AuthMode::None));
        assert!(AuthMode::parse("iam").is_err());
    }
}
