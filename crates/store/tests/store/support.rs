//! What every test hangs its work on: an account with an agent, an uploaded
//! tool and a conversation; a live server process; a detached turn with its
//! claimed start job; readers of the stored rows; and a race that holds two
//! writers at a row lock until both are waiting on it.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{Encode, FromRow, PgPool, Postgres, Type};
use toolserver_domain::tool::ToolLimits;
use toolserver_domain::{
    AccountId, AgentId, AgentName, CallStatus, InputSchema, ResultId, RetrySpec, Sha256Digest,
    ToolConfig, ToolDescription, ToolEffects, ToolId, ToolName, TurnStatus,
};
use toolserver_store::async_results::{self, NewAsyncResult, PassOwner};
use toolserver_store::async_turns::{self, NewTurn};
use toolserver_store::conversations::{self, Begun, Known, LeaseTerms};
use toolserver_store::jobs::{ClaimTerms, Job, JobKind};
use toolserver_store::{agents, processes, tools, AgentWrite, NewTool, ToolBody};
use uuid::Uuid;

/// One account's rows.
pub struct Tenant {
    pub account: AccountId,
    pub agent: AgentId,
    pub tool: ToolId,
    pub conversation: String,
}

/// Records account `name` with an agent and an uploaded tool; its
/// conversation is created by the first turn on it.
pub async fn tenant(pool: &PgPool, name: &str) -> Tenant {
    let account = AccountId::parse(name).unwrap();
    let agent = AgentWrite {
        name: AgentName::parse("agent").unwrap(),
        config: json!({}),
        sealed_secrets: None,
    };
    let agent = agents::insert(pool, &account, AgentId::generate(), agent)
        .await
        .unwrap()
        .id;
    let limits = ToolLimits::default();
    let tool = NewTool {
        name: ToolName::parse("echo").unwrap(),
        description: ToolDescription::parse("Echoes its input", &limits).unwrap(),
        input_schema: InputSchema::parse(json!({"type": "object"}), &limits).unwrap(),
        default_config: ToolConfig::default(),
        egress_allow: None,
        effects: ToolEffects::default(),
        retry: RetrySpec::default(),
        body: ToolBody::Bundle {
            sha256: Sha256Digest::of(b"bundle"),
            size: 6,
        },
        connection: None,
    };
    let tool = tools::insert(pool, &account, tool).await.unwrap().id;
    Tenant {
        account,
        agent,
        tool,
        conversation: "conv-1".into(),
    }
}

/// A server process that keeps its row alive for a minute.
pub async fn live_process(pool: &PgPool) -> Uuid {
    let id = Uuid::now_v7();
    let mut conn = pool.acquire().await.unwrap();
    processes::keep_alive(&mut conn, id, Duration::from_secs(60))
        .await
        .unwrap();
    id
}

/// A minute's claim by `process`.
pub fn terms(process: Uuid) -> ClaimTerms {
    ClaimTerms {
        claim: Duration::from_secs(60),
        process,
    }
}

/// A detached turn and its start job, claimed by `process`.
pub struct Turn {
    pub id: Uuid,
    pub job: Job,
    pub process: Uuid,
}

/// Starts a detached turn on the tenant's conversation.
pub async fn start_turn(pool: &PgPool, tenant: &Tenant) -> Turn {
    start_turn_on(pool, tenant, &tenant.conversation).await
}

/// Creates the tenant's conversation `id` if new and takes its lease for a
/// new holder run by `process`; returns the holder.
pub async fn lease(pool: &PgPool, tenant: &Tenant, id: &str, process: Uuid) -> Uuid {
    let holder = Uuid::now_v7();
    let terms = LeaseTerms {
        holder,
        process,
        lease: Duration::from_secs(60),
    };
    let begun = conversations::begin_turn(
        &mut pool.acquire().await.unwrap(),
        &tenant.account,
        id,
        tenant.agent,
        terms,
        Known::default(),
    )
    .await
    .unwrap();
    assert!(matches!(begun, Begun::Held { .. }), "{begun:?}");
    holder
}

/// Starts a detached turn on `conversation` as the API does: the request
/// takes the conversation's lease, and the turn's creation hands it to the
/// start job.
pub async fn start_turn_on(pool: &PgPool, tenant: &Tenant, conversation: &str) -> Turn {
    let process = live_process(pool).await;
    let holder = lease(pool, tenant, conversation, process).await;
    let turn = NewTurn {
        agent: tenant.agent,
        conversation_id: conversation,
        lease_holder: holder,
        reply_subject: Some("reply.subject"),
        channel_event: None,
        end_user: None,
        claim: terms(process),
    };
    let (id, job) = async_turns::create(pool, &tenant.account, turn)
        .await
        .unwrap();
    Turn { id, job, process }
}

/// A call of the tenant's tool: an hour to live, a minute of liveness, not
/// safe to repeat.
pub fn call(tenant: &Tenant, name: &str) -> NewAsyncResult {
    NewAsyncResult {
        tool_call_id: name.into(),
        tool_id: Some(tenant.tool),
        tool_name: "echo".into(),
        token_sha256: [1; 32],
        ttl: Duration::from_secs(3600),
        heartbeat_timeout: None,
        liveness_timeout: Duration::from_secs(60),
        input: json!({"call": name}),
        safe_to_repeat: false,
    }
}

/// Records `calls` as one pass of `turn`'s start job; returns their ids.
pub async fn register(
    pool: &PgPool,
    tenant: &Tenant,
    turn: &Turn,
    calls: &[NewAsyncResult],
) -> Vec<ResultId> {
    let owner = PassOwner {
        turn_id: turn.id,
        job_id: turn.job.id,
    };
    async_results::register_pass(pool, &tenant.account, owner, calls)
        .await
        .unwrap()
}

/// Records `n` plain calls as one pass of `turn`.
pub async fn register_n(pool: &PgPool, tenant: &Tenant, turn: &Turn, n: usize) -> Vec<ResultId> {
    let calls: Vec<_> = (0..n).map(|i| call(tenant, &format!("c{i}"))).collect();
    register(pool, tenant, turn, &calls).await
}

/// A stored call.
#[derive(Debug, FromRow)]
pub struct CallRow {
    pub status: CallStatus,
    pub response: Option<Value>,
    pub error: Option<String>,
    pub settled: bool,
    pub launches: i32,
    pub group_id: Option<Uuid>,
}

pub async fn call_row(pool: &PgPool, id: ResultId) -> CallRow {
    sqlx::query_as(
        "SELECT status, response, error, settled_at IS NOT NULL AS settled, launches, group_id \
         FROM async_tool_results WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A stored dispatch group.
#[derive(Debug, FromRow)]
pub struct GroupRow {
    pub remaining: i32,
    pub sealed: bool,
    pub continued: bool,
}

pub async fn group_row(pool: &PgPool, id: Uuid) -> GroupRow {
    sqlx::query_as(
        "SELECT remaining, sealed_at IS NOT NULL AS sealed, continued_at IS NOT NULL AS continued \
         FROM dispatch_groups WHERE id = $1",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A stored detached turn.
#[derive(Debug, FromRow)]
pub struct TurnRow {
    pub status: TurnStatus,
    pub messages: Option<Value>,
    pub error: Option<String>,
    pub settle_event_id: Option<Uuid>,
}

pub async fn turn_row(pool: &PgPool, id: Uuid) -> TurnRow {
    sqlx::query_as("SELECT status, messages, error, settle_event_id FROM async_turns WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A stored job.
#[derive(Debug, FromRow)]
pub struct JobRow {
    pub id: Uuid,
    pub kind: JobKind,
    pub group_id: Option<Uuid>,
    pub call_id: Option<ResultId>,
    pub account_id: String,
    pub attempts: i32,
    pub claim_token: Option<Uuid>,
    pub claimed_by: Option<Uuid>,
    pub last_error: Option<String>,
    pub claimed: bool,
    pub available: bool,
}

/// The jobs of `turn`, oldest first.
pub async fn jobs_of(pool: &PgPool, turn: Uuid) -> Vec<JobRow> {
    sqlx::query_as(
        "SELECT id, kind, group_id, call_id, account_id, attempts, claim_token, claimed_by, \
                last_error, coalesce(claim_expires_at > now(), false) AS claimed, available_at <= now() AS available \
         FROM continuation_outbox WHERE turn_id = $1 ORDER BY id",
    )
    .bind(turn)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Who holds `tenant`'s conversation `id` (`None`: it is free).
pub async fn conversation_holder(pool: &PgPool, tenant: &Tenant, id: &str) -> Option<Uuid> {
    let (holder,): (Option<Uuid>,) =
        sqlx::query_as("SELECT active_turn FROM conversations WHERE account_id = $1 AND id = $2")
            .bind(tenant.account.as_str())
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap();
    holder
}

/// Runs `sql` (which may name `id`, any stored id, as `$1`), e.g. to move a
/// deadline into the past.
pub async fn exec<I>(pool: &PgPool, sql: &str, id: I)
where
    I: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send,
{
    sqlx::query(sql).bind(id).execute(pool).await.unwrap();
}

/// Runs `a` and `b` at once while the test holds the row lock that `lock`
/// (a `SELECT … FOR UPDATE` naming `id` as `$1`) takes, and lets go only
/// once both writers wait on a lock: neither can finish before the other
/// has begun.
pub async fn race<I, A: Future, B: Future>(
    pool: &PgPool,
    lock: &str,
    id: I,
    a: A,
    b: B,
) -> (A::Output, B::Output)
where
    I: for<'q> Encode<'q, Postgres> + Type<Postgres> + Send,
{
    let mut holder = pool.begin().await.unwrap();
    sqlx::query(lock)
        .bind(id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let release = async move {
        waiting_on_locks(pool, 2).await;
        holder.commit().await.unwrap();
    };
    let (a, b, ()) = tokio::join!(a, b, release);
    (a, b)
}

/// Waits until `n` sessions of this database wait on a lock.
async fn waiting_on_locks(pool: &PgPool, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (waiting,): (i64,) = sqlx::query_as(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} of {n} writers wait on a lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
