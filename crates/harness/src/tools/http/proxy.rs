//! Requests an uploaded tool's code asks the server to make (`ctx.fetch`):
//! `{{secret.NAME}}` and `{{connection.PROVIDER.access_token}}` (the
//! connection the tool declares, of the end user its call acts for)
//! placeholders in its header values are filled here, so the code never
//! holds a secret or a token; the destination is held to the tool's
//! egress allow list and the server's public-only policy; the answer comes
//! back capped, with any secret value it echoes replaced.

use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use toolserver_domain::http_tool::{is_header_name, Part, Template};
use toolserver_domain::{AccountId, EgressAllowList};
use url::Url;

use super::secrets;
use super::HttpToolContext;
use crate::outbound::{check_url, read_capped, refusal};

/// The tool a request is made for, and for whom.
#[derive(Debug, Clone, Copy)]
pub struct FetchingTool<'a> {
    /// The account.
    pub account: &'a AccountId,
    /// The end user its call acts for (`""`: the account).
    pub user: &'a str,
    /// The tool's egress allow list.
    pub egress: Option<&'a EgressAllowList>,
    /// The connection the tool declares.
    pub connection: Option<&'a str>,
}

/// What the tool's code asked for.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The absolute http(s) URL.
    pub url: String,
    /// Header names and values; values may hold `{{secret.NAME}}`.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
}

/// What the destination answered.
#[derive(Debug, Clone)]
pub struct ProxyResponse {
    /// Its status code.
    pub status: u16,
    /// Its headers, in order.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Vec<u8>,
}

/// Why a request was not made or got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The request breaks a rule (a malformed URL or header, a placeholder
    /// that is not a secret, a secret that is not set).
    #[error("{0}")]
    Invalid(String),
    /// The destination is not one the tool may reach.
    #[error("{0}")]
    Refused(String),
    /// The destination did not answer, or answered too much.
    #[error("{0}")]
    Upstream(String),
}

/// Makes `request` for `tool` within `timeout`.
pub async fn proxy(
    context: &HttpToolContext,
    tool: FetchingTool<'_>,
    request: ProxyRequest,
    timeout: Duration,
) -> Result<ProxyResponse, ProxyError> {
    let (account, egress) = (tool.account, tool.egress);
    let url = Url::parse(&request.url).map_err(|err| ProxyError::Invalid(format!("url: {err}")))?;
    let host = url.host_str().unwrap_or_default().to_owned();
    if let Some(allow) = egress {
        if !allow.allows(&host) {
            return Err(ProxyError::Refused(format!(
                "{host} is not in the tool's egress allow list"
            )));
        }
    }
    check_url(&url, &context.policy).map_err(ProxyError::Refused)?;
    let method = reqwest::Method::from_bytes(request.method.to_ascii_uppercase().as_bytes())
        .map_err(|_| ProxyError::Invalid(format!("method {:?} is not valid", request.method)))?;
    let templates = header_templates(&request.headers)?;
    let names: Vec<String> = templates
        .iter()
        .flat_map(|(_, template)| template.secrets().map(str::to_owned))
        .collect();
    let mut opened = secrets::resolve(&context.pool, &context.sealer, account, &names)
        .await
        .map_err(|failure| ProxyError::Invalid(failure.message))?;
    let named = templates
        .iter()
        .find_map(|(name, template)| Some((name, template.connections().next()?)));
    if let Some((header, provider)) = named {
        if tool.connection != Some(provider) {
            return Err(ProxyError::Invalid(format!(
                "header {header}: the tool does not declare the connection {provider} (its manifest's `connection`)"
            )));
        }
        let token = context
            .connections()
            .access_token(account, tool.user, provider)
            .await
            .map_err(|err| ProxyError::Invalid(err.to_string()))?;
        opened.add_connection(provider, token);
    }
    let redactor = opened.redactor();
    let values = secrets::CallValues {
        input: &serde_json::Value::Null,
        secrets: &opened,
    };
    let mut outbound = context.client.request(method, url).timeout(timeout);
    for (name, template) in &templates {
        let value = template.render(&values).ok_or_else(|| {
            ProxyError::Invalid(format!("header {name}: a secret or connection is missing"))
        })?;
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|err| ProxyError::Invalid(format!("header {name}: {err}")))?;
        let value = HeaderValue::from_str(&value)
            .map_err(|_| ProxyError::Invalid(format!("header {name}: not a valid value")))?;
        outbound = outbound.header(name, value);
    }
    if let Some(body) = request.body {
        outbound = outbound.body(body);
    }
    let response = outbound.send().await.map_err(|err| match refusal(&err) {
        Some(refused) => ProxyError::Refused(format!("{host}: {refused}")),
        None => ProxyError::Upstream(redactor.text(&format!("{host} could not be reached: {err}"))),
    })?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes());
            (name.as_str().to_owned(), redactor.text(&value))
        })
        .collect();
    let body = read_capped(response, context.max_output_bytes)
        .await
        .map_err(|err| ProxyError::Upstream(format!("{host}: {err}")))?;
    Ok(ProxyResponse {
        status,
        headers,
        body: redactor.bytes(body),
    })
}

/// Each header's value as a template of secrets and connections only.
fn header_templates(headers: &[(String, String)]) -> Result<Vec<(String, Template)>, ProxyError> {
    headers
        .iter()
        .map(|(name, value)| {
            if !is_header_name(name) {
                return Err(ProxyError::Invalid(format!(
                    "header {name:?} may not be sent (Host, Content-Length and hop-by-hop headers are the server's)"
                )));
            }
            let template = Template::parse(&format!("headers.{name}"), value)
                .map_err(|err| ProxyError::Invalid(err.to_string()))?;
            if template.parts().iter().any(|part| matches!(part, Part::Input(_))) {
                return Err(ProxyError::Invalid(format!(
                    "header {name}: only {{{{secret.NAME}}}} and {{{{connection.PROVIDER.access_token}}}} placeholders are filled by ctx.fetch"
                )));
            }
            Ok((name.clone(), template))
        })
        .collect()
}
