//! Job claim latency against history: claims on an empty outbox, then the
//! same claims after 100,000 jobs were enqueued and finished (finished jobs
//! are deleted; their dead rows stay until autovacuum). Run by `make bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use sqlx::PgPool;
use toolserver_store::jobs;
use toolserver_testsupport::bench::{ms, summary, ScratchDatabase};
use toolserver_testsupport::fixtures::detached_turn;
use uuid::Uuid;

const CLAIMS: usize = 500;
const HISTORY: i64 = 100_000;

#[tokio::main]
async fn main() {
    let db = ScratchDatabase::create("claim").await;
    let pool = PgPool::connect(&db.url).await.unwrap();
    toolserver_store::migrate(&pool).await.unwrap();
    let turn = detached_turn(&pool, "bench").await;

    let empty = claims(&pool, turn).await;
    let started = Instant::now();
    finish_history(&pool, turn).await;
    println!(
        "{HISTORY} jobs enqueued and finished in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let after = claims(&pool, turn).await;

    let (empty_p50, _) = summary("claim, empty outbox (baseline)", empty);
    let (after_p50, _) = summary("claim, after 100,000 finished jobs", after);
    println!(
        "ratio p50 after/baseline = {:.2} ({:.3} ms vs {:.3} ms)",
        after_p50.as_secs_f64() / empty_p50.as_secs_f64(),
        ms(after_p50),
        ms(empty_p50)
    );
    pool.close().await;
    db.drop_now().await;
}

/// Enqueues and finishes `CLAIMS` jobs one at a time; returns each claim's latency.
async fn claims(pool: &PgPool, turn: Uuid) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(CLAIMS);
    for _ in 0..CLAIMS {
        enqueue(pool, turn, 1).await;
        let started = Instant::now();
        let job = jobs::claim(
            pool,
            &jobs::ClaimTerms {
                claim: Duration::from_secs(10),
                process: uuid::Uuid::now_v7(),
            },
            5,
        )
        .await
        .unwrap()
        .expect("a job to claim");
        samples.push(started.elapsed());
        let mut tx = pool.begin().await.unwrap();
        assert!(jobs::finish(&mut tx, &job).await.unwrap());
        tx.commit().await.unwrap();
    }
    samples
}

/// The history: `HISTORY` jobs enqueued, then finished (deleted) in batches.
async fn finish_history(pool: &PgPool, turn: Uuid) {
    for _ in 0..(HISTORY / 10_000) {
        enqueue(pool, turn, 10_000).await;
        sqlx::query("DELETE FROM continuation_outbox")
            .execute(pool)
            .await
            .unwrap();
    }
}

async fn enqueue(pool: &PgPool, turn: Uuid, count: i64) {
    sqlx::query(
        "INSERT INTO continuation_outbox (id, kind, turn_id, account_id) \
         SELECT gen_random_uuid(), 'start', $1, 'bench' FROM generate_series(1, $2)",
    )
    .bind(turn)
    .bind(count)
    .execute(pool)
    .await
    .unwrap();
}
