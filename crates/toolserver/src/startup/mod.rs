//! Building the running server from its configuration: token verification,
//! the runner backend (refusing to start where runners cannot be isolated,
//! see [`crate::runner_isolation`]), database (external or embedded),
//! migrations, bundle store, then the listener. Each module builds one
//! part; the settings were checked when they were parsed
//! ([`crate::config`]), so nothing here narrows a configured value.

mod api;
mod auth;
mod bundles;
mod database;
mod harness;
mod kubernetes;
mod runners;
mod streams;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use toolserver_api::admission::AdmittedRunnerCaps;
use toolserver_api::AppState;
use toolserver_harness::ledger::LedgerSettings;
use toolserver_sandbox::{EgressKey, EgressProxy};
use url::Url;

pub use auth::dev_secret_path;

use crate::config::{DatabaseConfig, EgressProxyConfig, ServeConfig};
use crate::metrics_endpoint::{self, MetricsListen, MetricsServer, Recorder};
use crate::runner_isolation;
use crate::telemetry::{self, Telemetry};
use database::Database;

/// `toolserver migrate`.
pub async fn migrate_only(config: &DatabaseConfig) -> anyhow::Result<()> {
    let db = database::open(config, LedgerSettings::DEFAULT.payload_bytes).await?;
    println!("migrations applied");
    db.close().await;
    Ok(())
}

/// Everything a server process runs with, and its background loops.
struct Assembled {
    state: AppState,
    warm_pool: runners::WarmPool,
    db: Database,
    public_url: Url,
    telemetry: Telemetry,
    _loops: Vec<tokio::task::JoinHandle<()>>,
}

/// Builds the shared state and starts the background loops: idle runner
/// reaping, expiry of detached calls, and continuations.
async fn assemble(config: &ServeConfig) -> anyhow::Result<Assembled> {
    let telemetry = telemetry::init(&config.log)?;
    let public_url = match &config.public_url {
        Some(url) => url.clone(),
        None => Url::parse(&format!("http://{}", config.bind))?,
    };
    let cors = api::cors_settings(&config.cors)?;
    let on_dev_secret = auth::uses_development_secret(&config.auth, &config.database);
    let auth = auth::authenticator(&config.auth, &config.database, on_dev_secret)?;
    // Before the database: a server that may not run tools refuses at once.
    let development = runner_isolation::development_server(&config.auth, on_dev_secret);
    let caps = Arc::new(AdmittedRunnerCaps::new(
        usize::try_from(config.accounts.account_live_runners).unwrap_or(usize::MAX),
    ));
    let (executor, warm_pool, runner_reaper) = runners::executor(
        &config.runners,
        &config.database,
        &public_url,
        development,
        caps.clone(),
    )
    .await?;
    let db = database::open(&config.database, config.ledger.ledger_payload_bytes).await?;
    let bundles = bundles::cached(
        bundles::store(&config.bundles, &config.database, &public_url).await?,
        config,
    );
    let api = api::settings(config, cors)?;
    toolserver_api::metrics::label_accounts(config.accounts.metrics_account_label);
    let nats = streams::connect_nats(&config.streams).await?;
    let chunks = streams::chunk_store(&config.streams, nats.as_ref()).await?;
    let harness = harness::build(
        config,
        &public_url,
        &api,
        (db.pool.clone(), bundles.clone(), executor.clone()),
        chunks,
    )?;
    let state = AppState::new(
        db.pool.clone(),
        bundles,
        executor,
        auth,
        api,
        harness,
        nats.clone(),
    );
    caps.follow(state.admission());
    let mut loops = Vec::new();
    if let Some(client) = nats {
        let subject = config.streams.nats_subject.clone();
        tracing::info!(%subject, "taking turn requests over NATS");
        loops.push(
            toolserver_api::nats::spawn_turns(state.clone(), client, subject)
                .await
                .context("subscribing to the NATS turn subject")?,
        );
    }
    state.lifecycle().start_background();
    loops.push(toolserver_api::channels::spawn_inbox(state.clone()));
    Ok(Assembled {
        state,
        warm_pool,
        db,
        public_url,
        telemetry,
        _loops: loops.into_iter().chain([runner_reaper]).collect(),
    })
}

impl Assembled {
    async fn close(self, grace: Duration) {
        self.state.lifecycle().shutdown(grace).await;
        // An unreachable cluster API must not hold the exit: warm pods left
        // behind are swept by the next server.
        if tokio::time::timeout(grace, self.warm_pool.stop())
            .await
            .is_err()
        {
            tracing::warn!("the warm runners were not all given back within the grace period");
        }
        self.db.close().await;
        self.telemetry.shutdown().await;
    }
}

/// `toolserver serve`.
pub async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let recorder = install_metrics(&config).await?;
    let assembled = assemble(&config).await?;
    let _metrics = serve_metrics(recorder, &assembled)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("binding {}", config.bind))?;
    tracing::info!(addr = %listener.local_addr()?, public_url = %assembled.public_url, "listening");
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    let result = toolserver_api::server::serve(
        listener,
        toolserver_api::app(assembled.state.clone()),
        toolserver_api::server::termination_signal(),
        grace,
    )
    .await;
    assembled.close(grace).await;
    result.context("serving")
}

/// `toolserver worker`: runs continuations and expiry sweeps without
/// serving HTTP, until SIGTERM or Ctrl-C. Any number may run beside the
/// servers against one database.
pub async fn worker(config: ServeConfig) -> anyhow::Result<()> {
    let recorder = install_metrics(&config).await?;
    let assembled = assemble(&config).await?;
    let _metrics = serve_metrics(recorder, &assembled)?;
    tracing::info!("worker running continuations");
    toolserver_api::server::termination_signal().await;
    assembled
        .close(Duration::from_secs(config.shutdown_grace_secs))
        .await;
    Ok(())
}

/// Installs the metrics recorder, before anything records, unless
/// `TOOLSERVER_METRICS_BIND` is `off`.
async fn install_metrics(config: &ServeConfig) -> anyhow::Result<Option<Recorder>> {
    match config.metrics_bind {
        MetricsListen::Off => Ok(None),
        MetricsListen::At(address) => metrics_endpoint::install(address).await.map(Some),
    }
}

/// Serves the installed recorder, if there is one.
fn serve_metrics(
    recorder: Option<Recorder>,
    assembled: &Assembled,
) -> anyhow::Result<Option<MetricsServer>> {
    recorder
        .map(|recorder| metrics_endpoint::serve(recorder, assembled.db.pool.clone()))
        .transpose()
}

/// `toolserver egress-proxy`: the egress proxy Kubernetes runner pods share,
/// until SIGTERM or Ctrl-C.
pub async fn egress_proxy(config: EgressProxyConfig) -> anyhow::Result<()> {
    let telemetry = telemetry::init(&config.log)?;
    let key = EgressKey::new(config.egress_token_key.expose())
        .map_err(|reason| anyhow::anyhow!("TOOLSERVER_EGRESS_TOKEN_KEY: {reason}"))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let settings = runners::egress_settings(&config.egress, config.public_url.clone());
    let proxy = EgressProxy::new(settings);
    let serving = proxy.serve_shared(listener, key);
    tracing::info!(addr = %config.listen, "egress proxy listening");
    toolserver_api::server::termination_signal().await;
    serving.abort();
    telemetry.shutdown().await;
    Ok(())
}
