use std::time::Duration;

use toolserver_domain::ToolId;

use super::*;
use crate::budget::FixedRunnerCaps;

fn ledger(max_live: usize, per_account: usize, queue_depth: usize) -> Ledger {
    let settings = BudgetSettings {
        max_live,
        queue_wait: Duration::from_secs(5),
        queue_depth,
    };
    Ledger::new(settings, Arc::new(FixedRunnerCaps(per_account)))
}

fn key(account: &str) -> ReservationKey {
    ReservationKey::new(AccountId::parse(account).unwrap(), ToolId::generate())
}

fn goes(ledger: &mut Ledger, key: &ReservationKey) {
    assert!(matches!(ledger.admit(key), Admission::Go), "{key} goes");
}

fn waits(ledger: &mut Ledger, key: &ReservationKey) -> oneshot::Receiver<()> {
    match ledger.admit(key) {
        Admission::Wait { granted, .. } => granted,
        _ => panic!("{key} should wait"),
    }
}

fn granted(receiver: &mut oneshot::Receiver<()>) -> bool {
    receiver.try_recv().is_ok()
}

fn keys(evictions: &[Eviction]) -> Vec<ReservationKey> {
    evictions.iter().filter_map(|e| e.key.clone()).collect()
}

#[test]
fn the_accounts_cap_evicts_its_own_least_recently_used_idle_runner() {
    let mut ledger = ledger(10, 2, 8);
    let (a1, a2, a3, b1) = (key("a"), key("a"), key("a"), key("b"));
    goes(&mut ledger, &a1);
    goes(&mut ledger, &a2);
    goes(&mut ledger, &b1);
    ledger.release(&b1);
    let mut third = waits(&mut ledger, &a3);
    assert!(
        ledger.pump().is_empty(),
        "a's runners are busy; b's idle one does not help a"
    );
    assert!(ledger.release(&a2).len() == 1, "a2 idle now: evicted");
    ledger.release(&a1);
    let evictions = ledger.pump();
    assert!(
        keys(&evictions).is_empty(),
        "one eviction under way is enough for one waiting runner"
    );
    let a2_eviction = Eviction {
        key: Some(a2.clone()),
        for_account: a2.account().clone(),
    };
    assert!(!granted(&mut third));
    ledger.evicted(&a2_eviction, true);
    assert!(granted(&mut third), "a3 takes a2's place");
    assert_eq!(ledger.live(a1.account()), 2);
    assert_eq!(ledger.live(b1.account()), 1);
}

#[test]
fn the_server_cap_evicts_the_least_recently_used_idle_runner_of_any_account() {
    let mut ledger = ledger(2, 8, 8);
    let (a1, b1, b2, c1) = (key("a"), key("b"), key("b"), key("c"));
    goes(&mut ledger, &a1);
    goes(&mut ledger, &b1);
    ledger.release(&a1);
    ledger.release(&b1);
    let mut c_waits = waits(&mut ledger, &c1);
    let evictions = ledger.pump();
    assert_eq!(
        keys(&evictions),
        vec![a1.clone()],
        "a1 was used least recently"
    );
    goes(&mut ledger, &a1);
    let after = ledger.evicted(&evictions[0], true);
    assert!(
        !granted(&mut c_waits),
        "a call came for a1 during its stop: it stays"
    );
    assert_eq!(keys(&after), vec![b1.clone()], "the next one is tried");
    ledger.evicted(&after[0], true);
    assert!(granted(&mut c_waits));
    assert_eq!(ledger.live(b2.account()), 0);
}

#[test]
fn a_runner_its_backend_keeps_is_passed_over_for_a_while() {
    let mut ledger = ledger(2, 8, 8);
    let (a1, a2, b1) = (key("a"), key("a"), key("b"));
    goes(&mut ledger, &a1);
    goes(&mut ledger, &a2);
    ledger.release(&a1);
    ledger.release(&a2);
    let _waiting = waits(&mut ledger, &b1);
    let first = ledger.pump();
    assert_eq!(keys(&first), vec![a1.clone()]);
    let next = ledger.evicted(&first[0], false);
    assert_eq!(
        keys(&next),
        vec![a2.clone()],
        "a1 runs detached calls: a2 next"
    );
    assert!(
        ledger.evicted(&next[0], false).is_empty(),
        "none left to try"
    );
}

#[test]
fn waiting_accounts_are_served_in_turn() {
    let mut ledger = ledger(1, 8, 8);
    let (a0, b1) = (key("a"), key("b"));
    goes(&mut ledger, &a0);
    let mut waiting: Vec<(ReservationKey, oneshot::Receiver<()>)> = Vec::new();
    for _ in 0..3 {
        let a = key("a");
        let granted = waits(&mut ledger, &a);
        waiting.push((a, granted));
    }
    let b_granted = waits(&mut ledger, &b1);
    waiting.push((b1.clone(), b_granted));
    let mut order = Vec::new();
    let mut running = a0.clone();
    while order.len() < waiting.len() {
        let evictions = ledger.release(&running);
        assert_eq!(keys(&evictions), [running.clone()]);
        ledger.evicted(&evictions[0], true);
        let served = waiting
            .iter_mut()
            .position(|(_, granted)| granted.try_recv().is_ok())
            .expect("one call served");
        let key = waiting[served].0.clone();
        order.push(key.account().to_string());
        running = key;
    }
    assert_eq!(order, ["a", "b", "a", "a"]);
}

#[test]
fn calls_for_one_runner_are_served_together() {
    let mut ledger = ledger(1, 8, 8);
    let (a0, a1) = (key("a"), key("a"));
    goes(&mut ledger, &a0);
    let mut first = waits(&mut ledger, &a1);
    let mut second = waits(&mut ledger, &a1);
    let evictions = ledger.release(&a0);
    assert_eq!(evictions.len(), 1, "one runner wanted, one eviction");
    ledger.evicted(&evictions[0], true);
    assert!(granted(&mut first) && granted(&mut second));
}

#[test]
fn a_full_queue_refuses_naming_the_cap_that_blocks() {
    let mut ledger = ledger(10, 1, 1);
    let (a1, a2, a3) = (key("acct_x"), key("acct_x"), key("acct_x"));
    goes(&mut ledger, &a1);
    let _waiting = waits(&mut ledger, &a2);
    let Admission::Refused(SandboxError::Busy {
        reason,
        account_limit,
        retry_after,
    }) = ledger.admit(&a3)
    else {
        panic!("a full queue refuses");
    };
    assert!(account_limit);
    assert_eq!(retry_after, Duration::from_secs(5));
    assert!(
        reason.contains("account acct_x has 1 live runners, its limit (liveRunners = 1)"),
        "{reason}"
    );
    assert!(
        reason.contains("TOOLSERVER_RUNNER_QUEUE_DEPTH = 1"),
        "{reason}"
    );

    let mut ledger = ledger_with_global_cap();
    let b = key("b");
    let _waiting = waits(&mut ledger, &b);
    let SandboxError::Busy {
        reason,
        account_limit,
        ..
    } = ledger.refuse(b.account(), Refusal::WaitTimeout)
    else {
        panic!("busy");
    };
    assert!(!account_limit);
    assert!(
        reason
            .contains("the server has 1 live runners, its limit (TOOLSERVER_RUNNER_MAX_LIVE = 1)"),
        "{reason}"
    );
}

fn ledger_with_global_cap() -> Ledger {
    let mut ledger = ledger(1, 8, 8);
    goes(&mut ledger, &key("a"));
    ledger
}

#[test]
fn a_backends_own_stop_counts_only_for_an_idle_runner() {
    let mut ledger = ledger(1, 8, 8);
    let a = key("a");
    goes(&mut ledger, &a);
    ledger.stopped_by_backend(&a);
    assert_eq!(ledger.live(a.account()), 1, "a call is in flight: it stays");
    ledger.release(&a);
    ledger.begin_stop(&a);
    ledger.stopped_by_backend(&a);
    assert_eq!(ledger.live(a.account()), 1, "a stop is under way");
    ledger.end_stop(&a, false);
    ledger.stopped_by_backend(&a);
    assert_eq!(ledger.live(a.account()), 0);
    goes(&mut ledger, &key("b"));
}

#[test]
fn a_withdrawn_call_is_not_served() {
    let mut ledger = ledger(1, 8, 8);
    let (a, b) = (key("a"), key("b"));
    goes(&mut ledger, &a);
    let (id, _granted) = match ledger.admit(&b) {
        Admission::Wait { id, granted } => (id, granted),
        _ => panic!("waits"),
    };
    assert!(ledger.withdraw(b.account(), id));
    assert!(
        ledger.release(&a).is_empty(),
        "nobody waits: nothing to stop"
    );
}

#[test]
fn warm_runners_take_only_free_room_and_go_first_for_the_servers_cap() {
    let mut ledger = ledger(3, 3, 8);
    let (a1, b1) = (key("a"), key("b"));
    assert!(ledger.take_warm() && ledger.take_warm());
    goes(&mut ledger, &a1);
    assert!(!ledger.take_warm(), "the server's cap counts warm runners");
    ledger.release(&a1);
    let mut waiting = waits(&mut ledger, &b1);
    let evictions = ledger.pump();
    assert_eq!(evictions.len(), 1);
    assert!(evictions[0].key.is_none(), "a warm runner goes, not a1");
    assert!(
        !ledger.take_warm(),
        "no warm runner takes room a call waits for"
    );
    ledger.evicted(&evictions[0], true);
    assert!(
        !granted(&mut waiting),
        "served once the warm runner is gone"
    );
    ledger.warm_gone();
    assert!(granted(&mut waiting));
    assert_eq!(ledger.live(a1.account()), 1);
    assert_eq!(ledger.live(b1.account()), 1);
}
