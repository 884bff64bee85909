//! The W3C trace context of a span (`traceparent`, and `tracestate` when
//! set), for the calls that carry a turn's trace on: model requests and
//! runner calls. Empty when traces are not exported.

use std::collections::HashMap;

use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context fields naming `span`.
pub(crate) fn of(span: &tracing::Span) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut fields);
    });
    fields
}
