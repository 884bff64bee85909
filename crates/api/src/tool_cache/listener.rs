//! Keeps the tool cache current: follows `toolserver_tools` and drops each
//! changed tool.

use std::sync::Arc;

use toolserver_domain::ToolId;
use toolserver_store::notified::{Notifications, Notified};
use toolserver_store::tools::CHANGED_CHANNEL;

use super::ToolCache;

impl ToolCache {
    /// Follows changed tools through `notifications` until `self` is
    /// dropped; the cache serves only while their listener is connected.
    pub fn follow(self: &Arc<Self>, notifications: &mut Notifications) {
        notifications.subscribe(self, &[CHANGED_CHANNEL]);
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
