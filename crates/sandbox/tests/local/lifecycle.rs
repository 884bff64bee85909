//! Runner lifecycle: reuse, crash recovery, deadlines, idle stop, tenancy.

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
async fn a_worker_that_dies_without_frames_falls_back_to_the_one_shot_runner() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "export default { execute() { if (process.argv.some(a => a === '--socket')) process.exit(3); return 'one-shot'; } };";
    let frame = run(&h.executor, &key, request(inline(tool), json!({}))).await;
    assert_eq!(final_value(&frame), json!("one-shot"));
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
