//! Scoped policies (end users' and conversations' layers), cached per
//! account as the whole set of its non-empty layers while that set is
//! small: most accounts have none, and a warm turn then reads nothing. An
//! account with more than the bound is read per call, as before.

use std::sync::Arc;

use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_store::scoped_policies::{self, PolicyScope, ScopedLayer};
use toolserver_store::text::storable;
use toolserver_store::StoreError;

use super::ConfigCache;

/// Most layers of one account kept.
const MAX_LAYERS: u32 = 32;

/// Most bytes of policy text of one account kept.
const MAX_BYTES: usize = 256 * 1024;

/// What is kept of one account's scoped policies.
pub(super) enum ScopedSet {
    /// Every non-empty layer.
    Known(Vec<ScopedLayer>),
    /// More than the bounds allow: each call reads its own.
    Many,
}

impl ConfigCache {
    /// The non-empty layers of `account` for the end user `user` and the
    /// conversation `conversation` (either may be absent), the user's
    /// first.
    pub async fn scoped_policies(
        &self,
        pool: &PgPool,
        account: &AccountId,
        user: Option<&str>,
        conversation: Option<&str>,
    ) -> Result<Vec<(PolicyScope, String)>, StoreError> {
        if user.is_none() && conversation.is_none() {
            return Ok(Vec::new());
        }
        let set = self
            .scoped
            .get_or_read(account, || read_set(pool, account))
            .await?;
        match &*set {
            ScopedSet::Known(layers) => Ok(matching(layers, user, conversation)),
            ScopedSet::Many => scoped_policies::for_call(pool, account, user, conversation).await,
        }
    }
}

/// What to keep of `account`'s scoped policies: one read.
async fn read_set(pool: &PgPool, account: &AccountId) -> Result<Arc<ScopedSet>, StoreError> {
    let (layers, more) = scoped_policies::in_force(pool, account, MAX_LAYERS).await?;
    let bytes: usize = layers.iter().map(|layer| layer.text.len()).sum();
    Ok(Arc::new(match more || bytes > MAX_BYTES {
        true => ScopedSet::Many,
        false => ScopedSet::Known(layers),
    }))
}

/// The layers among `layers` of `user` and of `conversation`, the user's
/// first (as [`scoped_policies::for_call`] reads them).
fn matching(
    layers: &[ScopedLayer],
    user: Option<&str>,
    conversation: Option<&str>,
) -> Vec<(PolicyScope, String)> {
    [
        (PolicyScope::User, user),
        (PolicyScope::Conversation, conversation),
    ]
    .into_iter()
    .filter_map(|(scope, id)| {
        let id = storable(id?);
        let layer = layers
            .iter()
            .find(|layer| layer.scope == scope && layer.scope_id == id)?;
        Some((scope, layer.text.clone()))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(scope: PolicyScope, id: &str, text: &str) -> ScopedLayer {
        ScopedLayer {
            scope,
            scope_id: id.to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn picks_the_users_layer_then_the_conversations() {
        let layers = [
            layer(PolicyScope::Conversation, "c1", "conversation"),
            layer(PolicyScope::User, "ann", "user"),
            layer(
                PolicyScope::User,
                "c1",
                "a user named like the conversation",
            ),
            layer(
                PolicyScope::User,
                "nul\\u0000",
                "stored with its NUL escaped",
            ),
        ];
        assert_eq!(
            matching(&layers, Some("ann"), Some("c1")),
            [
                (PolicyScope::User, "user".to_owned()),
                (PolicyScope::Conversation, "conversation".to_owned())
            ]
        );
        assert_eq!(
            matching(&layers, Some("bob"), Some("c2")),
            Vec::<(PolicyScope, String)>::new()
        );
        assert_eq!(
            matching(&layers, Some("nul\0"), None),
            [(PolicyScope::User, "stored with its NUL escaped".to_owned())]
        );
    }
}
