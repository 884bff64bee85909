//! The local backend as the server sees it: [`Executor`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::broadcast;
use toolserver_domain::AccountId;

use super::{LocalExecutor, LocalRunner, BUNDLE_URL_SLACK, UNFAIR_CPU};
use crate::relay::spawn_relay;
use crate::{
    Executor, FrameStream, InvokeRequest, ReservationKey, RunnerExit, RunnerInfo, RunnerUsage,
    SandboxError, StopListener, WarmRoom, WorkerClient,
};

#[async_trait]
impl Executor for LocalExecutor {
    async fn ensure(&self, key: &ReservationKey) -> Result<RunnerInfo, SandboxError> {
        let runner = self.runner(key);
        runner.touch();
        let (_, started) = self.ensure_runner(&runner).await?;
        Ok(RunnerInfo {
            name: runner.name.clone(),
            started,
        })
    }

    async fn invoke(
        &self,
        key: &ReservationKey,
        request: InvokeRequest,
    ) -> Result<FrameStream, SandboxError> {
        let runner = self.runner(key);
        runner.inflight.fetch_add(1, Ordering::SeqCst);
        runner.touch();
        runner.egress.restrict(request.egress_allow.clone());
        if let Some(url) = &request.bundle.url {
            let lifetime = Duration::from_millis(request.deadline_ms) + BUNDLE_URL_SLACK;
            runner.egress.admit(url, lifetime);
        }
        // A breach the last answered call left is dealt with first.
        runner.pending_checks.settled().await;
        let served_by = match self.ensure_runner(&runner).await {
            Ok((worker, _)) => worker,
            Err(err) => {
                runner.inflight.fetch_sub(1, Ordering::SeqCst);
                return Err(err);
            }
        };
        let client = WorkerClient::new(runner.socket());
        let sent = request.clone();
        let worker = async move { client.invoke(&sent).await };
        let kill_grace = self.inner.settings.kill_grace;
        let control = LocalRunner {
            executor: self.clone(),
            runner,
            served_by: Mutex::new(served_by),
            watch: Mutex::new(None),
        };
        Ok(spawn_relay(control, request, worker, kill_grace))
    }

    async fn cancel(&self, key: &ReservationKey, call_id: &str) -> Result<bool, SandboxError> {
        WorkerClient::new(self.runner(key).socket())
            .cancel(call_id)
            .await
    }

    async fn logs(&self, key: &ReservationKey, call_id: &str) -> Result<Value, SandboxError> {
        WorkerClient::new(self.runner(key).socket())
            .logs(call_id)
            .await
    }

    async fn stop(&self, key: &ReservationKey) -> Result<(), SandboxError> {
        self.runner(key).kill().await;
        Ok(())
    }

    fn exits(&self) -> broadcast::Receiver<RunnerExit> {
        self.inner.exits.subscribe()
    }

    async fn stop_if_idle(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        let Some(runner) = self.existing_runner(key) else {
            return Ok(true);
        };
        self.stop_when_idle(&runner, Duration::ZERO).await;
        Ok(runner.live_pid().is_none())
    }

    fn usage(&self, account: &AccountId) -> RunnerUsage {
        let live_runners = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|runner| runner.key.account() == account && runner.live_pid().is_some())
            .count();
        let cpu = self
            .inner
            .cgroups
            .cpu_used(account.as_str())
            .unwrap_or_else(|| Duration::from_micros(self.inner.call_cpu.read(account.as_str())));
        RunnerUsage {
            live_runners,
            cpu,
            egress_bytes: self.inner.egress.egress_bytes(account.as_str()),
        }
    }

    fn usage_all(&self) -> Vec<(AccountId, RunnerUsage)> {
        let mut accounts: Vec<AccountId> = self
            .inner
            .runners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|runner| runner.key.account().clone())
            .collect();
        accounts.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        accounts.dedup();
        accounts
            .into_iter()
            .map(|account| {
                let usage = self.usage(&account);
                (account, usage)
            })
            .collect()
    }

    fn warnings(&self) -> Vec<String> {
        let unfair_cpu = self
            .inner
            .cgroups
            .cpu_missing()
            .map(|reason| format!("{UNFAIR_CPU}: {reason}"));
        self.inner
            .warnings
            .iter()
            .cloned()
            .chain(unfair_cpu)
            .collect()
    }

    fn govern_warm(&self, room: Arc<dyn WarmRoom>) {
        self.govern_pool(room);
    }

    async fn shed_warm(&self) -> bool {
        LocalExecutor::shed_warm(self).await
    }

    fn watch_stops(&self, listener: StopListener) {
        self.inner.stops.add(listener);
    }
}
