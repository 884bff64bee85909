//! Load generator for tool invocation (`make bench`). For a tool that returns
//! immediately it measures, in one process against the same runner:
//!   - warm invoke latency through the HTTP API (real loopback HTTP, keep-alive),
//!   - the same call as an MCP `tools/call` on `POST /mcp` (2025-11-25,
//!     stateless, JSON answer),
//!   - the same call made straight to the worker's unix socket (the floor),
//!   - their ratios and differences,
//!   - the cold-start time of a new runner (spawn → ready → healthy),
//!   - an HTTP tool (the server makes the request, a secret filled into a
//!     header) against a loopback upstream, beside the same request made
//!     straight to that upstream: what the server adds to an API call,
//!   - the same HTTP tool acting through an OAuth connection (its token
//!     granted by the real authorization server of the tests and filled in
//!     at call time) beside the secret one: what a connection adds.
//!
//! Needs `DATABASE_URL` (a server where it may create a scratch database)
//! and the OAuth server's virtualenv (`make test-deps`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use jsonwebtoken::{DecodingKey, EncodingKey, Header};
use serde_json::{json, Map, Value};
use toolserver_api::auth::{AuthSettings, Authenticator, KeySource};
use toolserver_api::{ApiSettings, AppState};
use toolserver_bundles::BundleStore;
use toolserver_bundles::{FsBundleStore, UrlSigner};
use toolserver_domain::{AccountId, Sha256Digest, ToolId};
use toolserver_harness::outbound::OutboundPolicy;
use toolserver_harness::runner_call::RunnerCallSettings;
use toolserver_harness::sealing::SecretBox;
use toolserver_harness::tools::{TavilySettings, ToolSources};
use toolserver_harness::{Harness, HarnessSettings};
use toolserver_sandbox::{
    BundleRef, Executor, Frame, InvokeRequest, IsolationMode, LocalExecutor, LocalSettings,
    ReservationKey, WorkerClient,
};
use toolserver_testsupport::bench::{ms, summary, ScratchDatabase};
use toolserver_testsupport::oauth_server::OAuthServer;

const WARMUP: usize = 200;
const SAMPLES: usize = 2000;
const COLD_STARTS: usize = 20;
const TOOL: &str = "export default { execute(ctx, input) { return input; } };";

#[tokio::main]
async fn main() {
    let database = ScratchDatabase::create("invoke").await;
    let pool = sqlx::PgPool::connect(&database.url).await.unwrap();
    toolserver_store::migrate(&pool).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let signer = UrlSigner::new(b"bench".to_vec(), url::Url::parse(&base).unwrap()).unwrap();
    let bundles = FsBundleStore::open(dir.path().join("bundles"), signer)
        .await
        .unwrap();
    let executor = LocalExecutor::new(LocalSettings {
        node_binary: "node".into(),
        root: dir.path().join("runners"),
        idle_timeout: Duration::from_secs(3600),
        start_timeout: Duration::from_secs(10),
        kill_grace: Duration::from_secs(2),
        isolation: IsolationMode::PreferBwrap,
        bwrap_binary: "bwrap".into(),
        egress: Default::default(),
        limits: Default::default(),
    })
    .unwrap();
    let auth = Authenticator::new(
        &AuthSettings {
            algorithm: jsonwebtoken::Algorithm::HS256,
            issuer: None,
            audience: None,
            account_claim: "account_id".into(),
            leeway: Duration::from_secs(30),
        },
        KeySource::Static(Arc::new(DecodingKey::from_secret(b"bench"))),
    );
    let bundles: Arc<dyn BundleStore> = Arc::new(bundles);
    let shared_executor: Arc<dyn Executor> = Arc::new(executor.clone());
    let harness = Harness::new(
        ToolSources {
            pool: pool.clone(),
            executor: shared_executor.clone(),
            bundles: bundles.clone(),
            runner: RunnerCallSettings {
                inline_bundle_max_bytes: 64 * 1024,
                signed_url_ttl: Duration::from_secs(300),
                max_output_bytes: 4 * 1024 * 1024,
            },
            tavily: TavilySettings {
                base_url: url::Url::parse("https://api.tavily.com").unwrap(),
                fallback_api_key: None,
            },
            sealer: SecretBox::new(&[7; 32]),
            fetch_url: None,
            http: reqwest::Client::new(),
            // The HTTP tool's upstream listens on loopback.
            policy: OutboundPolicy {
                allow_private: true,
            },
            default_tool_timeout: Duration::from_secs(25),
            breakers: std::sync::Arc::new(toolserver_harness::tools::Breakers::new(
                toolserver_harness::tools::BreakerSettings::DEFAULT,
            )),
            mcp: std::sync::Arc::new(
                toolserver_harness::tools::McpClients::with_defaults(
                    toolserver_harness::outbound::OutboundPolicy {
                        allow_private: true,
                    },
                )
                .unwrap(),
            ),
        },
        HarnessSettings::default(),
    );
    let state = AppState::new(
        pool.clone(),
        bundles,
        shared_executor,
        auth,
        ApiSettings::default(),
        harness,
        None,
    );
    tokio::spawn(async move { axum::serve(listener, toolserver_api::app(state)).await });

    let exp = time::OffsetDateTime::now_utc().unix_timestamp() + 3600;
    let token = jsonwebtoken::encode(
        &Header::default(),
        &json!({"account_id": "bench", "exp": exp}),
        &EncodingKey::from_secret(b"bench"),
    )
    .unwrap();
    let client = reqwest::Client::new();
    let engine = base64::engine::general_purpose::STANDARD;
    let created: Value = client
        .post(format!("{base}/accounts/me/tools"))
        .bearer_auth(&token)
        .json(&json!({"name": "bench", "description": "returns its input", "inputSchema": {"type": "object"}, "bundle": engine.encode(TOOL)}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tool_id = created["toolId"].as_str().unwrap().to_owned();
    let accepted = Arc::new(std::sync::Mutex::new(vec!["bench-secret".to_owned()]));
    let upstream = upstream(accepted.clone()).await;
    let http_tool = http_tool(&client, &base, &token, &upstream).await;
    let oauth = OAuthServer::start("bench-client", "bench-client-secret", 3600).await;
    let connected_tool = connected_tool(&client, (&base, &token), &oauth, &upstream).await;
    let issued = oauth.issued_tokens().await;
    accepted.lock().unwrap().extend(issued);
    let connected_tool_url = format!("{base}/accounts/me/tools/{connected_tool}/invoke");
    let connected_tool_call = || echo_call(&client, &connected_tool_url, &token);
    let http_tool_url = format!("{base}/accounts/me/tools/{http_tool}/invoke");
    let http_tool_call = || echo_call(&client, &http_tool_url, &token);
    let upstream_call = || async {
        let started = Instant::now();
        let reply: Value = client
            .get(format!("{upstream}/echo?n=1"))
            .bearer_auth("bench-secret")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(reply, json!({"n": "1"}));
        started.elapsed()
    };
    let invoke_url = format!("{base}/accounts/me/tools/{tool_id}/invoke");
    let body = json!({"input": {"n": 1}});

    let api_call = || async {
        let started = Instant::now();
        let reply: Value = client
            .post(&invoke_url)
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(reply["output"], json!({"n": 1}), "{reply}");
        started.elapsed()
    };
    let mcp_url = format!("{base}/mcp");
    let mcp_call = |i: usize| {
        let (client, token, mcp_url) = (&client, &token, &mcp_url);
        async move {
            let started = Instant::now();
            let reply: Value = client
                .post(mcp_url)
                .bearer_auth(token)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "bench", "arguments": {"n": 1}}}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(
                reply["result"]["structuredContent"],
                json!({"n": 1}),
                "{reply}"
            );
            started.elapsed()
        }
    };
    let key = ReservationKey::new(
        AccountId::parse("bench").unwrap(),
        ToolId::parse(&tool_id).unwrap(),
    );
    let worker = WorkerClient::new(executor.socket_path(&key));
    let direct = InvokeRequest {
        call_id: String::new(),
        idempotency_key: "bench".into(),
        input: json!({"n": 1}),
        config: Map::new(),
        bundle: BundleRef {
            sha256: Sha256Digest::of(TOOL.as_bytes()).to_hex(),
            inline: Some(engine.encode(TOOL)),
            url: None,
        },
        deadline_ms: 10_000,
        max_output_bytes: 1 << 20,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    };
    let socket_call = |i: usize| {
        let mut request = direct.clone();
        request.call_id = format!("direct-{i}");
        let worker = worker.clone();
        async move {
            let started = Instant::now();
            let mut frames = worker.invoke(&request).await.unwrap();
            let frame = frames.recv().await.unwrap();
            assert_eq!(
                frame,
                Frame::Final {
                    value: json!({"n": 1})
                }
            );
            started.elapsed()
        }
    };

    for i in 0..WARMUP {
        api_call().await;
        mcp_call(i).await;
        socket_call(i).await;
        http_tool_call().await;
        connected_tool_call().await;
        upstream_call().await;
    }
    // Interleave them all so all see the same machine state.
    let samples = || Vec::with_capacity(SAMPLES);
    let (mut api, mut mcp, mut floor) = (samples(), samples(), samples());
    let (mut http, mut connected, mut direct_http) = (samples(), samples(), samples());
    for i in 0..SAMPLES {
        api.push(api_call().await);
        mcp.push(mcp_call(WARMUP + i).await);
        floor.push(socket_call(WARMUP + i).await);
        http.push(http_tool_call().await);
        connected.push(connected_tool_call().await);
        direct_http.push(upstream_call().await);
    }

    let mut cold = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let fresh = ReservationKey::new(AccountId::parse("bench").unwrap(), ToolId::generate());
        let started = Instant::now();
        let info = executor.ensure(&fresh).await.unwrap();
        cold.push(started.elapsed());
        assert!(info.started);
        executor.stop(&fresh).await.unwrap();
    }

    println!(
        "tool invocation benchmark (bubblewrap: {})",
        executor.uses_bwrap()
    );
    let (api_p50, api_p99) = summary("warm invoke via HTTP API", api);
    let (mcp_p50, mcp_p99) = summary("same call as MCP tools/call", mcp);
    let (floor_p50, floor_p99) = summary("same call on worker socket (floor)", floor);
    summary("cold start of a new runner", cold);
    let (http_p50, http_p99) = summary("HTTP tool via HTTP API", http);
    let (connected_p50, connected_p99) =
        summary("same HTTP tool through an OAuth connection", connected);
    let (direct_p50, direct_p99) = summary("same request straight to the upstream", direct_http);
    println!(
        "API / floor: p50 ratio {:.2}x (+{:.3} ms), p99 ratio {:.2}x (+{:.3} ms)",
        api_p50.as_secs_f64() / floor_p50.as_secs_f64(),
        ms(api_p50.saturating_sub(floor_p50)),
        api_p99.as_secs_f64() / floor_p99.as_secs_f64(),
        ms(api_p99.saturating_sub(floor_p99)),
    );
    println!(
        "MCP / API: p50 ratio {:.2}x ({:+.3} ms), p99 ratio {:.2}x ({:+.3} ms)",
        mcp_p50.as_secs_f64() / api_p50.as_secs_f64(),
        ms(mcp_p50) - ms(api_p50),
        mcp_p99.as_secs_f64() / api_p99.as_secs_f64(),
        ms(mcp_p99) - ms(api_p99),
    );

    println!(
        "HTTP tool / upstream: p50 ratio {:.2}x (+{:.3} ms), p99 ratio {:.2}x (+{:.3} ms)",
        http_p50.as_secs_f64() / direct_p50.as_secs_f64(),
        ms(http_p50.saturating_sub(direct_p50)),
        http_p99.as_secs_f64() / direct_p99.as_secs_f64(),
        ms(http_p99.saturating_sub(direct_p99)),
    );
    println!(
        "connection / secret: p50 ratio {:.2}x ({:+.3} ms), p99 ratio {:.2}x ({:+.3} ms)",
        connected_p50.as_secs_f64() / http_p50.as_secs_f64(),
        ms(connected_p50) - ms(http_p50),
        connected_p99.as_secs_f64() / http_p99.as_secs_f64(),
        ms(connected_p99) - ms(http_p99),
    );
    println!(
        "HTTP tool / uploaded tool: p50 ratio {:.2}x ({:+.3} ms)",
        http_p50.as_secs_f64() / api_p50.as_secs_f64(),
        ms(http_p50) - ms(api_p50),
    );

    executor.stop(&key).await.unwrap();
    pool.close().await;
    database.drop_now().await;
}

/// A loopback API whose `GET /echo` answers its query as JSON when the
/// bearer is one of `accepted`; its base URL.
async fn upstream(accepted: Arc<std::sync::Mutex<Vec<String>>>) -> String {
    use axum::extract::Query;
    use axum::http::{HeaderMap, StatusCode};
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::get(
            move |headers: HeaderMap, Query(query): Query<Map<String, Value>>| async move {
                let bearer = headers
                    .get("authorization")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.strip_prefix("Bearer "));
                let authorized = bearer
                    .is_some_and(|bearer| accepted.lock().unwrap().iter().any(|t| t == bearer));
                match authorized {
                    true => (StatusCode::OK, axum::Json(Value::Object(query))),
                    false => (StatusCode::UNAUTHORIZED, axum::Json(Value::Null)),
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// One invoke of the echo tool at `url`; how long it took.
async fn echo_call(client: &reqwest::Client, url: &str, token: &str) -> Duration {
    let started = Instant::now();
    let reply: Value = client
        .post(url)
        .bearer_auth(token)
        .json(&json!({"input": {"n": 1}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(reply["output"], json!({"n": "1"}), "{reply}");
    started.elapsed()
}

/// Sets the secret and creates the HTTP tool calling `upstream`; its id.
async fn http_tool(client: &reqwest::Client, base: &str, token: &str, upstream: &str) -> String {
    let status = client
        .put(format!("{base}/accounts/me/secrets/BENCH"))
        .bearer_auth(token)
        .json(&json!({"value": "bench-secret"}))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    echo_tool(
        client,
        (base, token),
        ("bench_http", "Bearer {{secret.BENCH}}"),
        upstream,
    )
    .await
}

/// Creates the HTTP tool `name` calling `upstream`'s echo with the
/// `Authorization` template `authorization`; its id.
async fn echo_tool(
    client: &reqwest::Client,
    (base, token): (&str, &str),
    (name, authorization): (&str, &str),
    upstream: &str,
) -> String {
    let created: Value = client
        .post(format!("{base}/accounts/me/tools"))
        .bearer_auth(token)
        .json(&json!({
            "name": name, "description": "echoes n", "kind": "http",
            "inputSchema": {"type": "object"},
            "http": {
                "method": "GET", "url": format!("{upstream}/echo{{?n}}"),
                "headers": {"Authorization": authorization},
            },
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["toolId"].as_str().unwrap().to_owned()
}

/// Configures `oauth` as the provider `bench`, connects the account (no end
/// user) through it as a browser would, and creates an HTTP tool calling
/// `upstream` with the connection's token; its id.
async fn connected_tool(
    client: &reqwest::Client,
    (base, token): (&str, &str),
    oauth: &OAuthServer,
    upstream: &str,
) -> String {
    let status = client
        .put(format!("{base}/accounts/me/oauth-providers/bench"))
        .bearer_auth(token)
        .json(&json!({
            "authorizationUrl": oauth.authorization_url(),
            "tokenUrl": oauth.token_url(),
            "clientId": "bench-client",
            "clientSecret": "bench-client-secret",
        }))
        .send()
        .await
        .unwrap()
        .status();
    assert!(status.is_success(), "{status}");
    let started: Value = client
        .post(format!("{base}/accounts/me/connections/bench/authorize"))
        .bearer_auth(token)
        .json(&json!({"user": ""}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let redirect = oauth
        .consent(started["url"].as_str().unwrap(), "bench-user")
        .await;
    // The redirect names the configured public URL; this server is on `base`.
    let redirect = url::Url::parse(&redirect).unwrap();
    let callback = format!("{base}{}?{}", redirect.path(), redirect.query().unwrap());
    let answer: Value = client
        .get(callback)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["connected"], true, "{answer}");
    echo_tool(
        client,
        (base, token),
        (
            "bench_connected",
            "Bearer {{connection.bench.access_token}}",
        ),
        upstream,
    )
    .await
}
