//! Statements per turn, from `pg_stat_statements` (Postgres must preload
//! it: `scripts/test-services.sh` sees to that).

use sqlx::{Connection, PgConnection};

use crate::plan::{STATEMENTS_SETTLE, TOP_STATEMENTS};

/// Waits for the writes a server holds for a moment after a turn (the
/// ledger's) to be done, so they count in the turns that made them.
pub(crate) async fn settle() {
    tokio::time::sleep(STATEMENTS_SETTLE).await;
}

/// The bench's connection to the scratch database, where it reads and
/// resets the statement counts of the servers' connections.
pub(crate) struct Statements {
    conn: PgConnection,
    database: sqlx::postgres::types::Oid,
    /// The scratch database's name.
    pub(crate) name: String,
}

/// The statements run in the scratch database between a reset and a
/// reading: their calls in all, and each statement's text and calls, most
/// called first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    pub(crate) calls: i64,
    pub(crate) by_statement: Vec<(String, i64)>,
}

impl Statements {
    /// Connects to the scratch database at `url` and creates the extension
    /// there.
    pub(crate) async fn connect(url: &str) -> Self {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut conn)
            .await
            .expect("pg_stat_statements (run scripts/test-services.sh to preload it)");
        let (database, name) = sqlx::query_as(
            "SELECT oid, datname::text FROM pg_database WHERE datname = current_database()",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        Self {
            conn,
            database,
            name,
        }
    }

    /// Forgets every count so far.
    pub(crate) async fn reset(&mut self) {
        sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&mut self.conn)
            .await
            .unwrap();
    }

    /// The counts since the last reset of the statements run in the
    /// scratch database but the bench's own (those naming the extension's
    /// view or functions).
    pub(crate) async fn read(&mut self) -> Counts {
        let by_statement: Vec<(String, i64)> = sqlx::query_as(
            "SELECT query, calls FROM pg_stat_statements
             WHERE dbid = $1 AND query NOT LIKE '%pg_stat_statements%'
             ORDER BY calls DESC, query",
        )
        .bind(self.database)
        .fetch_all(&mut self.conn)
        .await
        .unwrap();
        Counts {
            calls: by_statement.iter().map(|(_, calls)| calls).sum(),
            by_statement,
        }
    }
}

impl Counts {
    /// Statements per turn over `turns` turns.
    pub(crate) fn per_turn(&self, turns: usize) -> f64 {
        self.calls as f64 / turns as f64
    }

    /// Prints the `TOP_STATEMENTS` most called statements, per turn over
    /// `turns` turns, their text on one line and cut short.
    pub(crate) fn print_top(&self, turns: usize) {
        println!(
            "top statements by calls per turn ({:.2} per turn in all):",
            self.per_turn(turns)
        );
        for (query, calls) in self.by_statement.iter().take(TOP_STATEMENTS) {
            let text = query.split_whitespace().collect::<Vec<_>>().join(" ");
            let cut: String = text.chars().take(110).collect();
            let ellipsis = if cut.len() < text.len() { "…" } else { "" };
            println!("  {:>6.2}  {cut}{ellipsis}", *calls as f64 / turns as f64);
        }
    }
}
