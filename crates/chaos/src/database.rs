//! One scratch database per run, created on the given Postgres server and
//! dropped at the end.

use sqlx::{Connection, PgConnection};

use crate::ChaosError;

/// A database made for one run.
pub struct ScratchDatabase {
    admin_url: String,
    name: String,
    /// The URL the servers use.
    pub url: String,
}

impl ScratchDatabase {
    /// Creates `toolserver_chaos_<pid>_<seed>` on the server of `admin_url`.
    pub async fn create(admin_url: &str, seed: u64) -> Result<Self, ChaosError> {
        let name = format!("toolserver_chaos_{}_{seed}", std::process::id());
        let mut url = url::Url::parse(admin_url)
            .map_err(|err| ChaosError::Setup(format!("the database URL: {err}")))?;
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
    pub async fn drop_now(self) -> Result<(), ChaosError> {
        let mut conn = PgConnection::connect(&self.admin_url).await?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await?;
        conn.close().await?;
        Ok(())
    }
}
