//! Starting an authorization: the URL the end user follows (PKCE S256, a
//! random state whose hash finds the authorization again), recorded with
//! its sealed verifier and, for a turn, the call that waits on it.

use std::time::Duration;

use oauth2::{CsrfToken, PkceCodeChallenge, Scope};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_domain::AccountId;
use toolserver_store::oauth_authorizations::{self, NewAuthorization, WaitingCall};
use toolserver_store::oauth_connections;
use toolserver_store::StoreError;
use url::Url;
use uuid::Uuid;

use super::sealed::verifier_name;
use super::{ConnectionError, Connections, ACCOUNT_USER};

/// An authorization started.
#[derive(Debug, Clone, PartialEq)]
pub struct StartedAuthorization {
    /// Its id.
    pub id: String,
    /// Where the end user goes to grant access.
    pub url: Url,
    /// When it lapses unused.
    pub expires_at: OffsetDateTime,
}

impl Connections {
    /// Starts an authorization of `user`'s connection to `provider` for
    /// `account`, redirecting to `redirect` and lapsing after `ttl`;
    /// `waiting` is the call that waits on it, if one does.
    pub async fn start(
        &self,
        account: &AccountId,
        (provider, user): (&str, &str),
        waiting: Option<WaitingCall>,
        (redirect, ttl): (&Url, Duration),
    ) -> Result<StartedAuthorization, ConnectionError> {
        let configured = self.provider(account, provider, Some(redirect)).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state) = configured
            .client
            .authorize_url(CsrfToken::new_random)
            .add_scopes(configured.record.scopes.iter().cloned().map(Scope::new))
            .set_pkce_challenge(challenge)
            .url();
        let id = format!("auth_{}", Uuid::now_v7().simple());
        let verifier_sealed = self
            .sealer
            .seal_account_secret(verifier.secret(), account, &verifier_name(&id))
            .ok_or(ConnectionError::Sealing)?;
        let expires_at = OffsetDateTime::now_utc() + ttl;
        let row = NewAuthorization {
            id: id.clone(),
            provider: provider.to_owned(),
            user_id: user.to_owned(),
            state_sha256: state_hash(state.secret()),
            verifier_sealed,
            waiting,
            expires_at,
        };
        let mut conn = self.pool.acquire().await.map_err(StoreError::from)?;
        oauth_authorizations::insert(&mut conn, account, &[row]).await?;
        Ok(StartedAuthorization {
            id,
            url,
            expires_at,
        })
    }
}

/// What finds an authorization from its redirect's `state`.
pub(super) fn state_hash(state: &str) -> Vec<u8> {
    Sha256::digest(state.as_bytes()).to_vec()
}

/// Asks, for one turn, for the authorizations its calls need: bound to the
/// turn's account, end user, agent and conversation.
#[derive(Clone)]
pub struct Authorizer {
    /// Where connections are kept.
    pub connections: Connections,
    /// The account.
    pub account: AccountId,
    /// The end user the turn acts for (`None`: the account itself).
    pub user: Option<String>,
    /// The agent.
    pub agent: Uuid,
    /// The conversation.
    pub conversation: String,
    /// This server's OAuth redirect (`<public URL>oauth/callback`).
    pub redirect: Url,
    /// How long an authorization waits for the end user.
    pub ttl: Duration,
}

/// A call that waits for its end user to connect a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct AskedAuthorization {
    /// The call.
    pub tool_call_id: String,
    /// The provider.
    pub provider: String,
    /// The authorization started.
    pub started: StartedAuthorization,
}

impl AskedAuthorization {
    /// The `data-authorization` part's data, as a client shows it.
    pub fn data(&self) -> Value {
        json!({
            "authorizationId": self.started.id,
            "toolCallId": self.tool_call_id,
            "provider": self.provider,
            "url": self.started.url.as_str(),
            "expiresAt": self.started.expires_at.format(&Rfc3339).unwrap_or_default(),
        })
    }
}

impl Authorizer {
    /// `None` when the end user's connection to `provider` can be used;
    /// otherwise the authorization that the call `tool_call_id` of `tool`
    /// in assistant message `message` now waits on.
    pub async fn ask(
        &self,
        provider: &str,
        (message, tool_call_id, tool): (&str, &str, &str),
    ) -> Result<Option<AskedAuthorization>, ConnectionError> {
        let waiting = WaitingCall {
            agent_id: self.agent,
            conversation_id: self.conversation.clone(),
            message_id: message.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            tool: tool.to_owned(),
        };
        self.start_unless_connected(provider, tool_call_id, Some(waiting))
            .await
    }

    /// `None` when the end user's connection to `provider` can be used;
    /// otherwise an authorization no call waits on, for a turn whose end
    /// user cannot be asked mid-turn (a chat channel's): the call
    /// `tool_call_id` fails, and the user connects and asks again.
    pub async fn link(
        &self,
        provider: &str,
        tool_call_id: &str,
    ) -> Result<Option<AskedAuthorization>, ConnectionError> {
        self.start_unless_connected(provider, tool_call_id, None)
            .await
    }

    async fn start_unless_connected(
        &self,
        provider: &str,
        tool_call_id: &str,
        waiting: Option<WaitingCall>,
    ) -> Result<Option<AskedAuthorization>, ConnectionError> {
        let user = self.user.as_deref().unwrap_or(ACCOUNT_USER);
        match oauth_connections::get(&self.connections.pool, &self.account, provider, user).await {
            Ok(connection) if connection.status == "active" => return Ok(None),
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(err) => return Err(err.into()),
        }
        let started = self
            .connections
            .start(
                &self.account,
                (provider, user),
                waiting,
                (&self.redirect, self.ttl),
            )
            .await?;
        Ok(Some(AskedAuthorization {
            tool_call_id: tool_call_id.to_owned(),
            provider: provider.to_owned(),
            started,
        }))
    }
}
