//! Resource limits: a call that breaks one is killed with an error naming
//! it, its runner is replaced, and another account's call runs on meanwhile.

use std::time::Duration;

use serde_json::{json, Value};
use toolserver_sandbox::{Frame, ReservationKey, RunnerLimits};

use crate::support::key as key_of;
use crate::support::*;

/// Small limits, so that each is reached quickly.
fn harness() -> Harness {
    harness_checking_every(Duration::from_millis(100))
}

/// Small limits, checked every `check_interval` while a call runs.
fn harness_checking_every(check_interval: Duration) -> Harness {
    let h = Harness::with(|settings| {
        settings.limits = RunnerLimits {
            memory_bytes: 192 * 1024 * 1024,
            processes: 40,
            open_files: 1024,
            file_size_bytes: 64 * 1024 * 1024,
            disk_bytes: 16 * 1024 * 1024,
            cpu_per_call: Duration::from_millis(1500),
            check_interval,
        };
    });
    assert!(
        h.executor.limits_by_cgroup(),
        "these tests need cgroups for memory and processes (run the tests as root on a host with the memory and pids controllers)"
    );
    h
}

/// A tool of another account that ticks for a while and counts its ticks.
const BYSTANDER: &str = "export default { async execute() {
  let ticks = 0;
  while (ticks < 40) { await new Promise(r => setTimeout(r, 50)); ticks++; }
  return { ticks };
} };";

/// Runs `tool` (expected to break a limit) beside another account's call,
/// and checks: the call ends in `LimitExceeded` naming `limit`, the other
/// call finished normally, and the next call on the same runner works.
async fn breaks(h: &Harness, key: &ReservationKey, tool: &str, limit: &str) -> String {
    let other = key_of("acct_bystander");
    let mut offending = request(inline(tool), json!({}));
    offending.deadline_ms = 60_000;
    let (frame, bystander) = tokio::join!(
        run(&h.executor, key, offending),
        run(&h.executor, &other, request(inline(BYSTANDER), json!({}))),
    );
    let message = match &frame {
        Frame::Error { name, message } if name == "LimitExceeded" => message.clone(),
        other => panic!("expected LimitExceeded for the {limit} limit, got {other:?}"),
    };
    assert!(message.contains(limit), "{message}");
    assert_eq!(final_value(&bystander), json!({"ticks": 40}));
    let next = run(
        &h.executor,
        key,
        request(inline(ECHO), json!({"next": true})),
    )
    .await;
    assert_eq!(
        echo_of(&next),
        json!({"next": true}),
        "the runner is replaced"
    );
    message
}

#[tokio::test]
async fn allocating_past_the_memory_limit_is_killed_naming_it() {
    let h = harness();
    let tool = "export default { async execute() {
  const kept = [];
  for (let i = 0; i < 64; i++) { kept.push(Buffer.alloc(16 << 20, 1)); await new Promise(r => setTimeout(r, 5)); }
  return { kept: kept.length };
} };";
    let message = breaks(&h, &key_of("acct_limits"), tool, "memory limit").await;
    assert!(message.contains("192 MiB"), "{message}");
}

#[tokio::test]
async fn forking_past_the_process_limit_is_killed_naming_it() {
    let h = harness();
    let tool = "import { spawn } from 'node:child_process';
export default { async execute() {
  let started = 0, refused = 0;
  for (let i = 0; i < 80; i++) {
    const child = spawn('/usr/bin/sleep', ['30']);
    child.on('error', () => { refused++; });
    if (child.pid) started++;
  }
  await new Promise(r => setTimeout(r, 200));
  return { started, refused };
} };";
    let message = breaks(&h, &key_of("acct_limits"), tool, "process limit").await;
    assert!(message.contains("40 processes"), "{message}");
}

#[tokio::test]
async fn writing_past_the_disk_limit_is_killed_naming_it_and_the_files_are_gone() {
    let h = harness();
    let key = key("acct_limits");
    // It stays past the limit for many check intervals, so a check made
    // while the call runs finds it (one that ends at once is the next test).
    let tool = "import { appendFileSync } from 'node:fs';
export default { async execute() {
  const chunk = Buffer.alloc(1 << 20, 7);
  for (let i = 0; i < 40; i++) { appendFileSync('fill', chunk); await new Promise(r => setTimeout(r, 5)); }
  await new Promise(r => setTimeout(r, 2000));
  return { written: 40 };
} };";
    breaks(&h, &key, tool, "disk limit").await;
    let work = h.executor.socket_path(&key).parent().unwrap().join("work");
    assert!(
        !work.join("fill").exists(),
        "what broke the limit is removed"
    );
}

/// A call that goes past the disk limit and answers before any check made
/// while it runs: its answer stands, and the check right after it kills the
/// runner and empties its directories before the runner serves again.
#[tokio::test]
async fn a_disk_breach_found_after_the_answer_replaces_the_runner_before_its_next_call() {
    let h = harness_checking_every(Duration::from_secs(3600));
    let key = key("acct_limits");
    let warm = run(&h.executor, &key, request(inline(ECHO), json!({}))).await;
    assert_eq!(echo_of(&warm), json!({}));
    let first_worker = h.executor.worker_pid(&key).await;
    assert!(first_worker.is_some());
    let fill = "import { writeFileSync } from 'node:fs';
export default { execute() {
  writeFileSync('fill', Buffer.alloc(24 << 20, 7));
  return { written: 24 };
} };";
    let answer = run(&h.executor, &key, request(inline(fill), json!({}))).await;
    assert_eq!(final_value(&answer), json!({"written": 24}), "{answer:?}");
    let look = "import { existsSync } from 'node:fs';
export default { execute() { return { fill: existsSync('fill') }; } };";
    let next = run(&h.executor, &key, request(inline(look), json!({}))).await;
    assert_eq!(
        final_value(&next),
        json!({"fill": false}),
        "the runner's files are gone before its next call"
    );
    let next_worker = h.executor.worker_pid(&key).await;
    assert!(next_worker.is_some());
    assert_ne!(
        next_worker, first_worker,
        "the next call found a fresh worker"
    );
}

#[tokio::test]
async fn spinning_past_the_cpu_limit_is_killed_naming_it() {
    let h = harness();
    let tool = "export default { execute() { for (;;) {} } };";
    breaks(&h, &key_of("acct_limits"), tool, "CPU time limit").await;
}

#[tokio::test]
async fn a_tool_within_its_limits_is_untouched() {
    let h = harness();
    let key = key("acct_limits");
    let tool = "import { writeFileSync } from 'node:fs';
export default { async execute() {
  const kept = Buffer.alloc(32 << 20, 1);
  writeFileSync('small', Buffer.alloc(1 << 20, 2));
  let x = 0; for (let i = 0; i < 1e7; i++) x += i;
  return { kept: kept.length, x: x > 0 };
} };";
    let frame = run(&h.executor, &key, request(inline(tool), json!({}))).await;
    assert_eq!(
        final_value(&frame),
        json!({"kept": 32 << 20, "x": true}),
        "{frame:?}"
    );
}

#[tokio::test]
async fn the_shared_tmp_is_read_only_and_tmpdir_is_the_runners_own() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
export default { execute() {
  let shared = 'written';
  try { writeFileSync('/tmp/escape', 'x'); } catch (e) { shared = e.code; }
  writeFileSync(tmpdir() + '/mine', 'x');
  return { shared, tmpdir: tmpdir() };
} };";
    let value: Value = final_value(&run(&h.executor, &key, request(inline(tool), json!({}))).await);
    if h.executor.uses_bwrap() {
        assert_eq!(value["shared"], "EROFS", "{value}");
    }
    let runner_tmp = h.executor.socket_path(&key).parent().unwrap().join("tmp");
    assert_eq!(value["tmpdir"], runner_tmp.to_string_lossy().as_ref());
    assert!(runner_tmp.join("mine").exists());
}
