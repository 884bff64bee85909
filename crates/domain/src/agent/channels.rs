//! `config.channels`: chat channels an agent is reached through, each as
//! `{type: "slack" | "telegram" | "webhook", …}` by name. A channel's
//! secrets (signing secret, bot token, shared secret) are stored sealed,
//! like provider keys; its API base URL may be pointed elsewhere (a proxy,
//! a test server).

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use url::Url;

use super::endpoint::{endpoint_pattern, parse_endpoint};
use crate::ValidationError;

/// Most channels one agent may name.
pub const MAX_CHANNELS: usize = 8;

/// The channel types, as `type` names them.
pub const CHANNEL_TYPES: &[&str] = &["slack", "telegram", "webhook"];

/// The secret fields of a channel; they are sealed at rest.
pub const CHANNEL_SECRET_FIELDS: &[&str] = &["signingSecret", "botToken", "secretToken", "secret"];

/// Longest secret a channel field holds, in characters.
pub const MAX_CHANNEL_SECRET_CHARS: usize = 512;

/// Slack's Web API when `apiBaseUrl` is not given.
pub const SLACK_API: &str = "https://slack.com/api";

/// Telegram's Bot API when `apiBaseUrl` is not given.
pub const TELEGRAM_API: &str = "https://api.telegram.org";

/// The grammar of a channel's `apiBaseUrl` and `replyUrl` (an endpoint,
/// with an optional query for `replyUrl`).
pub const CHANNEL_URL_PATTERN: &str = endpoint_pattern!(r"(?:\?[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*)?");

/// One configured channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelSetting {
    /// A Slack app's Events API subscription.
    Slack {
        /// Verifies `X-Slack-Signature`.
        signing_secret: String,
        /// Posts replies (`chat.postMessage`).
        bot_token: String,
        /// The Web API's base URL.
        api_base_url: Url,
    },
    /// A Telegram bot's webhook.
    Telegram {
        /// Posts replies (`sendMessage`).
        bot_token: String,
        /// Must arrive as `X-Telegram-Bot-Api-Secret-Token`.
        secret_token: String,
        /// The Bot API's base URL.
        api_base_url: Url,
    },
    /// Any other platform: a webhook signed with a shared secret both ways.
    Webhook {
        /// Signs inbound events and outbound replies (HMAC-SHA256).
        secret: String,
        /// Where replies are posted.
        reply_url: Url,
    },
}

impl ChannelSetting {
    /// The URL the config sets for the channel's posts, with its field
    /// (`replyUrl`, or an `apiBaseUrl` other than the platform's own).
    pub fn configured_url(&self) -> Option<(&'static str, &Url)> {
        match self {
            Self::Slack { api_base_url, .. } if api_base_url.as_str() != SLACK_API => {
                Some(("apiBaseUrl", api_base_url))
            }
            Self::Telegram { api_base_url, .. }
                if api_base_url.as_str().trim_end_matches('/') != TELEGRAM_API =>
            {
                Some(("apiBaseUrl", api_base_url))
            }
            Self::Webhook { reply_url, .. } => Some(("replyUrl", reply_url)),
            _ => None,
        }
    }

    /// The channel's type, as `type` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Slack { .. } => "slack",
            Self::Telegram { .. } => "telegram",
            Self::Webhook { .. } => "webhook",
        }
    }
}

/// Parses `config.channels`.
pub fn parse_channels(
    value: Option<&Value>,
) -> Result<BTreeMap<String, ChannelSetting>, ValidationError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            return Err(ValidationError::new(
                "config.channels",
                "must be an object of channels by name",
            ))
        }
    };
    if entries.len() > MAX_CHANNELS {
        return Err(ValidationError::new(
            "config.channels",
            format!(
                "names {} channels; the limit is {MAX_CHANNELS}",
                entries.len()
            ),
        ));
    }
    let mut channels = BTreeMap::new();
    for (name, entry) in entries {
        let field = format!("config.channels.{name}");
        if !valid_channel_name(name) {
            return Err(ValidationError::new(
                field,
                "a channel name is 1-32 letters, digits, `-` or `_`",
            ));
        }
        let entry = entry
            .as_object()
            .ok_or_else(|| ValidationError::new(&field, "must be an object with a type"))?;
        channels.insert(name.clone(), parse_channel(&field, entry)?);
    }
    Ok(channels)
}

/// Whether `name` may name a channel (it is part of the channel's URL).
pub fn valid_channel_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn parse_channel(
    field: &str,
    entry: &Map<String, Value>,
) -> Result<ChannelSetting, ValidationError> {
    let kind = entry.get("type").and_then(Value::as_str);
    let allowed: &[&str] = match kind {
        Some("slack") => &["type", "signingSecret", "botToken", "apiBaseUrl"],
        Some("telegram") => &["type", "botToken", "secretToken", "apiBaseUrl"],
        Some("webhook") => &["type", "secret", "replyUrl"],
        _ => {
            return Err(ValidationError::new(
                format!("{field}.type"),
                format!("must be one of: {}", CHANNEL_TYPES.join(", ")),
            ))
        }
    };
    for key in entry.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(ValidationError::new(
                format!("{field}.{key}"),
                format!(
                    "is not a field of a {} channel ({})",
                    kind.unwrap_or_default(),
                    allowed.join(", ")
                ),
            ));
        }
    }
    let secret = |name: &str| secret_field(field, entry, name);
    let url = |name: &str, default: Option<&str>| url_field(field, entry, name, default);
    Ok(match kind {
        Some("slack") => ChannelSetting::Slack {
            signing_secret: secret("signingSecret")?,
            bot_token: secret("botToken")?,
            api_base_url: url("apiBaseUrl", Some(SLACK_API))?,
        },
        Some("telegram") => ChannelSetting::Telegram {
            bot_token: secret("botToken")?,
            secret_token: telegram_secret_token(field, entry)?,
            api_base_url: url("apiBaseUrl", Some(TELEGRAM_API))?,
        },
        _ => ChannelSetting::Webhook {
            secret: secret("secret")?,
            reply_url: url("replyUrl", None)?,
        },
    })
}

fn secret_field(
    field: &str,
    entry: &Map<String, Value>,
    name: &str,
) -> Result<String, ValidationError> {
    match entry.get(name).and_then(Value::as_str) {
        Some(value)
            if !value.trim().is_empty() && value.chars().count() <= MAX_CHANNEL_SECRET_CHARS =>
        {
            Ok(value.to_owned())
        }
        _ => Err(ValidationError::new(
            format!("{field}.{name}"),
            format!("is required: a string of 1-{MAX_CHANNEL_SECRET_CHARS} characters, not blank"),
        )),
    }
}

/// Telegram allows 1-256 characters `A-Z`, `a-z`, `0-9`, `_` and `-`.
fn telegram_secret_token(
    field: &str,
    entry: &Map<String, Value>,
) -> Result<String, ValidationError> {
    match entry.get("secretToken").and_then(Value::as_str) {
        Some(token)
            if (1..=256).contains(&token.len())
                && token
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
        {
            Ok(token.to_owned())
        }
        _ => Err(ValidationError::new(
            format!("{field}.secretToken"),
            "is required: 1-256 characters A-Z, a-z, 0-9, _ or - (Telegram's rule)",
        )),
    }
}

fn url_field(
    field: &str,
    entry: &Map<String, Value>,
    name: &str,
    default: Option<&str>,
) -> Result<Url, ValidationError> {
    static GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
        std::sync::LazyLock::new(|| regex::Regex::new(CHANNEL_URL_PATTERN).ok());
    let raw = match (entry.get(name), default) {
        (None, Some(default)) => Value::String(default.to_owned()),
        (Some(value), _) => value.clone(),
        (None, None) => Value::Null,
    };
    raw.as_str()
        .and_then(|raw| parse_endpoint(raw, GRAMMAR.as_ref()))
        .ok_or_else(|| {
            ValidationError::new(
                format!("{field}.{name}"),
                "must be an http(s) URL of a host name or IPv4 address, an optional port, path and query, nothing else",
            )
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<BTreeMap<String, ChannelSetting>, ValidationError> {
        parse_channels(Some(&value))
    }

    #[test]
    fn parses_each_type_with_its_defaults() {
        let channels = parse(json!({
            "support": {"type": "slack", "signingSecret": "s", "botToken": "xoxb-1"},
            "tg": {"type": "telegram", "botToken": "1:abc", "secretToken": "tok_en-1"},
            "other": {"type": "webhook", "secret": "k", "replyUrl": "https://example.com/r?x=1"},
        }))
        .unwrap();
        assert_eq!(channels["support"].kind(), "slack");
        let ChannelSetting::Slack { api_base_url, .. } = &channels["support"] else {
            panic!("slack");
        };
        assert_eq!(api_base_url.as_str(), "https://slack.com/api");
        let ChannelSetting::Telegram { api_base_url, .. } = &channels["tg"] else {
            panic!("telegram");
        };
        assert_eq!(api_base_url.as_str(), "https://api.telegram.org/");
        assert_eq!(channels["other"].kind(), "webhook");
    }

    #[test]
    fn names_the_field_at_fault() {
        let cases = [
            (json!({"a": {"type": "irc"}}), "config.channels.a.type"),
            (
                json!({"a": {"type": "slack", "botToken": "x"}}),
                "config.channels.a.signingSecret",
            ),
            (
                json!({"a": {"type": "slack", "signingSecret": "s", "botToken": "x", "replyUrl": "https://e.com"}}),
                "config.channels.a.replyUrl",
            ),
            (
                json!({"a": {"type": "telegram", "botToken": "x", "secretToken": "no spaces"}}),
                "config.channels.a.secretToken",
            ),
            (
                json!({"a": {"type": "webhook", "secret": "k"}}),
                "config.channels.a.replyUrl",
            ),
            (json!({"a b": {"type": "webhook"}}), "config.channels.a b"),
            (json!([]), "config.channels"),
        ];
        for (value, field) in cases {
            assert_eq!(parse(value.clone()).unwrap_err().field, field, "{value}");
        }
    }
}
