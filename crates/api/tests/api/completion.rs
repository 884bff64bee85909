//! `POST /sandbox-jobs/{id}/complete` and the fan-in behind it: forged,
//! duplicate and conflicting callbacks change nothing; the continuation of a
//! group is enqueued exactly once, under concurrency and whichever of the
//! last settlement and the seal comes first.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use toolserver_domain::{AccountId, CallStatus, ResultId};
use toolserver_store::async_results::{self, AsyncOutcome, NewAsyncResult, PassOwner};
use toolserver_store::jobs::{self, JobKind};
use uuid::Uuid;

use crate::app::{fs_store, TestApp};
use crate::support::*;

struct Call {
    id: ResultId,
    token: String,
}

fn account() -> AccountId {
    AccountId::parse(ACCOUNT_A).unwrap()
}

fn new_call(tool_call_id: &str, token_sha256: [u8; 32], ttl: Duration) -> NewAsyncResult {
    NewAsyncResult {
        tool_call_id: tool_call_id.into(),
        tool_id: None,
        tool_name: "slow".into(),
        token_sha256,
        ttl,
        heartbeat_timeout: None,
        liveness_timeout: Duration::from_secs(600),
        input: json!({}),
        safe_to_repeat: false,
    }
}

/// A detached turn of account A to hang groups on (no run).
pub async fn turn_fixture(pool: &PgPool) -> Uuid {
    toolserver_testsupport::fixtures::detached_turn(pool, ACCOUNT_A).await
}

async fn group_of(pool: &PgPool, calls: usize, ttl: Duration) -> (Uuid, Vec<Call>) {
    group_with(pool, &vec![ttl; calls]).await
}

/// One pass's calls, one per deadline, recorded in their group.
async fn group_with(pool: &PgPool, ttls: &[Duration]) -> (Uuid, Vec<Call>) {
    let turn = turn_fixture(pool).await;
    let tokens: Vec<String> = ttls
        .iter()
        .map(|_| hex::encode(Uuid::new_v4().as_bytes()) + &hex::encode(Uuid::new_v4().as_bytes()))
        .collect();
    let rows: Vec<NewAsyncResult> = ttls
        .iter()
        .zip(&tokens)
        .enumerate()
        .map(|(i, (ttl, token))| {
            new_call(
                &format!("call_{i}"),
                Sha256::digest(token.as_bytes()).into(),
                *ttl,
            )
        })
        .collect();
    let owner = PassOwner {
        turn_id: turn,
        job_id: Uuid::now_v7(),
    };
    let ids = async_results::register_pass(pool, &account(), owner, &rows)
        .await
        .unwrap();
    let group = sqlx::query_scalar("SELECT id FROM dispatch_groups WHERE turn_id = $1")
        .bind(turn)
        .fetch_one(pool)
        .await
        .unwrap();
    let calls = ids
        .into_iter()
        .zip(tokens)
        .map(|(id, token)| Call { id, token })
        .collect();
    (group, calls)
}

async fn complete(app: &TestApp, id: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = app
        .client
        .post(format!("{}/sandbox-jobs/{id}/complete", app.base()))
        .json(&body);
    if let Some(token) = token {
        request = request.header("x-job-token", token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn outbox_rows(pool: &PgPool, group: Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM continuation_outbox WHERE group_id = $1")
        .bind(group)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn forged_duplicate_and_conflicting_callbacks_change_nothing(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let (group, calls) = group_of(&pool, 2, Duration::from_secs(600)).await;
    let (first, second) = (&calls[0], &calls[1]);
    let done = json!({"status": "completed", "response": {"answer": 42}});
    let first_id = first.id.to_string();

    for (token, body, status, code) in [
        (None, done.clone(), 401, "unauthorized"),
        (Some("not-the-token"), done.clone(), 403, "forbidden"),
        (Some(second.token.as_str()), done.clone(), 403, "forbidden"),
        (
            Some(first.token.as_str()),
            json!({"status": "done"}),
            400,
            "invalid_request",
        ),
        (
            Some(first.token.as_str()),
            json!({"status": "completed"}),
            400,
            "invalid_request",
        ),
        (
            Some(first.token.as_str()),
            json!({"status": "failed", "error": "x", "extra": 1}),
            400,
            "invalid_request",
        ),
        (
            Some(first.token.as_str()),
            json!({"status": "failed", "error": " "}),
            400,
            "invalid_request",
        ),
    ] {
        let (got, reply) = complete(&app, &first_id, token, body.clone()).await;
        assert_eq!(
            (got, reply["error"]["code"].as_str()),
            (status, Some(code)),
            "{body} -> {reply}"
        );
    }
    let (got, _) = complete(
        &app,
        &Uuid::new_v4().to_string(),
        Some(&first.token),
        done.clone(),
    )
    .await;
    assert_eq!(got, 404);
    let (got, _) = complete(&app, "not-a-uuid", Some(&first.token), done.clone()).await;
    assert_eq!(got, 404);
    assert_eq!(
        async_results::get(&pool, &account(), first.id)
            .await
            .unwrap()
            .status,
        CallStatus::Pending
    );

    let (got, reply) = complete(&app, &first_id, Some(&first.token), done.clone()).await;
    assert_eq!(
        (got, reply),
        (200, json!({"status": "completed", "replay": false}))
    );
    let (got, reply) = complete(&app, &first_id, Some(&first.token), done.clone()).await;
    assert_eq!(
        (got, reply),
        (200, json!({"status": "completed", "replay": true}))
    );
    for conflicting in [
        json!({"status": "failed", "error": "boom"}),
        json!({"status": "completed", "response": {"answer": 41}}),
    ] {
        let (got, reply) = complete(&app, &first_id, Some(&first.token), conflicting).await;
        assert_eq!(
            (got, reply["error"]["code"].as_str()),
            (409, Some("already_settled"))
        );
    }
    let stored = async_results::get(&pool, &account(), first.id)
        .await
        .unwrap();
    assert_eq!(
        (stored.status.as_str(), stored.response),
        ("completed", Some(json!({"answer": 42})))
    );
    assert_eq!(
        outbox_rows(&pool, group).await,
        0,
        "one sibling is still pending"
    );

    let (got, _) = complete(
        &app,
        &second.id.to_string(),
        Some(&second.token),
        json!({"status": "failed", "error": "External job failed"}),
    )
    .await;
    assert_eq!(got, 200);
    assert_eq!(outbox_rows(&pool, group).await, 1);
    let (got, _) = complete(
        &app,
        &second.id.to_string(),
        Some(&second.token),
        json!({"status": "failed", "error": "External job failed"}),
    )
    .await;
    assert_eq!(got, 200);
    assert_eq!(outbox_rows(&pool, group).await, 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn two_hundred_concurrent_callbacks_enqueue_one_continuation(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let (group, calls) = group_of(&pool, 200, Duration::from_secs(600)).await;
    let replies = join_all(calls.iter().map(|call| {
        let id = call.id.to_string();
        let app = &app;
        async move {
            complete(
                app,
                &id,
                Some(&call.token),
                json!({"status": "completed", "response": id}),
            )
            .await
            .0
        }
    }))
    .await;
    assert!(replies.iter().all(|status| *status == 200), "{replies:?}");
    assert_eq!(outbox_rows(&pool, group).await, 1);
    let (remaining, continued): (i32, bool) = sqlx::query_as(
        "SELECT remaining, continued_at IS NOT NULL FROM dispatch_groups WHERE id = $1",
    )
    .bind(group)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((remaining, continued), (0, true));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_pass_is_recorded_whole_in_a_group_born_sealed(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let (group, calls) = group_of(&pool, 2, Duration::from_secs(600)).await;
    let (remaining, sealed): (i32, bool) = sqlx::query_as(
        "SELECT remaining, sealed_at IS NOT NULL FROM dispatch_groups WHERE id = $1",
    )
    .bind(group)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (remaining, sealed),
        (2, true),
        "every call, and the seal, at once"
    );
    for (i, call) in calls.iter().enumerate() {
        let (got, _) = complete(
            &app,
            &call.id.to_string(),
            Some(&call.token),
            json!({"status": "completed", "response": i}),
        )
        .await;
        assert_eq!(got, 200);
        assert_eq!(
            outbox_rows(&pool, group).await,
            i as i64,
            "continues after the last"
        );
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_expired_call_is_gone(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let (_, calls) = group_of(&pool, 1, Duration::ZERO).await;
    let (got, reply) = complete(
        &app,
        &calls[0].id.to_string(),
        Some(&calls[0].token),
        json!({"status": "completed", "response": 1}),
    )
    .await;
    assert_eq!(
        (got, reply["error"]["code"].as_str()),
        (410, Some("expired"))
    );
    assert_eq!(
        async_results::get(&pool, &account(), calls[0].id)
            .await
            .unwrap()
            .status,
        CallStatus::Pending
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_expired_sibling_still_lets_the_group_continue_once(pool: PgPool) {
    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let (group, mut calls) = group_with(&pool, &[Duration::from_secs(600), Duration::ZERO]).await;
    let stuck = calls.remove(1).id;
    let live = calls.remove(0);
    let (got, _) = complete(
        &app,
        &live.id.to_string(),
        Some(&live.token),
        json!({"status": "completed", "response": 1}),
    )
    .await;
    assert_eq!(got, 200);
    assert_eq!(
        outbox_rows(&pool, group).await,
        0,
        "the stuck sibling is still pending"
    );
    assert_eq!(async_results::expire_due(&pool, 100).await.unwrap(), 1);
    assert_eq!(async_results::expire_due(&pool, 100).await.unwrap(), 0);
    let record = async_results::get(&pool, &account(), stuck).await.unwrap();
    assert_eq!(record.status, CallStatus::Expired);
    assert!(record.error.unwrap().contains("expired"));
    assert_eq!(outbox_rows(&pool, group).await, 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn continuations_are_claimed_once_and_reclaimed_when_their_worker_is_lost(pool: PgPool) {
    let mut groups = Vec::new();
    for _ in 0..3 {
        let (group, calls) = group_of(&pool, 1, Duration::from_secs(60)).await;
        let done = AsyncOutcome::Completed(json!(1));
        async_results::settle(&pool, calls[0].id, &done)
            .await
            .unwrap();
        groups.push(group);
    }
    let claim = jobs::ClaimTerms {
        claim: Duration::from_secs(600),
        process: uuid::Uuid::now_v7(),
    };
    let claims = join_all((0..6).map(|_| jobs::claim(&pool, &claim, 5))).await;
    let mut claimed: Vec<_> = claims.into_iter().filter_map(|c| c.unwrap()).collect();
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    claimed.sort_by_key(|c| c.group_id);
    let mut expected = groups.clone();
    expected.sort();
    assert_eq!(
        claimed
            .iter()
            .map(|c| c.group_id.unwrap())
            .collect::<Vec<_>>(),
        expected
    );
    assert!(claimed
        .iter()
        .all(|c| c.attempts == 1 && c.kind == JobKind::Continue && c.account_id == ACCOUNT_A));
    assert!(jobs::claim(&pool, &claim, 5).await.unwrap().is_none());

    // One finishes (and leaves no row); a second finish of it finds nothing.
    let mut tx = pool.begin().await.unwrap();
    assert!(jobs::finish(&mut tx, &claimed[0]).await.unwrap());
    assert!(!jobs::finish(&mut tx, &claimed[0]).await.unwrap());
    tx.commit().await.unwrap();

    // The worker of another is lost: its claim lapses and the job is claimed
    // again, with a new token; the lost worker can no longer renew or finish it.
    sqlx::query("UPDATE continuation_outbox SET claim_expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(claimed[1].id)
        .execute(&pool)
        .await
        .unwrap();
    let retried = jobs::claim(&pool, &claim, 5).await.unwrap().unwrap();
    assert_eq!(retried.id, claimed[1].id);
    assert_eq!(retried.attempts, 2);
    assert_ne!(retried.claim_token, claimed[1].claim_token);
    assert!(!jobs::renew(&pool, &claimed[1], claim.claim).await.unwrap());
    let mut tx = pool.begin().await.unwrap();
    assert!(!jobs::finish(&mut tx, &claimed[1]).await.unwrap());
    assert!(jobs::finish(&mut tx, &retried).await.unwrap());
    tx.commit().await.unwrap();
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_runner_itself_posts_a_detached_result_to_the_completion_route(pool: PgPool) {
    use toolserver_harness::runner_call::{build_request, CallSpec, RunnerCallSettings};
    use toolserver_sandbox::{Executor, Frame, ReservationKey};

    let app = TestApp::live(pool.clone()).quiet().spawn().await;
    let source = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 100)); return { done: input.job, resultId: ctx.asyncTool.resultId }; } };";
    let tool = app
        .upload(ACCOUNT_A, "job", source, json!({"type": "object"}))
        .await;
    let tool = toolserver_domain::ToolId::parse(&tool).unwrap();
    let record = toolserver_store::tools::get(&pool, &account(), tool)
        .await
        .unwrap();
    let (group, calls) = group_of(&pool, 2, Duration::from_secs(600)).await;

    let dir = tempfile::tempdir().unwrap();
    let bundles = fs_store(dir.path()).await;
    bundles
        .put(source.as_bytes().to_vec().into())
        .await
        .unwrap();
    let executor = app.executor();
    let key = ReservationKey::new(account(), tool);
    for (i, call) in calls.iter().enumerate() {
        let path = format!("/sandbox-jobs/{}/complete", call.id);
        let spec = CallSpec {
            call_id: Uuid::new_v4().to_string(),
            idempotency_key: format!("call_{i}"),
            input: json!({"job": i}),
            options: Default::default(),
            timeout: Duration::from_secs(10),
            async_meta: Some(json!({
                "resultId": call.id.to_string(),
                "completePath": path,
                "completeUrl": format!("{}{path}", app.base()),
                "completionToken": call.token,
            })),
            fetch: None,
        };
        let settings = RunnerCallSettings {
            inline_bundle_max_bytes: 65_536,
            signed_url_ttl: Duration::from_secs(60),
            max_output_bytes: 1 << 20,
        };
        let request = build_request(bundles.as_ref(), &settings, &record, spec)
            .await
            .unwrap();
        let mut frames = executor.invoke(&key, request).await.unwrap();
        assert_eq!(
            frames.recv().await,
            Some(Frame::Launched),
            "the call returns at once"
        );
    }
    for _ in 0..200 {
        if outbox_rows(&pool, group).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        outbox_rows(&pool, group).await,
        1,
        "both runners reported and the group continued once"
    );
    for (i, call) in calls.iter().enumerate() {
        let stored = async_results::get(&pool, &account(), call.id)
            .await
            .unwrap();
        assert_eq!(stored.status, CallStatus::Completed);
        assert_eq!(
            stored.response,
            Some(json!({"done": i, "resultId": call.id.to_string()}))
        );
    }
}
