//! The growth arm: `GROWTH_TURNS` sequential turns on one conversation,
//! each sending only its new user message (as an AI SDK client of a stored
//! conversation does, with `prepareSendMessagesRequest`; the server keeps
//! the rest), and how a turn's time, CPU and statements grow with the
//! conversation.
//!
//! A window's figures are its turns': the server's timed loops are slowed
//! (`GROWTH_SERVER`), and what it still does with no turn running, measured
//! for `GROWTH_IDLE` first, is subtracted by the window's length. The
//! server's CPU is also shown less what it spent building model requests
//! (its `toolserver_model_request_cpu_seconds`), which must grow: every
//! pass sends the model the whole conversation.

use std::time::Instant;

use serde_json::{json, Value};
use toolserver_testsupport::bench::ms;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::cpu::{median, CpuUse};
use crate::measure::{turn, turn_with};
use crate::plan::{
    verdict, GROWTH_IDLE, GROWTH_MESSAGE_BYTES, GROWTH_RATIO_GOAL, GROWTH_ROUNDS, GROWTH_TURNS,
    GROWTH_WINDOW, GROWTH_WINDOW_ENDS,
};
use crate::server::Server;
use crate::statements::{settle, Counts, Statements};

/// The scripted model the growth arm's agent runs on.
const MODEL: &str = "bench-growth";

/// What the server does with no turn running, per second.
struct Idle {
    cpu: CpuUse,
    statements: f64,
}

/// A reading at one end of a window: CPU so far, the server's model
/// request CPU so far (seconds), and when.
struct Reading {
    cpu: CpuUse,
    model_request: f64,
    at: Instant,
}

/// What one window of turns measured, per turn (milliseconds of CPU), as
/// measured and less the idle server's share.
struct Window {
    first: usize,
    last: usize,
    median_ms: f64,
    measured: CpuUse,
    cpu: CpuUse,
    model_request_ms: f64,
    measured_statements: f64,
    statements: f64,
}

impl Window {
    /// The server's CPU per turn, less its idle share and the model
    /// request's.
    fn server_less_model_request(&self) -> f64 {
        self.cpu.server - self.model_request_ms
    }
}

/// Runs the growth arm on `server` (started with `GROWTH_SERVER`) with the
/// echo tool `tool` and the scripted `model`, after turns on conversations
/// of their own that start the tool's runner: `GROWTH_ROUNDS` rounds, each
/// on a new conversation, printing the idle server's share, each window of
/// turns and the last window against the first; then the medians of the
/// rounds' ratios against the goal, and the last window's most called
/// statements.
pub(crate) async fn run(
    server: &Server,
    tool: &str,
    model: &ScriptedModel,
    statements: &mut Statements,
) {
    model.respond_with(MODEL, |request, _| reply(request));
    let agent = server
        .create_agent(&model.base_url(), MODEL, json!({ tool: {} }))
        .await;
    println!(
        "== growth: {GROWTH_ROUNDS} rounds of {GROWTH_TURNS} sequential turns on one conversation, each sending one new {GROWTH_MESSAGE_BYTES}-byte user message, one tool call each =="
    );
    for _ in 0..20 {
        turn(server, &agent).await;
    }
    let mut ratios = Vec::new();
    let mut last_counts = Counts::default();
    for round in 1..=GROWTH_ROUNDS {
        println!("round {round}:");
        let idle = idle(server, statements).await;
        let (windows, counts) = conversation(server, &agent, statements, &idle).await;
        ratios.push(Ratios::of(&windows[0], &windows[windows.len() - 1]));
        last_counts = counts;
    }
    Ratios::verdicts(&ratios);
    println!(
        "turns {}-{GROWTH_TURNS} of the last round:",
        GROWTH_TURNS - GROWTH_WINDOW + 1
    );
    last_counts.print_top(GROWTH_WINDOW);
}

/// Runs `GROWTH_TURNS` sequential turns of `agent` on a new conversation,
/// measuring and printing each window; the windows, and the counts of the
/// last window's statements.
async fn conversation(
    server: &Server,
    agent: &str,
    statements: &mut Statements,
    idle: &Idle,
) -> (Vec<Window>, Counts) {
    let conversation = uuid::Uuid::new_v4().to_string();
    let mut windows = Vec::new();
    let mut open = None;
    let mut last_counts = Counts::default();
    for n in 1..=GROWTH_TURNS {
        if GROWTH_WINDOW_ENDS.contains(&(n + GROWTH_WINDOW - 1)) {
            settle().await;
            let model_request = server.model_request_cpu().await;
            statements.reset().await;
            open = Some((n, reading(server, statements, model_request), Vec::new()));
        }
        let (_, took) = turn_with(server, agent, &request(&conversation, n)).await;
        if let Some((_, _, times)) = &mut open {
            times.push(took);
        }
        if GROWTH_WINDOW_ENDS.contains(&n) {
            settle().await;
            let cpu = CpuUse::now(server.child.id().unwrap(), &statements.name);
            let at = Instant::now();
            let counts = statements.read().await;
            let model_request = server.model_request_cpu().await;
            let (first, before, times) = open.take().unwrap();
            let after = Reading {
                cpu,
                model_request,
                at,
            };
            let window = window(first, n, &before, &after, idle, &counts, times);
            print_window(&window);
            windows.push(window);
            last_counts = counts;
        }
    }
    (windows, last_counts)
}

/// Measures the server with no turn running for `GROWTH_IDLE`.
async fn idle(server: &Server, statements: &mut Statements) -> Idle {
    settle().await;
    statements.reset().await;
    let before = reading(server, statements, 0.0);
    tokio::time::sleep(GROWTH_IDLE).await;
    let cpu = CpuUse::now(server.child.id().unwrap(), &statements.name);
    let seconds = before.at.elapsed().as_secs_f64();
    let counts = statements.read().await;
    let idle = Idle {
        cpu: cpu.minus(before.cpu).times(1.0 / seconds),
        statements: counts.calls as f64 / seconds,
    };
    println!(
        "idle server, per second: CPU server {:.3} ms, {}; statements {:.2}",
        idle.cpu.server * 1000.0,
        idle.cpu.times(1000.0).postgres_text(),
        idle.statements
    );
    idle
}

/// A reading of the server now, its model request CPU so far being
/// `model_request`.
fn reading(server: &Server, statements: &Statements, model_request: f64) -> Reading {
    Reading {
        cpu: CpuUse::now(server.child.id().unwrap(), &statements.name),
        model_request,
        at: Instant::now(),
    }
}

/// The window of turns `first` to `last`, read `before` and `after`.
fn window(
    first: usize,
    last: usize,
    before: &Reading,
    after: &Reading,
    idle: &Idle,
    counts: &Counts,
    times: Vec<std::time::Duration>,
) -> Window {
    let seconds = after.at.duration_since(before.at).as_secs_f64();
    let idle_share = idle.cpu.times(seconds);
    Window {
        first,
        last,
        median_ms: median(times.into_iter().map(ms).collect()),
        measured: after.cpu.per_turn(before.cpu, GROWTH_WINDOW),
        cpu: after
            .cpu
            .minus(idle_share)
            .per_turn(before.cpu, GROWTH_WINDOW),
        model_request_ms: (after.model_request - before.model_request) * 1000.0
            / GROWTH_WINDOW as f64,
        measured_statements: counts.per_turn(GROWTH_WINDOW),
        statements: (counts.calls as f64 - idle.statements * seconds) / GROWTH_WINDOW as f64,
    }
}

/// Prints one window's measures.
fn print_window(window: &Window) {
    println!(
        "turns {:>4}-{:<4}  median turn {:>8.3} ms; per turn, less the idle share: server {:.3} ms (of which model requests {:.3}), runners {:.3} ms, {}; statements {:.2} (as measured: server {:.3} ms, Postgres {:.3} ms, statements {:.2})",
        window.first,
        window.last,
        window.median_ms,
        window.cpu.server,
        window.model_request_ms,
        window.cpu.runners,
        window.cpu.postgres_text(),
        window.statements,
        window.measured.server,
        window.measured.postgres(),
        window.measured_statements,
    );
}

/// One round's last window over its first, in the goals' two measures.
struct Ratios {
    postgres: f64,
    server: f64,
}

impl Ratios {
    /// The `last` window over the `first`, printed with the other measures'
    /// ratios.
    fn of(first: &Window, last: &Window) -> Self {
        let ratios = Self {
            postgres: last.cpu.postgres() / first.cpu.postgres(),
            server: last.server_less_model_request() / first.server_less_model_request(),
        };
        println!(
            "turns {}-{} vs {}-{}: Postgres CPU {:.2}x, server CPU less model requests {:.2}x; median turn {:.2}x, server CPU {:.2}x, model requests {:.2}x, statements {:.2}x",
            last.first,
            last.last,
            first.first,
            first.last,
            ratios.postgres,
            ratios.server,
            last.median_ms / first.median_ms,
            last.cpu.server / first.cpu.server,
            last.model_request_ms / first.model_request_ms,
            last.statements / first.statements,
        );
        ratios
    }

    /// Prints the medians of the rounds' `ratios` against the goal: one
    /// window of ten turns is noisy, the median of a few rounds' is not.
    fn verdicts(ratios: &[Self]) {
        let postgres = median(ratios.iter().map(|r| r.postgres).collect());
        let server = median(ratios.iter().map(|r| r.server).collect());
        println!(
            "growth, median of {} rounds: Postgres CPU {postgres:.2}x (goal <= {GROWTH_RATIO_GOAL}x: {}), server CPU less model requests {server:.2}x (goal <= {GROWTH_RATIO_GOAL}x: {})",
            ratios.len(),
            verdict(postgres <= GROWTH_RATIO_GOAL),
            verdict(server <= GROWTH_RATIO_GOAL),
        );
    }
}

/// Turn `n`'s chat request on `conversation`: only its new user message.
fn request(conversation: &str, n: usize) -> Value {
    let prefix = format!("turn {n}: ");
    let filler = "the conversation grows by one message a turn. ".repeat(GROWTH_MESSAGE_BYTES / 40);
    let text = format!("{prefix}{filler}")[..GROWTH_MESSAGE_BYTES].to_owned();
    json!({
        "id": conversation,
        "messages": [{"id": format!("u{n}"), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    })
}

/// The model's reply to `request` (OpenAI chat completions): a call of the
/// echo tool on a turn's first pass (its id unique in the conversation), the
/// answer on its second.
fn reply(request: &Value) -> Reply {
    let messages = request["messages"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    let answered = messages.last().is_some_and(|m| m["role"] == "tool");
    if answered {
        Reply::text("done")
    } else {
        Reply::tool_call(&format!("c{users}"), "echo", json!({"n": users}))
    }
}
