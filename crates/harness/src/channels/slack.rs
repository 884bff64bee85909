//! Slack's Events API: requests signed `X-Slack-Signature: v0=<hex>` over
//! `v0:{X-Slack-Request-Timestamp}:{body}` with the app's signing secret;
//! `url_verification` answered with its challenge; `message` and
//! `app_mention` events answered in their thread with `chat.postMessage`.

use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

use super::signature::{fresh, verify_hex};
use super::{
    api_method, clip, header, Inbound, InboundError, InboundMessage, OutboundPost, Received,
};

/// Slack's limit on a message's text.
const MAX_TEXT_CHARS: usize = 40_000;

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    challenge: Option<String>,
    event_id: Option<String>,
    event: Option<Event>,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    bot_id: Option<String>,
    channel: Option<String>,
    text: Option<String>,
    ts: Option<String>,
    thread_ts: Option<String>,
}

/// Checks a request's signature and timestamp, then reads it.
pub(super) fn receive(secret: &str, request: Received<'_>) -> Result<Inbound, InboundError> {
    let stamp = header(request.headers, "x-slack-request-timestamp").ok_or_else(|| {
        InboundError::Unauthorized("X-Slack-Request-Timestamp is missing".to_owned())
    })?;
    if !fresh(stamp, request.now, request.window) {
        return Err(InboundError::Unauthorized(format!(
            "X-Slack-Request-Timestamp is more than {} s from now",
            request.window.as_secs()
        )));
    }
    let signature = header(request.headers, "x-slack-signature")
        .and_then(|value| value.strip_prefix("v0="))
        .ok_or_else(|| {
            InboundError::Unauthorized("X-Slack-Signature (v0=…) is missing".to_owned())
        })?;
    let mut signed = format!("v0:{stamp}:").into_bytes();
    signed.extend_from_slice(request.body);
    if !verify_hex(secret, &signed, signature) {
        return Err(InboundError::Unauthorized(
            "X-Slack-Signature does not match the body".to_owned(),
        ));
    }
    let envelope: Envelope = serde_json::from_slice(request.body)
        .map_err(|err| InboundError::Malformed(format!("not a Slack event: {err}")))?;
    match envelope.kind.as_str() {
        "url_verification" => {
            let challenge = envelope.challenge.ok_or_else(|| {
                InboundError::Malformed("url_verification without a challenge".to_owned())
            })?;
            Ok(Inbound::Challenge(json!({ "challenge": challenge })))
        }
        "event_callback" => message(envelope),
        _ => Ok(Inbound::Ignored("not an event callback")),
    }
}

fn message(envelope: Envelope) -> Result<Inbound, InboundError> {
    let (Some(event_id), Some(event)) = (envelope.event_id, envelope.event) else {
        return Err(InboundError::Malformed(
            "an event callback needs event_id and event".to_owned(),
        ));
    };
    if !matches!(event.kind.as_str(), "message" | "app_mention") {
        return Ok(Inbound::Ignored("not a message"));
    }
    if event.bot_id.is_some() || event.subtype.is_some() {
        return Ok(Inbound::Ignored("a bot's message or a message change"));
    }
    let (Some(channel), Some(ts)) = (event.channel, event.ts) else {
        return Err(InboundError::Malformed(
            "a message needs channel and ts".to_owned(),
        ));
    };
    let text = without_mentions(event.text.as_deref().unwrap_or_default());
    if text.is_empty() {
        return Ok(Inbound::Ignored("a message without text"));
    }
    let thread_ts = event.thread_ts.unwrap_or(ts);
    Ok(Inbound::Message(InboundMessage {
        event_key: event_id,
        thread: format!("{channel}:{thread_ts}"),
        text,
        reply_to: json!({ "channel": channel, "thread_ts": thread_ts }),
    }))
}

/// `text` without the `<@U…>` mentions of the app that open it.
fn without_mentions(text: &str) -> String {
    let mut rest = text.trim();
    while let Some(after) = rest.strip_prefix("<@") {
        match after.find('>') {
            Some(end) => rest = after[end + 1..].trim_start(),
            None => break,
        }
    }
    rest.trim().to_owned()
}

/// `chat.postMessage` of `text` in the thread of `reply_to`.
pub(super) fn outbound(
    bot_token: &str,
    api: &Url,
    reply_to: &Value,
    text: &str,
) -> Result<OutboundPost, String> {
    let url = api_method(api, "chat.postMessage")
        .ok_or("the Slack API URL does not extend to chat.postMessage")?;
    let body = json!({
        "channel": reply_to["channel"],
        "thread_ts": reply_to["thread_ts"],
        "text": clip(text, MAX_TEXT_CHARS),
    });
    Ok(OutboundPost {
        url,
        headers: vec![("authorization", format!("Bearer {bot_token}"))],
        body: serde_json::to_vec(&body).map_err(|err| err.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::HeaderMap;

    use super::*;
    use crate::channels::signature::hmac_hex;

    fn signed(body: &str, stamp: i64, secret: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let signature = hmac_hex(secret, format!("v0:{stamp}:{body}").as_bytes());
        headers.insert("x-slack-request-timestamp", stamp.into());
        headers.insert(
            "x-slack-signature",
            format!("v0={signature}").parse().unwrap(),
        );
        headers
    }

    fn received<'a>(headers: &'a HeaderMap, body: &'a str, now: i64) -> Received<'a> {
        Received {
            headers,
            body: body.as_bytes(),
            now,
            window: Duration::from_secs(300),
        }
    }

    #[test]
    fn reads_a_threaded_mention() {
        let body = r#"{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","channel":"C1","user":"U1","text":"<@U0BOT> hello there","ts":"2.0","thread_ts":"1.0"}}"#;
        let headers = signed(body, 1000, "s");
        let Inbound::Message(message) = receive("s", received(&headers, body, 1000)).unwrap()
        else {
            panic!("a message");
        };
        assert_eq!(message.event_key, "Ev1");
        assert_eq!(message.thread, "C1:1.0");
        assert_eq!(message.text, "hello there");
        assert_eq!(
            message.reply_to,
            json!({"channel": "C1", "thread_ts": "1.0"})
        );
    }

    #[test]
    fn refuses_a_wrong_signature_and_a_stale_stamp() {
        let body = r#"{"type":"url_verification","challenge":"c"}"#;
        let headers = signed(body, 1000, "other");
        assert!(matches!(
            receive("s", received(&headers, body, 1000)),
            Err(InboundError::Unauthorized(_))
        ));
        let headers = signed(body, 1000, "s");
        assert!(matches!(
            receive("s", received(&headers, body, 1400)),
            Err(InboundError::Unauthorized(_))
        ));
        assert_eq!(
            receive("s", received(&headers, body, 1100)).unwrap(),
            Inbound::Challenge(json!({"challenge": "c"}))
        );
    }

    #[test]
    fn ignores_bots_and_edits() {
        for event in [
            r#"{"type":"message","channel":"C","text":"x","ts":"1","bot_id":"B"}"#,
            r#"{"type":"message","subtype":"message_changed","channel":"C","ts":"1"}"#,
            r#"{"type":"reaction_added"}"#,
        ] {
            let body = format!(r#"{{"type":"event_callback","event_id":"E","event":{event}}}"#);
            let headers = signed(&body, 5, "s");
            assert!(matches!(
                receive("s", received(&headers, &body, 5)).unwrap(),
                Inbound::Ignored(_)
            ));
        }
    }
}
