//! Fair CPU between accounts: each account's runners share one cgroup CPU
//! weight, so an account spinning on many runners does not take the CPU
//! from one spinning on one. Measured from the accounts' cgroup CPU
//! counters over a window, not from wall-clock latency.

use std::time::Duration;

use serde_json::json;
use toolserver_domain::{AccountId, ToolId};
use toolserver_sandbox::{Executor, ReservationKey};

use crate::support::*;

const SPIN: &str = "export default { async execute(ctx, input) {
  const end = Date.now() + input.ms;
  let turns = 0;
  while (Date.now() < end) { turns++; }
  return { turns: turns > 0 };
} };";

fn spin(ms: u64) -> toolserver_sandbox::InvokeRequest {
    let mut spin = request(inline(SPIN), json!({"ms": ms}));
    spin.deadline_ms = 60_000;
    spin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_gets_its_share_of_cpu_beside_one_spinning_on_many_runners() {
    let h = Harness::new();
    if !h.executor.cpu_shared_by_account() {
        eprintln!(
            "skipped: this host gives the server no cgroup CPU control ({})",
            h.executor.warnings().join("; ")
        );
        return;
    }
    let greedy = AccountId::parse("acct_cpu_greedy").unwrap();
    let modest = AccountId::parse("acct_cpu_modest").unwrap();
    let greedy_keys: Vec<ReservationKey> = (0..6)
        .map(|_| ReservationKey::new(greedy.clone(), ToolId::generate()))
        .collect();
    let modest_key = ReservationKey::new(modest.clone(), ToolId::generate());
    for key in greedy_keys.iter().chain([&modest_key]) {
        run(&h.executor, key, spin(1)).await;
    }
    let spinning: Vec<_> = greedy_keys
        .iter()
        .map(|key| {
            let (executor, key) = (h.executor.clone(), key.clone());
            tokio::spawn(async move { run(&executor, &key, spin(9_000)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = (h.executor.usage(&greedy).cpu, h.executor.usage(&modest).cpu);
    let measured = run(&h.executor, &modest_key, spin(4_000)).await;
    let after = (h.executor.usage(&greedy).cpu, h.executor.usage(&modest).cpu);
    assert_eq!(final_value(&measured), json!({"turns": true}));
    for spun in spinning {
        assert_eq!(final_value(&spun.await.unwrap()), json!({"turns": true}));
    }
    let greedy_used = (after.0 - before.0).as_secs_f64();
    let modest_used = (after.1 - before.1).as_secs_f64();
    let share = modest_used / (greedy_used + modest_used);
    eprintln!(
        "CPU over the window: greedy (6 runners) {greedy_used:.2} s, modest (1 runner) {modest_used:.2} s, modest's share {:.0}%",
        share * 100.0
    );
    assert!(
        share >= 0.35,
        "the account with one runner got {:.0}% of the CPU beside one with six",
        share * 100.0
    );
}
