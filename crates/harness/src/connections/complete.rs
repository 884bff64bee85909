//! Completing an authorization from the provider's redirect: the code is
//! exchanged (with the PKCE verifier sealed until now), the connection
//! stored, and the call that waited on it resumed.

use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_authorizations::{self, AuthorizationRecord};
use toolserver_store::oauth_connections;
use toolserver_store::StoreError;
use uuid::Uuid;

use super::authorize::state_hash;
use super::resume::lapsed;
use super::sealed::{verifier_name, SealedGrant};
use super::ConnectionError;
use crate::lifecycle::Lifecycle;

/// An authorization completed by its redirect.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedAuthorization {
    /// The provider connected.
    pub provider: String,
    /// The end user (`""`: the account).
    pub user: String,
    /// The detached turn that runs the waiting call, when it resumed now.
    pub resumed_turn: Option<Uuid>,
}

impl Lifecycle {
    /// Completes the authorization whose redirect carries `state` with the
    /// provider's `answer` (its code, or the error it redirected with):
    /// stores the connection, then resumes the call that waited on it.
    pub async fn complete_authorization(
        &self,
        state: &str,
        answer: Result<&str, String>,
    ) -> Result<CompletedAuthorization, ConnectionError> {
        let found = oauth_authorizations::by_state(self.pool(), &state_hash(state))
            .await
            .map_err(|err| match err {
                StoreError::NotFound => ConnectionError::UnknownAuthorization,
                other => ConnectionError::Store(other),
            })?;
        let account = AccountId::parse(&found.account_id)
            .map_err(|_| ConnectionError::UnknownAuthorization)?;
        if found.status != "pending" {
            return Err(ConnectionError::UnknownAuthorization);
        }
        if found.expires_at <= OffsetDateTime::now_utc() {
            self.settle(&account, &found, "expired", Some(&lapsed(&found)))
                .await?;
            return Err(ConnectionError::UnknownAuthorization);
        }
        let connected = match answer {
            Ok(code) => self.connect(&account, &found, code).await,
            Err(refusal) => Err(ConnectionError::Refused(refusal)),
        };
        let resumed_turn = match &connected {
            Ok(moved) => self.resume_waiting(&account, &found, *moved).await,
            Err(ConnectionError::Refused(refusal)) => {
                let error = format!(
                    "the end user's authorization of {} failed: {refusal}",
                    found.provider
                );
                self.settle(&account, &found, "failed", Some(&error))
                    .await?
            }
            Err(_) => None,
        };
        connected?;
        Ok(CompletedAuthorization {
            provider: found.provider.clone(),
            user: found.user_id.clone(),
            resumed_turn,
        })
    }

    /// Exchanges `code`, then stores the connection `found` asked for and
    /// marks `found` authorized in one transaction (so a crash leaves both
    /// or neither); whether this call moved it out of pending.
    async fn connect(
        &self,
        account: &AccountId,
        found: &AuthorizationRecord,
        code: &str,
    ) -> Result<bool, ConnectionError> {
        let connections = self.connections();
        let sealer = &self.harness().sources().sealer;
        let verifier = sealer
            .open_account_secret(&found.verifier_sealed, account, &verifier_name(&found.id))
            .map_err(|_| ConnectionError::Sealing)?;
        let redirect = self.oauth_redirect();
        let provider = connections
            .provider(account, &found.provider, Some(&redirect))
            .await?;
        let granted = connections.exchange_code(&provider, code, verifier).await?;
        let (name, user) = (found.provider.as_str(), found.user_id.as_str());
        let sealed = SealedGrant::seal(sealer, account, (name, user), granted)?;
        let mut tx = self.pool().begin().await.map_err(StoreError::from)?;
        oauth_connections::upsert(&mut tx, account, name, user, &sealed.tokens()).await?;
        let moved =
            oauth_authorizations::complete(&mut tx, account, &found.id, "authorized", None).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(moved)
    }
}
