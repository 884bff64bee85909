//! The tools this process called lately, with their input schemas compiled,
//! so a warm call reads nothing from Postgres before it reaches its runner.
//!
//! Every update or delete of a tool notifies `toolserver_tools` with its id
//! (a trigger on `tools`, so cascades count too), and the listener drops
//! that entry (`listener.rs`); a change made through this process drops its
//! entry at once, before the change is answered. What is kept, and when it
//! is trusted, is [`toolserver_store::notified`]'s.

mod listener;

use std::sync::Arc;

use sqlx::PgPool;
use toolserver_domain::{AccountId, ToolId};
use toolserver_store::notified::NotifiedMap;
use toolserver_store::{tools, StoreError, ToolRecord};

/// A stored tool with its input schema compiled.
pub struct CachedTool {
    /// The owning account.
    pub account: AccountId,
    /// The tool as stored.
    pub record: ToolRecord,
    /// Its `inputSchema`, compiled; `Err` names why the stored schema no
    /// longer compiles.
    pub validator: Result<jsonschema::Validator, String>,
}

/// Recently called tools of every account, by id.
pub struct ToolCache {
    pool: PgPool,
    entries: NotifiedMap<ToolId, Arc<CachedTool>>,
}

impl ToolCache {
    /// A cache of at most `capacity` tools read from `pool` (0: nothing is
    /// kept). Serves nothing until the listener it follows
    /// ([`Self::follow`]) is connected.
    pub fn new(pool: PgPool, capacity: usize) -> Self {
        Self {
            pool,
            entries: NotifiedMap::new(capacity),
        }
    }

    /// `account`'s tool `id`, from the cache when current, else read.
    /// Another account's tool is [`StoreError::NotFound`].
    pub async fn get(
        &self,
        account: &AccountId,
        id: ToolId,
    ) -> Result<Arc<CachedTool>, StoreError> {
        let tool = self
            .entries
            .get_or_read(&id, || async {
                let record = tools::get(&self.pool, account, id).await?;
                let validator = record.input_schema.compile();
                Ok::<_, StoreError>(Arc::new(CachedTool {
                    account: account.clone(),
                    record,
                    validator,
                }))
            })
            .await?;
        match &tool.account == account {
            true => Ok(tool),
            false => Err(StoreError::NotFound),
        }
    }

    /// Drops what is cached of tool `id`.
    pub fn invalidate(&self, id: ToolId) {
        self.entries.invalidate(&id);
    }

    /// Drops everything cached.
    pub fn invalidate_all(&self) {
        self.entries.invalidate_all();
    }

    /// How many tools are cached.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
