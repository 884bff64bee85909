//! `POST /runner/fetch`: a bundle tool's `ctx.fetch`. The runner presents
//! its call's fetch grant (`x-fetch-grant`, signed by the server, naming
//! the account and the tool); the server fills `{{secret.NAME}}` in the
//! header values from the account's secrets, makes the request through
//! its public-only client and the tool's egress allow list, and answers
//! with what came back, any secret value in it replaced. Tool code never
//! holds a secret's value.
//!
//! Answers: 401 without a grant, 403 a grant that is forged or expired,
//! 404 a tool since deleted; otherwise 200 with the upstream's answer, or
//! with `error` saying why no answer came (refused, invalid, upstream).

use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use base64::Engine;
use serde::{Deserialize, Serialize};
use toolserver_harness::fetch_grant::FetchGrant;
use toolserver_harness::tools::{http_context, proxy, FetchingTool, ProxyError, ProxyRequest};
use toolserver_store::{tools, StoreError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiJson;
use crate::state::AppState;

/// Header carrying the call's fetch grant.
pub const FETCH_GRANT_HEADER: &str = "x-fetch-grant";

/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// A request the tool's code asks for.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FetchBody {
    /// The absolute http(s) URL.
    pub url: String,
    /// The method (`GET` when absent).
    pub method: Option<String>,
    /// Headers as `[name, value]` pairs; values may hold `{{secret.NAME}}`.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body_base64: Option<String>,
}

/// What came back.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchAnswer {
    /// The upstream's answer, when one came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<FetchedResponse>,
    /// Why none came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<FetchFailure>,
}

/// An upstream answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchedResponse {
    /// Its status code.
    pub status: u16,
    /// Its headers as `[name, value]` pairs.
    pub headers: Vec<(String, String)>,
    /// Its body, base64.
    pub body_base64: String,
}

/// Why a fetch got no answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FetchFailure {
    /// `invalid` (the request breaks a rule), `refused` (a destination
    /// the tool may not reach) or `upstream` (no answer, or too large).
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// The runner fetch route.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(runner_fetch))
}

/// Makes a request for a bundle tool's code (`ctx.fetch`), filling its
/// secrets in the server.
#[utoipa::path(post, path = "/runner/fetch", tag = "tools",
    params(("x-fetch-grant" = String, Header, description = "The call's fetch grant, as the runner received it")),
    request_body = FetchBody,
    responses(
        (status = 200, description = "The upstream's answer, or why none came", body = FetchAnswer),
        (status = 400, description = "Malformed body or unknown field", body = ErrorBody),
        (status = 401, description = "No fetch grant", body = ErrorBody),
        (status = 403, description = "A fetch grant that is not valid or has expired", body = ErrorBody),
        (status = 404, description = "The grant's tool no longer exists", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn runner_fetch(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<FetchBody>,
) -> ApiResult<Json<FetchAnswer>> {
    let presented = headers
        .get(FETCH_GRANT_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            ApiError::Unauthorized(format!("the {FETCH_GRANT_HEADER} header is required"))
        })?;
    let harness = state.harness();
    let grant = FetchGrant::verify(harness.sealer(), presented)
        .ok_or_else(|| ApiError::Forbidden("the fetch grant is not valid or has expired".into()))?;
    let tool = tools::get(state.pool(), &grant.account, grant.tool)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("tool"),
            other => other.into(),
        })?;
    let request_body = body
        .body_base64
        .map(|encoded| base64::engine::general_purpose::STANDARD.decode(encoded))
        .transpose();
    let Ok(request_body) = request_body else {
        return Ok(Json(failure("invalid", "bodyBase64 is not base64".into())));
    };
    let request = ProxyRequest {
        method: body.method.unwrap_or_else(|| "GET".into()),
        url: body.url,
        headers: body.headers,
        body: request_body,
    };
    let context = http_context(harness.sources());
    let fetching = FetchingTool {
        account: &grant.account,
        user: &grant.user,
        egress: tool.egress_allow.as_ref(),
        connection: tool.connection.as_deref(),
    };
    let answer = match proxy(&context, fetching, request, FETCH_TIMEOUT).await {
        Ok(response) => FetchAnswer {
            response: Some(FetchedResponse {
                status: response.status,
                headers: response.headers,
                body_base64: base64::engine::general_purpose::STANDARD.encode(response.body),
            }),
            error: None,
        },
        Err(err) => {
            let kind = match err {
                ProxyError::Invalid(_) => "invalid",
                ProxyError::Refused(_) => "refused",
                ProxyError::Upstream(_) => "upstream",
            };
            failure(kind, err.to_string())
        }
    };
    Ok(Json(answer))
}

fn failure(kind: &str, message: String) -> FetchAnswer {
    FetchAnswer {
        response: None,
        error: Some(FetchFailure {
            kind: kind.to_owned(),
            message,
        }),
    }
}
