//! An account's stored tool as something to call: its bundle on its
//! runner, or its HTTP request made by the server.

use std::sync::Arc;

use serde_json::{Map, Value};
use toolserver_domain::AccountId;
use toolserver_store::{ToolBody, ToolRecord};

use super::http::{HttpToolCall, HttpToolContext};
use super::uploaded::UploadedTool;
use super::{Invocation, ToolEvents, ToolImpl, ToolSources};
use crate::connections::ACCOUNT_USER;
use crate::fetch_grant::FetchMinter;

/// How `account` calls `record`, with an agent's `options` (bundle tools).
pub(super) fn implementation(
    sources: &ToolSources,
    account: &AccountId,
    options: &Map<String, Value>,
    record: ToolRecord,
) -> Arc<dyn ToolImpl> {
    match &record.body {
        ToolBody::Http(tool) => Arc::new(HttpToolCall {
            context: http_context(sources),
            account: account.clone(),
            tool: Arc::new(tool.as_ref().clone()),
            egress: record.egress_allow.clone(),
            user: ACCOUNT_USER.to_owned(),
        }),
        ToolBody::Bundle { .. } => Arc::new(UploadedTool {
            account: account.clone(),
            options: options.clone(),
            executor: sources.executor.clone(),
            bundles: sources.bundles.clone(),
            settings: sources.runner.clone(),
            fetch: fetch_minter(sources),
            user: ACCOUNT_USER.to_owned(),
            record,
        }),
    }
}

/// What mints `ctx.fetch` access for bundle tools' calls, when the server
/// offers it.
pub fn fetch_minter(sources: &ToolSources) -> Option<FetchMinter> {
    sources.fetch_url.clone().map(|url| FetchMinter {
        url,
        sealer: sources.sealer.clone(),
    })
}

/// What requests the server makes for tools (HTTP tools, `ctx.fetch`) use.
pub fn http_context(sources: &ToolSources) -> HttpToolContext {
    HttpToolContext {
        pool: sources.pool.clone(),
        sealer: sources.sealer.clone(),
        client: sources.http.clone(),
        policy: sources.policy.clone(),
        max_output_bytes: sources.runner.max_output_bytes,
    }
}

/// The events of a call to `record` that the server runs itself (an HTTP
/// tool) for `account`'s end user `user`; `None` for a tool whose calls
/// run on a runner.
pub fn server_call(
    sources: &ToolSources,
    (account, user): (&AccountId, &str),
    record: &ToolRecord,
    invocation: Invocation,
) -> Option<ToolEvents> {
    match record.body {
        ToolBody::Http(_) => {
            let tool = implementation(sources, account, &Map::new(), record.clone());
            let tool = tool.for_user(user).unwrap_or(tool);
            Some(tool.call(invocation))
        }
        ToolBody::Bundle { .. } => None,
    }
}
