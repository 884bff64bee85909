//! The AI SDK peer: the same turns served by a Node server on the AI SDK's
//! `streamText` alone (`peer/server.mjs`: the tool in-process, no auth, no
//! storage), and the main arm compared with it.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolserver_testsupport::http::free_port;

use crate::compare::{rounds, Arm};
use crate::plan::{
    verdict, CLIENTS, PEER_RATIO_GOAL, PEER_WARMUP_TURNS, POSTGRES_CPU_GOAL_MS, ROUNDS,
    STATEMENTS_GOAL, TURNS_PER_CLIENT,
};
use crate::server::Server;
use crate::statements::Statements;

/// The peer server, a child process on a free port of loopback.
pub(crate) struct Peer {
    base: String,
    child: tokio::process::Child,
    client: reqwest::Client,
}

impl Peer {
    /// Starts `peer/server.mjs` with the AI SDK installed in
    /// `clients/ai-sdk` (`scripts/test-services.sh` installs it), answering
    /// with `model_id` of the scripted model at `model_base_url`.
    pub(crate) async fn start(model_base_url: &str, model_id: &str) -> Self {
        let port = free_port();
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut child = tokio::process::Command::new("node")
            .arg(crate_dir.join("benches/turns/peer/server.mjs"))
            .env(
                "AI_SDK_MODULES",
                crate_dir.join("../../clients/ai-sdk/node_modules"),
            )
            .env("MODEL_BASE_URL", model_base_url)
            .env("MODEL_ID", model_id)
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node (scripts/test-services.sh installs it)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next_line().await.unwrap();
        assert_eq!(
            ready.as_deref(),
            Some("ready"),
            "the AI SDK peer did not start"
        );
        Self {
            base: format!("http://127.0.0.1:{port}"),
            child,
            client: reqwest::Client::new(),
        }
    }

    /// One turn on a new conversation: time to the first body byte and to
    /// the end.
    pub(crate) async fn turn(&self) -> (Duration, Duration) {
        let body = json!({
            "id": uuid::Uuid::new_v4().to_string(),
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
            "trigger": "submit-message",
        });
        let started = Instant::now();
        let response = self
            .client
            .post(&self.base)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let mut first = None;
        let mut tail = Vec::new();
        while let Some(chunk) = stream.next().await {
            tail.extend_from_slice(&chunk.unwrap());
            first.get_or_insert_with(|| started.elapsed());
        }
        let text = String::from_utf8_lossy(&tail);
        assert!(
            text.contains("\"type\":\"tool-output-available\"")
                && text.contains("\"type\":\"finish\""),
            "a turn of the AI SDK peer failed: {text}"
        );
        (first.unwrap(), started.elapsed())
    }

    /// The peer as an arm of a comparison.
    fn arm(self: &Arc<Self>) -> Arm {
        let peer = self.clone();
        Arm {
            label: "AI SDK peer (streamText)".to_owned(),
            pid: self.child.id().unwrap(),
            turn: Arc::new(move || {
                let peer = peer.clone();
                Box::pin(async move { peer.turn().await })
            }),
        }
    }
}

/// The main arm (`CLIENTS` clients, `TURNS_PER_CLIENT` turns each, one tool
/// call a turn) on `server` with `agent` and on the AI SDK peer answering
/// with `model_id` of the scripted model at `model_base_url`, round by
/// round; prints each one's turns/s and CPU per turn, the server's
/// statements per turn, all against their goals, and the server's most
/// called statements.
pub(crate) async fn compare(
    server: &Arc<Server>,
    agent: &str,
    model_base_url: &str,
    model_id: &str,
    statements: &mut Statements,
) {
    let peer = Arc::new(Peer::start(model_base_url, model_id).await);
    let warming = (0..CLIENTS).map(|_| async {
        for _ in 0..PEER_WARMUP_TURNS {
            peer.turn().await;
        }
    });
    futures::future::join_all(warming).await;
    let turns = CLIENTS * TURNS_PER_CLIENT;
    println!("== {turns} turns, {CLIENTS} concurrent clients, one tool call each: the server vs the AI SDK peer ==");
    let arms = [
        Arm::server("server turn, recorded in Postgres", server, agent),
        peer.arm(),
    ];
    let medians = rounds(&arms, CLIENTS, TURNS_PER_CLIENT, statements).await;
    let (ours, theirs) = (medians.cpu[0], medians.cpu[1]);
    let per_turn = medians.statements[0];
    println!("-- medians of {ROUNDS} rounds ({CLIENTS} concurrent clients) --");
    println!(
        "server: {:.1} turns/s; CPU per turn: server {:.3} ms, runners {:.3} ms, {} (goal <= {POSTGRES_CPU_GOAL_MS} ms in all: {}), all processes {:.3} ms; statements per turn {per_turn:.2} (goal <= {STATEMENTS_GOAL}: {})",
        medians.rate[0],
        ours.server,
        ours.runners,
        ours.postgres_text(),
        verdict(ours.postgres() <= POSTGRES_CPU_GOAL_MS),
        ours.all,
        verdict(per_turn <= STATEMENTS_GOAL),
    );
    println!(
        "AI SDK peer: {:.1} turns/s; CPU per turn: Node {:.3} ms, all processes {:.3} ms",
        medians.rate[1], theirs.server, theirs.all
    );
    let ratio = medians.rate[0] / medians.rate[1];
    println!(
        "server vs AI SDK peer: {ratio:.2}x the turns/s (median of rounds' ratios {:.2}x; goal >= {PEER_RATIO_GOAL}x: {}), {:.2}x the CPU per turn of all processes",
        medians.paired_ratio(0, 1),
        verdict(ratio >= PEER_RATIO_GOAL),
        ours.all / theirs.all
    );
    medians.last_statements[0].print_top(turns);
}
