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

use super::{Failure, Invocation, ToolEvent, ToolEvents, ToolImpl};
use crate::outbound::OutboundPolicy;
use crate::sealing::SecretBox;

pub use proxy::{proxy, ProxyError, ProxyRequest, ProxyResponse};
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

/// One account's HTTP tool.
#[derive(Clone)]
pub struct HttpToolCall {
    pub(in crate::tools) context: HttpToolContext,
    pub(in crate::tools) account: AccountId,
    pub(in crate::tools) tool: Arc<HttpTool>,
    pub(in crate::tools) egress: Option<EgressAllowList>,
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
}

impl HttpToolCall {
    async fn run(&self, invocation: Invocation) -> Result<serde_json::Value, Failure> {
        let secrets = secrets::resolve(
            &self.context.pool,
            &self.context.sealer,
            &self.account,
            &self.tool.secrets(),
        )
        .await?;
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
