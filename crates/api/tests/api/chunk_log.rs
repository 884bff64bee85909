//! The JetStream chunk store against the real NATS server: what the server
//! answers a retried publish, compare-and-append fencing of a recorder
//! taken for dead, retries after a lost acknowledgement, and batches over
//! the server's message size.

use std::time::Duration;

use async_nats::jetstream::context::{Publish, PublishErrorKind};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::sync::mpsc;
use toolserver_domain::AccountId;
use toolserver_harness::stream::jetstream::{LogError, TurnLog};
use toolserver_harness::stream::{follow, ChunkStore, Followed, JetStreamChunks};
use toolserver_store::turn_streams::{self, Appended, Opening};
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::TestApp;
use crate::chunk_stores::{own_jetstream, Chunks, TestStore, NATS_URL};
use crate::support::ACCOUNT_A;

const RECORDED: Appended = Appended::Recorded {
    stop_requested: false,
};

fn delta(text: &str) -> String {
    json!({"type": "text-delta", "id": "t", "delta": text}).to_string()
}

/// A server keeping chunks in JetStream, with a conversation to write on.
async fn app_with_conversation(pool: PgPool, conversation: &str) -> (TestApp, JetStreamChunks) {
    let app = TestApp::live(pool).chunks(Chunks::Nats).spawn().await;
    app.model.script("log", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "log", json!({})).await;
    assert_eq!(
        app.say(ACCOUNT_A, &agent, conversation, "hello")
            .await
            .status,
        200
    );
    let ChunkStore::JetStream(chunks) = &app.state.harness().settings().streams.chunks else {
        panic!("the app keeps chunks in JetStream");
    };
    let chunks = chunks.clone();
    (app, chunks)
}

/// Opens a turn stream on `conversation` as a recorder does: its log and
/// its row.
async fn open(app: &TestApp, chunks: &JetStreamChunks, conversation: &str) -> (Uuid, TurnLog) {
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let stream = Uuid::now_v7();
    let log = TurnLog::open(chunks, &account, conversation, stream)
        .await
        .unwrap();
    let opening = Opening {
        id: stream,
        account,
        conversation_id: conversation.to_owned(),
        log_start: Some(i64::try_from(log.start()).unwrap()),
        alive: Duration::from_secs(60),
    };
    turn_streams::open_many(&app.pool, &[opening])
        .await
        .unwrap();
    (stream, log)
}

async fn follow_conversation(app: &TestApp, conversation: &str) -> Option<Followed> {
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    follow(
        app.state.lifecycle().streams(),
        &account,
        conversation,
        None,
    )
    .await
    .unwrap()
}

/// Every chunk a reader sends until it ends (within 15 s).
async fn read_all(mut chunks: mpsc::Receiver<String>) -> Vec<Value> {
    let mut read = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), chunks.recv())
            .await
            .expect("the reader stalled");
        match next {
            Some(chunk) => read.push(serde_json::from_str(&chunk).unwrap()),
            None => return read,
        }
    }
}

fn deltas(chunks: &[Value]) -> Vec<&str> {
    chunks
        .iter()
        .filter(|c| c["type"] == "text-delta")
        .map(|c| c["delta"].as_str().unwrap())
        .collect()
}

fn types(chunks: &[Value]) -> Vec<&str> {
    chunks.iter().map(|c| c["type"].as_str().unwrap()).collect()
}

async fn take_for_dead(app: &TestApp, stream: Uuid) {
    sqlx::query("UPDATE turn_streams SET alive_until = now() - interval '1 second' WHERE id = $1")
        .bind(stream)
        .execute(&app.pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_server_answers_a_retried_duplicate_with_its_first_sequence_even_past_a_stale_expectation(
) {
    let store = TestStore(ChunkStore::JetStream(own_jetstream().await));
    let ChunkStore::JetStream(chunks) = &store.0 else {
        unreachable!()
    };
    let context = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.unwrap());
    let subject = format!("{}.conversation", chunks.settings().subject_prefix);
    let publish = |id: &str, expected: u64| {
        let message = Publish::build()
            .payload("[]".into())
            .message_id(id)
            .expected_last_subject_sequence(expected);
        let (context, subject) = (context.clone(), subject.clone());
        async move { context.send_publish(subject, message).await.unwrap().await }
    };
    let first = publish("m1", 0).await.unwrap();
    assert!(!first.duplicate);
    let second = publish("m2", first.sequence).await.unwrap();
    // A retry of the first: its id is a duplicate, its expectation stale.
    let retry = publish("m1", 0).await.unwrap();
    assert!(retry.duplicate, "the server recognises the retry");
    assert_eq!(
        retry.sequence, first.sequence,
        "and names where it stored it"
    );
    // A new message on the stale expectation is refused.
    let stale = publish("m3", first.sequence).await.unwrap_err();
    assert_eq!(stale.kind(), PublishErrorKind::WrongLastSequence);
    let after = publish("m4", second.sequence).await.unwrap();
    assert_eq!(
        after.sequence,
        second.sequence + 1,
        "nothing was stored twice"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_recorder_taken_for_dead_is_refused_once_a_reader_has_ended_its_stream(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-fence").await;
    let (stream, mut recorder) = open(&app, &chunks, "conv-fence").await;
    let two = [delta("one "), delta("two ")];
    assert_eq!(recorder.append(0, &two, false).await.unwrap(), RECORDED);
    take_for_dead(&app, stream).await;
    // Until someone ends its stream, the log still takes its chunks.
    let late = [delta("late")];
    assert_eq!(recorder.append(2, &late, false).await.unwrap(), RECORDED);

    let followed = follow_conversation(&app, "conv-fence").await.unwrap();
    assert_eq!((followed.tail_index, followed.start_index), (2, 0));
    let read = read_all(followed.chunks).await;
    assert_eq!(deltas(&read), ["one ", "two ", "late"]);
    assert_eq!(
        types(&read)[3..],
        ["error", "finish"],
        "the reader ended the stream with the orphan end"
    );

    let refused = recorder
        .append(3, &[delta("too late")], false)
        .await
        .unwrap();
    assert_eq!(
        refused,
        Appended::Refused,
        "the stale recorder is fenced off"
    );
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert!(state.finished);
    assert!(follow_conversation(&app, "conv-fence").await.is_none());

    // The next turn on the conversation starts after the ended stream.
    let (_, mut next) = open(&app, &chunks, "conv-fence").await;
    let followed = follow_conversation(&app, "conv-fence").await.unwrap();
    assert_eq!(followed.tail_index, -1);
    assert_eq!(
        next.append(0, &[delta("next")], true).await.unwrap(),
        RECORDED
    );
    assert_eq!(deltas(&read_all(followed.chunks).await), ["next"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_new_turn_ends_the_unended_stream_before_it_and_fences_its_recorder(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-next").await;
    let (_, mut old) = open(&app, &chunks, "conv-next").await;
    assert_eq!(
        old.append(0, &[delta("old")], false).await.unwrap(),
        RECORDED
    );
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let subject = chunks.subject(&account, "conv-next");
    let (_, _new) = open(&app, &chunks, "conv-next").await;
    assert_eq!(
        old.append(1, &[delta("stale")], false).await.unwrap(),
        Appended::Refused
    );
    let context = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.unwrap());
    let stream = context.get_stream(&chunks.settings().stream).await.unwrap();
    let last = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    assert_eq!(
        last.headers.get("Toolserver-Kind").unwrap().as_str(),
        "open"
    );
    let before = stream.get_raw_message(last.sequence - 1).await.unwrap();
    assert_eq!(
        before.headers.get("Toolserver-Kind").unwrap().as_str(),
        "end"
    );
    let ended: Vec<Value> = serde_json::from_slice::<Vec<String>>(&before.payload)
        .unwrap()
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    assert_eq!(types(&ended), ["error", "finish"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_retry_after_a_lost_acknowledgement_is_recorded_once(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-retry").await;
    let (_, mut recorder) = open(&app, &chunks, "conv-retry").await;
    let followed = follow_conversation(&app, "conv-retry").await.unwrap();
    assert_eq!(
        recorder.append(0, &[delta("a")], false).await.unwrap(),
        RECORDED
    );
    // The recorder as it was before an append whose answer it never got.
    let mut retrying = recorder.clone();
    let lost = [delta("b"), delta("c")];
    assert_eq!(recorder.append(1, &lost, false).await.unwrap(), RECORDED);
    assert_eq!(retrying.append(1, &lost, false).await.unwrap(), RECORDED);
    assert_eq!(retrying.recorded(), 3);
    assert_eq!(
        retrying.append(3, &[delta("d")], true).await.unwrap(),
        RECORDED
    );
    let read = read_all(followed.chunks).await;
    assert_eq!(
        deltas(&read),
        ["a", "b", "c", "d"],
        "each chunk once, in order"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_retry_that_landed_before_a_reader_ended_the_stream_counts_as_recorded(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-late-retry").await;
    let (stream, mut recorder) = open(&app, &chunks, "conv-late-retry").await;
    assert_eq!(
        recorder.append(0, &[delta("a")], false).await.unwrap(),
        RECORDED
    );
    let mut retrying = recorder.clone();
    // This append lands, but its answer is lost...
    assert_eq!(
        recorder.append(1, &[delta("b")], false).await.unwrap(),
        RECORDED
    );
    // ...and meanwhile a reader takes the recorder for dead and ends it.
    take_for_dead(&app, stream).await;
    let followed = follow_conversation(&app, "conv-late-retry").await.unwrap();
    let read = read_all(followed.chunks).await;
    assert_eq!(deltas(&read), ["a", "b"]);
    assert_eq!(types(&read)[2..], ["error", "finish"]);
    // The retry names a stale last sequence, but the server recognises its
    // message: what it forwards was recorded, and nothing twice.
    assert_eq!(
        retrying.append(1, &[delta("b")], false).await.unwrap(),
        RECORDED
    );
    assert_eq!(
        retrying.append(2, &[delta("c")], false).await.unwrap(),
        Appended::Refused
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_retry_that_never_landed_is_refused_once_the_stream_was_ended(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-lost").await;
    let (stream, mut recorder) = open(&app, &chunks, "conv-lost").await;
    assert_eq!(
        recorder.append(0, &[delta("a")], false).await.unwrap(),
        RECORDED
    );
    take_for_dead(&app, stream).await;
    let followed = follow_conversation(&app, "conv-lost").await.unwrap();
    let read = read_all(followed.chunks).await;
    assert_eq!(types(&read), ["text-delta", "error", "finish"]);
    assert_eq!(
        recorder.append(1, &[delta("b")], false).await.unwrap(),
        Appended::Refused,
        "a chunk that was never recorded is never shown"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn batches_over_the_message_size_are_split_and_a_chunk_over_it_fails(pool: PgPool) {
    let (app, chunks) = app_with_conversation(pool, "conv-big").await;
    let (_, mut recorder) = open(&app, &chunks, "conv-big").await;
    let followed = follow_conversation(&app, "conv-big").await.unwrap();
    let max_payload = async_nats::connect(NATS_URL)
        .await
        .unwrap()
        .server_info()
        .max_payload;
    let third = "x".repeat(max_payload / 3);
    let batch: Vec<String> = ["p", "q", "r"]
        .iter()
        .map(|name| delta(&format!("{name}{third}")))
        .collect();
    assert_eq!(recorder.append(0, &batch, false).await.unwrap(), RECORDED);
    let too_big = [delta(&"y".repeat(max_payload + 1))];
    match recorder.append(3, &too_big, false).await {
        Err(err @ LogError::ChunkTooLarge { .. }) => {
            assert!(!err.is_transient());
            assert!(err.to_string().contains("max_payload"), "{err}");
        }
        other => panic!("a chunk over the message size: {other:?}"),
    }
    assert_eq!(recorder.append(3, &[], true).await.unwrap(), RECORDED);
    let read = read_all(followed.chunks).await;
    let firsts: Vec<char> = deltas(&read)
        .iter()
        .map(|d| d.chars().next().unwrap())
        .collect();
    assert_eq!(firsts, ['p', 'q', 'r']);
    let context = async_nats::jetstream::new(async_nats::connect(NATS_URL).await.unwrap());
    let mut stream = context.get_stream(&chunks.settings().stream).await.unwrap();
    let messages = stream.info().await.unwrap().state.messages;
    // The earlier turn (open, chunks, end), this open, the split batch (at
    // least two messages) and the end.
    let least = 3 + 1 + 2 + 1;
    assert!(messages >= least, "{messages} messages");
}
