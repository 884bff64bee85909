//! Chat channels, another front-end of the same detached turn: an agent's
//! `config.channels` names Slack apps, Telegram bots and signed webhooks.
//! An event arrives on the channel's route, is checked against the
//! channel's secret ([`receive`]), recorded once by the platform's event id
//! and acknowledged; its turn runs detached, and each pass's answer is
//! posted back into the thread ([`reply_for_pass`], [`ChannelPoster`])
//! through the webhook outbox, so a failed post is retried and recorded.
//!
//! Sequence of one message: platform → `POST /channels/{agentId}/{name}`
//! → signature and timestamp checked (else 401, nothing recorded) →
//! `channel_events` row (a retry finds it and is answered at once) → turn
//! started (or left for a later pass when the conversation is busy) → each
//! committed pass records its reply with the commit → the outbox posts it
//! (`chat.postMessage`, `sendMessage`, or the webhook's `replyUrl`).

mod lookup;
mod poster;
mod reply;
mod signature;
mod slack;
mod telegram;
pub mod webhook;

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use toolserver_domain::{AgentId, ChannelSetting};
use url::Url;

use crate::webhooks::PostFailure;
pub use lookup::{channel_setting, ChannelLookupError};
pub use poster::ChannelPoster;
pub use reply::{failure_reply, reply_for_pass, ChannelReply, CHANNEL_REPLY};
pub use signature::hmac_hex;

/// What an inbound request carried.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A platform's check of the endpoint; answered with this JSON body.
    Challenge(Value),
    /// A message for the agent.
    Message(InboundMessage),
    /// Nothing for the agent (a bot's own message, an edit, another event
    /// type): acknowledged and dropped, for this reason.
    Ignored(&'static str),
}

/// A message that arrived through a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundMessage {
    /// The platform's own id of the event; its retries carry the same.
    pub event_key: String,
    /// The platform's thread or chat, which names the conversation.
    pub thread: String,
    /// What the person wrote.
    pub text: String,
    /// Where answers go, as the channel's poster reads it.
    pub reply_to: Value,
}

/// Why an inbound request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundError {
    /// The signature, secret or timestamp did not check out.
    #[error("{0}")]
    Unauthorized(String),
    /// The body is not what the platform sends.
    #[error("{0}")]
    Malformed(String),
}

/// An inbound request, as the channel's route received it.
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// Its headers.
    pub headers: &'a HeaderMap,
    /// Its body, exactly as received (signatures cover these bytes).
    pub body: &'a [u8],
    /// The time now, in Unix seconds.
    pub now: i64,
    /// How far a signed timestamp may be from now.
    pub window: Duration,
}

/// Checks `request` against `setting` and reads what it carries.
pub fn receive(setting: &ChannelSetting, request: Received<'_>) -> Result<Inbound, InboundError> {
    match setting {
        ChannelSetting::Slack { signing_secret, .. } => slack::receive(signing_secret, request),
        ChannelSetting::Telegram { secret_token, .. } => telegram::receive(secret_token, request),
        ChannelSetting::Webhook { secret, .. } => webhook::receive(secret, request),
    }
}

/// One post to a platform.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboundPost {
    /// Where.
    pub url: Url,
    /// Headers beyond `content-type: application/json`.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// The post that puts `text` where `reply_to` says, on `setting`'s
/// platform; `id` is the post's own id (receivers deduplicate by it).
pub fn outbound(
    setting: &ChannelSetting,
    reply_to: &Value,
    text: &str,
    id: &str,
    now: i64,
) -> Result<OutboundPost, String> {
    match setting {
        ChannelSetting::Slack {
            bot_token,
            api_base_url,
            ..
        } => slack::outbound(bot_token, api_base_url, reply_to, text),
        ChannelSetting::Telegram {
            bot_token,
            api_base_url,
            ..
        } => telegram::outbound(bot_token, api_base_url, reply_to, text),
        ChannelSetting::Webhook { secret, reply_url } => {
            webhook::outbound(secret, reply_url, reply_to, text, id, now)
        }
    }
}

/// Whether the platform took a post it answered with `status` and `body`;
/// else why not, and how long it asked to wait (Telegram names it in the
/// body as `parameters.retry_after`). Slack and Telegram answer some
/// refusals 200 with `ok: false`.
pub fn accepted(setting: &ChannelSetting, status: u16, body: &[u8]) -> Result<(), PostFailure> {
    #[derive(Deserialize)]
    struct Parameters {
        retry_after: Option<u64>,
    }
    #[derive(Deserialize)]
    struct PlatformAnswer {
        ok: Option<bool>,
        error: Option<String>,
        description: Option<String>,
        parameters: Option<Parameters>,
    }
    let answer = serde_json::from_slice::<PlatformAnswer>(body).ok();
    let retry_after = answer
        .as_ref()
        .and_then(|answer| answer.parameters.as_ref()?.retry_after)
        .map(Duration::from_secs);
    let refused = |message: String| PostFailure {
        message,
        retry_after,
    };
    if !(200..300).contains(&status) {
        return Err(refused(format!("the platform answered {status}")));
    }
    if matches!(setting, ChannelSetting::Webhook { .. }) {
        return Ok(());
    }
    match answer {
        Some(PlatformAnswer { ok: Some(true), .. }) => Ok(()),
        Some(answer) => Err(refused(format!(
            "the platform refused the post: {}",
            answer
                .error
                .or(answer.description)
                .unwrap_or_else(|| "no reason given".to_owned())
        ))),
        None => Err(refused(
            "the platform's answer is not JSON with `ok`".to_owned(),
        )),
    }
}

/// The conversation a channel's thread continues: one per agent, channel
/// and platform thread.
pub fn conversation_id(agent: AgentId, channel: &str, thread: &str) -> String {
    format!("{agent}:{channel}:{thread}")
}

/// `text` cut to at most `max` characters, marked when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(max.saturating_sub(1)).collect();
    clipped.push('…');
    clipped
}

/// The URL of API method `method` under the base URL `api`.
fn api_method(api: &Url, method: &str) -> Option<Url> {
    Url::parse(&format!("{}/{method}", api.as_str().trim_end_matches('/'))).ok()
}

/// The value of header `name`, if it is text.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slack() -> ChannelSetting {
        ChannelSetting::Slack {
            signing_secret: "s".into(),
            bot_token: "b".into(),
            api_base_url: Url::parse("https://slack.com/api").unwrap(),
        }
    }

    #[test]
    fn a_refusal_says_why_and_keeps_the_wait_it_asks_for() {
        assert_eq!(accepted(&slack(), 200, br#"{"ok":true}"#), Ok(()));
        let refused = accepted(
            &slack(),
            200,
            br#"{"ok":false,"error":"channel_not_found"}"#,
        );
        assert_eq!(
            refused.unwrap_err().message,
            "the platform refused the post: channel_not_found"
        );
        let throttled = accepted(
            &slack(),
            429,
            br#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 5","parameters":{"retry_after":5}}"#,
        )
        .unwrap_err();
        assert_eq!(throttled.retry_after, Some(Duration::from_secs(5)));
        assert_eq!(throttled.message, "the platform answered 429");
        assert!(accepted(&slack(), 200, b"<html>").is_err());
    }
}
