//! A server process killed in the middle of a chat turn, with a second
//! server on the same database: the turn is stored as far as it streamed
//! (what a resumer saw), marked interrupted; the conversation is free for
//! the next turn once the dead process's liveness lapses, not when its
//! lease would; and a stop from the other process ends the dead turn. The
//! stored conversations pass the AI SDK's own `safeValidateUIMessages` (ai
//! 6 and 7, `clients/ai-sdk/test/stored.test.mjs`).

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::clients::client_dir;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::{Reply, ScriptedModel};

use crate::server::{Server, Setup};

/// Both servers: fast stream checks, and a lease far longer than any wait
/// here, so only the process's liveness can free the conversation.
const SETTINGS: &[(&str, &str)] = &[
    ("TOOLSERVER_STREAM_POLL_MS", "100"),
    ("TOOLSERVER_STREAM_ALIVE_MS", "1000"),
    ("TOOLSERVER_TURN_LEASE_SECS", "120"),
];

/// The survivor's settings when its reaper must not recover anything.
const NO_REAPER: (&str, &str) = ("TOOLSERVER_ASYNC_REAPER_MS", "600000");

const CONVERSATION: &str = "conv-interrupted";

/// The JSON chunks of an SSE body, and whether `[DONE]` came.
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
            if data == "[DONE]" {
                self.done = true;
            } else {
                self.chunks.push(serde_json::from_str(data).unwrap());
            }
        }
    }

    fn deltas(&self) -> String {
        self.chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .map(|c| c["delta"].as_str().unwrap())
            .collect()
    }

    async fn to_end(response: reqwest::Response) -> Self {
        let mut read = Self::default();
        let mut body = response.bytes_stream();
        while let Some(piece) = tokio::time::timeout(Duration::from_secs(30), body.next())
            .await
            .expect("the stream stalled")
        {
            read.take(&piece.unwrap());
        }
        read
    }
}

struct Pair {
    one: Setup,
    two: Setup,
    doomed: Server,
    survivor: Server,
    model: ScriptedModel,
    agent: String,
}

impl Pair {
    async fn start(pool: &PgPool, survivor_settings: &[(&str, &str)]) -> Self {
        let (one, two) = (Setup::new(pool), Setup::new(pool));
        let doomed = one.start_with(100, SETTINGS).await;
        let mut settings = SETTINGS.to_vec();
        settings.extend_from_slice(survivor_settings);
        let survivor = two.start_with(100, &settings).await;
        let model = ScriptedModel::start().await;
        let agent = one.agent(&doomed, "talk", &model, json!({})).await;
        Self {
            one,
            two,
            doomed,
            survivor,
            model,
            agent,
        }
    }

    async fn chat(&self, server: &Server, message_id: &str, text: &str) -> reqwest::Response {
        let body = json!({"id": CONVERSATION, "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}], "trigger": "submit-message"});
        self.one
            .client()
            .post(format!("{}/agents/{}/chat", server.base, self.agent))
            .bearer_auth(self.one.token())
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Starts a long turn on the doomed server, reads ten deltas of it and
    /// SIGKILLs the server; the chunks the client saw.
    async fn kill_mid_turn(&mut self) -> Read {
        let words: Vec<String> = (0..300).map(|n| format!("word{n} ")).collect();
        self.model.script(
            "talk",
            vec![
                Reply::text(&words.concat()).chunk_delay(Duration::from_millis(20)),
                Reply::text("the next answer"),
            ],
        );
        let response = self.chat(&self.doomed, "u1", "talk").await;
        assert_eq!(response.status(), 200);
        let mut stream = response.bytes_stream();
        let mut seen = Read::default();
        while seen
            .chunks
            .iter()
            .filter(|c| c["type"] == "text-delta")
            .count()
            < 10
        {
            seen.take(&stream.next().await.unwrap().unwrap());
        }
        self.doomed.child.kill().unwrap();
        self.doomed.child.wait().unwrap();
        while let Some(Ok(piece)) = stream.next().await {
            seen.take(&piece);
        }
        assert!(!seen.done, "the killed server ended the stream");
        seen
    }

    async fn stored(&self) -> Vec<Value> {
        let response = self
            .two
            .client()
            .get(format!(
                "{}/conversations/{CONVERSATION}",
                self.survivor.base
            ))
            .bearer_auth(self.two.token())
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        body["messages"].as_array().cloned().unwrap_or_default()
    }
}

/// Whether the doomed server's liveness row has lapsed.
async fn a_process_is_dead(pool: &PgPool) -> bool {
    let (dead,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM server_processes WHERE alive_until <= now()")
            .fetch_one(pool)
            .await
            .unwrap();
    dead > 0
}

/// The stored interrupted message agrees with what a client was shown:
/// same id, same text, marked interrupted, its text still streaming.
fn assert_stored_as_seen(stored: &Value, seen: &Read) {
    let start = seen.chunks.iter().find(|c| c["type"] == "start").unwrap();
    assert_eq!(stored["id"], start["messageId"]);
    assert_eq!(stored["role"], "assistant");
    assert_eq!(stored["metadata"]["interrupted"], true, "{stored}");
    let text: String = stored["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(
        text.starts_with(&seen.deltas()),
        "the stored text holds every delta the client saw: {text:?} vs {:?}",
        seen.deltas()
    );
    let last_text = stored["parts"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|p| p["type"] == "text")
        .unwrap();
    assert_eq!(last_text["state"], "streaming");
}

/// Runs the AI SDK's validator (both majors) on `messages`.
async fn validate_with_ai_sdk(name: &str, messages: &[Value]) {
    let dir = client_dir("ai-sdk");
    let file = tempfile::NamedTempFile::new().unwrap();
    let stored = json!({"conversations": [{"name": name, "messages": messages}]});
    std::fs::write(file.path(), serde_json::to_vec(&stored).unwrap()).unwrap();
    let output = tokio::process::Command::new("node")
        .args(["--test", "test/stored.test.mjs"])
        .current_dir(&dir)
        .env("TOOLSERVER_STORED", file.path())
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "the AI SDK refused the stored conversation:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_chat_turn_killed_mid_stream_is_stored_as_the_resumer_saw_it(pool: PgPool) {
    let mut pair = Pair::start(&pool, &[]).await;
    let seen = pair.kill_mid_turn().await;

    let resumed = pair
        .two
        .client()
        .get(format!(
            "{}/agents/{}/chat/{CONVERSATION}/stream",
            pair.survivor.base, pair.agent
        ))
        .bearer_auth(pair.two.token())
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 200);
    let resumer = Read::to_end(resumed).await;
    assert!(resumer.done);
    assert_eq!(resumer.chunks[..seen.chunks.len()], seen.chunks[..]);

    // The survivor's reaper stores the dead turn without anyone asking.
    until("the interrupted turn to be stored", || async {
        pair.stored().await.len() == 2
    })
    .await;
    let stored = pair.stored().await;
    assert_eq!(stored[0]["id"], "u1");
    assert_stored_as_seen(&stored[1], &resumer);
    assert_eq!(
        stored[1]["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["type"] == "text")
            .map(|p| p["text"].as_str().unwrap())
            .collect::<String>(),
        resumer.deltas(),
        "the stored text is exactly what the resumer was shown"
    );
    validate_with_ai_sdk("a chat turn killed mid-stream", &stored).await;

    let next = pair.chat(&pair.survivor, "u2", "and now?").await;
    assert_eq!(next.status(), 200);
    assert!(Read::to_end(next).await.done);
    let roles: Vec<Value> = pair
        .stored()
        .await
        .iter()
        .map(|m| m["role"].clone())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_new_turn_waits_for_the_dead_servers_liveness_not_its_lease(pool: PgPool) {
    let mut pair = Pair::start(&pool, &[NO_REAPER]).await;
    let seen = pair.kill_mid_turn().await;
    until("the killed server's liveness to lapse", || {
        a_process_is_dead(&pool)
    })
    .await;

    // The lease has nearly two minutes left: the dead process is what frees it.
    let next = pair.chat(&pair.survivor, "u2", "and now?").await;
    assert_eq!(next.status(), 200, "{:?}", next.text().await);
    assert!(Read::to_end(next).await.done);
    let stored = pair.stored().await;
    let ids: Vec<&str> = stored.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!((ids[0], ids[2]), ("u1", "u2"));
    assert_stored_as_seen(&stored[1], &seen);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stop_from_another_process_ends_a_turn_whose_server_died(pool: PgPool) {
    let mut pair = Pair::start(&pool, &[NO_REAPER]).await;
    let seen = pair.kill_mid_turn().await;
    until("the killed server's liveness to lapse", || {
        a_process_is_dead(&pool)
    })
    .await;

    let stop = pair
        .two
        .client()
        .post(format!(
            "{}/agents/{}/chat/{CONVERSATION}/stop",
            pair.survivor.base, pair.agent
        ))
        .bearer_auth(pair.two.token())
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 202);
    // Stopped means stored and free, at once.
    let stored = pair.stored().await;
    assert_eq!(stored.len(), 2);
    assert_stored_as_seen(&stored[1], &seen);
    let (free,): (bool,) = sqlx::query_as(
        "SELECT active_turn IS NULL AND lease_expires_at IS NULL FROM conversations WHERE id = $1",
    )
    .bind(CONVERSATION)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(free);
}
