//! Telegram's bot webhook: each update carries the secret token the
//! webhook was set with as `X-Telegram-Bot-Api-Secret-Token`; a message's
//! answer goes back with `sendMessage`, as a reply to it.

use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

use super::signature::same_secret;
use super::{
    api_method, clip, header, Inbound, InboundError, InboundMessage, OutboundPost, Received,
};

/// Telegram's limit on a message's text.
const MAX_TEXT_CHARS: usize = 4096;

#[derive(Deserialize)]
struct Update {
    update_id: i64,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    message_id: i64,
    message_thread_id: Option<i64>,
    chat: Chat,
    text: Option<String>,
    from: Option<User>,
}

#[derive(Deserialize)]
struct Chat {
    id: i64,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    is_bot: bool,
}

/// Checks a request's secret token, then reads its update.
pub(super) fn receive(secret_token: &str, request: Received<'_>) -> Result<Inbound, InboundError> {
    let given = header(request.headers, "x-telegram-bot-api-secret-token").ok_or_else(|| {
        InboundError::Unauthorized("X-Telegram-Bot-Api-Secret-Token is missing".to_owned())
    })?;
    if !same_secret(secret_token, given) {
        return Err(InboundError::Unauthorized(
            "X-Telegram-Bot-Api-Secret-Token is not this channel's".to_owned(),
        ));
    }
    let update: Update = serde_json::from_slice(request.body)
        .map_err(|err| InboundError::Malformed(format!("not a Telegram update: {err}")))?;
    let Some(message) = update.message else {
        return Ok(Inbound::Ignored("not a new message"));
    };
    if message.from.is_some_and(|from| from.is_bot) {
        return Ok(Inbound::Ignored("a bot's message"));
    }
    let text = message.text.unwrap_or_default().trim().to_owned();
    if text.is_empty() {
        return Ok(Inbound::Ignored("a message without text"));
    }
    let chat = message.chat.id;
    let thread = match message.message_thread_id {
        Some(topic) => format!("{chat}:{topic}"),
        None => chat.to_string(),
    };
    let mut reply_to = json!({ "chat_id": chat, "message_id": message.message_id });
    if let Some(topic) = message.message_thread_id {
        reply_to["message_thread_id"] = json!(topic);
    }
    Ok(Inbound::Message(InboundMessage {
        event_key: update.update_id.to_string(),
        thread,
        text,
        reply_to,
    }))
}

/// `sendMessage` of `text` into the chat of `reply_to`, replying to it.
pub(super) fn outbound(
    bot_token: &str,
    api: &Url,
    reply_to: &Value,
    text: &str,
) -> Result<OutboundPost, String> {
    let url = api_method(api, &format!("bot{bot_token}/sendMessage"))
        .ok_or("the bot token does not fit in a Telegram API URL")?;
    let mut body = json!({
        "chat_id": reply_to["chat_id"],
        "text": clip(text, MAX_TEXT_CHARS),
        "reply_parameters": {
            "message_id": reply_to["message_id"],
            "allow_sending_without_reply": true,
        },
    });
    if let Some(topic) = reply_to.get("message_thread_id") {
        body["message_thread_id"] = topic.clone();
    }
    Ok(OutboundPost {
        url,
        headers: Vec::new(),
        body: serde_json::to_vec(&body).map_err(|err| err.to_string())?,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reqwest::header::HeaderMap;

    use super::*;

    fn received<'a>(headers: &'a HeaderMap, body: &'a str) -> Received<'a> {
        Received {
            headers,
            body: body.as_bytes(),
            now: 0,
            window: Duration::from_secs(300),
        }
    }

    #[test]
    fn reads_a_message_with_the_right_token_only() {
        let body = r#"{"update_id":7,"message":{"message_id":3,"chat":{"id":-42,"type":"group"},"from":{"id":1,"is_bot":false},"text":" hi "}}"#;
        let mut headers = HeaderMap::new();
        assert!(matches!(
            receive("t", received(&headers, body)),
            Err(InboundError::Unauthorized(_))
        ));
        headers.insert("x-telegram-bot-api-secret-token", "u".parse().unwrap());
        assert!(matches!(
            receive("t", received(&headers, body)),
            Err(InboundError::Unauthorized(_))
        ));
        headers.insert("x-telegram-bot-api-secret-token", "t".parse().unwrap());
        let Inbound::Message(message) = receive("t", received(&headers, body)).unwrap() else {
            panic!("a message");
        };
        assert_eq!(
            (
                message.event_key.as_str(),
                message.thread.as_str(),
                message.text.as_str()
            ),
            ("7", "-42", "hi")
        );
        let post = outbound(
            "1:abc",
            &Url::parse("https://api.telegram.org").unwrap(),
            &message.reply_to,
            "yes",
        )
        .unwrap();
        assert_eq!(
            post.url.as_str(),
            "https://api.telegram.org/bot1:abc/sendMessage"
        );
        let body: Value = serde_json::from_slice(&post.body).unwrap();
        assert_eq!(body["chat_id"], -42);
        assert_eq!(body["reply_parameters"]["message_id"], 3);
    }
}
