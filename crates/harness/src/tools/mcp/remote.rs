//! One remote tool as the agent calls it, sending the server's stored
//! bearer token or the acting end user's access token.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use toolserver_domain::agent::mcp::McpServerSetting;
use toolserver_domain::AccountId;

use super::McpClients;
use crate::connections::Connections;
use crate::tools::http::connection_failure;
use crate::tools::{Failure, Invocation, ToolEvent, ToolEvents, ToolImpl};

/// The end user whose connection a server's requests act through.
#[derive(Clone)]
pub struct ActingUser {
    /// Where connections are kept and refreshed.
    pub connections: Connections,
    /// The account.
    pub account: AccountId,
    /// The end user (`""`: the account).
    pub user: String,
}

impl ActingUser {
    /// `self`'s access token of `provider`; a call that cannot have one
    /// fails as [`connection_failure`] says.
    pub async fn token(&self, provider: &str) -> Result<String, Failure> {
        self.connections
            .access_token(&self.account, &self.user, provider)
            .await
            .map_err(connection_failure)
    }

    /// The same account's `user`.
    pub fn as_user(&self, user: &str) -> Self {
        Self {
            user: user.to_owned(),
            ..self.clone()
        }
    }
}

/// One remote tool, as the agent calls it.
pub struct RemoteTool {
    pub(in crate::tools) clients: Arc<McpClients>,
    pub(in crate::tools) server: McpServerSetting,
    pub(in crate::tools) name: String,
    /// Whose connection calls act through, for a server that acts through
    /// end users' connections.
    pub(in crate::tools) acting: Option<ActingUser>,
}

impl ToolImpl for RemoteTool {
    fn call(&self, invocation: Invocation) -> ToolEvents {
        let (clients, server, name, acting) = (
            self.clients.clone(),
            self.server.clone(),
            self.name.clone(),
            self.acting.clone(),
        );
        futures::stream::once(async move {
            let bearer = match (server.connection(), &acting) {
                (Some(provider), Some(acting)) => match acting.token(provider).await {
                    Ok(token) => Some(token),
                    Err(failure) => return ToolEvent::Failed(failure),
                },
                _ => None,
            };
            match clients
                .call(&server, bearer.as_deref(), &name, invocation.input)
                .await
            {
                Ok(result) => outcome(result),
                Err(error) => {
                    ToolEvent::Failed(Failure::tool(format!("the MCP server failed: {error}")))
                }
            }
        })
        .boxed()
    }

    fn connection(&self) -> Option<&str> {
        self.server.connection()
    }

    fn for_user(&self, user: &str) -> Option<Arc<dyn ToolImpl>> {
        let acting = self.acting.as_ref()?;
        Some(Arc::new(Self {
            clients: self.clients.clone(),
            server: self.server.clone(),
            name: self.name.clone(),
            acting: Some(acting.as_user(user)),
        }))
    }
}

/// A remote result as our outcome: its structured content if any, else its
/// text (one block) or its blocks; `isError` makes it a failure.
fn outcome(result: CallToolResult) -> ToolEvent {
    let texts: Vec<String> = result
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.clone()),
            _ => None,
        })
        .collect();
    if result.is_error == Some(true) {
        let message = match texts.is_empty() {
            true => "the remote tool failed".to_owned(),
            false => texts.join("\n"),
        };
        return ToolEvent::Failed(Failure::tool(message));
    }
    let output = match (&result.structured_content, texts.as_slice()) {
        (Some(structured), _) => structured.clone(),
        (None, [text]) => Value::String(text.clone()),
        (None, _) => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    ToolEvent::Output(output)
}
