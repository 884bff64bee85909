//! The counts of a run, printed as
//! `trials=N lost=L duplicated=D stuck=S leaked=K misordered=M
//! unrecorded=U` and a line of figures.

use std::fmt;
use std::time::Duration;

/// What a run found. A turn counts once per kind of problem it has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Trials run.
    pub trials: usize,
    /// Turns that lost work (see [`crate::checks`]), failed turns included.
    pub lost: usize,
    /// Turns with a pass run twice or something stored twice.
    pub duplicated: usize,
    /// Turns not terminal within the settle timeout after the restart.
    pub stuck: usize,
    /// Runner processes alive after their server died or stopped.
    pub leaked: usize,
    /// Conversations of back-to-back trials that do not read in the order
    /// things happened (see [`crate::order`]).
    pub misordered: usize,
    /// Turns whose launched calls the tool-call ledger misses or has wrong
    /// (see [`crate::ledger`]).
    pub unrecorded: usize,
    /// Back-to-back trials run.
    pub back_to_back: usize,
    /// Median time from a kill to the acceptance of the next turn on the
    /// conversation (back-to-back trials whose second turn was accepted).
    pub accept_p50: Duration,
    /// Longest such time.
    pub accept_max: Duration,
    /// Detached turns started.
    pub turns: usize,
    /// Async calls the model made in the turns' first passes.
    pub calls: usize,
    /// Turns that ended `failed` (also counted as lost).
    pub failed: usize,
    /// Model requests that repeated an `Idempotency-Key` (allowed retries).
    pub retries: usize,
    /// Model requests without an `Idempotency-Key`.
    pub unkeyed: usize,
    /// Planned calls that ended as errors without being launched.
    pub unlaunched: usize,
    /// Attempts of launched calls on the ledger.
    pub attempts: usize,
    /// Median time from a restart to the trial's last turn settling.
    pub settle_p50: Duration,
    /// Longest such time.
    pub settle_max: Duration,
    /// Servers that did not exit within the grace time after SIGTERM.
    pub unclean_stops: usize,
    /// Wall time of the run.
    pub wall: Duration,
}

impl Summary {
    /// Whether nothing was lost, duplicated, stuck, leaked or misordered.
    pub fn is_clean(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.stuck == 0
            && self.leaked == 0
            && self.misordered == 0
            && self.unrecorded == 0
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "trials={} lost={} duplicated={} stuck={} leaked={} misordered={} unrecorded={}",
            self.trials,
            self.lost,
            self.duplicated,
            self.stuck,
            self.leaked,
            self.misordered,
            self.unrecorded
        )?;
        write!(
            f,
            "turns={} calls={} ledger_attempts={} unlaunched_calls={} failed_turns={} model_retries={} \
             unkeyed_model_requests={} settle_p50_ms={} settle_max_ms={} back_to_back_trials={} \
             accept_after_kill_p50_ms={} accept_after_kill_max_ms={} unclean_stops={} wall_s={:.1}",
            self.turns,
            self.calls,
            self.attempts,
            self.unlaunched,
            self.failed,
            self.retries,
            self.unkeyed,
            self.settle_p50.as_millis(),
            self.settle_max.as_millis(),
            self.back_to_back,
            self.accept_p50.as_millis(),
            self.accept_max.as_millis(),
            self.unclean_stops,
            self.wall.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_is_the_counts() {
        let summary = Summary {
            trials: 3,
            stuck: 1,
            ..Summary::default()
        };
        let text = summary.to_string();
        assert_eq!(
            text.lines().next(),
            Some("trials=3 lost=0 duplicated=0 stuck=1 leaked=0 misordered=0 unrecorded=0")
        );
        assert!(!summary.is_clean());
        assert!(Summary::default().is_clean());
        let misordered = Summary {
            misordered: 1,
            ..Summary::default()
        };
        assert!(!misordered.is_clean());
        assert!(misordered.to_string().starts_with(
            "trials=0 lost=0 duplicated=0 stuck=0 leaked=0 misordered=1 unrecorded=0\n"
        ));
    }
}
