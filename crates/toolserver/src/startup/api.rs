//! The HTTP API's settings: limits, cross-origin access, the MCP server,
//! admission and the operator key.

use std::time::Duration;

use toolserver_api::admission::AdmissionSettings;
use toolserver_api::auth::OperatorKey;
use toolserver_api::cors::CorsSettings;
use toolserver_api::mcp::McpSettings;
use toolserver_api::ApiSettings;
use toolserver_domain::{AccountLimits, ToolLimits};

use crate::config::{AccountsConfig, CorsConfig, LimitsConfig, ServeConfig};

/// The API's settings, with `cors` already built.
pub(super) fn settings(
    config: &ServeConfig,
    cors: Option<CorsSettings>,
) -> anyhow::Result<ApiSettings> {
    let (limits, runners) = (&config.limits, &config.runners);
    let tool_limits = tool_limits(limits);
    Ok(ApiSettings {
        limits: tool_limits,
        signed_url_ttl: Duration::from_secs(config.bundles.bundle_url_ttl_secs),
        default_page_size: limits.default_page_size,
        max_page_size: limits.max_page_size,
        max_request_bytes: limits
            .max_request_bytes
            .unwrap_or_else(|| ApiSettings::room_for_uploads(&tool_limits)),
        max_uri_bytes: limits.max_uri_bytes,
        request_timeout: Duration::from_secs(limits.request_timeout_secs),
        default_tool_timeout: Duration::from_millis(runners.tool_timeout_ms),
        max_tool_timeout: Duration::from_millis(runners.max_tool_timeout_ms),
        max_output_bytes: runners.max_output_bytes,
        inline_bundle_max_bytes: runners.inline_bundle_max_bytes,
        cors,
        max_socket_requests: config.streams.ws_max_requests,
        mcp: mcp_settings(config),
        admission: admission_settings(&config.accounts),
        operator_key: operator_key(&config.accounts)?,
        usage_flush_interval: Duration::from_millis(config.accounts.usage_flush_ms),
        tool_cache_entries: runners.tool_cache_entries,
        invoke_idempotency_ttl: Duration::from_secs(limits.invoke_idempotency_ttl_secs),
    })
}

/// The limits on uploaded tools.
fn tool_limits(limits: &LimitsConfig) -> ToolLimits {
    ToolLimits {
        max_bundle_bytes: limits.max_bundle_bytes,
        max_description_chars: limits.max_description_chars,
        max_schema_bytes: limits.max_schema_bytes,
        max_config_bytes: limits.max_config_bytes,
        max_secret_chars: limits.max_secret_chars,
        max_secrets: limits.max_secrets,
        max_import_bytes: limits.max_import_bytes,
    }
}

/// Cross-origin access, said at start.
pub(super) fn cors_settings(config: &CorsConfig) -> anyhow::Result<Option<CorsSettings>> {
    let settings = CorsSettings::parse(
        &config.cors_allowed_origins,
        &config.cors_allowed_methods,
        &config.cors_allowed_headers,
        config.cors_allow_credentials,
        Duration::from_secs(config.cors_max_age_secs),
    )?;
    match &settings {
        Some(settings) => {
            tracing::info!(origins = ?settings.origins, "cross-origin requests allowed")
        }
        None => tracing::debug!(
            "no cross-origin requests allowed (TOOLSERVER_CORS_ALLOWED_ORIGINS is empty)"
        ),
    }
    Ok(settings)
}

/// The MCP server's settings; its metadata names the configured
/// authorization servers, else the JWT issuer when it is an http(s) URL,
/// else (an empty list) the server's own origin.
fn mcp_settings(config: &ServeConfig) -> McpSettings {
    let mcp = &config.mcp;
    let authorization_servers = match mcp.mcp_authorization_servers.is_empty() {
        true => config
            .auth
            .jwt_issuer
            .iter()
            .filter(|issuer| is_http_url(issuer))
            .cloned()
            .collect(),
        false => mcp.mcp_authorization_servers.clone(),
    };
    McpSettings {
        task_ttl: Duration::from_secs(mcp.mcp_task_ttl_secs),
        task_poll_interval: Duration::from_millis(mcp.mcp_task_poll_ms),
        task_inline_window: Duration::from_millis(mcp.mcp_task_inline_ms),
        page_size: mcp.mcp_page_size,
        allowed_hosts: mcp.mcp_allowed_hosts.clone(),
        authorization_servers,
    }
}

/// Whether `raw` is an absolute http(s) URL.
fn is_http_url(raw: &str) -> bool {
    url::Url::parse(raw).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
}

fn admission_settings(config: &AccountsConfig) -> AdmissionSettings {
    AdmissionSettings {
        enabled: config.admission,
        prompt_refusals: config.account_prompt_refusals,
        refusal_hold: Duration::from_millis(config.refusal_hold_ms),
        defaults: AccountLimits {
            concurrent_calls: config.account_concurrent_calls,
            open_turns: config.account_open_turns,
            pending_detached: config.account_pending_detached,
            live_runners: config.account_live_runners,
            mcp_tasks: config.account_mcp_tasks,
            calls_per_minute: config.account_calls_per_minute,
            call_burst: config.account_call_burst,
            turns_per_minute: config.account_turns_per_minute,
            turn_burst: config.account_turn_burst,
        },
    }
}

fn operator_key(config: &AccountsConfig) -> anyhow::Result<Option<OperatorKey>> {
    config
        .operator_key
        .as_ref()
        .map(|key| OperatorKey::new(key.expose().to_owned()))
        .transpose()
        .map_err(|err| anyhow::anyhow!("TOOLSERVER_OPERATOR_KEY: {err}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::command_line::{Cli, Command};

    fn serve(args: &[&str]) -> Result<ServeConfig, clap::Error> {
        let argv = ["toolserver", "serve"].iter().chain(args).copied();
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(config) => Ok(*config),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_metadata_names_the_configured_servers_else_an_http_issuer_else_none() {
        let configured = serve(&[
            "--mcp-authorization-servers",
            "https://as.example.com",
            "--jwt-issuer",
            "https://issuer.example.com",
        ])
        .unwrap();
        assert_eq!(
            mcp_settings(&configured).authorization_servers,
            ["https://as.example.com"]
        );
        let issuer = serve(&["--jwt-issuer", "https://issuer.example.com"]).unwrap();
        assert_eq!(
            mcp_settings(&issuer).authorization_servers,
            ["https://issuer.example.com"]
        );
        // An issuer that is no URL leaves the metadata to name the server's origin.
        let named = serve(&["--jwt-issuer", "platform"]).unwrap();
        assert!(mcp_settings(&named).authorization_servers.is_empty());
    }

    #[test]
    fn an_authorization_server_that_is_no_http_url_stops_the_start() {
        let err = serve(&["--mcp-authorization-servers", "issuer-without-scheme"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("issuer-without-scheme"), "{err}");
    }

    #[test]
    fn the_default_request_body_has_room_for_the_largest_upload() {
        let defaults = settings(&serve(&[]).unwrap(), None).unwrap();
        assert_eq!(
            defaults.max_request_bytes,
            ApiSettings::DEFAULT.max_request_bytes
        );
        let larger = settings(&serve(&["--max-bundle-bytes", "3000000"]).unwrap(), None).unwrap();
        assert!(larger.max_request_bytes > 4_000_000);
    }
}
