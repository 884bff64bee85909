//! Exec into a runner pod: a command's stdin and stdout become one byte
//! stream ([`ExecStream`]), carried by the API server's `v5.channel.k8s.io`
//! WebSocket protocol (the exec channel, and launch, stop and the one-shot
//! fallback on the direct one), needing no port in the pod. Bytes arrive as the
//! command writes them. Stderr is collected (bounded) for error messages.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, AttachedProcess};
use kube::Api;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::io::{ReadHalf, SimplexStream, WriteHalf};
use toolserver_sandbox::SandboxError;

use crate::names::CONTAINER;

/// Stderr kept per exec, for error messages.
const STDERR_LIMIT: usize = 4096;

/// A command running in a pod, as one duplex byte stream (its stdout to
/// read, its stdin to write). Dropping it ends the exec session.
pub struct ExecStream {
    stdout: ReadHalf<SimplexStream>,
    stdin: WriteHalf<SimplexStream>,
    stderr: Arc<Mutex<String>>,
    process: AttachedProcess,
}

impl ExecStream {
    /// Runs `command` in `pod`'s runner container.
    pub async fn open(
        pods: &Api<Pod>,
        pod: &str,
        command: &[String],
    ) -> Result<Self, SandboxError> {
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(true)
            .stdout(true)
            .stderr(true);
        let mut process = pods
            .exec(pod, command.iter().map(String::as_str), &params)
            .await
            .map_err(|e| SandboxError::Transport(format!("exec into {pod}: {e}")))?;
        let missing = || SandboxError::Transport("exec stream without stdio".into());
        let stdout = process.stdout().ok_or_else(missing)?;
        let stdin = process.stdin().ok_or_else(missing)?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(reader) = process.stderr() {
            tokio::spawn(collect_stderr(reader, stderr.clone()));
        }
        Ok(Self {
            stdout,
            stdin,
            stderr,
            process,
        })
    }

    /// What the command wrote to stderr so far (at most a few KiB).
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Reads stdout to its end and waits for the command to exit; an exit
    /// other than success is an error naming the status and stderr.
    pub async fn output(mut self) -> Result<String, SandboxError> {
        let mut stdout = String::new();
        self.stdout.read_to_string(&mut stdout).await?;
        let status = match self.process.take_status() {
            Some(status) => status.await,
            None => None,
        };
        match status {
            Some(status) if status.status.as_deref() == Some("Failure") => {
                Err(SandboxError::Start(format!(
                    "{} {}",
                    status.message.unwrap_or_default(),
                    self.stderr().trim()
                )))
            }
            _ => Ok(stdout),
        }
    }
}

async fn collect_stderr(mut reader: ReadHalf<SimplexStream>, into: Arc<Mutex<String>>) {
    let mut buf = [0u8; 1024];
    while let Ok(read) = reader.read(&mut buf).await {
        if read == 0 {
            return;
        }
        if let Ok(mut text) = into.lock() {
            if text.len() < STDERR_LIMIT {
                text.push_str(&String::from_utf8_lossy(&buf[..read]));
            }
        }
    }
}

impl AsyncRead for ExecStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}

impl AsyncWrite for ExecStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stdin).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stdin).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stdin).poll_shutdown(cx)
    }
}
