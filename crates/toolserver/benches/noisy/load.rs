//! The load: B's quiet requests and A's hostile floods.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::{Client, Url};
use toolserver_testsupport::ScriptedModel;

use crate::plan::{CALL_BODY, CALL_FLOODERS, QUIET_TIMEOUT, TURN_FLOODERS};
use crate::server::Tenant;
use crate::tally::{call_failed, status_of, Tally};

/// One call; its latency when it was answered 2xx with the tool's output.
pub(crate) async fn call(
    client: &Client,
    tenant: &Tenant,
    url: &Url,
    tally: &Tally,
) -> Option<Duration> {
    let started = Instant::now();
    let response = match tenant.post(client, url, CALL_BODY).send().await {
        Ok(response) => response,
        Err(err) => {
            tally.unanswered(&err);
            return None;
        }
    };
    let (status, retry_after) = status_of(&response);
    match response.bytes().await {
        Ok(body) => {
            let ok = (200..300).contains(&status);
            let failed = ok && call_failed(&body);
            tally.answer(status, retry_after, failed, &body);
            (ok && !failed).then(|| started.elapsed())
        }
        Err(err) => {
            tally.unanswered(&err);
            None
        }
    }
}

/// A request body opening a new conversation.
pub(crate) fn turn_body() -> String {
    format!(
        r#"{{"id":"{}","messages":[{{"id":"u1","role":"user","parts":[{{"type":"text","text":"go"}}]}}],"trigger":"submit-message"}}"#,
        uuid::Uuid::new_v4()
    )
}

/// One turn; its time to first byte and whole time when it was answered
/// 2xx and finished.
pub(crate) async fn turn(
    client: &Client,
    tenant: &Tenant,
    url: &Url,
    tally: &Tally,
) -> Option<(Duration, Duration)> {
    let started = Instant::now();
    let response = match tenant.post(client, url, turn_body()).send().await {
        Ok(response) => response,
        Err(err) => {
            tally.unanswered(&err);
            return None;
        }
    };
    let (status, retry_after) = status_of(&response);
    if !(200..300).contains(&status) {
        let body = response.bytes().await.unwrap_or_default();
        tally.answer(status, retry_after, false, &body);
        return None;
    }
    let mut stream = response.bytes_stream();
    let mut first = None;
    // The stream's end, where the finish chunk is.
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => {
                first.get_or_insert_with(|| started.elapsed());
                tail.extend_from_slice(&chunk);
                if tail.len() > 8192 {
                    tail.drain(..tail.len() - 4096);
                }
            }
            Err(err) => {
                tally.answer(status, retry_after, true, err.to_string().as_bytes());
                return None;
            }
        }
    }
    let finished = tail.windows(21).any(|w| w == b"\"finishReason\":\"stop\"");
    tally.answer(status, retry_after, !finished, &tail);
    Some((first?, started.elapsed())).filter(|_| finished)
}

/// B's side of the generator: its requests and its model run on a runtime
/// of their own (one thread), so A's tasks in this process never queue
/// ahead of them.
pub(crate) struct QuietSide {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: Client,
    pub(crate) tenant: Tenant,
}

impl QuietSide {
    pub(crate) fn new(tenant: Tenant) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = Client::builder().timeout(QUIET_TIMEOUT).build().unwrap();
        Self {
            runtime,
            client,
            tenant,
        }
    }

    /// Runs `work` on B's runtime; its result.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.runtime.spawn(work).await.unwrap()
    }

    /// A scripted model served from B's runtime.
    pub(crate) async fn model(&self) -> ScriptedModel {
        self.run(ScriptedModel::start()).await
    }

    /// Sequential calls for `window` or until `max` succeeded: the latency
    /// of each success.
    pub(crate) async fn calls(
        &self,
        url: &Url,
        tally: &Arc<Tally>,
        window: Duration,
        max: usize,
    ) -> Vec<Duration> {
        let (client, tenant, url, tally) = (
            self.client.clone(),
            self.tenant.clone(),
            url.clone(),
            tally.clone(),
        );
        self.run(async move {
            let until = Instant::now() + window;
            let mut samples = Vec::new();
            while Instant::now() < until && samples.len() < max {
                samples.extend(call(&client, &tenant, &url, &tally).await);
            }
            samples
        })
        .await
    }

    /// Sequential turns for `window` or until `max` finished: time to first
    /// byte and whole time of each.
    pub(crate) async fn turns(
        &self,
        url: &Url,
        tally: &Arc<Tally>,
        window: Duration,
        max: usize,
    ) -> Vec<(Duration, Duration)> {
        let (client, tenant, url, tally) = (
            self.client.clone(),
            self.tenant.clone(),
            url.clone(),
            tally.clone(),
        );
        self.run(async move {
            let until = Instant::now() + window;
            let mut samples = Vec::new();
            while Instant::now() < until && samples.len() < max {
                samples.extend(turn(&client, &tenant, &url, &tally).await);
            }
            samples
        })
        .await
    }

    /// Stops B's runtime (from inside another one).
    pub(crate) fn stop(self) {
        self.runtime.shutdown_background();
    }
}

/// A's hostile callers: each calls A's tools round-robin (from its own
/// starting point) and, whatever the answer, calls again at once. They run
/// until aborted.
pub(crate) fn flood_calls(
    client: &Client,
    tenant: &Tenant,
    urls: &Arc<[Url]>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CALL_FLOODERS)
        .map(|caller| {
            let (client, tenant, urls, tally) =
                (client.clone(), tenant.clone(), urls.clone(), tally.clone());
            tokio::spawn(async move {
                for next in caller.. {
                    call(&client, &tenant, &urls[next % urls.len()], &tally).await;
                }
            })
        })
        .collect()
}

/// A's hostile turns: each caller opens a turn and, whatever the answer,
/// opens the next at once. They run until aborted.
pub(crate) fn flood_turns(
    client: &Client,
    tenant: &Tenant,
    url: &Url,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..TURN_FLOODERS)
        .map(|_| {
            let (client, tenant, url, tally) =
                (client.clone(), tenant.clone(), url.clone(), tally.clone());
            tokio::spawn(async move {
                loop {
                    turn(&client, &tenant, &url, &tally).await;
                }
            })
        })
        .collect()
}
