//! `<server>__connect`: what the model is offered of an MCP server that
//! acts through end users' connections while its end user has none. Its
//! call needs the connection, so a turn asks the user to authorize and the
//! call waits; once connected it runs and names the server's tools, which
//! the rest of the turn is offered.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{json, Value};
use toolserver_domain::agent::mcp::McpServerSetting;

use super::{ActingUser, McpClients};
use crate::tools::{Failure, Invocation, ToolEvent, ToolEvents, ToolImpl};

/// The remote name of a server's connect tool (`<server>__connect`).
pub const CONNECT_TOOL: &str = "connect";

/// A server's connect tool, acting for one end user.
pub struct ConnectTool {
    pub(in crate::tools) clients: Arc<McpClients>,
    pub(in crate::tools) server_name: String,
    pub(in crate::tools) server: McpServerSetting,
    pub(in crate::tools) acting: ActingUser,
}

/// The model-facing name, description and input schema of the connect
/// tool of `server_name`, which acts through `provider`.
pub fn connect_tool(server_name: &str, provider: &str) -> (String, String, Value) {
    (
        McpServerSetting::tool_name(server_name, CONNECT_TOOL),
        format!(
            "Connects the user's {provider} account, which the tools of the MCP server \
             {server_name:?} act through; until then they are not offered. Call it when the \
             user asks for something that server does: the user is asked to authorize, and \
             once they have, the server's tools are offered."
        ),
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    )
}

impl ToolImpl for ConnectTool {
    fn call(&self, _: Invocation) -> ToolEvents {
        let (clients, server_name, server, acting) = (
            self.clients.clone(),
            self.server_name.clone(),
            self.server.clone(),
            self.acting.clone(),
        );
        futures::stream::once(async move {
            let Some(provider) = server.connection() else {
                return ToolEvent::Failed(Failure::tool("this server needs no connection"));
            };
            let token = match acting.token(provider).await {
                Ok(token) => token,
                Err(failure) => return ToolEvent::Failed(failure),
            };
            match clients.list(&acting.account, &server, Some(&token)).await {
                Ok(listed) => {
                    let tools: Vec<String> = listed
                        .iter()
                        .filter(|tool| server.offers(&tool.name))
                        .map(|tool| McpServerSetting::tool_name(&server_name, &tool.name))
                        .collect();
                    ToolEvent::Output(json!({"connected": provider, "tools": tools}))
                }
                Err(error) => ToolEvent::Failed(Failure::tool(format!(
                    "{provider} is connected, but the MCP server's tools could not be listed: {error}"
                ))),
            }
        })
        .boxed()
    }

    fn connection(&self) -> Option<&str> {
        self.server.connection()
    }

    fn for_user(&self, user: &str) -> Option<Arc<dyn ToolImpl>> {
        Some(Arc::new(Self {
            clients: self.clients.clone(),
            server_name: self.server_name.clone(),
            server: self.server.clone(),
            acting: self.acting.as_user(user),
        }))
    }
}
