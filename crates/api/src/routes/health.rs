//! Liveness and readiness probes; neither needs a token.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// A probe's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeStatus {
    /// Always `ok` when the probe succeeds.
    pub status: &'static str,
}

/// The readiness probe's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    /// Always `ok` when the server is ready.
    pub status: &'static str,
    /// What an operator must know although the server is ready, in words
    /// (e.g. that runners are not isolated); empty when nothing is amiss.
    pub warnings: Vec<String>,
}

/// The probe routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

/// Liveness: the process is up and serving.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Process is up", body = ProbeStatus)))]
pub async fn healthz() -> Json<ProbeStatus> {
    Json(ProbeStatus { status: "ok" })
}

/// Readiness: the database answers a query. A ready server may still carry
/// warnings (e.g. runners that are not isolated).
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready to serve, with any warnings", body = Readiness),
        (status = 503, description = "Database unreachable", body = ErrorBody),
    ))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Readiness>> {
    sqlx::query("SELECT 1")
        .execute(state.pool())
        .await
        .map_err(|err| ApiError::Unavailable(err.to_string()))?;
    Ok(Json(Readiness {
        status: "ok",
        warnings: state.executor().warnings(),
    }))
}
