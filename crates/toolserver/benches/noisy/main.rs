//! Noisy-neighbour load generator (`make bench`): how much one account's
//! flood slows another account down, against the real server binary on
//! loopback (a scratch database, filesystem bundles, local runners under
//! the binary's default isolation). Account B is the quiet one, A the noisy
//! one:
//!   - calls: B calls an echo tool in a sequential loop, alone and then
//!     while A's 200 callers call its 40 tools (each spins the CPU for
//!     200 ms); B's p50/p99 both times, A's answers by status, refusals
//!     without `Retry-After`, 5xx, and the live runners (the server's
//!     children) and their memory, read from /proc;
//!   - turns: B runs one turn at a time against its own fast model, alone
//!     and while A keeps 500 turns going against its own slow model (each
//!     pass streams for about 2 s); B's time to first byte both times and
//!     A's answers.
//!
//! A is hostile: on a refusal (429/503) its callers ignore `Retry-After`
//! and go again at once. B's requests and B's model run on a runtime of
//! their own (one thread), so A's tasks in this process never queue ahead
//! of them. Goals are printed as PASS/FAIL lines; none stops the run.
//!
//! `NOISY_PARTS=turns` (or `calls`) runs one part only (both when unset).
//! `TOOLSERVER_BIN=/path` runs another build of the server (e.g. an older
//! one, for a before/after comparison). `TOOLSERVER_RUNNER_MAX_LIVE` is
//! passed on to the server and is the cap the live runners are held to (32
//! when unset). Needs `DATABASE_URL` (a server where it may create a
//! scratch database).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod load;
mod plan;
mod report;
mod sampling;
mod server;
mod tally;

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Client, Url};
use toolserver_testsupport::bench::ScratchDatabase;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::load::{flood_calls, flood_turns, QuietSide};
use crate::plan::{
    ALONE, ALONE_MAX, CALL_FLOODERS, DEFAULT_MAX_LIVE, DURING, ECHO, NOISY_TOOLS, RAMP,
    SLOW_CHUNK_DELAY, SLOW_WORDS, SPIN, TURN_FLOODERS, WARM_UP,
};
use crate::report::{answer_goals, goal, quantiles, ratio, ratio_goal};
use crate::sampling::{sample_tree, settle, Sampler};
use crate::server::{create_agent, server_binary, upload, Server, Tenant};
use crate::tally::Tally;

/// Part 1: B's echo calls alone and during A's flood of CPU-heavy calls.
async fn calls(
    client: &Client,
    server: &Server,
    quiet: &QuietSide,
    noisy: &Tenant,
    max_live: usize,
) {
    println!(
        "== calls: B calls an echo tool one at a time; A floods its {NOISY_TOOLS} tools (200 ms of CPU each) with {CALL_FLOODERS} hostile callers =="
    );
    let base = &server.base;
    let invoke = |id: &str| Url::parse(&format!("{base}/accounts/me/tools/{id}/invoke")).unwrap();
    let echo = invoke(&upload(client, base, &quiet.tenant, "echo", ECHO).await);
    let mut spinners = Vec::new();
    for n in 0..NOISY_TOOLS {
        spinners.push(invoke(
            &upload(client, base, noisy, &format!("spin_{n:02}"), SPIN).await,
        ));
    }
    let spinners: Arc<[Url]> = spinners.into();
    quiet.calls(&echo, &Tally::new(), ALONE, WARM_UP).await;

    let alone_tally = Tally::new();
    let alone = quiet.calls(&echo, &alone_tally, ALONE, ALONE_MAX).await;
    let (alone_p50, alone_p99) = quantiles("B call, alone", alone).unzip();
    let idle = sample_tree(server.pid());

    let noisy_tally = Tally::new();
    let sampler = Sampler::start(server.pid());
    let flood_started = Instant::now();
    let flooders = flood_calls(client, noisy, &spinners, &noisy_tally);
    tokio::time::sleep(RAMP).await;
    let during_tally = Tally::new();
    let during = quiet.calls(&echo, &during_tally, DURING, usize::MAX).await;
    let samples = sampler.finish();
    for flooder in &flooders {
        flooder.abort();
    }
    let flood_seconds = flood_started.elapsed().as_secs_f64();
    let (during_p50, during_p99) = quantiles("B call, during A's flood", during).unzip();
    let (p50_ratio, p99_ratio) = (ratio(alone_p50, during_p50), ratio(alone_p99, during_p99));
    println!(
        "B call during/alone: p50 {}, p99 {}",
        p50_ratio.map_or("-".to_owned(), |r| format!("{r:.2}x")),
        p99_ratio.map_or("-".to_owned(), |r| format!("{r:.2}x"))
    );
    alone_tally.print("B alone", ALONE.as_secs_f64());
    during_tally.print("B during", DURING.as_secs_f64());
    noisy_tally.print("A", flood_seconds);

    let last = samples.last().copied().unwrap_or_default();
    let most = samples.iter().map(|s| s.runners).max().unwrap_or(0);
    let most_rss = samples.iter().map(|s| s.runner_rss_mib).fold(0.0, f64::max);
    let server_rss = samples.iter().map(|s| s.server_rss_mib).fold(0.0, f64::max);
    println!(
        "live runners (cap {max_live}): {} before the flood ({:.0} MiB), at most {most} during it, {} at its end; their total RSS at most {most_rss:.0} MiB, {:.0} MiB at the end; server RSS at most {server_rss:.0} MiB ({} samples)",
        idle.runners, idle.runner_rss_mib, last.runners, last.runner_rss_mib, samples.len()
    );
    ratio_goal("B call p99 during <= 3x alone", p99_ratio, 3.0);
    ratio_goal("B call p50 during <= 2x alone", p50_ratio, 2.0);
    answer_goals(&[&alone_tally, &during_tally], &noisy_tally);
    goal(
        &format!("live runners <= the cap ({max_live})"),
        &format!("at most {most}"),
        most <= max_live,
    );
    settle(server.pid()).await;
}

/// Part 2: B's turns alone and during A's flood of slow turns.
async fn turns(client: &Client, server: &Server, quiet: &QuietSide, noisy: &Tenant) {
    println!(
        "== turns: B runs one turn at a time against a fast model; A keeps {TURN_FLOODERS} hostile turns going against a slow one (about 2 s a pass) =="
    );
    let fast = quiet.model().await;
    fast.respond_with("quiet-fast", |_, _| Reply::text("done"));
    let slow = ScriptedModel::start().await;
    let slow_text = "word ".repeat(SLOW_WORDS);
    slow.respond_with("noisy-slow", move |_, _| {
        Reply::text(&slow_text).chunk_delay(SLOW_CHUNK_DELAY)
    });
    let base = &server.base;
    let chat = |id: &str| Url::parse(&format!("{base}/agents/{id}/chat")).unwrap();
    let quiet_chat = chat(&create_agent(client, base, &quiet.tenant, &fast, "quiet-fast").await);
    let noisy_chat = chat(&create_agent(client, base, noisy, &slow, "noisy-slow").await);
    quiet
        .turns(&quiet_chat, &Tally::new(), ALONE, WARM_UP)
        .await;

    let alone_tally = Tally::new();
    let alone = quiet
        .turns(&quiet_chat, &alone_tally, ALONE, ALONE_MAX)
        .await;
    let (alone_ttfb, alone_whole): (Vec<_>, Vec<_>) = alone.into_iter().unzip();
    let (alone_p50, alone_p99) = quantiles("B turn, alone: first byte", alone_ttfb).unzip();
    quantiles("B turn, alone: whole turn", alone_whole);

    let noisy_tally = Tally::new();
    let flood_started = Instant::now();
    let flooders = flood_turns(client, noisy, &noisy_chat, &noisy_tally);
    tokio::time::sleep(RAMP).await;
    let during_tally = Tally::new();
    let during = quiet
        .turns(&quiet_chat, &during_tally, DURING, usize::MAX)
        .await;
    for flooder in &flooders {
        flooder.abort();
    }
    let flood_seconds = flood_started.elapsed().as_secs_f64();
    let (during_ttfb, during_whole): (Vec<_>, Vec<_>) = during.into_iter().unzip();
    let (during_p50, during_p99) =
        quantiles("B turn, during A's flood: first byte", during_ttfb).unzip();
    quantiles("B turn, during A's flood: whole turn", during_whole);
    let (p50_ratio, p99_ratio) = (ratio(alone_p50, during_p50), ratio(alone_p99, during_p99));
    println!(
        "B turn first byte during/alone: p50 {}, p99 {}",
        p50_ratio.map_or("-".to_owned(), |r| format!("{r:.2}x")),
        p99_ratio.map_or("-".to_owned(), |r| format!("{r:.2}x"))
    );
    alone_tally.print("B alone", ALONE.as_secs_f64());
    during_tally.print("B during", DURING.as_secs_f64());
    noisy_tally.print("A", flood_seconds);
    ratio_goal("B turn first byte p99 during <= 3x alone", p99_ratio, 3.0);
    answer_goals(&[&alone_tally, &during_tally], &noisy_tally);
    settle(server.pid()).await;
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let binary = server_binary();
    let max_live = std::env::var("TOOLSERVER_RUNNER_MAX_LIVE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX_LIVE);
    println!("server binary: {}", binary.display());
    println!("runner cap (TOOLSERVER_RUNNER_MAX_LIVE): {max_live}");
    let started = Instant::now();
    let database = ScratchDatabase::create("noisy").await;
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(&binary, &database.url, data.path(), max_live).await;
    let client = Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .unwrap();
    let quiet = QuietSide::new(Tenant::new("noisy-bench-b"));
    let noisy = Tenant::new("noisy-bench-a");

    let parts = std::env::var("NOISY_PARTS").unwrap_or_else(|_| "calls,turns".to_owned());
    if parts.split(',').any(|part| part == "calls") {
        calls(&client, &server, &quiet, &noisy, max_live).await;
    }
    if parts.split(',').any(|part| part == "turns") {
        turns(&client, &server, &quiet, &noisy).await;
    }

    quiet.stop();
    server.print_log_summary();
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    drop(server);
    tokio::time::sleep(Duration::from_millis(200)).await;
    database.drop_now().await;
}
