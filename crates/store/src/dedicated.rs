//! A few connections kept outside the pool for the statements every turn
//! makes (its start and its end). The pool sends a round trip to check each
//! connection it gets back (sqlx does so on every release, and no option
//! turns it off); on a busy server those checks woke Postgres about once
//! per statement for nothing. A connection of this set goes back as it is,
//! once its statement succeeded; one whose statement failed or was
//! abandoned midway is closed instead, so no transaction or half-read
//! answer is left on it. When every connection of the set is in use, a
//! statement takes one from the pool, as any other does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, PgPool, Postgres};

use crate::{StoreError, Unpooled};

/// How the connections name themselves to Postgres (as seen in
/// `pg_stat_activity`).
pub const DEDICATED_APPLICATION_NAME: &str = "toolserver-turns";

/// How many connections a set keeps, and when it checks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedicatedSettings {
    /// Most connections open at once (0: every statement uses the pool).
    pub connections: usize,
    /// How long a connection may sit idle and still be used without a
    /// round trip to check it is alive (as the pool's
    /// [`PoolSettings::ping_idle`](crate::PoolSettings::ping_idle)).
    pub ping_idle: Duration,
}

impl DedicatedSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        connections: 4,
        ping_idle: Duration::from_secs(1),
    };
}

impl Default for DedicatedSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The set: connections opened when first needed, to the pool's database
/// with the pool's options.
pub struct DedicatedConnections {
    pool: PgPool,
    unpooled: Unpooled,
    settings: DedicatedSettings,
    slots: Mutex<Slots>,
}

/// The connections not in use, and how many are open in all.
#[derive(Default)]
struct Slots {
    idle: Vec<(PgConnection, Instant)>,
    open: usize,
}

impl DedicatedConnections {
    /// A set for statements otherwise run on `pool`.
    pub fn new(pool: PgPool, settings: DedicatedSettings) -> Self {
        Self {
            unpooled: Unpooled::new(&pool, DEDICATED_APPLICATION_NAME),
            pool,
            settings,
            slots: Mutex::default(),
        }
    }

    /// A connection for one piece of work: one of the set (checked first
    /// if it sat idle past `ping_idle`, opened if none is yet), or, when
    /// all are in use or one cannot be opened, one of the pool.
    pub async fn take(&self) -> Result<Held<'_>, StoreError> {
        loop {
            let (slot, idle) = match self.reserve() {
                Some(reserved) => reserved,
                None => return Ok(Held(Taken::Pooled(self.pool.acquire().await?))),
            };
            match idle {
                Some((mut connection, since)) => {
                    if since.elapsed() < self.settings.ping_idle || connection.ping().await.is_ok()
                    {
                        return Ok(Held(Taken::Dedicated(connection, slot)));
                    }
                }
                None => match self.unpooled.open().await {
                    Ok(connection) => return Ok(Held(Taken::Dedicated(connection, slot))),
                    Err(err) => {
                        tracing::debug!(error = %err, "could not open a dedicated connection; using the pool");
                        drop(slot);
                        return Ok(Held(Taken::Pooled(self.pool.acquire().await?)));
                    }
                },
            }
        }
    }

    /// A place in the set, with an idle connection if there is one; `None`
    /// when every place is taken.
    fn reserve(&self) -> Option<(Slot<'_>, Option<(PgConnection, Instant)>)> {
        let mut slots = self.lock();
        if let Some(idle) = slots.idle.pop() {
            return Some((Slot(self), Some(idle)));
        }
        if slots.open >= self.settings.connections {
            return None;
        }
        slots.open += 1;
        Some((Slot(self), None))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A place in the set, taken while its connection is in use; given up
/// (its connection closed) when dropped.
struct Slot<'a>(&'a DedicatedConnections);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut slots = self.0.lock();
        slots.open = slots.open.saturating_sub(1);
    }
}

/// A connection taken for one piece of work. [`Held::done`] gives it back
/// for the next; dropped otherwise (its work abandoned midway), one of the
/// set is closed and one of the pool goes back to the pool.
pub struct Held<'a>(Taken<'a>);

enum Taken<'a> {
    /// One of the set, in its place.
    Dedicated(PgConnection, Slot<'a>),
    /// One of the pool.
    Pooled(PoolConnection<Postgres>),
}

impl Held<'_> {
    /// The connection to run statements on.
    pub fn connection(&mut self) -> &mut PgConnection {
        match &mut self.0 {
            Taken::Dedicated(connection, _) => connection,
            Taken::Pooled(connection) => connection,
        }
    }

    /// Gives the connection back after work that ended with `outcome`: one
    /// of the set as it is, for the next statement, unless the work failed
    /// in a way that may have left the connection broken (anything but a
    /// refusal Postgres answered: a conflict or a missing row).
    pub fn done<T>(self, outcome: &Result<T, StoreError>) {
        match outcome {
            Ok(_) | Err(StoreError::NotFound | StoreError::Conflict { .. }) => self.give_back(),
            Err(StoreError::Unavailable(_) | StoreError::Other(_)) => {}
        }
    }

    fn give_back(self) {
        match self.0 {
            Taken::Dedicated(connection, slot) => {
                let set = slot.0;
                std::mem::forget(slot);
                set.lock().idle.push((connection, Instant::now()));
            }
            Taken::Pooled(connection) => drop(connection),
        }
    }
}
