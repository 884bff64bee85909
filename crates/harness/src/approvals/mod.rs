//! Approvals as durable records. A turn that stops on calls needing a
//! person's decision (`needsApproval`, or a policy that asks) records one
//! approval per call before it stores its conversation
//! ([`Lifecycle::record_asked`]), with who may decide, an expiry and a
//! one-time link, and announces each on the account's approval webhook.
//!
//! A decision can come from any client: `POST /approvals/{id}`, the link,
//! the chat that asked (its next request, as before), or the expiry (a
//! denial). The decision that leaves none of its assistant message's
//! approvals pending resumes the turn on the server, as a detached turn
//! carrying every decision ([`Lifecycle::decide_approval`]); whoever
//! follows the conversation's stream sees it run. A resumption that was
//! lost (a process died, the conversation was busy) is taken up again by
//! the reaper ([`Lifecycle::reap_approvals`]).

mod asked;
mod decide;
mod link;
mod record;
mod resume;
mod sweep;

pub use asked::{asked_in, AskedApproval};
pub use decide::{DecideError, Decided, Decider};
pub use link::LinkToken;
pub use record::AskedScope;
pub use sweep::ApprovalSweep;
