//! Structured logging through `tracing`; every line inside a request carries
//! the request span (request id, method, path, account). With an OTLP
//! endpoint, spans are also exported as traces (OTLP over HTTP/protobuf),
//! and a request's W3C `traceparent` makes its spans part of the caller's
//! trace.

use anyhow::Context;
use opentelemetry::trace::TracerProvider;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use url::Url;

use crate::config::{LogConfig, LogFormat};

/// What was installed; [`Telemetry::shutdown`] sends the traces still
/// buffered.
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes and stops the trace export, if any.
    pub async fn shutdown(self) {
        let Some(traces) = self.traces else { return };
        let flushed = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        if let Ok(Err(err)) = flushed {
            tracing::warn!(error = %err, "could not flush the last traces");
        }
    }
}

/// Installs the global subscriber: log lines as configured, and trace
/// export when `TOOLSERVER_OTLP_ENDPOINT` is set.
pub fn init(config: &LogConfig) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_new(&config.log_filter)
        .map_err(|err| anyhow::anyhow!("RUST_LOG is not a valid filter: {err}"))?;
    let lines = match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer().boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    };
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let (export, traces) = match &config.otlp_endpoint {
        Some(endpoint) => {
            let spans = EnvFilter::try_new(&config.otlp_filter).map_err(|err| {
                anyhow::anyhow!("TOOLSERVER_OTLP_FILTER is not a valid filter: {err}")
            })?;
            let traces = trace_provider(endpoint, &config.otlp_service_name)?;
            let tracer = traces.tracer("toolserver");
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(spans);
            (Some(layer), Some(traces))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(export)
        .try_init()
        .map_err(|err| anyhow::anyhow!("logging already initialised: {err}"))?;
    if let Some(endpoint) = &config.otlp_endpoint {
        tracing::info!(%endpoint, "exporting traces over OTLP");
    }
    Ok(Telemetry { traces })
}

/// A batching tracer provider exporting to `<endpoint>/v1/traces`.
fn trace_provider(endpoint: &Url, service: &str) -> anyhow::Result<SdkTracerProvider> {
    let traces_url = format!("{}/v1/traces", endpoint.as_str().trim_end_matches('/'));
    // The exporter's blocking HTTP client must be made outside the async
    // runtime.
    let exporter = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                SpanExporter::builder()
                    .with_http()
                    .with_endpoint(traces_url)
                    .build()
            })
            .join()
    })
    .map_err(|_| anyhow::anyhow!("building the OTLP exporter panicked"))?
    .context("TOOLSERVER_OTLP_ENDPOINT: building the OTLP exporter")?;
    let resource = Resource::builder()
        .with_service_name(service.to_owned())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
