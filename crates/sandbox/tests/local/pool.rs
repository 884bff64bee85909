//! The warm pool over real workers (under bubblewrap where it works): a
//! tool's first call is served by a warm worker, which is then its
//! runner's for good and replaced in the pool; its warm-up left nothing in
//! its cache, and its processes leave the pool's cgroups; a warm worker
//! killed in the pool is replaced; a pool of size 0 starts workers as
//! before; and warm workers count against the runner budget's server-wide
//! cap.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolserver_sandbox::{BudgetSettings, Executor, FixedRunnerCaps, ReservationKey, RunnerBudget};

use crate::support::*;

/// Waits (up to 30 s) until the pool holds `size` ready workers, and
/// returns their pids.
async fn warm(h: &Harness, size: usize) -> Vec<u32> {
    let waited = Instant::now();
    loop {
        let pids = h.executor.warm_pids();
        if pids.len() == size {
            return pids;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the pool holds {} workers, not {size}",
            pids.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The real uid of process `pid`.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Process `pid` and its descendants.
fn tree(pid: u32) -> Vec<u32> {
    let mut found = vec![pid];
    let mut at = 0;
    while let Some(&next) = found.get(at) {
        at += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{next}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            found.extend(
                children
                    .split_whitespace()
                    .filter_map(|child| child.parse::<u32>().ok()),
            );
        }
    }
    found
}

/// The cgroups of process `pid` that are a warm worker's or the pool's.
fn warm_groups(pid: u32) -> Vec<String> {
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    groups
        .lines()
        .filter(|line| line.split('/').any(|part| part.starts_with("warm")))
        .map(str::to_owned)
        .collect()
}

async fn echo(h: &Harness, key: &ReservationKey) {
    let frame = run(
        &h.executor,
        key,
        request(inline(ECHO), json!({"k": key.to_string()})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"k": key.to_string()}));
}

#[tokio::test]
async fn a_first_call_is_served_by_a_warm_worker_and_the_pool_refills() {
    let h = Harness::new();
    h.executor.start_warm_pool(2).unwrap();
    let before = warm(&h, 2).await;
    let key = key("acct_a");
    let info = h.executor.ensure(&key).await.unwrap();
    assert!(info.started, "a worker was newly given to the runner");
    let pid = h.executor.worker_pid(&key).await.unwrap();
    assert!(before.contains(&pid), "served by a warm worker");
    echo(&h, &key).await;
    assert_eq!(h.executor.worker_pid(&key).await, Some(pid));
    let socket = h.executor.socket_path(&key);
    let dir = socket.parent().unwrap();
    assert!(
        socket.exists(),
        "its socket is reached at the runner's directory"
    );
    if h.executor.uses_bwrap() {
        assert!(
            dir.join("egress.sock").exists(),
            "egress served in the runner's scope"
        );
    }
    let after = warm(&h, 2).await;
    assert!(
        !after.contains(&pid),
        "a claimed worker leaves the pool for good"
    );
    // Stopped, the runner starts cold in its own directory, never from the pool.
    h.executor.stop(&key).await.unwrap();
    echo(&h, &key).await;
    let again = h.executor.worker_pid(&key).await.unwrap();
    assert!(
        !after.contains(&again),
        "a runner that ran here starts cold"
    );
    assert_eq!(h.executor.warm_pids().len(), 2);
}

#[tokio::test]
async fn a_claimed_worker_is_never_given_to_another_key() {
    let h = Harness::new();
    h.executor.start_warm_pool(1).unwrap();
    let first = warm(&h, 1).await[0];
    let a = key("acct_a");
    echo(&h, &a).await;
    assert_eq!(h.executor.worker_pid(&a).await, Some(first));
    let second = warm(&h, 1).await[0];
    assert_ne!(first, second);
    for account in ["acct_b", "acct_c"] {
        let other = key(account);
        echo(&h, &other).await;
        let pid = h.executor.worker_pid(&other).await.unwrap();
        assert_ne!(pid, first, "{account} got a worker of another key");
        if h.executor.runs_as_own_users() {
            assert_ne!(
                uid_of(pid),
                uid_of(first),
                "{account} shares a user with acct_a"
            );
        }
        warm(&h, 1).await;
    }
    echo(&h, &a).await;
    assert_eq!(
        h.executor.worker_pid(&a).await,
        Some(first),
        "acct_a keeps its worker"
    );
}

#[tokio::test]
async fn a_pool_of_size_zero_starts_workers_as_before() {
    let h = Harness::new();
    h.executor.start_warm_pool(0).unwrap();
    let key = key("acct_a");
    assert!(h.executor.ensure(&key).await.unwrap().started);
    echo(&h, &key).await;
    assert!(h.executor.worker_pid(&key).await.is_some());
    assert!(
        h.executor.warm_pids().is_empty(),
        "no warm worker was started"
    );
}

#[tokio::test]
async fn a_warm_worker_killed_in_the_pool_is_replaced() {
    let h = Harness::new();
    h.executor.start_warm_pool(1).unwrap();
    let killed = warm(&h, 1).await[0];
    std::process::Command::new("kill")
        .args(["-9", &killed.to_string()])
        .status()
        .unwrap();
    let waited = Instant::now();
    let replacement = loop {
        let pids = h.executor.warm_pids();
        if pids.len() == 1 && pids[0] != killed {
            break pids[0];
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "not replaced: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let key = key("acct_a");
    echo(&h, &key).await;
    assert_eq!(h.executor.worker_pid(&key).await, Some(replacement));
}

#[tokio::test]
async fn warm_workers_count_against_the_servers_cap_and_go_first() {
    let h = Harness::new();
    let settings = BudgetSettings {
        max_live: 2,
        queue_wait: Duration::from_secs(60),
        queue_depth: 64,
    };
    let budget = RunnerBudget::new(
        Arc::new(h.executor.clone()),
        settings,
        Arc::new(FixedRunnerCaps(8)),
    );
    h.executor.start_warm_pool(3).unwrap();
    let warm_pids = warm(&h, 2).await;
    let (a, b) = (key("acct_a"), key("acct_b"));
    for key in [&a, &b] {
        let frames = budget
            .invoke(key, request(inline(ECHO), json!({})))
            .await
            .unwrap();
        collect(frames).await;
    }
    assert!(warm_pids.contains(&h.executor.worker_pid(&a).await.unwrap()));
    assert!(h.executor.worker_pid(&b).await.is_some());
    assert_eq!(budget.usage(a.account()).live_runners, 1);
    assert_eq!(budget.usage(b.account()).live_runners, 1);
    assert!(
        h.executor.warm_pids().is_empty(),
        "two live runners leave no room for a warm one"
    );
}

#[tokio::test]
async fn a_claimed_worker_keeps_nothing_of_its_warm_up_and_leaves_the_pools_cgroups() {
    let h = Harness::new();
    h.executor.start_warm_pool(1).unwrap();
    let warm_pid = warm(&h, 1).await[0];
    let key = key("acct_a");
    h.executor.ensure(&key).await.unwrap();
    let pid = h.executor.worker_pid(&key).await.unwrap();
    assert_eq!(pid, warm_pid, "served by the warm worker");
    let cache = h.executor.socket_path(&key).with_file_name("cache");
    let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
    assert!(left.is_empty(), "the warm-up left {left:?} in the cache");
    echo(&h, &key).await;
    if !h.executor.limits_by_cgroup() {
        return;
    }
    let waited = Instant::now();
    loop {
        let held: Vec<String> = tree(pid).into_iter().flat_map(warm_groups).collect();
        if held.is_empty() {
            break;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the claimed worker's processes stay in the pool's cgroups: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
