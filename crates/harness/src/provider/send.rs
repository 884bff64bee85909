//! Sending the request: a short retry of failures that happen before any of
//! the answer is read (waiting what the provider's `Retry-After` asks, up to
//! a limit), and the provider's message out of error answers.

use std::error::Error;
use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use serde_json::Value;

use crate::outbound;
use crate::provider::ProviderError;
use crate::retry_after::retry_after;

/// Waits before the first and second retry when the provider names none.
const BACKOFF: [Duration; 2] = [Duration::from_millis(200), Duration::from_millis(400)];

/// Answers worth another try (529: Anthropic's "overloaded").
const RETRY_STATUSES: [u16; 5] = [429, 502, 503, 504, 529];

/// How much of an error answer is read.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How many characters of an error answer that is not JSON are reported.
const ERROR_TEXT_CHARS: usize = 500;

/// Sends the request `build` makes, retrying connection failures and
/// 429/502/503/504/529 answers up to twice; a 2xx answer is returned unread.
/// A retry waits what the answer's `Retry-After` asks, or a short backoff;
/// an answer asking for more than `max_wait` is not retried.
pub(super) async fn send(
    max_wait: Duration,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, ProviderError> {
    let mut backoff = BACKOFF.iter();
    loop {
        let outcome = build().send().await;
        let retryable = match &outcome {
            Ok(response) => RETRY_STATUSES.contains(&response.status().as_u16()),
            Err(err) => err.is_connect() && outbound::refusal(err).is_none(),
        };
        if let (true, Some(delay)) = (retryable, backoff.next()) {
            let asked = outcome
                .as_ref()
                .ok()
                .and_then(|response| retry_after(response.headers(), SystemTime::now()));
            let wait = asked.unwrap_or(*delay);
            if wait <= max_wait {
                tokio::time::sleep(wait).await;
                continue;
            }
        }
        return match outcome {
            Ok(response) if response.status().is_success() => Ok(response),
            Ok(response) => Err(status_error(response).await),
            Err(err) => Err(transport_error(&err)),
        };
    }
}

/// A failure to send: refused by the outbound policy, or unreachable.
pub(super) fn transport_error(err: &reqwest::Error) -> ProviderError {
    if let Some(refusal) = outbound::refusal(err) {
        return ProviderError::Forbidden(refusal);
    }
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    ProviderError::Transport(message)
}

/// The status and the provider's message of an error answer, with the wait
/// it asked for when it named one.
async fn status_error(mut response: reqwest::Response) -> ProviderError {
    let status = response.status();
    let asked = retry_after(response.headers(), SystemTime::now());
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    let mut message = message(status, &String::from_utf8_lossy(&body));
    if let Some(wait) = asked {
        message.push_str(&format!(" (retry after {} s)", wait.as_secs_f64().ceil()));
    }
    ProviderError::Status {
        status: status.as_u16(),
        message,
    }
}

/// The provider's message in an error answer's `body`: its JSON message, or
/// the start of the text, or the status reason when the body is empty.
fn message(status: StatusCode, body: &str) -> String {
    json_message(body).unwrap_or_else(|| {
        let text = body.trim();
        if text.is_empty() {
            status.canonical_reason().unwrap_or_default().to_owned()
        } else {
            text.chars().take(ERROR_TEXT_CHARS).collect()
        }
    })
}

/// The message of the usual `{"error": {"message": …}}` body, or of the
/// `{"error": "…"}` and `{"message": "…"}` variants some servers send.
fn json_message(body: &str) -> Option<String> {
    let body: Value = serde_json::from_str(body).ok()?;
    ["/error/message", "/error", "/message"]
        .iter()
        .find_map(|pointer| body.pointer(pointer)?.as_str())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_give_their_message() {
        let cases = [
            (
                r#"{"error":{"message":"bad key","type":"auth"}}"#,
                "bad key",
            ),
            (r#"{"error":"model not found"}"#, "model not found"),
            (r#"{"object":"error","message":"too long"}"#, "too long"),
        ];
        for (body, message) in cases {
            assert_eq!(json_message(body).as_deref(), Some(message), "{body}");
        }
        assert_eq!(json_message(r#"{"error":{"code":5}}"#), None);
        assert_eq!(json_message("<html>Bad Gateway</html>"), None);
    }

    #[test]
    fn other_bodies_are_cut_short() {
        let long = "é".repeat(800);
        let cut = message(StatusCode::BAD_GATEWAY, &long);
        assert_eq!(cut.chars().count(), 500);
        assert_eq!(message(StatusCode::BAD_GATEWAY, " oops\n"), "oops");
        assert_eq!(message(StatusCode::BAD_GATEWAY, ""), "Bad Gateway");
    }
}
