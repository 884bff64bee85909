//! HTTP/1.1 to a worker. A [`WorkerConnection`] runs over any byte stream: a
//! unix socket for local runners, a TCP connection to a pod (with the
//! runner's bearer secret) or an exec stream into it for Kubernetes ones. Requests on one connection go one after another (keep-alive), so a
//! health check and the call it guards can share a connection.
//! [`WorkerClient`] opens one socket connection per request (connecting to a
//! local socket costs microseconds).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, AUTHORIZATION};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::protocol::FrameDecoder;
use crate::{Frame, InvokeRequest, SandboxError};

fn transport(err: impl std::fmt::Display) -> SandboxError {
    SandboxError::Transport(err.to_string())
}

/// One HTTP/1.1 connection to a worker.
pub struct WorkerConnection {
    sender: SendRequest<Full<Bytes>>,
    authorization: Option<HeaderValue>,
}

impl WorkerConnection {
    /// Speaks HTTP/1.1 over `io`; the connection is driven by a spawned task
    /// and closes once this value and every response body are dropped.
    pub async fn handshake<IO>(io: IO) -> Result<Self, SandboxError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(transport)?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            authorization: None,
        })
    }

    /// [`Self::handshake`] for a worker that wants `bearer` on every request
    /// (a pod's direct channel).
    pub async fn handshake_bearer<IO>(io: IO, bearer: &str) -> Result<Self, SandboxError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut value = HeaderValue::try_from(format!("Bearer {bearer}")).map_err(transport)?;
        value.set_sensitive(true);
        let mut connection = Self::handshake(io).await?;
        connection.authorization = Some(value);
        Ok(connection)
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Response<Incoming>, SandboxError> {
        self.sender.ready().await.map_err(transport)?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "worker")
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request.body(Full::new(body)).map_err(transport)?;
        let response = self.sender.send_request(request).await.map_err(transport)?;
        if response.status() == StatusCode::UNAUTHORIZED {
            return Err(SandboxError::Unauthorized(format!("{path} answered 401")));
        }
        Ok(response)
    }

    async fn json(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Value, SandboxError> {
        let response = self.send(method, path, body).await?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(transport)?
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
    pub async fn health(&mut self) -> Result<Value, SandboxError> {
        self.json(Method::GET, "/health", Bytes::new()).await
    }

    /// `GET /health`'s in-flight count: the calls the worker runs, detached
    /// ones included until their outcome is delivered.
    pub async fn inflight(&mut self) -> Result<u64, SandboxError> {
        let health = self.health().await?;
        health["inflight"].as_u64().ok_or_else(|| {
            SandboxError::Protocol(format!("/health answered no inflight count: {health}"))
        })
    }

    /// `POST /cancel`: whether the call was running.
    pub async fn cancel(&mut self, call_id: &str) -> Result<bool, SandboxError> {
        let body = serde_json::to_vec(&serde_json::json!({ "callId": call_id }))
            .map_err(|e| SandboxError::Protocol(e.to_string()))?;
        let answer = self.json(Method::POST, "/cancel", body.into()).await?;
        Ok(answer["cancelled"].as_bool().unwrap_or(false))
    }

    /// `GET /logs?callId=`: the kept log lines of a background call.
    pub async fn logs(&mut self, call_id: &str) -> Result<Value, SandboxError> {
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
    /// without one; the caller decides what that means. Dropping the receiver
    /// closes the connection, which makes the worker abort the call.
    pub async fn invoke(
        mut self,
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

/// Talks to one worker's unix socket.
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

    /// A fresh connection to the socket.
    pub async fn connect(&self) -> Result<WorkerConnection, SandboxError> {
        let stream = UnixStream::connect(&self.socket).await.map_err(transport)?;
        WorkerConnection::handshake(stream).await
    }

    /// `GET /health`: the worker's counters.
    pub async fn health(&self) -> Result<Value, SandboxError> {
        self.connect().await?.health().await
    }

    /// `GET /health`'s in-flight count; see [`WorkerConnection::inflight`].
    pub async fn inflight(&self) -> Result<u64, SandboxError> {
        self.connect().await?.inflight().await
    }

    /// `POST /cancel`: whether the call was running.
    pub async fn cancel(&self, call_id: &str) -> Result<bool, SandboxError> {
        self.connect().await?.cancel(call_id).await
    }

    /// `GET /logs?callId=`: the kept log lines of a background call.
    pub async fn logs(&self, call_id: &str) -> Result<Value, SandboxError> {
        self.connect().await?.logs(call_id).await
    }

    /// `POST /invoke` on a connection of its own; see [`WorkerConnection::invoke`].
    pub async fn invoke(
        &self,
        request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError> {
        self.connect().await?.invoke(request).await
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
