//! A typed test app: builds the real router over a test database and makes
//! requests in-process, returning status and parsed JSON.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::auth::{AuthSettings, Authenticator, KeySource};
use toolserver_api::{ApiSettings, AppState};
use toolserver_bundles::{BundleStore, FsBundleStore, UrlSigner};
use toolserver_harness::outbound::{self, OutboundPolicy};
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::tools::{TavilySettings, ToolSources};
use toolserver_harness::{Harness, HarnessSettings};
use toolserver_sandbox::{Executor, IsolationMode, LocalExecutor, LocalSettings};
use tower::ServiceExt;

pub const SECRET: &str = "test-secret";
pub const ACCOUNT_A: &str = "acct_a";
pub const ACCOUNT_B: &str = "acct_b";

pub struct TestApp {
    pub router: Router,
    pub bundles: Arc<dyn BundleStore>,
    _dirs: (Option<tempfile::TempDir>, tempfile::TempDir),
}

/// The agent harness over the test's parts: loopback allowed (scripted
/// models and fake Tavily listen there), Tavily at `tavily` if given.
pub fn test_harness(
    pool: PgPool,
    bundles: Arc<dyn BundleStore>,
    executor: Arc<dyn Executor>,
    tavily: Option<url::Url>,
    settings: HarnessSettings,
) -> Harness {
    let policy = OutboundPolicy {
        allow_private: true,
    };
    harness_with_policy(pool, bundles, executor, tavily, settings, policy)
}

/// [`test_harness`] under the given outbound policy.
pub fn harness_with_policy(
    pool: PgPool,
    bundles: Arc<dyn BundleStore>,
    executor: Arc<dyn Executor>,
    tavily: Option<url::Url>,
    settings: HarnessSettings,
    policy: OutboundPolicy,
) -> Harness {
    let mcp_policy = policy.clone();
    let sources = ToolSources {
        pool,
        executor,
        bundles,
        runner: RunnerCallSettings {
            inline_bundle_max_bytes: 64 * 1024,
            signed_url_ttl: std::time::Duration::from_secs(300),
            max_output_bytes: 4 * 1024 * 1024,
        },
        tavily: TavilySettings {
            base_url: tavily.unwrap_or_else(|| url::Url::parse("http://127.0.0.1:9/").unwrap()),
            fallback_api_key: None,
        },
        http: outbound::client(&policy, std::time::Duration::from_secs(5)).unwrap(),
        policy,
        default_tool_timeout: std::time::Duration::from_secs(25),
        mcp: std::sync::Arc::new(
            toolserver_harness::tools::McpClients::with_defaults(mcp_policy).unwrap(),
        ),
    };
    Harness::new(sources, SecretBox::new(&[42; 32]), settings)
}

/// HS256 verification with [`SECRET`].
pub fn hs256_auth() -> Authenticator {
    let keys = KeySource::Static(Arc::new(DecodingKey::from_secret(SECRET.as_bytes())));
    Authenticator::new(&hs256_settings(), keys)
}

/// A local runner backend under `dir` (made reachable for a `nobody` worker)
/// whose runners post job callbacks to the server at `public_url`.
pub fn local_executor(dir: &std::path::Path, public_url: Option<url::Url>) -> LocalExecutor {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    LocalExecutor::new(LocalSettings {
        node_binary: "node".into(),
        root: dir.join("runners"),
        idle_timeout: std::time::Duration::from_secs(300),
        start_timeout: std::time::Duration::from_secs(10),
        kill_grace: std::time::Duration::from_millis(500),
        isolation: IsolationMode::PreferBwrap,
        bwrap_binary: "bwrap".into(),
        egress: toolserver_sandbox::EgressSettings {
            callback_base: public_url,
            ..Default::default()
        },
        limits: Default::default(),
    })
    .unwrap()
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: bytes::Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `error.code` of an error body.
    pub fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap().to_owned()
    }

    /// The `error.message` of an error body.
    pub fn message(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap().to_owned()
    }
}

pub fn hs256_settings() -> AuthSettings {
    AuthSettings {
        algorithm: Algorithm::HS256,
        issuer: None,
        audience: None,
        account_claim: "account_id".into(),
        leeway: std::time::Duration::from_secs(0),
    }
}

pub async fn fs_store(dir: &std::path::Path) -> Arc<dyn BundleStore> {
    let signer = UrlSigner::new(
        b"signing-key".to_vec(),
        url::Url::parse("http://toolserver.test/").unwrap(),
    )
    .unwrap();
    Arc::new(FsBundleStore::open(dir, signer).await.unwrap())
}

impl TestApp {
    /// The app over `pool` with a filesystem store and HS256 tokens.
    pub async fn new(pool: PgPool) -> Self {
        Self::with(pool, ApiSettings::default()).await
    }

    pub async fn with(pool: PgPool, settings: ApiSettings) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bundles = fs_store(dir.path()).await;
        Self::assemble(pool, bundles, hs256_auth(), settings, Some(dir))
    }

    /// The app as deployed by default: outbound requests reach public
    /// addresses only.
    pub async fn public_outbound_only(pool: PgPool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bundles = fs_store(dir.path()).await;
        Self::assemble_with_policy(
            pool,
            bundles,
            hs256_auth(),
            ApiSettings::default(),
            Some(dir),
            OutboundPolicy::default(),
        )
    }

    pub fn assemble(
        pool: PgPool,
        bundles: Arc<dyn BundleStore>,
        auth: Authenticator,
        settings: ApiSettings,
        dir: Option<tempfile::TempDir>,
    ) -> Self {
        let policy = OutboundPolicy {
            allow_private: true,
        };
        Self::assemble_with_policy(pool, bundles, auth, settings, dir, policy)
    }

    fn assemble_with_policy(
        pool: PgPool,
        bundles: Arc<dyn BundleStore>,
        auth: Authenticator,
        settings: ApiSettings,
        dir: Option<tempfile::TempDir>,
        policy: OutboundPolicy,
    ) -> Self {
        let runners = tempfile::tempdir().unwrap();
        let executor: Arc<dyn Executor> = Arc::new(local_executor(runners.path(), None));
        let harness = harness_with_policy(
            pool.clone(),
            bundles.clone(),
            executor.clone(),
            None,
            HarnessSettings::default(),
            policy,
        );
        let state = AppState::new(
            pool,
            bundles.clone(),
            executor,
            auth,
            settings,
            harness,
            None,
        );
        Self {
            router: toolserver_api::app(state),
            bundles,
            _dirs: (dir, runners),
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        account: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", token(account)));
        let body = match body {
            Some(value) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(&value).unwrap())
            }
            None => Body::empty(),
        };
        self.send(builder.body(body).unwrap()).await
    }

    /// Sends a multipart body of `parts` as account A.
    pub async fn send_multipart(
        &self,
        method: Method,
        path: &str,
        parts: &[(&str, &[u8])],
    ) -> Reply {
        let (content_type, body) = multipart(parts);
        self.send(authed(method, path, &content_type, body)).await
    }

    pub async fn get(&self, path: &str, account: &str) -> Reply {
        self.call(Method::GET, path, account, None).await
    }

    /// Uploads a tool as JSON and asserts it was created.
    pub async fn create(&self, account: &str, name: &str, bundle: &[u8]) -> Value {
        let reply = self
            .call(
                Method::POST,
                "/accounts/me/tools",
                account,
                Some(manifest(name, bundle)),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    }
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub const BUNDLE: &[u8] =
    b"export default { async execute(ctx, input) { return { echo: input }; } };";

/// A valid JSON upload body.
pub fn manifest(name: &str, bundle: &[u8]) -> Value {
    json!({
        "name": name,
        "description": "Echoes its input.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "defaultConfig": {"greeting": "hi"},
        "bundle": b64(bundle),
    })
}

pub fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// An HS256 token for `account` valid for an hour.
pub fn token(account: &str) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        json!({"account_id": account, "exp": now() + 3600}),
        None,
    )
}

pub fn sign(alg: Algorithm, key: &EncodingKey, claims: Value, kid: Option<&str>) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

/// A multipart body with the given parts; returns (content type, body).
pub fn multipart(parts: &[(&str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "toolserver-test-boundary";
    let mut body = Vec::new();
    for (name, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        body.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A request as account A with a body of `content_type`.
pub fn authed(method: Method, path: &str, content_type: &str, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", token(ACCOUNT_A)),
        )
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap()
}
