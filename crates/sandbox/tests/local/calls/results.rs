//! What a call returns: one final frame, streamed generator chunks, error
//! frames with captured logs, oversized output refused, and many calls at
//! once on one runner.

use std::time::Duration;

use serde_json::json;
use toolserver_sandbox::{Executor, Frame};

use crate::support::*;

#[tokio::test]
async fn plain_return_is_one_final_frame_with_merged_config() {
    let h = Harness::new();
    let key = key("acct");
    let mut req = request(inline(ECHO), json!({"q": "hello"}));
    req.config.insert("greeting".into(), json!("hi"));
    let frame = run(&h.executor, &key, req).await;
    assert_eq!(
        final_value(&frame),
        json!({"echo": {"q": "hello"}, "config": {"greeting": "hi"}})
    );
}

#[tokio::test]
async fn generator_chunks_stream_before_the_generator_finishes() {
    let h = Harness::new();
    let key = key("acct");
    let tool = r#"
import { existsSync } from 'node:fs';
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    while (!existsSync(process.cwd() + '/release')) await new Promise(r => setTimeout(r, 10));
    yield { step: 2 };
  },
};"#;
    let mut frames = h
        .executor
        .invoke(&key, request(inline(tool), json!({})))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), frames.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        Frame::Chunk {
            value: json!({"step": 1})
        },
        "first chunk arrives while the tool waits"
    );
    let release = h
        .executor
        .socket_path(&key)
        .parent()
        .unwrap()
        .join("work/release");
    std::fs::write(&release, b"go").unwrap();
    let rest = collect(frames).await;
    assert_eq!(
        rest,
        vec![
            Frame::Chunk {
                value: json!({"step": 2})
            },
            Frame::End
        ]
    );
}

#[tokio::test]
async fn a_throwing_tool_is_an_error_frame_and_logs_are_captured() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "export default { execute(ctx) { console.log('about to fail'); ctx.log('via ctx'); throw new TypeError('bad input shape'); } };";
    let frames = collect(
        h.executor
            .invoke(&key, request(inline(tool), json!({})))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        frames.last().unwrap(),
        &Frame::Error {
            name: "TypeError".into(),
            message: "bad input shape".into()
        }
    );
    let logs: Vec<_> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Log { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(logs, vec!["about to fail", "via ctx"]);
}

#[tokio::test]
async fn oversized_output_is_refused_and_the_runner_keeps_serving() {
    let h = Harness::new();
    let key = key("acct");
    let big = "export default { execute() { return 'x'.repeat(4096); } };";
    let mut req = request(inline(big), json!({}));
    req.max_output_bytes = 1024;
    let frame = run(&h.executor, &key, req).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "OutputTooLarge"),
        "{frame:?}"
    );
    let pid = h.executor.worker_pid(&key).await;
    let frame = run(
        &h.executor,
        &key,
        request(inline(ECHO), json!({"ok": true})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"ok": true}));
    assert_eq!(h.executor.worker_pid(&key).await, pid, "same worker");
}

#[tokio::test]
async fn twenty_concurrent_calls_on_one_runner() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 20)); return input.n * 2; } };";
    let calls = (0..20).map(|n| {
        let executor = h.executor.clone();
        let key = key.clone();
        tokio::spawn(
            async move { run(&executor, &key, request(inline(tool), json!({"n": n}))).await },
        )
    });
    let results = futures_results(calls).await;
    for (n, frame) in results.iter().enumerate() {
        assert_eq!(final_value(frame), json!(n * 2));
    }
}

async fn futures_results(
    handles: impl Iterator<Item = tokio::task::JoinHandle<Frame>>,
) -> Vec<Frame> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.unwrap());
    }
    out
}
