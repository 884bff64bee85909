//! Load generator for agent turns (`make bench`), against the real server
//! binary on loopback with a scripted model (OpenAI wire format) in this
//! process:
//!   - turns per second and time to first byte (p50/p99) for one client and
//!     for N concurrent clients, each turn calling one uploaded tool (two
//!     model passes);
//!   - the same streaming requests made straight to the scripted model, the
//!     floor the server adds to;
//!   - time to first byte and whole turn with turns started at fixed rates
//!     below capacity (an open loop): with N clients each waiting for its
//!     turn (a closed loop) a saturated server's queue sits in its slowest
//!     stage, so the closed loop's first byte says where that queue is as
//!     much as how fast the server is;
//!   - the CPU time each turn costs (its server, the server's runners,
//!     Postgres: the connections to the scratch database and the cluster's
//!     own processes, every process of the machine), read from /proc
//!     around each arm's run;
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
//!     holds each pass open), read from /proc;
//!   - the cost of the tool-call ledger: the server recording in Postgres
//!     against one with the ledger off (`TOOLSERVER_LEDGER=false`), in
//!     alternating blocks of turns rather than turn by turn (the ledger's
//!     writer works a moment after each call, which turn by turn lands in
//!     the other arm's turn); the goal is a cost of at most 3% of the
//!     turns/s. `TURNS_BENCH=ledger` runs only this comparison;
//!   - statements per turn: every arm resets `pg_stat_statements` before
//!     its run and counts the calls of the statements run in the scratch
//!     database after it (transactions' `BEGIN` and `COMMIT` too);
//!   - the server against a peer built on the AI SDK alone
//!     (`peer/server.mjs`: `streamText` on the same scripted model, the
//!     same echo tool in-process, no auth, no storage), round by round with
//!     `CLIENTS` clients: turns/s and CPU per turn of each, the server's
//!     CPU split into its own, its runners' (the Node workers it starts)
//!     and Postgres', and its statements per turn, against the goals
//!     (Postgres at most 0.8 ms and 5 statements a turn, 3x the peer's
//!     turns/s), then its most called statements. `TURNS_BENCH=peer` runs
//!     only this comparison;
//!   - growth: three rounds of 1,000 sequential turns, each round on a new
//!     conversation, each turn sending only its new 400-byte user message,
//!     on a server whose conversation limits allow it; median turn, CPU and
//!     statements per turn in windows of 10 turns (turns 1-10, 91-100,
//!     491-500, 991-1000), the last window over the first in each round,
//!     and the medians of those ratios against the goals (Postgres CPU and
//!     server CPU less model requests at most 1.2x). `TURNS_BENCH=growth`
//!     runs only this arm.
//!
//! `TOOLSERVER_BIN=/path` runs another build of the server (e.g. an older
//! one, for a before/after comparison).
//!
//! Needs `DATABASE_URL` (a server where it may create a scratch database,
//! with `pg_stat_statements` preloaded), NATS with JetStream at
//! 127.0.0.1:4222, and the AI SDK installed in `clients/ai-sdk` (all three
//! from `scripts/test-services.sh`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod compare;
mod cpu;
mod growth;
mod measure;
mod peer;
mod plan;
mod server;
mod statements;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use toolserver_testsupport::bench::{ms, summary, ScratchDatabase};
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::compare::{in_blocks, interleaved, report_interleaved, rounds, Arm};
use crate::cpu::ArmMedians;
use crate::measure::{concurrent, model_direct, open_loop, resume_latency, turn};
use crate::plan::{
    ADMISSION_COST_GOAL, CLIENTS, GROWTH_SERVER, INTERLEAVED_TURNS, LEDGER_BLOCK, LEDGER_COST_GOAL,
    NATS_URL, OPEN_LOOP_RATES, OPEN_LOOP_TURNS, OPEN_TURNS, PACED_CHUNK_DELAY,
    PACED_TURNS_PER_CLIENT, RESUMES, ROUNDS, SEQUENTIAL_TURNS, TURNS_PER_CLIENT,
};
use crate::server::Server;
use crate::statements::Statements;

#[tokio::main]
async fn main() {
    let database = ScratchDatabase::create("turns").await;
    let mut statements = Statements::connect(&database.url).await;
    let bundles = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start().await;
    script(&model);
    match std::env::var("TURNS_BENCH").as_deref() {
        Ok("growth") => {
            let data = tempfile::tempdir().unwrap();
            let server =
                Server::start(&database.url, data.path(), bundles.path(), &GROWTH_SERVER).await;
            let tool = server.upload_echo().await;
            growth::run(&server, &tool, &model, &mut statements).await;
        }
        Ok("peer") => {
            let data = tempfile::tempdir().unwrap();
            let server =
                Arc::new(Server::start(&database.url, data.path(), bundles.path(), &[]).await);
            let tool = server.upload_echo().await;
            let agent = server
                .create_agent(&model.base_url(), "bench-tool", json!({ &tool: {} }))
                .await;
            for _ in 0..20 {
                turn(&server, &agent).await;
            }
            peer::compare(
                &server,
                &agent,
                &model.base_url(),
                "bench-tool",
                &mut statements,
            )
            .await;
        }
        selected => {
            every_arm(
                &database.url,
                bundles.path(),
                &model,
                &mut statements,
                selected == Ok("ledger"),
            )
            .await;
        }
    }
    drop(statements);
    tokio::time::sleep(Duration::from_millis(200)).await;
    database.drop_now().await;
}

/// Scripts the scripted model's models: `bench-tool` (one tool call, then
/// the answer), `bench-hold` (a pass held open) and `bench-paced` (one tool
/// call, then text paced as a hosted model streams).
fn script(model: &ScriptedModel) {
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
}

/// Every arm of the bench; with `ledger_only`, only the ledger's.
async fn every_arm(
    database_url: &str,
    bundles: &std::path::Path,
    model: &ScriptedModel,
    statements: &mut Statements,
    ledger_only: bool,
) {
    let data = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(database_url, data.path(), bundles, &[]).await);
    let unrecorded_data = tempfile::tempdir().unwrap();
    let unrecorded = Arc::new(
        Server::start(
            database_url,
            unrecorded_data.path(),
            bundles,
            &[("TOOLSERVER_STREAM_RECORDING", "false")],
        )
        .await,
    );
    let unadmitted_data = tempfile::tempdir().unwrap();
    let unadmitted = Arc::new(
        Server::start(
            database_url,
            unadmitted_data.path(),
            bundles,
            &[("TOOLSERVER_ADMISSION", "false")],
        )
        .await,
    );
    let unledgered_data = tempfile::tempdir().unwrap();
    let unledgered = Arc::new(
        Server::start(
            database_url,
            unledgered_data.path(),
            bundles,
            &[("TOOLSERVER_LEDGER", "false")],
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
    let jetstream = Arc::new(
        Server::start(
            database_url,
            jetstream_data.path(),
            bundles,
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

    let tool = server.upload_echo().await;
    let model_base = model.base_url();
    let paced_agent = server
        .create_agent(&model_base, "bench-paced", json!({ &tool: {} }))
        .await;
    let tool_agent = server
        .create_agent(&model_base, "bench-tool", json!({ &tool: {} }))
        .await;
    let hold_agent = server
        .create_agent(&model_base, "bench-hold", json!({}))
        .await;

    for target in [&server, &jetstream, &unrecorded, &unadmitted, &unledgered] {
        for _ in 0..20 {
            turn(target, &tool_agent).await;
        }
    }
    if ledger_only {
        compare_ledger([&server, &unledgered], &tool_agent).await;
        drop((server, jetstream, unrecorded, unadmitted, unledgered));
        delete_stream(&jetstream_name).await;
        return;
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
            Arm::server("server turn, recorded in Postgres", &server, &tool_agent),
            Arm::server(
                "server turn, recorded in JetStream",
                &jetstream,
                &tool_agent,
            ),
            Arm::server("server turn, recording off", &unrecorded, &tool_agent),
        ];
        let medians = rounds(&arms, clients, per_client, statements).await;
        let ArmMedians {
            rate, ttfb, cpu, ..
        } = &medians;
        println!("-- medians of {ROUNDS} rounds ({clients} concurrent clients) --");
        for (n, arm) in arms.iter().enumerate() {
            println!(
                "{:<40} {:.1} turns/s, time to first byte p50 {:.3} ms, CPU per turn: server {:.3} ms, runners {:.3} ms, {}, all processes {:.3} ms; statements per turn {:.2}",
                arm.label, rate[n], ttfb[n], cpu[n].server, cpu[n].runners, cpu[n].postgres_text(), cpu[n].all, medians.statements[n]
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

    peer::compare(&server, &tool_agent, &model_base, "bench-tool", statements).await;

    println!(
        "== open loop: {OPEN_LOOP_TURNS} turns started at a fixed rate, each its own request, one tool call each =="
    );
    for rate in OPEN_LOOP_RATES {
        let (server, agent) = (server.clone(), tool_agent.clone());
        open_loop(
            &format!("recorded in Postgres, {rate:.0}/s offered"),
            rate,
            OPEN_LOOP_TURNS,
            move || {
                let (server, agent) = (server.clone(), agent.clone());
                async move { turn(&server, &agent).await }
            },
        )
        .await;
    }

    println!("== 1 client, turn by turn: {INTERLEAVED_TURNS} turns on each arm, alternating ==");
    let turns = interleaved([&server, &unrecorded], &tool_agent).await;
    report_interleaved(
        &turns,
        1,
        ["recorded in Postgres", "recording off"],
        ["recorded", "unrecorded"],
    );

    println!(
        "== 1 client, turn by turn: admission checks on vs off, {INTERLEAVED_TURNS} turns on each arm, alternating =="
    );
    let turns = interleaved([&server, &unadmitted], &tool_agent).await;
    let admitted = report_interleaved(
        &turns,
        1,
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

    compare_ledger([&server, &unledgered], &tool_agent).await;
    drop(unledgered);

    println!(
        "== paced model: {} turns, {CLIENTS} concurrent clients, 40 text chunks {} ms apart ==",
        CLIENTS * PACED_TURNS_PER_CLIENT,
        PACED_CHUNK_DELAY.as_millis()
    );
    let arms = [
        Arm::server("paced, recorded in Postgres", &server, &paced_agent),
        Arm::server("paced, recorded in JetStream", &jetstream, &paced_agent),
        Arm::server("paced, recording off", &unrecorded, &paced_agent),
    ];
    let paced = rounds(&arms, CLIENTS, PACED_TURNS_PER_CLIENT, statements).await;
    let ArmMedians { rate, cpu, .. } = &paced;
    for (n, arm) in arms.iter().enumerate() {
        println!(
            "{:<40} {:.1} turns/s, all processes' CPU per turn {:.3} ms (medians of {ROUNDS})",
            arm.label, rate[n], cpu[n].all
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
    drop((arms, server, jetstream, unrecorded));
    delete_stream(&jetstream_name).await;

    let growth_data = tempfile::tempdir().unwrap();
    let growth_server =
        Server::start(database_url, growth_data.path(), bundles, &GROWTH_SERVER).await;
    growth::run(&growth_server, &tool, model, statements).await;
}

/// Deletes the JetStream stream `name` the run's servers recorded in.
async fn delete_stream(name: &str) {
    let nats = async_nats::connect(NATS_URL).await.unwrap();
    async_nats::jetstream::new(nats)
        .delete_stream(name)
        .await
        .unwrap();
}

/// One client's turns alternating between a server recording its calls in
/// the ledger and one with `TOOLSERVER_LEDGER=false`, in blocks of
/// `LEDGER_BLOCK` turns: the ledger writes a moment after a call (it holds
/// starts for `TOOLSERVER_LEDGER_HOLD_MS`), which turn by turn would land in
/// the other arm's turns; what the ledger costs against its goal.
async fn compare_ledger(arms: [&Server; 2], agent: &str) {
    println!(
        "== 1 client: tool-call ledger on vs off, {INTERLEAVED_TURNS} turns on each arm, alternating in blocks of {LEDGER_BLOCK} =="
    );
    let turns = in_blocks(arms, agent, LEDGER_BLOCK).await;
    let ledgered = report_interleaved(
        &turns,
        LEDGER_BLOCK,
        ["ledger on", "ledger off"],
        ["ledgered", "unledgered"],
    );
    let cost = 1.0 - ledgered;
    println!(
        "goal: the ledger costs at most {:.0}% of the turns/s: {:.2}% {}",
        LEDGER_COST_GOAL * 100.0,
        cost * 100.0,
        if cost <= LEDGER_COST_GOAL {
            "PASS"
        } else {
            "FAIL"
        }
    );
}
