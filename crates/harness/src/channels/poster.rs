//! Posting a channel's answers: the platform request is built at each
//! attempt from the agent's channel as it is then (its bot token unsealed
//! only for the post) and sent through the public-only outbound client;
//! every other delivery is posted as plain JSON.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::{AccountId, AgentId};
use toolserver_store::webhook_deliveries::DueDelivery;

use super::reply::{ChannelReply, CHANNEL_REPLY};
use super::{accepted, channel_setting, outbound};
use crate::retry_after::retry_after;
use crate::webhooks::{unreachable, JsonPoster, PostFailure, Poster};
use crate::Harness;

/// Posts channel answers to their platforms, and other deliveries as JSON.
pub struct ChannelPoster {
    pool: PgPool,
    harness: Arc<Harness>,
    json: JsonPoster,
}

impl ChannelPoster {
    /// Posts through `harness`'s outbound client, reading agents from `pool`.
    pub fn new(pool: PgPool, harness: Arc<Harness>) -> Self {
        let json = JsonPoster(harness.sources().http.clone());
        Self {
            pool,
            harness,
            json,
        }
    }

    async fn post_reply(
        &self,
        delivery: &DueDelivery,
        timeout: Duration,
    ) -> Result<(), PostFailure> {
        let reply: ChannelReply = serde_json::from_value(delivery.body.clone())
            .map_err(|err| format!("the recorded answer does not read: {err}"))?;
        let account = AccountId::parse(&delivery.account_id).map_err(|err| err.to_string())?;
        let agent = AgentId::from_uuid(reply.agent_id);
        let setting = channel_setting(&self.harness, &self.pool, &account, agent, &reply.channel)
            .await
            .map_err(|err| format!("channel {}: {err}", reply.channel))?;
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let id = delivery.id.to_string();
        let post = outbound(&setting, &reply.reply_to, &reply.text, &id, now)?;
        let mut request = self
            .json
            .0
            .post(post.url)
            .header("content-type", "application/json")
            .header("idempotency-key", &id)
            .body(post.body)
            .timeout(timeout);
        for (name, value) in post.headers {
            request = request.header(name, value);
        }
        let response = request.send().await.map_err(|err| unreachable(&err))?;
        let status = response.status().as_u16();
        let asked = retry_after(response.headers(), SystemTime::now());
        let body = response.bytes().await.unwrap_or_default();
        accepted(&setting, status, &body).map_err(|failure| PostFailure {
            retry_after: asked.or(failure.retry_after),
            ..failure
        })
    }
}

#[async_trait]
impl Poster for ChannelPoster {
    async fn post(&self, delivery: &DueDelivery, timeout: Duration) -> Result<(), PostFailure> {
        if delivery.kind == CHANNEL_REPLY {
            self.post_reply(delivery, timeout).await
        } else {
            self.json.post(delivery, timeout).await
        }
    }
}
