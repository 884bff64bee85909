//! `Idempotency-Key` on direct calls (see `toolserver_store::invoke_keys`).
//!
//! Sequence: [`begin`] claims the key for the request's fingerprint (its
//! tool and [`fingerprint`](super::fingerprint)) before anything but the
//! tool id is checked. A key held by a different request is a 422; a
//! finished call's result is replayed; a call still running is a 409 with
//! `Retry-After`; a call whose outcome nobody knows (cut off, or its
//! process died) is a 409 for as long as the key lives, so the tool never
//! runs twice for it. A new claim is then either released, when the request
//! is refused before its call reached a runner, or given the call's result
//! when it ends; a claim dropped before either (the client went away, the
//! request timed out) leaves the outcome unknown.

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;
use toolserver_domain::{AccountId, ToolId, ValidationError};
use toolserver_store::invoke_keys::{self, Claimed, KeyState, NewClaim};
use uuid::Uuid;

use super::fingerprint::fingerprint;
use super::{replay, InvokeBody, InvokeResult};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The header, as errors name it.
const HEADER: &str = "Idempotency-Key";

/// Longest key, in characters.
const MAX_KEY_CHARS: usize = 255;

/// Seconds a repeat is asked to wait while the first call runs.
const RETRY_RUNNING_SECS: u32 = 1;

/// How a request goes on after its key was looked at.
pub(super) enum Begin {
    /// Run the call, recording its end in the claim.
    Run(Claim),
    /// Answered with the kept result of an earlier request under the key
    /// (the response, that result, and the key).
    Replayed(Response, InvokeResult, String),
    /// Answered from the key: a 409.
    Answered(Response),
}

/// Claims the request's `Idempotency-Key`, if it has one, for calling
/// `tool` with `body`.
pub(super) async fn begin(
    state: &AppState,
    account: &AccountId,
    tool: ToolId,
    headers: &HeaderMap,
    body: &InvokeBody,
) -> ApiResult<Begin> {
    let Some(key) = parse_key(headers)? else {
        return Ok(Begin::Run(Claim(None)));
    };
    let new = NewClaim {
        key,
        claim: Uuid::now_v7(),
        tool_id: tool,
        fingerprint: fingerprint(body),
        process: state.lifecycle().process().id(),
        ttl: state.settings().invoke_idempotency_ttl,
    };
    let held = match invoke_keys::claim(state.pool(), account, &new).await? {
        Claimed::Taken => {
            return Ok(Begin::Run(Claim(Some(Held {
                pool: state.pool().clone(),
                account: account.clone(),
                key: new.key,
                id: new.claim,
            }))))
        }
        Claimed::Held(held) => held,
        Claimed::Contended => return Ok(Begin::Answered(running())),
    };
    if held.tool_id != tool || held.fingerprint != new.fingerprint {
        return Err(ValidationError::new(
            HEADER,
            "this key was used for a different request (another tool or body); \
             send a new key for a new request",
        )
        .into());
    }
    Ok(Begin::Answered(match held.state {
        KeyState::Done(result) => {
            let result = replay::parse(result)?;
            let response = replay::respond(result.clone(), super::wants_event_stream(headers));
            return Ok(Begin::Replayed(response, result, new.key));
        }
        KeyState::Running => running(),
        KeyState::Unknown => ApiError::Conflict {
            code: "idempotency_outcome_unknown",
            message: "the first request with this Idempotency-Key was cut off before its \
                      call ended, so whether the tool ran is unknown; it is not run again \
                      for this key"
                .into(),
        }
        .into_response(),
    }))
}

/// The key of `headers`: sent once, 1 to 255 printable ASCII characters.
fn parse_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let mut sent = headers.get_all(HEADER).iter();
    let Some(raw) = sent.next() else {
        return Ok(None);
    };
    if sent.next().is_some() {
        return Err(ApiError::bad_field(HEADER, "must be sent at most once"));
    }
    match raw.to_str() {
        Ok(key)
            if (1..=MAX_KEY_CHARS).contains(&key.len())
                && key.bytes().all(|b| (b' '..=b'~').contains(&b)) =>
        {
            Ok(Some(key.to_owned()))
        }
        _ => Err(ApiError::bad_field(
            HEADER,
            format!("must be 1 to {MAX_KEY_CHARS} printable ASCII characters"),
        )),
    }
}

/// The 409 of a repeat while the first call runs.
fn running() -> Response {
    let mut response = ApiError::Conflict {
        code: "idempotency_key_in_use",
        message: "a request with this Idempotency-Key is still running; \
                  repeat it after it ends to get its result"
            .into(),
    }
    .into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(RETRY_RUNNING_SECS));
    response
}

/// A request's hold on its key; holds nothing without a key.
pub(super) struct Claim(Option<Held>);

struct Held {
    pool: PgPool,
    account: AccountId,
    key: String,
    id: Uuid,
}

impl Claim {
    /// Frees the key of a request refused before its call reached a
    /// runner, so a retry can run; hands back the refusal.
    pub(super) async fn release(mut self, refusal: ApiError) -> ApiError {
        if let Some(held) = self.0.take() {
            let released =
                invoke_keys::release(&held.pool, &held.account, &held.key, held.id).await;
            if let Err(err) = released {
                tracing::warn!(error = %err, "could not release an idempotency key; it stays taken until it expires");
            }
        }
        refusal
    }

    /// Stores the ended call's `result` under the key, for replays; the
    /// claim holds nothing after.
    pub(super) async fn store(&mut self, result: &InvokeResult) {
        let Some(held) = self.0.take() else {
            return;
        };
        let stored = match serde_json::to_value(result) {
            Ok(value) => {
                invoke_keys::finish(&held.pool, &held.account, &held.key, held.id, &value).await
            }
            Err(err) => {
                tracing::error!(error = %err, "could not encode a call's result for its idempotency key");
                Ok(false)
            }
        };
        match stored {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                "an idempotency key expired before its call ended; its result is not kept"
            ),
            Err(err) => {
                tracing::warn!(error = %err, "could not store a call's result under its idempotency key");
                held.interrupt().await;
            }
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some(held) = self.0.take() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(held.interrupt());
        }
    }
}

impl Held {
    /// Records that the call may have run but its result is unknown.
    async fn interrupt(self) {
        let interrupted =
            invoke_keys::interrupt(&self.pool, &self.account, &self.key, self.id).await;
        if let Err(err) = interrupted {
            tracing::warn!(error = %err, "could not mark an idempotency key's call as cut off");
        }
    }
}
