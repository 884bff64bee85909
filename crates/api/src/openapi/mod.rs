//! The OpenAPI document: paths come from the routers themselves (each handler
//! carries its `#[utoipa::path]`), so a route cannot exist without its entry;
//! the rules requests are checked against come from `contract.yaml`, laid
//! over them. `openapi.yaml` at the repository root is this document,
//! checked for drift.

mod overlay;

pub use overlay::apply as apply_contract;

use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ErrorBody, ErrorDetail};

/// Top-level metadata and shared components.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolserver",
        description = "Multi-tenant tool execution server: upload tools, run them in isolated runners.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, ErrorDetail)),
    modifiers(&BearerAuth),
    tags(
        (name = "tools", description = "Account-owned tools: uploaded code, or HTTP requests the server makes (written, or imported from OpenAPI)"),
        (name = "agents", description = "Agents, their turns (AI SDK UI message streams) and conversations"),
        (name = "bundles", description = "Signed bundle downloads"),
        (name = "async", description = "Completion of detached async tool calls"),
        (name = "ledger", description = "Every attempt of every tool call: who made it, with what, how it ended"),
        (name = "policies", description = "The account's policies: which tool calls may run (allow, ask, deny), as Cedar"),
        (name = "approvals", description = "Tool calls waiting for a person's decision, decided from any client or a one-time link"),
        (name = "accounts", description = "The calling account's limits and usage"),
        (name = "secrets", description = "The account's named secrets, which HTTP tools use as `{{secret.NAME}}`; set and listed, never read back"),
        (name = "connections", description = "Per-user OAuth connections: the account's OAuth providers, end users' connections (tokens sealed, refreshed, never shown), and the redirect that completes an authorization"),
        (name = "operator", description = "Per-account limits, for the operator (the operator key, never a tenant token)"),
        (name = "health", description = "Probes"),
        (name = "mcp", description = "The account as an MCP server (streamable HTTP), and its OAuth protected-resource metadata"),
    ),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The operator key (TOOLSERVER_OPERATOR_KEY)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "jobToken",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                crate::routes::sandbox_jobs::JOB_TOKEN_HEADER,
                "The per-call job token handed to the runner",
            ))),
        );
    }
}
