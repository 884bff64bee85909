//! The agent config document and its validation.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use url::Url;

use super::channels::{parse_channels, ChannelSetting};
use super::endpoint::{endpoint_pattern, parse_endpoint};
use super::mcp::{parse_servers, McpServerSetting};
use super::tools::{ToolKey, ToolSetting};
use crate::validation::{whole_i64, whole_u64};
use crate::{refuse_nul, ToolId, ValidationError};

/// Model providers the server has adapters for.
pub const PROVIDERS: &[&str] = &["openai", "anthropic", "google"];

/// The fields of an agent config.
pub const CONFIG_FIELDS: &[&str] = &[
    "model",
    "provider",
    "systemPrompt",
    "maxSteps",
    "tools",
    "onDisconnect",
    "mcpServers",
    "channels",
    "policies",
];

/// Longest `policies` text of an agent config, in characters.
pub const MAX_AGENT_POLICY_CHARS: usize = 65_536;

/// The fields of `config.model`.
pub const MODEL_FIELDS: &[&str] = &["provider", "modelId", "options"];

/// The generation options of `config.model.options`.
pub const MODEL_OPTIONS: &[&str] = &["temperature", "topP", "maxOutputTokens", "seed"];

/// The fields of one provider's entry in `config.provider`.
pub const PROVIDER_FIELDS: &[&str] = &["apiKey", "baseUrl"];

/// Bounds on agent configs; every one is a server setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// Step limit when the config names none.
    pub default_steps: u32,
    /// Largest `maxSteps` a config may ask for.
    pub max_steps: u32,
    /// Longest system prompt, in characters.
    pub max_system_prompt_chars: usize,
    /// Largest config, in bytes of compact JSON.
    pub max_config_bytes: usize,
    /// Longest per-tool `timeoutMs`.
    pub max_tool_timeout_ms: u64,
}

impl AgentLimits {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        default_steps: 10,
        max_steps: 50,
        max_system_prompt_chars: 32_768,
        max_config_bytes: 131_072,
        max_tool_timeout_ms: 600_000,
    };
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which model to run, and with which generation options.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// One of [`PROVIDERS`].
    pub provider: String,
    /// The provider's model id.
    pub model_id: String,
    /// `temperature`, `topP`, `maxOutputTokens`, `seed`.
    pub options: Map<String, Value>,
}

/// How to reach one provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderCredentials {
    /// The account's key; the server's fallback key is used when absent.
    pub api_key: Option<String>,
    /// An OpenAI-compatible endpoint; the server's default when absent.
    pub base_url: Option<Url>,
}

/// A validated agent config.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The model.
    pub model: ModelSpec,
    /// Credentials by provider name.
    pub providers: BTreeMap<String, ProviderCredentials>,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Most model passes per turn.
    pub max_steps: u32,
    /// Configured tools, enabled or not.
    pub tools: BTreeMap<ToolKey, ToolSetting>,
    /// What a streaming turn does when its client goes away.
    pub on_disconnect: OnDisconnect,
    /// MCP servers whose tools the agent may call, by name.
    pub mcp_servers: BTreeMap<String, McpServerSetting>,
    /// Chat channels the agent is reached through, by name.
    pub channels: BTreeMap<String, ChannelSetting>,
    /// The agent's layer of policies (Cedar text), which can only narrow
    /// the account's; checked as Cedar by the harness.
    pub policies: Option<String>,
}

/// What a streaming turn does when the client of its request goes away
/// (config `onDisconnect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDisconnect {
    /// `"continue"` (the default): the turn runs on and is recorded, and a
    /// resume picks it up.
    #[default]
    Continue,
    /// `"cancel"`: the turn stops, as a stop request stops it.
    Cancel,
}

impl AgentConfig {
    /// Parses and validates a config document (with its credentials in place).
    pub fn parse(value: &Value, limits: &AgentLimits) -> Result<Self, ValidationError> {
        let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
        if size > limits.max_config_bytes {
            return Err(ValidationError::new(
                "config",
                format!(
                    "is {size} bytes of JSON; the limit is {}",
                    limits.max_config_bytes
                ),
            ));
        }
        let object = value
            .as_object()
            .ok_or_else(|| ValidationError::new("config", "must be an object"))?;
        refuse_nul("config", value)?;
        for key in object.keys() {
            if !CONFIG_FIELDS.contains(&key.as_str()) {
                return Err(ValidationError::new(
                    format!("config.{key}"),
                    format!("is not a config field ({})", CONFIG_FIELDS.join(", ")),
                ));
            }
        }
        let model = parse_model(object.get("model"))?;
        let providers = parse_providers(object.get("provider"))?;
        let system_prompt = match object.get("systemPrompt") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= limits.max_system_prompt_chars => {
                Some(s.clone())
            }
            Some(_) => {
                return Err(ValidationError::new(
                    "config.systemPrompt",
                    format!(
                        "must be a string of at most {} characters",
                        limits.max_system_prompt_chars
                    ),
                ))
            }
        };
        let max_steps = match object.get("maxSteps") {
            None => limits.default_steps,
            Some(value) => match whole_u64(value) {
                Some(n) if n >= 1 && n <= u64::from(limits.max_steps) => n as u32,
                _ => {
                    return Err(ValidationError::new(
                        "config.maxSteps",
                        format!("must be an integer from 1 to {}", limits.max_steps),
                    ))
                }
            },
        };
        let on_disconnect = match object.get("onDisconnect").map(Value::as_str) {
            None | Some(Some("continue")) => OnDisconnect::Continue,
            Some(Some("cancel")) => OnDisconnect::Cancel,
            Some(_) => {
                return Err(ValidationError::new(
                    "config.onDisconnect",
                    "must be \"continue\" or \"cancel\"",
                ))
            }
        };
        let mut tools = BTreeMap::new();
        match object.get("tools") {
            None => {}
            Some(Value::Object(entries)) => {
                for (key, setting) in entries {
                    let key = ToolKey::parse(key)?;
                    let setting = ToolSetting::parse(key, setting, limits.max_tool_timeout_ms)?;
                    tools.insert(key, setting);
                }
            }
            Some(_) => return Err(ValidationError::new("config.tools", "must be an object")),
        }
        let mcp_servers = parse_servers(object.get("mcpServers"))?;
        let channels = parse_channels(object.get("channels"))?;
        let policies = match object.get("policies") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.chars().count() <= MAX_AGENT_POLICY_CHARS => {
                Some(text.clone())
            }
            Some(_) => {
                return Err(ValidationError::new(
                    "config.policies",
                    format!(
                        "must be Cedar policy text (a string) of at most {MAX_AGENT_POLICY_CHARS} characters"
                    ),
                ))
            }
        };
        Ok(Self {
            model,
            providers,
            system_prompt,
            max_steps,
            tools,
            on_disconnect,
            mcp_servers,
            channels,
            policies,
        })
    }

    /// The credentials of the model's provider (empty when not configured).
    pub fn model_credentials(&self) -> ProviderCredentials {
        self.providers
            .get(&self.model.provider)
            .cloned()
            .unwrap_or_default()
    }

    /// Enabled tools, in key order.
    pub fn enabled_tools(&self) -> impl Iterator<Item = (ToolKey, &ToolSetting)> {
        self.tools
            .iter()
            .filter(|(_, setting)| setting.enabled)
            .map(|(key, setting)| (*key, setting))
    }

    /// Every uploaded tool the config names, enabled or not.
    pub fn uploaded_tool_ids(&self) -> Vec<ToolId> {
        self.tools
            .keys()
            .filter_map(|key| match key {
                ToolKey::Uploaded(id) => Some(*id),
                ToolKey::Builtin(_) => None,
            })
            .collect()
    }
}

fn parse_model(value: Option<&Value>) -> Result<ModelSpec, ValidationError> {
    let object = value.and_then(Value::as_object).ok_or_else(|| {
        ValidationError::new("config.model", "is required: { provider, modelId }")
    })?;
    for key in object.keys() {
        if !MODEL_FIELDS.contains(&key.as_str()) {
            return Err(ValidationError::new(
                format!("config.model.{key}"),
                format!("is not a model field ({})", MODEL_FIELDS.join(", ")),
            ));
        }
    }
    let provider = match object.get("provider").and_then(Value::as_str) {
        Some(p) if PROVIDERS.contains(&p) => p.to_owned(),
        _ => {
            return Err(ValidationError::new(
                "config.model.provider",
                format!("must be one of: {}", PROVIDERS.join(", ")),
            ))
        }
    };
    let model_id = match object.get("modelId").and_then(Value::as_str) {
        Some(id) if !id.trim().is_empty() && id.chars().count() <= 200 => id.to_owned(),
        _ => {
            return Err(ValidationError::new(
                "config.model.modelId",
                "must be a string of 1-200 characters, not blank",
            ))
        }
    };
    let options = match object.get("options") {
        None => Map::new(),
        Some(Value::Object(options)) => {
            for (key, value) in options {
                if !MODEL_OPTIONS.contains(&key.as_str()) {
                    return Err(ValidationError::new(
                        format!("config.model.options.{key}"),
                        format!("is not a model option ({})", MODEL_OPTIONS.join(", ")),
                    ));
                }
                check_model_option(key, value).map_err(|message| {
                    ValidationError::new(format!("config.model.options.{key}"), message)
                })?;
            }
            options.clone()
        }
        Some(_) => {
            return Err(ValidationError::new(
                "config.model.options",
                "must be an object",
            ))
        }
    };
    Ok(ModelSpec {
        provider,
        model_id,
        options,
    })
}

fn check_model_option(key: &str, value: &Value) -> Result<(), String> {
    let number_in = |lo: f64, hi: f64| match value.as_f64() {
        Some(x) if (lo..=hi).contains(&x) => Ok(()),
        _ => Err(format!("must be a number from {lo} to {hi}")),
    };
    match key {
        "temperature" => number_in(0.0, 2.0),
        "topP" => number_in(0.0, 1.0),
        "maxOutputTokens" => match whole_u64(value) {
            Some(1..=1_000_000) => Ok(()),
            _ => Err("must be an integer from 1 to 1000000".into()),
        },
        "seed" => match whole_i64(value) {
            Some(_) => Ok(()),
            None => Err("must be an integer".into()),
        },
        _ => Err("has no rule to check it by".into()),
    }
}

fn parse_providers(
    value: Option<&Value>,
) -> Result<BTreeMap<String, ProviderCredentials>, ValidationError> {
    let mut providers = BTreeMap::new();
    let Some(value) = value else {
        return Ok(providers);
    };
    let object = value
        .as_object()
        .ok_or_else(|| ValidationError::new("config.provider", "must be an object"))?;
    for (name, entry) in object {
        let base = format!("config.provider.{name}");
        if !PROVIDERS.contains(&name.as_str()) {
            return Err(ValidationError::new(
                base,
                format!("unknown provider; known: {}", PROVIDERS.join(", ")),
            ));
        }
        let entry = entry
            .as_object()
            .ok_or_else(|| ValidationError::new(base.clone(), "must be an object"))?;
        let mut credentials = ProviderCredentials::default();
        for (key, value) in entry {
            let field = format!("{base}.{key}");
            if !PROVIDER_FIELDS.contains(&key.as_str()) {
                return Err(ValidationError::new(
                    field,
                    format!("is not a provider field ({})", PROVIDER_FIELDS.join(", ")),
                ));
            }
            match (key.as_str(), value) {
                ("apiKey", Value::String(k)) if !k.is_empty() => {
                    credentials.api_key = Some(k.clone());
                }
                ("baseUrl", value) => {
                    let url = value.as_str().and_then(parse_base_url).ok_or_else(|| {
                        ValidationError::new(
                            &field,
                            "must be an http(s) URL of a host name or IPv4 address, an optional port and path, nothing else",
                        )
                    })?;
                    credentials.base_url = Some(url);
                }
                _ => return Err(ValidationError::new(field, "must be a non-empty string")),
            }
        }
        providers.insert(name.clone(), credentials);
    }
    Ok(providers)
}

/// The grammar of a model endpoint (`baseUrl`): an endpoint without a
/// query. `openapi.yaml` states the same pattern.
pub const BASE_URL_PATTERN: &str = endpoint_pattern!("");

fn parse_base_url(raw: &str) -> Option<Url> {
    static GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(BASE_URL_PATTERN).ok());
    parse_endpoint(raw, GRAMMAR.as_ref())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::BuiltinTool;

    fn parse(value: Value) -> Result<AgentConfig, ValidationError> {
        AgentConfig::parse(&value, &AgentLimits::default())
    }

    #[test]
    fn a_full_config_parses() {
        let id = ToolId::generate();
        let config = parse(json!({
            "model": {"provider": "openai", "modelId": "gpt-x", "options": {"temperature": 0.2}},
            "provider": {"openai": {"apiKey": "sk", "baseUrl": "http://127.0.0.1:9/v1"}},
            "systemPrompt": "Be brief.",
            "maxSteps": 4,
            "tools": {"tavilySearch": {"maxResults": 3}, id.to_string(): {"async": true}, "googleSearch": {"enabled": false}},
        }))
        .unwrap();
        assert_eq!(config.max_steps, 4);
        assert_eq!(config.model_credentials().api_key.as_deref(), Some("sk"));
        let enabled: Vec<_> = config.enabled_tools().map(|(k, _)| k).collect();
        assert_eq!(
            enabled,
            vec![
                ToolKey::Builtin(BuiltinTool::TavilySearch),
                ToolKey::Uploaded(id)
            ]
        );
        assert_eq!(config.uploaded_tool_ids(), vec![id]);
        assert_eq!(config.on_disconnect, OnDisconnect::Continue);
    }

    #[test]
    fn on_disconnect_takes_continue_or_cancel() {
        let config = |value: Value| {
            parse(json!({"model": {"provider": "openai", "modelId": "m"}, "onDisconnect": value}))
        };
        assert_eq!(
            config(json!("cancel")).unwrap().on_disconnect,
            OnDisconnect::Cancel
        );
        assert_eq!(
            config(json!("continue")).unwrap().on_disconnect,
            OnDisconnect::Continue
        );
        for bad in [json!("stop"), json!(true), json!(null)] {
            assert_eq!(config(bad).unwrap_err().field, "config.onDisconnect");
        }
    }

    #[test]
    fn the_base_url_grammar_compiles_and_takes_plain_endpoints() {
        assert!(regex::Regex::new(BASE_URL_PATTERN).is_ok());
        for good in [
            "https://api.openai.com/v1",
            "http://10.0.0.1:8080",
            "http://localhost:9/v1/",
        ] {
            assert!(parse_base_url(good).is_some(), "{good}");
        }
    }

    #[test]
    fn each_bad_field_is_named() {
        let model = json!({"provider": "openai", "modelId": "m"});
        for (bad, field) in [
            (json!({}), "config.model"),
            (
                json!({"model": {"provider": "acme", "modelId": "m"}}),
                "config.model.provider",
            ),
            (
                json!({"model": {"provider": "openai"}}),
                "config.model.modelId",
            ),
            (
                json!({"model": {"provider": "openai", "modelId": "m", "options": {"temperature": 9}}}),
                "config.model.options.temperature",
            ),
            (json!({"model": model, "maxSteps": 0}), "config.maxSteps"),
            (json!({"model": model, "maxSteps": 51}), "config.maxSteps"),
            (
                json!({"model": model, "tools": {"nope": {}}}),
                "config.tools.nope",
            ),
            (
                json!({"model": model, "provider": {"openai": {"baseUrl": "ftp://x"}}}),
                "config.provider.openai.baseUrl",
            ),
            (
                json!({"model": model, "provider": {"other": {}}}),
                "config.provider.other",
            ),
            (json!({"model": model, "extra": 1}), "config.extra"),
            (
                json!({"model": model, "provider": {"openai": {"baseUrl": "https://a.example/v1?x=1"}}}),
                "config.provider.openai.baseUrl",
            ),
            (
                json!({"model": model, "provider": {"openai": {"baseUrl": "https://a.example*/v1"}}}),
                "config.provider.openai.baseUrl",
            ),
            (
                json!({"model": model, "provider": {"openai": {"baseUrl": "http://1.2.3.999/"}}}),
                "config.provider.openai.baseUrl",
            ),
        ] {
            assert_eq!(parse(bad.clone()).unwrap_err().field, field, "{bad}");
        }
    }
}
