//! The worker image's scripts run in a pod by exec: any script
//! ([`run`]), and the launcher that starts the worker ([`launch`]), which
//! both a call's slow path and the warm pool use.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::Value;
use toolserver_sandbox::SandboxError;

use crate::exec::ExecStream;
use crate::settings::KubernetesSettings;

/// Runs `node <script> <args>` in pod `pod`.
pub(crate) async fn run(
    pods: &Api<Pod>,
    settings: &KubernetesSettings,
    pod: &str,
    script: &str,
    args: &[&str],
) -> Result<ExecStream, SandboxError> {
    let mut command = vec!["node".to_owned(), settings.script(script)];
    command.extend(args.iter().map(|arg| (*arg).to_owned()));
    ExecStream::open(pods, pod, &command).await
}

/// Starts the worker in pod `pod` unless a healthy one runs; true if started.
pub(crate) async fn launch(
    pods: &Api<Pod>,
    settings: &KubernetesSettings,
    pod: &str,
) -> Result<bool, SandboxError> {
    let timeout = settings.worker_start_timeout.as_millis().to_string();
    let args = ["--socket", &settings.socket_path, "--timeout-ms", &timeout];
    let output = run(pods, settings, pod, "launch.mjs", &args)
        .await?
        .output()
        .await
        .map_err(|e| SandboxError::Start(format!("starting the worker in {pod}: {e}")))?;
    let answer: Value = serde_json::from_str(output.trim())
        .map_err(|e| SandboxError::Protocol(format!("launcher said {output:?}: {e}")))?;
    Ok(answer["started"].as_bool().unwrap_or(false))
}
