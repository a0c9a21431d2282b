//! W3C Trace Context for events: the `traceparent` (and `tracestate`) an event carries from the
//! request that wrote it to every consumer, webhook and replay, so one trace follows it.
//!
//! The writer stores the context current when an event is built ([`TraceContext::current`]) as
//! the outbox item's `traceparent` and `tracestate`; the relay puts them in
//! `detail.metadata` ([`EventMetadata::traceparent`](crate::envelope::EventMetadata::traceparent)),
//! where they survive the bus, queues, replays and redrives (EventBridge's own `TraceHeader`
//! does not: it is not in the delivered event, and a replay drops it). A consumer runs each
//! event's handler inside [`TraceContext::scope`] with a child of the event's context, so the
//! events its handler writes belong to the same trace (order → inventory → payment is one
//! trace), and its `event` span carries the `trace_id`.
//!
//! # Format
//!
//! `traceparent` = `00-<trace-id: 32 lowercase hex>-<parent-id: 16 lowercase hex>-<flags: 2 hex>`,
//! the trace id and parent id not all zeros, flag bit 0 = sampled. `tracestate` is passed on
//! verbatim (at most [`MAX_TRACESTATE_BYTES`]). Source: W3C Trace Context,
//! <https://www.w3.org/TR/trace-context/#traceparent-header>.
//!
//! # X-Ray
//!
//! An X-Ray trace id `1-5759e988-bd862e3fe1be46a994272793` is the W3C trace id
//! `5759e988bd862e3fe1be46a994272793` (its epoch-seconds part and its 96 random bits run
//! together), and `Parent` is the parent id: the mapping the AWS Distro for OpenTelemetry's X-Ray
//! propagator uses, so a trace begun by API Gateway or Lambda with X-Ray keeps its id here. New
//! trace ids begin with the epoch seconds too, so X-Ray accepts them
//! ([`TraceContext::xray_header`]). Sources: "Tracing header" in the X-Ray developer guide,
//! <https://docs.aws.amazon.com/xray/latest/devguide/xray-concepts.html#xray-concepts-tracingheader>,
//! and "Trace ID format" of the ADOT documentation, <https://aws-otel.github.io/docs/getting-started/x-ray#trace-id-format>.

use std::fmt;

/// The longest `tracestate` carried, in bytes: the W3C limit a vendor must at least propagate
/// (512 characters; a longer one is dropped, never cut, since cutting could split a member).
/// Source: <https://www.w3.org/TR/trace-context/#tracestate-limits>.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The HTTP header (and event metadata field) of the trace's position: `traceparent`.
pub const TRACEPARENT: &str = "traceparent";

/// The HTTP header (and event metadata field) of vendors' trace state: `tracestate`.
pub const TRACESTATE: &str = "tracestate";

/// One position in a trace: the trace id, the id of the span that is the parent of what comes
/// next, whether the trace is sampled, and the vendors' `tracestate`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceContext {
    trace_id: u128,
    parent_id: u64,
    sampled: bool,
    tracestate: Option<String>,
}

/// Why a `traceparent` (or X-Ray header) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceContextError {
    /// Not `<version>-<trace-id>-<parent-id>-<flags>` with the W3C lengths and lowercase hex.
    #[error("traceparent {0:?} is not `00-<32 hex>-<16 hex>-<2 hex>`")]
    Format(String),
    /// Version `ff` (forbidden), or version `00` with more after the flags.
    #[error("traceparent {0:?} has an invalid version")]
    Version(String),
    /// An all-zero trace id or parent id (W3C: invalid).
    #[error("traceparent {0:?} has an all-zero trace id or parent id")]
    Zero(String),
    /// An X-Ray header without a `Root=1-<8 hex>-<24 hex>`.
    #[error("X-Ray trace header {0:?} has no valid Root")]
    XRay(String),
}

impl TraceContext {
    /// Parses a `traceparent` header, keeping `tracestate` when it is at most
    /// [`MAX_TRACESTATE_BYTES`] of printable ASCII (else it is dropped: the W3C rule for a
    /// `tracestate` a vendor cannot pass on). A version above `00` is read as `00` (its first
    /// four fields), as the specification asks.
    ///
    /// # Errors
    /// [`TraceContextError`] naming what is wrong; the caller then starts a new trace.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        let text = traceparent.trim();
        let bad = || TraceContextError::Format(traceparent.to_owned());
        let mut fields = text.splitn(5, '-');
        let (Some(version), Some(trace_id), Some(parent_id), Some(flags)) = (fields.next(), fields.next(), fields.next(), fields.next()) else {
            return Err(bad());
        };
        let rest = fields.next();
        if version.len() != 2 || !lower_hex(version) || version == "ff" || (version == "00" && rest.is_some()) {
            return Err(if version.len() == 2 && lower_hex(version) { TraceContextError::Version(traceparent.to_owned()) } else { bad() });
        }
        let flags = flags.get(..2).filter(|_| flags.len() == 2 || (version != "00" && flags.len() > 2)).ok_or_else(bad)?;
        if trace_id.len() != 32 || parent_id.len() != 16 || !lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags) {
            return Err(bad());
        }
        // Lowercase hex of the checked lengths: these parse.
        let (Ok(trace_id), Ok(parent_id), Ok(flags)) =
            (u128::from_str_radix(trace_id, 16), u64::from_str_radix(parent_id, 16), u8::from_str_radix(flags, 16))
        else {
            return Err(bad());
        };
        if trace_id == 0 || parent_id == 0 {
            return Err(TraceContextError::Zero(traceparent.to_owned()));
        }
        Ok(Self { trace_id, parent_id, sampled: flags & 1 == 1, tracestate: tracestate.and_then(valid_tracestate) })
    }

    /// The context of an X-Ray trace header (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`,
    /// the Lambda environment's `_X_AMZN_TRACE_ID`): its root as the trace id, `Parent` as the
    /// parent id (a new one when absent, as in API Gateway's header to a function), `Sampled=1`
    /// as sampled (`0` and `?`, a deferred decision, as not).
    ///
    /// # Errors
    /// [`TraceContextError::XRay`] when `Root` is missing or not `1-<8 hex>-<24 hex>`.
    pub fn from_xray_header(header: &str) -> Result<Self, TraceContextError> {
        let bad = || TraceContextError::XRay(header.to_owned());
        let mut root = None;
        let mut parent = None;
        let mut sampled = false;
        for part in header.split(';') {
            let Some((key, value)) = part.trim().split_once('=') else { continue };
            match key {
                "Root" => root = Some(value),
                "Parent" => parent = u64::from_str_radix(value, 16).ok().filter(|p| *p != 0 && value.len() == 16),
                "Sampled" => sampled = value == "1",
                _ => {}
            }
        }
        let root = root.ok_or_else(bad)?;
        let mut parts = root.split('-');
        let (Some("1"), Some(epoch), Some(random), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else { return Err(bad()) };
        if epoch.len() != 8 || random.len() != 24 {
            return Err(bad());
        }
        let trace_id = u128::from_str_radix(&format!("{epoch}{random}"), 16).ok().filter(|t| *t != 0).ok_or_else(bad)?;
        Ok(Self { trace_id, parent_id: parent.unwrap_or_else(random_span_id), sampled, tracestate: None })
    }

    /// The trace id: 32 lowercase hex digits, e.g. `5759e988bd862e3fe1be46a994272793`.
    pub fn trace_id(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The parent id (the span that what comes next descends from): 16 lowercase hex digits.
    pub fn parent_id(&self) -> String {
        format!("{:016x}", self.parent_id)
    }

    /// Whether the trace is sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// The vendors' `tracestate`, passed on verbatim.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The `traceparent` header: `00-<trace id>-<parent id>-<01 | 00>`.
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-{:02x}", self.trace_id, self.parent_id, u8::from(self.sampled))
    }

    /// The same position as an X-Ray trace header, `Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>`.
    pub fn xray_header(&self) -> String {
        let hex = self.trace_id();
        format!("Root=1-{}-{};Parent={};Sampled={}", &hex[..8], &hex[8..], self.parent_id(), u8::from(self.sampled))
    }

    /// The context with its parts given: `trace_id` and `parent_id` non-zero (else `None`).
    pub fn from_parts(trace_id: u128, parent_id: u64, sampled: bool, tracestate: Option<String>) -> Option<Self> {
        (trace_id != 0 && parent_id != 0).then(|| Self { trace_id, parent_id, sampled, tracestate: tracestate.as_deref().and_then(valid_tracestate) })
    }

    /// The trace id as a number (for an OpenTelemetry `TraceId::from(u128)`).
    pub fn trace_id_u128(&self) -> u128 {
        self.trace_id
    }

    /// The parent id as a number (for an OpenTelemetry `SpanId::from(u64)`).
    pub fn parent_id_u64(&self) -> u64 {
        self.parent_id
    }

    /// A new trace: a trace id of the epoch seconds (4 bytes, so X-Ray accepts it) and 12
    /// random bytes, a random parent id, sampled.
    pub fn new_root() -> Self {
        let epoch = u128::from(u32::try_from(chrono::Utc::now().timestamp()).unwrap_or(u32::MAX));
        let random = rand::random::<u128>() & ((1u128 << 96) - 1);
        // Never zero: the epoch part is not (any date after 1970), and if it were, the low bit is set.
        let trace_id = ((epoch << 96) | random).max(1);
        Self { trace_id, parent_id: random_span_id(), sampled: true, tracestate: None }
    }

    /// A child position in the same trace: a new random parent id, the same trace id, flags and
    /// `tracestate` (what a hop passes on, e.g. a webhook delivery's `traceparent`).
    pub fn child(&self) -> Self {
        Self { parent_id: random_span_id(), ..self.clone() }
    }

    /// Where a request's work sits in its caller's trace: a child of the request's W3C
    /// `traceparent` (with its `tracestate`) when it has a valid one, else of its X-Ray header
    /// (`X-Amzn-Trace-Id`, or the invocation's), else `None` (a malformed `traceparent` is
    /// ignored, as W3C asks: the request is then the start of a trace). What an HTTP producer or
    /// an inbound webhook passes to [`TraceContext::scope`].
    pub fn continued(traceparent: Option<&str>, tracestate: Option<&str>, xray_header: Option<&str>) -> Option<Self> {
        let parent = traceparent.and_then(|t| Self::parse(t, tracestate).ok()).or_else(|| xray_header.and_then(|x| Self::from_xray_header(x).ok()));
        parent.map(|p| p.child())
    }

    /// The context an event built now belongs to: the one [`TraceContext::scope`] set for this
    /// task (a consumer handling an event, an inbound webhook continuing a partner's trace),
    /// else the current `tracing` span's OpenTelemetry context (feature `opentelemetry`, when a
    /// `tracing-opentelemetry` layer is installed), else the invocation's X-Ray header
    /// ([`TRACE_HEADER_ENV`](crate::TRACE_HEADER_ENV)); `None` outside all three.
    pub fn current() -> Option<Self> {
        if let Ok(Some(scoped)) = CURRENT.try_with(Clone::clone) {
            return Some(scoped);
        }
        #[cfg(feature = "opentelemetry")]
        if let Some(span) =
            Self::of_span(&tracing::Span::current()).or_else(|| Self::from_otel(&opentelemetry_span_context(&opentelemetry::Context::current())))
        {
            return Some(span);
        }
        crate::current_trace_header().and_then(|h| Self::from_xray_header(&h).ok())
    }

    /// [`TraceContext::current`], or [`TraceContext::new_root`] when there is none.
    pub fn current_or_new() -> Self {
        Self::current().unwrap_or_else(Self::new_root)
    }

    /// The context the next hop of an event's work continues from (the events a consumer's
    /// handler writes, a webhook delivery's `traceparent`): a child of `event` (the event's own
    /// context); with feature `opentelemetry`, the current `tracing` span's own OpenTelemetry
    /// context instead when it has one in `event`'s trace (or `event` is `None`), so the ids
    /// passed on are those of an exported span.
    pub fn next_hop(event: Option<&Self>) -> Option<Self> {
        #[cfg(feature = "opentelemetry")]
        if let Some(own) = Self::of_span(&tracing::Span::current()).filter(|own| event.is_none_or(|e| e.trace_id == own.trace_id)) {
            return Some(own);
        }
        event.map(Self::child)
    }

    /// Runs `future` with `self` as the task's current context ([`TraceContext::current`]): the
    /// events it builds carry `self`'s trace. `None` clears an outer one for the future.
    pub async fn scope<F: std::future::Future>(context: Option<Self>, future: F) -> F::Output {
        CURRENT.scope(context, future).await
    }
}

/// OpenTelemetry (feature `opentelemetry`): a [`TraceContext`] is a W3C span context, so it
/// converts both ways with OpenTelemetry's [`SpanContext`](opentelemetry::trace::SpanContext),
/// and a `tracing` span bridged by `tracing-opentelemetry` has one.
#[cfg(feature = "opentelemetry")]
impl TraceContext {
    /// The OpenTelemetry context of `span` (a `tracing` span, as `tracing-opentelemetry`'s layer
    /// sees it): its trace id, its own span id as the parent id (what comes next descends from
    /// it), its sampled flag and trace state. `None` when no `tracing-opentelemetry` layer is
    /// installed, or the span is disabled for it (its context is then invalid).
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        Self::from_otel(&opentelemetry_span_context(&span.context()))
    }

    /// The context of an OpenTelemetry span context; `None` when it is invalid (an all-zero id).
    pub fn from_otel(span: &opentelemetry::trace::SpanContext) -> Option<Self> {
        if !span.is_valid() {
            return None;
        }
        let state = span.trace_state().header();
        Self::from_parts(
            u128::from_be_bytes(span.trace_id().to_bytes()),
            u64::from_be_bytes(span.span_id().to_bytes()),
            span.is_sampled(),
            (!state.is_empty()).then_some(state),
        )
    }

    /// This position as a remote OpenTelemetry span context (a span of another process: the
    /// producer's), with the `tracestate` when it parses as OpenTelemetry's `TraceState`.
    pub fn to_otel(&self) -> opentelemetry::trace::SpanContext {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let flags = if self.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        let state = self.tracestate.as_deref().and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
        SpanContext::new(TraceId::from(self.trace_id), SpanId::from(self.parent_id), flags, true, state)
    }

    /// An OpenTelemetry [`Context`](opentelemetry::Context) whose span is this remote position:
    /// what `tracing_opentelemetry::OpenTelemetrySpanExt::set_parent` takes to make a span a
    /// child of it.
    pub fn otel_context(&self) -> opentelemetry::Context {
        use opentelemetry::trace::TraceContextExt as _;
        opentelemetry::Context::new().with_remote_span_context(self.to_otel())
    }

    /// Makes `span` (not yet entered) the child of `parent` (an event's or a request's context)
    /// and links it to the span current now (the invocation's, or for a batch the span current
    /// when the batch began): one span per event in its producer's trace, and the way back to
    /// the invocation that handled it. Nothing happens without a `tracing-opentelemetry` layer,
    /// or when `span` is disabled or already started.
    pub fn continue_in(parent: &Self, span: &tracing::Span) {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let current = opentelemetry_span_context(&tracing::Span::current().context());
        if span.set_parent(parent.otel_context()).is_ok() && current.is_valid() {
            span.add_link(current);
        }
    }
}

/// The span context of an OpenTelemetry context (invalid when it has none).
#[cfg(feature = "opentelemetry")]
fn opentelemetry_span_context(context: &opentelemetry::Context) -> opentelemetry::trace::SpanContext {
    use opentelemetry::trace::TraceContextExt as _;
    context.span().span_context().clone()
}

tokio::task_local! {
    /// The context [`TraceContext::scope`] set for the running task.
    static CURRENT: Option<TraceContext>;
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext").field("traceparent", &self.traceparent()).field("tracestate", &self.tracestate).finish()
    }
}

impl fmt::Display for TraceContext {
    /// The `traceparent`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent())
    }
}

/// A random non-zero 8-byte span id.
fn random_span_id() -> u64 {
    rand::random::<u64>().max(1)
}

fn lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `tracestate` when it can be passed on: 1 to [`MAX_TRACESTATE_BYTES`] of printable ASCII.
fn valid_tracestate(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty() && text.len() <= MAX_TRACESTATE_BYTES && text.bytes().all(|b| (0x20..0x7f).contains(&b))).then(|| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const W3C: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_round_trips() {
        let c = TraceContext::parse(W3C, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(c.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(c.parent_id(), "00f067aa0ba902b7");
        assert!(c.sampled());
        assert_eq!(c.traceparent(), W3C);
        assert_eq!(c.tracestate(), Some("congo=t61rcWkgMzE"));
    }

    #[test]
    fn malformed_traceparents_are_refused_naming_why() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(matches!(TraceContext::parse(bad, None), Err(TraceContextError::Format(_))), "{bad:?}");
        }
        assert!(matches!(TraceContext::parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None), Err(TraceContextError::Version(_))));
        assert!(matches!(TraceContext::parse(&format!("{W3C}-extra"), None), Err(TraceContextError::Version(_))));
        assert!(matches!(TraceContext::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None), Err(TraceContextError::Zero(_))));
        assert!(matches!(TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None), Err(TraceContextError::Zero(_))));
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let c = TraceContext::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-later", None).unwrap();
        assert_eq!(c.traceparent(), W3C);
    }

    #[test]
    fn a_tracestate_that_cannot_be_passed_on_is_dropped() {
        assert_eq!(TraceContext::parse(W3C, Some(&"a=b,".repeat(200))).unwrap().tracestate(), None);
        assert_eq!(TraceContext::parse(W3C, Some("a=\u{7}")).unwrap().tracestate(), None);
        assert_eq!(TraceContext::parse(W3C, Some("  ")).unwrap().tracestate(), None);
    }

    #[test]
    fn an_xray_header_keeps_its_trace_id_and_parent() {
        let c = TraceContext::from_xray_header("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1").unwrap();
        assert_eq!(c.traceparent(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        assert_eq!(c.xray_header(), "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1");
        let unsampled = TraceContext::from_xray_header("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=?").unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(unsampled.trace_id(), "5759e988bd862e3fe1be46a994272793");
        for bad in [
            "",
            "Parent=53995c3f42cd8ad8",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e98-bd862e3fe1be46a994272793",
            "Root=1-5759e988-zz",
        ] {
            assert!(TraceContext::from_xray_header(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_new_trace_is_xray_shaped_and_a_child_keeps_the_trace() {
        let root = TraceContext::new_root();
        let epoch = u32::from_str_radix(&root.trace_id()[..8], 16).unwrap();
        assert!((i64::from(epoch) - chrono::Utc::now().timestamp()).abs() < 5);
        assert_eq!(TraceContext::from_xray_header(&root.xray_header()).unwrap(), root);
        let child = root.child();
        assert_eq!(child.trace_id(), root.trace_id());
        assert_ne!(child.parent_id(), root.parent_id());
        assert_eq!(TraceContext::parse(&child.traceparent(), None).unwrap(), child);
    }

    #[test]
    fn a_request_continues_its_traceparent_else_its_xray_header() {
        let xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let w3c = TraceContext::continued(Some(W3C), Some("k=v"), Some(xray)).unwrap();
        assert_eq!((w3c.trace_id().as_str(), w3c.tracestate()), ("4bf92f3577b34da6a3ce929d0e0e4736", Some("k=v")));
        assert_ne!(w3c.parent_id(), "00f067aa0ba902b7");
        let from_xray = TraceContext::continued(Some("garbage"), None, Some(xray)).unwrap();
        assert_eq!(from_xray.trace_id(), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(TraceContext::continued(Some("garbage"), None, None), None);
    }

    #[tokio::test]
    async fn a_scope_is_the_current_context_of_its_task_only() {
        let c = TraceContext::parse(W3C, None).unwrap();
        let inner = TraceContext::scope(Some(c.clone()), async { TraceContext::current() }).await;
        assert_eq!(inner, Some(c));
        let cleared = TraceContext::scope(Some(TraceContext::new_root()), TraceContext::scope(None, async { CURRENT.with(Clone::clone) })).await;
        assert_eq!(cleared, None);
    }
}
