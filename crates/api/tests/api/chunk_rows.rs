//! The Postgres chunk store's rows: a stream opened by its first append
//! (a chat turn's) or before its turn starts (a detached run's), a retried
//! first append recognised, reads from any index across batches, a reader
//! ending a dead recorder's stream, a stream's batches gone with the
//! stream (purged, or deleted with its conversation) though they carry no
//! foreign key, a chat turn's stream ended by the write that stores its
//! conversation, and a step's boundaries recorded with the chunks after
//! them rather than by themselves.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_domain::{AccountId, AgentId, OnDisconnect};
use toolserver_harness::stream::{record, Opens, Recording, WRITER_APPLICATION_NAME};
use toolserver_harness::ui::UiChunk;
use toolserver_store::conversation_messages::MessageTail;
use toolserver_store::turn_streams::{self, Append, AppendAnswer, Appended, Opening};
use toolserver_store::{conversations, turn_end};
use toolserver_testsupport::Reply;
use uuid::Uuid;

use crate::app::TestApp;
use crate::chunk_stores::Chunks;
use crate::support::ACCOUNT_A;

const RECORDED: AppendAnswer = AppendAnswer {
    appended: Appended::Recorded {
        stop_requested: false,
    },
    older_dead: false,
};

const REFUSED: AppendAnswer = AppendAnswer {
    appended: Appended::Refused,
    older_dead: false,
};

fn delta(n: usize) -> String {
    json!({"type": "text-delta", "id": "t", "delta": format!("d{n}")}).to_string()
}

/// A server keeping chunks in Postgres, with a conversation to write on.
async fn app_with_conversation(pool: PgPool, conversation: &str) -> TestApp {
    let app = TestApp::live(pool).chunks(Chunks::Postgres).spawn().await;
    app.model.script("rows", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "rows", json!({})).await;
    assert_eq!(
        app.say(ACCOUNT_A, &agent, conversation, "hello")
            .await
            .status,
        200
    );
    app
}

fn append(stream: Uuid, from: usize, to: usize, finish: bool, opening: Option<Opening>) -> Append {
    Append {
        stream,
        from: i32::try_from(from).unwrap(),
        chunks: (from..to).map(delta).collect(),
        finish,
        opening,
    }
}

fn opening(stream: Uuid, conversation: &str) -> Opening {
    Opening {
        id: stream,
        account: AccountId::parse(ACCOUNT_A).unwrap(),
        conversation_id: conversation.to_owned(),
        log_start: None,
        alive: Duration::from_secs(60),
    }
}

async fn batch_rows(pool: &PgPool, stream: Uuid) -> i64 {
    let (rows,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM turn_stream_batches WHERE stream_id = $1")
            .bind(stream)
            .fetch_one(pool)
            .await
            .unwrap();
    rows
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_first_append_opens_its_stream_and_a_retry_of_it_records_nothing_twice(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-rows").await;
    let stream = Uuid::now_v7();
    let first = append(stream, 0, 3, false, Some(opening(stream, "conv-rows")));
    let answers = turn_streams::append_many(&app.pool, std::slice::from_ref(&first))
        .await
        .unwrap();
    assert_eq!(answers, vec![RECORDED]);
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let latest = turn_streams::latest(&app.pool, &account, "conv-rows")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (latest.id, latest.chunk_count, latest.live, latest.finished),
        (stream, 3, true, false),
        "the first append opened the conversation's newest stream"
    );

    // The same append again, as after a lost answer: refused, nothing added.
    let again = turn_streams::append_many(&app.pool, &[first])
        .await
        .unwrap();
    assert_eq!(again, vec![REFUSED]);
    assert_eq!(batch_rows(&app.pool, stream).await, 1);

    // The next appends go on from the count, grouped with another stream's
    // first one in one statement.
    let other = Uuid::now_v7();
    let grouped = [
        append(stream, 3, 8, false, None),
        append(other, 0, 2, false, Some(opening(other, "conv-rows"))),
    ];
    let answers = turn_streams::append_many(&app.pool, &grouped)
        .await
        .unwrap();
    assert_eq!(answers, vec![RECORDED, RECORDED]);
    let stale = turn_streams::append_many(&app.pool, &[append(stream, 3, 4, false, None)])
        .await
        .unwrap();
    assert_eq!(
        stale,
        vec![REFUSED],
        "an append at a stale count is refused"
    );
    let end = turn_streams::append_many(&app.pool, &[append(stream, 8, 10, true, None)])
        .await
        .unwrap();
    assert_eq!(end, vec![RECORDED]);

    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (10, true));
    assert_eq!(batch_rows(&app.pool, stream).await, 3);
    for from in [0, 2, 3, 5, 9, 10] {
        let read = turn_streams::chunks(&app.pool, stream, from, 100)
            .await
            .unwrap();
        let expected: Vec<String> = (usize::try_from(from).unwrap()..10).map(delta).collect();
        assert_eq!(read, expected, "reading from index {from}");
    }
    let page = turn_streams::chunks(&app.pool, stream, 2, 4).await.unwrap();
    assert_eq!(
        page,
        (2..6).map(delta).collect::<Vec<_>>(),
        "a page spans batches"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_streams_batches_go_with_it_when_purged_or_deleted_with_its_conversation(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-kept").await;
    let (kept, purged) = (Uuid::now_v7(), Uuid::now_v7());
    let openings = [
        append(kept, 0, 2, false, Some(opening(kept, "conv-kept"))),
        append(purged, 0, 2, true, Some(opening(purged, "conv-kept"))),
    ];
    let answers = turn_streams::append_many(&app.pool, &openings)
        .await
        .unwrap();
    assert_eq!(answers, vec![RECORDED, RECORDED]);
    tokio::time::sleep(Duration::from_millis(20)).await;

    let removed = turn_streams::purge_finished(&app.pool, Duration::from_millis(1))
        .await
        .unwrap();
    assert!(removed >= 1, "the finished stream was purged");
    assert_eq!(batch_rows(&app.pool, purged).await, 0);
    assert_eq!(
        batch_rows(&app.pool, kept).await,
        1,
        "the running one is kept"
    );

    sqlx::query("DELETE FROM conversations WHERE account_id = $1 AND id = $2")
        .bind(ACCOUNT_A)
        .bind("conv-kept")
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(batch_rows(&app.pool, kept).await, 0);
    let left = table_rows(&app.pool, "turn_stream_batches").await;
    assert_eq!(left, 0, "no batch outlives its stream");
    assert_eq!(
        table_rows(&app.pool, "turn_streams").await,
        0,
        "no stream outlives its conversation"
    );
}

/// How many rows `table` has.
async fn table_rows(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_accounts_streams_and_their_batches_go_with_the_account(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-one").await;
    let agent = app.agent(ACCOUNT_A, "rows", json!({})).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-two", "hello again").await;
    assert_eq!(turn.status, 200);
    assert_eq!(
        table_rows(&app.pool, "turn_streams").await,
        2,
        "a stream per turn"
    );

    sqlx::query("DELETE FROM accounts WHERE id = $1")
        .bind(ACCOUNT_A)
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(table_rows(&app.pool, "turn_streams").await, 0);
    let left = table_rows(&app.pool, "turn_stream_batches").await;
    assert_eq!(left, 0, "no batch outlives its account");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_recorder_taken_for_dead_is_refused_once_a_reader_has_ended_its_stream(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-dead").await;
    let stream = Uuid::now_v7();
    let first = append(stream, 0, 2, false, Some(opening(stream, "conv-dead")));
    let answers = turn_streams::append_many(&app.pool, &[first])
        .await
        .unwrap();
    assert_eq!(answers, vec![RECORDED]);
    sqlx::query("UPDATE turn_streams SET alive_until = now() - interval '1 second' WHERE id = $1")
        .bind(stream)
        .execute(&app.pool)
        .await
        .unwrap();
    let late = turn_streams::append_many(&app.pool, &[append(stream, 2, 3, false, None)])
        .await
        .unwrap();
    assert_eq!(
        late,
        vec![REFUSED],
        "a stream taken for dead takes nothing more"
    );

    let end = vec![
        json!({"type": "error", "errorText": "gone"}).to_string(),
        json!({"type": "finish", "finishReason": "error"}).to_string(),
    ];
    assert!(turn_streams::finish_orphan(&app.pool, stream, &end)
        .await
        .unwrap());
    assert!(
        !turn_streams::finish_orphan(&app.pool, stream, &end)
            .await
            .unwrap(),
        "a stream is ended once"
    );
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!(
        (state.chunk_count, state.finished, state.live),
        (4, true, false)
    );
    let read = turn_streams::chunks(&app.pool, stream, 0, 100)
        .await
        .unwrap();
    let mut expected: Vec<String> = (0..2).map(delta).collect();
    expected.extend(end);
    assert_eq!(read, expected, "the recorded chunks, then the orphan end");
    let after = turn_streams::append_many(&app.pool, &[append(stream, 4, 5, true, None)])
        .await
        .unwrap();
    assert_eq!(after, vec![REFUSED], "an ended stream takes nothing more");
}

/// The id of the newest stream of `conversation`.
async fn latest_stream(app: &TestApp, conversation: &str) -> Uuid {
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    turn_streams::latest(&app.pool, &account, conversation)
        .await
        .unwrap()
        .unwrap()
        .id
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_detached_runs_stream_is_found_before_its_first_chunk_and_a_chat_turns_with_it(
    pool: PgPool,
) {
    let app = app_with_conversation(pool, "conv-open").await;
    let hub = app.state.lifecycle().streams();
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let earlier = latest_stream(&app, "conv-open").await;

    // A detached run's: readers waiting for the run find it at once, even
    // if the run settles before its first chunk is recorded.
    let now = record(
        hub,
        &account,
        "conv-open",
        None,
        OnDisconnect::Continue,
        Opens::Now,
    )
    .await
    .unwrap();
    assert_ne!(now.stream_id, Some(earlier));
    assert_eq!(Some(latest_stream(&app, "conv-open").await), now.stream_id);
    now.finish().await;

    // A chat turn's: written with its first chunks.
    let lazy = record(
        hub,
        &account,
        "conv-open",
        None,
        OnDisconnect::Continue,
        Opens::WithFirstChunks(Uuid::now_v7()),
    )
    .await
    .unwrap();
    let unopened = latest_stream(&app, "conv-open").await;
    assert_ne!(Some(unopened), lazy.stream_id, "not opened before a chunk");
    lazy.chunks
        .send(UiChunk::Start {
            message_id: "m1".into(),
        })
        .await
        .unwrap();
    let mut opened = None;
    for _ in 0..100 {
        let latest = latest_stream(&app, "conv-open").await;
        if Some(latest) == lazy.stream_id {
            opened = Some(latest);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(opened, lazy.stream_id, "opened with its first chunk");
    let stream = opened.unwrap();
    lazy.finish().await;
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (1, true));
}

/// The last batch row of `stream` and the conversation `conversation`
/// were written by the same transaction.
async fn written_together(pool: &PgPool, stream: Uuid, conversation: &str) -> bool {
    let (together,): (bool,) = sqlx::query_as(
        "SELECT (SELECT xmin::text FROM turn_stream_batches WHERE stream_id = $1 \
                 ORDER BY first_idx DESC LIMIT 1) \
              = (SELECT xmin::text FROM conversations WHERE id = $2)",
    )
    .bind(stream)
    .bind(conversation)
    .fetch_one(pool)
    .await
    .unwrap();
    together
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_chat_turns_stream_ends_in_the_write_that_stores_and_releases_its_conversation(
    pool: PgPool,
) {
    let app = app_with_conversation(pool, "conv-end").await;
    let stream = latest_stream(&app, "conv-end").await;
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert!(state.finished);
    assert!(written_together(&app.pool, stream, "conv-end").await);
    let (released, messages): (bool, i32) = sqlx::query_as(
        "SELECT active_turn IS NULL AND lease_expires_at IS NULL, message_count \
         FROM conversations WHERE id = 'conv-end'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((released, messages), (true, 2));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turns_last_write_fences_the_stream_end_and_the_lease_apart(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-fence").await;
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let (agent,): (Uuid,) =
        sqlx::query_as("SELECT agent_id FROM conversations WHERE id = 'conv-fence'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let holder = Uuid::now_v7();
    conversations::begin_turn(
        &mut app.pool.acquire().await.unwrap(),
        &account,
        "conv-fence",
        AgentId::from_uuid(agent),
        conversations::LeaseTerms {
            holder,
            process: Uuid::now_v7(),
            lease: Duration::from_secs(60),
        },
        conversations::Known::default(),
    )
    .await
    .unwrap();
    let stream = Uuid::now_v7();
    let opened = append(stream, 0, 2, false, Some(opening(stream, "conv-fence")));
    assert_eq!(
        turn_streams::append_many(&app.pool, &[opened])
            .await
            .unwrap(),
        vec![RECORDED]
    );
    let messages = MessageTail::whole(&[json!({"id": "u", "role": "user", "parts": []})]);
    let end = |from| append(stream, from, 3, true, None);
    let store = |end: Append| {
        let (pool, account, messages) = (app.pool.clone(), account.clone(), messages.clone());
        async move {
            turn_end::store_and_release(
                &mut pool.acquire().await.unwrap(),
                &account,
                "conv-fence",
                holder,
                &messages,
                Some(&end),
            )
            .await
            .unwrap()
        }
    };

    // A count that does not match records no end, and the turn is stored.
    let miscounted = store(end(1)).await;
    assert_eq!(miscounted.stream_end, Some(Appended::Refused));
    assert!(miscounted.stored.is_some());
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (2, false));

    // A turn that no longer holds the conversation still ends its stream.
    let late = store(end(2)).await;
    assert!(late.stored.is_none());
    assert_eq!(
        late.stream_end,
        Some(Appended::Recorded {
            stop_requested: false
        })
    );
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (3, true));
    assert_eq!(batch_rows(&app.pool, stream).await, 2);
}

/// A chat turn's recording on `conversation` whose client is this test,
/// with its `start` sent.
async fn started_recording(
    app: &TestApp,
    conversation: &str,
) -> (Recording, tokio::sync::mpsc::Receiver<String>) {
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let (forward, client) = tokio::sync::mpsc::channel(16);
    let recording = record(
        app.state.lifecycle().streams(),
        &account,
        conversation,
        Some(forward),
        OnDisconnect::Continue,
        Opens::WithFirstChunks(Uuid::now_v7()),
    )
    .await
    .unwrap();
    let start = UiChunk::Start {
        message_id: "m1".into(),
    };
    recording.chunks.send(start).await.unwrap();
    (recording, client)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stream_end_the_turns_write_may_have_recorded_is_recorded_and_shown_once(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-lost").await;
    let (recording, mut client) = started_recording(&app, "conv-lost").await;
    let stream = recording.stream_id.unwrap();
    let mut shown = vec![shown_type(&client.recv().await.unwrap())];
    let finish = UiChunk::Finish {
        finish_reason: "stop".into(),
        message_metadata: None,
    };
    recording.chunks.send(finish).await.unwrap();
    let pool = app.pool.clone();
    let mut offered = None;
    recording
        .finish_with(|end| {
            offered = end.clone();
            async move {
                // Recorded, but its answer lost.
                turn_streams::append_many(&pool, &[end?]).await.unwrap();
                None
            }
        })
        .await;
    let offered = offered.expect("a stream open in Postgres offers its end");
    assert_eq!((offered.from, offered.chunks.len()), (1, 1));
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (2, true));
    while let Some(chunk) = client.recv().await {
        shown.push(shown_type(&chunk));
    }
    assert_eq!(shown, ["start", "finish"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_steps_boundaries_wait_to_be_recorded_and_shown_with_the_chunk_after_them(pool: PgPool) {
    let app = app_with_conversation(pool, "conv-steps").await;
    let (recording, mut client) = started_recording(&app, "conv-steps").await;
    let stream = recording.stream_id.unwrap();
    let mut shown = vec![shown_type(&client.recv().await.unwrap())];

    // A model pass starts; its model has said nothing yet.
    recording.chunks.send(UiChunk::StartStep).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), client.recv()).await;
    assert!(
        early.is_err(),
        "a step's start alone is not shown: {early:?}"
    );
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!(state.chunk_count, 1, "nor recorded");

    let text = UiChunk::TextStart { id: "t".into() };
    recording.chunks.send(text).await.unwrap();
    shown.push(shown_type(&client.recv().await.unwrap()));
    shown.push(shown_type(&client.recv().await.unwrap()));
    assert_eq!(batch_rows(&app.pool, stream).await, 2, "one write for both");

    // The step ends with nothing after it but the turn's end.
    recording.chunks.send(UiChunk::FinishStep).await.unwrap();
    let finish = UiChunk::Finish {
        finish_reason: "stop".into(),
        message_metadata: None,
    };
    recording.chunks.send(finish).await.unwrap();
    recording.finish().await;
    while let Some(chunk) = client.recv().await {
        shown.push(shown_type(&chunk));
    }
    assert_eq!(
        shown,
        ["start", "start-step", "text-start", "finish-step", "finish"]
    );
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert_eq!((state.chunk_count, state.finished), (5, true));
    assert_eq!(batch_rows(&app.pool, stream).await, 3);
}

fn shown_type(chunk: &str) -> String {
    let chunk: serde_json::Value = serde_json::from_str(chunk).unwrap();
    chunk["type"].as_str().unwrap().to_owned()
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stream_writer_whose_connection_is_cut_reconnects_and_the_turn_is_recorded_whole(
    pool: PgPool,
) {
    // A turn on another conversation first, so the writers are connected.
    let app = app_with_conversation(pool, "conv-warm").await;
    let words = "one two three four five six seven eight nine ten ";
    app.model.script(
        "cut",
        vec![Reply::text(words).chunk_delay(Duration::from_millis(40))],
    );
    let agent = app.agent(ACCOUNT_A, "cut", json!({})).await;
    let cut = async {
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let recorded: Option<(i32,)> = sqlx::query_as(
                "SELECT chunk_count FROM turn_streams WHERE conversation_id = 'conv-cut'",
            )
            .fetch_optional(&app.pool)
            .await
            .unwrap();
            if recorded.is_some_and(|(count,)| count > 2) {
                break;
            }
        }
        let (terminated,): (i64,) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
        )
        .bind(WRITER_APPLICATION_NAME)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        terminated
    };
    let (turn, terminated) = tokio::join!(app.say(ACCOUNT_A, &agent, "conv-cut", "go"), cut);
    assert!(terminated > 0, "a writer's connection was cut mid-turn");
    assert_eq!(turn.status, 200);
    assert_eq!(turn.types().last().map(String::as_str), Some("finish"));
    let stream = latest_stream(&app, "conv-cut").await;
    let state = turn_streams::state(&app.pool, stream).await.unwrap();
    assert!(state.finished);
    assert_eq!(
        usize::try_from(state.chunk_count).unwrap(),
        turn.chunks.len(),
        "every chunk the client saw is recorded, once"
    );
}
