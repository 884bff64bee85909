//! What a turn reads from Postgres before it runs, kept per process so a
//! warm turn reads none of it: the agent as stored, the uploaded tools its
//! config names, the account's policies and its scoped policies. Only rows
//! are kept; what is built from them (the parsed config, the registry,
//! which may list MCP servers) is built again every turn.
//!
//! Every change notifies Postgres listeners from a trigger: agents and
//! policies on [`config_changes::CHANNEL`]
//! (`migrations/0031_turn_config_notify.sql`), tools on
//! [`tools::CHANGED_CHANNEL`]; the listener drops what a notice names, and
//! a change made through this process drops its entry at once, before the
//! change is answered ([`ConfigCache::changed`],
//! [`ConfigCache::tool_changed`]). When an entry is trusted is
//! [`toolserver_store::notified`]'s.

mod reads;
mod scoped;

use std::sync::Arc;

use toolserver_domain::{AccountId, AgentId, ToolId};
use toolserver_store::config_changes::{self, ConfigChange};
use toolserver_store::notified::{Notifications, Notified, NotifiedMap};
use toolserver_store::policies::PolicyRecord;
use toolserver_store::{tools, AgentRecord, ToolRecord};

use scoped::ScopedSet;

/// The channels whose notices drop entries.
const CHANNELS: &[&str] = &[config_changes::CHANNEL, tools::CHANGED_CHANNEL];

/// Rows turns read before they run, of every account.
pub struct ConfigCache {
    agents: NotifiedMap<AgentId, (AccountId, Arc<AgentRecord>)>,
    tools: NotifiedMap<ToolId, (AccountId, Arc<ToolRecord>)>,
    policies: NotifiedMap<AccountId, Option<Arc<PolicyRecord>>>,
    scoped: NotifiedMap<AccountId, Arc<ScopedSet>>,
}

impl ConfigCache {
    /// A cache of at most `capacity` entries of each kind (0: nothing is
    /// kept). Serves nothing until the listener it follows
    /// ([`Self::follow`]) is connected.
    pub fn new(capacity: usize) -> Self {
        Self {
            agents: NotifiedMap::new(capacity),
            tools: NotifiedMap::new(capacity),
            policies: NotifiedMap::new(capacity),
            scoped: NotifiedMap::new(capacity),
        }
    }

    /// Follows changes through `notifications` until `self` is dropped;
    /// the cache serves only while their listener is connected.
    pub fn follow(self: &Arc<Self>, notifications: &mut Notifications) {
        notifications.subscribe(self, CHANNELS);
    }

    /// Drops what `change` names.
    pub fn changed(&self, change: &ConfigChange) {
        match change {
            ConfigChange::Agent(_, id) => self.agents.invalidate(id),
            ConfigChange::Policies(account) => self.policies.invalidate(account),
            ConfigChange::ScopedPolicies(account) => self.scoped.invalidate(account),
        }
    }

    /// Drops what is cached of tool `id`.
    pub fn tool_changed(&self, id: ToolId) {
        self.tools.invalidate(&id);
    }

    /// How many rows were read from Postgres rather than served from the
    /// cache, of every kind.
    pub fn reads(&self) -> u64 {
        self.agents.reads() + self.tools.reads() + self.policies.reads() + self.scoped.reads()
    }

    fn invalidate_all(&self) {
        self.agents.invalidate_all();
        self.tools.invalidate_all();
        self.policies.invalidate_all();
        self.scoped.invalidate_all();
    }
}

impl Notified for ConfigCache {
    fn heard(&self, channel: &str, payload: &str) {
        if channel == tools::CHANGED_CHANNEL {
            match uuid::Uuid::parse_str(payload) {
                Ok(id) => self.tool_changed(ToolId::from_uuid(id)),
                Err(_) => self.tools.invalidate_all(),
            }
            return;
        }
        match ConfigChange::parse(payload) {
            Some(change) => self.changed(&change),
            None => self.invalidate_all(),
        }
    }

    fn set_listening(&self, listening: bool) {
        self.agents.set_listening(listening);
        self.tools.set_listening(listening);
        self.policies.set_listening(listening);
        self.scoped.set_listening(listening);
    }
}
