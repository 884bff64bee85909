//! The tools this process called lately, with their input schemas compiled,
//! so a warm call reads nothing from Postgres before it reaches its runner.
//!
//! An entry is trusted only while this process listens for changes: every
//! update or delete of a tool notifies `toolserver_tools` with its id (a
//! trigger on `tools`, so cascades count too), and the listener drops that
//! entry (`listener.rs`). A change made through this process drops its
//! entry at once, before the change is answered. While the listener is not
//! connected nothing is cached or served from the cache, and everything
//! cached before is dropped when it connects again (notices may have been
//! missed). A read that raced a change is not kept: every drop bumps a
//! generation, and a read is stored only if none happened since it began.

mod listener;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::PgPool;
use toolserver_domain::{AccountId, ToolId};
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
    capacity: usize,
    entries: Mutex<HashMap<ToolId, Arc<CachedTool>>>,
    generation: AtomicU64,
    listening: AtomicBool,
    /// The listener task, stopped with the cache.
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl ToolCache {
    /// A cache of at most `capacity` tools read from `pool` (0: nothing is
    /// kept). Serves nothing until [`Self::spawn_listener`] is connected.
    pub fn new(pool: PgPool, capacity: usize) -> Self {
        Self {
            pool,
            capacity,
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            listener: Mutex::new(None),
        }
    }

    /// `account`'s tool `id`, from the cache when current, else read.
    /// Another account's tool is [`StoreError::NotFound`].
    pub async fn get(
        &self,
        account: &AccountId,
        id: ToolId,
    ) -> Result<Arc<CachedTool>, StoreError> {
        if let Some(cached) = self.cached(id) {
            return match &cached.account == account {
                true => Ok(cached),
                false => Err(StoreError::NotFound),
            };
        }
        let generation = self.generation.load(Ordering::Acquire);
        let record = tools::get(&self.pool, account, id).await?;
        let validator = record.input_schema.compile();
        let read = Arc::new(CachedTool {
            account: account.clone(),
            record,
            validator,
        });
        self.keep(id, &read, generation);
        Ok(read)
    }

    /// Drops what is cached of tool `id`.
    pub fn invalidate(&self, id: ToolId) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.remove(&id);
    }

    /// Drops everything cached.
    pub fn invalidate_all(&self) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    /// How many tools are cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn cached(&self, id: ToolId) -> Option<Arc<CachedTool>> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(&id).cloned()
    }

    /// Stores `read` unless the cache is off, not listening, or something
    /// was dropped since `generation`; a full cache makes room by dropping
    /// an entry.
    fn keep(&self, id: ToolId, read: &Arc<CachedTool>, generation: u64) {
        if self.capacity == 0 || !self.listening.load(Ordering::Acquire) {
            return;
        }
        let mut entries = self.lock();
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if entries.len() >= self.capacity && !entries.contains_key(&id) {
            let evicted = entries.keys().next().copied();
            if let Some(evicted) = evicted {
                entries.remove(&evicted);
            }
        }
        entries.insert(id, read.clone());
    }

    fn set_listening(&self, listening: bool) {
        let _entries = self.lock();
        self.listening.store(listening, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ToolId, Arc<CachedTool>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ToolCache {
    fn drop(&mut self) {
        let listener = self
            .listener
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(listener) = listener {
            listener.abort();
        }
    }
}
