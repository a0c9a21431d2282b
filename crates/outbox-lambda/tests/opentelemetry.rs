//! The OTLP export as a function does it (feature `opentelemetry`): `telemetry::init` pointed at a
//! local OTLP/HTTP receiver standing in for the ADOT collector layer, a span continuing an
//! event's `traceparent` inside a current-thread runtime (the functions' flavour), and
//! `telemetry::flush` (what `run` calls after every invocation): the receiver gets a protobuf
//! `POST /v1/traces` holding the span's name and the event's trace id, before `flush` returns.
//!
//! One test per binary: `init` installs the process's global subscriber.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use outbox_lambda::Env;

/// What the receiver got: (request line, content-type, body).
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on a free loopback port: answers every request 200 and keeps it.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let endpoint = format!("http://{}", listener.local_addr().expect("its address"));
    let received: Received = Arc::default();
    let kept = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut headers = HashMap::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
                }
            }
            let length = headers.get("content-length").and_then(|l| l.parse().ok()).unwrap_or(0);
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            kept.lock().unwrap().push((request_line.trim().to_owned(), headers.get("content-type").cloned().unwrap_or_default(), body));
            let _ = reader.get_mut().write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (endpoint, received)
}

#[tokio::test(flavor = "current_thread")]
async fn a_span_continuing_an_events_trace_reaches_the_collector_when_flushed() {
    let (endpoint, received) = receiver();
    let env = Env::from_map(HashMap::from([
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), endpoint),
        ("AWS_LAMBDA_FUNCTION_NAME".to_owned(), "reserve-inventory".to_owned()),
    ]));
    outbox_lambda::telemetry::init(&env).expect("the exporter is configured");

    let event = outbox::TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None).expect("a traceparent");
    let span = tracing::info_span!("otlp-export-test");
    outbox::TraceContext::continue_in(&event, &span);
    span.in_scope(|| tracing::warn!("inside the event's span"));
    drop(span);
    outbox_lambda::telemetry::flush();

    let got = received.lock().unwrap().clone();
    let trace_id = 0x4bf92f3577b34da6a3ce929d0e0e4736u128.to_be_bytes();
    let found = got.iter().find(|(_, _, body)| body.windows(16).any(|w| w == trace_id));
    let (line, content_type, body) = found
        .unwrap_or_else(|| panic!("no export holding the event's trace id: {:?}", got.iter().map(|(l, c, b)| (l, c, b.len())).collect::<Vec<_>>()));
    assert_eq!(line, "POST /v1/traces HTTP/1.1");
    assert_eq!(content_type, "application/x-protobuf");
    assert!(body.windows(b"otlp-export-test".len()).any(|w| w == b"otlp-export-test"), "the span's name is in the export");
    assert!(body.windows(b"reserve-inventory".len()).any(|w| w == b"reserve-inventory"), "the service name is the function's");
}
