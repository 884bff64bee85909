//! A conversation's messages as this process last saw them stored, and the
//! cache that keeps them between turns.
//!
//! Stored messages are named by their head (see
//! `toolserver_store::conversation_messages`): a turn that finds the head it
//! cached reads no message from Postgres, and its writes send only the
//! messages from the first one that differs from what is stored, so neither
//! what a turn reads nor what it writes grows with the conversation. The
//! messages are shared (`Arc`) between the cache, a turn's history and its
//! writes, so a turn copies none of them, and finds the ones it kept by
//! pointer before comparing any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use toolserver_domain::AccountId;
use toolserver_store::conversation_messages::MessageTail;

use crate::ui::UiMessage;

/// A conversation's messages as stored under one head, with the size of
/// each as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessages {
    head: Option<i64>,
    moved: bool,
    messages: Vec<Arc<UiMessage>>,
    sizes: Vec<usize>,
}

impl StoredMessages {
    /// The messages stored under `head`; `moved` says whether they are rows
    /// already (otherwise the next write writes them whole).
    pub fn parse(head: i64, moved: bool, values: Vec<Value>) -> Result<Self, serde_json::Error> {
        let sizes = values.iter().map(|value| value.to_string().len()).collect();
        let messages = values
            .into_iter()
            .map(|value| serde_json::from_value(value).map(Arc::new))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            head: Some(head),
            moved,
            messages,
            sizes,
        })
    }

    /// No message, under no head: what a turn assumes of a conversation
    /// this process has not seen (as if it were new).
    pub fn none() -> Self {
        Self {
            head: None,
            moved: true,
            messages: Vec::new(),
            sizes: Vec::new(),
        }
    }

    /// The head these messages are stored under (`None`: assumed, not
    /// read).
    pub fn head(&self) -> Option<i64> {
        self.head
    }

    /// The messages in order.
    pub fn messages(&self) -> &[Arc<UiMessage>] {
        &self.messages
    }

    /// What writing `next` in their place takes: the messages from the
    /// first that differs on (all of them when not moved yet).
    pub fn write_of(&self, next: Vec<Arc<UiMessage>>) -> Result<PendingWrite, serde_json::Error> {
        let kept = match self.moved {
            true => self
                .messages
                .iter()
                .zip(&next)
                .take_while(|(stored, new)| Arc::ptr_eq(stored, new) || stored == new)
                .count(),
            false => 0,
        };
        let texts = next[kept..]
            .iter()
            .map(|message| serde_json::to_string(&**message))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sizes = self.sizes[..kept].to_vec();
        sizes.extend(texts.iter().map(String::len));
        Ok(PendingWrite {
            tail: MessageTail {
                from: kept,
                total: next.len(),
                messages: texts,
            },
            messages: next,
            sizes,
        })
    }
}

/// A write of a conversation's messages, prepared against what is stored.
#[derive(Debug, Clone)]
pub struct PendingWrite {
    tail: MessageTail,
    messages: Vec<Arc<UiMessage>>,
    sizes: Vec<usize>,
}

impl PendingWrite {
    /// What the write sends.
    pub fn tail(&self) -> &MessageTail {
        &self.tail
    }

    /// The size of the whole conversation after the write as one JSON
    /// array.
    pub fn json_size(&self) -> usize {
        let separators = self.sizes.len().saturating_sub(1);
        self.sizes.iter().sum::<usize>() + separators + 2
    }

    /// How many messages the conversation has after the write.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the conversation has no message after the write.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages as stored once the write went through under `head`.
    pub fn stored(self, head: i64) -> StoredMessages {
        StoredMessages {
            head: Some(head),
            moved: true,
            messages: self.messages,
            sizes: self.sizes,
        }
    }
}

/// The conversations whose messages this process stored or read last,
/// keyed by account and conversation, up to a total size in bytes (past
/// it, entries go in no particular order). An entry is used only while its
/// head is the stored one, so it can be stale but never wrong.
pub struct MessageCache {
    budget: usize,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_conversation: HashMap<(AccountId, String), Arc<StoredMessages>>,
    bytes: usize,
}

impl MessageCache {
    /// A cache of at most `budget` bytes of messages (0 keeps nothing).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            entries: Mutex::new(Entries::default()),
        }
    }

    /// The cached messages of `account`'s conversation `id`, if any.
    pub fn get(&self, account: &AccountId, id: &str) -> Option<Arc<StoredMessages>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .by_conversation
            .get(&(account.clone(), id.to_owned()))
            .cloned()
    }

    /// Keeps `stored` as `account`'s conversation `id`, dropping others
    /// while the cache is over its budget.
    pub fn put(&self, account: &AccountId, id: &str, stored: Arc<StoredMessages>) {
        let size = size_of(&stored);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (account.clone(), id.to_owned());
        if let Some(old) = entries.by_conversation.remove(&key) {
            entries.bytes -= size_of(&old);
        }
        if size > self.budget {
            return;
        }
        while entries.bytes + size > self.budget {
            let Some(evicted) = entries.by_conversation.keys().next().cloned() else {
                break;
            };
            if let Some(old) = entries.by_conversation.remove(&evicted) {
                entries.bytes -= size_of(&old);
            }
        }
        entries.bytes += size;
        entries.by_conversation.insert(key, stored);
    }

    /// Forgets `account`'s conversation `id`.
    pub fn forget(&self, account: &AccountId, id: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = entries
            .by_conversation
            .remove(&(account.clone(), id.to_owned()))
        {
            entries.bytes -= size_of(&old);
        }
    }
}

/// The bytes an entry counts for: its messages' JSON size.
fn size_of(stored: &StoredMessages) -> usize {
    stored.sizes.iter().sum::<usize>() + stored.sizes.len()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(id: &str, text: &str) -> Value {
        json!({"id": id, "role": "user", "parts": [{"type": "text", "text": text}]})
    }

    fn parsed(values: &[Value]) -> Vec<Arc<UiMessage>> {
        values
            .iter()
            .map(|value| Arc::new(serde_json::from_value(value.clone()).unwrap()))
            .collect()
    }

    #[test]
    fn a_write_sends_the_messages_from_the_first_that_changed() {
        let before = [message("a", "one"), message("b", "two")];
        let stored = StoredMessages::parse(7, true, before.to_vec()).unwrap();
        let after = [
            message("a", "one"),
            message("b", "2"),
            message("c", "three"),
        ];
        let write = stored.write_of(parsed(&after)).unwrap();
        assert_eq!(write.tail().from, 1);
        assert_eq!(write.tail().total, 3);
        assert_eq!(write.tail().messages.len(), 2);
        assert_eq!(
            write.json_size(),
            serde_json::to_string(&after.to_vec()).unwrap().len()
        );
        assert_eq!(write.stored(8).head(), Some(8));
    }

    #[test]
    fn a_write_keeps_the_stored_messages_shared_not_copied() {
        let before = [message("a", "one"), message("b", "two")];
        let stored = StoredMessages::parse(7, true, before.to_vec()).unwrap();
        let mut next = stored.messages().to_vec();
        next.extend(parsed(&[message("c", "three")]));
        let written = stored.write_of(next).unwrap().stored(8);
        assert_eq!(written.messages().len(), 3);
        for (kept, shared) in stored.messages().iter().zip(written.messages()) {
            assert!(Arc::ptr_eq(kept, shared));
        }
    }

    #[test]
    fn messages_not_moved_yet_are_written_whole() {
        let before = [message("a", "one")];
        let stored = StoredMessages::parse(0, false, before.to_vec()).unwrap();
        let write = stored.write_of(parsed(&before)).unwrap();
        assert_eq!(write.tail().from, 0);
        assert_eq!(write.tail().messages.len(), 1);
    }

    #[test]
    fn a_shorter_conversation_keeps_only_its_own_messages() {
        let before = [message("a", "one"), message("b", "two")];
        let stored = StoredMessages::parse(3, true, before.to_vec()).unwrap();
        let write = stored.write_of(parsed(&before[..1])).unwrap();
        assert_eq!((write.tail().from, write.tail().total), (1, 1));
        assert!(write.tail().messages.is_empty());
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let account = AccountId::parse("acct").unwrap();
        let stored = Arc::new(StoredMessages::parse(1, true, vec![message("a", "one")]).unwrap());
        let one = size_of(&stored);
        let cache = MessageCache::new(one * 2);
        for id in ["x", "y", "z"] {
            cache.put(&account, id, stored.clone());
        }
        let kept = ["x", "y", "z"]
            .iter()
            .filter(|id| cache.get(&account, id).is_some())
            .count();
        assert_eq!(kept, 2);
        cache.forget(&account, "z");
        cache.put(&account, "w", stored);
        assert!(cache.get(&account, "w").is_some());
    }
}
