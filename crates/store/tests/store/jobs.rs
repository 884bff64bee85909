//! The job outbox and the server processes that hold claims: a claim with a
//! lease, taken again once it lapses or its process dies, fencing its old
//! holder; given back with or without counting the attempt; and one claim
//! among many claimers at once.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_store::async_results::{self, AsyncOutcome};
use toolserver_store::jobs::{self, JobKind};
use toolserver_store::{conversations, processes};
use uuid::Uuid;

use crate::support::{
    exec, jobs_of, lease, live_process, register_n, start_turn, start_turn_on, tenant, terms,
};

const LAPSED: &str =
    "UPDATE continuation_outbox SET claim_expires_at = now() - interval '1 second' \
                      WHERE id = $1";

#[sqlx::test(migrations = "../../migrations")]
async fn a_claim_takes_the_oldest_available_job_nobody_holds(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let first = start_turn_on(&pool, &tenant, "conv-1").await;
    let second = start_turn_on(&pool, &tenant, "conv-2").await;
    for turn in [&first, &second] {
        let id = register_n(&pool, &tenant, turn, 1).await[0];
        let outcome = AsyncOutcome::Completed(json!(1));
        async_results::settle(&pool, id, &outcome).await.unwrap();
    }
    let claimer = live_process(&pool).await;

    let taken = jobs::claim(&pool, &terms(claimer), 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (taken.kind, taken.turn_id, taken.attempts),
        (JobKind::Continue, first.id, 1)
    );
    let stored = jobs_of(&pool, first.id).await;
    let stored = stored.iter().find(|job| job.id == taken.id).unwrap();
    assert_eq!(stored.claim_token, Some(taken.claim_token));
    assert_eq!(stored.claimed_by, Some(claimer));
    assert!(stored.claimed && stored.attempts == 1);

    let next = jobs::claim(&pool, &terms(claimer), 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.kind, next.turn_id), (JobKind::Continue, second.id));
    assert_eq!(jobs::claim(&pool, &terms(claimer), 5).await.unwrap(), None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_lapsed_claim_is_taken_again_and_its_old_holder_is_fenced(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let successor = live_process(&pool).await;
    let claim = Duration::from_secs(60);

    assert_eq!(
        jobs::claim(&pool, &terms(successor), 5).await.unwrap(),
        None
    );
    assert!(jobs::renew(&pool, &turn.job, claim).await.unwrap());
    exec(&pool, LAPSED, turn.job.id).await;

    let taken = jobs::claim(&pool, &terms(successor), 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id, taken.attempts), (turn.job.id, 2));
    assert_ne!(taken.claim_token, turn.job.claim_token);
    let stale = &turn.job;
    assert!(!jobs::renew(&pool, stale, claim).await.unwrap());
    jobs::postpone(&pool, stale, Duration::from_secs(60))
        .await
        .unwrap();
    jobs::retry_later(&pool, stale, Duration::from_secs(60), "stale")
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    assert!(!jobs::finish(&mut tx, stale).await.unwrap());
    tx.rollback().await.unwrap();

    let stored = jobs_of(&pool, turn.id).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].claim_token, Some(taken.claim_token));
    assert_eq!(stored[0].claimed_by, Some(successor));
    assert_eq!(stored[0].attempts, 2);
    assert!(stored[0].claimed && stored[0].available && stored[0].last_error.is_none());
    assert!(jobs::renew(&pool, &taken, claim).await.unwrap());
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_claims_of_a_dead_process_lapse_at_once(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let successor = live_process(&pool).await;
    assert_eq!(
        jobs::claim(&pool, &terms(successor), 5).await.unwrap(),
        None
    );

    processes::mark_dead(&pool, turn.process).await.unwrap();
    let taken = jobs::claim(&pool, &terms(successor), 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((taken.id, taken.attempts), (turn.job.id, 2));
    assert_eq!(jobs_of(&pool, turn.id).await[0].claimed_by, Some(successor));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_job_given_back_waits_its_backoff_and_counts_only_failed_attempts(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let claimer = terms(turn.process);

    jobs::postpone(&pool, &turn.job, Duration::from_secs(60))
        .await
        .unwrap();
    let stored = &jobs_of(&pool, turn.id).await[0];
    assert!(stored.claim_token.is_none() && !stored.available);
    assert_eq!(stored.attempts, 0);
    assert_eq!(jobs::claim(&pool, &claimer, 5).await.unwrap(), None);

    exec(
        &pool,
        "UPDATE continuation_outbox SET available_at = now() WHERE id = $1",
        turn.job.id,
    )
    .await;
    let again = jobs::claim(&pool, &claimer, 5).await.unwrap().unwrap();
    assert_eq!(again.attempts, 1);

    jobs::retry_later(&pool, &again, Duration::ZERO, "the model timed out\0")
        .await
        .unwrap();
    let stored = &jobs_of(&pool, turn.id).await[0];
    assert!(stored.claim_token.is_none() && stored.available);
    assert_eq!(stored.attempts, 1);
    assert_eq!(
        stored.last_error.as_deref(),
        Some("the model timed out\\u0000")
    );
    assert_eq!(jobs::claim(&pool, &claimer, 1).await.unwrap(), None);
    let last = jobs::claim(&pool, &claimer, 2).await.unwrap().unwrap();
    assert_eq!(last.attempts, 2);
}

#[sqlx::test(migrations = "../../migrations")]
async fn of_many_claimers_at_once_exactly_one_takes_the_job(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let turn = start_turn(&pool, &tenant).await;
    let mut claimers = Vec::new();
    for _ in 0..4 {
        claimers.push(terms(live_process(&pool).await));
    }
    for round in 2..=6 {
        exec(&pool, LAPSED, turn.job.id).await;
        let (a, b, c, d) = tokio::join!(
            jobs::claim(&pool, &claimers[0], 10),
            jobs::claim(&pool, &claimers[1], 10),
            jobs::claim(&pool, &claimers[2], 10),
            jobs::claim(&pool, &claimers[3], 10),
        );
        let taken: Vec<_> = [a, b, c, d]
            .into_iter()
            .zip(&claimers)
            .filter_map(|(claim, claimer)| claim.unwrap().map(|job| (job, claimer)))
            .collect();
        assert_eq!(taken.len(), 1, "round {round}: {taken:?}");
        let (job, claimer) = &taken[0];
        assert_eq!(job.attempts, round);
        let stored = &jobs_of(&pool, turn.id).await[0];
        assert_eq!(stored.claim_token, Some(job.claim_token));
        assert_eq!(stored.claimed_by, Some(claimer.process));
        assert_eq!(stored.attempts, round);
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn dead_processes_are_purged_unless_they_still_hold_a_conversation(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    let gone = live_process(&pool).await;
    let holding = live_process(&pool).await;
    let alive = live_process(&pool).await;
    let held_once = live_process(&pool).await;
    lease(&pool, &tenant, "conv-1", holding).await;
    // A conversation freed by `held_once` still names it as its last
    // holder (so that its next take on that process changes no index).
    let turn = lease(&pool, &tenant, "conv-2", held_once).await;
    exec(
        &pool,
        "UPDATE conversations SET message_count = 1 WHERE id = $1",
        "conv-2",
    )
    .await;
    conversations::end_turn(&pool, &tenant.account, "conv-2", turn)
        .await
        .unwrap();
    let (last, free): (Option<Uuid>, bool) = sqlx::query_as(
        "SELECT lease_process, active_turn IS NULL FROM conversations WHERE id = 'conv-2'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((last, free), (Some(held_once), true));
    for process in [gone, holding, held_once] {
        processes::mark_dead(&pool, process).await.unwrap();
        let long_ago = "UPDATE server_processes SET alive_until = now() - interval '2 minutes' \
                        WHERE id = $1";
        exec(&pool, long_ago, process).await;
    }

    let purged = processes::purge_dead(&pool, Duration::from_secs(60)).await;
    assert_eq!(purged.unwrap(), 2);
    let left: Vec<(Uuid, bool)> =
        sqlx::query_as("SELECT id, alive_until > now() FROM server_processes ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, [(holding, false), (alive, true)]);

    let mut conn = pool.acquire().await.unwrap();
    processes::keep_alive(&mut conn, holding, Duration::from_secs(60))
        .await
        .unwrap();
    let (revived,): (bool,) =
        sqlx::query_as("SELECT alive_until > now() FROM server_processes WHERE id = $1")
            .bind(holding)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(revived);
}
