//! Downloads through signed, expiring URLs minted by the filesystem bundle
//! store. The signature is the credential: no bearer token is needed, and a
//! bad or foreign signature looks like a missing bundle.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use toolserver_domain::Sha256Digest;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::ApiQuery;
use crate::state::AppState;

/// The signature part of a signed URL.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SignedQuery {
    /// Unix time (seconds) after which the link is refused.
    pub expires: i64,
    /// Hex HMAC-SHA256 over `"{sha256}:{expires}"`.
    pub signature: String,
}

/// The signed-download route.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(download_signed))
}

/// Downloads a bundle through a signed URL.
#[utoipa::path(get, path = "/bundles/{sha256}", tag = "bundles",
    params(("sha256" = String, Path, description = "Bundle SHA-256 (hex)"), SignedQuery),
    responses(
        (status = 200, description = "Bundle bytes", content_type = "text/javascript", body = Vec<u8>),
        (status = 400, description = "Missing or malformed signature parameters", body = ErrorBody),
        (status = 404, description = "Unknown bundle or bad signature", body = ErrorBody),
        (status = 410, description = "Link expired", body = ErrorBody),
    ))]
pub async fn download_signed(
    State(state): State<AppState>,
    Path(sha256): Path<String>,
    ApiQuery(query): ApiQuery<SignedQuery>,
) -> ApiResult<Response> {
    let sha256 = Sha256Digest::parse(&sha256).map_err(|_| ApiError::NotFound("bundle"))?;
    state
        .bundles()
        .verify_download(&sha256, query.expires, &query.signature)?;
    let bytes = state.bundles().get(&sha256).await?;
    Ok(bundle_response(&sha256, bytes))
}

/// A response carrying bundle bytes, tagged with their digest.
pub fn bundle_response(sha256: &Sha256Digest, bytes: bytes::Bytes) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript".to_owned()),
            (header::ETAG, format!("\"{sha256}\"")),
            (
                header::HeaderName::from_static("x-bundle-sha256"),
                sha256.to_hex(),
            ),
        ],
        bytes,
    )
        .into_response()
}
