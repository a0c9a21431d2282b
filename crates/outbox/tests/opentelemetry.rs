//! Feature `opentelemetry`: a consumer's work on an event is one exported span in the producer's
//! trace (a child of the event's `traceparent`, linked to the invocation's span), and the events
//! its handler writes carry that span's context. The spans are exported in memory
//! (`opentelemetry_sdk`'s `InMemorySpanExporter`) through `tracing-opentelemetry`'s layer.

use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox::consumer::{Consumer, HandlerError, MemoryDeadLetters};
use outbox::inbox::MemoryInbox;
use outbox::{Event, OutboxWriter, TraceContext};
use serde_json::{json, Value};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// An EventBridge event `id` whose metadata carries `traceparent` (or none).
fn event(id: &str, traceparent: Option<&str>) -> String {
    let mut metadata = json!({"id": id, "type": "OrderCreated", "version": 1, "source": "example.orders",
        "time": "2026-11-29T08:00:00.000Z", "subject": "o-1", "aggregate_type": "Order", "sequence": 1, "correlation_id": "corr-1"});
    if let Some(t) = traceparent {
        metadata["traceparent"] = json!(t);
        metadata["tracestate"] = json!("vendor=v1");
    }
    json!({
        "version": "0", "id": format!("envelope-{id}"), "detail-type": "OrderCreated", "source": "example.orders",
        "time": "2026-11-29T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": {"metadata": metadata, "data": {"order_id": "o-1"}}
    })
    .to_string()
}

/// A consumer whose handler emits one `StockReserved` event.
fn consumer(inbox: &MemoryInbox) -> Consumer<MemoryInbox, MemoryDeadLetters, &'static str> {
    Consumer::builder(inbox.clone(), MemoryDeadLetters::new())
        .outbox(OutboxWriter::new("outbox", Duration::from_secs(3600)))
        .on::<Value, _, _>("OrderCreated", |_event, tx| async move {
            tx.emit(Event::new("StockReserved", "example.stock", ("Reservation", "o-1"), 1, &json!({}))?)?;
            Ok::<_, HandlerError>("reserved")
        })
        .build()
}

/// The `traceparent` of the outbox item the handler of the `n`th applied event wrote.
fn written_traceparent(inbox: &MemoryInbox, n: usize) -> TraceContext {
    let applied = inbox.applied();
    let put = applied[n].writes.iter().find_map(|w| w.put()).expect("the handler's outbox put");
    let traceparent = put.item().get("traceparent").and_then(|v| v.as_s().ok()).expect("a traceparent on the outbox item");
    TraceContext::parse(traceparent, None).expect("a valid traceparent")
}

fn span_named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test]
async fn an_event_is_handled_in_a_span_of_its_producers_trace_linked_to_the_invocation() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = tracing::subscriber::set_default(subscriber);

    let inbox = MemoryInbox::new("inventory");
    let consumer = consumer(&inbox);
    let traced = event("e-1", Some(&format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01")));
    let untraced = event("e-2", None);
    let records = json!({"Records": [{"messageId": "m-1", "body": traced}, {"messageId": "m-2", "body": untraced}]});
    let payload = serde_json::value::to_raw_value(&records).unwrap();
    let invocation = tracing::info_span!("invocation");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    consumer.handle_invocation(&payload, deadline).instrument(invocation.clone()).await.unwrap();
    drop(invocation);
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();

    let invocation = span_named(&spans, "invocation");
    let events = span_named(&spans, "event");
    assert_eq!((invocation.len(), events.len()), (1, 2), "{spans:#?}");
    let invocation = invocation[0].span_context.clone();
    let (traced, untraced) = (events[0], events[1]);

    // The traced event: a child of the producer's span, in its trace, linked to the invocation.
    assert_eq!(traced.span_context.trace_id(), TraceId::from_hex(TRACE_ID).unwrap());
    assert_eq!(traced.parent_span_id, SpanId::from_hex(PRODUCER_SPAN).unwrap());
    assert_eq!(traced.span_context.trace_state().header(), "vendor=v1");
    let links: Vec<_> = traced.links.iter().map(|l| l.span_context.clone()).collect();
    assert_eq!(links, vec![invocation.clone()], "one link, to the invocation's span");
    // The event the handler wrote continues from that exported span.
    let written = written_traceparent(&inbox, 0);
    assert_eq!(written.trace_id(), TRACE_ID);
    assert_eq!(written.parent_id(), traced.span_context.span_id().to_string());

    // An event without a traceparent: a child of the invocation, no link; its handler's event
    // continues the invocation's trace from the event span.
    assert_eq!(untraced.span_context.trace_id(), invocation.trace_id());
    assert_eq!(untraced.parent_span_id, invocation.span_id());
    assert!(untraced.links.is_empty());
    let written = written_traceparent(&inbox, 1);
    assert_eq!(written.trace_id(), invocation.trace_id().to_string());
    assert_eq!(written.parent_id(), untraced.span_context.span_id().to_string());

    // Without a `tracing-opentelemetry` layer the feature changes nothing. In the same test: a
    // test of its own, run beside this one, would race `tracing`'s global callsite cache.
    drop(_default);
    without_a_layer_the_handlers_event_is_a_child_of_the_events_context().await;
}

/// The handler's event is a child of the event's context.
async fn without_a_layer_the_handlers_event_is_a_child_of_the_events_context() {
    let inbox = MemoryInbox::new("inventory");
    let payload = serde_json::value::RawValue::from_string(event("e-1", Some(&format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01")))).unwrap();
    consumer(&inbox).handle_payload(&payload).await.unwrap();
    let written = written_traceparent(&inbox, 0);
    assert_eq!(written.trace_id(), TRACE_ID);
    assert_ne!(written.parent_id(), PRODUCER_SPAN);
}

#[test]
fn a_trace_context_converts_to_and_from_an_opentelemetry_span_context() {
    let context = TraceContext::parse(&format!("00-{TRACE_ID}-{PRODUCER_SPAN}-01"), Some("vendor=v1")).unwrap();
    let otel = context.to_otel();
    assert!(otel.is_remote() && otel.is_sampled());
    assert_eq!(TraceContext::from_otel(&otel), Some(context));
    assert_eq!(TraceContext::from_otel(&opentelemetry::trace::SpanContext::empty_context()), None);
}
