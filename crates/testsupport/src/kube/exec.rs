//! `exec` into a pod: a local child process bridged over a WebSocket that
//! speaks the Kubernetes channel protocol (`v5.channel.k8s.io`, or
//! `v4.channel.k8s.io` without the close channel).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{close_code, CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::answers::{bad_request, not_found};
use super::processes::Container;
use super::{pods, Shared};

const V5: &str = "v5.channel.k8s.io";
const V4: &str = "v4.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;

/// How long output may still come after the process exited (from processes
/// it left behind holding its stdout or stderr).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long the client has to answer the closing handshake.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// `GET` (or `POST`) `.../pods/{name}/exec?command=..&stdin=true&...`.
pub(super) async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((namespace, name)): Path<(String, String)>,
    request: Request,
) -> Response {
    let mut command = Vec::new();
    let (mut stdin, mut stdout, mut stderr) = (false, false, false);
    let query = request.uri().query().unwrap_or_default().to_owned();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let on = value == "true" || value == "1";
        match key.as_ref() {
            "command" => command.push(value.into_owned()),
            "stdin" => stdin = on,
            "stdout" => stdout = on,
            "stderr" => stderr = on,
            _ => {}
        }
    }
    let container = {
        let state = shared.lock();
        let Some(pod) = state
            .objects
            .get(&pods::collection(&namespace))
            .and_then(|pods| pods.get(&name))
        else {
            return not_found("pods", &name);
        };
        let phase = pod["status"]["phase"].as_str().unwrap_or_default();
        if matches!(phase, "Succeeded" | "Failed") {
            let message = format!(
                "cannot exec into a container in a completed pod; current phase is {phase}"
            );
            return bad_request(&message);
        }
        match state.pods.get(&(namespace, name.clone())) {
            Some(runtime) if phase == "Running" => runtime.container.clone(),
            _ => return bad_request(&format!("pod {name} has no running container")),
        }
    };
    if command.is_empty() {
        return bad_request("you must specify at least one command for the container");
    }
    let (mut parts, _) = request.into_parts();
    parts.method = Method::GET;
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade.protocols([V5, V4]),
        Err(rejection) => return rejection.into_response(),
    };
    if upgrade.selected_protocol().is_none() {
        return bad_request(&format!("the client must offer {V5} or {V4}"));
    }
    *shared.lock().execs.entry(name).or_default() += 1;
    let session = Session {
        container,
        command,
        stdin,
        stdout,
        stderr,
        shutdown: shared.shutdown.clone(),
    };
    upgrade.on_upgrade(move |socket| session.run(socket))
}

/// One exec: what to run and which streams the client asked for.
struct Session {
    container: Container,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
    shutdown: watch::Receiver<()>,
}

/// A message from the client, by channel.
#[derive(Debug, PartialEq)]
enum Inbound<'a> {
    Stdin(&'a [u8]),
    CloseStdin,
    Ignored,
}

impl<'a> Inbound<'a> {
    fn parse(data: &'a [u8]) -> Self {
        match data {
            [STDIN, rest @ ..] => Self::Stdin(rest),
            [CLOSE, STDIN, ..] => Self::CloseStdin,
            _ => Self::Ignored,
        }
    }
}

/// A message to the client on `channel`.
fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(data.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(data);
    frame
}

impl Session {
    async fn run(self, mut socket: WebSocket) {
        let Some(mut command) = self.container.command(&self.command) else {
            return;
        };
        let pipe = |wanted: bool| {
            if wanted {
                Stdio::piped()
            } else {
                Stdio::null()
            }
        };
        command
            .stdin(pipe(self.stdin))
            .stdout(pipe(self.stdout))
            .stderr(pipe(self.stderr))
            .process_group(0);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let message = format!(
                    "failed to exec in container: starting container process caused: exec: {:?}: {error}",
                    self.command[0]
                );
                let status = json!({"metadata": {}, "status": "Failure", "message": message,
                    "reason": "InternalError", "code": 500});
                return finish(socket, &status).await;
            }
        };
        let mut tasks = JoinSet::new();
        let (frames, mut outbound) = mpsc::channel(16);
        if let Some(out) = child.stdout.take() {
            tasks.spawn(pump(out, STDOUT, frames.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tasks.spawn(pump(err, STDERR, frames.clone()));
        }
        drop(frames);
        let mut stdin = child.stdin.take().map(|pipe| {
            let (chunks, received) = mpsc::unbounded_channel();
            tasks.spawn(feed(pipe, received));
            chunks
        });
        let mut shutdown = self.shutdown.clone();
        let mut exit = None;
        let mut drained = false;
        let grace = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(grace);
        let exit = loop {
            if drained {
                if let Some(exit) = exit.take() {
                    break exit;
                }
            }
            tokio::select! {
                status = child.wait(), if exit.is_none() => {
                    exit = Some(status);
                    grace.as_mut().reset(tokio::time::Instant::now() + DRAIN_GRACE);
                }
                frame = outbound.recv(), if !drained => match frame {
                    Some(frame) => {
                        if socket.send(Message::Binary(frame.into())).await.is_err() {
                            return abandon(child).await;
                        }
                    }
                    None => drained = true,
                },
                message = socket.recv() => match message {
                    Some(Ok(Message::Binary(data))) => match Inbound::parse(&data) {
                        Inbound::Stdin(bytes) => {
                            if let Some(chunks) = &stdin {
                                let _ = chunks.send(bytes.to_vec());
                            }
                        }
                        Inbound::CloseStdin => stdin = None,
                        Inbound::Ignored => {}
                    },
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return abandon(child).await,
                    Some(Ok(_)) => {}
                },
                () = &mut grace, if exit.is_some() => drained = true,
                _ = shutdown.changed() => return abandon(child).await,
            }
        };
        finish(socket, &outcome(&self.command, &exit)).await;
    }
}

/// The status JSON for how the command ended.
fn outcome(command: &[String], exit: &io::Result<ExitStatus>) -> Value {
    let code = match exit {
        Ok(status) if status.success() => return json!({"metadata": {}, "status": "Success"}),
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|signal| 128 + signal))
            .unwrap_or(1),
        Err(error) => {
            let message = format!("error waiting for the command: {error}");
            return json!({"metadata": {}, "status": "Failure", "message": message,
                "reason": "InternalError", "code": 500});
        }
    };
    let message = format!(
        "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
        command.join(" ")
    );
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// Sends `status` on the status channel and closes the WebSocket.
async fn finish(mut socket: WebSocket, status: &Value) {
    let _ = socket
        .send(Message::Binary(
            frame(STATUS, status.to_string().as_bytes()).into(),
        ))
        .await;
    let close = CloseFrame {
        code: close_code::NORMAL,
        reason: "".into(),
    };
    let _ = socket.send(Message::Close(Some(close))).await;
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = socket.recv().await {}
    })
    .await;
}

/// Kills the exec'd process and its process group; processes that left the
/// group (detached ones) live on, as they would in a container.
async fn abandon(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
    let _ = child.kill().await;
}

/// Forwards what the process writes to `pipe` as frames on `channel`.
async fn pump(mut pipe: impl AsyncRead + Unpin, channel: u8, frames: mpsc::Sender<Vec<u8>>) {
    let mut buffer = vec![0; 32 * 1024];
    while let Ok(read @ 1..) = pipe.read(&mut buffer).await {
        if frames.send(frame(channel, &buffer[..read])).await.is_err() {
            return;
        }
    }
}

/// Writes stdin chunks to the process; closes its stdin when they end.
async fn feed(mut pipe: ChildStdin, mut chunks: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(chunk) = chunks.recv().await {
        if pipe.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_their_channel_first() {
        assert_eq!(frame(STDOUT, b"hi"), [1, b'h', b'i']);
        assert_eq!(frame(STATUS, b""), [3]);
        assert_eq!(Inbound::parse(&[0, b'x']), Inbound::Stdin(b"x"));
        assert_eq!(Inbound::parse(&[0]), Inbound::Stdin(b""));
        assert_eq!(Inbound::parse(&[255, 0]), Inbound::CloseStdin);
        assert_eq!(Inbound::parse(&[255, 1]), Inbound::Ignored);
        assert_eq!(Inbound::parse(&[4, b'{']), Inbound::Ignored);
        assert_eq!(Inbound::parse(&[]), Inbound::Ignored);
    }

    #[test]
    fn outcomes_are_statuses() {
        let command = ["sh", "-c", "exit 3"].map(str::to_owned);
        let success = outcome(&command, &Ok(ExitStatus::from_raw(0)));
        assert_eq!(success, json!({"metadata": {}, "status": "Success"}));
        let failure = outcome(&command, &Ok(ExitStatus::from_raw(3 << 8)));
        assert_eq!(failure["reason"], "NonZeroExitCode");
        assert_eq!(failure["details"]["causes"][0]["message"], "3");
        assert_eq!(
            failure["message"],
            "command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3"
        );
        let killed = outcome(&command, &Ok(ExitStatus::from_raw(9)));
        assert_eq!(killed["details"]["causes"][0]["message"], "137");
    }
}
