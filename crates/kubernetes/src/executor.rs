//! [`KubernetesExecutor`]: the [`Executor`] over runner pods. Sequence of a
//! call on a direct channel (the default): open a TCP connection to the
//! pod's worker with the runner's secret, learned once from the pod and
//! kept, and `POST /invoke` on it; no API request, no exec, no health check.
//! When that connection cannot be opened or the worker refuses the secret
//! (the pod was replaced), the slow path runs once under the runner's start
//! lock: make sure the pod is up (`pods.rs`), learn its channel, health-check
//! the worker there, and if nothing healthy answers, exec the launcher
//! (which starts the worker detached) and check again. A pod whose network
//! this server cannot reach is used by exec for a while (the bridge: the
//! worker's socket through `kubectl exec`'s protocol), as it always is with
//! the exec channel. Then the shared relay (one-shot fallback by exec, kill
//! on a missed deadline). The idle clock lives on the pod (an annotation), so
//! every server sees it; a touch is written at most every quarter of the
//! idle timeout, at a call's start and end and every quarter idle timeout
//! while it runs. The reaper asks an idle pod's worker before deleting it: a
//! worker still running calls (detached ones outlive their request) keeps
//! its pod, marked used. A runner's pod is named by its key, unless it
//! started from a warm pod of the pool (`warm.rs`): then each runner
//! remembers its pod's name, learned on the slow path.

mod backend;
mod pod_runner;
mod pool;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::{Api, Client};
use toolserver_domain::AccountId;
use toolserver_sandbox::metrics;
use toolserver_sandbox::{
    EgressGrant, InvokeRequest, ReservationKey, SandboxError, StopListener, WorkerConnection,
};

use crate::channel::PodChannel;
use crate::exec::ExecStream;
use crate::manifests;
use crate::names::BACKEND;
use crate::pods::{EnsuredPod, RunnerPods};
use crate::scripts;
use crate::settings::{KubernetesSettings, RunnerChannel};
use crate::warm::{WarmPods, WarmPool};

/// How long an egress grant outlives its call's deadline.
const EGRESS_GRANT_SLACK: Duration = Duration::from_secs(60);

/// Runs tool calls in runner pods.
#[derive(Clone)]
pub struct KubernetesExecutor {
    inner: Arc<Inner>,
}

struct Inner {
    pods: RunnerPods,
    settings: KubernetesSettings,
    /// Pods started ahead of demand (none until started).
    pool: WarmPool,
    /// By runner name (the key's hash).
    runners: Mutex<HashMap<String, Arc<Runner>>>,
    /// Told of every pod the reaper deletes.
    stops: Mutex<Vec<StopListener>>,
}

/// What this server knows of one runner.
struct Runner {
    /// The runner's name (the key's hash).
    name: String,
    key: ReservationKey,
    /// Its pod's name as last found: its own, or a claimed warm pod's.
    pod: Mutex<Option<String>>,
    /// Serializes pod creation and worker start for this key in this server.
    starting: tokio::sync::Mutex<()>,
    inflight: AtomicUsize,
    touched: Mutex<Option<Instant>>,
    route: Mutex<Route>,
}

/// How this server reaches one runner's worker now.
#[derive(Debug, Clone)]
enum Route {
    /// Not known: the next call takes the slow path, which learns it.
    Unknown,
    /// The pod's direct channel.
    Direct(PodChannel),
    /// By exec until then (the pod network was out of reach, or the pod has
    /// no channel); afterwards the direct channel is tried again.
    Exec(Instant),
}

impl Runner {
    fn route(&self) -> Route {
        self.route
            .lock()
            .map(|route| route.clone())
            .unwrap_or(Route::Unknown)
    }

    fn set_route(&self, route: Route) {
        if let Ok(mut current) = self.route.lock() {
            *current = route;
        }
    }

    /// Whether this server started the runner's pod and has not deleted it
    /// since (its use is then recorded).
    fn has_pod(&self) -> bool {
        self.touched.lock().is_ok_and(|touched| touched.is_some())
    }

    /// The name of the runner's pod as last found (its own name until
    /// then).
    fn pod(&self) -> String {
        self.known_pod().unwrap_or_else(|| self.name.clone())
    }

    /// The name of the runner's pod, when found.
    fn known_pod(&self) -> Option<String> {
        self.pod
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the name of the runner's pod (`None`: not known).
    fn set_pod(&self, pod: Option<&str>) {
        *self.pod.lock().unwrap_or_else(PoisonError::into_inner) = pod.map(str::to_owned);
    }

    /// Records that the runner's pod is gone: the next call starts one and
    /// learns its route again.
    fn forget_pod(&self) {
        if let Ok(mut touched) = self.touched.lock() {
            *touched = None;
        }
        self.set_pod(None);
        self.set_route(Route::Unknown);
    }

    /// Uses exec for [`EXEC_FALLBACK_PERIOD`], then tries the direct channel again.
    fn use_exec_for_a_while(&self) {
        self.set_route(Route::Exec(Instant::now() + EXEC_FALLBACK_PERIOD));
    }
}

/// How long a runner whose pod network could not be reached is used by exec
/// before the direct channel is tried again.
const EXEC_FALLBACK_PERIOD: Duration = Duration::from_secs(60);

impl KubernetesExecutor {
    /// The backend over `client`. Refuses to start when the configured
    /// NetworkPolicy is missing from the runner namespace, since runners
    /// would then reach the cluster.
    pub async fn new(client: Client, settings: KubernetesSettings) -> Result<Self, SandboxError> {
        if let Some(policy) = &settings.network_policy {
            let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &settings.namespace);
            let found = policies
                .get_opt(policy)
                .await
                .map_err(|e| SandboxError::Start(format!("reading NetworkPolicy {policy}: {e}")))?;
            if found.is_none() {
                return Err(SandboxError::Start(format!(
                    "NetworkPolicy {policy} is missing from namespace {}; install deploy/kubernetes first",
                    settings.namespace
                )));
            }
        }
        tracing::info!(namespace = %settings.namespace, image = %settings.image, "kubernetes runner backend ready");
        Ok(Self {
            inner: Arc::new(Inner {
                pool: WarmPool::new(WarmPods::new(
                    Api::namespaced(client.clone(), &settings.namespace),
                    settings.clone(),
                )),
                pods: RunnerPods::new(client, settings.clone()),
                settings,
                runners: Mutex::new(HashMap::new()),
                stops: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The pod lifecycle this executor uses.
    pub fn pods(&self) -> &RunnerPods {
        &self.inner.pods
    }

    fn runner(&self, key: &ReservationKey) -> Arc<Runner> {
        let name = manifests::pod_name(key);
        let mut runners = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        runners
            .entry(name.clone())
            .or_insert_with(|| {
                Arc::new(Runner {
                    name,
                    key: key.clone(),
                    pod: Mutex::new(None),
                    starting: tokio::sync::Mutex::new(()),
                    inflight: AtomicUsize::new(0),
                    touched: Mutex::new(None),
                    route: Mutex::new(Route::Unknown),
                })
            })
            .clone()
    }

    /// The runner already known by pod `pod`, if any.
    fn runner_in(&self, pod: &str) -> Option<Arc<Runner>> {
        let runners = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        runners.values().find(|runner| runner.pod() == pod).cloned()
    }

    /// The name of `runner`'s pod: as last found, else as it is now.
    async fn pod_of(&self, runner: &Runner) -> Result<String, SandboxError> {
        if let Some(pod) = runner.known_pod() {
            return Ok(pod);
        }
        let pod = self
            .inner
            .pods
            .locate(&runner.key, &self.inner.pool)
            .await?;
        runner.set_pod(Some(&pod));
        Ok(pod)
    }

    async fn exec(
        &self,
        pod: &str,
        script: &str,
        args: &[&str],
    ) -> Result<ExecStream, SandboxError> {
        let (api, settings) = (self.inner.pods.api(), &self.inner.settings);
        scripts::run(api, settings, pod, script, args).await
    }

    /// A connection to the worker of pod `pod`, through the bridge.
    async fn bridge(&self, pod: &str) -> Result<WorkerConnection, SandboxError> {
        let socket = self.inner.settings.socket_path.clone();
        let stream = self.exec(pod, "bridge.mjs", &["--socket", &socket]).await?;
        WorkerConnection::handshake(stream).await
    }

    /// Starts the worker in pod `pod` unless a healthy one runs; true if started.
    async fn launch(&self, pod: &str) -> Result<bool, SandboxError> {
        scripts::launch(self.inner.pods.api(), &self.inner.settings, pod).await
    }

    /// A bridge to pod `pod`'s worker whose health check passed, if any.
    async fn healthy_bridge(&self, pod: &str) -> Option<WorkerConnection> {
        let mut connection = self.bridge(pod).await.ok()?;
        connection.health().await.ok()?;
        Some(connection)
    }

    /// A connection to `runner`'s worker without asking the API server:
    /// its direct channel when known (no health check: a worker that
    /// accepts the connection answers), else, when the route is exec, a
    /// bridge whose health check passed.
    async fn warm_connection(&self, runner: &Runner) -> Option<WorkerConnection> {
        match (self.inner.settings.channel, runner.route()) {
            (RunnerChannel::Exec, _) => self.healthy_bridge(&runner.pod()).await,
            (
                RunnerChannel::Direct {
                    connect_timeout, ..
                },
                Route::Direct(channel),
            ) => match channel.connect(connect_timeout).await {
                Ok(connection) => Some(connection),
                Err(err) => {
                    tracing::debug!(runner = %runner.name, error = %err, "direct channel failed; looking the pod up");
                    runner.set_route(Route::Unknown);
                    None
                }
            },
            (RunnerChannel::Direct { .. }, Route::Exec(until)) if Instant::now() < until => {
                self.healthy_bridge(&runner.pod()).await
            }
            (RunnerChannel::Direct { .. }, _) => None,
        }
    }

    /// A connection to the worker of the ready `pod` whose health check
    /// passed, on its direct channel when the settings and the pod have one
    /// (recorded as the runner's route), else by exec.
    async fn checked_connection(
        &self,
        runner: &Runner,
        pod: &EnsuredPod,
    ) -> Result<WorkerConnection, SandboxError> {
        let direct = match (self.inner.settings.channel, &pod.channel) {
            (
                RunnerChannel::Direct {
                    connect_timeout, ..
                },
                Some(channel),
            ) => Some((connect_timeout, channel)),
            _ => None,
        };
        let Some((connect_timeout, channel)) = direct else {
            let mut connection = self.bridge(&pod.name).await?;
            connection.health().await?;
            if matches!(self.inner.settings.channel, RunnerChannel::Direct { .. }) {
                // A pod made without a channel (by a server using exec).
                runner.use_exec_for_a_while();
            }
            return Ok(connection);
        };
        let mut connection = channel.connect(connect_timeout).await?;
        connection.health().await?;
        runner.set_route(Route::Direct(channel.clone()));
        Ok(connection)
    }

    /// A connection whose health check passed, and whether anything had to
    /// start. A warm runner costs one connection and no API read (see
    /// [`Self::warm_connection`]). Otherwise, one caller per runner at a
    /// time makes sure of the pod, learns its channel and starts the worker.
    async fn connect(&self, runner: &Runner) -> Result<(WorkerConnection, bool), SandboxError> {
        if let Some(connection) = self.warm_connection(runner).await {
            return Ok((connection, false));
        }
        let _starting = runner.starting.lock().await;
        let starting = Instant::now();
        // Another caller may have learned the channel while this one waited;
        // any other route was tried just now.
        if matches!(runner.route(), Route::Direct(_)) {
            if let Some(connection) = self.warm_connection(runner).await {
                return Ok((connection, false));
            }
        }
        let known = runner.known_pod();
        let pod = self
            .inner
            .pods
            .ensure_with(&runner.key, known.as_deref(), &self.inner.pool)
            .await?;
        runner.set_pod(Some(&pod.name));
        if let Ok(connection) = self.checked_connection(runner, &pod).await {
            if pod.created {
                metrics::runner_started(BACKEND, starting.elapsed());
            }
            return Ok((connection, pod.created));
        }
        let launched = self.launch(&pod.name).await?;
        if launched {
            tracing::info!(runner = %runner.name, pod = %pod.name, pod.uid = %pod.uid, "worker started");
        }
        if pod.created || launched {
            metrics::runner_started(BACKEND, starting.elapsed());
        }
        match self.checked_connection(runner, &pod).await {
            Ok(connection) => Ok((connection, pod.created || launched)),
            Err(err) if matches!(self.inner.settings.channel, RunnerChannel::Direct { .. }) => {
                tracing::warn!(
                    runner = %runner.name,
                    error = %err,
                    "the runner pod's network is out of reach (or the pod has no channel); using exec for {} s",
                    EXEC_FALLBACK_PERIOD.as_secs()
                );
                runner.use_exec_for_a_while();
                let mut connection = self.bridge(&pod.name).await?;
                connection.health().await?;
                Ok((connection, pod.created || launched))
            }
            Err(err) => Err(err),
        }
    }

    /// A connection for one request (cancel, logs, health) to pod `name`'s
    /// worker: its direct channel when this server has one and the worker
    /// there answers a health check with it, else the bridge.
    async fn query_connection(&self, name: &str) -> Result<WorkerConnection, SandboxError> {
        let known = self.runner_in(name);
        if let (
            Some(runner),
            RunnerChannel::Direct {
                connect_timeout, ..
            },
        ) = (known, self.inner.settings.channel)
        {
            if let Route::Direct(channel) = runner.route() {
                if let Ok(mut connection) = channel.connect(connect_timeout).await {
                    if connection.health().await.is_ok() {
                        return Ok(connection);
                    }
                }
                runner.set_route(Route::Unknown);
            }
        }
        self.bridge(name).await
    }

    /// [`Self::connect`], looking the pod up again once if it went away.
    async fn connect_retrying(
        &self,
        runner: &Runner,
    ) -> Result<(WorkerConnection, bool), SandboxError> {
        match self.connect(runner).await {
            Ok(connected) => Ok(connected),
            Err(err) => {
                tracing::warn!(runner = %runner.name, error = %err, "runner unreachable; trying once more");
                self.connect(runner).await
            }
        }
    }

    /// The egress token of one call when runners share an egress proxy: the
    /// tool's allow list and the call's bundle URL, valid until the call's
    /// deadline (and a minute more, for the bundle download and callbacks).
    fn egress_grant(
        &self,
        key: &ReservationKey,
        runner: &str,
        request: &InvokeRequest,
    ) -> Result<Option<String>, SandboxError> {
        let Some(egress) = &self.inner.settings.egress else {
            return Ok(None);
        };
        let grant = EgressGrant {
            runner: runner.to_owned(),
            account: key.account().to_string(),
            tool: key.tool().to_string(),
            allow: request.egress_allow.clone(),
            admit: request.bundle.url.iter().cloned().collect(),
        };
        let ttl = Duration::from_millis(request.deadline_ms) + EGRESS_GRANT_SLACK;
        egress
            .key
            .mint(&grant, ttl)
            .map(Some)
            .map_err(SandboxError::Protocol)
    }

    /// Restarts the runner's idle clock, at most every quarter idle timeout.
    async fn touch(&self, runner: &Runner) {
        let every = self.inner.settings.idle_timeout / 4;
        let due = match runner.touched.lock() {
            Ok(mut touched) => {
                let due = touched.is_none_or(|at| at.elapsed() >= every);
                if due {
                    *touched = Some(Instant::now());
                }
                due
            }
            Err(_) => true,
        };
        if due {
            if let Err(err) = self.inner.pods.touch(&runner.pod()).await {
                tracing::warn!(runner = %runner.name, error = %err, "could not record runner use");
            }
        }
    }

    /// Whether the worker in pod `pod` reports calls in flight. A worker
    /// that cannot be reached or does not answer in time is not busy.
    async fn worker_busy(&self, pod: &str) -> bool {
        let asked = tokio::time::timeout(HEALTH_TIMEOUT, async {
            self.query_connection(pod).await?.inflight().await
        })
        .await;
        matches!(asked, Ok(Ok(count)) if count > 0)
    }

    /// Keeps marking `runner`'s pod used, every quarter idle timeout, until
    /// the returned guard is dropped.
    fn keep_touched(&self, runner: &Arc<Runner>) -> KeepTouched {
        let every = (self.inner.settings.idle_timeout / 4).max(Duration::from_millis(10));
        let (executor, runner) = (self.clone(), runner.clone());
        KeepTouched(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                executor.touch(&runner).await;
            }
        }))
    }

    /// Deletes runner pods idle past the idle timeout (none with calls in
    /// flight here, none whose worker still runs calls); their cache claims
    /// stay for the next start.
    pub async fn reap_idle(&self) -> Result<Vec<String>, SandboxError> {
        let busy: Vec<String> = match self.inner.runners.lock() {
            Ok(map) => map
                .values()
                .filter(|runner| runner.inflight.load(Ordering::SeqCst) > 0)
                .map(|runner| runner.pod())
                .collect(),
            Err(_) => return Ok(Vec::new()),
        };
        let reaped = self
            .inner
            .pods
            .reap_idle(&busy, |pod| async move { self.worker_busy(&pod).await })
            .await?;
        metrics::runners_evicted(BACKEND, reaped.len() as u64);
        let stopped: Vec<ReservationKey> = reaped
            .iter()
            .filter_map(|pod| self.runner_in(pod))
            .map(|runner| {
                runner.forget_pod();
                runner.key.clone()
            })
            .collect();
        let listeners = self
            .inner
            .stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for key in &stopped {
            for listener in &listeners {
                listener(key);
            }
        }
        Ok(reaped)
    }

    /// How many runners this server started whose pods it has not deleted,
    /// per account.
    fn live_runners(&self) -> HashMap<AccountId, usize> {
        let mut live = HashMap::new();
        let map = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for runner in map.values().filter(|runner| runner.has_pod()) {
            *live.entry(runner.key.account().clone()).or_insert(0) += 1;
        }
        live
    }

    /// Runs [`Self::reap_idle`] periodically until the executor is dropped.
    pub fn spawn_reaper(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.inner);
        let every = (self.inner.settings.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(30));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(inner) = weak.upgrade() else { return };
                if let Err(err) = (KubernetesExecutor { inner }).reap_idle().await {
                    tracing::warn!(error = %err, "reaping idle runner pods failed");
                }
            }
        })
    }
}

/// How long the reaper waits for a worker's `/health`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Marks a runner's pod used periodically while alive; see
/// [`KubernetesExecutor::keep_touched`].
struct KeepTouched(tokio::task::JoinHandle<()>);

impl Drop for KeepTouched {
    fn drop(&mut self) {
        self.0.abort();
    }
}
