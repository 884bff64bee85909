//! The real binary and its runners' workers: a worker killed under a
//! detached call is seen exiting by its server, which fails the call at once
//! (not after the liveness timeout) and reaps it; a server paused while its
//! runner finishes a call still receives the result when it resumes; and a
//! call another server fails meanwhile is failed as unheard, not as killed.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{Server, Setup};

/// Waits `input.ms`, then answers which job it was.
const SLEEPER: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { finished: input.job }; } };";

/// The children of `pid` (of every thread of it).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The state letter of `pid` (`Z`: dead, not yet reaped).
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
}

/// The resident workers (`node … worker.mjs`) under `pid`.
fn workers_under(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = children_of(pid);
    while let Some(next) = queue.pop() {
        let cmdline = std::fs::read(format!("/proc/{next}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        let comm = std::fs::read_to_string(format!("/proc/{next}/comm")).unwrap_or_default();
        if comm.trim() == "node" && cmdline.contains("worker.mjs") {
            found.push(next);
        }
        queue.extend(children_of(next));
    }
    found
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

/// Uploads the sleeper, scripts `model` to call it once as `input` and
/// then answer `after`, and starts a detached turn; its status id.
async fn detached_call(
    setup: &Setup,
    server: &Server,
    model: &ScriptedModel,
    name: &str,
    input: Value,
    after: &str,
) -> String {
    let tool = setup.upload_tool(server, "sleeper", SLEEPER).await;
    model.script(
        name,
        vec![
            Reply::tool_call("c1", "sleeper", input),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected result"),
            Reply::text(after),
        ],
    );
    let agent = setup
        .agent(server, name, model, json!({ &tool: {"async": true} }))
        .await;
    let body = json!({"id": format!("conv-{name}"), "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "run"}]}], "trigger": "submit-message"});
    setup
        .post(server, &format!("/agents/{agent}/async"), body)
        .await["statusId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits up to `limit` for the turn `id` to be `wanted`; its last answer.
async fn turn_becomes(
    setup: &Setup,
    server: &Server,
    id: &str,
    wanted: &str,
    limit: Duration,
) -> Value {
    let started = Instant::now();
    loop {
        let answer = setup.status(server, id).await;
        if answer["status"] == wanted {
            return answer;
        }
        assert!(
            started.elapsed() < limit,
            "the turn was not {wanted} within {limit:?}: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_killed_runner_fails_its_call_at_once_and_is_reaped(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // Silent runners are judged after a minute: only the exit can settle the
    // call sooner. No warm workers, so the one worker is the call's.
    let server = setup
        .start_with(
            50,
            &[
                ("TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS", "60000"),
                ("TOOLSERVER_RUNNER_WARM_POOL", "0"),
            ],
        )
        .await;
    let input = json!({"job": "doomed", "ms": 120_000});
    let id = detached_call(&setup, &server, &model, "exits", input, "Heard about it.").await;
    turn_becomes(&setup, &server, &id, "waiting", Duration::from_secs(30)).await;
    let pid = server.child.id();
    let workers = workers_under(pid);
    assert_eq!(workers.len(), 1, "one worker runs the call: {workers:?}");
    signal(workers[0], "-9");

    let done = turn_becomes(&setup, &server, &id, "completed", Duration::from_secs(30)).await;
    let text = done["messages"].to_string();
    assert!(
        text.contains("the tool's runner exited (killed by signal 9 (SIGKILL)) before it reported"),
        "{done}"
    );
    assert!(text.contains("Heard about it."), "{done}");
    let zombies: Vec<u32> = children_of(pid)
        .into_iter()
        .filter(|child| state_of(*child) == Some('Z'))
        .collect();
    assert!(
        zombies.is_empty(),
        "unreaped children of the server: {zombies:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_paused_server_still_receives_the_result_its_runner_finished_meanwhile(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    // Runners ping every 300 ms and are judged silent after 2 s; a finished
    // result is kept for two minutes while the server does not take it.
    let server = setup
        .start_with(50, &[("TOOLSERVER_COMPLETION_RETRY_MS", "120000")])
        .await;
    let input = json!({"job": "paused", "ms": 1500});
    let id = detached_call(&setup, &server, &model, "paused", input, "Got it.").await;
    turn_becomes(&setup, &server, &id, "waiting", Duration::from_secs(30)).await;
    signal(server.child.id(), "-STOP");
    // The call finishes while nobody answers, for longer than a minute of
    // its runner's delivery attempts (10 s each) and far past the liveness
    // timeout.
    tokio::time::sleep(Duration::from_secs(70)).await;
    signal(server.child.id(), "-CONT");

    let done = turn_becomes(&setup, &server, &id, "completed", Duration::from_secs(60)).await;
    let (status, response, error): (String, Option<Value>, Option<String>) =
        sqlx::query_as("SELECT status, response, error FROM async_tool_results")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((status.as_str(), error), ("completed", None), "{done}");
    assert_eq!(response, Some(json!({"finished": "paused"})));
    assert!(done["messages"].to_string().contains("Got it."), "{done}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_of_a_paused_server_failed_by_another_says_its_runner_went_unheard(pool: PgPool) {
    let setup = Setup::new(&pool);
    let model = ScriptedModel::start().await;
    let paused = setup.start_with(50, &[]).await;
    let input = json!({"job": "unheard", "ms": 120_000});
    let id = detached_call(&setup, &paused, &model, "unheard", input, "Heard nothing.").await;
    turn_becomes(&setup, &paused, &id, "waiting", Duration::from_secs(30)).await;
    // Another server on the same database, started once the call runs on
    // the first one's runner, which pings only the first.
    let other_setup = Setup::new(&pool);
    let other = other_setup.start_with(50, &[]).await;
    signal(paused.child.id(), "-STOP");

    let done = turn_becomes(
        &other_setup,
        &other,
        &id,
        "completed",
        Duration::from_secs(60),
    )
    .await;
    signal(paused.child.id(), "-CONT");
    let error: Option<String> = sqlx::query_scalar("SELECT error FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    let error = error.unwrap_or_default();
    assert!(
        error.starts_with("no ping from the runner of this call was heard")
            && error.contains("the server running it stopped answering"),
        "{error}"
    );
    assert!(!error.contains("killed"), "{error}");
    assert!(
        done["messages"].to_string().contains("Heard nothing."),
        "{done}"
    );
}
