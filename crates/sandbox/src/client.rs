//! HTTP/1.1 over the worker's unix socket, one connection per request
//! (connecting to a local socket costs microseconds).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::protocol::FrameDecoder;
use crate::{Frame, InvokeRequest, SandboxError};

/// Talks to one worker's socket.
#[derive(Debug, Clone)]
pub struct WorkerClient {
    socket: PathBuf,
}

impl WorkerClient {
    /// A client for the worker listening on `socket`.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Response<Incoming>, SandboxError> {
        let transport = |e: &dyn std::fmt::Display| SandboxError::Transport(e.to_string());
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| transport(&e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| transport(&e))?;
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "worker")
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| transport(&e))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| transport(&e))
    }

    async fn json(&self, method: Method, path: &str, body: Bytes) -> Result<Value, SandboxError> {
        let response = self.send(method, path, body).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| SandboxError::Transport(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(SandboxError::Protocol(format!(
                "{path} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice(&bytes).map_err(|e| SandboxError::Protocol(e.to_string()))
    }

    /// `GET /health`: the worker's counters.
    pub async fn health(&self) -> Result<Value, SandboxError> {
        self.json(Method::GET, "/health", Bytes::new()).await
    }

    /// `POST /cancel`: whether the call was running.
    pub async fn cancel(&self, call_id: &str) -> Result<bool, SandboxError> {
        let body = serde_json::to_vec(&serde_json::json!({ "callId": call_id }))
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let answer = self.json(Method::POST, "/cancel", body.into()).await?;
        Ok(answer["cancelled"].as_bool().unwrap_or(false))
    }

    /// `GET /logs?callId=`: the kept log lines of a background call.
    pub async fn logs(&self, call_id: &str) -> Result<Value, SandboxError> {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("callId", call_id)
            .finish();
        let answer = self
            .json(Method::GET, &format!("/logs?{query}"), Bytes::new())
            .await?;
        Ok(answer["logs"].clone())
    }

    /// `POST /invoke`: frames are sent on the returned channel as they arrive.
    /// If the stream breaks before a terminal frame, the channel closes
    /// without one; the caller decides what that means.
    pub async fn invoke(
        &self,
        request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError> {
        let body =
            serde_json::to_vec(request).map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let response = self.send(Method::POST, "/invoke", body.into()).await?;
        if !response.status().is_success() {
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(SandboxError::Protocol(format!(
                "/invoke answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(pump_frames(response.into_body(), tx));
        Ok(rx)
    }
}

async fn pump_frames(mut body: Incoming, tx: mpsc::Sender<Frame>) {
    let mut decoder = FrameDecoder::default();
    while let Some(next) = body.frame().await {
        let Ok(frame) = next else { return };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let frames = match decoder.push(data) {
            Ok(frames) => frames,
            Err(err) => {
                let _ = tx.send(Frame::error("WorkerProtocolError", err)).await;
                return;
            }
        };
        for frame in frames {
            let terminal = frame.is_terminal();
            if tx.send(frame).await.is_err() || terminal {
                return;
            }
        }
    }
}
