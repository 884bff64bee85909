//! A turn's stream outlives the server process that runs it: two real
//! servers on one database, the one streaming a turn is SIGKILLed
//! mid-stream, and a resume on the other replays every chunk recorded
//! before the kill exactly once, in order, then ends cleanly — with chunks
//! in Postgres, and in NATS JetStream (the real server at 127.0.0.1:4222,
//! a stream and subjects of the test's own).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{Server, Setup};

const FAST_STREAMS: &[(&str, &str)] = &[
    ("TOOLSERVER_STREAM_POLL_MS", "100"),
    ("TOOLSERVER_STREAM_ALIVE_MS", "1000"),
];

const NATS_URL: &str = "127.0.0.1:4222";

/// Where both servers keep turn chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunks {
    Postgres,
    Nats,
}

/// The settings of both servers for `chunks` (with NATS: a JetStream
/// stream, chunk subjects and a turn-request subject no other test uses).
struct Store {
    settings: Vec<(&'static str, String)>,
    stream: Option<String>,
}

impl Store {
    fn new(chunks: Chunks) -> Self {
        let mut settings: Vec<(&'static str, String)> = FAST_STREAMS
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned()))
            .collect();
        if chunks == Chunks::Postgres {
            return Self {
                settings,
                stream: None,
            };
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let stream = format!("TEST_FAILOVER_{id}");
        settings.extend([
            ("TOOLSERVER_NATS_URL", NATS_URL.to_owned()),
            ("TOOLSERVER_TURN_CHUNKS", "nats".to_owned()),
            ("TOOLSERVER_NATS_STREAM", stream.clone()),
            ("TOOLSERVER_NATS_CHUNK_PREFIX", format!("test-chunks.{id}")),
            ("TOOLSERVER_NATS_SUBJECT", format!("test-turns.{id}")),
        ]);
        Self {
            settings,
            stream: Some(stream),
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.settings
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect()
    }

    /// How many messages the JetStream stream holds (`None`: Postgres).
    async fn messages(&self) -> Option<u64> {
        let name = self.stream.as_ref()?;
        let context = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.unwrap());
        let mut stream = context.get_stream(name).await.unwrap();
        Some(stream.info().await.unwrap().state.messages)
    }

    async fn delete(&self) {
        if let Some(name) = &self.stream {
            let context = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.unwrap());
            context.delete_stream(name).await.unwrap();
        }
    }
}

/// The JSON chunks of an SSE body read so far, and whether `[DONE]` came.
#[derive(Default)]
struct Read {
    chunks: Vec<Value>,
    done: bool,
    buffer: String,
}

impl Read {
    fn take(&mut self, piece: &[u8]) {
        self.buffer.push_str(&String::from_utf8_lossy(piece));
        while let Some(end) = self.buffer.find("\n\n") {
            let event: String = self.buffer.drain(..end + 2).collect();
            let Some(data) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            assert!(!self.done, "a frame after [DONE]: {data}");
            if data == "[DONE]" {
                self.done = true;
            } else {
                self.chunks.push(serde_json::from_str(data).unwrap());
            }
        }
    }
}

async fn agent(setup: &Setup, server: &Server, model: &ScriptedModel) -> String {
    setup
        .post(
            server,
            "/agents",
            json!({"name": "failover", "config": {
                "model": {"provider": "openai", "modelId": "failover"},
                "provider": {"openai": {"baseUrl": model.base_url()}},
            }}),
        )
        .await["agentId"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn resume(setup: &Setup, server: &Server, agent: &str) -> reqwest::Response {
    setup
        .client()
        .get(format!(
            "{}/agents/{agent}/chat/conv-failover/stream",
            server.base
        ))
        .bearer_auth(setup.token())
        .send()
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_resume_on_another_process_gets_every_chunk_before_a_kill_once(pool: PgPool) {
    failover(pool, Chunks::Postgres).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_resume_on_another_process_gets_every_chunk_before_a_kill_once_from_jetstream(
    pool: PgPool,
) {
    failover(pool, Chunks::Nats).await;
}

async fn failover(pool: PgPool, chunks: Chunks) {
    let store = Store::new(chunks);
    let (one, two) = (Setup::new(&pool), Setup::new(&pool));
    let mut doomed = one.start_with(100, &store.env()).await;
    let survivor = two.start_with(100, &store.env()).await;
    let model = ScriptedModel::start().await;
    let words: Vec<String> = (0..200).map(|n| format!("word{n} ")).collect();
    model.script(
        "failover",
        vec![Reply::text(&words.concat()).chunk_delay(Duration::from_millis(20))],
    );
    let agent = agent(&one, &doomed, &model).await;

    let body = json!({"id": "conv-failover", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "talk"}]}], "trigger": "submit-message"});
    let response = one
        .client()
        .post(format!("{}/agents/{agent}/chat", doomed.base))
        .bearer_auth(one.token())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut before = Read::default();
    while before
        .chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .count()
        < 10
    {
        before.take(&stream.next().await.unwrap().unwrap());
    }
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    // Whatever was in flight to the client is cut off with the process.
    while let Some(Ok(piece)) = stream.next().await {
        before.take(&piece);
    }
    assert!(!before.done, "the killed server ended the stream");

    let resumed = resume(&two, &survivor, &agent).await;
    assert_eq!(
        resumed.status(),
        200,
        "the turn's stream is there to resume"
    );
    let mut after = Read::default();
    let mut body = resumed.bytes_stream();
    while let Some(piece) = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("the resumed stream stalled")
    {
        after.take(&piece.unwrap());
    }
    assert!(after.done, "the resumed stream ended with [DONE]");
    assert_eq!(
        after.chunks[..before.chunks.len()],
        before.chunks[..],
        "every chunk the client saw comes again, in order"
    );
    let starts = after.chunks.iter().filter(|c| c["type"] == "start").count();
    assert_eq!(starts, 1);
    let text: String = after
        .chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect();
    assert!(
        words.concat().starts_with(&text),
        "no delta lost or repeated: {text}"
    );
    let ending: Vec<&str> = after.chunks[after.chunks.len() - 2..]
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(ending, ["error", "finish"], "{:?}", after.chunks.last());

    // Resuming again: the stream has ended, so there is nothing to resume.
    let again = resume(&two, &survivor, &agent).await;
    assert_eq!(again.status(), 204);

    // The chunks were where the servers were told to keep them.
    let (in_log, batch_rows): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM turn_streams WHERE log_start IS NOT NULL), \
                (SELECT count(*) FROM turn_stream_batches)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    match store.messages().await {
        None => assert_eq!((in_log, batch_rows > 0), (0, true)),
        Some(messages) => {
            assert_eq!((in_log, batch_rows), (1, 0));
            assert!(messages >= 3, "open, chunks and the orphan end: {messages}");
        }
    }
    store.delete().await;
}
