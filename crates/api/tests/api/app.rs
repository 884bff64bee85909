//! The test app: the real router over the test's database with real Node
//! runners behind it, driven in-process or served on a loopback port.
//! [`spawn_app`] gives the in-process app, [`spawn_live_app`] the server as
//! deployed; [`TestApp::builder`] and [`TestApp::live`] choose anything else.
//! Its requests are in [`requests`].

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use sqlx::PgPool;
use toolserver_api::admission::AdmittedRunnerCaps;
use toolserver_api::auth::Authenticator;
use toolserver_api::{ApiSettings, AppState};
use toolserver_bundles::{BundleStore, FsBundleStore, UrlSigner};
use toolserver_harness::lifecycle::LifecycleSettings;
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::tools::{
    BreakerSettings, Breakers, McpClients, TavilySettings, ToolSources,
};
use toolserver_harness::{Harness, HarnessSettings};
use toolserver_sandbox::{
    BudgetSettings, EgressSettings, Executor, IsolationMode, LocalExecutor, LocalSettings,
    ReservationKey, RunnerBudget, WorkerClient,
};
use toolserver_testsupport::ScriptedModel;

mod requests;

use crate::chunk_stores::{Chunks, TestStore};
use crate::support::hs256_auth;

/// Live runners of one account when admission does not say otherwise.
const TEST_ACCOUNT_RUNNERS: usize = 16;

/// Live runners of the app at most.
const TEST_MAX_RUNNERS: usize = 32;

/// Where an unserved app's signed bundle links point.
const UNSERVED_BASE: &str = "http://toolserver.test/";

/// The in-process app: HS256 tokens, a filesystem bundle store, runners
/// without a budget and no background lifecycle.
pub async fn spawn_app(pool: PgPool) -> TestApp {
    TestApp::builder(pool).spawn().await
}

/// The server as deployed, on a loopback port: see [`TestApp::live`].
pub async fn spawn_live_app(pool: PgPool) -> TestApp {
    TestApp::live(pool).spawn().await
}

/// Default settings with a job loop and reaper quick enough for tests.
pub fn fast_lifecycle() -> HarnessSettings {
    HarnessSettings {
        lifecycle: LifecycleSettings {
            poll: Duration::from_millis(20),
            reaper_interval: Duration::from_millis(50),
            ..LifecycleSettings::default()
        },
        ..HarnessSettings::default()
    }
}

/// The app under test, with a scripted model its agents can talk to.
pub struct TestApp {
    /// The test's database.
    pub pool: PgPool,
    /// The app's state, for reaching past the routes.
    pub state: AppState,
    /// The bundle store.
    pub bundles: Arc<dyn BundleStore>,
    /// A scripted model agents are pointed at by [`Self::agent_config`].
    pub model: ScriptedModel,
    /// A client for requests to the served app.
    pub client: reqwest::Client,
    router: Router,
    base: Option<String>,
    runners: Arc<LocalExecutor>,
    runners_dir: tempfile::TempDir,
    _held: Held,
}

/// What lives as long as the app: its bundle directory, a JetStream stream
/// of its own, the NATS turn listener.
struct Held {
    _bundles: Option<tempfile::TempDir>,
    _chunks: Option<TestStore>,
    _nats: Option<AbortOnDrop>,
    _inbox: Option<AbortOnDrop>,
}

/// Stops a background task when the app goes away.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The variations of [`TestApp`]; [`Self::spawn`] starts it.
#[must_use]
pub struct TestAppBuilder {
    pool: PgPool,
    served: bool,
    runner_budget: bool,
    background: bool,
    quiet: bool,
    harness: HarnessSettings,
    api: ApiSettings,
    auth: Option<Authenticator>,
    bundles: Option<Arc<dyn BundleStore>>,
    policy: OutboundPolicy,
    chunks: Option<Chunks>,
    nats: Option<(async_nats::Client, String)>,
    tavily: Option<url::Url>,
    breakers: BreakerSettings,
}

impl TestApp {
    /// The in-process app over `pool`, to vary before it is spawned.
    pub fn builder(pool: PgPool) -> TestAppBuilder {
        TestAppBuilder {
            pool,
            served: false,
            runner_budget: false,
            background: false,
            quiet: false,
            harness: HarnessSettings::default(),
            api: ApiSettings::default(),
            auth: None,
            bundles: None,
            // Scripted models and fake services listen on loopback.
            policy: OutboundPolicy {
                allow_private: true,
            },
            chunks: None,
            nats: None,
            tavily: None,
            breakers: BreakerSettings::DEFAULT,
        }
    }

    /// The server as deployed: served on loopback, its runners held to a
    /// runner budget, the lifecycle's job loop and reaper running with
    /// [`fast_lifecycle`].
    pub fn live(pool: PgPool) -> TestAppBuilder {
        Self::builder(pool)
            .serve()
            .runner_budget()
            .background()
            .harness(fast_lifecycle())
    }
}

impl TestAppBuilder {
    /// Serves the app on a loopback port: runners post back to it, signed
    /// bundle links and the harness's public URL point at it.
    pub fn serve(mut self) -> Self {
        self.served = true;
        self
    }

    /// Holds the runners to a runner budget as the server does, each
    /// account's cap read from admission.
    pub fn runner_budget(mut self) -> Self {
        self.runner_budget = true;
        self
    }

    /// Starts the lifecycle's background work: job loop, reaper, exits.
    pub fn background(mut self) -> Self {
        self.background = true;
        self
    }

    /// Leaves the job loop and reaper idle for an hour, for tests that
    /// drive the lifecycle's storage by hand.
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// The harness's settings.
    pub fn harness(mut self, settings: HarnessSettings) -> Self {
        self.harness = settings;
        self
    }

    /// The API's settings.
    pub fn api(mut self, settings: ApiSettings) -> Self {
        self.api = settings;
        self
    }

    /// Token verification other than HS256 with the test secret.
    pub fn auth(mut self, auth: Authenticator) -> Self {
        self.auth = Some(auth);
        self
    }

    /// A bundle store other than a filesystem one.
    pub fn bundles(mut self, bundles: Arc<dyn BundleStore>) -> Self {
        self.bundles = Some(bundles);
        self
    }

    /// Outbound requests reach public addresses only, as by default when
    /// deployed.
    pub fn public_outbound_only(mut self) -> Self {
        self.policy = OutboundPolicy::default();
        self
    }

    /// Keeps turn chunks in `chunks` (a JetStream stream of the test's own).
    pub fn chunks(mut self, chunks: Chunks) -> Self {
        self.chunks = Some(chunks);
        self
    }

    /// Takes turns over NATS too, on `subject`.
    pub fn nats(mut self, client: async_nats::Client, subject: &str) -> Self {
        self.nats = Some((client, subject.to_owned()));
        self
    }

    /// Circuit breakers on `settings`.
    pub fn breakers(mut self, settings: BreakerSettings) -> Self {
        self.breakers = settings;
        self
    }

    /// Sends Tavily searches to `url`.
    pub fn tavily(mut self, url: url::Url) -> Self {
        self.tavily = Some(url);
        self
    }

    /// Builds the app and, if asked, serves it and starts its background work.
    pub async fn spawn(self) -> TestApp {
        let listener = match self.served {
            true => Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()),
            false => None,
        };
        let base = listener
            .as_ref()
            .map(|l| format!("http://{}", l.local_addr().unwrap()));
        let base_url = base.as_deref().map(|b| url::Url::parse(b).unwrap());
        let mut settings = self.harness;
        if let Some(url) = &base_url {
            settings.public_url = url.clone();
        }
        if self.quiet {
            let idle = Duration::from_secs(3600);
            settings.lifecycle.poll = idle;
            settings.lifecycle.reaper_interval = idle;
        }
        let chunks = match self.chunks {
            Some(chunks) => {
                let store = chunks.store().await;
                settings.streams.chunks = store.0.clone();
                Some(store)
            }
            None => None,
        };
        let (bundles, bundles_dir) = match self.bundles {
            Some(bundles) => (bundles, None),
            None => {
                let dir = tempfile::tempdir().unwrap();
                let links = base.as_deref().unwrap_or(UNSERVED_BASE);
                (fs_store_linked(dir.path(), links).await, Some(dir))
            }
        };
        let runners_dir = tempfile::tempdir().unwrap();
        let runners = Arc::new(local_executor(runners_dir.path(), base_url));
        let caps = Arc::new(AdmittedRunnerCaps::new(TEST_ACCOUNT_RUNNERS));
        let executor: Arc<dyn Executor> = match self.runner_budget {
            true => Arc::new(RunnerBudget::new(
                runners.clone(),
                BudgetSettings {
                    max_live: TEST_MAX_RUNNERS,
                    queue_wait: Duration::from_millis(1000),
                    queue_depth: 16,
                },
                caps.clone(),
            )),
            false => runners.clone(),
        };
        let harness = harness(
            self.pool.clone(),
            bundles.clone(),
            executor.clone(),
            (self.tavily, self.breakers),
            settings,
            self.policy,
        );
        let state = AppState::new(
            self.pool.clone(),
            bundles.clone(),
            executor,
            self.auth.unwrap_or_else(hs256_auth),
            self.api,
            harness,
            self.nats.as_ref().map(|(client, _)| client.clone()),
        );
        if self.runner_budget {
            caps.follow(state.admission());
        }
        let inbox = self.background.then(|| {
            state.lifecycle().start_background();
            AbortOnDrop(toolserver_api::channels::spawn_inbox(state.clone()))
        });
        let router = toolserver_api::app(state.clone());
        if let Some(listener) = listener {
            let app = router.clone();
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        let nats = match self.nats {
            Some((client, subject)) => Some(AbortOnDrop(
                toolserver_api::nats::spawn_turns(state.clone(), client, subject)
                    .await
                    .unwrap(),
            )),
            None => None,
        };
        TestApp {
            pool: self.pool,
            state,
            bundles,
            model: ScriptedModel::start().await,
            client: reqwest::Client::new(),
            router,
            base,
            runners,
            runners_dir,
            _held: Held {
                _bundles: bundles_dir,
                _chunks: chunks,
                _nats: nats,
                _inbox: inbox,
            },
        }
    }
}

/// A filesystem bundle store under `dir` whose links point at the
/// unserved app's address.
pub async fn fs_store(dir: &std::path::Path) -> Arc<dyn BundleStore> {
    fs_store_linked(dir, UNSERVED_BASE).await
}

/// A filesystem bundle store under `dir` whose signed links point at `base`.
async fn fs_store_linked(dir: &std::path::Path, base: &str) -> Arc<dyn BundleStore> {
    let signer = UrlSigner::new(b"signing-key".to_vec(), url::Url::parse(base).unwrap()).unwrap();
    Arc::new(FsBundleStore::open(dir, signer).await.unwrap())
}

/// A local runner backend under `dir` (made reachable for a `nobody` worker)
/// whose runners post job callbacks to the server at `public_url`.
fn local_executor(dir: &std::path::Path, public_url: Option<url::Url>) -> LocalExecutor {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    LocalExecutor::new(LocalSettings {
        node_binary: "node".into(),
        root: dir.join("runners"),
        idle_timeout: Duration::from_secs(300),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_millis(500),
        isolation: IsolationMode::PreferBwrap,
        bwrap_binary: "bwrap".into(),
        egress: EgressSettings {
            callback_base: public_url,
            ..Default::default()
        },
        limits: Default::default(),
    })
    .unwrap()
}

/// The agent harness over the app's parts under `policy`, with Tavily at
/// `tavily` if given and breakers on `breakers`.
fn harness(
    pool: PgPool,
    bundles: Arc<dyn BundleStore>,
    executor: Arc<dyn Executor>,
    (tavily, breakers): (Option<url::Url>, BreakerSettings),
    settings: HarnessSettings,
    policy: OutboundPolicy,
) -> Harness {
    let sources = ToolSources {
        pool,
        executor,
        bundles,
        runner: RunnerCallSettings {
            inline_bundle_max_bytes: 64 * 1024,
            signed_url_ttl: Duration::from_secs(300),
            max_output_bytes: 4 * 1024 * 1024,
        },
        tavily: TavilySettings {
            base_url: tavily.unwrap_or_else(|| url::Url::parse("http://127.0.0.1:9/").unwrap()),
            fallback_api_key: None,
        },
        sealer: SecretBox::new(&[42; 32]),
        fetch_url: settings.public_url.join("runner/fetch").ok(),
        http: outbound::client(&policy, Duration::from_secs(5)).unwrap(),
        mcp: Arc::new(McpClients::with_defaults(policy.clone()).unwrap()),
        policy,
        default_tool_timeout: Duration::from_secs(25),
        breakers: Arc::new(Breakers::new(breakers)),
    };
    Harness::new(sources, settings)
}

/// The runners behind the app.
impl TestApp {
    /// The runner backend.
    pub fn executor(&self) -> Arc<LocalExecutor> {
        self.runners.clone()
    }

    /// The working directory of the runner for `account`'s `tool`.
    pub fn work_dir(&self, account: &str, tool: &str) -> std::path::PathBuf {
        self.runners_dir
            .path()
            .join("runners")
            .join(reservation_key(account, tool).runner_name())
            .join("work")
    }

    /// Whether `account`'s `tool` comes to have `count` calls in flight
    /// within 5 s.
    pub async fn comes_to_inflight(&self, account: &str, tool: &str, count: u64) -> bool {
        for _ in 0..100 {
            if self.inflight(account, tool).await == count {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The worker's count of calls in flight for `account`'s `tool`.
    pub async fn inflight(&self, account: &str, tool: &str) -> u64 {
        let key = reservation_key(account, tool);
        let client = WorkerClient::new(self.runners.socket_path(&key));
        // No socket yet means no worker, so nothing in flight.
        match client.health().await {
            Ok(health) => health["inflight"].as_u64().unwrap(),
            Err(_) => 0,
        }
    }
}

fn reservation_key(account: &str, tool: &str) -> ReservationKey {
    ReservationKey::new(
        toolserver_domain::AccountId::parse(account).unwrap(),
        toolserver_domain::ToolId::parse(tool).unwrap(),
    )
}
