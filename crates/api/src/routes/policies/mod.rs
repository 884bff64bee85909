//! `/policies`: the account's policies (Cedar text deciding which tool
//! calls may run), read, replaced whole, and asked about one call
//! (`POST /policies/explain`); and the layers narrowing one end user's
//! calls and one conversation's. See `docs/policies.md`.

mod explain;
mod save;
mod scoped;
mod wire;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use wire::{
    ExplainBody, ExplainView, PoliciesBody, PoliciesView, ScopedPoliciesBody, ScopedPoliciesView,
};

use crate::state::AppState;

/// The policy routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(save::get_policies, save::put_policies))
        .routes(routes!(explain::explain_policies))
        .routes(routes!(
            scoped::get_user_policies,
            scoped::put_user_policies
        ))
        .routes(routes!(
            scoped::get_conversation_policies,
            scoped::put_conversation_policies
        ))
}
