//! Turn streams: opened, appended in order (an append at the wrong count is
//! refused), finished; taken for dead and finished by another process; asked
//! to stop; announced only to followers, and their opening only while the
//! conversation has an unfinished detached turn; purged after retention.

use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use time::OffsetDateTime;
use toolserver_domain::TurnStatus;
use toolserver_store::async_turns::{self, Committed, RunCommit, RunEnd};
use toolserver_store::turn_streams::{
    self, conversation_key, Append, AppendAnswer, Appended, Opening, StreamState, CHUNKS_CHANNEL,
    OPENED_CHANNEL, STOP_CHANNEL,
};
use uuid::Uuid;

use crate::support::{exec, lease, live_process, register_n, start_turn_on, tenant, Tenant};

/// A stream of the tenant's conversation `conversation`, alive for a minute.
fn opening(tenant: &Tenant, conversation: &str) -> Opening {
    Opening {
        id: Uuid::now_v7(),
        account: tenant.account.clone(),
        conversation_id: conversation.into(),
        log_start: None,
        alive: Duration::from_secs(60),
    }
}

fn chunks(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| json!({"t": t}).to_string()).collect()
}

fn append(stream: Uuid, from: i32, texts: &[&str], finish: bool) -> Append {
    Append {
        stream,
        from,
        chunks: chunks(texts),
        finish,
        opening: None,
    }
}

async fn append_one(pool: &PgPool, append: Append) -> AppendAnswer {
    let answers = turn_streams::append_many(pool, &[append]).await.unwrap();
    assert_eq!(answers.len(), 1);
    answers[0]
}

const RECORDED: Appended = Appended::Recorded {
    stop_requested: false,
};

/// Creates the tenant's conversation `id`.
async fn conversation(pool: &PgPool, tenant: &Tenant, id: &str) {
    let process = live_process(pool).await;
    lease(pool, tenant, id, process).await;
}

async fn state(pool: &PgPool, stream: Uuid) -> StreamState {
    turn_streams::state(pool, stream).await.unwrap()
}

/// The next notification on `listener`, if one comes within half a second.
async fn heard(listener: &mut PgListener) -> Option<String> {
    let next = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    next.ok().map(|n| n.unwrap().payload().to_owned())
}

async fn listening(pool: &PgPool, channel: &str) -> PgListener {
    let mut listener = PgListener::connect_with(pool).await.unwrap();
    listener.listen(channel).await.unwrap();
    listener
}

#[sqlx::test(migrations = "../../migrations")]
async fn appends_are_recorded_in_order_until_the_stream_finishes(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    conversation(&pool, &owner, "conv-1").await;
    let opening = opening(&owner, "conv-1");
    let stream = opening.id;

    let mut first = append(stream, 0, &["c0", "c1"], false);
    first.opening = Some(opening.clone());
    let answer = append_one(&pool, first.clone()).await;
    assert_eq!(
        answer,
        AppendAnswer {
            appended: RECORDED,
            older_dead: false
        }
    );
    let latest = turn_streams::latest(&pool, &owner.account, "conv-1").await;
    let expected = StreamState {
        id: stream,
        finished: false,
        chunk_count: 2,
        live: true,
        stop_requested: false,
        log_start: None,
    };
    assert_eq!(latest.unwrap(), Some(expected));
    assert_eq!(append_one(&pool, first).await.appended, Appended::Refused);

    let wrong_count = append(stream, 1, &["x"], false);
    assert_eq!(
        append_one(&pool, wrong_count).await.appended,
        Appended::Refused
    );
    assert_eq!(state(&pool, stream).await.chunk_count, 2);
    let last = append(stream, 2, &["c2"], true);
    assert_eq!(append_one(&pool, last).await.appended, RECORDED);
    let finished = state(&pool, stream).await;
    assert!(finished.finished && !finished.live, "{finished:?}");
    assert_eq!(finished.chunk_count, 3);
    let after = append(stream, 3, &["late"], false);
    assert_eq!(append_one(&pool, after).await.appended, Appended::Refused);

    let all = turn_streams::chunks(&pool, stream, 0, 10).await.unwrap();
    assert_eq!(all, chunks(&["c0", "c1", "c2"]));
    let from_two = turn_streams::chunks(&pool, stream, 2, 10).await.unwrap();
    assert_eq!(from_two, chunks(&["c2"]));
    let one = turn_streams::chunks(&pool, stream, 1, 1).await.unwrap();
    assert_eq!(one, chunks(&["c1"]));
    assert!(turn_streams::chunks(&pool, stream, 9, 10)
        .await
        .unwrap()
        .is_empty());
    let (batches,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM turn_stream_batches WHERE stream_id = $1")
            .bind(stream)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(batches, 2);
    let theirs = turn_streams::latest(&pool, &other.account, "conv-1").await;
    assert_eq!(theirs.unwrap(), None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stream_whose_recorder_died_is_finished_by_the_next_one(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    conversation(&pool, &tenant, "conv-1").await;
    let old = opening(&tenant, "conv-1");
    let opened = turn_streams::open_many(&pool, std::slice::from_ref(&old))
        .await
        .unwrap();
    assert_eq!(opened, [false]);
    assert_eq!(
        append_one(&pool, append(old.id, 0, &["o0"], false))
            .await
            .appended,
        RECORDED
    );
    let dead = "UPDATE turn_streams SET alive_until = now() - interval '1 second' WHERE id = $1";
    exec(&pool, dead, old.id).await;
    assert!(!state(&pool, old.id).await.live);
    let alive = Duration::from_secs(60);
    assert_eq!(
        turn_streams::keep_alive(&pool, old.id, alive)
            .await
            .unwrap(),
        None
    );
    let late = append(old.id, 1, &["late"], false);
    assert_eq!(append_one(&pool, late).await.appended, Appended::Refused);

    let new = opening(&tenant, "conv-1");
    let opened = turn_streams::open_many(&pool, std::slice::from_ref(&new))
        .await
        .unwrap();
    assert_eq!(opened, [true], "the new stream does not see the dead one");
    turn_streams::finish_dead(&pool, &tenant.account, "conv-1", &chunks(&["end"]))
        .await
        .unwrap();
    let finished = state(&pool, old.id).await;
    assert!(
        finished.finished && finished.chunk_count == 2,
        "{finished:?}"
    );
    let all = turn_streams::chunks(&pool, old.id, 0, 10).await.unwrap();
    assert_eq!(all, chunks(&["o0", "end"]));
    let untouched = state(&pool, new.id).await;
    assert!(untouched.live && !untouched.finished, "{untouched:?}");
    let orphan = turn_streams::finish_orphan(&pool, new.id, &chunks(&["end"])).await;
    assert!(!orphan.unwrap(), "a live stream was finished");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stream_kept_elsewhere_is_only_marked_finished(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    conversation(&pool, &tenant, "conv-1").await;
    let mut dead = opening(&tenant, "conv-1");
    dead.log_start = Some(7);
    let mut marked = opening(&tenant, "conv-1");
    marked.log_start = Some(9);
    turn_streams::open_many(&pool, &[dead.clone(), marked.clone()])
        .await
        .unwrap();
    let died = "UPDATE turn_streams SET alive_until = now() - interval '1 second' WHERE id = $1";
    exec(&pool, died, dead.id).await;

    turn_streams::finish_dead(&pool, &tenant.account, "conv-1", &chunks(&["end"]))
        .await
        .unwrap();
    let finished = state(&pool, dead.id).await;
    assert!(
        finished.finished && finished.chunk_count == 0,
        "{finished:?}"
    );
    assert_eq!(finished.log_start, Some(7));
    assert!(turn_streams::chunks(&pool, dead.id, 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(!turn_streams::mark_finished(&pool, dead.id).await.unwrap());

    assert!(turn_streams::mark_finished(&pool, marked.id).await.unwrap());
    assert!(state(&pool, marked.id).await.finished);
    assert!(!turn_streams::mark_finished(&pool, marked.id).await.unwrap());
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_abandoned_stream_refuses_its_recorder_and_is_finished_once(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    conversation(&pool, &owner, "conv-1").await;
    let since = OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let opened = opening(&owner, "conv-1");
    let stream = opened.id;
    let mut first = append(stream, 0, &["c0"], false);
    first.opening = Some(opened);
    append_one(&pool, first).await;

    let theirs = turn_streams::abandon_newest(&pool, &other.account, "conv-1", Some(since));
    assert_eq!(theirs.await.unwrap(), None);
    assert!(state(&pool, stream).await.live);
    let abandoned = turn_streams::abandon_newest(&pool, &owner.account, "conv-1", Some(since))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(abandoned.id, stream);
    assert!(!abandoned.live && !abandoned.finished, "{abandoned:?}");
    let alive = Duration::from_secs(60);
    assert_eq!(
        turn_streams::keep_alive(&pool, stream, alive)
            .await
            .unwrap(),
        None
    );
    let late = append(stream, 1, &["late"], false);
    assert_eq!(append_one(&pool, late).await.appended, Appended::Refused);

    let end = chunks(&["abort"]);
    assert!(turn_streams::finish_orphan(&pool, stream, &end)
        .await
        .unwrap());
    assert!(!turn_streams::finish_orphan(&pool, stream, &end)
        .await
        .unwrap());
    let finished = state(&pool, stream).await;
    assert!(
        finished.finished && finished.chunk_count == 2,
        "{finished:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stop_reaches_the_active_stream_of_the_account_only(pool: PgPool) {
    let owner = tenant(&pool, "acct-a").await;
    let other = tenant(&pool, "acct-b").await;
    conversation(&pool, &owner, "conv-1").await;
    let opened = opening(&owner, "conv-1");
    let stream = opened.id;
    turn_streams::open_many(&pool, &[opened]).await.unwrap();
    let mut stops = listening(&pool, STOP_CHANNEL).await;

    let theirs = turn_streams::request_stop(&pool, &other.account, "conv-1");
    assert_eq!(theirs.await.unwrap(), None);
    assert!(!state(&pool, stream).await.stop_requested);
    assert_eq!(heard(&mut stops).await, None);

    let stopped = turn_streams::request_stop(&pool, &owner.account, "conv-1");
    assert_eq!(stopped.await.unwrap(), Some(stream));
    assert!(state(&pool, stream).await.stop_requested);
    assert_eq!(heard(&mut stops).await, Some(stream.to_string()));
    let alive = Duration::from_secs(60);
    let kept = turn_streams::keep_alive(&pool, stream, alive).await;
    assert_eq!(kept.unwrap(), Some(true));
    let answer = append_one(&pool, append(stream, 0, &["c0"], true)).await;
    assert_eq!(
        answer.appended,
        Appended::Recorded {
            stop_requested: true
        }
    );

    let after = turn_streams::request_stop(&pool, &owner.account, "conv-1");
    assert_eq!(after.await.unwrap(), None);
    turn_streams::announce_stop(&pool, stream).await.unwrap();
    assert_eq!(heard(&mut stops).await, Some(stream.to_string()));
}

#[sqlx::test(migrations = "../../migrations")]
async fn appends_are_announced_only_while_someone_follows(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    conversation(&pool, &tenant, "conv-1").await;
    let opened = opening(&tenant, "conv-1");
    let stream = opened.id;
    turn_streams::open_many(&pool, &[opened]).await.unwrap();
    let mut announced = listening(&pool, CHUNKS_CHANNEL).await;

    append_one(&pool, append(stream, 0, &["c0"], false)).await;
    assert_eq!(heard(&mut announced).await, None);
    turn_streams::add_follower(&pool, stream).await.unwrap();
    append_one(&pool, append(stream, 1, &["c1"], false)).await;
    assert_eq!(heard(&mut announced).await, Some(stream.to_string()));

    for _ in 0..2 {
        turn_streams::remove_follower(&pool, stream).await.unwrap();
    }
    let (followers,): (i32,) = sqlx::query_as("SELECT followers FROM turn_streams WHERE id = $1")
        .bind(stream)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(followers, 0);
    append_one(&pool, append(stream, 2, &["c2"], true)).await;
    assert_eq!(heard(&mut announced).await, None);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_opening_is_announced_while_the_conversation_has_an_unfinished_turn(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    conversation(&pool, &tenant, "conv-1").await;
    let mut opened = listening(&pool, OPENED_CHANNEL).await;

    turn_streams::open_many(&pool, &[opening(&tenant, "conv-1")])
        .await
        .unwrap();
    assert_eq!(heard(&mut opened).await, None, "no detached turn yet");

    let turn = start_turn_on(&pool, &tenant, "conv-2").await;
    let running = opening(&tenant, "conv-2");
    turn_streams::open_many(&pool, std::slice::from_ref(&running))
        .await
        .unwrap();
    let key = conversation_key(&tenant.account, "conv-2");
    assert_eq!(
        heard(&mut opened).await,
        Some(format!("{} {key}", running.id))
    );

    register_n(&pool, &tenant, &turn, 1).await;
    let commit = RunCommit {
        account: &tenant.account,
        conversation_id: "conv-2",
        job: &turn.job,
        end: RunEnd::Skipped,
        reply: None,
    };
    let committed = async_turns::commit_run(&pool, commit).await.unwrap();
    assert_eq!(committed, Committed::Turn(TurnStatus::Waiting));
    let waiting = opening(&tenant, "conv-2");
    let mut first = append(waiting.id, 0, &["c0"], false);
    first.opening = Some(waiting.clone());
    assert_eq!(append_one(&pool, first).await.appended, RECORDED);
    assert_eq!(
        heard(&mut opened).await,
        Some(format!("{} {key}", waiting.id))
    );

    assert!(async_turns::fail(&pool, turn.id, "done").await.unwrap());
    turn_streams::open_many(&pool, &[opening(&tenant, "conv-2")])
        .await
        .unwrap();
    assert_eq!(heard(&mut opened).await, None, "the turn has ended");
}

#[sqlx::test(migrations = "../../migrations")]
async fn streams_finished_or_dead_past_retention_are_purged(pool: PgPool) {
    let tenant = tenant(&pool, "acct-a").await;
    conversation(&pool, &tenant, "conv-1").await;
    let [finished_long_ago, dead_long_ago, finished_recently, alive] =
        [(); 4].map(|()| opening(&tenant, "conv-1"));
    for stream in [
        &finished_long_ago,
        &dead_long_ago,
        &finished_recently,
        &alive,
    ] {
        let mut first = append(stream.id, 0, &["c0"], false);
        first.opening = Some(stream.clone());
        append_one(&pool, first).await;
    }
    for stream in [&finished_long_ago, &finished_recently] {
        append_one(&pool, append(stream.id, 1, &["end"], true)).await;
    }
    let old = "UPDATE turn_streams SET created_at = now() - interval '2 hours', \
               finished_at = CASE WHEN finished_at IS NULL THEN NULL \
                                  ELSE now() - interval '2 hours' END, \
               alive_until = CASE WHEN status = 'active' THEN now() - interval '2 hours' \
                                  ELSE alive_until END \
               WHERE id = $1";
    for stream in [&finished_long_ago, &dead_long_ago] {
        exec(&pool, old, stream.id).await;
    }
    let opened_long_ago =
        "UPDATE turn_streams SET created_at = now() - interval '2 hours' WHERE id = $1";
    exec(&pool, opened_long_ago, alive.id).await;

    let purged = turn_streams::purge_finished(&pool, Duration::from_secs(3600)).await;
    assert_eq!(purged.unwrap(), 2);
    let left: Vec<(Uuid,)> = sqlx::query_as("SELECT id FROM turn_streams ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, [(finished_recently.id,), (alive.id,)]);
    let (batches,): (i64,) =
        sqlx::query_as("SELECT count(DISTINCT stream_id) FROM turn_stream_batches")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(batches, 2);
}
