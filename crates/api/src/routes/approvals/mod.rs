//! `/approvals`: the account's approvals (tool calls its turns stopped on
//! for a person's decision), listed, read and decided from any client;
//! `POST /approval-links/{token}` decides through the one-time link an
//! announcement carried. A decision that leaves none of its message's
//! approvals pending resumes the turn on the server. See `docs/approvals.md`.

mod decide;
mod list;
mod wire;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use wire::{ApprovalPage, ApprovalView, DecisionBody, DecisionView};

use crate::state::AppState;

/// The approval routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list::list_approvals))
        .routes(routes!(list::get_approval, decide::decide_approval))
        .routes(routes!(decide::decide_by_link))
}
