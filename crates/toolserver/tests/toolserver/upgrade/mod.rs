//! Upgrades with work in flight. For each earlier schema version, a database
//! migrated that far holds what a server of that version leaves behind when
//! it stops for the upgrade: a detached turn waiting on a call whose runner
//! will only ever report late, a job claimed mid-run (with, before 0006, the
//! calls its cut-off pass had launched), a turn cut off in its first pass
//! (before 0006, which kept that pass in memory only), a chat turn holding
//! its conversation with its stream open (where streams exist), and a
//! working MCP task (where tasks exist). The real binary applies the rest of
//! the migrations and runs its lifecycle; every item settles within a bound,
//! for the reason that is true of it. What is left behind is written in
//! [`in_flight`], what each item settles to is checked in [`checks`].

use serde_json::{json, Value};
use sqlx::migrate::Migrate;
use sqlx::PgPool;
use toolserver_store::async_results::SILENT_RUNNER_ERROR;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};
use uuid::Uuid;

use crate::server::Setup;

mod checks;
mod in_flight;

use checks::{check_chat, check_claimed, check_first_pass, check_waiting};

/// Fast lifecycle settings, so every bound passes in a second or two.
const FAST: &[(&str, &str)] = &[
    ("TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS", "1000"),
    ("TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS", "300"),
    ("TOOLSERVER_STUCK_TURN_GRACE_SECS", "1"),
    ("TOOLSERVER_UNSEALED_GROUP_GRACE_SECS", "1"),
    ("TOOLSERVER_STREAM_ALIVE_MS", "1000"),
    ("TOOLSERVER_STREAM_POLL_MS", "100"),
];

/// Applies the migrations up to `version`, as that release did.
async fn migrate_to(pool: &PgPool, version: i64) {
    let mut conn = pool.acquire().await.unwrap();
    conn.ensure_migrations_table().await.unwrap();
    for migration in toolserver_store::MIGRATOR
        .iter()
        .filter(|m| m.version <= version)
    {
        conn.apply(migration).await.unwrap();
    }
}

/// What the old server left in flight, by id.
struct InFlight {
    version: i64,
    tool: Uuid,
    /// A detached turn waiting on `waiting_call`.
    waiting: Uuid,
    waiting_call: Uuid,
    /// A turn whose job was claimed mid-run.
    claimed: Uuid,
    /// Before 0006: a call the claimed run's cut-off pass had launched.
    cut_off_call: Option<Uuid>,
    /// Before 0006: a turn cut off in its first pass, and its call.
    first: Option<(Uuid, Uuid)>,
    /// From 0008: the chat turn's open stream.
    stream: Option<Uuid>,
    /// From 0011: a working MCP task.
    task: Option<Uuid>,
}

/// The job token the old runner of `call` holds.
fn old_token(call: Uuid) -> String {
    format!("old-runner-{call}")
}

/// A user message.
fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
}

/// The chunks the interrupted chat turn had recorded.
fn recorded_chunks() -> Vec<String> {
    [
        json!({"type": "start", "messageId": "a1"}),
        json!({"type": "text-start", "id": "t1"}),
        json!({"type": "text-delta", "id": "t1", "delta": "hel"}),
    ]
    .iter()
    .map(Value::to_string)
    .collect()
}

/// The agents, one per kind of work (each its own script), named like
/// their conversations.
const AGENTS: [&str; 4] = ["waiting", "claimed", "first", "chat"];

/// The fixed id of the agent `name`.
fn agent_id(name: &str) -> Uuid {
    let index = AGENTS.iter().position(|agent| *agent == name).unwrap();
    Uuid::from_u128(index as u128 + 1)
}

async fn call(pool: &PgPool, id: Uuid) -> (String, Option<String>) {
    sqlx::query_as("SELECT status, error FROM async_tool_results WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn upgrade_with_work_in_flight(pool: PgPool, version: i64) {
    migrate_to(&pool, version).await;
    let model = ScriptedModel::start().await;
    for name in AGENTS {
        model.script(name, vec![Reply::text(&format!("{name} done.")); 4]);
    }
    let flight = InFlight::leave(&pool, version, &model).await;

    let setup = Setup::new(&pool);
    let server = setup.start_with(100, FAST).await;

    check_waiting(&pool, &setup, &server, &model, &flight).await;
    check_claimed(&pool, &model, &flight).await;
    check_first_pass(&pool, &model, &flight).await;
    check_chat(&pool, &setup, &server, &flight).await;
    if let Some(task) = flight.task {
        until("the MCP task to settle", || async {
            call(&pool, task).await.0 != "pending"
        })
        .await;
        assert_eq!(
            call(&pool, task).await,
            ("failed".to_owned(), Some(SILENT_RUNNER_ERROR.to_owned()))
        );
    }
    let effects: String = sqlx::query_scalar("SELECT effects FROM tools WHERE id = $1")
        .bind(flight.tool)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        effects, "side_effect",
        "a tool from before declared nothing"
    );
    let (jobs, pending): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM continuation_outbox), \
                (SELECT count(*) FROM async_tool_results WHERE status = 'pending')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((jobs, pending), (0, 0), "nothing left in flight");
    let (waiting_attempts, running): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM tool_calls WHERE result_id = $1 AND status <> 'running'), \
                (SELECT count(*) FROM tool_calls WHERE status = 'running')",
    )
    .bind(flight.waiting_call)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (waiting_attempts, running),
        (1, 0),
        "the call in flight at the upgrade ended on the ledger, and nothing runs there"
    );
}

/// One test per schema version upgraded from, and [`FROM`], the list.
macro_rules! from_version {
    ($($name:ident: $version:literal),* $(,)?) => {
        /// The schema versions upgraded from.
        const FROM: &[i64] = &[$($version),*];
        $(
            #[sqlx::test(migrations = false)]
            async fn $name(pool: PgPool) {
                upgrade_with_work_in_flight(pool, $version).await;
            }
        )*
    };
}

/// The oldest schema upgraded from: that of the release before the
/// detached lifecycle.
const OLDEST: i64 = 5;

#[test]
fn every_schema_version_since_the_oldest_is_upgraded_from() {
    let latest = toolserver_store::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap();
    assert_eq!(FROM, (OLDEST..latest).collect::<Vec<_>>());
}

from_version! {
    in_flight_work_settles_after_an_upgrade_from_0005: 5,
    in_flight_work_settles_after_an_upgrade_from_0006: 6,
    in_flight_work_settles_after_an_upgrade_from_0007: 7,
    in_flight_work_settles_after_an_upgrade_from_0008: 8,
    in_flight_work_settles_after_an_upgrade_from_0009: 9,
    in_flight_work_settles_after_an_upgrade_from_0010: 10,
    in_flight_work_settles_after_an_upgrade_from_0011: 11,
    in_flight_work_settles_after_an_upgrade_from_0012: 12,
    in_flight_work_settles_after_an_upgrade_from_0013: 13,
    in_flight_work_settles_after_an_upgrade_from_0014: 14,
    in_flight_work_settles_after_an_upgrade_from_0015: 15,
    in_flight_work_settles_after_an_upgrade_from_0016: 16,
    in_flight_work_settles_after_an_upgrade_from_0017: 17,
    in_flight_work_settles_after_an_upgrade_from_0018: 18,
    in_flight_work_settles_after_an_upgrade_from_0019: 19,
    in_flight_work_settles_after_an_upgrade_from_0020: 20,
    in_flight_work_settles_after_an_upgrade_from_0021: 21,
    in_flight_work_settles_after_an_upgrade_from_0022: 22,
    in_flight_work_settles_after_an_upgrade_from_0023: 23,
    in_flight_work_settles_after_an_upgrade_from_0024: 24,
    in_flight_work_settles_after_an_upgrade_from_0025: 25,
    in_flight_work_settles_after_an_upgrade_from_0026: 26,
    in_flight_work_settles_after_an_upgrade_from_0027: 27,
    in_flight_work_settles_after_an_upgrade_from_0028: 28,
    in_flight_work_settles_after_an_upgrade_from_0029: 29,
    in_flight_work_settles_after_an_upgrade_from_0030: 30,
    in_flight_work_settles_after_an_upgrade_from_0031: 31,
}
