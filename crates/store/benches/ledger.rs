//! Reading the tool-call ledger with 1,000,000 attempts behind it: a page
//! (50 attempts, newest first) of one account's attempts, unfiltered and
//! filtered by tool, status, agent, conversation and time, and the next
//! page under the first one's cursor; against the same pages of a ledger
//! of 1,000 attempts, the baseline. The goal: a filtered page in under
//! 20 ms (p50). Run by `make bench`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AttemptStatus};
use toolserver_store::tool_calls::{self, AttemptFilter, Cursor};
use toolserver_testsupport::bench::{ms, summary, ScratchDatabase};
use uuid::Uuid;

const ROWS: i64 = 1_000_000;
const BASELINE_ROWS: i64 = 1_000;
const ACCOUNTS: i64 = 10;
const PAGE: i64 = 50;
const QUERIES: usize = 200;
const GOAL: Duration = Duration::from_millis(20);

#[tokio::main]
async fn main() {
    let db = ScratchDatabase::create("ledger").await;
    let pool = PgPool::connect(&db.url).await.unwrap();
    toolserver_store::migrate(&pool).await.unwrap();

    fill(&pool, BASELINE_ROWS).await;
    let baseline = pages(&pool).await;
    let started = Instant::now();
    fill(&pool, ROWS - BASELINE_ROWS).await;
    sqlx::query("ANALYZE tool_calls")
        .execute(&pool)
        .await
        .unwrap();
    println!(
        "{ROWS} attempts over {ACCOUNTS} accounts written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let full = pages(&pool).await;

    let mut worst = Duration::ZERO;
    for ((name, small), (_, large)) in baseline.into_iter().zip(full) {
        let (small_p50, _) = summary(
            &format!("{name}, {BASELINE_ROWS} attempts (baseline)"),
            small,
        );
        let (large_p50, _) = summary(&format!("{name}, {ROWS} attempts"), large);
        println!(
            "ratio p50 {ROWS}/{BASELINE_ROWS} = {:.2} ({:.3} ms vs {:.3} ms)",
            large_p50.as_secs_f64() / small_p50.as_secs_f64(),
            ms(large_p50),
            ms(small_p50)
        );
        worst = worst.max(large_p50);
    }
    println!(
        "goal: a page in under {} ms (p50) with {ROWS} attempts: slowest {:.3} ms {}",
        GOAL.as_millis(),
        ms(worst),
        if worst < GOAL { "PASS" } else { "FAIL" }
    );
    pool.close().await;
    db.drop_now().await;
}

/// Writes `n` ended attempts, spread over the accounts, 20 tools, 200
/// agents, 20,000 conversations and the last 30 days; one in twenty of
/// each tool's failed, and none timed out.
async fn fill(pool: &PgPool, n: i64) {
    let chunk = 100_000;
    let mut written = 0;
    while written < n {
        let count = chunk.min(n - written);
        sqlx::query(
            "INSERT INTO accounts (id) SELECT 'acct-' || a FROM generate_series(0, $1 - 1) a \
             ON CONFLICT DO NOTHING",
        )
        .bind(ACCOUNTS)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO tool_calls (id, account_id, path, agent_id, conversation_id, turn_id, \
                 step, seq, tool_call_id, tool_name, attempt, status, payload_limit, input, \
                 input_sha256, input_bytes, output, output_sha256, output_bytes, queued_at, \
                 started_at, ended_at) \
             SELECT gen_random_uuid(), 'acct-' || (i % $2), 'turn', \
                 ('00000000-0000-0000-0000-' || lpad(((i % 200))::text, 12, '0'))::uuid, \
                 'conv-' || (i % 20000), 'msg-' || i, 1, 0, 'call-' || i, 'tool_' || (i % 20), 1, \
                 CASE WHEN (i / 20) % 20 = 0 THEN 'tool_error' ELSE 'ok' END, 65536, \
                 '{\"q\":\"' || i || '\"}', sha256(i::text::bytea), 12, '{\"ok\":true}', \
                 sha256(i::text::bytea), 11, t, t, t + interval '20 milliseconds' \
             FROM (SELECT i, now() - (random() * interval '30 days') AS t \
                   FROM generate_series($3::bigint, $3 + $1 - 1) i) s",
        )
        .bind(count)
        .bind(ACCOUNTS)
        .bind(written)
        .execute(pool)
        .await
        .unwrap();
        written += count;
    }
}

/// `QUERIES` reads of each kind of page; each kind's name and latencies.
async fn pages(pool: &PgPool) -> Vec<(&'static str, Vec<Duration>)> {
    let account = AccountId::parse("acct-3").unwrap();
    let agent = Uuid::parse_str("00000000-0000-0000-0000-000000000013").unwrap();
    let week_ago = OffsetDateTime::now_utc() - time::Duration::days(7);
    let kinds: Vec<(&'static str, AttemptFilter)> = vec![
        ("unfiltered page", AttemptFilter::default()),
        (
            "tool and status",
            AttemptFilter {
                tool_name: Some("tool_3".into()),
                status: Some(AttemptStatus::ToolError),
                ..AttemptFilter::default()
            },
        ),
        (
            "tool and a status it never had",
            AttemptFilter {
                tool_name: Some("tool_3".into()),
                status: Some(AttemptStatus::Timeout),
                ..AttemptFilter::default()
            },
        ),
        (
            "agent",
            AttemptFilter {
                agent_id: Some(agent),
                ..AttemptFilter::default()
            },
        ),
        (
            "conversation",
            AttemptFilter {
                conversation_id: Some("conv-13".into()),
                ..AttemptFilter::default()
            },
        ),
        (
            "status, last week",
            AttemptFilter {
                status: Some(AttemptStatus::ToolError),
                since: Some(week_ago),
                ..AttemptFilter::default()
            },
        ),
    ];
    let mut out = Vec::new();
    for (name, filter) in kinds {
        let mut samples = Vec::with_capacity(QUERIES);
        for _ in 0..QUERIES {
            let started = Instant::now();
            tool_calls::list(pool, &account, &filter, None, PAGE)
                .await
                .unwrap();
            samples.push(started.elapsed());
        }
        out.push((name, samples));
    }
    let first = tool_calls::list(pool, &account, &AttemptFilter::default(), None, PAGE)
        .await
        .unwrap();
    let cursor = first.last().map(|row| Cursor {
        started_at: row.started_at,
        id: row.id,
    });
    let mut samples = Vec::with_capacity(QUERIES);
    for _ in 0..QUERIES {
        let started = Instant::now();
        tool_calls::list(pool, &account, &AttemptFilter::default(), cursor, PAGE)
            .await
            .unwrap();
        samples.push(started.elapsed());
    }
    out.push(("next page under a cursor", samples));
    out
}
