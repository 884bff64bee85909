//! `config.mcpServers`: MCP servers whose tools an agent may call, each as
//! `{url, headers?, auth?, tools?, needsApproval?}`, where `auth` is
//! `{type: "bearer", token}` (one stored credential) or
//! `{type: "connection", provider}` (each end user's own OAuth connection).
//! A server's tools reach the model as `<server>__<tool>`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use url::Url;

use super::endpoint::{endpoint_pattern, parse_endpoint};
use crate::http_tool::is_secret_name;
use crate::ValidationError;

/// Most MCP servers one agent may name.
pub const MAX_MCP_SERVERS: usize = 16;

/// What separates a server's name from its tools' names.
pub const MCP_NAME_SEPARATOR: &str = "__";

/// The grammar of a server's `url`: an endpoint (see `BASE_URL_PATTERN`)
/// with an optional query. `openapi.yaml` states the same pattern.
pub const MCP_URL_PATTERN: &str = endpoint_pattern!(r"(?:\?[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?");

/// Longest remote tool name in `tools` and `needsApproval`, in characters.
pub const MAX_REMOTE_TOOL_NAME_CHARS: usize = 128;

/// The fields of one server of `config.mcpServers`.
pub const MCP_SERVER_FIELDS: &[&str] = &["url", "headers", "auth", "tools", "needsApproval"];

/// The fields of a server's `auth`.
pub const MCP_AUTH_FIELDS: &[&str] = &["type", "token", "provider"];

/// Headers a config may not set: the transport owns them.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "authorization",
    "mcp-session-id",
    "mcp-protocol-version",
];

/// Which of a server's tools wait for a person's approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpApproval {
    /// None (`false`, the default) or all (`true`).
    All(bool),
    /// Those named (remote names).
    Named(BTreeSet<String>),
}

impl McpApproval {
    /// Whether calls of the remote tool `name` wait for approval.
    pub fn applies_to(&self, name: &str) -> bool {
        match self {
            Self::All(all) => *all,
            Self::Named(names) => names.contains(name),
        }
    }
}

/// How requests to a server authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpAuth {
    /// One bearer token for every request (a stored credential).
    Bearer(String),
    /// The end user's access token of their connection to this OAuth
    /// provider of the account.
    Connection(String),
}

/// One configured MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSetting {
    /// The server's streamable HTTP endpoint.
    pub url: Url,
    /// Extra headers sent with every request.
    pub headers: BTreeMap<String, String>,
    /// What is sent as `Authorization`, if anything.
    pub auth: Option<McpAuth>,
    /// The remote tools offered to the model (remote names); `None`: all.
    pub tools: Option<BTreeSet<String>>,
    /// Which remote tools wait for approval.
    pub needs_approval: McpApproval,
}

impl McpServerSetting {
    /// The model-facing name of the remote tool `remote` of server `server`.
    pub fn tool_name(server: &str, remote: &str) -> String {
        format!("{server}{MCP_NAME_SEPARATOR}{remote}")
    }

    /// The OAuth provider whose end-user connection requests act through.
    pub fn connection(&self) -> Option<&str> {
        match &self.auth {
            Some(McpAuth::Connection(provider)) => Some(provider),
            _ => None,
        }
    }

    /// Whether the remote tool `name` is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.contains(name))
    }
}

/// Parses `config.mcpServers`.
pub fn parse_servers(
    value: Option<&Value>,
) -> Result<BTreeMap<String, McpServerSetting>, ValidationError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            return Err(ValidationError::new(
                "config.mcpServers",
                "must be an object of servers by name",
            ))
        }
    };
    if entries.len() > MAX_MCP_SERVERS {
        return Err(ValidationError::new(
            "config.mcpServers",
            format!(
                "names {} servers; the limit is {MAX_MCP_SERVERS}",
                entries.len()
            ),
        ));
    }
    let mut servers = BTreeMap::new();
    for (name, entry) in entries {
        let field = format!("config.mcpServers.{name}");
        if !valid_name(name) {
            return Err(ValidationError::new(
                field,
                "a server name is 1-32 letters, digits, `-` or `_`, without `__`",
            ));
        }
        let entry = entry
            .as_object()
            .ok_or_else(|| ValidationError::new(&field, "must be an object with a url"))?;
        servers.insert(name.clone(), parse_server(&field, entry)?);
    }
    Ok(servers)
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains(MCP_NAME_SEPARATOR)
}

fn parse_server(
    field: &str,
    entry: &Map<String, Value>,
) -> Result<McpServerSetting, ValidationError> {
    for key in entry.keys() {
        if !MCP_SERVER_FIELDS.contains(&key.as_str()) {
            return Err(ValidationError::new(
                format!("{field}.{key}"),
                format!(
                    "is not an MCP server field ({})",
                    MCP_SERVER_FIELDS.join(", ")
                ),
            ));
        }
    }
    let url = entry
        .get("url")
        .and_then(Value::as_str)
        .and_then(parse_url)
        .ok_or_else(|| {
            ValidationError::new(
                format!("{field}.url"),
                "must be an http(s) URL of a host name or IPv4 address, an optional port, path and query, nothing else",
            )
        })?;
    Ok(McpServerSetting {
        url,
        headers: parse_headers(field, entry.get("headers"))?,
        auth: parse_auth(field, entry.get("auth"))?,
        tools: parse_names(&format!("{field}.tools"), entry.get("tools"))?,
        needs_approval: match entry.get("needsApproval") {
            None => McpApproval::All(false),
            Some(Value::Bool(all)) => McpApproval::All(*all),
            Some(names) => McpApproval::Named(
                parse_names(&format!("{field}.needsApproval"), Some(names))?.unwrap_or_default(),
            ),
        },
    })
}

/// An endpoint of the MCP URL grammar ([`MCP_URL_PATTERN`]): with an optional
/// query, no user info or fragment.
pub(crate) fn parse_url(raw: &str) -> Option<Url> {
    static GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(MCP_URL_PATTERN).ok());
    parse_endpoint(raw, GRAMMAR.as_ref())
}

fn parse_headers(
    field: &str,
    value: Option<&Value>,
) -> Result<BTreeMap<String, String>, ValidationError> {
    let Some(value) = value else {
        return Ok(BTreeMap::new());
    };
    let field = format!("{field}.headers");
    let object = value
        .as_object()
        .ok_or_else(|| ValidationError::new(&field, "must be an object of header values"))?;
    let mut headers = BTreeMap::new();
    for (name, value) in object {
        let lower = name.to_ascii_lowercase();
        let token = !lower.is_empty()
            && lower
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c));
        if !token || RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(ValidationError::new(
                format!("{field}.{name}"),
                "is not a header a config may set (use auth for Authorization)",
            ));
        }
        let value = value
            .as_str()
            .filter(|v| v.chars().all(|c| c == '\t' || (' '..='~').contains(&c)))
            .ok_or_else(|| {
                ValidationError::new(
                    format!("{field}.{name}"),
                    "must be a string of visible ASCII",
                )
            })?;
        headers.insert(lower, value.to_owned());
    }
    Ok(headers)
}

fn parse_auth(field: &str, value: Option<&Value>) -> Result<Option<McpAuth>, ValidationError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let field = format!("{field}.auth");
    let object = value.as_object().ok_or_else(|| {
        ValidationError::new(
            &field,
            "must be {\"type\": \"bearer\", \"token\": \"…\"} or {\"type\": \"connection\", \"provider\": \"…\"}",
        )
    })?;
    for key in object.keys() {
        if !MCP_AUTH_FIELDS.contains(&key.as_str()) {
            return Err(ValidationError::new(
                format!("{field}.{key}"),
                format!("is not an auth field ({})", MCP_AUTH_FIELDS.join(", ")),
            ));
        }
    }
    let (kind, wanted, unwanted) = match object.get("type").and_then(Value::as_str) {
        Some("bearer") => ("bearer", "token", "provider"),
        Some("connection") => ("connection", "provider", "token"),
        _ => {
            return Err(ValidationError::new(
                format!("{field}.type"),
                "must be \"bearer\" or \"connection\"",
            ))
        }
    };
    if object.contains_key(unwanted) {
        return Err(ValidationError::new(
            format!("{field}.{unwanted}"),
            format!("is not a field of {kind} auth"),
        ));
    }
    let given = object.get(wanted).and_then(Value::as_str);
    match kind {
        "bearer" => given
            .filter(|token| !token.is_empty() && token.chars().all(|c| ('!'..='~').contains(&c)))
            .map(|token| Some(McpAuth::Bearer(token.to_owned())))
            .ok_or_else(|| {
                ValidationError::new(
                    format!("{field}.token"),
                    "must be a non-empty string of visible ASCII",
                )
            }),
        _ => given
            .filter(|provider| is_secret_name(provider))
            .map(|provider| Some(McpAuth::Connection(provider.to_owned())))
            .ok_or_else(|| {
                ValidationError::new(
                    format!("{field}.provider"),
                    "must name an OAuth provider of the account: 1-64 letters, digits or '_'",
                )
            }),
    }
}

fn parse_names(
    field: &str,
    value: Option<&Value>,
) -> Result<Option<BTreeSet<String>>, ValidationError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let names = value
        .as_array()
        .ok_or_else(|| ValidationError::new(field, "must be an array of tool names"))?;
    names
        .iter()
        .map(|name| {
            name.as_str()
                .filter(|name| {
                    !name.is_empty() && name.chars().count() <= MAX_REMOTE_TOOL_NAME_CHARS
                })
                .map(str::to_owned)
                .ok_or_else(|| ValidationError::new(field, "must hold tool names (strings)"))
        })
        .collect::<Result<BTreeSet<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_full_server_parses() {
        let servers = parse_servers(Some(&json!({"docs": {
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Team": "blue"},
            "auth": {"type": "bearer", "token": "t0k"},
            "tools": ["search", "fetch"],
            "needsApproval": ["fetch"],
        }})))
        .unwrap();
        let docs = &servers["docs"];
        assert_eq!(docs.headers["x-team"], "blue");
        assert_eq!(docs.auth, Some(McpAuth::Bearer("t0k".to_owned())));
        assert_eq!(docs.connection(), None);
        assert!(docs.offers("search") && !docs.offers("delete"));
        assert!(docs.needs_approval.applies_to("fetch"));
        assert!(!docs.needs_approval.applies_to("search"));
        assert_eq!(
            McpServerSetting::tool_name("docs", "search"),
            "docs__search"
        );
    }

    #[test]
    fn a_server_can_act_through_each_end_users_connection() {
        let servers = parse_servers(Some(&json!({"crm": {
            "url": "https://mcp.example.com/mcp",
            "auth": {"type": "connection", "provider": "crm_oauth"},
        }})))
        .unwrap();
        assert_eq!(servers["crm"].connection(), Some("crm_oauth"));
    }

    #[test]
    fn bad_servers_name_their_field() {
        let cases = [
            (
                json!({"a__b": {"url": "https://x.test/"}}),
                "config.mcpServers.a__b",
            ),
            (
                json!({"x": {"url": "ftp://x.test/"}}),
                "config.mcpServers.x.url",
            ),
            (
                json!({"x": {"url": "https://x.test/", "auth": {"type": "basic", "token": "t"}}}),
                "config.mcpServers.x.auth.type",
            ),
            (
                json!({"x": {"url": "https://x.test/", "auth": {"type": "connection"}}}),
                "config.mcpServers.x.auth.provider",
            ),
            (
                json!({"x": {"url": "https://x.test/", "auth": {"type": "connection", "provider": "a b"}}}),
                "config.mcpServers.x.auth.provider",
            ),
            (
                json!({"x": {"url": "https://x.test/", "auth": {"type": "connection", "provider": "p", "token": "t"}}}),
                "config.mcpServers.x.auth.token",
            ),
            (
                json!({"x": {"url": "https://x.test/", "auth": {"type": "bearer", "token": "t", "provider": "p"}}}),
                "config.mcpServers.x.auth.provider",
            ),
            (
                json!({"x": {"url": "https://x.test/", "headers": {"Authorization": "t"}}}),
                "config.mcpServers.x.headers.Authorization",
            ),
            (
                json!({"x": {"url": "https://x.test/", "tools": "all"}}),
                "config.mcpServers.x.tools",
            ),
            (
                json!({"x": {"url": "https://x.test/", "colour": 1}}),
                "config.mcpServers.x.colour",
            ),
        ];
        for (value, field) in cases {
            let err = parse_servers(Some(&value)).unwrap_err();
            assert_eq!(err.field, field, "{value}");
        }
    }
}
