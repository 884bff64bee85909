//! The `tools` section of an agent config: which tools are on, and how.

use std::fmt;

use serde_json::{Map, Value};

use crate::validation::whole_u64;
use crate::{ToolEffects, ToolId, ValidationError};

/// Longest `heartbeatTimeoutSeconds` or `timeoutSeconds` of an async tool (a week).
pub const MAX_DETACHED_SECS: u64 = 7 * 24 * 3600;

/// Longest `heldMessage` of the `handoff` tool, in characters.
pub const MAX_HELD_MESSAGE_CHARS: usize = 2000;

/// Most `staff` names the `handoff` tool may ping.
pub const MAX_HANDOFF_STAFF: usize = 20;

/// Name of the status tool registered automatically when any tool is async.
pub const ASYNC_STATUS_TOOL: &str = "async_status";

/// The fields of `config.tools.<key>` that say how a tool behaves; any other
/// field is an option of the tool.
pub const TOOL_FLAGS: &[&str] = &[
    "enabled",
    "async",
    "needsApproval",
    "timeoutMs",
    "heartbeatTimeoutSeconds",
    "timeoutSeconds",
    "effects",
    "safeToRepeat",
];

/// Tools compiled into the server, keyed by their model-facing name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BuiltinTool {
    /// Web search through Tavily's HTTP API.
    TavilySearch,
    /// Page content extraction through Tavily's HTTP API.
    TavilyExtract,
    /// The provider's own search tool (provider-defined, no local execute).
    GoogleSearch,
    /// Hands the conversation to people: holds it, announces it on a
    /// webhook, and tells the model.
    Handoff,
}

impl BuiltinTool {
    /// Every built-in tool.
    pub const ALL: [Self; 4] = [
        Self::TavilySearch,
        Self::TavilyExtract,
        Self::GoogleSearch,
        Self::Handoff,
    ];

    /// The config key and model-facing name.
    pub fn name(self) -> &'static str {
        match self {
            Self::TavilySearch => "tavilySearch",
            Self::TavilyExtract => "tavilyExtract",
            Self::GoogleSearch => "googleSearch",
            Self::Handoff => "handoff",
        }
    }

    /// Looks a built-in up by its name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// What calling the tool does: the Tavily tools and Google Search only
    /// read; `handoff` changes the conversation.
    pub fn effects(self) -> ToolEffects {
        match self {
            Self::TavilySearch | Self::TavilyExtract | Self::GoogleSearch => ToolEffects::Read,
            Self::Handoff => ToolEffects::SideEffect,
        }
    }

    /// Whether the server executes the tool (false for provider-defined tools).
    pub fn has_local_execute(self) -> bool {
        !matches!(self, Self::GoogleSearch)
    }

    /// The options an account may set on this tool, beside [`TOOL_FLAGS`].
    pub fn options(self) -> &'static [&'static str] {
        match self {
            Self::TavilySearch => &[
                "apiKey",
                "searchDepth",
                "topic",
                "maxResults",
                "includeDomains",
                "excludeDomains",
            ],
            Self::TavilyExtract => &["apiKey", "extractDepth"],
            Self::GoogleSearch => &[],
            Self::Handoff => &["webhookUrl", "heldMessage", "staff"],
        }
    }

    /// Checks one account-settable option of this tool.
    fn check_option(self, key: &str, value: &Value) -> Result<(), String> {
        if !self.options().contains(&key) {
            return Err(format!("is not an option of {}", self.name()));
        }
        let enum_of = |allowed: &[&str]| match value.as_str() {
            Some(s) if allowed.contains(&s) => Ok(()),
            _ => Err(format!("must be one of {}", allowed.join(", "))),
        };
        let domains = || match value.as_array() {
            Some(items) if items.iter().all(Value::is_string) => Ok(()),
            _ => Err("must be an array of domain names".to_owned()),
        };
        match (self, key) {
            (Self::TavilySearch | Self::TavilyExtract, "apiKey") => match value.as_str() {
                Some(s) if !s.is_empty() => Ok(()),
                _ => Err("must be a non-empty string".into()),
            },
            (Self::TavilySearch, "searchDepth") => enum_of(&["basic", "advanced"]),
            (Self::TavilySearch, "topic") => enum_of(&["general", "news", "finance"]),
            (Self::TavilySearch, "maxResults") => match whole_u64(value) {
                Some(1..=20) => Ok(()),
                _ => Err("must be an integer from 1 to 20".into()),
            },
            (Self::TavilySearch, "includeDomains" | "excludeDomains") => domains(),
            (Self::TavilyExtract, "extractDepth") => enum_of(&["basic", "advanced"]),
            (Self::Handoff, "webhookUrl") => match value.as_str().and_then(super::mcp::parse_url) {
                Some(_) => Ok(()),
                None => Err("must be an http(s) URL with a host name or IPv4 address, an optional port, path and query".into()),
            },
            (Self::Handoff, "heldMessage") => match value.as_str() {
                Some(s) if (1..=MAX_HELD_MESSAGE_CHARS).contains(&s.chars().count()) => Ok(()),
                _ => Err(format!(
                    "must be a string of 1 to {MAX_HELD_MESSAGE_CHARS} characters"
                )),
            },
            (Self::Handoff, "staff") => match value.as_array() {
                Some(names)
                    if names.len() <= MAX_HANDOFF_STAFF
                        && names.iter().all(|name| {
                            name.as_str()
                                .is_some_and(|name| (1..=100).contains(&name.chars().count()))
                        }) =>
                {
                    Ok(())
                }
                _ => Err(format!(
                    "must be an array of at most {MAX_HANDOFF_STAFF} names of 1 to 100 characters"
                )),
            },
            _ => Err(format!("has no rule to check it by on {}", self.name())),
        }
    }
}

/// A key of `config.tools`: a built-in name or the id of an uploaded tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolKey {
    /// A compiled-in tool.
    Builtin(BuiltinTool),
    /// One of the account's uploaded tools.
    Uploaded(ToolId),
}

impl ToolKey {
    /// Parses a key; unknown keys are rejected with the field named.
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let field = format!("config.tools.{raw}");
        if let Some(builtin) = BuiltinTool::from_name(raw) {
            return Ok(Self::Builtin(builtin));
        }
        if let Some(id) = ToolId::parse(raw) {
            return Ok(Self::Uploaded(id));
        }
        let message = if raw == ASYNC_STATUS_TOOL {
            "async_status is registered automatically when any tool is async; do not configure it"
                .to_owned()
        } else {
            let names: Vec<_> = BuiltinTool::ALL.iter().map(|t| t.name()).collect();
            format!(
                "unknown tool: use a built-in ({}) or the toolId of one of your uploaded tools",
                names.join(", ")
            )
        };
        Err(ValidationError::new(field, message))
    }
}

impl fmt::Display for ToolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Builtin(tool) => f.write_str(tool.name()),
            Self::Uploaded(id) => id.fmt(f),
        }
    }
}

/// How one configured tool behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSetting {
    /// `enabled: false` turns the tool off; absent means on.
    pub enabled: bool,
    /// Whether the model gets a pending result at once and the result later.
    pub run_async: bool,
    /// Whether each call waits for a person's approval.
    pub needs_approval: bool,
    /// Per-call deadline override, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Async tools: a detached call expires when no heartbeat arrives for
    /// this many seconds (`heartbeatTimeoutSeconds`).
    pub heartbeat_timeout_secs: Option<u64>,
    /// Async tools: a detached call expires this many seconds after launch
    /// whatever its heartbeats (`timeoutSeconds`; default: the server's TTL).
    pub detached_timeout_secs: Option<u64>,
    /// The effects this agent declares for the tool (`effects`), which may
    /// only narrow the tool's own; the deprecated `safeToRepeat: false`
    /// reads as `side_effect`. `None`: the tool's own effects.
    pub effects: Option<ToolEffects>,
    /// The deprecated `safeToRepeat: true` (async tools): a claim that the
    /// tool may run a call again, which holds only where the tool's
    /// effects allow it; the effects alone decide.
    pub claims_safe_to_repeat: bool,
    /// Everything else: tool options (merged over an uploaded tool's `defaultConfig`).
    pub options: Map<String, Value>,
}

impl Default for ToolSetting {
    /// Enabled, inline, no approval, the server's deadlines, no options.
    fn default() -> Self {
        Self {
            enabled: true,
            run_async: false,
            needs_approval: false,
            timeout_ms: None,
            heartbeat_timeout_secs: None,
            detached_timeout_secs: None,
            effects: None,
            claims_safe_to_repeat: false,
            options: Map::new(),
        }
    }
}

impl ToolSetting {
    /// Parses the value of `config.tools.<key>`; `max_timeout_ms` bounds `timeoutMs`.
    pub fn parse(
        key: ToolKey,
        value: &Value,
        max_timeout_ms: u64,
    ) -> Result<Self, ValidationError> {
        let base = format!("config.tools.{key}");
        let Some(object) = value.as_object() else {
            return Err(ValidationError::new(base, "must be an object"));
        };
        let flag = |name: &str| match object.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(ValidationError::new(
                format!("{base}.{name}"),
                "must be true or false",
            )),
        };
        let timeout_ms = match object.get("timeoutMs") {
            None => None,
            Some(value) => match whole_u64(value) {
                Some(ms) if (1..=max_timeout_ms).contains(&ms) => Some(ms),
                _ => {
                    return Err(ValidationError::new(
                        format!("{base}.timeoutMs"),
                        format!("must be an integer from 1 to {max_timeout_ms}"),
                    ))
                }
            },
        };
        let run_async = flag("async")?.unwrap_or(false);
        let seconds = |name: &str| match object.get(name) {
            None => Ok(None),
            Some(_) if !run_async => Err(ValidationError::new(
                format!("{base}.{name}"),
                "applies only to async tools (set async: true)",
            )),
            Some(value) => match whole_u64(value) {
                Some(secs) if (1..=MAX_DETACHED_SECS).contains(&secs) => Ok(Some(secs)),
                _ => Err(ValidationError::new(
                    format!("{base}.{name}"),
                    format!("must be an integer from 1 to {MAX_DETACHED_SECS}"),
                )),
            },
        };
        let declared = object
            .get("effects")
            .map(|value| ToolEffects::parse_value(&format!("{base}.effects"), value))
            .transpose()?;
        let safe_to_repeat = flag("safeToRepeat")?;
        let refuse_repeat = |message: &str| {
            Err(ValidationError::new(
                format!("{base}.safeToRepeat"),
                message,
            ))
        };
        let (effects, claims_safe_to_repeat) = match (declared, safe_to_repeat) {
            (Some(_), Some(_)) => {
                return refuse_repeat(
                    "is deprecated and cannot be combined with effects: declare effects alone",
                )
            }
            (_, Some(true)) if !run_async => {
                return refuse_repeat("applies only to async tools (set async: true)")
            }
            (None, Some(false)) => (Some(ToolEffects::SideEffect), false),
            (None, Some(true)) => (None, true),
            (declared, None) => (declared, false),
        };
        let heartbeat_timeout_secs = seconds("heartbeatTimeoutSeconds")?;
        let detached_timeout_secs = seconds("timeoutSeconds")?;
        let mut options = Map::new();
        for (name, option) in object {
            if TOOL_FLAGS.contains(&name.as_str()) {
                continue;
            }
            if let ToolKey::Builtin(builtin) = key {
                builtin
                    .check_option(name, option)
                    .map_err(|message| ValidationError::new(format!("{base}.{name}"), message))?;
            }
            options.insert(name.clone(), option.clone());
        }
        Ok(Self {
            enabled: flag("enabled")?.unwrap_or(true),
            run_async,
            needs_approval: flag("needsApproval")?.unwrap_or(false),
            timeout_ms,
            heartbeat_timeout_secs,
            detached_timeout_secs,
            effects,
            claims_safe_to_repeat,
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_builtins_or_tool_ids() {
        assert_eq!(
            ToolKey::parse("tavilySearch").unwrap(),
            ToolKey::Builtin(BuiltinTool::TavilySearch)
        );
        let id = ToolId::generate();
        assert_eq!(
            ToolKey::parse(&id.to_string()).unwrap(),
            ToolKey::Uploaded(id)
        );
        for bad in ["bash", "async_status", "tool_nope", "handoffs"] {
            let err = ToolKey::parse(bad).unwrap_err();
            assert_eq!(err.field, format!("config.tools.{bad}"));
        }
    }

    #[test]
    fn settings_default_to_enabled_and_check_builtin_options() {
        let key = ToolKey::Builtin(BuiltinTool::TavilySearch);
        let on = ToolSetting::parse(key, &json!({"maxResults": 5}), 1000).unwrap();
        assert!(on.enabled && !on.run_async && !on.needs_approval);
        assert_eq!(
            on.options,
            json!({"maxResults": 5}).as_object().unwrap().clone()
        );
        let off = ToolSetting::parse(key, &json!({"enabled": false}), 1000).unwrap();
        assert!(!off.enabled);
        for (bad, field) in [
            (
                json!({"maxResults": 50}),
                "config.tools.tavilySearch.maxResults",
            ),
            (
                json!({"searchDepth": "deep"}),
                "config.tools.tavilySearch.searchDepth",
            ),
            (json!({"colour": "red"}), "config.tools.tavilySearch.colour"),
            (json!({"async": "yes"}), "config.tools.tavilySearch.async"),
            (
                json!({"timeoutMs": 5000}),
                "config.tools.tavilySearch.timeoutMs",
            ),
            (json!(true), "config.tools.tavilySearch"),
        ] {
            assert_eq!(
                ToolSetting::parse(key, &bad, 1000).unwrap_err().field,
                field
            );
        }
    }

    #[test]
    fn heartbeat_settings_belong_to_async_tools() {
        let key = ToolKey::Uploaded(ToolId::generate());
        let setting = ToolSetting::parse(
            key,
            &json!({"async": true, "heartbeatTimeoutSeconds": 5, "timeoutSeconds": 60, "safeToRepeat": true}),
            1000,
        )
        .unwrap();
        assert_eq!(setting.heartbeat_timeout_secs, Some(5));
        assert_eq!(setting.detached_timeout_secs, Some(60));
        assert!(setting.claims_safe_to_repeat);
        assert_eq!(setting.effects, None);
        assert!(setting.options.is_empty());
        for (bad, field) in [
            (
                json!({"heartbeatTimeoutSeconds": 5}),
                "heartbeatTimeoutSeconds",
            ),
            (
                json!({"async": true, "heartbeatTimeoutSeconds": 0}),
                "heartbeatTimeoutSeconds",
            ),
            (
                json!({"async": true, "timeoutSeconds": "1"}),
                "timeoutSeconds",
            ),
            (json!({"safeToRepeat": true}), "safeToRepeat"),
        ] {
            let err = ToolSetting::parse(key, &bad, 1000).unwrap_err();
            assert_eq!(err.field, format!("config.tools.{key}.{field}"));
        }
    }

    #[test]
    fn effects_are_declared_and_the_old_safe_to_repeat_reads_as_them() {
        let key = ToolKey::Uploaded(ToolId::generate());
        let parse = |value: Value| ToolSetting::parse(key, &value, 1000);
        assert_eq!(parse(json!({})).unwrap().effects, None);
        assert_eq!(
            parse(json!({"effects": "idempotent"})).unwrap().effects,
            Some(ToolEffects::Idempotent)
        );
        let refused = parse(json!({"safeToRepeat": false})).unwrap();
        assert_eq!(refused.effects, Some(ToolEffects::SideEffect));
        assert!(!refused.claims_safe_to_repeat);
        assert!(refused.options.is_empty());
        for (bad, field) in [
            (json!({"effects": "write"}), "effects"),
            (json!({"effects": true}), "effects"),
            (
                json!({"async": true, "effects": "read", "safeToRepeat": true}),
                "safeToRepeat",
            ),
            (
                json!({"effects": "side_effect", "safeToRepeat": false}),
                "safeToRepeat",
            ),
        ] {
            let err = parse(bad.clone()).unwrap_err();
            assert_eq!(err.field, format!("config.tools.{key}.{field}"), "{bad}");
        }
    }

    #[test]
    fn uploaded_tools_take_any_options() {
        let key = ToolKey::Uploaded(ToolId::generate());
        let setting =
            ToolSetting::parse(key, &json!({"async": true, "region": "eu"}), 1000).unwrap();
        assert!(setting.run_async);
        assert_eq!(setting.options["region"], "eu");
    }
}
