//! SDK configuration: one region for every client; the emulator's endpoint and dummy
//! credentials when local, the ordinary AWS configuration chain otherwise.

use aws_config::{BehaviorVersion, Region, SdkConfig};

use crate::Error;

/// Account id moto uses in ARNs.
pub const EMULATOR_ACCOUNT: &str = "123456789012";

/// Where the stack lives.
#[derive(Debug, Clone)]
pub struct Target {
    /// Emulator endpoint (`--endpoint`, `AWS_ENDPOINT_URL`), or `None` for real AWS.
    pub endpoint: Option<String>,
    /// Region (`AWS_REGION`, `AWS_DEFAULT_REGION`, default `us-east-1` when local).
    pub region: String,
}

/// The SDK configuration for `target`.
pub async fn sdk_config(target: &Target) -> SdkConfig {
    let loader = aws_config::defaults(BehaviorVersion::latest()).region(Region::new(target.region.clone()));
    match &target.endpoint {
        Some(url) => {
            let creds = aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "outbox-local");
            loader.endpoint_url(url).credentials_provider(creds).load().await
        }
        None => loader.load().await,
    }
}

/// The region from the environment, or `us-east-1`.
pub fn region_from_env() -> String {
    std::env::var("AWS_REGION").or_else(|_| std::env::var("AWS_DEFAULT_REGION")).ok().filter(|r| !r.is_empty()).unwrap_or_else(|| "us-east-1".into())
}

/// Checks an emulator endpoint (`--endpoint`, `AWS_ENDPOINT_URL`) before anything uses it: an
/// `http://` or `https://` URL with a host.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the flag and the value.
pub fn check_endpoint(endpoint: &str) -> Result<(), Error> {
    let bad = |why: String| {
        Error::invalid("--endpoint (or AWS_ENDPOINT_URL)", endpoint, format!("{why}; pass the emulator's URL, e.g. --endpoint http://127.0.0.1:5000"))
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| bad(format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("not an http:// or https:// URL".into()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_http_or_https_urls_with_a_host() {
        assert!(check_endpoint("http://127.0.0.1:5000").is_ok());
        assert!(check_endpoint("https://dynamodb.localhost").is_ok());
        for bad in ["not-a-url", "127.0.0.1:5000", "ftp://host", "http://", "file:///tmp/x"] {
            let err = check_endpoint(bad).expect_err(bad).to_string();
            assert!(err.starts_with(&format!("--endpoint (or AWS_ENDPOINT_URL) {bad:?}: ")), "{err}");
        }
    }
}
