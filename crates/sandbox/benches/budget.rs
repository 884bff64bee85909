//! What the runner budget adds to a warm call under its caps: the same
//! call on a backend that answers at once (one final frame, no process),
//! made straight and through [`RunnerBudget`], many accounts and tools warm;
//! and `ensure` the same way (the budget's books alone, without the relay of
//! the call's frames).
//! `cargo bench -p toolserver-sandbox --bench budget`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use toolserver_domain::{AccountId, ToolId};
use toolserver_sandbox::{
    BudgetSettings, BundleRef, Executor, FixedRunnerCaps, Frame, FrameStream, InvokeRequest,
    ReservationKey, RunnerBudget, RunnerInfo, SandboxError,
};
use toolserver_testsupport::bench::summary;

const WARMUP: usize = 2_000;
const SAMPLES: usize = 20_000;

/// A backend whose every call answers one final frame at once.
struct AnswersAtOnce;

#[async_trait]
impl Executor for AnswersAtOnce {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        Ok(RunnerInfo {
            name: key.runner_name(),
            started: false,
        })
    }

    async fn invoke(
        &self,
        _key: &ReservationKey,
        _request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError> {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(Frame::Final { value: json!(1) });
        Ok(rx)
    }

    async fn cancel(&self, _key: &ReservationKey, _call_id: &str) -> Result<bool, SandboxError> {
        Ok(false)
    }

    async fn logs(&self, _key: &ReservationKey, _call_id: &str) -> Result<Value, SandboxError> {
        Ok(Value::Null)
    }

    async fn stop(&self, _key: &ReservationKey) -> Result<(), SandboxError> {
        Ok(())
    }
}

fn request() -> InvokeRequest {
    InvokeRequest {
        call_id: "bench".into(),
        idempotency_key: "bench".into(),
        input: json!(1),
        config: Map::new(),
        bundle: BundleRef {
            sha256: "0".repeat(64),
            inline: None,
            url: None,
        },
        deadline_ms: 1_000,
        max_output_bytes: 1024,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

async fn ensures(executor: &dyn Executor, keys: &[ReservationKey]) -> Vec<Duration> {
    for key in keys.iter().cycle().take(WARMUP) {
        executor.ensure(key).await.unwrap();
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for key in keys.iter().cycle().take(SAMPLES) {
        let started = Instant::now();
        executor.ensure(key).await.unwrap();
        samples.push(started.elapsed());
    }
    samples
}

async fn calls(executor: &dyn Executor, keys: &[ReservationKey]) -> Vec<Duration> {
    for key in keys.iter().cycle().take(WARMUP) {
        executor.invoke(key, request()).await.unwrap().recv().await;
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for key in keys.iter().cycle().take(SAMPLES) {
        let request = request();
        let started = Instant::now();
        let mut frames = executor.invoke(key, request).await.unwrap();
        frames.recv().await.unwrap();
        samples.push(started.elapsed());
    }
    samples
}

#[tokio::main]
async fn main() {
    let keys: Vec<ReservationKey> = (0..24)
        .map(|i| {
            let account = AccountId::parse(&format!("acct_{}", i % 6)).unwrap();
            ReservationKey::new(account, ToolId::generate())
        })
        .collect();
    let inner: Arc<dyn Executor> = Arc::new(AnswersAtOnce);
    let settings = BudgetSettings {
        max_live: 32,
        queue_wait: Duration::from_secs(5),
        queue_depth: 64,
    };
    let budget = RunnerBudget::new(inner.clone(), settings, Arc::new(FixedRunnerCaps(8)));
    let (straight, _) = summary("warm call, straight", calls(inner.as_ref(), &keys).await);
    let (budgeted, _) = summary("warm call, through the budget", calls(&budget, &keys).await);
    let (ensured, _) = summary("ensure, straight", ensures(inner.as_ref(), &keys).await);
    let (booked, _) = summary("ensure, through the budget", ensures(&budget, &keys).await);
    let micros =
        |later: Duration, earlier: Duration| later.saturating_sub(earlier).as_secs_f64() * 1e6;
    println!(
        "the budget adds {:.1} µs to a call at p50 ({:.1} µs of it its books)",
        micros(budgeted, straight),
        micros(booked, ensured)
    );
}
