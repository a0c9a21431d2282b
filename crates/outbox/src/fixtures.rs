//! Event metadata the unit tests of the inbox and the ordering layer share (test builds only).

use crate::envelope::EventMetadata;

/// An `OrderCreated` of aggregate `Order` `o-1` with id `id` at `sequence`.
pub(crate) fn metadata(id: &str, sequence: u64) -> EventMetadata {
    EventMetadata {
        id: id.into(),
        event_type: "OrderCreated".into(),
        version: 1,
        source: "s".into(),
        time: "2026-11-29T08:00:00.000Z".into(),
        subject: "o-1".into(),
        aggregate_type: "Order".into(),
        sequence,
        correlation_id: "c".into(),
        previous: Default::default(),
        traceparent: None,
        tracestate: None,
    }
}

/// Event `e-1`, sequence 1, as the bus delivers its metadata (decoded from JSON).
pub(crate) fn first_event() -> EventMetadata {
    // The literal is valid EventMetadata JSON (the tests that use it decode nothing else first).
    serde_json::from_str(
        r#"{"id":"e-1","type":"OrderCreated","version":1,"source":"s","time":"2026-12-01T00:00:00Z","subject":"o-1","aggregate_type":"Order","sequence":1,"correlation_id":"c"}"#,
    )
    .expect("valid metadata JSON")
}
