//! A transport for SDK clients mocked with `aws-smithy-mocks` that holds every request a fixed
//! time before the mock answers it: the bus's round trip (the relay bench's +30 ms), and, in
//! `tests/relay.rs`, calls that really overlap in time so a test can see which ones do.
//!
//! The mock answers as before (its interceptor sets the output after the transport returns);
//! only the time between sending and answering changes. `watch` sees each request body when it
//! is sent and returns what to run when it is answered.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;

/// Called with a request's body when it is sent; the closure it returns runs when it is answered.
pub(crate) type Watch = Arc<dyn Fn(&[u8]) -> Box<dyn FnOnce() + Send> + Send + Sync>;

/// The mock's transport, each request held `delay`.
#[derive(Clone)]
pub(crate) struct Held {
    inner: SharedHttpClient,
    delay: Duration,
    watch: Option<Watch>,
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held").field("delay", &self.delay).field("watch", &self.watch.is_some()).finish()
    }
}

impl Held {
    /// `aws-smithy-mocks`' transport, each request held `delay`.
    pub(crate) fn new(delay: Duration) -> Self {
        Self { inner: aws_smithy_mocks::create_mock_http_client(), delay, watch: None }
    }

    /// Also calls `watch` around each request.
    #[allow(dead_code)] // tests/relay.rs watches; the bench does not
    pub(crate) fn watched(delay: Duration, watch: Watch) -> Self {
        Self { watch: Some(watch), ..Self::new(delay) }
    }

    /// As the SDK config's `http_client`.
    pub(crate) fn shared(self) -> SharedHttpClient {
        SharedHttpClient::new(self)
    }
}

impl HttpClient for Held {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        let inner = self.inner.http_connector(settings, components);
        SharedHttpConnector::new(HeldConnector { inner, delay: self.delay, watch: self.watch.clone() })
    }
}

struct HeldConnector {
    inner: SharedHttpConnector,
    delay: Duration,
    watch: Option<Watch>,
}

impl fmt::Debug for HeldConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldConnector").field("delay", &self.delay).finish()
    }
}

impl HttpConnector for HeldConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let done = self.watch.as_ref().map(|watch| watch(request.body().bytes().unwrap_or_default()));
        let (inner, delay) = (self.inner.clone(), self.delay);
        HttpConnectorFuture::new(async move {
            tokio::time::sleep(delay).await;
            let answer = inner.call(request).await;
            if let Some(done) = done {
                done();
            }
            answer
        })
    }
}
