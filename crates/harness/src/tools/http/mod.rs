//! HTTP tools: the server makes the one request a tool's manifest
//! describes, filled from the call's input and the account's secrets, and
//! gives the model what the projection keeps of the answer. No runner is
//! involved; the request goes through the public-only outbound client and
//! the tool's egress allow list.

mod proxy;
mod request;
mod response;
mod secrets;

use std::sync::Arc;

use futures::StreamExt;
use sqlx::PgPool;
use toolserver_domain::http_tool::HttpTool;
use toolserver_domain::{AccountId, EgressAllowList};

use super::{Failure, FailureKind, Invocation, ToolEvent, ToolEvents, ToolImpl};
use crate::connections::{ConnectionError, Connections};
use crate::outbound::OutboundPolicy;
use crate::sealing::SecretBox;

pub use proxy::{proxy, FetchingTool, ProxyError, ProxyRequest, ProxyResponse};
pub use secrets::Redactor;

/// What HTTP tools of every account share.
#[derive(Clone)]
pub struct HttpToolContext {
    /// Where account secrets are kept.
    pub pool: PgPool,
    /// Opens them.
    pub sealer: SecretBox,
    /// The public-only outbound client.
    pub client: reqwest::Client,
    /// Which addresses it may reach.
    pub policy: OutboundPolicy,
    /// The server's cap on a call's output, which caps every answer read.
    pub max_output_bytes: u64,
}

impl HttpToolContext {
    /// Where end users' connections are kept and refreshed.
    pub fn connections(&self) -> Connections {
        Connections::new(
            self.pool.clone(),
            self.sealer.clone(),
            self.client.clone(),
            self.policy.clone(),
        )
    }
}

/// One account's HTTP tool.
#[derive(Clone)]
pub struct HttpToolCall {
    pub(in crate::tools) context: HttpToolContext,
    pub(in crate::tools) account: AccountId,
    pub(in crate::tools) tool: Arc<HttpTool>,
    pub(in crate::tools) egress: Option<EgressAllowList>,
    /// The end user calls act for (`""`: the account).
    pub(in crate::tools) user: String,
}

impl ToolImpl for HttpToolCall {
    fn call(&self, invocation: Invocation) -> ToolEvents {
        let call = self.clone();
        futures::stream::once(async move {
            match call.run(invocation).await {
                Ok(output) => ToolEvent::Output(output),
                Err(failure) => ToolEvent::Failed(failure),
            }
        })
        .boxed()
    }

    fn connection(&self) -> Option<&str> {
        self.tool.connection()
    }

    fn for_user(&self, user: &str) -> Option<Arc<dyn ToolImpl>> {
        self.tool.connection()?;
        Some(Arc::new(Self {
            user: user.to_owned(),
            ..self.clone()
        }))
    }
}

impl HttpToolCall {
    async fn run(&self, invocation: Invocation) -> Result<serde_json::Value, Failure> {
        let mut secrets = secrets::resolve(
            &self.context.pool,
            &self.context.sealer,
            &self.account,
            self.tool.secrets(),
        )
        .await?;
        if let Some(provider) = self.tool.connection() {
            let token = self
                .context
                .connections()
                .access_token(&self.account, &self.user, provider)
                .await
                .map_err(connection_failure)?;
            secrets.add_connection(provider, token);
        }
        let redactor = secrets.redactor();
        let request = request::build(
            &self.context,
            &self.tool,
            self.egress.as_ref(),
            &invocation.input,
            &secrets,
        )
        .map_err(|failure| redactor.failure(failure))?;
        let cap = self
            .tool
            .max_response_bytes
            .map_or(self.context.max_output_bytes, |cap| {
                cap.min(self.context.max_output_bytes)
            });
        let outcome = response::send(
            &self.context.client,
            request,
            invocation.timeout,
            cap,
            self.tool.projection.as_ref(),
        )
        .await;
        outcome
            .map(|output| redactor.value(output))
            .map_err(|failure| redactor.failure(failure))
    }
}

/// A call that cannot act through its connection fails: for good when the
/// connection is missing or failed (naming how to make it), as unreachable
/// when the provider could not refresh it now.
pub(crate) fn connection_failure(err: ConnectionError) -> Failure {
    match err {
        ConnectionError::NotConnected { .. } | ConnectionError::Failed { .. } => Failure::tool(format!(
            "{err}; the end user connects it when a turn asks, or through POST /accounts/me/connections/{{provider}}/authorize"
        )),
        ConnectionError::NoProvider(_) | ConnectionError::Refused(_) | ConnectionError::Sealing => {
            Failure::tool(err.to_string())
        }
        ConnectionError::Unreachable(_) | ConnectionError::Store(_) | ConnectionError::UnknownAuthorization => {
            Failure::new(FailureKind::Unreachable, err.to_string())
        }
    }
}
