//! Agents, tools and account policies, from the cache when current, else
//! read (and kept).

use std::sync::Arc;

use sqlx::PgPool;
use toolserver_domain::{AccountId, AgentId, ToolId};
use toolserver_store::policies::{self, PolicyRecord};
use toolserver_store::{agents, tools, AgentRecord, StoreError, ToolRecord};

use super::ConfigCache;

impl ConfigCache {
    /// `account`'s agent `id` as stored; another account's is
    /// [`StoreError::NotFound`].
    pub async fn agent(
        &self,
        pool: &PgPool,
        account: &AccountId,
        id: AgentId,
    ) -> Result<Arc<AgentRecord>, StoreError> {
        let (owner, record) = self
            .agents
            .get_or_read(&id, || async {
                let record = agents::get(pool, account, id).await?;
                Ok::<_, StoreError>((account.clone(), Arc::new(record)))
            })
            .await?;
        owned_by(account, owner, record)
    }

    /// `account`'s uploaded tool `id` as stored; another account's is
    /// [`StoreError::NotFound`].
    pub async fn tool(
        &self,
        pool: &PgPool,
        account: &AccountId,
        id: ToolId,
    ) -> Result<Arc<ToolRecord>, StoreError> {
        let (owner, record) = self
            .tools
            .get_or_read(&id, || async {
                let record = tools::get(pool, account, id).await?;
                Ok::<_, StoreError>((account.clone(), Arc::new(record)))
            })
            .await?;
        owned_by(account, owner, record)
    }

    /// `account`'s policies as stored, if it ever saved any.
    pub async fn account_policies(
        &self,
        pool: &PgPool,
        account: &AccountId,
    ) -> Result<Option<Arc<PolicyRecord>>, StoreError> {
        self.policies
            .get_or_read(account, || async {
                Ok(policies::get(pool, account).await?.map(Arc::new))
            })
            .await
    }
}

/// `record` when `owner` is `account`, else not found.
fn owned_by<T>(account: &AccountId, owner: AccountId, record: T) -> Result<T, StoreError> {
    match &owner == account {
        true => Ok(record),
        false => Err(StoreError::NotFound),
    }
}
