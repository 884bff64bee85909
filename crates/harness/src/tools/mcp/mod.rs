//! Tools of the MCP servers an agent names (`config.mcpServers`), reached
//! over streamable HTTP with `rmcp`'s client through the outbound address
//! checks. A server's tool list is kept for a while (per account and
//! bearer token); each call opens its own session. Whatever goes wrong
//! remotely reaches the model as a failed call. A server that acts through
//! each end user's OAuth connection is listed with that user's token; until
//! the user has one, the model is offered its connect tool instead.

mod connect;
mod remote;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest_mcp::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use toolserver_domain::agent::mcp::{McpAuth, McpServerSetting};
use toolserver_domain::AccountId;

use super::ToolSources;
use crate::outbound::{self, OutboundPolicy};
use crate::HarnessSettings;

pub(super) use connect::{connect_tool, ConnectTool, CONNECT_TOOL};
pub(super) use remote::{ActingUser, RemoteTool};

/// Connections to MCP servers, and the tool lists they gave lately.
pub struct McpClients {
    http: reqwest_mcp::Client,
    policy: OutboundPolicy,
    list_ttl: Duration,
    timeout: Duration,
    lists: Mutex<HashMap<String, Listed>>,
}

struct Listed {
    at: Instant,
    tools: Arc<Vec<Tool>>,
}

impl McpClients {
    /// Clients under `policy`; a list is kept for `list_ttl`, and listing
    /// (connecting included) may take `timeout`.
    pub fn new(
        policy: OutboundPolicy,
        connect_timeout: Duration,
        list_ttl: Duration,
        timeout: Duration,
    ) -> Result<Self, reqwest_mcp::Error> {
        Ok(Self {
            http: outbound::mcp_client(&policy, connect_timeout)?,
            policy,
            list_ttl,
            timeout,
            lists: Mutex::new(HashMap::new()),
        })
    }

    /// The setting's default time a server's tool list is kept.
    pub const DEFAULT_LIST_TTL: Duration = Duration::from_secs(60);

    /// Clients with the settings' default timings: the outbound connect
    /// timeout, lists kept [`Self::DEFAULT_LIST_TTL`], and the default tool
    /// call deadline to list.
    pub fn with_defaults(policy: OutboundPolicy) -> Result<Self, reqwest_mcp::Error> {
        Self::new(
            policy,
            HarnessSettings::DEFAULT_OUTBOUND_CONNECT_TIMEOUT,
            Self::DEFAULT_LIST_TTL,
            ToolSources::DEFAULT_TOOL_TIMEOUT,
        )
    }

    /// The tools of `server` as `account` sees them with `bearer` (the
    /// end user's token of a server that acts through connections), from
    /// the kept list while it is fresh.
    pub async fn list(
        &self,
        account: &AccountId,
        server: &McpServerSetting,
        bearer: Option<&str>,
    ) -> Result<Arc<Vec<Tool>>, String> {
        let bearer = bearer.or_else(|| stored_bearer(server));
        let key = list_key(account, server, bearer);
        {
            let lists = self.lists.lock().await;
            if let Some(listed) = lists.get(&key).filter(|l| l.at.elapsed() < self.list_ttl) {
                return Ok(listed.tools.clone());
            }
        }
        let listing = async {
            let session = self.connect(server, bearer).await?;
            let tools = session.list_all_tools().await.map_err(|err| describe(&err));
            let _ = session.cancel().await;
            tools
        };
        let tools = Arc::new(
            tokio::time::timeout(self.timeout, listing)
                .await
                .map_err(|_| {
                    format!("listing took longer than {} ms", self.timeout.as_millis())
                })??,
        );
        let mut lists = self.lists.lock().await;
        let ttl = self.list_ttl;
        lists.retain(|_, listed| listed.at.elapsed() < ttl);
        lists.insert(
            key,
            Listed {
                at: Instant::now(),
                tools: tools.clone(),
            },
        );
        Ok(tools)
    }

    /// Calls the remote tool `name` of `server` with `input`, sending
    /// `bearer` (else the server's stored one).
    async fn call(
        &self,
        server: &McpServerSetting,
        bearer: Option<&str>,
        name: &str,
        input: Value,
    ) -> Result<CallToolResult, String> {
        let bearer = bearer.or_else(|| stored_bearer(server));
        let session = self.connect(server, bearer).await?;
        let mut request = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(arguments) = input {
            request.arguments = Some(arguments);
        }
        let result = session
            .call_tool(request)
            .await
            .map_err(|err| describe(&err));
        let _ = session.cancel().await;
        result
    }

    async fn connect(
        &self,
        server: &McpServerSetting,
        bearer: Option<&str>,
    ) -> Result<RunningService<RoleClient, ()>, String> {
        outbound::check_url(&server.url, &self.policy)?;
        let mut headers = HashMap::new();
        for (name, value) in &server.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|err| err.to_string())?;
            let value = HeaderValue::from_str(value).map_err(|err| err.to_string())?;
            headers.insert(name, value);
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str())
            .custom_headers(headers);
        if let Some(token) = bearer {
            config = config.auth_header(token.to_owned());
        }
        let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
        ().serve(transport)
            .await
            .map_err(|err| format!("could not connect: {}", describe(&err)))
    }
}

/// What a failure says, naming a refused address plainly.
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    outbound::refused_in(err).unwrap_or_else(|| {
        let mut text = err.to_string();
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    })
}

/// The bearer token stored in `server`'s config, if it has one.
fn stored_bearer(server: &McpServerSetting) -> Option<&str> {
    match &server.auth {
        Some(McpAuth::Bearer(token)) => Some(token),
        _ => None,
    }
}

/// Where a server's list is kept: per account and per way of reaching it.
fn list_key(account: &AccountId, server: &McpServerSetting, bearer: Option<&str>) -> String {
    let mut hash = Sha256::new();
    for part in [account.as_str(), server.url.as_str()] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    for (name, value) in &server.headers {
        hash.update(name.as_bytes());
        hash.update([0]);
        hash.update(value.as_bytes());
        hash.update([0]);
    }
    hash.update(bearer.unwrap_or_default().as_bytes());
    hex::encode(hash.finalize())
}
