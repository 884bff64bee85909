//! The generic signed webhook, for any other platform. Both ways a request
//! carries `X-Toolserver-Timestamp` (Unix seconds) and
//! `X-Toolserver-Signature: v1=<hex>`, the HMAC-SHA256 of
//! `{timestamp}.{body}` with the channel's secret. An event is
//! `{"id", "thread", "text"}`; the answer is posted to the channel's
//! `replyUrl` as `{"id", "inReplyTo", "thread", "text"}`.

use serde::Deserialize;
use serde_json::{json, Value};
use url::Url;

use super::signature::{fresh, hmac_hex, verify_hex};
use super::{header, Inbound, InboundError, InboundMessage, OutboundPost, Received};

/// The timestamp header.
pub const TIMESTAMP_HEADER: &str = "x-toolserver-timestamp";

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-toolserver-signature";

/// Longest event id and thread, in characters.
const MAX_ID_CHARS: usize = 128;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    id: String,
    thread: String,
    text: String,
}

/// Checks a request's signature and timestamp, then reads its event.
pub(super) fn receive(secret: &str, request: Received<'_>) -> Result<Inbound, InboundError> {
    let stamp = header(request.headers, TIMESTAMP_HEADER).ok_or_else(|| {
        InboundError::Unauthorized("X-Toolserver-Timestamp is missing".to_owned())
    })?;
    if !fresh(stamp, request.now, request.window) {
        return Err(InboundError::Unauthorized(format!(
            "X-Toolserver-Timestamp is more than {} s from now",
            request.window.as_secs()
        )));
    }
    let signature = header(request.headers, SIGNATURE_HEADER)
        .and_then(|value| value.strip_prefix("v1="))
        .ok_or_else(|| {
            InboundError::Unauthorized("X-Toolserver-Signature (v1=…) is missing".to_owned())
        })?;
    let mut signed = format!("{stamp}.").into_bytes();
    signed.extend_from_slice(request.body);
    if !verify_hex(secret, &signed, signature) {
        return Err(InboundError::Unauthorized(
            "X-Toolserver-Signature does not match the body".to_owned(),
        ));
    }
    let event: Event = serde_json::from_slice(request.body).map_err(|err| {
        InboundError::Malformed(format!("not an event {{id, thread, text}}: {err}"))
    })?;
    for (field, value) in [("id", &event.id), ("thread", &event.thread)] {
        if value.trim().is_empty() || value.chars().count() > MAX_ID_CHARS || value.contains('\0') {
            return Err(InboundError::Malformed(format!(
                "`{field}` must be 1-{MAX_ID_CHARS} characters, not blank"
            )));
        }
    }
    let text = event.text.trim().to_owned();
    if text.is_empty() {
        return Ok(Inbound::Ignored("a message without text"));
    }
    Ok(Inbound::Message(InboundMessage {
        reply_to: json!({ "thread": event.thread, "inReplyTo": event.id }),
        event_key: event.id,
        thread: event.thread,
        text,
    }))
}

/// The signed post of `text` to `reply_url`.
pub(super) fn outbound(
    secret: &str,
    reply_url: &Url,
    reply_to: &Value,
    text: &str,
    id: &str,
    now: i64,
) -> Result<OutboundPost, String> {
    let body = serde_json::to_vec(&json!({
        "id": id,
        "inReplyTo": reply_to["inReplyTo"],
        "thread": reply_to["thread"],
        "text": text,
    }))
    .map_err(|err| err.to_string())?;
    let mut signed = format!("{now}.").into_bytes();
    signed.extend_from_slice(&body);
    Ok(OutboundPost {
        url: reply_url.clone(),
        headers: vec![
            (TIMESTAMP_HEADER, now.to_string()),
            (
                SIGNATURE_HEADER,
                format!("v1={}", hmac_hex(secret, &signed)),
            ),
        ],
        body,
    })
}
