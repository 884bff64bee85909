//! One bounded map of cached reads, served only while listening.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Values read from Postgres by key, kept while a listener vouches for
/// them (see the [module](super) documentation).
pub struct NotifiedMap<K, V> {
    capacity: usize,
    entries: Mutex<HashMap<K, V>>,
    generation: AtomicU64,
    listening: AtomicBool,
    reads: AtomicU64,
}

impl<K: Eq + Hash + Clone, V: Clone> NotifiedMap<K, V> {
    /// A map of at most `capacity` entries (0: nothing is kept), serving
    /// nothing until [`Self::set_listening`] says its listener is
    /// connected.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            reads: AtomicU64::new(0),
        }
    }

    /// The value of `key`: cached when current, else made by `read` (and
    /// kept unless something was dropped meanwhile). An error is not kept.
    pub async fn get_or_read<E, F, Fut>(&self, key: &K, read: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        if let Some(cached) = self.cached(key) {
            return Ok(cached);
        }
        let generation = self.generation.load(Ordering::Acquire);
        self.reads.fetch_add(1, Ordering::Relaxed);
        let value = read().await?;
        self.keep(key, &value, generation);
        Ok(value)
    }

    /// Drops `key`'s entry.
    pub fn invalidate(&self, key: &K) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.remove(key);
    }

    /// Drops every entry `drop` picks.
    pub fn invalidate_where(&self, mut drop: impl FnMut(&K, &V) -> bool) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.retain(|key, value| !drop(key, value));
    }

    /// Drops every entry.
    pub fn invalidate_all(&self) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
    }

    /// Records whether the listener is connected; everything cached is
    /// dropped either way.
    pub fn set_listening(&self, listening: bool) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.clear();
        self.listening.store(listening, Ordering::Release);
    }

    /// How many entries are cached.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many values were read rather than served from the map.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn cached(&self, key: &K) -> Option<V> {
        if !self.listening.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(key).cloned()
    }

    /// Stores `value` unless the map is off, not listening, or something
    /// was dropped since `generation`; a full map makes room by dropping
    /// an entry.
    fn keep(&self, key: &K, value: &V, generation: u64) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.lock();
        if !self.listening.load(Ordering::Acquire)
            || self.generation.load(Ordering::Acquire) != generation
        {
            return;
        }
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            let evicted = entries.keys().next().cloned();
            if let Some(evicted) = evicted {
                entries.remove(&evicted);
            }
        }
        entries.insert(key.clone(), value.clone());
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, V>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(map: &NotifiedMap<u32, u32>, key: u32, value: u32) -> u32 {
        map.get_or_read(&key, || async { Ok::<_, ()>(value) })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn serves_only_while_listening() {
        let map = NotifiedMap::new(8);
        assert_eq!(read(&map, 1, 10).await, 10);
        assert_eq!(
            read(&map, 1, 11).await,
            11,
            "nothing is kept before listening"
        );
        map.set_listening(true);
        assert_eq!(read(&map, 1, 12).await, 12);
        assert_eq!(read(&map, 1, 13).await, 12, "served from the map");
        assert_eq!(map.reads(), 3);
        map.set_listening(false);
        assert!(map.is_empty());
        assert_eq!(read(&map, 1, 14).await, 14);
    }

    #[tokio::test]
    async fn a_read_that_raced_a_drop_is_not_kept() {
        let map = NotifiedMap::new(8);
        map.set_listening(true);
        let raced = map
            .get_or_read(&1, || async {
                map.invalidate(&2);
                Ok::<_, ()>(10)
            })
            .await;
        assert_eq!(raced, Ok(10));
        assert!(map.is_empty());
    }

    #[tokio::test]
    async fn stays_within_its_capacity() {
        let map = NotifiedMap::new(2);
        map.set_listening(true);
        for key in 0..5 {
            read(&map, key, key).await;
        }
        assert_eq!(map.len(), 2);
        map.invalidate_where(|key, _| *key == 4);
        assert!(map.len() <= 1);
    }
}
