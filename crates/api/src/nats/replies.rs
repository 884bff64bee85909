//! Answers to NATS requesters once their detached turns settle, from
//! whichever process settles them.

use async_trait::async_trait;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_harness::lifecycle::TurnListener;
use toolserver_store::async_turns;
use uuid::Uuid;

/// Tells NATS requesters how their turns ended, whichever process settles them.
pub struct NatsReplies {
    client: async_nats::Client,
    pool: PgPool,
}

impl NatsReplies {
    /// Replies through `client`, reading turns from `pool`.
    pub fn new(client: async_nats::Client, pool: PgPool) -> Self {
        Self { client, pool }
    }
}

#[async_trait]
impl TurnListener for NatsReplies {
    async fn turn_settled(&self, turn_id: Uuid) {
        let Ok(Some(subject)) = async_turns::reply_subject(&self.pool, turn_id).await else {
            return;
        };
        let Ok((_, record)) = async_turns::get_any(&self.pool, turn_id).await else {
            return;
        };
        let mut result = json!({"statusId": turn_id, "status": record.status});
        if let Some(messages) = record.messages {
            result["messages"] = messages;
        }
        if let Some(error) = record.error {
            result["error"] = json!(error);
        }
        publish(&self.client, subject, &result).await;
    }
}

pub(super) async fn publish(client: &async_nats::Client, subject: String, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    if let Err(err) = client.publish(subject, bytes.into()).await {
        tracing::warn!(error = %err, "could not publish to NATS");
    }
    if let Err(err) = client.flush().await {
        tracing::warn!(error = %err, "could not flush NATS");
    }
}
