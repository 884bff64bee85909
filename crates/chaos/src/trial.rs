//! One trial: start 1-N detached turns across both servers (or, in a back
//! to back trial, one turn and a second on the same conversation after the
//! kill: see `back_to_back.rs`), SIGKILL a random server at a random
//! moment, restart it on the same port and data directory, wait for every
//! turn to reach a terminal state, and judge each.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use crate::api::{Answer, Api};
use crate::checks::{judge, Observed, Verdict};
use crate::config::ChaosConfig;
use crate::ledger;
use crate::model::ChaosModel;
use crate::plan::TurnPlan;
use crate::procs::{self, Process};
use crate::servers::Server;
use crate::ChaosError;

/// How often unsettled turns are polled.
const POLL: Duration = Duration::from_millis(100);

/// How long after a turn is first seen terminal it is read again.
const RECHECK_AFTER: Duration = Duration::from_millis(300);

/// Everything the trials share: the servers, the model, the agent.
pub struct Cluster {
    /// The two server slots.
    pub servers: [Server; 2],
    /// The HTTP client.
    pub api: Api,
    /// The scripted model.
    pub model: ChaosModel,
    /// The agent every turn runs on.
    pub agent: String,
    /// Makes conversation ids unique to the run.
    pub tag: String,
    /// Where what was seen of a turn with a problem is written, one JSON
    /// file per turn (`<marker>.json`).
    pub evidence_dir: PathBuf,
}

impl Cluster {
    /// `GET {path}` from server `first`, else from the other one.
    pub(crate) async fn get(&self, first: usize, path: &str) -> Option<Answer> {
        for at in [first, 1 - first] {
            if let Ok(answer) = self.api.get(&self.servers[at].base, path).await {
                return Some(answer);
            }
        }
        None
    }
}

/// How a turn ended, as far as the trial could tell.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The server refused to start it.
    NotStarted(String),
    /// Not terminal within the settle timeout; its last status.
    Stuck(String),
    /// Terminal: the first terminal `GET /async/{id}` body.
    Settled(Value),
}

/// One turn of a trial and what became of it.
#[derive(Debug, Clone)]
pub struct TurnRecord {
    /// The trial it belongs to.
    pub trial: usize,
    /// What it asked for.
    pub plan: TurnPlan,
    /// Its `/async` status id (empty when not started).
    pub status_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The server slot it was started on.
    pub server: usize,
    /// Whether other turns of the trial write to the same conversation.
    pub shared: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// The verdict (after settling, then again at the end of the run).
    pub verdict: Verdict,
}

/// What one trial found.
pub struct TrialReport {
    /// Its turns.
    pub turns: Vec<TurnRecord>,
    /// Processes of the killed server still alive after the grace time.
    pub leaked: Vec<Process>,
    /// From the restarted server being ready to the last turn settling
    /// (zero when all settled before); `None` when a turn is stuck.
    pub settle: Option<Duration>,
    /// The killed server's name and how long after the starts it died.
    pub kill: (String, Duration),
    /// What a back-to-back trial saw of its conversation (`None` for a
    /// trial of concurrent turns on conversations of their own).
    pub back_to_back: Option<BackToBackRecord>,
}

/// What a back-to-back trial saw of its conversation.
#[derive(Debug, Clone)]
pub struct BackToBackRecord {
    /// The trial.
    pub trial: usize,
    /// The conversation both turns ran on.
    pub conversation_id: String,
    /// The turn started before the kill.
    pub first: TurnPlan,
    /// The turn started after it.
    pub second: TurnPlan,
    /// The server the first turn was sent to.
    pub first_on: String,
    /// The server killed, and how long after the first turn was sent.
    pub killed: (String, Duration),
    /// From the kill to the second turn's acceptance (`None`: never
    /// accepted within the settle timeout).
    pub accepted_after_kill: Option<Duration>,
    /// How many times the second turn was refused as busy first.
    pub busy: usize,
    /// Why the conversation does not read in the order things happened
    /// (after the trial, then again at the end of the run).
    pub misordered: Vec<String>,
}

impl BackToBackRecord {
    /// The name of its evidence file and report lines.
    pub fn name(&self) -> String {
        format!("t{}", self.trial)
    }
}

/// A server killed in a trial: which, when, and what it left running.
pub(crate) struct Killed {
    /// Its slot.
    pub victim: usize,
    /// How long after the trial's turns were started it died.
    pub after_start: Duration,
    /// When it was killed.
    pub at: Instant,
    /// Its runner processes right after the kill.
    pub orphans: Vec<Process>,
}

/// 1-N turns started across both servers, each on its own conversation.
pub async fn run_concurrent(
    cluster: &mut Cluster,
    config: &ChaosConfig,
    rng: &mut impl Rng,
    index: usize,
) -> Result<TrialReport, ChaosError> {
    let count = rng.gen_range(1..=config.max_turns.max(1));
    let plans: Vec<TurnPlan> = (0..count)
        .map(|turn| TurnPlan::random(rng, index, turn, config.max_siblings))
        .collect();
    let victim = rng.gen_range(0..2);
    let kill_after = kill_moment(rng, config);

    let mut turns = Vec::with_capacity(count);
    for (turn, plan) in plans.into_iter().enumerate() {
        let conversation_id = format!("chaos-{}-{}", cluster.tag, plan.marker);
        turns.push(start_turn(cluster, index, (index + turn) % 2, plan, conversation_id).await);
    }
    let started = Instant::now();
    tokio::time::sleep(kill_after).await;
    let killed = kill(cluster, victim, started).await?;
    restart_and_judge(cluster, config, turns, killed).await
}

/// A uniformly random moment within the kill window.
pub(crate) fn kill_moment(rng: &mut impl Rng, config: &ChaosConfig) -> Duration {
    let window = u64::try_from(config.kill_window.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.gen_range(0..=window))
}

/// SIGKILLs server `victim` (the trial's turns were started at `started`).
pub(crate) async fn kill(
    cluster: &mut Cluster,
    victim: usize,
    started: Instant,
) -> Result<Killed, ChaosError> {
    let after_start = started.elapsed();
    let at = Instant::now();
    let server = &mut cluster.servers[victim];
    server.kill().await?;
    Ok(Killed {
        victim,
        after_start,
        at,
        orphans: procs::mentioning(&server.runner_needle()),
    })
}

/// Restarts the killed server, waits for every turn to settle, and judges
/// each; the runners the killed server left must die within the grace time.
pub(crate) async fn restart_and_judge(
    cluster: &mut Cluster,
    config: &ChaosConfig,
    mut turns: Vec<TurnRecord>,
    killed: Killed,
) -> Result<TrialReport, ChaosError> {
    cluster.servers[killed.victim].start(&cluster.api).await?;
    let restarted = Instant::now();
    let watch = tokio::spawn(procs::survivors(killed.orphans, config.leak_grace));

    let settled_at = settle(cluster, &mut turns, restarted + config.settle_timeout).await;
    for turn in turns
        .iter()
        .filter(|t| matches!(t.outcome, Outcome::Stuck(_)))
    {
        let status = cluster.get(0, &format!("/async/{}", turn.status_id)).await;
        let evidence = json!({
            "plan": turn.plan.user_text(),
            "statusId": turn.status_id,
            "startedOn": cluster.servers[turn.server].name,
            "stuck": status.map(|answer| answer.body),
            "modelRequests": cluster.model.calls_of(&turn.plan.marker).len(),
        });
        write_evidence(cluster, &turn.plan.marker, &evidence);
    }
    tokio::time::sleep(RECHECK_AFTER).await;
    for turn in &mut turns {
        turn.verdict = examine(cluster, turn).await;
    }
    let leaked = watch
        .await
        .map_err(|err| ChaosError::Setup(format!("the leak watch failed: {err}")))?;
    for process in &leaked {
        procs::kill(process).await;
    }
    let settle = settled_at.map(|at| at.saturating_duration_since(restarted));
    Ok(TrialReport {
        turns,
        leaked,
        settle,
        kill: (
            cluster.servers[killed.victim].name.clone(),
            killed.after_start,
        ),
        back_to_back: None,
    })
}

/// `POST /agents/{agent}/async` of `plan`'s user message on conversation
/// `conversation_id` to server `server`.
pub(crate) async fn post_turn(
    cluster: &Cluster,
    server: usize,
    plan: &TurnPlan,
    conversation_id: &str,
) -> Result<Answer, reqwest::Error> {
    let body = json!({
        "id": conversation_id,
        "messages": [{"id": format!("u-{}", plan.marker), "role": "user",
                      "parts": [{"type": "text", "text": plan.user_text()}]}],
        "trigger": "submit-message",
    });
    let path = format!("/agents/{}/async", cluster.agent);
    cluster
        .api
        .post(&cluster.servers[server].base, &path, &body)
        .await
}

async fn start_turn(
    cluster: &Cluster,
    trial: usize,
    server: usize,
    plan: TurnPlan,
    conversation_id: String,
) -> TurnRecord {
    let answer = post_turn(cluster, server, &plan, &conversation_id).await;
    TurnRecord::started(trial, server, plan, conversation_id, answer)
}

impl TurnRecord {
    /// A turn as its start request left it (`shared` false).
    pub(crate) fn started(
        trial: usize,
        server: usize,
        plan: TurnPlan,
        conversation_id: String,
        answer: Result<Answer, reqwest::Error>,
    ) -> Self {
        let (status_id, outcome) = match answer {
            Ok(answer) => match answer.body["statusId"].as_str() {
                Some(id) if answer.is_success() => {
                    (id.to_owned(), Outcome::Stuck("running".into()))
                }
                _ => (
                    String::new(),
                    Outcome::NotStarted(format!("{} {}", answer.status, answer.body)),
                ),
            },
            Err(err) => (String::new(), Outcome::NotStarted(err.to_string())),
        };
        Self {
            trial,
            plan,
            status_id,
            conversation_id,
            server,
            outcome,
            shared: false,
            verdict: Verdict::default(),
        }
    }
}

/// Polls every started turn until it is terminal or `deadline` passes;
/// returns when the last one settled, or `None` if some did not.
async fn settle(cluster: &Cluster, turns: &mut [TurnRecord], deadline: Instant) -> Option<Instant> {
    let mut last = Instant::now();
    let mut round = 0;
    loop {
        let mut open = 0;
        for turn in turns.iter_mut() {
            let Outcome::Stuck(status) = &mut turn.outcome else {
                continue;
            };
            let path = format!("/async/{}", turn.status_id);
            match cluster.get(round % 2, &path).await {
                Some(answer) if answer.status == 200 => {
                    let now = answer.body["status"].as_str().unwrap_or("?").to_owned();
                    if now == "completed" || now == "failed" {
                        turn.outcome = Outcome::Settled(answer.body);
                        last = Instant::now();
                        continue;
                    }
                    *status = now;
                }
                Some(answer) => *status = format!("GET /async answered {}", answer.status),
                None => {}
            }
            open += 1;
        }
        if open == 0 {
            return Some(last);
        }
        if Instant::now() >= deadline {
            return None;
        }
        round += 1;
        tokio::time::sleep(POLL).await;
    }
}

/// Reads a settled turn again (from the other server) with its stored
/// conversation and judges it; other turns get an empty verdict.
pub async fn examine(cluster: &Cluster, turn: &TurnRecord) -> Verdict {
    let Outcome::Settled(first) = &turn.outcome else {
        return Verdict::default();
    };
    let unreachable = || Answer {
        status: 0,
        body: Value::Null,
    };
    let other = 1 - turn.server;
    let later = cluster
        .get(other, &format!("/async/{}", turn.status_id))
        .await
        .unwrap_or_else(unreachable);
    let conversation = cluster
        .get(other, &format!("/conversations/{}", turn.conversation_id))
        .await
        .unwrap_or_else(unreachable);
    let model_calls = cluster.model.calls_of(&turn.plan.marker);
    let mut verdict = judge(
        &turn.plan,
        &Observed {
            first,
            later: &later,
            conversation: &conversation,
            model_calls: &model_calls,
            shared: turn.shared,
        },
    );
    let attempts = cluster
        .get(
            other,
            &format!(
                "/tool-calls?conversationId={}&limit=200",
                turn.conversation_id
            ),
        )
        .await
        .unwrap_or_else(unreachable);
    match (attempts.status, conversation.body["messages"].as_array()) {
        (200, Some(messages)) => {
            let attempts = attempts.body["toolCalls"]
                .as_array()
                .map_or(&[][..], Vec::as_slice);
            ledger::judge(&turn.plan, messages, attempts, &mut verdict);
        }
        (200, None) => {}
        (status, _) => verdict
            .unrecorded
            .push(format!("GET /tool-calls answered {status}")),
    }
    if !verdict.lost.is_empty() || !verdict.duplicated.is_empty() || !verdict.unrecorded.is_empty()
    {
        let calls: Vec<Value> = model_calls
            .iter()
            .map(|call| json!({"phase": format!("{:?}", call.phase), "key": call.key}))
            .collect();
        write_evidence(
            cluster,
            &turn.plan.marker,
            &json!({
                "plan": turn.plan.user_text(),
                "statusId": turn.status_id,
                "startedOn": cluster.servers[turn.server].name,
                "lost": verdict.lost,
                "duplicated": verdict.duplicated,
                "unrecorded": verdict.unrecorded,
                "ledger": attempts.body,
                "firstTerminal": first,
                "later": later.body,
                "conversation": conversation.body,
                "modelRequests": calls,
            }),
        );
    }
    verdict
}

/// Writes what was seen of a turn or conversation with a problem, as
/// `<name>.json` (best effort: a report aid).
pub(crate) fn write_evidence(cluster: &Cluster, name: &str, evidence: &Value) {
    let path = cluster.evidence_dir.join(format!("{name}.json"));
    let written = std::fs::create_dir_all(&cluster.evidence_dir).and_then(|()| {
        let text = serde_json::to_string_pretty(evidence).unwrap_or_default();
        std::fs::write(&path, text)
    });
    if let Err(err) = written {
        eprintln!("chaos: could not write {}: {err}", path.display());
    }
}
