//! `GET /conversations/{conversationId}`: a conversation's stored UI
//! messages, and the lease a turn holds on a conversation while it runs.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use toolserver_harness::ui::UiMessage;
use toolserver_store::{conversations, StoreError};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::auth::Account;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::state::AppState;

/// The conversation routes.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_conversation))
}

/// A stored conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConversationView {
    /// The client-chosen id.
    pub id: String,
    /// The agent it talks to.
    pub agent_id: String,
    /// AI SDK `UIMessage`s in order.
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<Value>,
    /// Creation time (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
    /// Last change (RFC 3339).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: OffsetDateTime,
}

/// Reads one of the caller's conversations.
#[utoipa::path(get, path = "/conversations/{conversationId}", tag = "agents",
    security(("bearer" = [])),
    params(("conversationId" = String, Path, description = "Conversation id")),
    responses(
        (status = 200, description = "The conversation", body = ConversationView),
        (status = 401, description = "Missing or invalid token", body = ErrorBody),
        (status = 404, description = "No such conversation in this account", body = ErrorBody),
    ))]
#[tracing::instrument(skip_all)]
pub async fn get_conversation(
    Account(account): Account,
    State(state): State<AppState>,
    Path(conversation_id): Path<String>,
) -> ApiResult<Json<ConversationView>> {
    let record = conversations::get(state.pool(), &account, &conversation_id)
        .await
        .map_err(|err| match err {
            StoreError::NotFound => ApiError::NotFound("conversation"),
            other => other.into(),
        })?;
    Ok(Json(ConversationView {
        id: record.id,
        agent_id: record.agent_id.to_string(),
        messages: record.messages,
        created_at: record.created_at,
        updated_at: record.updated_at,
    }))
}

/// A turn's hold on its conversation; released when dropped if not before.
pub struct ConversationLease {
    pool: PgPool,
    account: AccountId,
    agent: AgentId,
    id: String,
    turn_id: Uuid,
    lease: Duration,
    stored: Vec<Value>,
    released: bool,
}

impl ConversationLease {
    /// Creates the conversation if new and takes it for one turn (409 when
    /// another turn holds it or it belongs to another agent).
    pub async fn take(
        state: &AppState,
        account: &AccountId,
        id: &str,
        agent: AgentId,
    ) -> ApiResult<Self> {
        let lease = conversations::begin_turn(
            state.pool(),
            account,
            id,
            agent,
            state.harness().settings().turn_lease,
        )
        .await
        .map_err(|err| match err {
            StoreError::Conflict { constraint } if constraint == conversations::BUSY => {
                ApiError::Conflict {
                    code: "conversation_busy",
                    message: "another turn of this conversation is still running".into(),
                }
            }
            StoreError::Conflict { constraint } if constraint == conversations::OTHER_AGENT => {
                ApiError::Conflict {
                    code: "conversation_of_other_agent",
                    message: "this conversation belongs to another agent".into(),
                }
            }
            other => other.into(),
        })?;
        Ok(Self {
            pool: state.pool().clone(),
            account: account.clone(),
            agent,
            id: id.to_owned(),
            turn_id: lease.turn_id,
            lease: state.harness().settings().turn_lease,
            stored: lease.messages,
            released: false,
        })
    }

    /// The agent the conversation talks to.
    pub fn agent(&self) -> AgentId {
        self.agent
    }

    /// The conversation's id.
    pub fn conversation_id(&self) -> &str {
        &self.id
    }

    /// The messages stored when the lease was taken.
    pub fn stored_messages(&self) -> ApiResult<Vec<UiMessage>> {
        serde_json::from_value(Value::Array(self.stored.clone()))
            .map_err(|err| ApiError::Internal(format!("stored conversation is malformed: {err}")))
    }

    /// Stores `messages` as the conversation.
    pub async fn save(&self, messages: &[UiMessage]) -> Result<(), StoreError> {
        let values: Vec<Value> = messages
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect();
        conversations::save(&self.pool, &self.account, &self.id, self.turn_id, &values).await
    }

    /// Renews the lease every third of its length until the returned task
    /// is aborted (or the lease is lost).
    pub fn keep_renewed(&self) -> tokio::task::JoinHandle<()> {
        let (pool, account, id, turn_id, lease) = (
            self.pool.clone(),
            self.account.clone(),
            self.id.clone(),
            self.turn_id,
            self.lease,
        );
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 3).await;
                if let Err(err) = conversations::renew(&pool, &account, &id, turn_id, lease).await {
                    tracing::warn!(error = %err, "could not renew the conversation lease");
                    if matches!(err, StoreError::NotFound) {
                        return;
                    }
                }
            }
        })
    }

    /// Lets the next turn in.
    pub async fn release(mut self) {
        self.released = true;
        if let Err(err) =
            conversations::end_turn(&self.pool, &self.account, &self.id, self.turn_id).await
        {
            tracing::warn!(error = %err, "could not release the conversation; its lease will expire");
        }
    }
}

impl Drop for ConversationLease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (pool, account, id, turn_id) = (
            self.pool.clone(),
            self.account.clone(),
            self.id.clone(),
            self.turn_id,
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = conversations::end_turn(&pool, &account, &id, turn_id).await;
            });
        }
    }
}
