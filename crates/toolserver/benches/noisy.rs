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
//! `TOOLSERVER_BIN=/path` runs another build of the server (e.g. an older
//! one, for a before/after comparison). `TOOLSERVER_RUNNER_MAX_LIVE` is
//! passed on to the server and is the cap the live runners are held to (32
//! when unset). Needs `DATABASE_URL` (a server where it may create a
//! scratch database).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use reqwest::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Response, Url};
use serde_json::{json, Value};
use toolserver_testsupport::bench::{summary, ScratchDatabase};
use toolserver_testsupport::http::{free_port, hs256_token, post_json, wait_ready};
use toolserver_testsupport::server_env::inherited_settings;
use toolserver_testsupport::{Reply, ScriptedModel};

const SECRET: &str = "bench-secret";
/// A's tools, each a runner of its own.
const NOISY_TOOLS: usize = 40;
/// A's concurrent callers in the calls flood.
const CALL_FLOODERS: usize = 200;
/// A's concurrent turns in the turns flood.
const TURN_FLOODERS: usize = 500;
/// B's requests before any measuring.
const WARM_UP: usize = 30;
/// How long B measures alone, at most …
const ALONE: Duration = Duration::from_secs(10);
/// … or this many answers, whichever comes first.
const ALONE_MAX: usize = 2000;
/// How long A floods before B starts measuring.
const RAMP: Duration = Duration::from_secs(1);
/// How long B measures during A's flood (which then stops).
const DURING: Duration = Duration::from_secs(20);
/// How often the server's process tree is read during the calls flood.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Longest wait for the server's processes to go quiet after a flood.
const SETTLE_MAX: Duration = Duration::from_secs(30);
/// The runner cap when `TOOLSERVER_RUNNER_MAX_LIVE` is unset.
const DEFAULT_MAX_LIVE: usize = 32;
/// Words of A's slow model's reply, one chunk each, and the wait between
/// chunks: with the role, finish and usage chunks, about 2 s a pass.
const SLOW_WORDS: usize = 8;
const SLOW_CHUNK_DELAY: Duration = Duration::from_millis(200);
const ECHO: &str = "export default { execute(ctx, input) { return { echo: input }; } };";
/// Spins the CPU for 200 ms (wall clock), then answers.
const SPIN: &str = "export default { execute() { const end = Date.now() + 200; while (Date.now() < end) {} return { spun: 200 }; } };";
/// Longest wait of one of B's requests (a hung one counts as unanswered).
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);
const CALL_BODY: &str = r#"{"input":{"n":1}}"#;

/// The server under test, its output (JSON log lines) in `log`.
struct Server {
    base: String,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Server {
    async fn start(binary: &Path, database_url: &str, data_dir: &Path, max_live: usize) -> Self {
        let port = free_port();
        let log = data_dir.join("server.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let mut command = tokio::process::Command::new(binary);
        for name in inherited_settings() {
            command.env_remove(name);
        }
        let child = command
            .arg("serve")
            .env("DATABASE_URL", database_url)
            .env("TOOLSERVER_BIND", format!("127.0.0.1:{port}"))
            .env("TOOLSERVER_METRICS_BIND", "127.0.0.1:0")
            .env("TOOLSERVER_DATA_DIR", data_dir)
            .env("TOOLSERVER_JWT_SECRET", SECRET)
            .env("TOOLSERVER_SECRETS_KEY", "11".repeat(32))
            .env("TOOLSERVER_OUTBOUND_ALLOW_PRIVATE", "true")
            .env("TOOLSERVER_RUNNER_MAX_LIVE", max_live.to_string())
            // Rates high enough never to slow B's loop: what stops A must be
            // the concurrency limits.
            .env("TOOLSERVER_ACCOUNT_CALLS_PER_MINUTE", "200000")
            .env("TOOLSERVER_ACCOUNT_CALL_BURST", "5000")
            .env("TOOLSERVER_ACCOUNT_TURNS_PER_MINUTE", "200000")
            .env("TOOLSERVER_ACCOUNT_TURN_BURST", "5000")
            .env("TOOLSERVER_LOG_FORMAT", "json")
            .env("RUST_LOG", "warn")
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&Client::new(), &base).await;
        Self { base, child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Prints how many warnings and errors the server logged, and the most
    /// frequent of them.
    fn print_log_summary(&self) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut counts: HashMap<(String, String), u64> = HashMap::new();
        for line in text.lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let level = entry["level"].as_str().unwrap_or("?").to_owned();
            let fields = &entry["fields"];
            let mut message = fields["message"].as_str().unwrap_or("?").to_owned();
            for detail in ["status", "cause", "error"] {
                if let Some(value) = fields.get(detail) {
                    message.push_str(&format!(" {detail}={value}"));
                }
            }
            let message: String = message.chars().take(200).collect();
            *counts.entry((level, message)).or_default() += 1;
        }
        let by_level = |level: &str| -> u64 {
            counts
                .iter()
                .filter(|((of, _), _)| of == level)
                .map(|(_, n)| n)
                .sum()
        };
        println!(
            "server log: {} warnings, {} errors",
            by_level("WARN"),
            by_level("ERROR")
        );
        let mut frequent: Vec<_> = counts.into_iter().collect();
        frequent.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        for ((level, message), n) in frequent.into_iter().take(6) {
            println!("  {n:>7} x {level} {message}");
        }
    }
}

/// The path of the server binary: `TOOLSERVER_BIN`, else this build's.
fn server_binary() -> PathBuf {
    std::env::var_os("TOOLSERVER_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_toolserver")),
        PathBuf::from,
    )
}

/// One account's way in: its token, ready as a header.
#[derive(Clone)]
struct Tenant {
    token: String,
    auth: HeaderValue,
}

impl Tenant {
    fn new(account: &str) -> Self {
        let token = hs256_token(SECRET, account);
        let auth = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        Self { token, auth }
    }

    /// A JSON POST of `body` to `url` with this account's token.
    fn post(
        &self,
        client: &Client,
        url: &Url,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::RequestBuilder {
        client
            .post(url.clone())
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
    }
}

/// Uploads tool `name` running `source` for `tenant`; its id.
async fn upload(client: &Client, base: &str, tenant: &Tenant, name: &str, source: &str) -> String {
    let answer = post_json(
        client,
        &format!("{base}/accounts/me/tools"),
        &tenant.token,
        json!({
            "name": name, "description": name, "inputSchema": {"type": "object"},
            "bundle": base64::engine::general_purpose::STANDARD.encode(source),
        }),
    )
    .await;
    answer["toolId"].as_str().unwrap().to_owned()
}

/// Creates an agent of `tenant` talking to `model` as `model_id`, with no
/// tools; its id.
async fn create_agent(
    client: &Client,
    base: &str,
    tenant: &Tenant,
    model: &ScriptedModel,
    model_id: &str,
) -> String {
    let answer = post_json(
        client,
        &format!("{base}/agents"),
        &tenant.token,
        json!({"name": model_id, "config": {
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"baseUrl": model.base_url(), "apiKey": "bench"}},
            "tools": {},
            "onDisconnect": "cancel",
        }}),
    )
    .await;
    answer["agentId"].as_str().unwrap().to_owned()
}

/// Answers to one account's requests, counted as they come.
struct Tally {
    /// Answers by HTTP status (index), 2xx included.
    by_status: Vec<AtomicU64>,
    /// Answers by status that carried no `Retry-After`.
    without_retry_after: Vec<AtomicU64>,
    /// 2xx answers whose call failed (a tool error) or whose turn did not
    /// finish.
    failed_results: AtomicU64,
    /// Requests that got no answer (connection or body errors).
    unanswered: AtomicU64,
    /// The first body of each kind of failure, for the report.
    examples: Mutex<Vec<(String, String)>>,
}

impl Tally {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            by_status: (0..600).map(|_| AtomicU64::new(0)).collect(),
            without_retry_after: (0..600).map(|_| AtomicU64::new(0)).collect(),
            failed_results: AtomicU64::new(0),
            unanswered: AtomicU64::new(0),
            examples: Mutex::new(Vec::new()),
        })
    }

    /// Counts one answer; `failed` for a 2xx whose call or turn failed,
    /// `body` to keep as an example of a failure.
    fn answer(&self, status: u16, retry_after: bool, failed: bool, body: &[u8]) {
        let at = usize::from(status).min(599);
        self.by_status[at].fetch_add(1, Ordering::Relaxed);
        if !retry_after {
            self.without_retry_after[at].fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            self.failed_results.fetch_add(1, Ordering::Relaxed);
        }
        if failed || !(200..300).contains(&status) {
            let kind = if failed {
                format!("{status} (failed)")
            } else {
                status.to_string()
            };
            self.example(kind, body);
        }
    }

    fn unanswered(&self, error: &reqwest::Error) {
        self.unanswered.fetch_add(1, Ordering::Relaxed);
        self.example("no answer".to_owned(), error.to_string().as_bytes());
    }

    fn example(&self, kind: String, body: &[u8]) {
        let mut examples = self.examples.lock().unwrap();
        if !examples.iter().any(|(of, _)| *of == kind) {
            let text: String = String::from_utf8_lossy(body).chars().take(240).collect();
            examples.push((kind, text));
        }
    }

    fn count(&self, status: usize) -> u64 {
        self.by_status[status].load(Ordering::Relaxed)
    }

    fn count_without_retry_after(&self, status: usize) -> u64 {
        self.without_retry_after[status].load(Ordering::Relaxed)
    }

    fn accepted(&self) -> u64 {
        (200..300).map(|s| self.count(s)).sum()
    }

    /// Non-2xx answers.
    fn refused(&self) -> u64 {
        (0..600)
            .filter(|s| !(200..300).contains(s))
            .map(|s| self.count(s))
            .sum()
    }

    /// Non-2xx answers other than a 429 or 503 with `Retry-After`.
    fn improper_refusals(&self) -> u64 {
        let proper: u64 = [429, 503]
            .iter()
            .map(|&s| self.count(s) - self.count_without_retry_after(s))
            .sum();
        self.refused() - proper
    }

    /// 5xx answers other than a 503 with `Retry-After`.
    fn server_errors(&self) -> u64 {
        let total: u64 = (500..600).map(|s| self.count(s)).sum();
        total - (self.count(503) - self.count_without_retry_after(503))
    }

    /// Prints the counts of `who`'s answers.
    fn print(&self, who: &str, seconds: f64) {
        let accepted = self.accepted();
        println!(
            "{who}: {accepted} accepted (2xx, {:.1}/s; {} of them failed), {} refused (non-2xx), {} without an answer",
            accepted as f64 / seconds,
            self.failed_results.load(Ordering::Relaxed),
            self.refused(),
            self.unanswered.load(Ordering::Relaxed),
        );
        let refusals: Vec<String> = (0..600)
            .filter(|s| !(200..300).contains(s) && self.count(*s) > 0)
            .map(|s| {
                format!(
                    "{s}: {} ({} without Retry-After)",
                    self.count(s),
                    self.count_without_retry_after(s)
                )
            })
            .collect();
        if !refusals.is_empty() {
            println!("{who}: refusals by status: {}", refusals.join(", "));
        }
        let without_retry_after: u64 = (0..600)
            .filter(|s| !(200..300).contains(s))
            .map(|s| self.count_without_retry_after(s))
            .sum();
        println!(
            "{who}: refusals without Retry-After: {without_retry_after}; refusals other than 429/503 with Retry-After: {}; 5xx other than 503 with Retry-After: {}",
            self.improper_refusals(),
            self.server_errors()
        );
        for (kind, body) in self.examples.lock().unwrap().iter() {
            println!("{who}: e.g. {kind}: {body}");
        }
    }
}

/// The status of `response` and whether it carries `Retry-After`.
fn status_of(response: &Response) -> (u16, bool) {
    (
        response.status().as_u16(),
        response.headers().contains_key(RETRY_AFTER),
    )
}

/// Whether a call's JSON answer reports a tool error.
fn call_failed(body: &[u8]) -> bool {
    body.windows(8).any(|w| w == b"\"error\":")
}

/// One call; its latency when it was answered 2xx with the tool's output.
async fn call(client: &Client, tenant: &Tenant, url: &Url, tally: &Tally) -> Option<Duration> {
    let started = Instant::now();
    let response = match tenant.post(client, url, CALL_BODY).send().await {
        Ok(response) => response,
        Err(err) => {
            tally.unanswered(&err);
            return None;
        }
    };
    let (status, retry_after) = status_of(&response);
    match response.bytes().await {
        Ok(body) => {
            let ok = (200..300).contains(&status);
            let failed = ok && call_failed(&body);
            tally.answer(status, retry_after, failed, &body);
            (ok && !failed).then(|| started.elapsed())
        }
        Err(err) => {
            tally.unanswered(&err);
            None
        }
    }
}

/// A request body opening a new conversation.
fn turn_body() -> String {
    format!(
        r#"{{"id":"{}","messages":[{{"id":"u1","role":"user","parts":[{{"type":"text","text":"go"}}]}}],"trigger":"submit-message"}}"#,
        uuid::Uuid::new_v4()
    )
}

/// One turn; its time to first byte and whole time when it was answered
/// 2xx and finished.
async fn turn(
    client: &Client,
    tenant: &Tenant,
    url: &Url,
    tally: &Tally,
) -> Option<(Duration, Duration)> {
    let started = Instant::now();
    let response = match tenant.post(client, url, turn_body()).send().await {
        Ok(response) => response,
        Err(err) => {
            tally.unanswered(&err);
            return None;
        }
    };
    let (status, retry_after) = status_of(&response);
    if !(200..300).contains(&status) {
        let body = response.bytes().await.unwrap_or_default();
        tally.answer(status, retry_after, false, &body);
        return None;
    }
    let mut stream = response.bytes_stream();
    let mut first = None;
    // The stream's end, where the finish chunk is.
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => {
                first.get_or_insert_with(|| started.elapsed());
                tail.extend_from_slice(&chunk);
                if tail.len() > 8192 {
                    tail.drain(..tail.len() - 4096);
                }
            }
            Err(err) => {
                tally.answer(status, retry_after, true, err.to_string().as_bytes());
                return None;
            }
        }
    }
    let finished = tail.windows(21).any(|w| w == b"\"finishReason\":\"stop\"");
    tally.answer(status, retry_after, !finished, &tail);
    Some((first?, started.elapsed())).filter(|_| finished)
}

/// B's side of the generator: its requests and its model run on a runtime
/// of their own (one thread), so A's tasks in this process never queue
/// ahead of them.
struct QuietSide {
    runtime: tokio::runtime::Runtime,
    client: Client,
    tenant: Tenant,
}

impl QuietSide {
    fn new(tenant: Tenant) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = Client::builder().timeout(QUIET_TIMEOUT).build().unwrap();
        Self {
            runtime,
            client,
            tenant,
        }
    }

    /// Runs `work` on B's runtime; its result.
    async fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        self.runtime.spawn(work).await.unwrap()
    }

    /// A scripted model served from B's runtime.
    async fn model(&self) -> ScriptedModel {
        self.run(ScriptedModel::start()).await
    }

    /// Sequential calls for `window` or until `max` succeeded: the latency
    /// of each success.
    async fn calls(
        &self,
        url: &Url,
        tally: &Arc<Tally>,
        window: Duration,
        max: usize,
    ) -> Vec<Duration> {
        let (client, tenant, url, tally) = (
            self.client.clone(),
            self.tenant.clone(),
            url.clone(),
            tally.clone(),
        );
        self.run(async move {
            let until = Instant::now() + window;
            let mut samples = Vec::new();
            while Instant::now() < until && samples.len() < max {
                samples.extend(call(&client, &tenant, &url, &tally).await);
            }
            samples
        })
        .await
    }

    /// Sequential turns for `window` or until `max` finished: time to first
    /// byte and whole time of each.
    async fn turns(
        &self,
        url: &Url,
        tally: &Arc<Tally>,
        window: Duration,
        max: usize,
    ) -> Vec<(Duration, Duration)> {
        let (client, tenant, url, tally) = (
            self.client.clone(),
            self.tenant.clone(),
            url.clone(),
            tally.clone(),
        );
        self.run(async move {
            let until = Instant::now() + window;
            let mut samples = Vec::new();
            while Instant::now() < until && samples.len() < max {
                samples.extend(turn(&client, &tenant, &url, &tally).await);
            }
            samples
        })
        .await
    }

    /// Stops B's runtime (from inside another one).
    fn stop(self) {
        self.runtime.shutdown_background();
    }
}

/// A's hostile callers: each calls A's tools round-robin (from its own
/// starting point) and, whatever the answer, calls again at once. They run
/// until aborted.
fn flood_calls(
    client: &Client,
    tenant: &Tenant,
    urls: &Arc<[Url]>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CALL_FLOODERS)
        .map(|caller| {
            let (client, tenant, urls, tally) =
                (client.clone(), tenant.clone(), urls.clone(), tally.clone());
            tokio::spawn(async move {
                for next in caller.. {
                    call(&client, &tenant, &urls[next % urls.len()], &tally).await;
                }
            })
        })
        .collect()
}

/// A's hostile turns: each caller opens a turn and, whatever the answer,
/// opens the next at once. They run until aborted.
fn flood_turns(
    client: &Client,
    tenant: &Tenant,
    url: &Url,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..TURN_FLOODERS)
        .map(|_| {
            let (client, tenant, url, tally) =
                (client.clone(), tenant.clone(), url.clone(), tally.clone());
            tokio::spawn(async move {
                loop {
                    turn(&client, &tenant, &url, &tally).await;
                }
            })
        })
        .collect()
}

/// What /proc shows of the server's process tree at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct TreeSample {
    /// Direct children of the server that are `bwrap` or `node`: one per
    /// runner (under bubblewrap, node runs below its bwrap).
    runners: usize,
    /// Resident memory of every process below the server, in MiB.
    runner_rss_mib: f64,
    /// Resident memory of the server itself, in MiB.
    server_rss_mib: f64,
    /// CPU time (user and system) of the server and every process below
    /// it, in seconds.
    cpu_seconds: f64,
}

/// Resident memory of `pid` in MiB (0 when it is gone).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kib| kib.split_whitespace().next())
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Reads the tree of processes below `server` from /proc (the clock ticks
/// are the kernel's USER_HZ, 100).
fn sample_tree(server: u32) -> TreeSample {
    let mut children: HashMap<u32, Vec<(u32, String)>> = HashMap::new();
    let mut ticks: HashMap<u32, f64> = HashMap::new();
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
        let comm = head.split_once('(').map_or("", |(_, comm)| comm).to_owned();
        let fields: Vec<&str> = tail.split_whitespace().collect();
        let (Some(Ok(parent)), Some(Ok(user)), Some(Ok(system))) = (
            fields.get(1).map(|f| f.parse::<u32>()),
            fields.get(11).map(|f| f.parse::<f64>()),
            fields.get(12).map(|f| f.parse::<f64>()),
        ) else {
            continue;
        };
        children.entry(parent).or_default().push((pid, comm));
        ticks.insert(pid, user + system);
    }
    let runners = children.get(&server).map_or(0, |direct| {
        direct
            .iter()
            .filter(|(_, comm)| comm == "bwrap" || comm == "node")
            .count()
    });
    let mut sample = TreeSample {
        runners,
        server_rss_mib: rss_mib(server),
        cpu_seconds: ticks.get(&server).copied().unwrap_or(0.0) / 100.0,
        ..TreeSample::default()
    };
    let mut below: Vec<u32> = children
        .get(&server)
        .map(|direct| direct.iter().map(|(pid, _)| *pid).collect())
        .unwrap_or_default();
    while let Some(pid) = below.pop() {
        sample.runner_rss_mib += rss_mib(pid);
        sample.cpu_seconds += ticks.get(&pid).copied().unwrap_or(0.0) / 100.0;
        below.extend(children.get(&pid).into_iter().flatten().map(|(p, _)| *p));
    }
    sample
}

/// Reads the server's process tree every `SAMPLE_EVERY` on a thread of its
/// own until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<TreeSample>>,
}

impl Sampler {
    fn start(server: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                samples.push(sample_tree(server));
                std::thread::sleep(SAMPLE_EVERY);
            }
            samples.push(sample_tree(server));
            samples
        });
        Self { stop, thread }
    }

    /// Stops sampling; every sample, the last taken now.
    fn finish(self) -> Vec<TreeSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Waits (at most `SETTLE_MAX`) until the server and its runners use
/// less than a tenth of a core, so one phase's leftovers do not weigh on
/// the next; prints how long it took.
async fn settle(server: u32) {
    let started = Instant::now();
    let mut before = sample_tree(server).cpu_seconds;
    while started.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = sample_tree(server).cpu_seconds;
        if now - before < 0.1 {
            break;
        }
        before = now;
    }
    println!(
        "(the server went quiet {:.1} s after the flood)",
        started.elapsed().as_secs_f64()
    );
}

/// Prints the summary of `samples` under `name`; (p50, p99), `None` when
/// there are none.
fn quantiles(name: &str, samples: Vec<Duration>) -> Option<(Duration, Duration)> {
    if samples.is_empty() {
        println!("{name:<40} n=0 (no successful request)");
        return None;
    }
    Some(summary(name, samples))
}

/// `during` over `alone`, `None` when either is missing.
fn ratio(alone: Option<Duration>, during: Option<Duration>) -> Option<f64> {
    Some(during?.as_secs_f64() / alone?.as_secs_f64())
}

/// Prints a goal and whether it was met.
fn goal(name: &str, measured: &str, met: bool) {
    let mark = if met { "PASS" } else { "FAIL" };
    println!("goal: {name:<58} {measured:<26} {mark}");
}

/// Prints a latency goal: `during` at most `limit` times `alone`.
fn ratio_goal(name: &str, ratio: Option<f64>, limit: f64) {
    match ratio {
        Some(r) => goal(name, &format!("{r:.2}x"), r <= limit),
        None => goal(name, "not measured", false),
    }
}

/// Prints the goals every flood shares: B answered, A refused properly,
/// no 5xx.
fn answer_goals(quiet: &[&Tally], noisy: &Tally) {
    let quiet_failures: u64 = quiet
        .iter()
        .map(|t| {
            t.refused()
                + t.unanswered.load(Ordering::Relaxed)
                + t.failed_results.load(Ordering::Relaxed)
        })
        .sum();
    goal(
        "B: every request answered 2xx and succeeded",
        &format!("{quiet_failures} did not"),
        quiet_failures == 0,
    );
    let improper = noisy.improper_refusals();
    goal(
        "A: every refusal a 429/503 with Retry-After",
        &format!("{improper} were not"),
        improper == 0,
    );
    let server_errors: u64 =
        noisy.server_errors() + quiet.iter().map(|t| t.server_errors()).sum::<u64>();
    goal(
        "no 5xx (other than 503 with Retry-After)",
        &format!("{server_errors} 5xx"),
        server_errors == 0,
    );
}

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

    calls(&client, &server, &quiet, &noisy, max_live).await;
    turns(&client, &server, &quiet, &noisy).await;

    quiet.stop();
    server.print_log_summary();
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    drop(server);
    tokio::time::sleep(Duration::from_millis(200)).await;
    database.drop_now().await;
}
