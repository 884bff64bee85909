//! Storage errors, classified so the HTTP boundary can map each to a status.

/// What went wrong talking to Postgres.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist for this account.
    #[error("not found")]
    NotFound,
    /// A named unique constraint refused the write.
    #[error("conflict on {constraint}")]
    Conflict {
        /// The constraint that was violated, e.g. `tools_account_name_key`.
        constraint: String,
    },
    /// No connection could be had in time, or the database is unreachable.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// Any other database failure (a bug or an unexpected state).
    #[error("database error: {0}")]
    Other(#[source] sqlx::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            sqlx::Error::RowNotFound => Self::NotFound,
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                Self::Unavailable(err)
            }
            sqlx::Error::Database(db) if db.is_unique_violation() => Self::Conflict {
                constraint: db.constraint().unwrap_or("unknown").to_owned(),
            },
            // A write that refers to a row deleted meanwhile (a turn
            // starting on an agent being deleted): the referent is gone.
            sqlx::Error::Database(db) if db.is_foreign_key_violation() => Self::NotFound,
            _ => Self::Other(err),
        }
    }
}

/// Runs `attempt` again, up to three times in all, while Postgres picks it
/// as a deadlock's victim (its transaction rolled back, so a retry is safe).
pub(crate) async fn retrying_deadlocks<T, F, Fut>(mut attempt: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    const ATTEMPTS: usize = 3;
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(StoreError::Other(err)) if tried < ATTEMPTS && is_deadlock(&err) => tried += 1,
            outcome => return outcome,
        }
    }
}

fn is_deadlock(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("40P01"))
}
