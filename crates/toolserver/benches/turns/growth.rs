//! The growth arm: `GROWTH_TURNS` sequential turns on one conversation,
//! each sending only its new user message (as an AI SDK client of a stored
//! conversation does, with `prepareSendMessagesRequest`; the server keeps
//! the rest), and how a turn's time, CPU and statements grow with the
//! conversation.

use serde_json::{json, Value};
use toolserver_testsupport::bench::ms;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::cpu::{median, CpuUse};
use crate::measure::{turn, turn_with};
use crate::plan::{
    verdict, GROWTH_MESSAGE_BYTES, GROWTH_RATIO_GOAL, GROWTH_TURNS, GROWTH_WINDOW,
    GROWTH_WINDOW_ENDS,
};
use crate::server::Server;
use crate::statements::{settle, Counts, Statements};

/// The scripted model the growth arm's agent runs on.
const MODEL: &str = "bench-growth";

/// What one window of turns measured.
struct Window {
    first: usize,
    last: usize,
    median_ms: f64,
    cpu: CpuUse,
    statements: f64,
}

/// Runs the growth arm on `server` (started with `GROWTH_LIMITS`) with the
/// echo tool `tool` and the scripted `model`, after turns on conversations
/// of their own that start the tool's runner; prints each window of turns
/// and the last window against the first, then the last window's most called
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
        "== growth: {GROWTH_TURNS} sequential turns on one conversation, each sending one new {GROWTH_MESSAGE_BYTES}-byte user message, one tool call each =="
    );
    for _ in 0..20 {
        turn(server, &agent).await;
    }
    let conversation = uuid::Uuid::new_v4().to_string();
    let pid = server.child.id().unwrap();
    let mut windows = Vec::new();
    let mut open = None;
    let mut last_counts = Counts::default();
    for n in 1..=GROWTH_TURNS {
        if GROWTH_WINDOW_ENDS.contains(&(n + GROWTH_WINDOW - 1)) {
            settle().await;
            statements.reset().await;
            open = Some((n, CpuUse::now(pid, &statements.name), Vec::new()));
        }
        let (_, took) = turn_with(server, &agent, &request(&conversation, n)).await;
        if let Some((_, _, times)) = &mut open {
            times.push(took);
        }
        if GROWTH_WINDOW_ENDS.contains(&n) {
            settle().await;
            let cpu_now = CpuUse::now(pid, &statements.name);
            let counts = statements.read().await;
            let (first, before, times) = open.take().unwrap();
            let window = Window {
                first,
                last: n,
                median_ms: median(times.into_iter().map(ms).collect()),
                cpu: cpu_now.per_turn(before, GROWTH_WINDOW),
                statements: counts.per_turn(GROWTH_WINDOW),
            };
            print_window(&window);
            windows.push(window);
            last_counts = counts;
        }
    }
    let (first, last) = (&windows[0], &windows[windows.len() - 1]);
    let ratio = last.median_ms / first.median_ms;
    println!(
        "turns {}-{} vs {}-{}: median turn {ratio:.2}x (goal <= {GROWTH_RATIO_GOAL}x: {}), Postgres CPU {:.2}x, server CPU {:.2}x, statements {:.2}x",
        last.first,
        last.last,
        first.first,
        first.last,
        verdict(ratio <= GROWTH_RATIO_GOAL),
        last.cpu.postgres() / first.cpu.postgres(),
        last.cpu.server / first.cpu.server,
        last.statements / first.statements,
    );
    println!(
        "(server CPU includes its two requests to the model a turn, each a tiny scripted reply)"
    );
    println!("turns {}-{}:", last.first, last.last);
    last_counts.print_top(GROWTH_WINDOW);
}

/// Prints one window's measures.
fn print_window(window: &Window) {
    println!(
        "turns {:>4}-{:<4}  median turn {:>8.3} ms; CPU per turn: server {:.3} ms, runners {:.3} ms, {}; statements per turn {:.2}",
        window.first,
        window.last,
        window.median_ms,
        window.cpu.server,
        window.cpu.runners,
        window.cpu.postgres_text(),
        window.statements
    );
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
