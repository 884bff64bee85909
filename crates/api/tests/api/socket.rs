//! The WebSocket chat transport over real sockets: a turn sent on one
//! socket and resumed on another (same chunks, same sequences), a detached
//! turn between runs reaching a held resume without polling, the three
//! ways to pass a token, aborts, and refusals.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::chunk_stores::{on_each_chunk_store, Chunks};
use crate::detached::{start_async, wait_for_status};
use crate::support::*;

pub(crate) type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

const SLOW: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, input.ms)); return { slept: input.ms }; } };";

/// How a test passes its token on the handshake.
enum Credential<'a> {
    Subprotocol(&'a str),
    Query(&'a str),
    Header(&'a str),
}

fn socket_url(app: &TestApp, agent: &str) -> String {
    format!("{}/agents/{agent}/ws", app.base().replacen("http", "ws", 1))
}

async fn connect(
    app: &TestApp,
    agent: &str,
    credential: Credential<'_>,
) -> Result<(Socket, Option<String>), tokio_tungstenite::tungstenite::Error> {
    let url = socket_url(app, agent);
    let mut request = match &credential {
        Credential::Query(account) => format!("{url}?access_token={}", token(account)),
        _ => url,
    }
    .into_client_request()?;
    match credential {
        Credential::Subprotocol(account) => {
            let offered = format!("toolserver.chat.v1, bearer.{}", token(account));
            request.headers_mut().insert(
                "sec-websocket-protocol",
                HeaderValue::from_str(&offered).unwrap(),
            );
        }
        Credential::Header(account) => {
            let value = format!("Bearer {}", token(account));
            request
                .headers_mut()
                .insert("authorization", HeaderValue::from_str(&value).unwrap());
        }
        Credential::Query(_) => {}
    }
    let (socket, response) = tokio_tungstenite::connect_async(request).await?;
    let protocol = response
        .headers()
        .get("sec-websocket-protocol")
        .map(|value| value.to_str().unwrap().to_owned());
    Ok((socket, protocol))
}

pub(crate) async fn open(app: &TestApp, agent: &str) -> Socket {
    connect(app, agent, Credential::Subprotocol(ACCOUNT_A))
        .await
        .expect("the socket opens")
        .0
}

pub(crate) async fn send(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
}

pub(crate) fn send_frame(request_id: &str, conversation: &str, text: &str) -> Value {
    json!({
        "type": "send",
        "requestId": request_id,
        "id": conversation,
        "trigger": "submit-message",
        "messages": [{"id": format!("u-{request_id}"), "role": "user", "parts": [{"type": "text", "text": text}]}],
        "headers": {},
        "body": {},
    })
}

fn resume_frame(request_id: &str, conversation: &str) -> Value {
    json!({"type": "resume", "requestId": request_id, "id": conversation, "headers": {}, "body": {}})
}

/// The next JSON frame (pings skipped), at most 30 s away; `None` when the
/// socket closed.
async fn next(socket: &mut Socket) -> Option<Value> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .expect("a frame within 30 s")?
            .ok()?;
        match message {
            Message::Text(text) => return Some(serde_json::from_str(&text).unwrap()),
            Message::Close(_) => return None,
            _ => {}
        }
    }
}

/// What one request was answered with.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    started: bool,
    chunks: Vec<Value>,
    sequences: Vec<i64>,
    pub(crate) last: String,
}

/// Reads frames of `request_id` until its last one (`end`, `error` or
/// `no-active`).
pub(crate) async fn answer(socket: &mut Socket, request_id: &str) -> Answer {
    let mut answer = Answer::default();
    while let Some(frame) = next(socket).await {
        assert_eq!(frame["requestId"], request_id, "{frame}");
        match frame["type"].as_str().unwrap() {
            "start" => answer.started = true,
            "chunk" => {
                answer.sequences.push(frame["sequence"].as_i64().unwrap());
                answer.chunks.push(frame["chunk"].clone());
            }
            other => {
                answer.last = match other {
                    "error" => format!("error: {}", frame["errorText"].as_str().unwrap()),
                    other => other.to_owned(),
                };
                return answer;
            }
        }
    }
    panic!("the socket closed before request {request_id} ended: {answer:?}");
}

fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect()
}

async fn a_turn_sent_on_one_socket_is_resumed_on_another_with_the_same_sequences(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app
        .upload(
            ACCOUNT_A,
            "slow",
            SLOW,
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}}),
        )
        .await;
    app.model.script(
        "socket",
        vec![
            Reply::tool_call("call_1", "slow", json!({"ms": 800})),
            Reply::text("done over a socket").chunk_delay(Duration::from_millis(20)),
        ],
    );
    let agent = app.agent(ACCOUNT_A, "socket", json!({ &tool: {} })).await;
    let (mut sender, protocol) = connect(&app, &agent, Credential::Subprotocol(ACCOUNT_A))
        .await
        .unwrap();
    assert_eq!(
        protocol.as_deref(),
        Some("toolserver.chat.v1"),
        "the chat protocol is selected, the token is not echoed"
    );
    send(&mut sender, send_frame("r1", "conv-ws", "go")).await;
    let first = next(&mut sender).await.unwrap();
    assert_eq!(
        (&first["type"], &first["sequence"], &first["chunk"]["type"]),
        (&json!("chunk"), &json!(0), &json!("start"))
    );

    let (mut watcher, _) = connect(&app, &agent, Credential::Query(ACCOUNT_A))
        .await
        .unwrap();
    send(&mut watcher, resume_frame("w1", "conv-ws")).await;
    let sent = answer(&mut sender, "r1").await;
    let resumed = answer(&mut watcher, "w1").await;

    assert_eq!(sent.last, "end");
    assert_eq!(resumed.last, "end");
    assert!(resumed.started, "a resume that found a turn says start");
    let mut all_sent = vec![first["chunk"].clone()];
    all_sent.extend(sent.chunks);
    assert_eq!(resumed.chunks, all_sent, "the resume replays every chunk");
    let expected: Vec<i64> = (0..all_sent.len() as i64).collect();
    assert_eq!(resumed.sequences, expected);
    assert_eq!(text_of(&resumed.chunks), "done over a socket");

    send(&mut watcher, resume_frame("w2", "conv-ws")).await;
    assert_eq!(answer(&mut watcher, "w2").await.last, "no-active");
    send(&mut watcher, resume_frame("w3", "conv-never")).await;
    assert_eq!(answer(&mut watcher, "w3").await.last, "no-active");
    chunks.assert_recorded_here(&app.pool).await;
}

const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 1500)); return { finished: input.job }; } };";

async fn a_held_resume_receives_a_detached_turns_continuation_without_polling(
    pool: PgPool,
    chunks: Chunks,
) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "held",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})),
            Reply::text("Job started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Job finished.").chunk_delay(Duration::from_millis(10)),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "held", json!({ &tool: {"async": true} }))
        .await;
    let id = start_async(&app, &agent, "conv-held", "run it").await;
    wait_for_status(&app, &id, "waiting").await;

    let mut socket = open(&app, &agent).await;
    send(&mut socket, resume_frame("h1", "conv-held")).await;
    let continued = answer(&mut socket, "h1").await;
    assert_eq!(continued.last, "end", "{continued:?}");
    assert_eq!(continued.chunks[0]["type"], "start");
    assert_eq!(continued.chunks.last().unwrap()["type"], "finish");
    assert!(
        text_of(&continued.chunks).ends_with("Job finished."),
        "{:?}",
        continued.chunks
    );
    wait_for_status(&app, &id, "completed").await;
    send(&mut socket, resume_frame("h2", "conv-held")).await;
    assert_eq!(answer(&mut socket, "h2").await.last, "no-active");
}

async fn an_aborted_request_stops_answering_and_the_turn_goes_on(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    app.model.script(
        "abort",
        vec![Reply::text("one two three four five six seven eight")
            .chunk_delay(Duration::from_millis(150))],
    );
    let agent = app.agent(ACCOUNT_A, "abort", json!({})).await;
    let mut socket = open(&app, &agent).await;
    send(&mut socket, send_frame("a1", "conv-abort", "talk")).await;
    assert_eq!(next(&mut socket).await.unwrap()["chunk"]["type"], "start");
    send(&mut socket, json!({"type": "abort", "requestId": "a1"})).await;
    send(&mut socket, resume_frame("a2", "conv-abort")).await;
    let mut resumed = Answer::default();
    while let Some(frame) = next(&mut socket).await {
        if frame["requestId"] == "a1" {
            assert_eq!(frame["type"], "chunk", "an aborted request only drains");
            continue;
        }
        match frame["type"].as_str().unwrap() {
            "chunk" => resumed.chunks.push(frame["chunk"].clone()),
            "start" => resumed.started = true,
            other => {
                resumed.last = other.to_owned();
                break;
            }
        }
    }
    assert_eq!(resumed.last, "end");
    assert_eq!(
        text_of(&resumed.chunks),
        "one two three four five six seven eight",
        "the turn went on after its request was aborted"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn handshakes_and_requests_are_checked(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    app.model.script("checks", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "checks", json!({})).await;

    fn refused<T>(result: Result<T, tokio_tungstenite::tungstenite::Error>) -> u16 {
        match result {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                response.status().as_u16()
            }
            Err(other) => panic!("not an HTTP refusal: {other}"),
            Ok(_) => panic!("the handshake was accepted"),
        }
    }
    let anonymous = tokio_tungstenite::connect_async(socket_url(&app, &agent)).await;
    assert_eq!(refused(anonymous), 401);
    let forged = tokio_tungstenite::connect_async(format!(
        "{}?access_token=not.a.token",
        socket_url(&app, &agent)
    ))
    .await;
    assert_eq!(refused(forged), 401);
    let foreign = connect(&app, &agent, Credential::Header(ACCOUNT_B)).await;
    assert_eq!(refused(foreign), 404, "another account's agent");
    let plain = app
        .request(
            reqwest::Method::GET,
            &format!("/agents/{agent}/ws"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert!(
        plain.0 == 400 || plain.0 == 426,
        "not a handshake: {}",
        plain.0
    );
    let unknown = app
        .request(
            reqwest::Method::GET,
            "/agents/agent_nope/ws",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(unknown.0, 404, "the agent is checked before the handshake");

    let (mut socket, protocol) = connect(&app, &agent, Credential::Header(ACCOUNT_A))
        .await
        .unwrap();
    assert_eq!(protocol, None);
    send(&mut socket, send_frame("s1", &"c".repeat(201), "hi")).await;
    let refused_id = answer(&mut socket, "s1").await;
    assert!(refused_id.last.contains("id"), "{}", refused_id.last);
    send(&mut socket, send_frame("s2", "conv-checks", "hi")).await;
    let ran = answer(&mut socket, "s2").await;
    assert_eq!(
        (ran.last.as_str(), text_of(&ran.chunks).as_str()),
        ("end", "hi")
    );

    let mut other = connect(&app, &agent, Credential::Subprotocol(ACCOUNT_A))
        .await
        .unwrap()
        .0;
    let mut foreign_socket = {
        app.model.script("checks-b", vec![Reply::text("b")]);
        let agent_b = app.agent(ACCOUNT_B, "checks-b", json!({})).await;
        connect(&app, &agent_b, Credential::Subprotocol(ACCOUNT_B))
            .await
            .unwrap()
            .0
    };
    send(&mut foreign_socket, resume_frame("f1", "conv-checks")).await;
    assert_eq!(
        answer(&mut foreign_socket, "f1").await.last,
        "no-active",
        "another account's conversation is not there"
    );

    send(
        &mut other,
        json!({"type": "send", "requestId": "x", "messages": "nope"}),
    )
    .await;
    let closed = tokio::time::timeout(Duration::from_secs(10), other.next())
        .await
        .unwrap();
    match closed {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(frame.code, CloseCode::Invalid, "{frame:?}");
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
}

on_each_chunk_store!(
    a_turn_sent_on_one_socket_is_resumed_on_another_with_the_same_sequences,
    a_held_resume_receives_a_detached_turns_continuation_without_polling,
    an_aborted_request_stops_answering_and_the_turn_goes_on,
);
