//! An account's policies as the server uses them: the schema policy text is
//! checked against when it is saved (the account's uploaded tools and the
//! built-ins this server runs), and the stack of layers a call is judged
//! by (the account's, the agent's, then the end user's and the
//! conversation's).

use std::sync::Arc;

use cedar_policy::Schema;
use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_store::scoped_policies::PolicyScope;
use toolserver_store::{tools, StoreError};

use super::layer::{Layer, LayerError};
use super::layers::{LayerName, PolicyStack};
use super::schema::{account_schema, SchemaTool};
use super::store::{deny_all, PolicyCache};
use crate::config_cache::ConfigCache;
use crate::tools::builtin_inputs;

/// Tools read per page while building a schema.
const PAGE: u32 = 200;

/// Why policy text could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The text is refused; the message is Cedar's.
    #[error(transparent)]
    Refused(#[from] LayerError),
    /// The account's tools could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The Cedar schema of `account`'s tools: every uploaded tool and the
/// built-ins this server runs.
pub async fn schema_of(pool: &PgPool, account: &AccountId) -> Result<Schema, CheckError> {
    let mut tools: Vec<SchemaTool> = builtin_inputs()
        .into_iter()
        .map(|(name, input_schema)| SchemaTool {
            name: name.to_owned(),
            input_schema,
        })
        .collect();
    let mut after = None;
    loop {
        let (records, more) = tools::list(pool, account, after, PAGE).await?;
        after = records.last().map(|record| record.id);
        tools.extend(records.into_iter().map(|record| SchemaTool {
            name: record.name,
            input_schema: record.input_schema.as_value().clone(),
        }));
        if !more {
            break;
        }
    }
    account_schema(&tools).map_err(|err| CheckError::Refused(LayerError::Invalid(err)))
}

/// Parses `text` and validates it against `account`'s schema.
pub async fn check_layer(
    pool: &PgPool,
    account: &AccountId,
    text: &str,
) -> Result<Layer, CheckError> {
    let layer = Layer::parse(text)?;
    if !layer.is_empty() {
        layer.validate(&schema_of(pool, account).await?)?;
    }
    Ok(layer)
}

/// Whom a call is made for and where: the end user's and the
/// conversation's own layers narrow it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Narrowing<'a> {
    /// The end user (a token's `sub`).
    pub user: Option<&'a str>,
    /// The conversation, inside a turn.
    pub conversation: Option<&'a str>,
}

/// The layers a call of `account` is judged by: the account's as stored
/// now, then `agent`'s (its config's `policies`), then those `narrowing`
/// names, each read through `stored` and parsed once per text.
pub async fn stack_of(
    cache: &PolicyCache,
    stored: &ConfigCache,
    pool: &PgPool,
    account: &AccountId,
    agent: Option<&str>,
    narrowing: Narrowing<'_>,
) -> Result<PolicyStack, StoreError> {
    let layer = cache.account(stored, pool, account).await?;
    let mut stack = PolicyStack::default().with(LayerName::Account, layer);
    if let Some(text) = agent {
        stack = stack.with(LayerName::Agent, parsed(cache, account, text));
    }
    let scoped = stored
        .scoped_policies(pool, account, narrowing.user, narrowing.conversation)
        .await?;
    for (scope, text) in scoped {
        let name = match scope {
            PolicyScope::User => LayerName::User,
            PolicyScope::Conversation => LayerName::Conversation,
        };
        stack = stack.with(name, parsed(cache, account, &text));
    }
    Ok(stack)
}

/// The layer of stored `text` (valid when saved); one that no longer
/// parses denies every call, with an error logged.
fn parsed(cache: &PolicyCache, account: &AccountId, text: &str) -> Arc<Layer> {
    cache.agent(text).unwrap_or_else(|err| {
        tracing::error!(%account, error = %err, "stored policies no longer parse; the calls they judge are denied");
        Arc::new(deny_all())
    })
}
