//! One runner pod as the shared call relay sees it ([`RunnerControl`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use toolserver_sandbox::{forward_frames, Frame, InvokeRequest, RunnerControl, SandboxError};

use super::{KeepTouched, KubernetesExecutor, Runner};
/// One runner pod as the shared relay sees it, for one call.
pub(super) struct PodRunner {
    pub(super) executor: KubernetesExecutor,
    pub(super) runner: Arc<Runner>,
    pub(super) _touching: KeepTouched,
}

#[async_trait]
impl RunnerControl for PodRunner {
    fn runner_name(&self) -> &str {
        &self.runner.name
    }

    async fn kill_worker(&self) {
        let socket = self.executor.inner.settings.socket_path.clone();
        let stopped = match self
            .executor
            .exec(
                &self.runner.pod(),
                "launch.mjs",
                &["--socket", &socket, "--stop"],
            )
            .await
        {
            Ok(stream) => stream.output().await,
            Err(err) => Err(err),
        };
        if let Err(err) = stopped {
            tracing::warn!(runner = %self.runner.name, error = %err, "could not stop the worker");
        }
    }

    async fn oneshot(
        &self,
        request: &InvokeRequest,
        tx: &mpsc::Sender<Frame>,
    ) -> Result<(), SandboxError> {
        let mut stream = self
            .executor
            .exec(&self.runner.pod(), "oneshot.mjs", &[])
            .await?;
        let body =
            serde_json::to_vec(request).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        stream.write_all(&body).await?;
        stream.shutdown().await?;
        if forward_frames(&mut stream, tx).await? {
            return Ok(());
        }
        Err(SandboxError::Protocol(format!(
            "one-shot runner ended without a result: {}",
            stream.stderr().trim()
        )))
    }

    async fn knows_call(&self, call_id: &str) -> bool {
        match self.executor.query_connection(&self.runner.pod()).await {
            Ok(mut connection) => connection.logs(call_id).await.is_ok(),
            Err(_) => false,
        }
    }

    async fn relaunch(
        &self,
        request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError> {
        let (connection, _) = self.executor.connect_retrying(&self.runner).await?;
        connection.invoke(request).await
    }

    async fn call_finished(&self) {
        self.runner.inflight.fetch_sub(1, Ordering::SeqCst);
        self.executor.touch(&self.runner).await;
    }
}
