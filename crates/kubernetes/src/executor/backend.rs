//! The Kubernetes backend as the server sees it: [`Executor`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use serde_json::Value;
use toolserver_domain::AccountId;
use toolserver_sandbox::{
    spawn_relay, Executor, FrameStream, InvokeRequest, ReservationKey, RunnerInfo, RunnerUsage,
    SandboxError, StopListener, WarmRoom,
};

use super::pod_runner::PodRunner;
use super::{KubernetesExecutor, Route};

#[async_trait]
impl Executor for KubernetesExecutor {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        let runner = self.runner(key);
        let (_connection, started) = self.connect_retrying(&runner).await?;
        self.touch(&runner).await;
        Ok(RunnerInfo {
            name: runner.name.clone(),
            started,
        })
    }

    async fn invoke(
        &self,
        key: &ReservationKey,
        mut request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError> {
        let runner = self.runner(key);
        request.egress_token = self.egress_grant(key, &runner.name, &request)?;
        runner.inflight.fetch_add(1, Ordering::SeqCst);
        let connection = match self.connect_retrying(&runner).await {
            Ok((connection, _)) => connection,
            Err(err) => {
                runner.inflight.fetch_sub(1, Ordering::SeqCst);
                return Err(err);
            }
        };
        self.touch(&runner).await;
        let sent = request.clone();
        let (executor, target) = (self.clone(), runner.clone());
        let worker = async move {
            match connection.invoke(&sent).await {
                Err(SandboxError::Unauthorized(reason)) => {
                    tracing::info!(runner = %target.name, %reason, "runner refused a stale channel; looking the pod up");
                    target.set_route(Route::Unknown);
                    let (connection, _) = executor.connect_retrying(&target).await?;
                    connection.invoke(&sent).await
                }
                answer => answer,
            }
        };
        let kill_grace = self.inner.settings.kill_grace;
        let control = PodRunner {
            executor: self.clone(),
            _touching: self.keep_touched(&runner),
            runner,
        };
        Ok(spawn_relay(control, request, worker, kill_grace))
    }

    async fn cancel(&self, key: &ReservationKey, call_id: &str) -> Result<bool, SandboxError> {
        let pod = self.pod_of(&self.runner(key)).await?;
        self.query_connection(&pod).await?.cancel(call_id).await
    }

    async fn logs(&self, key: &ReservationKey, call_id: &str) -> Result<Value, SandboxError> {
        let pod = self.pod_of(&self.runner(key)).await?;
        self.query_connection(&pod).await?.logs(call_id).await
    }

    async fn stop(&self, key: &ReservationKey) -> Result<(), SandboxError> {
        let runner = self.runner(key);
        let pod = self.pod_of(&runner).await?;
        self.inner.pods.delete(&pod, None).await?;
        runner.forget_pod();
        Ok(())
    }

    async fn stop_if_idle(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        let runner = self.runner(key);
        let idle = || runner.inflight.load(Ordering::SeqCst) == 0;
        if !idle() {
            return Ok(false);
        }
        let _starting = runner.starting.lock().await;
        let pod = runner.pod();
        if !idle() || self.worker_busy(&pod).await {
            return Ok(false);
        }
        self.inner.pods.delete(&pod, None).await?;
        tracing::info!(runner = %runner.name, "runner pod deleted to make room");
        runner.forget_pod();
        Ok(true)
    }

    fn usage(&self, account: &AccountId) -> RunnerUsage {
        RunnerUsage {
            live_runners: self.live_runners().remove(account).unwrap_or(0),
            ..RunnerUsage::default()
        }
    }

    fn usage_all(&self) -> Vec<(AccountId, RunnerUsage)> {
        self.live_runners()
            .into_iter()
            .map(|(account, live_runners)| {
                let usage = RunnerUsage {
                    live_runners,
                    ..RunnerUsage::default()
                };
                (account, usage)
            })
            .collect()
    }

    fn govern_warm(&self, room: Arc<dyn WarmRoom>) {
        self.inner.pool.govern(room);
    }

    async fn shed_warm(&self) -> bool {
        self.inner.pool.shed().await
    }

    fn watch_stops(&self, listener: StopListener) {
        self.inner
            .stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(listener);
    }
}
