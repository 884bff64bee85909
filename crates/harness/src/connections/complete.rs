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
            Ok((moved, others)) => {
                let resumed = self.resume_waiting(&account, &found, *moved).await;
                self.resume_others(&account, &found, others).await;
                resumed
            }
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

    /// Resumes the messages (conversation, message) other than `found`'s
    /// whose calls waited on the same connection.
    async fn resume_others(
        &self,
        account: &AccountId,
        found: &AuthorizationRecord,
        others: &[(String, String)],
    ) {
        let own = found.waiting.as_ref().map(|waiting| {
            (
                waiting.conversation_id.as_str(),
                waiting.message_id.as_str(),
            )
        });
        let mut resumed: Vec<(&str, &str)> = own.into_iter().collect();
        for (conversation, message) in others {
            let key = (conversation.as_str(), message.as_str());
            if resumed.contains(&key) {
                continue;
            }
            resumed.push(key);
            self.resume_authorized(account, conversation, message).await;
        }
    }

    /// Exchanges `code`, then, in one transaction (so a crash leaves all or
    /// nothing), stores the connection `found` asked for, marks `found`
    /// authorized, and marks authorized every other authorization still
    /// pending for the same user and provider (calls that asked for the
    /// same connection). Whether this call moved `found` out of pending,
    /// and the messages whose calls waited on the others.
    async fn connect(
        &self,
        account: &AccountId,
        found: &AuthorizationRecord,
        code: &str,
    ) -> Result<(bool, Vec<(String, String)>), ConnectionError> {
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
        let others = match moved {
            true => oauth_authorizations::authorize_pending(&mut tx, account, name, user).await?,
            false => Vec::new(),
        };
        tx.commit().await.map_err(StoreError::from)?;
        Ok((moved, others))
    }
}
