//! The request of one HTTP tool call: the URL template expanded with the
//! input, query parameters and headers filled, the body rendered, and the
//! destination held to the tool's egress allow list and the server's
//! public-only policy.

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use toolserver_domain::http_tool::{http_method::Method, render_body, BodyType, HttpTool};
use toolserver_domain::EgressAllowList;

use super::super::Failure;
use super::secrets::{CallValues, OpenSecrets};
use super::HttpToolContext;
use crate::outbound::check_url;

/// Builds the request of one call.
pub(super) fn build(
    context: &HttpToolContext,
    tool: &HttpTool,
    egress: Option<&EgressAllowList>,
    input: &Value,
    secrets: &OpenSecrets,
) -> Result<reqwest::RequestBuilder, Failure> {
    let empty = Map::new();
    let fields = input.as_object().unwrap_or(&empty);
    let mut url = tool.url.expand(fields).map_err(Failure::tool)?;
    let host = url.host_str().unwrap_or_default().to_owned();
    if let Some(allow) = egress {
        if !allow.allows(&host) {
            return Err(Failure::tool(format!(
                "{host} is not in the tool's egress allow list"
            )));
        }
    }
    check_url(&url, &context.policy).map_err(Failure::tool)?;
    let values = CallValues { input, secrets };
    {
        let mut pairs = url.query_pairs_mut();
        for (name, template) in &tool.query {
            match template.sole_input().and_then(|key| input.get(key)) {
                Some(Value::Array(items)) => {
                    for item in items {
                        pairs.append_pair(name, &scalar_text(item));
                    }
                }
                _ => {
                    if let Some(value) = template.render(&values) {
                        pairs.append_pair(name, &value);
                    }
                }
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    let mut request = context.client.request(method(tool.method), url);
    for (name, template) in &tool.headers {
        let Some(value) = template.render(&values) else {
            continue;
        };
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|err| Failure::tool(format!("header {name}: {err}")))?;
        let value = HeaderValue::from_str(&value).map_err(|_| {
            Failure::tool(format!("header {name}: its value is not valid in a header"))
        })?;
        request = request.header(name, value);
    }
    if let Some(body) = tool
        .body
        .as_ref()
        .and_then(|body| render_body(body, &values))
    {
        request = match tool.body_type {
            BodyType::Json => request.json(&body),
            BodyType::Form => request.form(&form_fields(&body)?),
        };
    }
    Ok(request)
}

fn method(method: Method) -> reqwest::Method {
    match method {
        Method::Get => reqwest::Method::GET,
        Method::Head => reqwest::Method::HEAD,
        Method::Post => reqwest::Method::POST,
        Method::Put => reqwest::Method::PUT,
        Method::Patch => reqwest::Method::PATCH,
        Method::Delete => reqwest::Method::DELETE,
        Method::Options => reqwest::Method::OPTIONS,
    }
}

/// A scalar as text in a query or form; objects and arrays as JSON.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A form body's fields: an object's entries, arrays repeated.
fn form_fields(body: &Value) -> Result<Vec<(String, String)>, Failure> {
    let Value::Object(entries) = body else {
        return Err(Failure::tool("a form body must be an object"));
    };
    let mut fields = Vec::new();
    for (name, value) in entries {
        match value {
            Value::Array(items) => {
                fields.extend(items.iter().map(|item| (name.clone(), scalar_text(item))));
            }
            Value::Null => {}
            other => fields.push((name.clone(), scalar_text(other))),
        }
    }
    Ok(fields)
}
