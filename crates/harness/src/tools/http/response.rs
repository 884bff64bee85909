//! Sending one HTTP tool request and reading its answer: at most the cap
//! in bytes, JSON projected when the tool says so, any other success as
//! text, and an error status as a failed call the model reads.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use toolserver_domain::http_tool::Projection;

use super::super::{Failure, FailureKind};
use crate::outbound::{read_capped, refusal, BodyError};
use crate::retry_after::retry_after;

/// Most bytes of an error answer quoted to the model.
const ERROR_EXCERPT_BYTES: usize = 2048;

/// Sends `request` and reads its answer within `timeout` and `cap` bytes.
pub(super) async fn send(
    client: &reqwest::Client,
    request: reqwest::RequestBuilder,
    timeout: Duration,
    cap: u64,
    projection: Option<&Projection>,
) -> Result<Value, Failure> {
    let request = request
        .timeout(timeout)
        .build()
        .map_err(|err| Failure::tool(format!("the request could not be built: {err}")))?;
    let target = format!("{} {}", request.method(), without_query(request.url()));
    let response = client.execute(request).await.map_err(|err| {
        if let Some(refused) = refusal(&err) {
            return Failure::tool(format!("{target} was refused: {refused}"));
        }
        if err.is_timeout() {
            return Failure::new(FailureKind::Timeout, format!("{target} timed out"));
        }
        let kind = if err.is_connect() {
            FailureKind::Unreachable
        } else {
            FailureKind::RunnerLost
        };
        Failure::new(kind, format!("{target} failed: {}", error_chain(&err)))
    })?;
    let status = response.status();
    let wait = retry_after(response.headers(), SystemTime::now());
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split(';').next().unwrap_or_default().trim();
            essence == "application/json" || essence.ends_with("+json")
        });
    let body = read_body(response, cap, &target).await?;
    if !status.is_success() {
        let excerpt = String::from_utf8_lossy(&body[..body.len().min(ERROR_EXCERPT_BYTES)]);
        let mut message = format!("{target} answered {status}: {excerpt}");
        if let Some(wait) = wait {
            message.push_str(&format!(" (retry after {} ms)", wait.as_millis()));
        }
        // Throttled or unavailable: the upstream did not do the work.
        let kind = match status.as_u16() {
            429 | 503 => FailureKind::Unreachable,
            _ => FailureKind::Tool,
        };
        return Err(Failure::new(kind, message));
    }
    let document = if body.is_empty() {
        Value::Null
    } else if is_json {
        serde_json::from_slice(&body).map_err(|err| {
            Failure::tool(format!("{target} answered JSON that does not parse: {err}"))
        })?
    } else {
        Value::String(String::from_utf8_lossy(&body).into_owned())
    };
    match projection {
        Some(projection) if is_json => projection.apply(&document).map_err(Failure::tool),
        Some(_) if !body.is_empty() => Err(Failure::tool(format!(
            "{target} answered {status} without JSON, so the tool's response projection cannot apply"
        ))),
        _ if document.is_null() => Ok(json!({"status": status.as_u16()})),
        _ => Ok(document),
    }
}

/// The answer's body within `cap` bytes, or the failure of the call.
async fn read_body(
    response: reqwest::Response,
    cap: u64,
    target: &str,
) -> Result<Vec<u8>, Failure> {
    read_capped(response, cap).await.map_err(|err| match err {
        BodyError::TooLarge(cap) => Failure::new(
            FailureKind::LimitExceeded,
            format!("{target} answered more than {cap} bytes, the tool's limit"),
        ),
        BodyError::Broken(err) => Failure::new(
            FailureKind::RunnerLost,
            format!("{target}: the answer broke off: {err}"),
        ),
    })
}

/// The URL without its query, which may carry a credential.
fn without_query(url: &url::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
