//! The tool lists MCP servers gave lately, per account and way of reaching
//! each. One listing runs at a time per key, in its own task; every save or
//! turn that needs it waits for it a while ([`ListTimings::wait`]) and goes
//! on without it after that, while the listing runs on to its deadline and
//! keeps what it found for the next one. A list is kept for
//! [`ListTimings::keep`], a failure for [`ListTimings::retry_after`], so a
//! slow or unreachable server costs a save or a turn at most the wait, and
//! is not asked again by every one of them.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::Tool;
use tokio::sync::watch;
use tokio::time::Instant;

/// A server's tools, or why it could not be listed.
pub(crate) type Listing = Result<Arc<Vec<Tool>>, String>;

/// How long lists are kept, and waited for.
#[derive(Clone, Copy, Debug)]
pub struct ListTimings {
    /// How long a list is kept before the server is asked again.
    pub keep: Duration,
    /// How long a save or a turn waits for a listing; one still running
    /// then goes on, and its tools are offered from the next turn.
    pub wait: Duration,
    /// How long a failed listing stands before the server is asked again.
    pub retry_after: Duration,
    /// Longest a listing, connecting included, may run.
    pub deadline: Duration,
}

impl ListTimings {
    /// The setting's default time a list is kept.
    pub const DEFAULT_KEEP: Duration = Duration::from_secs(60);
    /// The setting's default wait for a listing.
    pub const DEFAULT_WAIT: Duration = Duration::from_millis(3000);
    /// The setting's default time a failed listing stands.
    pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(10);

    /// The default timings, a listing running up to `deadline`.
    pub fn with_deadline(deadline: Duration) -> Self {
        Self {
            keep: Self::DEFAULT_KEEP,
            wait: Self::DEFAULT_WAIT,
            retry_after: Self::DEFAULT_RETRY_AFTER,
            deadline,
        }
    }

    fn stands(&self, listing: &Listing) -> Duration {
        match listing {
            Ok(_) => self.keep,
            Err(_) => self.retry_after,
        }
    }
}

enum Entry {
    Settled {
        at: Instant,
        listing: Listing,
    },
    Running {
        since: Instant,
        done: watch::Receiver<Option<Listing>>,
    },
}

impl Entry {
    /// Whether the entry still answers: a settled listing while it stands,
    /// a running one until its deadline (past it, its task is gone).
    fn is_live(&self, timings: &ListTimings) -> bool {
        match self {
            Self::Settled { at, listing } => at.elapsed() < timings.stands(listing),
            Self::Running { since, .. } => since.elapsed() <= timings.deadline,
        }
    }
}

type Entries = Arc<Mutex<HashMap<String, Entry>>>;

/// The kept and running listings.
pub(super) struct ToolLists {
    timings: ListTimings,
    entries: Entries,
}

impl ToolLists {
    /// No lists yet, kept and waited for by `timings`.
    pub(super) fn new(timings: ListTimings) -> Self {
        Self {
            timings,
            entries: Arc::default(),
        }
    }

    /// The listing kept under `key` while it stands; else the one running,
    /// or one `list` starts, waited for [`ListTimings::wait`].
    pub(super) async fn get<F>(&self, key: String, list: impl FnOnce() -> F) -> Listing
    where
        F: Future<Output = Listing> + Send + 'static,
    {
        let mut done = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            match entries.get(&key) {
                Some(entry @ Entry::Settled { listing, .. }) if entry.is_live(&self.timings) => {
                    return listing.clone()
                }
                Some(entry @ Entry::Running { done, .. }) if entry.is_live(&self.timings) => {
                    done.clone()
                }
                _ => {
                    let (tell, done) = watch::channel(None);
                    let running = Entry::Running {
                        since: Instant::now(),
                        done: done.clone(),
                    };
                    entries.insert(key.clone(), running);
                    let settling = settle(self.entries.clone(), key, self.timings, list(), tell);
                    tokio::spawn(settling);
                    done
                }
            }
        };
        let wait = self.timings.wait;
        let waited = tokio::time::timeout(wait, done.wait_for(Option::is_some))
            .await
            .map(|settled| settled.map(|listing| listing.clone()));
        match waited {
            Ok(Ok(listing)) => {
                listing.unwrap_or_else(|| Err("the listing gave nothing".to_owned()))
            }
            Ok(Err(_)) => Err("the listing stopped before it finished".to_owned()),
            Err(_) => Err(format!(
                "no tool list within {} ms; its tools are offered once it answers",
                wait.as_millis()
            )),
        }
    }
}

/// Runs `listing` to its deadline, keeps what it gave, and tells the
/// waiters.
async fn settle(
    entries: Entries,
    key: String,
    timings: ListTimings,
    listing: impl Future<Output = Listing>,
    tell: watch::Sender<Option<Listing>>,
) {
    let listing = tokio::time::timeout(timings.deadline, listing)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "listing took longer than {} ms",
                timings.deadline.as_millis()
            ))
        });
    {
        let mut entries = entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, entry| entry.is_live(&timings));
        let settled = Entry::Settled {
            at: Instant::now(),
            listing: listing.clone(),
        };
        entries.insert(key, settled);
    }
    tell.send_replace(Some(listing));
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn timings() -> ListTimings {
        ListTimings {
            keep: Duration::from_secs(60),
            wait: Duration::from_millis(100),
            retry_after: Duration::from_secs(10),
            deadline: Duration::from_secs(30),
        }
    }

    fn counted(
        asked: &Arc<AtomicUsize>,
        gate: watch::Receiver<bool>,
        answer: Listing,
    ) -> impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = Listing> + Send>> {
        let asked = asked.clone();
        move || {
            asked.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let mut gate = gate;
                let _ = gate.wait_for(|open| *open).await;
                answer
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_listing_past_the_wait_runs_on_once_and_is_kept_for_the_next_caller() {
        let lists = ToolLists::new(timings());
        let asked = Arc::new(AtomicUsize::new(0));
        let (open, gate) = watch::channel(false);
        let first = lists
            .get(
                "k".into(),
                counted(&asked, gate.clone(), Ok(Arc::default())),
            )
            .await;
        assert!(first.unwrap_err().contains("within 100 ms"));
        let second = lists
            .get(
                "k".into(),
                counted(&asked, gate.clone(), Ok(Arc::default())),
            )
            .await;
        assert!(
            second.is_err(),
            "still running: waited on, not started again"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        open.send_replace(true);
        tokio::task::yield_now().await;
        let third = lists
            .get("k".into(), counted(&asked, gate, Ok(Arc::default())))
            .await;
        assert!(third.is_ok());
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_stands_until_retry_after_then_the_server_is_asked_again() {
        let lists = ToolLists::new(timings());
        let asked = Arc::new(AtomicUsize::new(0));
        let (_open, gate) = watch::channel(true);
        let failed = || counted(&asked, gate.clone(), Err("refused".to_owned()));
        assert_eq!(
            lists.get("k".into(), failed()).await.unwrap_err(),
            "refused"
        );
        assert_eq!(
            lists.get("k".into(), failed()).await.unwrap_err(),
            "refused"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            lists.get("k".into(), failed()).await.unwrap_err(),
            "refused"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_listing_past_its_deadline_fails_and_frees_the_key() {
        let lists = ToolLists::new(timings());
        let asked = Arc::new(AtomicUsize::new(0));
        let (_never, gate) = watch::channel(false);
        assert!(lists
            .get(
                "k".into(),
                counted(&asked, gate.clone(), Ok(Arc::default()))
            )
            .await
            .is_err());
        tokio::time::advance(Duration::from_secs(31)).await;
        tokio::task::yield_now().await;
        let late = lists
            .get("k".into(), counted(&asked, gate, Ok(Arc::default())))
            .await;
        assert_eq!(late.unwrap_err(), "listing took longer than 30000 ms");
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }
}
