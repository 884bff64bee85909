//! The call relay every backend shares. Sequence: relay the worker's frames
//! until a terminal one. A worker answers `/invoke` with its response head
//! before it runs any of the tool's code, so a call whose worker never
//! answered (it is gone, or crashed before accepting) has not run: a plain
//! call then runs once in the one-shot runner instead. A call the worker
//! accepted and then broke off, with or without frames, may have run some of
//! the tool's code: the worker is killed and the call ends in a
//! `RunnerCrashed` error frame (naming how the worker ended, where the
//! backend knows), never in a second execution. A worker that
//! refused the request (an HTTP error) gets it back as a `RunnerRefused`
//! error frame. A detached call never goes to the one-shot runner (it would
//! run its body in the foreground and nobody would post its completion):
//! unless the worker turns out to run it already (its `launched` frame was
//! lost), the worker is replaced and the launch sent once more, and a second
//! silence is a `LaunchFailed` error frame. Only a launch that produced no
//! frame is ever sent again, so a detached body never runs twice; nor is a
//! launch that may answer inline once the worker accepted it (its body runs
//! before its first frame): it ends as a broken-off call. If no
//! terminal frame arrives by the deadline plus the kill grace, the worker is
//! hung: it is killed and the next call starts a fresh one. A backend that
//! watches its runners' resource limits ([`RunnerControl::watch_limits`])
//! has the call checked while it runs and once more as it ends: a breach
//! kills the worker and ends the call in a `LimitExceeded` error frame naming
//! the limit, whatever the tool answered. For a call the worker answered,
//! only the cheap part of that last check comes before its terminal frame;
//! the rest runs right after it, and a breach found then kills the worker
//! (the answer stands) before the runner serves its next call
//! (`limits/watch.rs`).
//! A detached call's `launched` frame is recorded with the runner first
//! ([`RunnerControl::call_launched`]), so a backend that sees its worker
//! exit can name the calls that went with it. Whatever the outcome, the
//! runner hears that the call is over ([`RunnerControl::call_finished`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::limits::{CallWatch, LimitBreach, Settling};
use crate::protocol::FrameDecoder;
use crate::{Frame, InvokeRequest, SandboxError};

/// What the relay needs of a backend's runner.
#[async_trait]
pub trait RunnerControl: Send + Sync + 'static {
    /// The runner's name, for logs.
    fn runner_name(&self) -> &str;

    /// Kills the resident worker; the next call starts a fresh one.
    async fn kill_worker(&self);

    /// Runs `request` once in a one-shot runner, sending its frames to `tx`;
    /// `Ok` once a terminal frame was sent.
    async fn oneshot(
        &self,
        request: &InvokeRequest,
        tx: &mpsc::Sender<Frame>,
    ) -> Result<(), SandboxError>;

    /// Whether the worker already knows the detached call `call_id` (it
    /// keeps logs for it): asked before a silent launch is sent again.
    async fn knows_call(&self, call_id: &str) -> bool;

    /// Makes sure a worker runs (the previous one was killed) and sends it
    /// `request`; the frames arrive on the returned channel.
    async fn relaunch(
        &self,
        request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError>;

    /// The call has ended (its terminal frame is sent): the runner's
    /// in-flight count and idle clock are updated here.
    async fn call_finished(&self);

    /// Starts watching the call about to be relayed against the runner's
    /// resource limits; `None` (the default) where the backend's own limits
    /// stop a worker.
    fn watch_limits(&self) -> Option<Arc<CallWatch>> {
        None
    }

    /// A call broke a resource limit: the worker is killed and whatever the
    /// breach left behind is cleared (the default only kills).
    async fn limit_broken(&self, breach: &LimitBreach) {
        let _ = breach;
        self.kill_worker().await;
    }

    /// The detached call `request` runs in the background on the worker
    /// that answered its launch (the default keeps no record).
    async fn call_launched(&self, request: &InvokeRequest) {
        let _ = request;
    }

    /// How the worker that last served this call ended, once it has (the
    /// default does not know).
    async fn exit_cause(&self) -> Option<String> {
        None
    }
}

/// How long asking a worker about a call may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The worker's answer to `/invoke`: its frames once it accepted the call.
pub type WorkerAnswer = Result<mpsc::Receiver<Frame>, SandboxError>;

/// Relays one call's frames from `worker` (the pending `/invoke`; the call's
/// deadline covers waiting for its answer too), with the fallbacks above, in
/// a task of its own; returns the frames the caller receives.
pub fn spawn_relay(
    runner: impl RunnerControl,
    request: InvokeRequest,
    worker: impl Future<Output = WorkerAnswer> + Send + 'static,
    kill_grace: Duration,
) -> mpsc::Receiver<Frame> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let settling = relay_call(&runner, &request, worker, &tx, kill_grace).await;
        if let Some(settling) = settling {
            if let Some(breach) = settling.breach().await {
                broken_after_answer(&runner, &request, &breach).await;
            }
        }
        runner.call_finished().await;
    });
    rx
}

/// How relaying a worker's frames ended.
enum RelayEnd {
    /// The worker sent its terminal frame (not yet relayed).
    Done(Frame),
    /// No terminal frame by the deadline plus grace.
    Deadline,
    /// The worker answered the request with an HTTP error.
    Refused(String),
    /// The stream could not be opened or broke off.
    Broken(String),
}

fn deadline_frame(request: &InvokeRequest) -> Frame {
    let message = format!("the call ran past its {} ms deadline", request.deadline_ms);
    Frame::error("DeadlineExceeded", message)
}

/// How far relaying got.
struct Relayed {
    end: RelayEnd,
    /// Whether the worker accepted the call (answered `/invoke` with 200).
    accepted: bool,
    /// Frames relayed.
    frames: usize,
}

/// Relays one call's frames from `worker` to `tx`, with the fallbacks
/// above; what is left of its limit check once its terminal frame is out.
async fn relay_call(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    worker: impl Future<Output = WorkerAnswer>,
    tx: &mpsc::Sender<Frame>,
    kill_grace: Duration,
) -> Option<Settling> {
    let (relayed, settling) = match runner.watch_limits() {
        None => (relay_frames(request, worker, tx, kill_grace).await, None),
        Some(watch) => {
            let relayed = tokio::select! {
                relayed = relay_frames(request, worker, tx, kill_grace) => relayed,
                breach = watch.clone().breached() => {
                    end_on_breach(runner, request, breach, tx).await;
                    return None;
                }
            };
            let answered = matches!(relayed.end, RelayEnd::Done(_));
            let breach = if answered {
                watch.answered().await
            } else {
                watch.clone().after().await
            };
            if let Some(breach) = breach {
                end_on_breach(runner, request, breach, tx).await;
                return None;
            }
            (relayed, answered.then(|| watch.settle()))
        }
    };
    let Relayed {
        end,
        accepted,
        frames: relayed,
    } = relayed;
    let name = runner.runner_name();
    let refused = matches!(end, RelayEnd::Refused(_));
    match end {
        RelayEnd::Done(terminal) => finish(runner, request, terminal, tx).await,
        RelayEnd::Deadline => {
            tracing::warn!(runner = %name, call.id = %request.call_id, "worker missed the deadline; killing it");
            runner.kill_worker().await;
            let _ = tx.send(deadline_frame(request)).await;
        }
        RelayEnd::Refused(reason) | RelayEnd::Broken(reason)
            if relayed == 0 && request.is_detached() && !(accepted && request.answers_inline()) =>
        {
            launch_again(runner, request, reason, refused, tx, kill_grace).await;
        }
        RelayEnd::Refused(reason) => {
            tracing::warn!(runner = %name, call.id = %request.call_id, %reason, "worker refused the call");
            let _ = tx.send(Frame::error("RunnerRefused", reason)).await;
        }
        RelayEnd::Broken(reason) if !accepted => {
            tracing::warn!(runner = %name, call.id = %request.call_id, %reason, "worker never accepted the call; using the one-shot runner");
            runner.kill_worker().await;
            run_oneshot(runner, request, tx, kill_grace).await;
        }
        RelayEnd::Broken(reason) => {
            tracing::warn!(runner = %name, call.id = %request.call_id, %reason, relayed, "worker broke off a call it had accepted; not running it again");
            runner.kill_worker().await;
            let died = match runner.exit_cause().await {
                Some(cause) => format!("the runner's worker died during the call ({cause})"),
                None => "the runner's worker died during the call".to_owned(),
            };
            let message = format!("{died}: {reason}");
            let _ = tx.send(Frame::error("RunnerCrashed", message)).await;
        }
    }
    settling
}

/// Ends a call that broke a resource limit: the worker is killed, the
/// breach cleared, and the call answered with the limit's error.
async fn end_on_breach(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    breach: LimitBreach,
    tx: &mpsc::Sender<Frame>,
) {
    tracing::warn!(runner = %runner.runner_name(), call.id = %request.call_id, limit = ?breach.limit, %breach, "call broke a runner limit; killing the worker");
    crate::metrics::limit_kill(breach.limit);
    runner.limit_broken(&breach).await;
    let frame = Frame::error(LimitBreach::ERROR_NAME, breach.to_string());
    let _ = tx.send(frame).await;
}

/// A call answered, and its runner was then found past a limit: the worker
/// is killed and the breach cleared before the runner serves another call.
async fn broken_after_answer(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    breach: &LimitBreach,
) {
    tracing::warn!(runner = %runner.runner_name(), call.id = %request.call_id, limit = ?breach.limit, %breach, "runner found past a limit after the call answered; killing the worker");
    crate::metrics::limit_kill(breach.limit);
    runner.limit_broken(breach).await;
}

/// Waits for the worker's answer and relays its frames until a terminal
/// one (returned, not relayed), all under the call's deadline plus grace.
async fn relay_frames(
    request: &InvokeRequest,
    worker: impl Future<Output = WorkerAnswer>,
    tx: &mpsc::Sender<Frame>,
    kill_grace: Duration,
) -> Relayed {
    let limit = Duration::from_millis(request.deadline_ms) + kill_grace;
    let mut accepted = false;
    let mut relayed = 0usize;
    let end = tokio::time::timeout(limit, async {
        let mut frames = match worker.await {
            Err(SandboxError::Protocol(reason)) => return RelayEnd::Refused(reason),
            Err(err) => return RelayEnd::Broken(err.to_string()),
            Ok(frames) => frames,
        };
        accepted = true;
        while let Some(frame) = frames.recv().await {
            relayed += 1;
            if frame.is_terminal() {
                return RelayEnd::Done(frame);
            }
            let _ = tx.send(frame).await;
        }
        RelayEnd::Broken("the worker closed the stream without a result".to_owned())
    })
    .await
    .unwrap_or(RelayEnd::Deadline);
    Relayed {
        end,
        accepted,
        frames: relayed,
    }
}

/// Whether the worker already runs the detached call (within [`PROBE_TIMEOUT`]).
async fn already_launched(runner: &dyn RunnerControl, request: &InvokeRequest) -> bool {
    tokio::time::timeout(PROBE_TIMEOUT, runner.knows_call(&request.call_id))
        .await
        .unwrap_or(false)
}

/// A detached call whose launch produced no frame: reported launched if the
/// worker runs it after all; refused if the worker said no; otherwise sent
/// once more to a fresh worker.
async fn launch_again(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    reason: String,
    refused: bool,
    tx: &mpsc::Sender<Frame>,
    kill_grace: Duration,
) {
    let name = runner.runner_name();
    if already_launched(runner, request).await {
        tracing::warn!(runner = %name, call.id = %request.call_id, %reason, "the launched frame was lost; the worker runs the call");
        finish(runner, request, Frame::Launched, tx).await;
        return;
    }
    let failed = |reason: String| {
        Frame::error(
            "LaunchFailed",
            format!("the detached call could not be launched: {reason}"),
        )
    };
    if refused {
        let _ = tx.send(failed(reason)).await;
        return;
    }
    tracing::warn!(runner = %name, call.id = %request.call_id, %reason, "worker produced no frames for a detached call; launching it on a fresh worker");
    runner.kill_worker().await;
    let retry = relay_frames(request, runner.relaunch(request), tx, kill_grace).await;
    match (retry.end, retry.frames) {
        (RelayEnd::Done(terminal), _) => finish(runner, request, terminal, tx).await,
        (RelayEnd::Deadline, _) => {
            runner.kill_worker().await;
            let _ = tx.send(deadline_frame(request)).await;
        }
        (RelayEnd::Refused(reason) | RelayEnd::Broken(reason), 0) => {
            let frame = if already_launched(runner, request).await {
                Frame::Launched
            } else {
                failed(reason)
            };
            finish(runner, request, frame, tx).await;
        }
        (RelayEnd::Refused(reason) | RelayEnd::Broken(reason), _) => {
            runner.kill_worker().await;
            let _ = tx.send(Frame::error("RunnerCrashed", reason)).await;
        }
    }
}

/// Sends the call's terminal frame; a `launched` one is first recorded
/// with the runner, whose worker now runs the call in the background.
async fn finish(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    terminal: Frame,
    tx: &mpsc::Sender<Frame>,
) {
    if terminal == Frame::Launched {
        runner.call_launched(request).await;
    }
    let _ = tx.send(terminal).await;
}

/// Runs the one-shot fallback under the call's deadline plus grace.
async fn run_oneshot(
    runner: &dyn RunnerControl,
    request: &InvokeRequest,
    tx: &mpsc::Sender<Frame>,
    kill_grace: Duration,
) {
    let limit = Duration::from_millis(request.deadline_ms) + kill_grace;
    let message = match tokio::time::timeout(limit, runner.oneshot(request, tx)).await {
        Ok(Ok(())) => return,
        Ok(Err(err)) => Frame::error("RunnerError", format!("one-shot runner failed: {err}")),
        Err(_) => deadline_frame(request),
    };
    let _ = tx.send(message).await;
}

/// Reads NDJSON frames from `reader` (a one-shot runner's stdout) and sends
/// them to `tx`. `Ok(true)` once a terminal frame was sent, `Ok(false)` if
/// the output ended without one.
pub async fn forward_frames<R>(
    mut reader: R,
    tx: &mpsc::Sender<Frame>,
) -> Result<bool, SandboxError>
where
    R: AsyncRead + Unpin,
{
    let mut decoder = FrameDecoder::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = reader.read(&mut buf).await?;
        if read == 0 {
            return Ok(false);
        }
        for frame in decoder.push(&buf[..read]).map_err(SandboxError::Protocol)? {
            let terminal = frame.is_terminal();
            let _ = tx.send(frame).await;
            if terminal {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests;
