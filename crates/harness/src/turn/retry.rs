//! A turn's call tried again when its tool allows it: a `read` or
//! `idempotent` call that failed for a transient reason (its deadline
//! passed, its runner was lost or could not be reached) is tried again
//! under the tool's retry policy, after a wait that doubles from the
//! policy's first up to its longest, with jitter; every try is an attempt
//! of its own on the ledger, under the same idempotency key. A
//! `side_effect` call is never tried again: when it failed in a way that
//! leaves its outcome unknown, the model is told it may have run.

use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use serde_json::Value;
use toolserver_domain::ToolEffects;

use super::start::start_call;
use crate::ledger::{CallPlace, TurnLedger};
use crate::tools::{Failure, RegisteredTool, ToolEvent, ToolEvents};

/// What a side-effect call's failure adds when its outcome is unknown.
pub const MAY_HAVE_RUN: &str =
    "its outcome is unknown: it may have run, and it was not run again (its tool declares side effects)";

/// One call and what trying it again needs.
struct Tries {
    ledger: Option<TurnLedger>,
    tool: RegisteredTool,
    place: CallPlace,
    input: Value,
    events: ToolEvents,
}

impl Tries {
    fn may_try_again(&self, failure: &Failure) -> bool {
        self.tool.effects.allows_repeat()
            && failure.kind.transient()
            && u32::try_from(self.place.attempt).unwrap_or(u32::MAX) < self.tool.retry.max_attempts
    }

    /// The wait before attempt `self.place.attempt + 1`.
    fn backoff(&self) -> Duration {
        let policy = &self.tool.retry;
        let doublings = u32::try_from(self.place.attempt - 1).unwrap_or(0).min(16);
        let wait = policy
            .initial_backoff
            .saturating_mul(1 << doublings)
            .min(policy.max_backoff.max(policy.initial_backoff));
        wait.mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
    }

    fn start_next(&mut self) {
        self.place.attempt += 1;
        self.events = start_call(
            self.ledger.as_ref(),
            &self.tool,
            &self.place,
            self.input.clone(),
        );
    }
}

/// The events of `tool`'s call at `place`, tried again as its tool allows.
pub(super) fn with_retries(
    ledger: Option<&TurnLedger>,
    tool: &RegisteredTool,
    place: &CallPlace,
    input: Value,
) -> ToolEvents {
    let events = start_call(ledger, tool, place, input.clone());
    let tries = Tries {
        ledger: ledger.cloned(),
        tool: tool.clone(),
        place: place.clone(),
        input,
        events,
    };
    futures::stream::unfold(Some(tries), |tries| async move {
        let mut tries = tries?;
        loop {
            match tries.events.next().await? {
                ToolEvent::Failed(failure) if tries.may_try_again(&failure) => {
                    tracing::info!(
                        tool = %tries.tool.name,
                        attempt = tries.place.attempt,
                        error = %failure,
                        "a call failed for a transient reason; trying it again"
                    );
                    tokio::time::sleep(tries.backoff()).await;
                    tries.start_next();
                }
                ToolEvent::Failed(failure) => {
                    let failure = explained(&tries.tool, failure);
                    return Some((ToolEvent::Failed(failure), None));
                }
                event @ ToolEvent::Output(_) => return Some((event, None)),
                event => return Some((event, Some(tries))),
            }
        }
    })
    .boxed()
}

/// `failure` as the model reads it: a side-effect call whose outcome is
/// unknown says it may have run.
fn explained(tool: &RegisteredTool, failure: Failure) -> Failure {
    if tool.effects == ToolEffects::SideEffect && failure.kind.may_have_run() {
        let message = format!("{}; {MAY_HAVE_RUN}", failure.message);
        return Failure::new(failure.kind, message);
    }
    failure
}
