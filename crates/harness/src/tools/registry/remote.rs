//! The tools of the MCP servers an agent names, added to its registry: a
//! server with a stored bearer (or none) is listed when the registry is
//! built, all of an agent's servers together; one that acts through end users' connections offers its connect
//! tool until the turn's user is known, then that user's list.

use std::sync::Arc;

use futures::future::join_all;
use serde_json::Value;
use toolserver_domain::agent::mcp::McpServerSetting;
use toolserver_domain::{AccountId, ToolSetting, ValidationError};
use toolserver_store::{oauth_providers, StoreError};

use super::{model_facing, Described, RegistryError, ToolRegistry, ToolSources};
use crate::connections::ACCOUNT_USER;
use crate::tools::effects::{ConfigSource, Declared};
use crate::tools::mcp::{connect_tool, ActingUser, ConnectTool, Listing, RemoteTool, CONNECT_TOOL};

impl ToolRegistry {
    /// Adds the tools `server` offers as `<server_name>__<tool>`, from its
    /// `listing` (none for a server that acts through connections). A
    /// local tool whose name has that prefix is refused; a server that
    /// could not be listed adds nothing, with a warning. A server that
    /// acts through end users' connections adds its connect tool until
    /// [`Self::in_scope`] lists it for the turn's user; saving it needs the
    /// account to have its provider (a stored config is not checked for it
    /// again).
    pub(super) async fn add_remote(
        &mut self,
        sources: &ToolSources,
        account: &AccountId,
        server_name: &str,
        server: &McpServerSetting,
        listing: Option<Listing>,
        source: ConfigSource,
    ) -> Result<(), RegistryError> {
        let field = format!("config.mcpServers.{server_name}");
        let prefix = McpServerSetting::tool_name(server_name, "");
        if let Some(taken) = self.tools.keys().find(|name| name.starts_with(&prefix)) {
            return Err(ValidationError::new(
                field,
                format!(
                    "the tool {taken:?} already uses the prefix {prefix:?} of this server's tools"
                ),
            )
            .into());
        }
        if let Some(provider) = server.connection() {
            // Only a config being saved is checked: before a turn, a
            // missing provider is reported when a connection through it is
            // asked for, so turns read nothing for it.
            if matches!(source, ConfigSource::Saving) {
                match oauth_providers::get(&sources.pool, account, provider).await {
                    Ok(_) => {}
                    Err(StoreError::NotFound) => {
                        return Err(ValidationError::new(
                            format!("{field}.auth.provider"),
                            format!(
                                "the account has no OAuth provider {provider:?} (PUT /accounts/me/oauth-providers/{provider})"
                            ),
                        )
                        .into())
                    }
                    Err(err) => return Err(RegistryError::Store(err)),
                }
            }
            let (name, description, schema) = connect_tool(server_name, provider);
            let described = Described {
                name,
                tool_id: None,
                version: None,
                description,
                schema,
                implementation: Arc::new(ConnectTool {
                    clients: sources.mcp.clone(),
                    server_name: server_name.to_owned(),
                    server: server.clone(),
                    acting: ActingUser {
                        connections: sources.connections(),
                        account: account.clone(),
                        user: ACCOUNT_USER.to_owned(),
                    },
                }),
                conduct: Declared::connect().as_declared(),
            };
            self.insert(sources, &field, &ToolSetting::default(), described)?;
            self.user_servers
                .push((server_name.to_owned(), server.clone()));
            return Ok(());
        }
        match listing {
            Some(Ok(listed)) => self.add_listed(sources, server_name, server, &listed, None),
            Some(Err(error)) => self.warn(format!(
                "{field}: its tools are not offered this time: {error}"
            )),
            None => {}
        }
        Ok(())
    }

    /// Adds the tools `server` listed and offers, acting through `acting`'s
    /// connection when it is a server that acts through connections.
    fn add_listed(
        &mut self,
        sources: &ToolSources,
        server_name: &str,
        server: &McpServerSetting,
        listed: &[rmcp::model::Tool],
        acting: Option<ActingUser>,
    ) {
        let field = format!("config.mcpServers.{server_name}");
        for remote in listed.iter().filter(|tool| server.offers(&tool.name)) {
            let name = McpServerSetting::tool_name(server_name, &remote.name);
            if !model_facing(&name) {
                self.warn(format!(
                    "{field}: the tool {:?} is not offered: {name:?} is not 1-64 letters, digits, `-` or `_`",
                    remote.name
                ));
                continue;
            }
            let setting = ToolSetting {
                needs_approval: server.needs_approval.applies_to(&remote.name),
                ..ToolSetting::default()
            };
            let declared = Declared::remote(remote);
            let described = Described {
                name,
                tool_id: None,
                version: None,
                description: remote.description.as_deref().unwrap_or_default().to_owned(),
                schema: Value::Object(remote.input_schema.as_ref().clone()),
                implementation: Arc::new(RemoteTool {
                    clients: sources.mcp.clone(),
                    server: server.clone(),
                    name: remote.name.to_string(),
                    acting: acting.clone(),
                }),
                conduct: declared.as_declared(),
            };
            if let Err(err) = self.insert(sources, &field, &setting, described) {
                self.warn(err.message);
            }
        }
    }

    /// Lists, with `user`'s token, the servers that act through end users'
    /// connections, and offers their tools in place of their connect tools.
    /// A user without a usable connection keeps the connect tool.
    pub(super) async fn list_for_user(
        &mut self,
        sources: &ToolSources,
        account: &AccountId,
        user: &str,
    ) {
        let mut reachable = Vec::new();
        for (server_name, server) in self.user_servers.clone() {
            let Some(provider) = server.connection() else {
                continue;
            };
            let acting = ActingUser {
                connections: sources.connections(),
                account: account.clone(),
                user: user.to_owned(),
            };
            let Ok(token) = acting.token(provider).await else {
                continue;
            };
            let connect = McpServerSetting::tool_name(&server_name, CONNECT_TOOL);
            if let Some(tool) = self.tools.get_mut(&connect) {
                tool.hidden = true;
            }
            reachable.push((server_name, server, acting, token));
        }
        let listings = join_all(
            reachable
                .iter()
                .map(|(_, server, _, token)| sources.mcp.list(account, server, Some(token))),
        )
        .await;
        for ((server_name, server, acting, _), listing) in reachable.into_iter().zip(listings) {
            match listing {
                Ok(listed) => {
                    self.add_listed(sources, &server_name, &server, &listed, Some(acting))
                }
                Err(error) => self.warn(format!(
                    "config.mcpServers.{server_name}: its tools are not offered this time: {error}"
                )),
            }
        }
    }
}
