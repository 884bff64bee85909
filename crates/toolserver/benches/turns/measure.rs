//! One turn, one resume, one request straight to the model, and many
//! clients at once.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};
use toolserver_testsupport::bench::summary;

use crate::server::Server;

/// One turn on a new conversation: time to the first body byte and to the
/// end.
pub(crate) async fn turn(server: &Server, agent: &str) -> (Duration, Duration) {
    let body = json!({
        "id": uuid::Uuid::new_v4().to_string(),
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}],
        "trigger": "submit-message",
    });
    turn_with(server, agent, &body).await
}

/// One turn of the chat request `body`: time to the first body byte and to
/// the end.
pub(crate) async fn turn_with(server: &Server, agent: &str, body: &Value) -> (Duration, Duration) {
    let started = Instant::now();
    let response = server
        .client
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(&server.token)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut first = None;
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        first.get_or_insert_with(|| started.elapsed());
        tail.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&tail);
    assert!(
        text.contains("\"finishReason\":\"stop\""),
        "a turn did not finish"
    );
    assert!(
        text.contains("\"type\":\"tool-output-available\""),
        "a turn's tool call failed: {text}"
    );
    (first.unwrap(), started.elapsed())
}

/// Starts a turn the model holds open, then times a resume of it from the
/// request to its first replayed chunk, and stops the turn.
pub(crate) async fn resume_latency(server: &Server, agent: &str) -> Duration {
    let conversation = uuid::Uuid::new_v4().to_string();
    let body = json!({
        "id": conversation,
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hold"}]}],
        "trigger": "submit-message",
    });
    let response = server
        .client
        .post(format!("{}/agents/{agent}/chat", server.base))
        .bearer_auth(&server.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut live = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("start-step") {
        seen.push_str(&String::from_utf8_lossy(
            &live.next().await.unwrap().unwrap(),
        ));
    }
    let stream = format!("{}/agents/{agent}/chat/{conversation}", server.base);
    let started = Instant::now();
    let resumed = server
        .client
        .get(format!("{stream}/stream"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let mut replay = resumed.bytes_stream();
    let mut first = String::new();
    while !first.contains("data: ") {
        first.push_str(&String::from_utf8_lossy(
            &replay.next().await.unwrap().unwrap(),
        ));
    }
    let latency = started.elapsed();
    let stopped = server
        .client
        .post(format!("{stream}/stop"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), 202);
    while live.next().await.is_some() {}
    latency
}

/// The floor: the same two streaming passes made straight to the model.
pub(crate) async fn model_direct(client: &reqwest::Client, base: &str) -> (Duration, Duration) {
    let started = Instant::now();
    let mut first = None;
    for step in 0..2 {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        if step == 1 {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": "c1", "content": "{}"}));
        }
        let response = client
            .post(format!("{base}/chat/completions"))
            .json(&json!({"model": "bench-tool", "stream": true, "messages": messages}))
            .send()
            .await
            .unwrap();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            chunk.unwrap();
            first.get_or_insert_with(|| started.elapsed());
        }
    }
    (first.unwrap(), started.elapsed())
}

pub(crate) async fn concurrent<F, Fut>(
    label: &str,
    clients: usize,
    turns_per_client: usize,
    run: F,
) -> (f64, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (Duration, Duration)> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let run = run.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..turns_per_client {
                samples.push(run().await);
            }
            samples
        }));
    }
    let mut ttfb = Vec::new();
    let mut total = Vec::new();
    for task in tasks {
        for (first, all) in task.await.unwrap() {
            ttfb.push(first);
            total.push(all);
        }
    }
    let wall = started.elapsed();
    let rate = (clients * turns_per_client) as f64 / wall.as_secs_f64();
    let (ttfb_p50, _) = summary(&format!("{label}: time to first byte"), ttfb);
    summary(&format!("{label}: whole turn"), total);
    println!("{label:<40} {rate:.1} turns/s ({clients} concurrent clients)");
    (rate, ttfb_p50)
}

/// Turns started at a fixed rate, each as its own request, whatever the
/// server's pace (an open loop): the latency a client sees on a server
/// loaded below its capacity. With clients that wait for their turn to
/// end (a closed loop), a saturated server's queue sits in whichever stage
/// is slowest, so time to first byte there tells where the queue is as
/// much as how fast the server is.
pub(crate) async fn open_loop<F, Fut>(label: &str, rate: f64, turns: usize, run: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = (Duration, Duration)> + Send + 'static,
{
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(turns);
    for _ in 0..turns {
        ticks.tick().await;
        tasks.push(tokio::spawn(run()));
    }
    let mut ttfb = Vec::with_capacity(turns);
    let mut total = Vec::with_capacity(turns);
    for task in tasks {
        let (first, all) = task.await.unwrap();
        ttfb.push(first);
        total.push(all);
    }
    let wall = started.elapsed();
    summary(&format!("{label}: time to first byte"), ttfb);
    summary(&format!("{label}: whole turn"), total);
    println!(
        "{label:<40} {rate:.0} turns/s offered, {:.1} served",
        turns as f64 / wall.as_secs_f64()
    );
}
