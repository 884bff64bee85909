//! What a server of an earlier schema version leaves in flight when it
//! stops, written with the SQL of that version.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::ScriptedModel;
use uuid::Uuid;

use super::{agent_id, old_token, recorded_chunks, user, InFlight, AGENTS};

/// The account of [`crate::server::Setup`]'s token.
const ACCOUNT: &str = "crash";

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
    pub(super) async fn leave(pool: &PgPool, version: i64, model: &ScriptedModel) -> Self {
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
