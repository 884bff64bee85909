//! The relay's decisions, against a runner that counts what it is asked.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use super::*;
use crate::BundleRef;

/// A runner that counts what the relay asks of it.
#[derive(Default)]
struct Fake {
    knows: bool,
    /// What each relaunched worker sends (none: it stays silent).
    relaunched: Mutex<Vec<Frame>>,
    kills: AtomicUsize,
    oneshots: AtomicUsize,
    relaunches: AtomicUsize,
}

#[async_trait]
impl RunnerControl for Fake {
    fn runner_name(&self) -> &str {
        "fake"
    }

    async fn kill_worker(&self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
    }

    async fn oneshot(
        &self,
        _request: &InvokeRequest,
        tx: &mpsc::Sender<Frame>,
    ) -> Result<(), SandboxError> {
        self.oneshots.fetch_add(1, Ordering::SeqCst);
        let _ = tx
            .send(Frame::Final {
                value: json!("ran in the foreground"),
            })
            .await;
        Ok(())
    }

    async fn knows_call(&self, _call_id: &str) -> bool {
        self.knows
    }

    async fn relaunch(
        &self,
        _request: &InvokeRequest,
    ) -> Result<mpsc::Receiver<Frame>, SandboxError> {
        self.relaunches.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(8);
        let frames: Vec<Frame> = self.relaunched.lock().unwrap().drain(..).collect();
        for frame in frames {
            tx.send(frame).await.unwrap();
        }
        Ok(rx)
    }

    async fn call_finished(&self) {}
}

fn request(async_meta: Option<Value>) -> InvokeRequest {
    InvokeRequest {
        call_id: "call-1".into(),
        idempotency_key: "idem".into(),
        input: Value::Null,
        config: Map::new(),
        bundle: BundleRef {
            sha256: "0".repeat(64),
            inline: Some(String::new()),
            url: None,
        },
        deadline_ms: 1000,
        max_output_bytes: 1024,
        async_meta,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

fn detached() -> InvokeRequest {
    request(Some(json!({
        "resultId": "r-1",
        "completeUrl": "http://127.0.0.1:9/complete",
        "completionToken": "t",
    })))
}

/// A worker that closes the stream without a frame.
fn silent() -> Result<mpsc::Receiver<Frame>, SandboxError> {
    Ok(mpsc::channel(1).1)
}

async fn relay(fake: &Fake, request: InvokeRequest, worker: WorkerAnswer) -> Vec<Frame> {
    relay_pending(fake, request, std::future::ready(worker)).await
}

/// [`relay`] with the worker's answer still to come.
async fn relay_pending(
    fake: &Fake,
    request: InvokeRequest,
    worker: impl std::future::Future<Output = WorkerAnswer>,
) -> Vec<Frame> {
    let (tx, mut rx) = mpsc::channel(64);
    relay_call(fake, &request, worker, &tx, Duration::from_millis(100)).await;
    drop(tx);
    let mut frames = Vec::new();
    while let Some(frame) = rx.recv().await {
        frames.push(frame);
    }
    frames
}

fn counts(fake: &Fake) -> [usize; 3] {
    [&fake.kills, &fake.oneshots, &fake.relaunches].map(|n| n.load(Ordering::SeqCst))
}

/// Whether `frames` are one error frame named `expected`.
fn is_only_error(frames: &[Frame], expected: &str) -> bool {
    matches!(frames, [Frame::Error { name, .. }] if name == expected)
}

fn is_launch_failure(frames: &[Frame]) -> bool {
    is_only_error(frames, "LaunchFailed")
}

#[tokio::test]
async fn a_silent_detached_launch_goes_to_a_fresh_worker_never_to_the_one_shot_runner() {
    let fake = Fake::default();
    fake.relaunched.lock().unwrap().push(Frame::Launched);
    let frames = relay(&fake, detached(), silent()).await;
    assert_eq!(frames, vec![Frame::Launched]);
    // [kills, one-shot runs, relaunches]
    assert_eq!(counts(&fake), [1, 0, 1]);
}

#[tokio::test]
async fn a_detached_launch_silent_twice_fails_without_running_the_body() {
    let fake = Fake::default();
    let frames = relay(&fake, detached(), silent()).await;
    assert!(is_launch_failure(&frames), "{frames:?}");
    assert_eq!(counts(&fake), [1, 0, 1]);
}

#[tokio::test]
async fn a_detached_call_the_worker_already_runs_is_not_sent_again() {
    let fake = Fake {
        knows: true,
        ..Fake::default()
    };
    let frames = relay(&fake, detached(), silent()).await;
    assert_eq!(frames, vec![Frame::Launched]);
    assert_eq!(counts(&fake), [0, 0, 0]);
}

#[tokio::test]
async fn a_refused_detached_launch_fails_and_leaves_the_worker_alone() {
    let fake = Fake::default();
    let refused = Err(SandboxError::Protocol("/invoke answered 400".into()));
    let frames = relay(&fake, detached(), refused).await;
    assert!(is_launch_failure(&frames), "{frames:?}");
    assert_eq!(counts(&fake), [0, 0, 0]);
}

#[tokio::test]
async fn a_detached_call_whose_launch_broke_after_a_frame_is_not_sent_again() {
    let fake = Fake::default();
    let (tx, rx) = mpsc::channel(1);
    tx.send(Frame::Log {
        level: "info".into(),
        message: "m".into(),
    })
    .await
    .unwrap();
    drop(tx);
    let frames = relay(&fake, detached(), Ok(rx)).await;
    assert!(
        matches!(frames.last(), Some(Frame::Error { name, .. }) if name == "RunnerCrashed"),
        "{frames:?}"
    );
    assert_eq!(counts(&fake), [1, 0, 0]);
}

#[tokio::test]
async fn an_accepted_launch_that_may_answer_inline_is_not_sent_again_when_it_breaks_silent() {
    let fake = Fake::default();
    fake.relaunched.lock().unwrap().push(Frame::Launched);
    let mut request = detached();
    if let Some(meta) = request.async_meta.as_mut() {
        meta["inlineMs"] = json!(250);
    }
    let frames = relay(&fake, request, silent()).await;
    assert!(is_only_error(&frames, "RunnerCrashed"), "{frames:?}");
    // [kills, one-shot runs, relaunches]
    assert_eq!(counts(&fake), [1, 0, 0]);
}

#[tokio::test]
async fn a_plain_call_the_worker_never_accepted_runs_in_the_one_shot_runner() {
    let fake = Fake::default();
    let unreachable = Err(SandboxError::Transport("connection refused".into()));
    let frames = relay(&fake, request(None), unreachable).await;
    assert_eq!(
        frames,
        vec![Frame::Final {
            value: json!("ran in the foreground")
        }]
    );
    // [kills, one-shot runs, relaunches]
    assert_eq!(counts(&fake), [1, 1, 0]);
}

#[tokio::test]
async fn a_plain_call_whose_worker_died_after_accepting_it_is_never_run_again() {
    let fake = Fake::default();
    let frames = relay(&fake, request(None), silent()).await;
    assert!(is_only_error(&frames, "RunnerCrashed"), "{frames:?}");
    assert_eq!(counts(&fake), [1, 0, 0]);
}

#[tokio::test]
async fn a_refused_plain_call_is_an_error_and_never_runs_elsewhere() {
    let fake = Fake::default();
    let refused = Err(SandboxError::Protocol("/invoke answered 409".into()));
    let frames = relay(&fake, request(None), refused).await;
    assert!(is_only_error(&frames, "RunnerRefused"), "{frames:?}");
    assert_eq!(counts(&fake), [0, 0, 0]);
}

#[tokio::test]
async fn a_worker_that_never_answers_the_invoke_is_cut_off_at_the_deadline() {
    let fake = Fake::default();
    let mut short = request(None);
    short.deadline_ms = 50;
    let frames = relay_pending(&fake, short, std::future::pending()).await;
    assert!(is_only_error(&frames, "DeadlineExceeded"), "{frames:?}");
    assert_eq!(counts(&fake), [1, 0, 0]);
}
