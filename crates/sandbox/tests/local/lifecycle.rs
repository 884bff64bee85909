//! Runner lifecycle: reuse, crash recovery, deadlines, idle stop, tenancy,
//! detached calls that outlive their request, and dying with the server.

use std::time::{Duration, Instant};

use serde_json::json;
use toolserver_sandbox::{Executor, Frame};

use crate::support::*;

#[tokio::test]
async fn the_same_key_reuses_one_worker_and_accounts_never_share() {
    let h = Harness::new();
    let a = key("acct_a");
    let b = toolserver_sandbox::ReservationKey::new(
        toolserver_domain::AccountId::parse("acct_b").unwrap(),
        a.tool(),
    );
    let first = h.executor.ensure(&a).await.unwrap();
    assert!(first.started);
    let again = h.executor.ensure(&a).await.unwrap();
    assert!(!again.started);
    assert_eq!(first.name, again.name);
    run(&h.executor, &a, request(inline(ECHO), json!({}))).await;
    run(&h.executor, &b, request(inline(ECHO), json!({}))).await;
    let (pid_a, pid_b) = (
        h.executor.worker_pid(&a).await,
        h.executor.worker_pid(&b).await,
    );
    assert!(pid_a.is_some() && pid_b.is_some());
    assert_ne!(pid_a, pid_b, "two accounts, two runners");
    assert_ne!(h.executor.socket_path(&a), h.executor.socket_path(&b));
}

#[tokio::test]
async fn a_killed_worker_is_replaced_on_the_next_call() {
    let h = Harness::new();
    let key = key("acct");
    run(&h.executor, &key, request(inline(ECHO), json!({}))).await;
    let pid = h.executor.worker_pid(&key).await.unwrap();
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    // SIGKILL lands asynchronously: wait until the worker is gone, so the
    // next call meets a dead worker rather than one that dies mid-call.
    for _ in 0..200 {
        if h.executor.worker_pid(&key).await != Some(pid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_ne!(
        h.executor.worker_pid(&key).await,
        Some(pid),
        "the worker survived SIGKILL"
    );
    let frame = run(
        &h.executor,
        &key,
        request(inline(ECHO), json!({"after": "kill"})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"after": "kill"}));
    let new_pid = h.executor.worker_pid(&key).await.unwrap();
    assert_ne!(new_pid, pid);
}

#[tokio::test]
async fn a_tool_whose_worker_exits_mid_call_runs_exactly_once() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "import { appendFileSync } from 'node:fs';
export default { execute() { appendFileSync('runs', 'ran\\n'); process.exit(3); } };";
    let frame = run(&h.executor, &key, request(inline(tool), json!({}))).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "RunnerCrashed"),
        "{frame:?}"
    );
    let work = h.executor.socket_path(&key).parent().unwrap().join("work");
    let runs = std::fs::read_to_string(work.join("runs")).unwrap();
    assert_eq!(runs.lines().count(), 1, "the body ran {runs:?}");
    let frame = run(&h.executor, &key, request(inline(ECHO), json!({"next": 1}))).await;
    assert_eq!(echo_of(&frame), json!({"next": 1}), "the runner recovers");
}

#[tokio::test]
async fn a_tool_that_never_returns_is_cut_off_at_its_deadline() {
    let h = Harness::new();
    let key = key("acct");
    let waits = "export default { execute() { return new Promise(() => {}); } };";
    let mut req = request(inline(waits), json!({}));
    req.deadline_ms = 300;
    let frame = run(&h.executor, &key, req).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "DeadlineExceeded"),
        "{frame:?}"
    );

    let spins = "export default { execute() { for (;;) {} } };";
    let mut req = request(inline(spins), json!({}));
    req.deadline_ms = 300;
    let started = Instant::now();
    let frame = run(&h.executor, &key, req).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "DeadlineExceeded"),
        "{frame:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "cut off, not left hanging"
    );
    let frame = run(
        &h.executor,
        &key,
        request(inline(ECHO), json!({"alive": true})),
    )
    .await;
    assert_eq!(
        echo_of(&frame),
        json!({"alive": true}),
        "a fresh worker serves the next call"
    );
}

#[tokio::test]
async fn idle_workers_stop_and_start_again_on_the_next_call() {
    let h = Harness::with(|s| s.idle_timeout = Duration::from_millis(200));
    let _reaper = h.executor.spawn_reaper();
    let key = key("acct");
    run(&h.executor, &key, request(inline(ECHO), json!({}))).await;
    let pid = h.executor.worker_pid(&key).await.unwrap();
    let waited = Instant::now();
    while h.executor.worker_pid(&key).await.is_some() {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the idle worker was never stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "process is gone"
    );
    let frame = run(
        &h.executor,
        &key,
        request(inline(ECHO), json!({"back": true})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"back": true}));
    assert!(h.executor.worker_pid(&key).await.is_some());
}

/// Makes the worker it runs in die at its next `/invoke` request, before answering.
const DIES_AT_NEXT_INVOKE: &str = r#"
import { EventEmitter } from 'node:events';
export default {
  execute() {
    const emit = EventEmitter.prototype.emit;
    EventEmitter.prototype.emit = function (event, req, ...rest) {
      if (event === 'request' && req?.url === '/invoke') process.kill(process.pid, 'SIGKILL');
      return emit.call(this, event, req, ...rest);
    };
    return 'armed';
  },
};"#;

#[tokio::test]
async fn a_detached_call_whose_worker_dies_before_answering_is_launched_on_a_fresh_worker() {
    let sink = CallbackSink::start().await;
    let h = Harness::with(|s| s.egress.callback_base = Some(sink.base()));
    let key = key("acct");
    let armed = run(
        &h.executor,
        &key,
        request(inline(DIES_AT_NEXT_INVOKE), json!({})),
    )
    .await;
    assert_eq!(final_value(&armed), json!("armed"));
    let doomed = h.executor.worker_pid(&key).await.unwrap();

    let mut call = request(inline(ECHO), json!({"job": 1}));
    call.async_meta = Some(sink.async_meta("r-1"));
    let frames = collect(h.executor.invoke(&key, call).await.unwrap()).await;
    // Not run in the foreground by the one-shot runner: launched in the background.
    assert_eq!(frames, vec![Frame::Launched]);
    let completion = sink
        .first("/sandbox-jobs/r-1/complete", Duration::from_secs(10))
        .await
        .expect("the completion is posted");
    assert_eq!(completion.token.as_deref(), Some("token-r-1"));
    assert_eq!(completion.body["status"], "completed");
    assert_eq!(completion.body["response"]["echo"], json!({"job": 1}));
    let fresh = h.executor.worker_pid(&key).await.unwrap();
    assert_ne!(fresh, doomed, "launched on a fresh worker");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.posted().len(), 1, "the body ran once");
}

#[tokio::test]
async fn a_detached_call_outliving_the_idle_timeout_keeps_its_worker_and_delivers() {
    let sink = CallbackSink::start().await;
    let h = Harness::with(|s| {
        s.idle_timeout = Duration::from_millis(200);
        s.egress.callback_base = Some(sink.base());
    });
    let _reaper = h.executor.spawn_reaper();
    let key = key("acct");
    let slow = "export default { async execute() { await new Promise((r) => setTimeout(r, 1500)); return { slept: true }; } };";
    let mut call = request(inline(slow), json!({}));
    call.async_meta = Some(sink.async_meta("r-2"));
    let frames = collect(h.executor.invoke(&key, call).await.unwrap()).await;
    assert_eq!(frames, vec![Frame::Launched]);
    let pid = h.executor.worker_pid(&key).await.unwrap();

    let completion = sink
        .first("/sandbox-jobs/r-2/complete", Duration::from_secs(10))
        .await
        .expect("the reaper left the busy worker alone, so the completion came");
    assert_eq!(
        completion.body,
        json!({"status": "completed", "response": {"slept": true}})
    );
    assert_eq!(h.executor.worker_pid(&key).await, Some(pid));
    // Once the call is over, the worker is idle like any other.
    let waited = Instant::now();
    while h.executor.worker_pid(&key).await.is_some() {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the idle worker was never stopped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The processes whose command line mentions `needle`, with their state
/// letter (`Z`: a zombie, dead but not yet reaped).
fn processes_mentioning(needle: &str) -> Vec<(u32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .unwrap_or('Z');
        found.push((pid, state));
    }
    found
}

/// The server of `a_worker_dies_with_its_server_even_when_it_is_sigkilled`:
/// starts a runner under `TOOLSERVER_TEST_ROOT`, says so, and waits to be killed.
#[tokio::test]
#[ignore = "run in a process of its own by a_worker_dies_with_its_server_even_when_it_is_sigkilled"]
async fn server_holding_a_runner() {
    let Ok(root) = std::env::var("TOOLSERVER_TEST_ROOT") else {
        return;
    };
    let mut settings = settings(std::path::Path::new(&root));
    if std::env::var("TOOLSERVER_TEST_ISOLATION").as_deref() == Ok("none") {
        settings.isolation = toolserver_sandbox::IsolationMode::None;
    }
    let executor = toolserver_sandbox::LocalExecutor::new(settings).unwrap();
    executor.ensure(&key("acct")).await.unwrap();
    println!("runner-ready");
    std::future::pending::<()>().await;
}

#[test]
fn a_worker_dies_with_its_server_even_when_it_is_sigkilled() {
    use std::io::BufRead;
    for isolation in ["auto", "none"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let root = dir.path().join("runners");
        let mut server = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "lifecycle::server_holding_a_runner", "--ignored"])
            .args(["--nocapture", "--test-threads=1"])
            .env("TOOLSERVER_TEST_ROOT", &root)
            .env("TOOLSERVER_TEST_ISOLATION", isolation)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(server.stdout.take().unwrap());
        let ready = stdout
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("runner-ready"));
        assert!(ready, "the server started its runner ({isolation})");
        let needle = root.to_string_lossy().into_owned();
        assert!(
            processes_mentioning(&needle).iter().any(|(_, s)| *s != 'Z'),
            "the worker runs ({isolation})"
        );
        server.kill().unwrap();
        server.wait().unwrap();
        let waited = Instant::now();
        loop {
            let alive: Vec<_> = processes_mentioning(&needle)
                .into_iter()
                .filter(|(_, state)| *state != 'Z')
                .collect();
            if alive.is_empty() {
                break;
            }
            assert!(
                waited.elapsed() < Duration::from_secs(5),
                "the worker outlived its SIGKILLed server ({isolation}): {alive:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test]
async fn a_spinning_call_past_its_deadline_does_not_hold_a_second_call_on_its_runner() {
    let h = Harness::new();
    let key = key("acct");
    run(&h.executor, &key, request(inline(ECHO), json!({}))).await;
    let spins = "export default { execute(ctx, input) { if (input.spin) for (;;) {} return { echo: input }; } };";
    let mut spinning = request(inline(spins), json!({"spin": true}));
    spinning.deadline_ms = 500;
    let mut harmless = request(inline(spins), json!({"spin": false}));
    harmless.deadline_ms = 5_000;
    let started = Instant::now();
    let first = tokio::spawn({
        let (executor, key) = (h.executor.clone(), key.clone());
        async move { run(&executor, &key, spinning).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = run(&h.executor, &key, harmless).await;
    let first = first.await.unwrap();
    assert!(
        matches!(&first, Frame::Error { name, .. } if name == "DeadlineExceeded"),
        "{first:?}"
    );
    assert_eq!(final_value(&second), json!({"echo": {"spin": false}}));
    // The second call must not wait on the spinning one (it once waited about 30 s).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_live_worker_that_no_longer_accepts_calls_is_replaced_and_no_call_fails() {
    let h = Harness::new();
    let key = key("acct");
    run(&h.executor, &key, request(inline(ECHO), json!({"n": 1}))).await;
    let socket = h.executor.socket_path(&key);
    std::fs::remove_file(&socket).unwrap();
    for n in 2..=3 {
        let frame = run(&h.executor, &key, request(inline(ECHO), json!({"n": n}))).await;
        assert_eq!(echo_of(&frame), json!({"n": n}), "call {n}");
    }
    assert!(socket.exists(), "a fresh worker listens again");
}

#[tokio::test]
async fn a_runner_root_the_runner_user_cannot_enter_is_refused_at_start_naming_the_path() {
    use std::os::unix::fs::PermissionsExt;
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let started = toolserver_sandbox::LocalExecutor::new(settings(&private.path().join("runners")));
    let running_as_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap();
    if !running_as_root {
        // Workers run as the server's own user, which may enter its directory.
        assert!(started.is_ok());
        return;
    }
    let err = started.err().expect("refused at start").to_string();
    assert!(
        err.contains(&private.path().display().to_string()) && err.contains("cannot enter"),
        "{err}"
    );
}
