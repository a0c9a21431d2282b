//! Secrets: the subscribers' `whsec_` secrets from Secrets Manager, cached for a TTL ([`SecretCache`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::error::DispatchError;
use super::lock;
use crate::signature::Secret;

/// Secrets Manager secrets cached for a TTL.
#[derive(Debug)]
pub struct SecretCache {
    client: aws_sdk_secretsmanager::Client,
    ttl: Duration,
    cache: Mutex<HashMap<String, (Instant, Vec<Secret>)>>,
}

impl SecretCache {
    /// A cache over `client`.
    pub fn new(client: aws_sdk_secretsmanager::Client, ttl: Duration) -> Self {
        Self { client, ttl, cache: Mutex::new(HashMap::new()) }
    }

    /// The secrets of `secret_id` (`GetSecretValue`'s `SecretString`, whitespace-separated `whsec_` values).
    ///
    /// # Errors
    /// [`DispatchError`].
    pub async fn get(&self, secret_id: &str) -> Result<Vec<Secret>, DispatchError> {
        if let Some((at, secrets)) = lock(&self.cache).get(secret_id) {
            if at.elapsed() < self.ttl {
                return Ok(secrets.clone());
            }
        }
        let out = self
            .client
            .get_secret_value()
            .secret_id(secret_id)
            .send()
            .await
            .map_err(|e| DispatchError::Aws { action: "GetSecretValue", source: outbox::AwsError::from_sdk("GetSecretValue", &e) })?;
        let text = out.secret_string().unwrap_or_default();
        let secrets = Secret::parse_list(text).map_err(|source| DispatchError::Secret { secret_id: secret_id.to_owned(), source })?;
        lock(&self.cache).insert(secret_id.to_owned(), (Instant::now(), secrets.clone()));
        Ok(secrets)
    }
}
