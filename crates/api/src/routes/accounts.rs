//! `GET /accounts/me/usage`: the calling account's limits, what it holds of
//! each, what its rates have left, and what its runners used this period.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use toolserver_domain::LimitKind;
use toolserver_store::account_limits;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Account;
use crate::error::{ApiResult, ErrorBody};
use crate::state::AppState;
use crate::usage::period_end;

/// The account's usage.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageView {
    /// The account.
    pub account: String,
    /// Whether this server checks requests against the limits.
    pub enforced: bool,
    /// Each concurrency and count limit, with what is in use.
    pub limits: Vec<LimitUse>,
    /// Each rate, with the tokens left.
    pub rates: Vec<RateUse>,
    /// The period the runner figures cover (a UTC calendar month).
    pub period: Period,
    /// CPU seconds the account's runners used this period.
    pub runner_cpu_seconds: f64,
    /// Bytes the egress proxy carried for the account's runners this period.
    pub egress_bytes: u64,
}

/// One concurrency or count limit and what is in use of it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitUse {
    /// The limit (`concurrentCalls`, `openTurns`, `pendingDetached`, `liveRunners`, `mcpTasks`).
    pub name: &'static str,
    /// Its value for the account.
    pub limit: u32,
    /// In use now. `concurrentCalls`, `openTurns` and `liveRunners` count
    /// what the server process answering holds; the others are global.
    pub in_use: u32,
}

/// One rate (a token bucket) and what it has left.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RateUse {
    /// The rate (`callsPerMinute`, `turnsPerMinute`).
    pub name: &'static str,
    /// Its value for the account, per minute.
    pub per_minute: u32,
    /// Starts it lets through at once after a quiet spell.
    pub burst: u32,
    /// Starts it would let through now.
    pub remaining: u32,
}

/// A usage period.
#[derive(Debug, Serialize, ToSchema)]
pub struct Period {
    /// First day (UTC), inclusive.
    #[schema(value_type = String, format = Date)]
    pub start: String,
    /// First day of the next period, exclusive.
    #[schema(value_type = String, format = Date)]
    pub end: String,
}

/// The account routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(usage))
}

/// The calling account's limits and usage.
#[utoipa::path(get, path = "/accounts/me/usage", tag = "accounts",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Limits, what is in use, rates left and this period's runner usage", body = UsageView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
    ))]
pub async fn usage(
    Account(account): Account,
    State(state): State<AppState>,
) -> ApiResult<Json<UsageView>> {
    let admission = state.admission();
    let (limits, held) = admission.held(&account).await?;
    let pool = state.pool();
    let pending = account_limits::pending_detached(pool, &account).await?;
    let tasks = account_limits::open_mcp_tasks(pool, &account).await?;
    let runners = state.executor().usage(&account);
    let (period, used) = state.usage().this_period(&account).await?;
    let live = u32::try_from(runners.live_runners).unwrap_or(u32::MAX);
    let counted = [
        (LimitKind::ConcurrentCalls, held.calls),
        (LimitKind::OpenTurns, held.turns),
        (LimitKind::PendingDetached, pending),
        (LimitKind::LiveRunners, live),
        (LimitKind::McpTasks, tasks),
    ];
    Ok(Json(UsageView {
        account: account.to_string(),
        enforced: admission.enabled(),
        limits: counted
            .into_iter()
            .map(|(kind, in_use)| LimitUse {
                name: kind.name(),
                limit: limits.get(kind),
                in_use,
            })
            .collect(),
        rates: vec![
            RateUse {
                name: LimitKind::CallsPerMinute.name(),
                per_minute: limits.calls_per_minute,
                burst: limits.call_burst,
                remaining: held.call_tokens,
            },
            RateUse {
                name: LimitKind::TurnsPerMinute.name(),
                per_minute: limits.turns_per_minute,
                burst: limits.turn_burst,
                remaining: held.turn_tokens,
            },
        ],
        period: Period {
            start: period.to_string(),
            end: period_end(period).to_string(),
        },
        runner_cpu_seconds: used.cpu_ms as f64 / 1000.0,
        egress_bytes: used.egress_bytes,
    }))
}
