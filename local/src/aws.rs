//! SDK configuration: one region for every client; the emulator's endpoint and dummy
//! credentials when local, the ordinary AWS configuration chain otherwise.

use aws_config::{BehaviorVersion, Region, SdkConfig};

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
