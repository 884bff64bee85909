//! What accounts' runners used per period (a UTC calendar month): CPU time
//! and egress bytes. The executor counts them since this process started;
//! every flush adds what grew since the last one to the period's row in
//! Postgres, so the row adds up every process's share. A reading adds what
//! this process has not flushed yet; a process killed outright loses at most
//! one flush interval of its own counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::PgPool;
use time::{Date, OffsetDateTime};
use toolserver_domain::AccountId;
use toolserver_sandbox::{Executor, RunnerUsage};
use toolserver_store::account_usage::{self, RunnerUse};
use toolserver_store::StoreError;

/// Runner usage per account and period.
pub struct UsageMeter {
    pool: PgPool,
    executor: Arc<dyn Executor>,
    /// Per account, the totals already written.
    flushed: Mutex<HashMap<AccountId, RunnerUsage>>,
    /// Serialises flushes, so no delta is written twice.
    flushing: tokio::sync::Mutex<()>,
}

impl UsageMeter {
    /// A meter of `executor`'s counts, kept in `pool`'s database.
    pub fn new(pool: PgPool, executor: Arc<dyn Executor>) -> Self {
        Self {
            pool,
            executor,
            flushed: Mutex::new(HashMap::new()),
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    /// Writes what every account used since the last flush.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let period = period_start(OffsetDateTime::now_utc().date());
        for (account, total) in self.executor.usage_all() {
            let delta = self.unflushed(&account, total);
            if delta == RunnerUse::default() {
                continue;
            }
            account_usage::add(&self.pool, &account, period, delta).await?;
            self.flushed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(account, total);
        }
        Ok(())
    }

    /// What `account`'s runners used this period, and when it started.
    pub async fn this_period(&self, account: &AccountId) -> Result<(Date, RunnerUse), StoreError> {
        let period = period_start(OffsetDateTime::now_utc().date());
        let stored = account_usage::get(&self.pool, account, period).await?;
        let pending = self.unflushed(account, self.executor.usage(account));
        Ok((
            period,
            RunnerUse {
                cpu_ms: stored.cpu_ms + pending.cpu_ms,
                egress_bytes: stored.egress_bytes + pending.egress_bytes,
            },
        ))
    }

    /// Flushes every `every` until `self` is dropped.
    pub fn spawn_flusher(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let meter = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(meter) = meter.upgrade() else { return };
                if let Err(err) = meter.flush().await {
                    tracing::warn!(%err, "could not store runner usage; retrying at the next flush");
                }
            }
        })
    }

    /// What grew of `account`'s `total` since the last flush.
    fn unflushed(&self, account: &AccountId, total: RunnerUsage) -> RunnerUse {
        let flushed = self
            .flushed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(account)
            .copied()
            .unwrap_or_default();
        RunnerUse {
            cpu_ms: u64::try_from(total.cpu.saturating_sub(flushed.cpu).as_millis())
                .unwrap_or(u64::MAX),
            egress_bytes: total.egress_bytes.saturating_sub(flushed.egress_bytes),
        }
    }
}

/// The first day of `day`'s month: periods are UTC calendar months.
pub fn period_start(day: Date) -> Date {
    day.replace_day(1).unwrap_or(day)
}

/// The first day of the month after the period starting `start`.
pub fn period_end(start: Date) -> Date {
    let (year, month) = match start.month() {
        time::Month::December => (start.year() + 1, time::Month::January),
        month => (start.year(), month.next()),
    };
    Date::from_calendar_date(year, month, 1).unwrap_or(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::Month;

    fn date(year: i32, month: Month, day: u8) -> Date {
        Date::from_calendar_date(year, month, day).unwrap()
    }

    #[test]
    fn periods_are_calendar_months() {
        let november = date(2026, Month::November, 1);
        assert_eq!(period_start(date(2026, Month::November, 26)), november);
        assert_eq!(period_end(november), date(2026, Month::December, 1));
        assert_eq!(
            period_end(date(2026, Month::December, 1)),
            date(2027, Month::January, 1)
        );
    }
}
