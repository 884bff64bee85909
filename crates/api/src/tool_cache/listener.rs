//! Keeps the tool cache current: listens on `toolserver_tools` and drops
//! each changed tool.

use std::sync::Arc;

use toolserver_domain::ToolId;
use toolserver_store::notified::{spawn_listener, Notified};
use toolserver_store::tools::CHANGED_CHANNEL;

use super::ToolCache;

impl ToolCache {
    /// Listens for changed tools, on a connection of its own, until `self`
    /// is dropped; the cache serves only while this is connected.
    pub fn spawn_listener(self: &Arc<Self>) {
        let listening = spawn_listener(self, &self.pool, &[CHANGED_CHANNEL]);
        self.set_listener(listening);
    }
}

impl Notified for ToolCache {
    fn heard(&self, _channel: &str, payload: &str) {
        match uuid::Uuid::parse_str(payload) {
            Ok(id) => self.invalidate(ToolId::from_uuid(id)),
            Err(_) => self.invalidate_all(),
        }
    }

    fn set_listening(&self, listening: bool) {
        self.entries.set_listening(listening);
    }
}
