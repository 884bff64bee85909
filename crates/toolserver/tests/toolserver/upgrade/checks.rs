//! What each item left in flight settles to after the upgrade, and why:
//! the waiting turn, the claimed job, the turn cut off in its first pass,
//! and the chat turn with its open stream.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_store::async_results::{LEGACY_RUNNER_ERROR, SILENT_RUNNER_ERROR};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::ScriptedModel;
use uuid::Uuid;

use crate::server::{Server, Setup};

use super::{agent_id, call, old_token, recorded_chunks, user, InFlight};

async fn turn(pool: &PgPool, id: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, error FROM async_turns WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Whether `id` is out of `running`/`waiting`.
async fn settled(pool: &PgPool, id: Uuid) -> bool {
    !matches!(turn(pool, id).await.0.as_str(), "running" | "waiting")
}

/// The chunks that end a stream whose server stopped.
fn server_stopped() -> [Value; 2] {
    [
        json!({"type": "error", "errorText": "the server running this turn stopped before the turn ended"}),
        json!({"type": "finish", "finishReason": "error"}),
    ]
}

/// The reason the reaper gives a turn with no way on.
const STUCK: &str = "the turn stopped making progress and was given up";

/// The SSE data frames of a response's whole body.
async fn frames(response: reqwest::Response) -> Vec<String> {
    let body = response.text().await.unwrap();
    body.split("\n\n")
        .filter_map(|event| event.trim().strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// The waiting turn's call fails as its runner's silence (not as expired),
/// the model is told so, the turn completes, and the old runner's late
/// outcome is answered 409 without changing anything.
pub(super) async fn check_waiting(
    pool: &PgPool,
    setup: &Setup,
    server: &Server,
    model: &ScriptedModel,
    flight: &InFlight,
) {
    until("the waiting turn to settle", || async {
        settled(pool, flight.waiting).await
    })
    .await;
    let reason = if flight.version < 6 {
        LEGACY_RUNNER_ERROR
    } else {
        SILENT_RUNNER_ERROR
    };
    assert_eq!(
        call(pool, flight.waiting_call).await,
        ("failed".to_owned(), Some(reason.to_owned())),
        "the call failed as its runner's silence"
    );
    assert_eq!(
        turn(pool, flight.waiting).await,
        ("completed".to_owned(), None)
    );
    let requests = model.requests("waiting");
    assert_eq!(requests.len(), 1, "one continuation");
    assert!(
        requests[0].to_string().contains(reason),
        "the model is told why: {}",
        requests[0]
    );

    let late = setup
        .client()
        .post(format!(
            "{}/sandbox-jobs/{}/complete",
            server.base, flight.waiting_call
        ))
        .header("x-job-token", old_token(flight.waiting_call))
        .json(&json!({"status": "completed", "response": {"late": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 409);
    let body: Value = late.json().await.unwrap();
    assert_eq!(body["error"]["code"], "already_settled", "{body}");
    assert_eq!(
        turn(pool, flight.waiting).await,
        ("completed".to_owned(), None)
    );
    assert_eq!(model.requests("waiting").len(), 1, "no second continuation");
}

/// The claimed job runs again once, from the stored conversation, and its
/// turn completes; before 0006, the calls of its cut-off pass fail as their
/// runner's silence and their group never continues.
pub(super) async fn check_claimed(pool: &PgPool, model: &ScriptedModel, flight: &InFlight) {
    until("the claimed turn to settle", || async {
        settled(pool, flight.claimed).await
    })
    .await;
    assert_eq!(
        turn(pool, flight.claimed).await,
        ("completed".to_owned(), None)
    );
    if let Some(cut_off) = flight.cut_off_call {
        until("the cut-off pass's call to settle", || async {
            call(pool, cut_off).await.0 != "pending"
        })
        .await;
        assert_eq!(
            call(pool, cut_off).await,
            ("failed".to_owned(), Some(LEGACY_RUNNER_ERROR.to_owned()))
        );
        let requests = model.requests("claimed");
        assert!(
            requests[0].to_string().contains("{\\\"done\\\":true}"),
            "the continuation tells its group's result: {}",
            requests[0]
        );
    }
    assert_eq!(
        turn(pool, flight.claimed).await,
        ("completed".to_owned(), None)
    );
    assert_eq!(model.requests("claimed").len(), 1, "the run ran once");
}

/// Before 0006: the turn cut off in its first pass fails (its message was
/// never stored, so nothing answers for it), its call fails as its runner's
/// silence, and the model is not asked again.
pub(super) async fn check_first_pass(pool: &PgPool, model: &ScriptedModel, flight: &InFlight) {
    let Some((first, first_call)) = flight.first else {
        return;
    };
    until("the first-pass turn and its call to settle", || async {
        settled(pool, first).await && call(pool, first_call).await.0 != "pending"
    })
    .await;
    assert_eq!(
        turn(pool, first).await,
        ("failed".to_owned(), Some(STUCK.to_owned()))
    );
    assert_eq!(
        call(pool, first_call).await,
        ("failed".to_owned(), Some(LEGACY_RUNNER_ERROR.to_owned()))
    );
    assert!(model.requests("first").is_empty(), "no continuation");
}

/// The chat turn's open stream ends with the error of a stopped server for
/// a reader, and the conversation takes a new turn once the old lease ends.
pub(super) async fn check_chat(pool: &PgPool, setup: &Setup, server: &Server, flight: &InFlight) {
    let agent = format!("agent_{}", agent_id("chat").simple());
    let resumed = setup
        .client()
        .get(format!(
            "{}/agents/{agent}/chat/conv-chat/stream",
            server.base
        ))
        .bearer_auth(setup.token())
        .send()
        .await
        .unwrap();
    if let Some(stream) = flight.stream {
        assert_eq!(resumed.status(), 200);
        let mut frames = frames(resumed).await;
        assert_eq!(frames.pop().as_deref(), Some("[DONE]"));
        let chunks: Vec<Value> = frames
            .iter()
            .map(|f| serde_json::from_str(f).unwrap())
            .collect();
        let mut expected: Vec<Value> = recorded_chunks()
            .iter()
            .map(|c| serde_json::from_str(c).unwrap())
            .collect();
        expected.extend(server_stopped());
        assert_eq!(chunks, expected, "the recorded chunks, then the error");
        let (status,): (String,) = sqlx::query_as("SELECT status FROM turn_streams WHERE id = $1")
            .bind(stream)
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(status, "finished");
    } else {
        assert_eq!(resumed.status(), 204, "no stream before 0008");
    }

    let body =
        json!({"id": "conv-chat", "messages": [user("u2", "again")], "trigger": "submit-message"});
    let started = Instant::now();
    let response = loop {
        let response = setup
            .client()
            .post(format!("{}/agents/{agent}/chat", server.base))
            .bearer_auth(setup.token())
            .json(&body)
            .send()
            .await
            .unwrap();
        if response.status() != 409 {
            break response;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "timed out waiting for the conversation to take a new turn"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(response.status(), 200);
    let text: String = frames(response)
        .await
        .iter()
        .filter_map(|frame| serde_json::from_str::<Value>(frame).ok())
        .filter(|chunk| chunk["type"] == "text-delta")
        .filter_map(|chunk| chunk["delta"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(text, "chat done.");
}
