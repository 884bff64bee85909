//! Load generator for agent turns (`make bench`), against the real server
//! binary on loopback with a scripted model (OpenAI wire format) in this
//! process:
//!   - turns per second and time to first byte (p50/p99) for one client and
//!     for N concurrent clients, each turn calling one uploaded tool (two
//!     model passes);
//!   - the same streaming requests made straight to the scripted model, the
//!     floor the server adds to;
//!   - the CPU time each turn costs (its server, Postgres, every process
//!     of the machine), read from /proc around each arm's run;
//!   - the same turns on a server recording chunks in NATS JetStream
//!     (`TOOLSERVER_TURN_CHUNKS=nats`, the server at 127.0.0.1:4222, a
//!     stream of this run's own) and on one with recording off
//!     (`TOOLSERVER_STREAM_RECORDING=false`), for the cost of recording in
//!     each store; the three arms take turns over several rounds, and both the
//!     ratio of their median turns/s and the median of each round's ratio
//!     are reported;
//!   - for one client, the same comparison turn by turn: sequential turns
//!     alternating between the server recording in Postgres and the one
//!     with recording off, so both arms see the machine in the same state at
//!     the same moment (its speed drifts between rounds by more than the
//!     cost measured); the ratio of their mean turn times is the ratio of
//!     their turns/s. Each arm's turns are also split by the arm of the
//!     turn before: a turn after the other server's pays for the switch,
//!     alike for both arms unless one arm leaves work behind for whichever
//!     turn comes next (which would flatter that arm);
//!   - the cost of admission (per-account limits on what may start), turn
//!     by turn in the same way: the server recording in Postgres against one
//!     with admission checks off (`TOOLSERVER_ADMISSION=false`); the goal is
//!     a cost of at most 2% of the turns/s;
//!   - the same comparison with the model pacing its text as a hosted model
//!     streams (a chunk every 10 ms), where a turn spends its time waiting
//!     for the model rather than for the store;
//!   - resume latency: a request for a running turn's stream to its first
//!     replayed chunk (p50/p99), from Postgres and from JetStream;
//!   - the server's resident memory with 1,000 turns open at once (the model
//!     holds each pass open), read from /proc.
//!
//! Needs `DATABASE_URL` (a server where it may create a scratch database)
//! and NATS with JetStream at 127.0.0.1:4222.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};
use toolserver_testsupport::bench::{ms, summary, ScratchDatabase};
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;
use toolserver_testsupport::{Reply, ScriptedModel};

const SEQUENTIAL_TURNS: usize = 200;
const CLIENTS: usize = 50;
const TURNS_PER_CLIENT: usize = 20;
const OPEN_TURNS: usize = 1000;
/// Turns of each arm in the turn-by-turn comparison.
const INTERLEAVED_TURNS: usize = 600;
const RESUMES: usize = 100;
/// Rounds of the recording arms, whose medians are compared.
const ROUNDS: usize = 11;
/// Turns per client in the paced comparison.
const PACED_TURNS_PER_CLIENT: usize = 4;
/// Time between the paced model's text chunks.
const PACED_CHUNK_DELAY: Duration = Duration::from_millis(10);
/// Largest share of turns/s that admission checks may cost.
const ADMISSION_COST_GOAL: f64 = 0.02;
const NATS_URL: &str = "127.0.0.1:4222";
const SECRET: &str = "bench-secret";
/// Account limits no arm of this bench reaches.
const GENEROUS_LIMITS: [(&str, &str); 6] = [
    ("TOOLSERVER_ACCOUNT_OPEN_TURNS", "100000"),
    ("TOOLSERVER_ACCOUNT_CONCURRENT_CALLS", "100000"),
    ("TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE", "100000000"),
    ("TOOLSERVER_ACCOUNT_CALL_BURST", "100000000"),
    ("TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE", "100000000"),
    ("TOOLSERVER_ACCOUNT_TURN_BURST", "100000000"),
];
const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";

struct Server {
    base: String,
    child: tokio::process::Child,
    client: reqwest::Client,
    token: String,
}

impl Server {
    /// Starts a server on `data_dir` whose bundles are kept in `bundles`,
    /// shared by all the servers of a run, so each can run the tool.
    async fn start(
        database_url: &str,
        data_dir: &std::path::Path,
        bundles: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Self {
        let port = free_port();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolserver"));
        for name in inherited_settings() {
            command.env_remove(name);
        }
        let child = command
            .arg("serve")
            .envs(env.iter().copied())
            .env("DATABASE_URL", database_url)
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{port}"))
            .env("TOOLSERVER_METRICS_BIND", "127.0.0.1:0")
            .env("TOOLSERVER_DATA_DIR", data_dir)
            .env("TOOLSERVER_BUNDLE_DIR", bundles)
            .env("TOOLSERVER_JWT_SECRET", SECRET)
            .env("TOOLSERVER_SECRETS_KEY", "11".repeat(32))
            .env("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true")
            // Four servers share one Postgres (100 connections by default).
            .env("TOOLSERVER_DB_MAX_CONNECTIONS", "20")
            // One account runs every turn, 1,000 at once at the most: its
            // limits are raised so admission checks every turn but refuses none.
            .envs(GENEROUS_LIMITS)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(OPEN_TURNS)
            .build()
            .unwrap();
        wait_ready(&client, &base).await;
        let token = hs256_token(SECRET, "bench");
        Self {
            base,
            child,
            client,
            token,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        post_json(
            &self.client,
            &format!("{}{path}", self.base),
            &self.token,
            body,
        )
        .await
    }

    /// Resident and peak resident memory of the server, in MiB.
    fn memory(&self) -> (f64, f64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id().unwrap())).unwrap();
        let field = |name: &str| -> f64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace()
                .nth(1)
                .unwrap()
                .parse::<f64>()
                .unwrap()
                / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// One turn: time to the first body byte and to the end.
async fn turn(server: &Server, agent: &str) -> (Duration, Duration) {
    let body = json!({
        "id": uuid::Uuid::new_v4().to_string(),
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
        "trigger": "submit-message",
    });
    let started = Instant::now();
    let response = server
        .client
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(&server.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut first = None;
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        first.get_or_insert_with(|| started.elapsed());
        tail.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&tail);
    assert!(
        text.contains("\"finishReason\":\"stop\""),
        "a turn did not finish"
    );
    assert!(
        text.contains("\"type\":\"tool-output-available\""),
        "a turn's tool call failed: {text}"
    );
    (first.unwrap(), started.elapsed())
}

/// Starts a turn the model holds open, then times a resume of it from the
/// request to its first replayed chunk, and stops the turn.
async fn resume_latency(server: &Server, agent: &str) -> Duration {
    let conversation = uuid::Uuid::new_v4().to_string();
    let body = json!({
        "id": conversation,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hold"}]}],
        "trigger": "submit-message",
    });
    let response = server
        .client
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(&server.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut live = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("start-step") {
        seen.push_str(&String::from_utf8_lossy(
            &live.next().await.unwrap().unwrap(),
        ));
    }
    let stream = format!("{}/agents/{agent}/chat/{conversation}", server.base);
    let started = Instant::now();
    let resumed = server
        .client
        .get(format!("{stream}/stream"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let mut replay = resumed.bytes_stream();
    let mut first = String::new();
    while !first.contains("data: ") {
        first.push_str(&String::from_utf8_lossy(
            &replay.next().await.unwrap().unwrap(),
        ));
    }
    let latency = started.elapsed();
    let stopped = server
        .client
        .post(format!("{stream}/stop"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), 202);
    while live.next().await.is_some() {}
    latency
}

/// The floor: the same two streaming passes made straight to the model.
async fn model_direct(client: &reqwest::Client, base: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let mut first = None;
    for step in 0..2 {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        if step == 1 {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "{}"}));
        }
        let response = client
            .post(format!("{base}/chat/completions"))
            .json(&json!({"model": "bench-tool", "stream": true, "messages": messages}))
            .send()
            .await
            .unwrap();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            chunk.unwrap();
            first.get_or_insert_with(|| started.elapsed());
        }
    }
    (first.unwrap(), started.elapsed())
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// CPU time (user and system, in seconds) used so far by one server, by
/// Postgres (all its processes), and by every process of the machine.
#[derive(Debug, Clone, Copy)]
struct CpuUse {
    server: f64,
    postgres: f64,
    all: f64,
}

impl CpuUse {
    /// Reads `/proc` (the clock ticks are the kernel's USER_HZ, 100).
    fn now(server_pid: u32) -> Self {
        let mut used = Self {
            server: 0.0,
            postgres: 0.0,
            all: 0.0,
        };
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((head, tail)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = tail.split_whitespace().collect();
            let ticks: f64 =
                fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
            let seconds = ticks / 100.0;
            used.all += seconds;
            if pid == server_pid {
                used.server += seconds;
            } else if head.contains("(postgres") {
                used.postgres += seconds;
            }
        }
        used
    }

    /// Milliseconds per turn of each part used since `before`.
    fn per_turn(self, before: Self, turns: usize) -> [f64; 3] {
        let per = |now: f64, then: f64| (now - then) * 1000.0 / turns as f64;
        [
            per(self.server, before.server),
            per(self.postgres, before.postgres),
            per(self.all, before.all),
        ]
    }
}

/// What a run of arms measured: each arm's median turns/s, time to first
/// byte (ms), and CPU milliseconds per turn (its server, Postgres, all),
/// and its turns/s in each round.
struct ArmMedians {
    rate: Vec<f64>,
    ttfb: Vec<f64>,
    cpu: Vec<[f64; 3]>,
    round_rates: Vec<Vec<f64>>,
}

impl ArmMedians {
    /// The median over rounds of arm `arm`'s turns/s over arm `base`'s in
    /// the same round: steadier than the ratio of the medians when the
    /// machine's speed drifts between rounds.
    fn paired_ratio(&self, arm: usize, base: usize) -> f64 {
        let ratios = self.round_rates[arm]
            .iter()
            .zip(&self.round_rates[base])
            .map(|(rate, base_rate)| rate / base_rate)
            .collect();
        median(ratios)
    }
}

/// `ROUNDS` rounds of `agent`'s turns on each arm in turn (so all see the
/// same machine state); the medians of each arm.
async fn rounds(
    arms: &[(&str, std::sync::Arc<Server>)],
    agent: &str,
    clients: usize,
    per_client: usize,
) -> ArmMedians {
    let mut rates = vec![Vec::new(); arms.len()];
    let mut ttfbs = vec![Vec::new(); arms.len()];
    let mut cpus = vec![Vec::new(); arms.len()];
    for _ in 0..ROUNDS {
        for (arm, (label, target)) in arms.iter().enumerate() {
            let (s, a) = (target.clone(), agent.to_owned());
            let pid = target.child.id().unwrap();
            let before = CpuUse::now(pid);
            let (rate, ttfb) = concurrent(label, clients, per_client, move || {
                let (s, a) = (s.clone(), a.clone());
                async move { turn(&s, &a).await }
            })
            .await;
            cpus[arm].push(CpuUse::now(pid).per_turn(before, clients * per_client));
            rates[arm].push(rate);
            ttfbs[arm].push(ms(ttfb));
        }
    }
    let part = |samples: &Vec<[f64; 3]>, n: usize| median(samples.iter().map(|s| s[n]).collect());
    ArmMedians {
        round_rates: rates.clone(),
        rate: rates.into_iter().map(median).collect(),
        ttfb: ttfbs.into_iter().map(median).collect(),
        cpu: cpus
            .iter()
            .map(|samples| [part(samples, 0), part(samples, 1), part(samples, 2)])
            .collect(),
    }
}

/// `INTERLEAVED_TURNS` sequential turns of `agent` on each of `arms`,
/// alternating turn by turn (which goes first in a pair alternates too,
/// so each arm follows the other as often as itself); each turn's arm and
/// whole-turn time, in the order they ran.
async fn interleaved(arms: [&Server; 2], agent: &str) -> Vec<(usize, Duration)> {
    let mut turns = Vec::new();
    for pair in 0..INTERLEAVED_TURNS {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for arm in order {
            turns.push((arm, turn(arms[arm], agent).await.1));
        }
    }
    turns
}

/// The whole-turn times of `arm`'s turns in `turns`; with `after`, only of
/// those that ran right after a turn of that arm.
fn times_of(turns: &[(usize, Duration)], arm: usize, after: Option<usize>) -> Vec<Duration> {
    turns
        .iter()
        .enumerate()
        .filter(|(n, (of, _))| {
            *of == arm && after.is_none_or(|before| *n > 0 && turns[n - 1].0 == before)
        })
        .map(|(_, (_, took))| *took)
        .collect()
}

/// The mean of `samples`, in milliseconds.
fn mean_ms(samples: &[Duration]) -> f64 {
    samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64
}

/// Prints a turn-by-turn comparison (see [`interleaved`]) of arms named
/// `names` (in full, then in short): each arm's whole-turn times, the ratio
/// of arm 0's turns/s over arm 1's, and each arm's turns split by the arm
/// of the turn before. Returns the ratio.
fn report_interleaved(turns: &[(usize, Duration)], names: [&str; 2], short: [&str; 2]) -> f64 {
    let (first, second) = (times_of(turns, 0, None), times_of(turns, 1, None));
    let pair_ratios = turns
        .chunks(2)
        .map(|pair| {
            let time = |arm| pair.iter().find(|(of, _)| *of == arm).unwrap().1;
            time(1).as_secs_f64() / time(0).as_secs_f64()
        })
        .collect();
    let (first_p50, _) = summary(&format!("{}: whole turn", names[0]), first.clone());
    let (second_p50, _) = summary(&format!("{}: whole turn", names[1]), second.clone());
    let ratio = mean_ms(&second) / mean_ms(&first);
    println!(
        "{} vs {}, turn by turn: {ratio:.3}x the turns/s (mean turn {:.3} vs {:.3} ms; median of pairs' ratios {:.3}x), whole turn p50 {:+.3} ms",
        names[0],
        names[1],
        mean_ms(&first),
        mean_ms(&second),
        median(pair_ratios),
        ms(first_p50) - ms(second_p50)
    );
    for (arm, label) in short.iter().enumerate() {
        let p50_after = |before| {
            median(
                times_of(turns, arm, Some(before))
                    .into_iter()
                    .map(ms)
                    .collect(),
            )
        };
        println!(
            "{label} turns: p50 {:.3} ms after {}, {:.3} ms after {}",
            p50_after(0),
            short[0],
            p50_after(1),
            short[1]
        );
    }
    ratio
}

async fn concurrent<F, Fut>(
    label: &str,
    clients: usize,
    turns_per_client: usize,
    run: F,
) -> (f64, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (Duration, Duration)> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..turns_per_client {
                samples.push(run().await);
            }
            samples
        }));
    }
    let mut ttfb = Vec::new();
    let mut total = Vec::new();
    for task in tasks {
        for (first, all) in task.await.unwrap() {
            ttfb.push(first);
            total.push(all);
        }
    }
    let wall = started.elapsed();
    let rate = (clients * turns_per_client) as f64 / wall.as_secs_f64();
    let (ttfb_p50, _) = summary(&format!("{label}: time to first byte"), ttfb);
    summary(&format!("{label}: whole turn"), total);
    println!("{label:<40} {rate:.1} turns/s ({clients} concurrent clients)");
    (rate, ttfb_p50)
}

#[tokio::main]
async fn main() {
    let database = ScratchDatabase::create("turns").await;
    let data = tempfile::tempdir().unwrap();
    let bundles = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start().await;
    let server =
        std::sync::Arc::new(Server::start(&database.url, data.path(), bundles.path(), &[]).await);
    let unrecorded_data = tempfile::tempdir().unwrap();
    let unrecorded = std::sync::Arc::new(
        Server::start(
            &database.url,
            unrecorded_data.path(),
            bundles.path(),
            &[("TOOLSERVER_STREAM_RECORDING", "false")],
        )
        .await,
    );
    let unadmitted_data = tempfile::tempdir().unwrap();
    let unadmitted = std::sync::Arc::new(
        Server::start(
            &database.url,
            unadmitted_data.path(),
            bundles.path(),
            &[("TOOLSERVER_ADMISSION", "false")],
        )
        .await,
    );
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let jetstream_name = format!("BENCH_{run_id}");
    let (chunk_prefix, request_subject) = (
        format!("bench-chunks.{run_id}"),
        format!("bench-turns.{run_id}"),
    );
    let jetstream_data = tempfile::tempdir().unwrap();
    let jetstream = std::sync::Arc::new(
        Server::start(
            &database.url,
            jetstream_data.path(),
            bundles.path(),
            &[
                ("TOOLSERVER_NATS_URL", NATS_URL),
                ("TOOLSERVER_TURN_CHUNKS", "nats"),
                ("TOOLSERVER_NATS_STREAM", &jetstream_name),
                ("TOOLSERVER_NATS_CHUNK_PREFIX", &chunk_prefix),
                ("TOOLSERVER_NATS_SUBJECT", &request_subject),
            ],
        )
        .await,
    );

    let tool = server
        .post(
            "/accounts/me/tools",
            json!({
                "name": "echo", "description": "echo", "inputSchema": {"type": "object"},
                "bundle": base64::engine::general_purpose::STANDARD.encode(ECHO),
            }),
        )
        .await["toolId"]
        .as_str()
        .unwrap()
        .to_owned();
    let agent = |model_id: &str, tools: Value| {
        json!({"name": model_id, "config": {
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"baseUrl": model.base_url(), "apiKey": "bench"}},
            "tools": tools,
        }})
    };
    model.script(
        "bench-tool",
        vec![
            Reply::tool_call("c1", "echo", json!({"n": 1})),
            Reply::text("done"),
        ],
    );
    model.script(
        "bench-hold",
        vec![Reply::text("held").delay_first(Duration::from_secs(3600))],
    );
    let paced_text = "word ".repeat(40);
    model.script(
        "bench-paced",
        vec![
            Reply::tool_call("c1", "echo", json!({"n": 1})),
            Reply::text(&paced_text).chunk_delay(PACED_CHUNK_DELAY),
        ],
    );
    let paced_agent = server
        .post("/agents", agent("bench-paced", json!({ &tool: {} })))
        .await["agentId"]
        .as_str()
        .unwrap()
        .to_owned();
    let tool_agent = server
        .post("/agents", agent("bench-tool", json!({ &tool: {} })))
        .await["agentId"]
        .as_str()
        .unwrap()
        .to_owned();
    let hold_agent = server.post("/agents", agent("bench-hold", json!({}))).await["agentId"]
        .as_str()
        .unwrap()
        .to_owned();

    for target in [&server, &jetstream, &unrecorded, &unadmitted] {
        for _ in 0..20 {
            turn(target, &tool_agent).await;
        }
    }
    let direct_client = reqwest::Client::new();
    for (clients, per_client) in [(1, SEQUENTIAL_TURNS), (CLIENTS, TURNS_PER_CLIENT)] {
        println!(
            "== {} turns, {clients} concurrent clients, one tool call each ==",
            clients * per_client
        );
        let (client, base) = (direct_client.clone(), model.base_url());
        let (floor_rate, floor_ttfb) =
            concurrent("model alone (floor)", clients, per_client, move || {
                let (client, base) = (client.clone(), base.clone());
                async move { model_direct(&client, &base).await }
            })
            .await;
        let arms = [
            ("server turn, recorded in Postgres", server.clone()),
            ("server turn, recorded in JetStream", jetstream.clone()),
            ("server turn, recording off", unrecorded.clone()),
        ];
        let medians = rounds(&arms, &tool_agent, clients, per_client).await;
        let ArmMedians {
            rate, ttfb, cpu, ..
        } = &medians;
        println!("-- medians of {ROUNDS} rounds ({clients} concurrent clients) --");
        for (arm, (label, _)) in arms.iter().enumerate() {
            let [server_cpu, postgres_cpu, all_cpu] = cpu[arm];
            println!(
                "{label:<40} {:.1} turns/s, time to first byte p50 {:.3} ms, CPU per turn: server {server_cpu:.3} ms, Postgres {postgres_cpu:.3} ms, all processes {all_cpu:.3} ms",
                rate[arm], ttfb[arm]
            );
        }
        println!(
            "server vs floor: {:.3}x the turns/s, time to first byte p50 +{:.3} ms",
            rate[0] / floor_rate,
            ttfb[0] - ms(floor_ttfb)
        );
        println!(
            "recorded in Postgres vs off: {:.3}x the turns/s (median of rounds' ratios {:.3}x), time to first byte p50 {:+.3} ms",
            rate[0] / rate[2],
            medians.paired_ratio(0, 2),
            ttfb[0] - ttfb[2]
        );
        println!(
            "recorded in JetStream vs off: {:.3}x the turns/s (median of rounds' ratios {:.3}x), time to first byte p50 {:+.3} ms",
            rate[1] / rate[2],
            medians.paired_ratio(1, 2),
            ttfb[1] - ttfb[2]
        );
        println!(
            "JetStream vs Postgres: {:.3}x the turns/s, time to first byte p50 {:+.3} ms",
            rate[1] / rate[0],
            ttfb[1] - ttfb[0]
        );
    }

    println!("== 1 client, turn by turn: {INTERLEAVED_TURNS} turns on each arm, alternating ==");
    let turns = interleaved([&server, &unrecorded], &tool_agent).await;
    report_interleaved(
        &turns,
        ["recorded in Postgres", "recording off"],
        ["recorded", "unrecorded"],
    );

    println!(
        "== 1 client, turn by turn: admission checks on vs off, {INTERLEAVED_TURNS} turns on each arm, alternating =="
    );
    let turns = interleaved([&server, &unadmitted], &tool_agent).await;
    let admitted = report_interleaved(
        &turns,
        ["admission on", "admission off"],
        ["admitted", "unadmitted"],
    );
    let cost = 1.0 - admitted;
    println!(
        "goal: admission costs at most {:.0}% of the turns/s: {:.2}% {}",
        ADMISSION_COST_GOAL * 100.0,
        cost * 100.0,
        if cost <= ADMISSION_COST_GOAL {
            "PASS"
        } else {
            "FAIL"
        }
    );
    drop(unadmitted);

    println!(
        "== paced model: {} turns, {CLIENTS} concurrent clients, 40 text chunks {} ms apart ==",
        CLIENTS * PACED_TURNS_PER_CLIENT,
        PACED_CHUNK_DELAY.as_millis()
    );
    let arms = [
        ("paced, recorded in Postgres", server.clone()),
        ("paced, recorded in JetStream", jetstream.clone()),
        ("paced, recording off", unrecorded.clone()),
    ];
    let paced = rounds(&arms, &paced_agent, CLIENTS, PACED_TURNS_PER_CLIENT).await;
    let ArmMedians { rate, cpu, .. } = &paced;
    for (arm, (label, _)) in arms.iter().enumerate() {
        println!(
            "{label:<40} {:.1} turns/s, all processes' CPU per turn {:.3} ms (medians of {ROUNDS})",
            rate[arm], cpu[arm][2]
        );
    }
    println!(
        "paced: recorded in Postgres vs off {:.3}x (median of rounds' ratios {:.3}x), in JetStream vs off {:.3}x ({:.3}x) the turns/s",
        rate[0] / rate[2],
        paced.paired_ratio(0, 2),
        rate[1] / rate[2],
        paced.paired_ratio(1, 2)
    );

    println!("== resume: request to first replayed chunk ==");
    for (label, target) in [
        ("resume to first chunk, Postgres", &server),
        ("resume to first chunk, JetStream", &jetstream),
    ] {
        let mut latencies = Vec::new();
        for _ in 0..RESUMES {
            latencies.push(resume_latency(target, &hold_agent).await);
        }
        summary(label, latencies);
    }

    let (idle_rss, _) = server.memory();
    println!("== {OPEN_TURNS} turns open at once ==");
    let mut open = Vec::new();
    for _ in 0..OPEN_TURNS {
        let server = server.clone();
        let agent = hold_agent.clone();
        open.push(tokio::spawn(async move {
            let body = json!({
                "id": uuid::Uuid::new_v4().to_string(),
                "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hold"}]}],
                "trigger": "submit-message",
            });
            let response = server.client.post(format!("{}/agents/{agent}/chat", server.base)).bearer_auth(&server.token).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let mut stream = response.bytes_stream();
            let mut seen = String::new();
            while !seen.contains("start-step") {
                seen.push_str(&String::from_utf8_lossy(&stream.next().await.unwrap().unwrap()));
            }
            stream
        }));
    }
    let mut streams = Vec::new();
    for task in open {
        streams.push(task.await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss, peak) = server.memory();
    println!(
        "server memory: idle {idle_rss:.1} MiB, with {} open turns {rss:.1} MiB (peak {peak:.1} MiB), {:.1} KiB per open turn",
        streams.len(),
        (rss - idle_rss) * 1024.0 / streams.len() as f64
    );
    drop(streams);
    drop(server);
    drop(jetstream);
    tokio::time::sleep(Duration::from_millis(200)).await;
    database.drop_now().await;
    let nats = async_nats::connect(NATS_URL).await.unwrap();
    async_nats::jetstream::new(nats)
        .delete_stream(&jetstream_name)
        .await
        .unwrap();
}
