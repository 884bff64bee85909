//! A real MCP server (rmcp, the streamable HTTP transport, stateless, JSON
//! answers) on a free loopback port, protected by the tokens of an OAuth
//! authorization server ([`crate::OAuthServer`]): every request to `/mcp`
//! must carry `Authorization: Bearer <token>`, checked against the OAuth
//! server's protected resource, or it is answered 401 without reaching MCP.
//! Its one tool, `whoami`, names the token's end user, so tests of agents
//! whose MCP servers act as each end user can see who a call was made as.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

/// Where the MCP endpoint is served.
const MCP_PATH: &str = "/mcp";

/// The one tool's name.
const WHOAMI: &str = "whoami";

/// A real MCP server (rmcp) on loopback whose requests need a bearer token
/// of the OAuth server; stopped on drop.
pub struct ProtectedMcpServer {
    origin: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// What the middleware and the handler share with the test.
struct Shared {
    http: reqwest::Client,
    resource_url: String,
    record: Mutex<Record>,
}

/// What happened so far.
#[derive(Default)]
struct Record {
    refused: u64,
    accepted_tokens: Vec<String>,
    calls: Vec<String>,
}

impl Shared {
    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The end user a request's bearer token names, put in its extensions.
#[derive(Clone)]
struct BearerUser(String);

impl ProtectedMcpServer {
    /// Starts the server on a free loopback port; `resource_url` is the OAuth
    /// server's protected resource ([`crate::OAuthServer::resource_url`]),
    /// which answers 200 `{"user": …}` for a valid bearer token.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(resource_url: &str) -> ProtectedMcpServer {
        let shared = Arc::new(Shared {
            http: reqwest::Client::new(),
            resource_url: resource_url.to_owned(),
            record: Mutex::new(Record::default()),
        });
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .disable_allowed_hosts();
        let handler = WhoamiServer {
            shared: shared.clone(),
        };
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let app = Router::new().route_service(MCP_PATH, service).layer(
            axum::middleware::from_fn_with_state(shared.clone(), authenticate),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("a free loopback port for the MCP server");
        let addr = listener
            .local_addr()
            .expect("the MCP server's bound address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ProtectedMcpServer {
            origin: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// The MCP endpoint: `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("{}{MCP_PATH}", self.origin)
    }

    /// How many requests were answered 401.
    pub fn refused(&self) -> u64 {
        self.shared.record().refused
    }

    /// The distinct bearer tokens accepted, in first-seen order.
    pub fn accepted_tokens(&self) -> Vec<String> {
        self.shared.record().accepted_tokens.clone()
    }

    /// The user of each `whoami` call, in order.
    pub fn calls(&self) -> Vec<String> {
        self.shared.record().calls.clone()
    }
}

impl Drop for ProtectedMcpServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Lets a request through when its bearer token is valid at the resource
/// (with the token's user in its extensions); answers 401 otherwise.
async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(|token| token.trim().to_owned())
        .filter(|token| !token.is_empty());
    let user = match &token {
        Some(token) => user_of(&shared, token).await,
        None => None,
    };
    let (Some(token), Some(user)) = (token, user) else {
        shared.record().refused += 1;
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, r#"Bearer error="invalid_token""#)],
            axum::Json(json!({"error": "invalid_token"})),
        )
            .into_response();
    };
    {
        let mut record = shared.record();
        if !record.accepted_tokens.contains(&token) {
            record.accepted_tokens.push(token);
        }
    }
    request.extensions_mut().insert(BearerUser(user));
    next.run(request).await
}

/// The user the resource names for `token`; `None` unless it answers 200
/// with a `user`.
async fn user_of(shared: &Shared, token: &str) -> Option<String> {
    let response = shared
        .http
        .get(&shared.resource_url)
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::OK {
        return None;
    }
    let body: Value = response.json().await.ok()?;
    body.get("user")?.as_str().map(str::to_owned)
}

/// The MCP server: one tool, `whoami`.
#[derive(Clone)]
struct WhoamiServer {
    shared: Arc<Shared>,
}

impl WhoamiServer {
    fn tool() -> Tool {
        let schema = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let Value::Object(schema) = schema else {
            unreachable!("the schema is an object")
        };
        Tool::new(WHOAMI, "Who the bearer's user is.", schema)
    }
}

impl ServerHandler for WhoamiServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().build();
        InitializeResult::new(capabilities).with_server_info(Implementation::new(
            "protected-mcp",
            env!("CARGO_PKG_VERSION"),
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![Self::tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != WHOAMI {
            return Err(McpError::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        }
        let user = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<BearerUser>())
            .map(|user| user.0.clone())
            .ok_or_else(|| McpError::internal_error("the request carries no user", None))?;
        self.shared.record().calls.push(user.clone());
        Ok(CallToolResult::structured(json!({"user": user})).into())
    }
}
