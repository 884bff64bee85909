//! Workers that exit under the server: reaped at once, announced with the
//! detached calls they took with them, and named in the error of a call
//! that was waiting on them.

use std::time::{Duration, Instant};

use serde_json::json;
use toolserver_sandbox::{Executor, Frame, LaunchedCall, WorkerClient};

use crate::support::*;

/// The children of `pid` (of every thread of it).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The `node` process of the worker whose server-side pid is `pid` (itself
/// without bubblewrap, a descendant of `bwrap` with it).
fn node_of(pid: u32) -> u32 {
    let mut queue = vec![pid];
    while let Some(next) = queue.pop() {
        let comm = std::fs::read_to_string(format!("/proc/{next}/comm")).unwrap_or_default();
        if comm.trim() == "node" {
            return next;
        }
        queue.extend(children_of(next));
    }
    panic!("no node process under {pid}");
}

/// The state letter of `pid` (`Z`: dead, not yet reaped); `None` once it
/// is gone.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
}

fn sigkill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits up to 10 s for `pid` to be gone (reaped), and says whether it is.
async fn reaped(pid: u32) -> bool {
    let waited = Instant::now();
    while state_of(pid).is_some() {
        if waited.elapsed() > Duration::from_secs(10) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn a_killed_worker_is_reaped_at_once_leaving_no_zombie() {
    let h = Harness::new();
    let key = key("acct");
    run(&h.executor, &key, request(inline(ECHO), json!({}))).await;
    let worker = h.executor.worker_pid(&key).await.unwrap();
    let node = node_of(worker);
    sigkill(node);
    // Nothing asks about the runner meanwhile: only the server's own
    // watch on its child can reap it.
    assert!(
        reaped(worker).await,
        "the worker's process ({worker}) was left {:?}",
        state_of(worker)
    );
    let own = std::process::id();
    let zombies: Vec<u32> = children_of(own)
        .into_iter()
        .filter(|child| *child == worker || *child == node)
        .collect();
    assert!(zombies.is_empty(), "left as children: {zombies:?}");
}

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise((r) => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

#[tokio::test]
async fn a_killed_worker_announces_the_detached_calls_it_took_with_it() {
    let sink = CallbackSink::start().await;
    let h = Harness::with(|s| s.egress.callback_base = Some(sink.base()));
    let key = key("acct");
    let mut exits = h.executor.exits();
    // One call finishes and is delivered; the other is still running.
    let mut quick = request(inline(SLOW), json!({"ms": 1}));
    quick.async_meta = Some(sink.async_meta("r-quick"));
    assert_eq!(
        collect(h.executor.invoke(&key, quick).await.unwrap()).await,
        vec![Frame::Launched]
    );
    sink.first("/sandbox-jobs/r-quick/complete", Duration::from_secs(10))
        .await
        .expect("the quick call is delivered");
    let mut slow = request(inline(SLOW), json!({"ms": 60_000}));
    let slow_meta = sink.async_meta("r-slow");
    slow.async_meta = Some(slow_meta.clone());
    let slow_id = slow.call_id.clone();
    assert_eq!(
        collect(h.executor.invoke(&key, slow).await.unwrap()).await,
        vec![Frame::Launched]
    );
    // The worker counts the quick call in flight until it reported it done.
    let client = WorkerClient::new(h.executor.socket_path(&key));
    let waited = Instant::now();
    while client.inflight().await.unwrap() != 1 {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the quick call never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let worker = h.executor.worker_pid(&key).await.unwrap();
    sigkill(node_of(worker));
    let exit = tokio::time::timeout(Duration::from_secs(10), exits.recv())
        .await
        .expect("the exit is announced at once")
        .unwrap();
    assert_eq!(exit.runner, key.runner_name());
    assert_eq!(exit.cause, "killed by signal 9 (SIGKILL)");
    assert_eq!(
        exit.calls,
        vec![LaunchedCall {
            call_id: slow_id,
            async_meta: slow_meta,
        }],
        "only the call still running went with it"
    );
}

#[tokio::test]
async fn a_call_waiting_on_a_killed_worker_fails_at_once_naming_the_exit() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "import { writeFileSync } from 'node:fs';
export default { async execute() { writeFileSync('started', ''); await new Promise((r) => setTimeout(r, 60000)); return 'late'; } };";
    let mut call = request(inline(tool), json!({}));
    call.deadline_ms = 120_000;
    let frames = h.executor.invoke(&key, call).await.unwrap();
    let started = h
        .executor
        .socket_path(&key)
        .parent()
        .unwrap()
        .join("work/started");
    let waited = Instant::now();
    while !started.exists() {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the call never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let worker = h.executor.worker_pid(&key).await.unwrap();
    sigkill(node_of(worker));
    let frames = collect(frames).await;
    match frames.last() {
        Some(Frame::Error { name, message }) => {
            assert_eq!(name, "RunnerCrashed");
            assert!(
                message.contains("killed by signal 9 (SIGKILL)"),
                "{message}"
            );
        }
        other => panic!("expected an error frame, got {other:?}"),
    }
}
