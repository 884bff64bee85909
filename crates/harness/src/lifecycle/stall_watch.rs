//! Whether this process could have heard its runners' pings. A task wakes
//! every quarter of the liveness interval and notes when it did; a gap
//! longer than the liveness interval (the process was paused, or its
//! runtime starved) is a stall. Silent runners are judged only while the
//! watch woke within the interval and no stall ended within the liveness
//! timeout, so pings this process missed while it could not answer never
//! fail a call. A stall the watch has not woken since is seen too: its last
//! waking is then older than the interval.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Notes this process's stalls; see the module docs.
pub(super) struct StallWatch {
    state: Mutex<Woken>,
    liveness_interval: Duration,
    liveness_timeout: Duration,
}

/// When the watch last woke, and from when pings count as heard.
struct Woken {
    last: Instant,
    heard_from: Instant,
}

impl StallWatch {
    /// A watch for runners that ping every `liveness_interval` and are
    /// judged silent after `liveness_timeout`.
    pub(super) fn new(liveness_interval: Duration, liveness_timeout: Duration) -> Self {
        let now = Instant::now();
        Self {
            state: Mutex::new(Woken {
                last: now,
                heard_from: now,
            }),
            liveness_interval,
            liveness_timeout,
        }
    }

    /// Whether every ping sent to this process up to now could have been
    /// heard: the watch woke within the liveness interval, and the last
    /// stall ended at least a liveness timeout ago.
    pub(super) fn heard_until_now(&self) -> bool {
        let now = Instant::now();
        let woken = self.woken();
        now.duration_since(woken.last) < self.liveness_interval && now >= woken.heard_from
    }

    /// Wakes every quarter of the liveness interval until `stop`.
    pub(super) async fn run(&self, stop: CancellationToken) {
        let period = (self.liveness_interval / 4).max(Duration::from_millis(1));
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => self.wake(),
            }
        }
    }

    /// Notes a waking, and a stall if the last one was too long ago.
    fn wake(&self) {
        let now = Instant::now();
        let mut woken = self.woken();
        let gap = now.duration_since(woken.last);
        if gap > self.liveness_interval {
            woken.heard_from = now + self.liveness_timeout;
            tracing::warn!(
                stalled_ms = gap.as_millis() as u64,
                "this process stalled and may not have heard its runners' pings; \
                 silent runners are judged again after the liveness timeout"
            );
        }
        woken.last = now;
    }

    fn woken(&self) -> std::sync::MutexGuard<'_, Woken> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_millis(300);
    const TIMEOUT: Duration = Duration::from_secs(2);

    /// Lets the watch's task run at the paused clock's current instant.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_is_known_before_the_watch_wakes_and_judged_again_after_the_timeout() {
        let watch = std::sync::Arc::new(StallWatch::new(INTERVAL, TIMEOUT));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (watch, stop) = (watch.clone(), stop.clone());
            async move { watch.run(stop).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(watch.heard_until_now(), "a watch that keeps waking hears");

        // The clock moves on while the watch's task cannot run: a pause.
        let stalled_at = Instant::now();
        tokio::time::advance(Duration::from_secs(70)).await;
        assert!(
            !watch.heard_until_now(),
            "a stall is known before the watch wakes from it"
        );
        settle().await;
        assert!(watch.woken().last > stalled_at, "the watch woke");
        assert!(!watch.heard_until_now(), "the stall ended just now");

        tokio::time::sleep(TIMEOUT - INTERVAL).await;
        assert!(!watch.heard_until_now(), "within the liveness timeout");
        tokio::time::sleep(INTERVAL * 2).await;
        assert!(
            watch.heard_until_now(),
            "a liveness timeout after the stall"
        );
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn gaps_within_the_liveness_interval_are_no_stall() {
        let watch = StallWatch::new(INTERVAL, TIMEOUT);
        for _ in 0..5 {
            tokio::time::advance(INTERVAL - Duration::from_millis(1)).await;
            watch.wake();
            assert!(watch.heard_until_now());
        }
    }
}
