//! The runner budget over real workers: the server-wide cap holds under
//! concurrent calls, the least recently used idle runner makes room, a
//! call that finds no room is refused after the queue wait naming the cap
//! that blocked it, a runner still running a detached call is not stopped,
//! and waiting accounts are served in turn.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use toolserver_domain::AccountId;
use toolserver_sandbox::{
    BudgetSettings, Executor, FixedRunnerCaps, Frame, RunnerBudget, SandboxError, WorkerClient,
};

use crate::support::*;

const SLEEP: &str = "export default { async execute(ctx, input) { await new Promise((r) => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

fn budget(h: &Harness, max_live: usize, per_account: usize, queue_wait: Duration) -> RunnerBudget {
    let settings = BudgetSettings {
        max_live,
        queue_wait,
        queue_depth: 64,
    };
    RunnerBudget::new(
        Arc::new(h.executor.clone()),
        settings,
        Arc::new(FixedRunnerCaps(per_account)),
    )
}

fn account(id: &str) -> AccountId {
    AccountId::parse(id).unwrap()
}

async fn echo(budget: &RunnerBudget, key: &toolserver_sandbox::ReservationKey) -> Frame {
    let frames = budget
        .invoke(key, request(inline(ECHO), json!({"at": key.to_string()})))
        .await
        .unwrap();
    collect(frames).await.pop().unwrap()
}

fn busy(err: SandboxError) -> (String, bool, Duration) {
    match err {
        SandboxError::Busy {
            reason,
            account_limit,
            retry_after,
        } => (reason, account_limit, retry_after),
        other => panic!("expected Busy, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_server_cap_holds_under_concurrent_calls_of_many_tools() {
    let h = Harness::new();
    let budget = Arc::new(budget(&h, 3, 8, Duration::from_secs(60)));
    let accounts = [account("acct_cap_a"), account("acct_cap_b")];
    let keys: Vec<_> = (0..10).map(|i| key(accounts[i % 2].as_str())).collect();
    let (peak, done) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = {
        let (executor, peak, done, accounts) = (
            h.executor.clone(),
            peak.clone(),
            done.clone(),
            accounts.clone(),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let live: usize = accounts
                    .iter()
                    .map(|account| executor.usage(account).live_runners)
                    .sum();
                peak.fetch_max(live, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let calls: Vec<_> = keys
        .iter()
        .flat_map(|key| std::iter::repeat_n(key.clone(), 3))
        .map(|key| {
            let budget = budget.clone();
            tokio::spawn(async move {
                let frames = budget
                    .invoke(&key, request(inline(SLEEP), json!({"ms": 50})))
                    .await
                    .unwrap();
                collect(frames).await.pop().unwrap()
            })
        })
        .collect();
    for call in calls {
        assert_eq!(final_value(&call.await.unwrap()), json!({"slept": 50}));
    }
    done.store(true, Ordering::SeqCst);
    sampler.await.unwrap();
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "never more than the cap of live workers, and the cap was used"
    );
    let counted: usize = accounts
        .iter()
        .map(|account| budget.usage(account).live_runners)
        .sum();
    assert!(counted <= 3, "{counted}");
}

#[tokio::test]
async fn the_least_recently_used_idle_runner_makes_room_for_another_account() {
    let h = Harness::new();
    let budget = budget(&h, 2, 8, Duration::from_secs(10));
    let (a1, a2, b1) = (key("acct_lru_a"), key("acct_lru_a"), key("acct_lru_b"));
    echo(&budget, &a1).await;
    echo(&budget, &a2).await;
    echo(&budget, &a1).await;
    let a1_worker = h.executor.worker_pid(&a1).await.unwrap();
    assert!(h.executor.worker_pid(&a2).await.is_some());
    assert_eq!(
        echo_of(&echo(&budget, &b1).await),
        json!({"at": b1.to_string()})
    );
    assert_eq!(
        h.executor.worker_pid(&a2).await,
        None,
        "a2, used least recently, was stopped"
    );
    assert_eq!(h.executor.worker_pid(&a1).await, Some(a1_worker));
    assert_eq!(budget.usage(a1.account()).live_runners, 1);
    assert_eq!(budget.usage(b1.account()).live_runners, 1);
}

#[tokio::test]
async fn a_call_finding_every_runner_busy_is_refused_after_the_wait_naming_the_servers_cap() {
    let h = Harness::new();
    let budget = budget(&h, 1, 8, Duration::from_millis(300));
    let busy_key = key("acct_full_a");
    let running = budget
        .invoke(&busy_key, request(inline(SLEEP), json!({"ms": 3000})))
        .await
        .unwrap();
    let asked = Instant::now();
    let refused = budget
        .invoke(&key("acct_full_b"), request(inline(ECHO), json!({})))
        .await
        .unwrap_err();
    assert!(asked.elapsed() >= Duration::from_millis(300), "it waited");
    let (reason, account_limit, retry_after) = busy(refused);
    assert!(!account_limit, "the server's cap blocked it: {reason}");
    assert!(
        reason
            .contains("the server has 1 live runners, its limit (TOOLSERVER_RUNNER_MAX_LIVE = 1)"),
        "{reason}"
    );
    assert_eq!(retry_after, Duration::from_secs(1));
    assert_eq!(
        final_value(&collect(running).await.pop().unwrap()),
        json!({"slept": 3000})
    );
}

#[tokio::test]
async fn a_call_beyond_its_accounts_cap_is_refused_after_the_wait_naming_the_accounts_cap() {
    let h = Harness::new();
    let budget = budget(&h, 8, 1, Duration::from_millis(300));
    let running = budget
        .invoke(
            &key("acct_own_cap"),
            request(inline(SLEEP), json!({"ms": 3000})),
        )
        .await
        .unwrap();
    let (reason, account_limit, _) = busy(
        budget
            .invoke(&key("acct_own_cap"), request(inline(ECHO), json!({})))
            .await
            .unwrap_err(),
    );
    assert!(account_limit, "the account's own cap blocked it: {reason}");
    assert!(
        reason.contains("account acct_own_cap has 1 live runners, its limit (liveRunners = 1)"),
        "{reason}"
    );
    let other = echo(&budget, &key("acct_other")).await;
    assert!(
        matches!(other, Frame::Final { .. }),
        "another account is not held back"
    );
    collect(running).await;
}

#[tokio::test]
async fn a_runner_still_running_a_detached_call_is_not_stopped_for_room() {
    let sink = CallbackSink::start().await;
    let h = Harness::with(|s| s.egress.callback_base = Some(sink.base()));
    let budget = budget(&h, 1, 8, Duration::from_millis(1500));
    let detached = key("acct_bg_a");
    let mut launch = request(inline(SLEEP), json!({"ms": 2500}));
    launch.async_meta = Some(sink.async_meta("r-bg"));
    assert_eq!(
        collect(budget.invoke(&detached, launch).await.unwrap()).await,
        vec![Frame::Launched]
    );
    let worker = h.executor.worker_pid(&detached).await.unwrap();
    let other = key("acct_bg_b");
    let (reason, account_limit, _) = busy(
        budget
            .invoke(&other, request(inline(ECHO), json!({})))
            .await
            .unwrap_err(),
    );
    assert!(!account_limit, "{reason}");
    assert_eq!(
        h.executor.worker_pid(&detached).await,
        Some(worker),
        "kept: its worker runs a detached call"
    );
    sink.first("/sandbox-jobs/r-bg/complete", Duration::from_secs(10))
        .await
        .expect("the detached call is delivered");
    let client = WorkerClient::new(h.executor.socket_path(&detached));
    let waited = Instant::now();
    while client.inflight().await.unwrap() != 0 {
        assert!(waited.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(matches!(echo(&budget, &other).await, Frame::Final { .. }));
    assert_eq!(
        h.executor.worker_pid(&detached).await,
        None,
        "idle once its detached call ended: stopped for room"
    );
}

#[tokio::test]
async fn waiting_accounts_are_served_in_turn_not_first_come() {
    let h = Harness::new();
    let budget = Arc::new(budget(&h, 1, 8, Duration::from_secs(60)));
    let holding = budget
        .invoke(
            &key("acct_turn_a"),
            request(inline(SLEEP), json!({"ms": 1000})),
        )
        .await
        .unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let queued = |name: String, key| {
        let (budget, served) = (budget.clone(), served.clone());
        tokio::spawn(async move {
            let frame = echo(&budget, &key).await;
            assert!(matches!(frame, Frame::Final { .. }), "{frame:?}");
            served.lock().unwrap().push(name);
        })
    };
    let mut calls = Vec::new();
    for i in 0..5 {
        calls.push(queued(format!("a{i}"), key("acct_turn_a")));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    calls.push(queued("b".to_owned(), key("acct_turn_b")));
    collect(holding).await;
    for call in calls {
        call.await.unwrap();
    }
    let served = served.lock().unwrap().clone();
    assert_eq!(
        served,
        ["a0", "b", "a1", "a2", "a3", "a4"],
        "b waited behind one of a's calls, not five"
    );
}
