//! Helpers of the load generators (`make bench`): a scratch database and
//! latency summaries.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

/// A database created for one run and dropped by [`ScratchDatabase::drop_now`].
pub struct ScratchDatabase {
    admin_url: String,
    name: String,
    /// URL of the scratch database.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates `toolserver_bench_<pid>_<tag>` on the server of `DATABASE_URL`.
    ///
    /// # Panics
    /// When `DATABASE_URL` is unset or the database cannot be created.
    pub async fn create(tag: &str) -> Self {
        let admin_url =
            std::env::var("DATABASE_URL").expect("DATABASE_URL must point at a Postgres server");
        Self::try_create(&admin_url, tag)
            .await
            .expect("create the scratch database")
    }

    /// Creates `toolserver_bench_<pid>_<tag>` on the server of `admin_url`
    /// (dropping a leftover of that name first).
    pub async fn try_create(admin_url: &str, tag: &str) -> Result<Self, sqlx::Error> {
        let name = format!("toolserver_bench_{}_{tag}", std::process::id());
        let mut url =
            url::Url::parse(admin_url).map_err(|err| sqlx::Error::Configuration(Box::new(err)))?;
        let mut conn = PgConnection::connect(admin_url).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        url.set_path(&name);
        Ok(Self {
            admin_url: admin_url.to_owned(),
            name,
            url: url.to_string(),
        })
    }

    /// Drops the database, closing what is still connected to it.
    ///
    /// # Panics
    /// When the database cannot be dropped.
    pub async fn drop_now(self) {
        self.try_drop().await.expect("drop the scratch database");
    }

    /// Drops the database, closing what is still connected to it.
    pub async fn try_drop(self) -> Result<(), sqlx::Error> {
        let mut conn = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await?;
        conn.close().await
    }
}

/// The `p` quantile (0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Prints n, p50, p90 and p99 of `samples` under `name`; returns (p50, p99).
pub fn summary(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "{name:<40} n={:<5} p50={:>8.3} ms  p90={:>8.3} ms  p99={:>8.3} ms",
        samples.len(),
        ms(p50),
        ms(percentile(&samples, 0.9)),
        ms(p99)
    );
    (p50, p99)
}

/// The server binary a benchmark runs: `TOOLSERVER_BIN` when set (another
/// build, e.g. an older one for a before/after comparison), else
/// `this_build` (the bench's `CARGO_BIN_EXE_toolserver`).
pub fn server_binary(this_build: &str) -> std::path::PathBuf {
    std::env::var_os("TOOLSERVER_BIN").map_or_else(|| this_build.into(), Into::into)
}
