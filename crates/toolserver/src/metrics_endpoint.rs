//! `GET /metrics` in the Prometheus text format, on its own listener: the
//! process's counters and histograms (requests, turns, tool calls, runners,
//! detached runs, the reaper), plus gauges read at each scrape (database
//! pool, detached calls by status, the continuation backlog, the standard
//! `process_*` series), and `toolserver_build_info`. Every series is
//! described, so each has its `# HELP` line beside its `# TYPE`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolserver_domain::CallStatus;
use toolserver_store::stats;

/// Connections of the database pool in use.
pub const POOL_IN_USE: &str = "toolserver_db_pool_connections_in_use";
/// Idle connections of the database pool.
pub const POOL_IDLE: &str = "toolserver_db_pool_connections_idle";
/// The database pool's connection limit.
pub const POOL_MAX: &str = "toolserver_db_pool_connections_max";
/// Detached calls by `status`, across the deployment.
pub const ASYNC_CALLS: &str = "toolserver_async_calls";
/// Continuations waiting or running, across the deployment.
pub const CONTINUATION_BACKLOG: &str = "toolserver_continuation_backlog";
/// Seconds the oldest waiting continuation has waited.
pub const CONTINUATION_AGE: &str = "toolserver_continuation_backlog_oldest_seconds";
/// Always 1, labelled with the build: `version`, `profile`, `os`, `arch`.
pub const BUILD_INFO: &str = "toolserver_build_info";

/// Bucket bounds, in seconds, of every `_seconds` histogram.
const SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Bucket bounds of the model passes of a turn.
const STEP_BUCKETS: [f64; 8] = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 20.0];

/// Where metrics are served, or that they are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// No metrics listener (nothing is recorded either).
    Off,
    /// Serve on this address.
    At(SocketAddr),
}

/// Parses `off` or an address (`127.0.0.1:9464`).
pub fn parse_listen(value: &str) -> Result<MetricsListen, String> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(MetricsListen::Off);
    }
    value
        .parse()
        .map(MetricsListen::At)
        .map_err(|err| format!("expected `off` or an address like 127.0.0.1:9464: {err}"))
}

/// A running metrics listener; stops when dropped.
pub struct MetricsServer {
    /// The address it listens on.
    pub address: SocketAddr,
    _stop: tokio_util::sync::DropGuard,
}

/// The process's metrics recorder, installed, and the listener it will be
/// served on: made before anything records (the runner backend's warm
/// pool fills while the server starts), so nothing recorded is lost.
pub struct Recorder {
    handle: PrometheusHandle,
    process: metrics_process::Collector,
    listener: TcpListener,
}

/// Installs the process's metrics recorder and binds `address` for it.
pub async fn install(address: SocketAddr) -> anyhow::Result<Recorder> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .and_then(|builder| {
            builder.set_buckets_for_metric(
                Matcher::Full(toolserver_harness::metrics::TURN_STEPS.into()),
                &STEP_BUCKETS,
            )
        })
        .context("metrics histogram buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    let process = describe();
    let listener = TcpListener::bind(address).await.with_context(|| {
        format!(
            "binding the metrics listener {address} (TOOLSERVER_METRICS_BIND; `off` turns it off)"
        )
    })?;
    Ok(Recorder {
        handle,
        process,
        listener,
    })
}

/// Serves `recorder` on its listener, sampling `pool` and the lifecycle
/// tables at each scrape.
pub fn serve(recorder: Recorder, pool: PgPool) -> anyhow::Result<MetricsServer> {
    let Recorder {
        handle,
        process,
        listener,
    } = recorder;
    let address = listener.local_addr()?;
    let scraped = Arc::new(Scraped {
        handle,
        pool,
        process,
    });
    spawn_upkeep(scraped.handle.clone());
    let app = Router::new()
        .route("/metrics", get(render))
        .with_state(scraped);
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let serving = axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned());
        if let Err(err) = serving.await {
            tracing::error!(error = %err, "the metrics listener failed");
        }
    });
    tracing::info!(addr = %address, "serving metrics");
    Ok(MetricsServer {
        address,
        _stop: stop.drop_guard(),
    })
}

/// What a scrape reads.
struct Scraped {
    handle: PrometheusHandle,
    pool: PgPool,
    process: metrics_process::Collector,
}

/// Describes every series of the process to the installed recorder, sets
/// the build's gauge, and returns the collector of the `process_*` series.
fn describe() -> metrics_process::Collector {
    toolserver_api::metrics::describe();
    toolserver_harness::metrics::describe();
    toolserver_sandbox::metrics::describe();
    metrics::describe_gauge!(POOL_IN_USE, "Connections of the database pool in use.");
    metrics::describe_gauge!(POOL_IDLE, "Idle connections of the database pool.");
    metrics::describe_gauge!(POOL_MAX, "The database pool's connection limit.");
    metrics::describe_gauge!(
        ASYNC_CALLS,
        "Detached calls in the database by status, across the deployment."
    );
    metrics::describe_gauge!(
        CONTINUATION_BACKLOG,
        "Continuations waiting or running, across the deployment."
    );
    metrics::describe_gauge!(
        CONTINUATION_AGE,
        metrics::Unit::Seconds,
        "Seconds the oldest waiting continuation has waited."
    );
    metrics::describe_gauge!(BUILD_INFO, "The running build; always 1.");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "profile" => profile,
        "os" => std::env::consts::OS,
        "arch" => std::env::consts::ARCH,
    )
    .set(1.0);
    let process = metrics_process::Collector::default();
    process.describe();
    process
}

/// Keeps histograms from growing without bound between scrapes.
fn spawn_upkeep(handle: PrometheusHandle) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            ticks.tick().await;
            handle.run_upkeep();
        }
    });
}

async fn render(State(scraped): State<Arc<Scraped>>) -> Response {
    sample(&scraped.pool).await;
    scraped.process.collect();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        scraped.handle.render(),
    )
        .into_response()
}

/// Sets the gauges read at scrape time; a failing query leaves its gauges
/// as they were and is logged.
async fn sample(pool: &PgPool) {
    let size = f64::from(pool.size());
    let idle = pool.num_idle() as f64;
    metrics::gauge!(POOL_IN_USE).set(size - idle);
    metrics::gauge!(POOL_IDLE).set(idle);
    metrics::gauge!(POOL_MAX).set(f64::from(pool.options().get_max_connections()));
    match stats::async_results_by_status(pool).await {
        Ok(counts) => {
            for status in CallStatus::ALL.map(CallStatus::as_str) {
                let count = counts
                    .iter()
                    .find(|(name, _)| name == status)
                    .map_or(0, |(_, count)| *count);
                metrics::gauge!(ASYNC_CALLS, "status" => status).set(count as f64);
            }
        }
        Err(err) => tracing::warn!(error = %err, "could not count detached calls for metrics"),
    }
    match stats::continuation_backlog(pool).await {
        Ok(backlog) => {
            metrics::gauge!(CONTINUATION_BACKLOG).set(backlog.pending as f64);
            metrics::gauge!(CONTINUATION_AGE).set(backlog.oldest_age_secs);
        }
        Err(err) => {
            tracing::warn!(error = %err, "could not read the continuation backlog for metrics")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_or_an_address() {
        assert_eq!(parse_listen("off"), Ok(MetricsListen::Off));
        assert_eq!(
            parse_listen("0.0.0.0:9464"),
            Ok(MetricsListen::At(SocketAddr::from(([0, 0, 0, 0], 9464))))
        );
        assert!(parse_listen("9464").is_err());
    }
}
