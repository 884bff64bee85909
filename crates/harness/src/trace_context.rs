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

/// The id of the trace the current span belongs to, when traces are
/// exported (hex, as `traceparent` carries it).
pub(crate) fn current_trace_id() -> Option<String> {
    use opentelemetry::trace::TraceContextExt;
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
