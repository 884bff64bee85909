//! Upgrades with work in flight. For each earlier schema version, a database
//! migrated that far holds what a server of that version leaves behind when
//! it stops for the upgrade: a detached turn waiting on a call whose runner
//! will only ever report late, a job claimed mid-run (with, before 0006, the
//! calls its cut-off pass had launched), a turn cut off in its first pass
//! (before 0006, which kept that pass in memory only), a chat turn holding
//! its conversation with its stream open (where streams exist), and a
//! working MCP task (where tasks exist). The real binary applies the rest of
//! the migrations and runs its lifecycle; every item settles within a bound,
//! for the reason that is true of it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::migrate::Migrate;
use sqlx::PgPool;
use toolserver_store::async_results::{LEGACY_RUNNER_ERROR, SILENT_RUNNER_ERROR};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};
use uuid::Uuid;

use crate::server::{Server, Setup};

/// The account of [`Setup`]'s token.
const ACCOUNT: &str = "crash";

/// Fast lifecycle settings, so every bound passes in a second or two.
const FAST: &[(&str, &str)] = &[
    ("TOOLSERVER_RUNNER_LIVENESS_TIMEOUT_MS", "1000"),
    ("TOOLSERVER_RUNNER_LIVENESS_INTERVAL_MS", "300"),
    ("TOOLSERVER_STUCK_TURN_GRACE_SECS", "1"),
    ("TOOLSERVER_UNSEALED_GROUP_GRACE_SECS", "1"),
    ("TOOLSERVER_STREAM_ALIVE_MS", "1000"),
    ("TOOLSERVER_STREAM_POLL_MS", "100"),
];

/// The chunks that end a stream whose server stopped.
fn server_stopped() -> [Value; 2] {
    [
        json!({"type": "error", "errorText": "the server running this turn stopped before the turn ended"}),
        json!({"type": "finish", "finishReason": "error"}),
    ]
}

/// The reason the reaper gives a turn with no way on.
const STUCK: &str = "the turn stopped making progress and was given up";

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

/// An assistant message whose pass called the slow tool detached as `call_id`.
fn called(id: &str, call_id: &str, status_id: Uuid) -> Value {
    json!({"id": id, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-slow", "toolCallId": call_id, "state": "output-available", "input": {},
         "output": {"status": "pending", "statusId": status_id.to_string(),
                    "message": "slow is running in the background"}},
    ]})
}

impl InFlight {
    /// Writes, with SQL of schema `version`, what a server of that version
    /// leaves in flight when it stops; its agents talk to `model`.
    async fn leave(pool: &PgPool, version: i64, model: &ScriptedModel) -> Self {
        let old = OldServer { pool, version };
        sqlx::query("INSERT INTO accounts (id) VALUES ($1)")
            .bind(ACCOUNT)
            .execute(pool)
            .await
            .unwrap();
        let tool = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO tools (id, account_id, name, description, input_schema, \
                                bundle_sha256, bundle_size) \
             VALUES ($1, $2, 'slow', 'the slow tool', '{\"type\": \"object\"}', \
                     repeat('a', 64), 10)",
        )
        .bind(tool)
        .bind(ACCOUNT)
        .execute(pool)
        .await
        .unwrap();
        let mut flight = Self {
            version,
            tool,
            waiting: Uuid::new_v4(),
            waiting_call: Uuid::new_v4(),
            claimed: Uuid::new_v4(),
            cut_off_call: None,
            first: None,
            stream: None,
            task: None,
        };
        for name in AGENTS {
            old.agent(name, tool, &model.base_url()).await;
        }
        flight.leave_waiting(&old).await;
        flight.leave_claimed(&old).await;
        if version < 6 {
            flight.leave_first_pass(&old).await;
        }
        flight.leave_chat(&old).await;
        if version >= 11 {
            let task = Uuid::new_v4();
            old.pending_call(task, None, &task.to_string(), tool).await;
            flight.task = Some(task);
        }
        flight
    }

    async fn leave_waiting(&self, old: &OldServer<'_>) {
        let conversation = json!([
            user("u1", "run the slow job"),
            called("a1", "c1", self.waiting_call)
        ]);
        old.conversation("conv-waiting", &conversation, None).await;
        old.turn(self.waiting, "waiting", "conv-waiting").await;
        let group = Uuid::new_v4();
        old.group(group, self.waiting, 1, true, false).await;
        old.pending_call(self.waiting_call, Some(group), "c1", self.tool)
            .await;
    }

    async fn leave_claimed(&mut self, old: &OldServer<'_>) {
        old.turn(self.claimed, "running", "conv-claimed").await;
        if self.version >= 6 {
            // The start job's run: the request stored its message and
            // handed the conversation to the job.
            let job = Uuid::new_v4();
            let conversation = json!([user("u1", "think it over")]);
            old.conversation("conv-claimed", &conversation, Some(job))
                .await;
            sqlx::query(
                "INSERT INTO continuation_outbox \
                     (id, kind, turn_id, account_id, attempts, claim_token, claim_expires_at) \
                 VALUES ($1, 'start', $2, $3, 1, gen_random_uuid(), now() + interval '2 seconds')",
            )
            .bind(job)
            .bind(self.claimed)
            .bind(ACCOUNT)
            .execute(old.pool)
            .await
            .unwrap();
            return;
        }
        // A group's continuation, claimed, its conversation held by the run,
        // whose pass had launched another call before the server stopped.
        let (done_call, cut_off_call) = (Uuid::new_v4(), Uuid::new_v4());
        let conversation = json!([
            user("u1", "run the slow job"),
            called("a1", "c1", done_call)
        ]);
        old.conversation("conv-claimed", &conversation, Some(Uuid::new_v4()))
            .await;
        let (done_group, cut_off_group) = (Uuid::new_v4(), Uuid::new_v4());
        old.group(done_group, self.claimed, 0, true, true).await;
        sqlx::query(
            "INSERT INTO async_tool_results \
                 (id, account_id, group_id, tool_call_id, tool_id, tool_name, status, response, \
                  token_sha256, settled_at, expires_at) \
             VALUES ($1, $2, $3, 'c1', $4, 'slow', 'completed', '{\"done\": true}', \
                     sha256('done'::bytea), now(), now() + interval '1 hour')",
        )
        .bind(done_call)
        .bind(ACCOUNT)
        .bind(done_group)
        .bind(self.tool)
        .execute(old.pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO continuation_outbox (id, group_id, account_id, claimed_at, attempts) \
             VALUES ($1, $2, $3, now(), 1)",
        )
        .bind(Uuid::new_v4())
        .bind(done_group)
        .bind(ACCOUNT)
        .execute(old.pool)
        .await
        .unwrap();
        old.group(cut_off_group, self.claimed, 1, false, false)
            .await;
        old.pending_call(cut_off_call, Some(cut_off_group), "c2", self.tool)
            .await;
        self.cut_off_call = Some(cut_off_call);
    }

    /// Before 0006 a turn's first pass ran in the memory of its process,
    /// its user's message included, with no job to run it again.
    async fn leave_first_pass(&mut self, old: &OldServer<'_>) {
        let (turn, group, call) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        old.conversation("conv-first", &json!([]), Some(Uuid::new_v4()))
            .await;
        old.turn(turn, "running", "conv-first").await;
        old.group(group, turn, 1, false, false).await;
        old.pending_call(call, Some(group), "c1", self.tool).await;
        self.first = Some((turn, call));
    }

    /// A chat turn streaming when the server stopped: it holds its
    /// conversation, and (from 0008) its stream is open.
    async fn leave_chat(&mut self, old: &OldServer<'_>) {
        let conversation = json!([
            user("u0", "hi"),
            {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]},
        ]);
        old.conversation("conv-chat", &conversation, Some(Uuid::new_v4()))
            .await;
        if self.version < 8 {
            return;
        }
        let stream = Uuid::new_v4();
        sqlx::query(
            "INSERT INTO turn_streams (id, account_id, conversation_id, alive_until, chunk_count) \
             VALUES ($1, $2, 'conv-chat', now() + interval '1 second', 3)",
        )
        .bind(stream)
        .bind(ACCOUNT)
        .execute(old.pool)
        .await
        .unwrap();
        let chunks = recorded_chunks();
        if self.version >= 13 {
            sqlx::query(
                "INSERT INTO turn_stream_batches (stream_id, first_idx, chunks) VALUES ($1, 0, $2)",
            )
            .bind(stream)
            .bind(&chunks)
            .execute(old.pool)
            .await
            .unwrap();
        } else {
            for (idx, chunk) in chunks.iter().enumerate() {
                sqlx::query(
                    "INSERT INTO turn_stream_chunks (stream_id, idx, chunk) VALUES ($1, $2, $3::json)",
                )
                .bind(stream)
                .bind(idx as i32)
                .bind(chunk)
                .execute(old.pool)
                .await
                .unwrap();
            }
        }
        self.stream = Some(stream);
    }
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

/// Rows as a server of schema `version` wrote them.
struct OldServer<'a> {
    pool: &'a PgPool,
    version: i64,
}

impl OldServer<'_> {
    /// The JSON column type of stored messages (`jsonb` before 0006).
    fn json(&self) -> &'static str {
        if self.version < 6 {
            "jsonb"
        } else {
            "json"
        }
    }

    async fn agent(&self, name: &str, tool: Uuid, model_url: &str) {
        let config = json!({
            "model": {"provider": "openai", "modelId": name},
            "provider": {"openai": {"baseUrl": model_url}},
            "tools": { format!("tool_{}", tool.simple()): {"async": true} },
        });
        sqlx::query("INSERT INTO agents (id, account_id, name, config) VALUES ($1, $2, $3, $4)")
            .bind(agent_id(name))
            .bind(ACCOUNT)
            .bind(name)
            .bind(config)
            .execute(self.pool)
            .await
            .unwrap();
    }

    /// A conversation of the agent named like it, held by `holder` (for the
    /// rest of the old server's lease) if given.
    async fn conversation(&self, id: &str, messages: &Value, holder: Option<Uuid>) {
        let agent = id.trim_start_matches("conv-");
        sqlx::query(&format!(
            "INSERT INTO conversations (account_id, id, agent_id, messages, active_turn, \
                                        lease_expires_at) \
             VALUES ($1, $2, $3, $4::text::{}, $5, \
                     CASE WHEN $5::uuid IS NULL THEN NULL ELSE now() + interval '2 seconds' END)",
            self.json()
        ))
        .bind(ACCOUNT)
        .bind(id)
        .bind(agent_id(agent))
        .bind(messages.to_string())
        .bind(holder)
        .execute(self.pool)
        .await
        .unwrap();
    }

    async fn turn(&self, id: Uuid, status: &str, conversation: &str) {
        sqlx::query(
            "INSERT INTO async_turns (id, account_id, agent_id, conversation_id, status) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(ACCOUNT)
        .bind(agent_id(conversation.trim_start_matches("conv-")))
        .bind(conversation)
        .bind(status)
        .execute(self.pool)
        .await
        .unwrap();
    }

    /// A dispatch group of `turn` with `remaining` calls out.
    async fn group(&self, id: Uuid, turn: Uuid, remaining: i32, sealed: bool, continued: bool) {
        let sql = if self.version < 6 {
            "INSERT INTO dispatch_groups (id, account_id, parent, remaining, sealed_at, continued_at) \
             VALUES ($1, $2, $3::text, $4, CASE WHEN $5 THEN now() END, CASE WHEN $6 THEN now() END)"
        } else {
            "INSERT INTO dispatch_groups \
                 (id, account_id, parent, remaining, sealed_at, continued_at, turn_id, job_id) \
             VALUES ($1, $2, $3::text, $4, CASE WHEN $5 THEN now() END, \
                     CASE WHEN $6 THEN now() END, $3, gen_random_uuid())"
        };
        sqlx::query(sql)
            .bind(id)
            .bind(ACCOUNT)
            .bind(turn)
            .bind(remaining)
            .bind(sealed)
            .bind(continued)
            .execute(self.pool)
            .await
            .unwrap();
    }

    /// A pending call, with the old server's hour to complete; from 0006 its
    /// runner last pinged just now.
    async fn pending_call(&self, id: Uuid, group: Option<Uuid>, call_id: &str, tool: Uuid) {
        let sql = match self.version {
            ..=5 => {
                "INSERT INTO async_tool_results \
                     (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, \
                      expires_at) \
                 VALUES ($1, $2, $3, $4, $5, 'slow', sha256(convert_to($6, 'UTF8')), \
                         now() + interval '1 hour')"
            }
            6..=10 => {
                "INSERT INTO async_tool_results \
                     (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, \
                      hard_expires_at, expires_at, alive_until, input) \
                 VALUES ($1, $2, $3, $4, $5, 'slow', sha256(convert_to($6, 'UTF8')), \
                         now() + interval '1 hour', now() + interval '1 hour', \
                         now() + interval '1 second', '{}')"
            }
            _ => {
                "INSERT INTO async_tool_results \
                     (id, account_id, group_id, tool_call_id, tool_id, tool_name, token_sha256, \
                      hard_expires_at, expires_at, alive_until, input, task_poll_ms) \
                 VALUES ($1, $2, $3, $4, $5, 'slow', sha256(convert_to($6, 'UTF8')), \
                         now() + interval '1 hour', now() + interval '1 hour', \
                         now() + interval '1 second', '{}', \
                         CASE WHEN $3::uuid IS NULL THEN 1000 END)"
            }
        };
        sqlx::query(sql)
            .bind(id)
            .bind(ACCOUNT)
            .bind(group)
            .bind(call_id)
            .bind(tool)
            .bind(old_token(id))
            .execute(self.pool)
            .await
            .unwrap();
    }
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

/// The SSE data frames of a response's whole body.
async fn frames(response: reqwest::Response) -> Vec<String> {
    let body = response.text().await.unwrap();
    body.split("\n\n")
        .filter_map(|event| event.trim().strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
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
    let (jobs, pending): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM continuation_outbox), \
                (SELECT count(*) FROM async_tool_results WHERE status = 'pending')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((jobs, pending), (0, 0), "nothing left in flight");
}

/// The waiting turn's call fails as its runner's silence (not as expired),
/// the model is told so, the turn completes, and the old runner's late
/// outcome is answered 409 without changing anything.
async fn check_waiting(
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
async fn check_claimed(pool: &PgPool, model: &ScriptedModel, flight: &InFlight) {
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
async fn check_first_pass(pool: &PgPool, model: &ScriptedModel, flight: &InFlight) {
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
async fn check_chat(pool: &PgPool, setup: &Setup, server: &Server, flight: &InFlight) {
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
}
