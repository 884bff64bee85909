//! Tools of the MCP servers an agent names (`config.mcpServers`), reached
//! over streamable HTTP with `rmcp`'s client through the outbound address
//! checks. A server's tool list is kept for a while (per account and
//! bearer token), and waited for only briefly ([`lists`]); each call opens
//! its own session. Whatever goes wrong remotely reaches the model as a
//! failed call. A server that acts through each end user's OAuth
//! connection is listed with that user's token; until the user has one,
//! the model is offered its connect tool instead.

mod connect;
mod lists;
mod remote;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest_mcp::header::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use toolserver_domain::agent::mcp::{McpAuth, McpServerSetting};
use toolserver_domain::AccountId;

use super::ToolSources;
use crate::outbound::{self, OutboundPolicy};
use crate::HarnessSettings;

pub(super) use connect::{connect_tool, ConnectTool, CONNECT_TOOL};
pub use lists::ListTimings;
pub(crate) use lists::Listing;
use lists::ToolLists;
pub(super) use remote::{ActingUser, RemoteTool};

/// Connections to MCP servers, and the tool lists they gave lately.
pub struct McpClients {
    dialer: Dialer,
    lists: ToolLists,
}

impl McpClients {
    /// Clients under `policy`, connecting within `connect_timeout`, their
    /// lists kept and waited for by `timings`.
    pub fn new(
        policy: OutboundPolicy,
        connect_timeout: Duration,
        timings: ListTimings,
    ) -> Result<Self, reqwest_mcp::Error> {
        Ok(Self {
            dialer: Dialer {
                http: outbound::mcp_client(&policy, connect_timeout)?,
                policy,
            },
            lists: ToolLists::new(timings),
        })
    }

    /// Clients with the settings' default timings: the outbound connect
    /// timeout, the default list timings, and the default tool call
    /// deadline to list.
    pub fn with_defaults(policy: OutboundPolicy) -> Result<Self, reqwest_mcp::Error> {
        Self::new(
            policy,
            HarnessSettings::DEFAULT_OUTBOUND_CONNECT_TIMEOUT,
            ListTimings::with_deadline(ToolSources::DEFAULT_TOOL_TIMEOUT),
        )
    }

    /// The tools of `server` as `account` sees them with `bearer` (the
    /// end user's token of a server that acts through connections), from
    /// the kept list while it stands.
    pub async fn list(
        &self,
        account: &AccountId,
        server: &McpServerSetting,
        bearer: Option<&str>,
    ) -> Listing {
        let bearer = bearer.or_else(|| stored_bearer(server)).map(str::to_owned);
        let key = list_key(account, server, bearer.as_deref());
        let dialer = self.dialer.clone();
        let server = server.clone();
        self.lists
            .get(key, move || async move {
                let session = dialer.connect(&server, bearer.as_deref()).await?;
                let tools = session.list_all_tools().await.map_err(|err| describe(&err));
                let _ = session.cancel().await;
                tools.map(Arc::new)
            })
            .await
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
        let session = self.dialer.connect(server, bearer).await?;
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
}

/// Opens sessions with MCP servers.
#[derive(Clone)]
struct Dialer {
    http: reqwest_mcp::Client,
    policy: OutboundPolicy,
}

impl Dialer {
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
