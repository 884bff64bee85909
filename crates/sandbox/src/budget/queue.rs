//! Calls waiting for a runner: one queue per account, first come first
//! served within it, and the accounts served in turn (round-robin), so an
//! account with many waiting calls does not hold back one with few.

use std::collections::{HashMap, HashSet, VecDeque};

use tokio::sync::oneshot;
use toolserver_domain::AccountId;

use crate::ReservationKey;

/// One waiting call.
pub(super) struct Waiter {
    /// Tells the waiting call apart from the others.
    pub id: u64,
    /// The runner it needs.
    pub key: ReservationKey,
    /// Woken once the call counts as in flight on a live runner.
    pub grant: oneshot::Sender<()>,
}

/// The waiting calls of every account.
#[derive(Default)]
pub(super) struct FairQueue {
    queues: HashMap<AccountId, VecDeque<Waiter>>,
    /// The accounts with waiting calls, the one whose turn it is first.
    turn: VecDeque<AccountId>,
}

impl FairQueue {
    /// Whether no call waits.
    pub fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// How many calls of `account` wait.
    pub fn waiting(&self, account: &AccountId) -> usize {
        self.queues.get(account).map_or(0, VecDeque::len)
    }

    /// How many different runners the calls of `account` wait for.
    pub fn runners_wanted(&self, account: &AccountId) -> usize {
        self.queues.get(account).map_or(0, |queue| {
            queue
                .iter()
                .map(|waiter| &waiter.key)
                .collect::<HashSet<_>>()
                .len()
        })
    }

    /// Puts `waiter` at the end of its account's queue.
    pub fn push(&mut self, waiter: Waiter) {
        let account = waiter.key.account().clone();
        let queue = self.queues.entry(account.clone()).or_default();
        if queue.is_empty() {
            self.turn.push_back(account);
        }
        queue.push_back(waiter);
    }

    /// Takes the call `id` of `account` out of the queue; `false` when it
    /// no longer waits (it was served).
    pub fn withdraw(&mut self, account: &AccountId, id: u64) -> bool {
        let Some(queue) = self.queues.get_mut(account) else {
            return false;
        };
        let before = queue.len();
        queue.retain(|waiter| waiter.id != id);
        let withdrawn = queue.len() < before;
        if queue.is_empty() {
            self.drop_account(account);
        }
        withdrawn
    }

    /// The account `at` places after the one whose turn it is.
    pub fn account_at(&self, at: usize) -> Option<&AccountId> {
        self.turn.get(at)
    }

    /// The accounts with waiting calls, in turn order.
    pub fn accounts(&self) -> Vec<AccountId> {
        self.turn.iter().cloned().collect()
    }

    /// The runner the first waiting call of `account` needs.
    pub fn first_key(&self, account: &AccountId) -> Option<&ReservationKey> {
        self.queues.get(account)?.front().map(|waiter| &waiter.key)
    }

    /// Takes the first waiting call of `account` and every other of its
    /// calls for the same runner; the account's next turn comes after
    /// every other account's.
    pub fn serve(&mut self, account: &AccountId) -> Vec<Waiter> {
        let Some(queue) = self.queues.get_mut(account) else {
            return Vec::new();
        };
        let Some(first) = queue.pop_front() else {
            return Vec::new();
        };
        let (same, rest): (VecDeque<Waiter>, VecDeque<Waiter>) =
            queue.drain(..).partition(|waiter| waiter.key == first.key);
        *queue = rest;
        let empty = queue.is_empty();
        self.turn.retain(|waiting| waiting != account);
        if empty {
            self.queues.remove(account);
        } else {
            self.turn.push_back(account.clone());
        }
        std::iter::once(first).chain(same).collect()
    }

    fn drop_account(&mut self, account: &AccountId) {
        self.queues.remove(account);
        self.turn.retain(|waiting| waiting != account);
    }
}

#[cfg(test)]
mod tests {
    use toolserver_domain::ToolId;

    use super::*;

    fn waiter(queue: &mut FairQueue, id: u64, key: &ReservationKey) {
        let (grant, _) = oneshot::channel();
        queue.push(Waiter {
            id,
            key: key.clone(),
            grant,
        });
    }

    fn key(account: &str) -> ReservationKey {
        ReservationKey::new(AccountId::parse(account).unwrap(), ToolId::generate())
    }

    #[test]
    fn accounts_take_turns_and_calls_for_one_runner_are_served_together() {
        let mut queue = FairQueue::default();
        let (a1, a2, b) = (key("a"), key("a"), key("b"));
        waiter(&mut queue, 1, &a1);
        waiter(&mut queue, 2, &a2);
        waiter(&mut queue, 3, &a1);
        waiter(&mut queue, 4, &b);
        let a = a1.account().clone();
        assert_eq!(queue.runners_wanted(&a), 2);
        let served: Vec<u64> = queue.serve(&a).iter().map(|w| w.id).collect();
        assert_eq!(served, [1, 3], "both calls for a1's runner");
        assert_eq!(queue.account_at(0), Some(b.account()), "b's turn now");
        assert_eq!(queue.first_key(&a), Some(&a2));
        assert!(queue.withdraw(b.account(), 4));
        assert!(!queue.withdraw(b.account(), 4), "already gone");
        assert_eq!(queue.accounts(), vec![a.clone()]);
        assert_eq!(queue.waiting(&a), 1);
        queue.serve(&a);
        assert!(queue.is_empty());
    }
}
