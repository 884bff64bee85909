//! A token bucket: `per_minute` tokens a minute, at most `burst` saved up.

use std::time::{Duration, Instant};

/// One rate limit's state.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens.
    pub fn full(burst: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes one token, or says how long until one is there (forever, as
    /// an hour, when the rate is zero).
    pub fn take(&mut self, per_minute: u32, burst: u32, now: Instant) -> Result<(), Duration> {
        self.refill(per_minute, burst, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if per_minute == 0 || burst == 0 {
            return Err(Duration::from_secs(3600));
        }
        let missing = 1.0 - self.tokens;
        Err(Duration::from_secs_f64(
            missing * 60.0 / f64::from(per_minute),
        ))
    }

    /// Whole tokens left now.
    pub fn remaining(&mut self, per_minute: u32, burst: u32, now: Instant) -> u32 {
        self.refill(per_minute, burst, now);
        self.tokens.floor() as u32
    }

    /// Whether the bucket is full (nothing to remember about it).
    pub fn is_full(&mut self, per_minute: u32, burst: u32, now: Instant) -> bool {
        self.refill(per_minute, burst, now);
        self.tokens >= f64::from(burst)
    }

    fn refill(&mut self, per_minute: u32, burst: u32, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(per_minute) / 60.0).min(f64::from(burst));
        self.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(3, start);
        for _ in 0..3 {
            bucket.take(60, 3, start).unwrap();
        }
        let wait = bucket.take(60, 3, start).unwrap_err();
        assert!(wait > Duration::from_millis(990) && wait <= Duration::from_secs(1));
        let later = start + Duration::from_secs(1);
        bucket.take(60, 3, later).unwrap();
        assert_eq!(bucket.remaining(60, 3, later), 0);
    }

    #[test]
    fn it_never_saves_more_than_the_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(2, start);
        let much_later = start + Duration::from_secs(3600);
        assert_eq!(bucket.remaining(60, 2, much_later), 2);
        assert!(bucket.is_full(60, 2, much_later));
    }

    #[test]
    fn a_zero_rate_refuses_for_an_hour() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(0, start);
        assert_eq!(bucket.take(0, 0, start), Err(Duration::from_secs(3600)));
    }
}
