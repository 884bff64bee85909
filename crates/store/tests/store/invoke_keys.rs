//! Idempotency keys of direct calls: a key is taken by one claim, running
//! while its process lives, then done with its result, or of unknown
//! outcome when cut off or when its process died; a released key is free
//! again, an expired one is taken over (its old claim fenced off) and
//! purged; two claims at once take it once; another account's key of the
//! same text is another key.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::ToolId;
use toolserver_store::invoke_keys::{self, Claimed, HeldKey, KeyState, NewClaim};
use uuid::Uuid;

use crate::support::{exec, live_process, race, tenant, Tenant};

/// A new claim on `key` for `tenant`'s tool by `process`, kept an hour.
fn new_claim(tenant: &Tenant, key: &str, process: Uuid) -> NewClaim {
    NewClaim {
        key: key.into(),
        claim: Uuid::now_v7(),
        tool_id: tenant.tool,
        fingerprint: [9; 32],
        process,
        ttl: Duration::from_secs(3600),
    }
}

async fn state(pool: &PgPool, tenant: &Tenant, key: &str) -> Option<KeyState> {
    invoke_keys::read(pool, &tenant.account, key)
        .await
        .unwrap()
        .map(|held| held.state)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_is_taken_once_runs_and_keeps_its_result(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    let first = new_claim(&a, "k1", process);
    let claimed = invoke_keys::claim(&pool, &a.account, &first).await.unwrap();
    assert_eq!(claimed, Claimed::Taken);

    let repeat = new_claim(&a, "k1", process);
    let held = invoke_keys::claim(&pool, &a.account, &repeat)
        .await
        .unwrap();
    assert_eq!(
        held,
        Claimed::Held(HeldKey {
            tool_id: a.tool,
            fingerprint: vec![9; 32],
            state: KeyState::Running,
        })
    );
    let result = json!({"callId": "c1", "output": 42, "logs": []});
    let stray = invoke_keys::finish(&pool, &a.account, "k1", repeat.claim, &json!({})).await;
    assert!(!stray.unwrap(), "only the claim that holds the key writes");
    let finished = invoke_keys::finish(&pool, &a.account, "k1", first.claim, &result).await;
    assert!(finished.unwrap());
    assert_eq!(
        state(&pool, &a, "k1").await,
        Some(KeyState::Done(result.clone()))
    );
    // A finished key is neither released nor cut off any more.
    invoke_keys::release(&pool, &a.account, "k1", first.claim)
        .await
        .unwrap();
    invoke_keys::interrupt(&pool, &a.account, "k1", first.claim)
        .await
        .unwrap();
    assert_eq!(state(&pool, &a, "k1").await, Some(KeyState::Done(result)));
}

#[sqlx::test(migrations = "../../migrations")]
async fn another_accounts_key_of_the_same_text_is_another_key(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let b = tenant(&pool, "acct_b").await;
    let process = live_process(&pool).await;
    let mut other_tool = new_claim(&b, "shared", process);
    other_tool.tool_id = ToolId::generate();
    for (tenant, claim) in [(&a, new_claim(&a, "shared", process)), (&b, other_tool)] {
        let claimed = invoke_keys::claim(&pool, &tenant.account, &claim).await;
        assert_eq!(claimed.unwrap(), Claimed::Taken);
    }
    let a_sees = invoke_keys::read(&pool, &a.account, "shared")
        .await
        .unwrap();
    assert_eq!(a_sees.unwrap().tool_id, a.tool);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_released_key_is_free_again(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    let refused = new_claim(&a, "k", process);
    invoke_keys::claim(&pool, &a.account, &refused)
        .await
        .unwrap();
    invoke_keys::release(&pool, &a.account, "k", refused.claim)
        .await
        .unwrap();
    assert_eq!(state(&pool, &a, "k").await, None);
    let retry = new_claim(&a, "k", process);
    let claimed = invoke_keys::claim(&pool, &a.account, &retry).await.unwrap();
    assert_eq!(claimed, Claimed::Taken);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_cut_off_or_of_a_dead_process_has_an_unknown_outcome(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    let cut = new_claim(&a, "cut", process);
    invoke_keys::claim(&pool, &a.account, &cut).await.unwrap();
    invoke_keys::interrupt(&pool, &a.account, "cut", cut.claim)
        .await
        .unwrap();
    assert_eq!(state(&pool, &a, "cut").await, Some(KeyState::Unknown));

    let running = new_claim(&a, "running", process);
    invoke_keys::claim(&pool, &a.account, &running)
        .await
        .unwrap();
    assert_eq!(state(&pool, &a, "running").await, Some(KeyState::Running));
    exec(
        &pool,
        "UPDATE server_processes SET alive_until = now() WHERE id = $1",
        process,
    )
    .await;
    assert_eq!(state(&pool, &a, "running").await, Some(KeyState::Unknown));
    // So is one whose process row is gone (purged after its death).
    exec(&pool, "DELETE FROM server_processes WHERE id = $1", process).await;
    assert_eq!(state(&pool, &a, "running").await, Some(KeyState::Unknown));
    let repeat = new_claim(&a, "running", Uuid::now_v7());
    let held = invoke_keys::claim(&pool, &a.account, &repeat)
        .await
        .unwrap();
    assert!(
        matches!(&held, Claimed::Held(key) if key.state == KeyState::Unknown),
        "{held:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_expired_key_is_taken_over_and_purged(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    let old = new_claim(&a, "old", process);
    invoke_keys::claim(&pool, &a.account, &old).await.unwrap();
    let kept = new_claim(&a, "kept", process);
    invoke_keys::claim(&pool, &a.account, &kept).await.unwrap();
    exec(
        &pool,
        "UPDATE invoke_idempotency_keys SET expires_at = now() - interval '1 second' \
         WHERE key = $1",
        "old",
    )
    .await;
    assert_eq!(
        state(&pool, &a, "old").await,
        None,
        "expired keys are not read"
    );

    let new = new_claim(&a, "old", process);
    let claimed = invoke_keys::claim(&pool, &a.account, &new).await.unwrap();
    assert_eq!(claimed, Claimed::Taken);
    let late = invoke_keys::finish(&pool, &a.account, "old", old.claim, &json!({})).await;
    assert!(!late.unwrap(), "the expired claim no longer writes");
    assert_eq!(state(&pool, &a, "old").await, Some(KeyState::Running));

    exec(
        &pool,
        "UPDATE invoke_idempotency_keys SET expires_at = now() - interval '1 second' \
         WHERE key = $1",
        "old",
    )
    .await;
    assert_eq!(invoke_keys::purge_expired(&pool, 10).await.unwrap(), 1);
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM invoke_idempotency_keys")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, ["kept"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn two_claims_at_once_take_the_key_once(pool: PgPool) {
    let a = tenant(&pool, "acct_a").await;
    let process = live_process(&pool).await;
    let (one, two) = (new_claim(&a, "k", process), new_claim(&a, "k", process));
    // Both inserts wait on the account row (their foreign key) until both
    // are under way.
    let (one, two) = race(
        &pool,
        "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE",
        a.account.as_str(),
        invoke_keys::claim(&pool, &a.account, &one),
        invoke_keys::claim(&pool, &a.account, &two),
    )
    .await;
    let mut outcomes = [one.unwrap(), two.unwrap()];
    outcomes.sort_by_key(|claimed| matches!(claimed, Claimed::Taken));
    assert!(
        matches!(&outcomes, [Claimed::Held(held), Claimed::Taken] if held.state == KeyState::Running),
        "{outcomes:?}"
    );
}
