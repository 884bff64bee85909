//! Posting recorded webhook deliveries (handoff announcements, channel
//! answers): every process claims what is due, makes one attempt through
//! its [`Poster`] (a plain JSON post with the delivery's id as
//! `Idempotency-Key`, through the public-only outbound client), and records
//! the outcome. A post
//! not answered 2xx is tried again after a backoff that doubles up to a cap,
//! until its attempts run out; then it stays recorded as failed with its
//! last error. A claim outlives one attempt, so the post of a process that
//! died is taken up by another once its claim lapses.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use toolserver_store::webhook_deliveries::{self, DueDelivery};
use toolserver_store::StoreError;

use crate::retry_after::retry_after;

/// Knobs of webhook delivery; each one is a server setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Attempts before a post is given up.
    pub max_attempts: u32,
    /// The wait before the first retry; each later one doubles it.
    pub first_retry: Duration,
    /// The longest wait between attempts.
    pub max_retry: Duration,
    /// The deadline of one attempt.
    pub timeout: Duration,
    /// How often due posts (and channel events not started) are looked for.
    pub poll: Duration,
    /// How far a signed inbound channel request's timestamp may be from now.
    pub signature_window: Duration,
}

impl WebhookSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        max_attempts: 8,
        first_retry: Duration::from_secs(1),
        max_retry: Duration::from_secs(300),
        timeout: Duration::from_secs(10),
        poll: Duration::from_millis(500),
        signature_window: Duration::from_secs(300),
    };

    /// The wait after failed attempt number `attempts` when the receiver
    /// asked for `asked`: what it asked, if longer than the backoff, up to
    /// the longest wait; `None` when no attempt is left.
    pub fn wait_after(&self, attempts: u32, asked: Option<Duration>) -> Option<Duration> {
        let backoff = self.retry_after(attempts)?;
        Some(asked.map_or(backoff, |asked| asked.max(backoff).min(self.max_retry)))
    }

    /// The wait after failed attempt number `attempts` (1 for the first),
    /// or `None` when no attempt is left.
    pub fn retry_after(&self, attempts: u32) -> Option<Duration> {
        if attempts >= self.max_attempts {
            return None;
        }
        let doublings = attempts.saturating_sub(1).min(30);
        Some(
            self.first_retry
                .saturating_mul(1 << doublings)
                .min(self.max_retry),
        )
    }
}

/// Posts fetched per pass at most.
const BATCH: i64 = 16;

/// Why an attempt at a post was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostFailure {
    /// What went wrong, as recorded.
    pub message: String,
    /// The wait the receiver asked for before another try, if it named one.
    pub retry_after: Option<Duration>,
}

impl From<String> for PostFailure {
    fn from(message: String) -> Self {
        Self {
            message,
            retry_after: None,
        }
    }
}

/// Makes one attempt at a delivery.
#[async_trait]
pub trait Poster: Send + Sync {
    /// Posts `delivery` once, within `timeout`; why it was not taken.
    async fn post(&self, delivery: &DueDelivery, timeout: Duration) -> Result<(), PostFailure>;
}

/// Posts a delivery's body as JSON to its URL.
pub struct JsonPoster(pub reqwest::Client);

#[async_trait]
impl Poster for JsonPoster {
    async fn post(&self, delivery: &DueDelivery, timeout: Duration) -> Result<(), PostFailure> {
        let sent = self
            .0
            .post(&delivery.url)
            .header("idempotency-key", delivery.id.to_string())
            .json(&delivery.body)
            .timeout(timeout)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(PostFailure {
                message: format!("the receiver answered {}", response.status()),
                retry_after: retry_after(response.headers(), SystemTime::now()),
            }),
            Err(err) => Err(unreachable(&err).into()),
        }
    }
}

/// Why a request went unanswered, as recorded.
pub fn unreachable(err: &reqwest::Error) -> String {
    match crate::outbound::refusal(err) {
        Some(refusal) => refusal,
        None => format!("the receiver could not be reached: {err}"),
    }
}

/// Posts what is due until `stop` is cancelled.
pub async fn deliver_until(
    pool: PgPool,
    poster: Arc<dyn Poster>,
    settings: WebhookSettings,
    stop: CancellationToken,
) {
    loop {
        let delivered = tokio::select! {
            () = stop.cancelled() => return,
            delivered = deliver_due(&pool, poster.as_ref(), &settings) => delivered,
        };
        match delivered {
            Ok(count) if count as i64 == BATCH => continue,
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %err, "could not claim webhook deliveries"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(settings.poll) => {}
        }
    }
}

/// Claims the posts due now and makes one attempt at each, concurrently;
/// how many were attempted.
pub async fn deliver_due(
    pool: &PgPool,
    poster: &dyn Poster,
    settings: &WebhookSettings,
) -> Result<usize, StoreError> {
    let claim = settings.timeout.saturating_mul(2) + Duration::from_secs(5);
    let due = webhook_deliveries::claim_due(pool, BATCH, claim).await?;
    let count = due.len();
    let attempts = due
        .into_iter()
        .map(|delivery| attempt(pool, poster, settings, delivery));
    for outcome in futures::future::join_all(attempts).await {
        if let Err(err) = outcome {
            tracing::warn!(error = %err, "could not record a webhook delivery's outcome");
        }
    }
    Ok(count)
}

/// One attempt at `delivery`, its outcome recorded.
async fn attempt(
    pool: &PgPool,
    poster: &dyn Poster,
    settings: &WebhookSettings,
    delivery: DueDelivery,
) -> Result<(), StoreError> {
    let failure = match poster.post(&delivery, settings.timeout).await {
        Ok(()) => return webhook_deliveries::delivered(pool, delivery.id).await,
        Err(failure) => failure,
    };
    let attempts = u32::try_from(delivery.attempts).unwrap_or(u32::MAX);
    let retry = settings.wait_after(attempts, failure.retry_after);
    let error = failure.message;
    tracing::warn!(
        delivery.id = %delivery.id,
        attempts,
        given_up = retry.is_none(),
        "{error}"
    );
    webhook_deliveries::attempt_failed(pool, delivery.id, &error, retry).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_cap_and_stop_at_the_last_attempt() {
        let settings = WebhookSettings {
            max_attempts: 5,
            first_retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(5),
            ..WebhookSettings::DEFAULT
        };
        let waits: Vec<Option<u64>> = (1..=6)
            .map(|attempt| settings.retry_after(attempt).map(|wait| wait.as_secs()))
            .collect();
        assert_eq!(waits, [Some(1), Some(2), Some(4), Some(5), None, None]);
    }

    #[test]
    fn a_wait_the_receiver_asks_for_is_kept_within_the_longest() {
        let settings = WebhookSettings {
            max_attempts: 3,
            first_retry: Duration::from_secs(1),
            max_retry: Duration::from_secs(60),
            ..WebhookSettings::DEFAULT
        };
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(settings.wait_after(1, secs(30)), secs(30));
        assert_eq!(
            settings.wait_after(2, secs(1)),
            secs(2),
            "never shorter than the backoff"
        );
        assert_eq!(settings.wait_after(1, secs(3600)), secs(60));
        assert_eq!(settings.wait_after(3, secs(5)), None, "no attempt left");
    }
}
