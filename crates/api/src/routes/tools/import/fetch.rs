//! The document of an import: sent in the body (an object, or JSON or
//! YAML text), or fetched from a public URL through the outbound client.

use serde_json::Value;
use toolserver_domain::ValidationError;
use toolserver_harness::outbound::{self, BodyError};
use url::Url;

use crate::error::ApiError;
use crate::state::AppState;

/// How long fetching a document may take.
const FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The document `sent` in the body, parsed: text is read as YAML, which
/// takes JSON too.
pub(super) fn from_body(sent: Value) -> Result<Value, ApiError> {
    match sent {
        Value::String(text) => parse_text("document", &text),
        other => Ok(other),
    }
}

/// Fetches and parses the document at `raw`, refusing private addresses
/// and anything over `max_bytes`; every failure is a 422 naming `url`.
pub(super) async fn from_url(
    state: &AppState,
    raw: &str,
    max_bytes: usize,
) -> Result<(Value, Url), ApiError> {
    let refuse = |reason: String| ApiError::from(ValidationError::new("url", reason));
    let url = Url::parse(raw)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        .ok_or_else(|| refuse("must be an http(s) URL".into()))?;
    let harness = state.harness();
    let sources = harness.sources();
    outbound::check_destination(
        &url,
        &sources.policy,
        harness.settings().outbound_resolve_timeout,
    )
    .await
    .map_err(refuse)?;
    let response = sources
        .http
        .get(url.clone())
        .timeout(FETCH_TIMEOUT)
        .send()
        .await
        .map_err(|err| {
            let reason = outbound::refusal(&err).unwrap_or_else(|| err.to_string());
            refuse(format!("{url} could not be fetched: {reason}"))
        })?;
    let status = response.status();
    if !status.is_success() {
        return Err(refuse(format!("{url} answered {status}")));
    }
    let body = outbound::read_capped(response, max_bytes as u64)
        .await
        .map_err(|err| match err {
            BodyError::TooLarge(_) => refuse(too_large(max_bytes)),
            BodyError::Broken(err) => refuse(format!("{url} broke off: {err}")),
        })?;
    let text =
        String::from_utf8(body).map_err(|_| refuse("the document is not UTF-8 text".into()))?;
    Ok((parse_text("url", &text)?, url))
}

fn too_large(max_bytes: usize) -> String {
    format!(
        "the document is larger than {max_bytes} bytes, the limit (TOOLSERVER_MAX_IMPORT_BYTES)"
    )
}

fn parse_text(field: &str, text: &str) -> Result<Value, ApiError> {
    serde_yaml::from_str::<Value>(text).map_err(|err| {
        ValidationError::new(
            field,
            format!("the document is neither JSON nor YAML: {err}"),
        )
        .into()
    })
}
