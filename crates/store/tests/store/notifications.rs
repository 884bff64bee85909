//! The process's one listening connection: every subscriber hears the
//! notices of its own channels and no other's, all of them through one
//! backend; a lost connection is told to each and made again, and a
//! subscriber dropped hears nothing more.

use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use toolserver_store::notified::{Notifications, Notified, LISTENER_APPLICATION_NAME};
use toolserver_testsupport::wait::until;

/// What one subscriber was told, in order.
#[derive(Default)]
struct Told(Mutex<Vec<String>>);

impl Told {
    fn said(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Notified for Told {
    fn heard(&self, channel: &str, payload: &str) {
        self.0.lock().unwrap().push(format!("{channel}:{payload}"));
    }

    fn set_listening(&self, listening: bool) {
        self.0
            .lock()
            .unwrap()
            .push(format!("listening:{listening}"));
    }
}

/// The backends of the listening connection.
async fn listeners(pool: &PgPool) -> Vec<i32> {
    let pids: Vec<(i32,)> = sqlx::query_as(
        "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = $1",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_all(pool)
    .await
    .unwrap();
    pids.into_iter().map(|(pid,)| pid).collect()
}

async fn notify(pool: &PgPool, channel: &str, payload: &str) {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test]
async fn subscribers_share_one_connection_and_hear_only_their_channels(pool: PgPool) {
    let (a, b) = (Arc::new(Told::default()), Arc::new(Told::default()));
    let mut notifications = Notifications::new();
    notifications.subscribe(&a, &["chan_a", "chan_both"]);
    notifications.subscribe(&b, &["chan_b", "chan_both"]);
    let _listening = notifications.start(&pool);
    until("both subscribers to be told the listener is up", || async {
        a.said() == ["listening:true"] && b.said() == ["listening:true"]
    })
    .await;
    assert_eq!(listeners(&pool).await.len(), 1, "one connection for both");

    notify(&pool, "chan_a", "1").await;
    notify(&pool, "chan_b", "2").await;
    notify(&pool, "chan_both", "3").await;
    until("the notices to arrive", || async {
        a.said().len() == 3 && b.said().len() == 3
    })
    .await;
    assert_eq!(a.said(), ["listening:true", "chan_a:1", "chan_both:3"]);
    assert_eq!(b.said(), ["listening:true", "chan_b:2", "chan_both:3"]);

    // A lost connection is told to each, then made again.
    let cut = listeners(&pool).await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(cut[0])
        .execute(&pool)
        .await
        .unwrap();
    until("the listener to be back", || async {
        let said = a.said();
        said.ends_with(&["listening:false".to_owned(), "listening:true".to_owned()])
            && b.said()
                .ends_with(&["listening:false".to_owned(), "listening:true".to_owned()])
    })
    .await;
    let back = listeners(&pool).await;
    assert_eq!(back.len(), 1);
    assert_ne!(back, cut);

    // A dropped subscriber is passed over; the other still hears.
    drop(b);
    notify(&pool, "chan_both", "4").await;
    until("the last notice", || async {
        a.said().last().map(String::as_str) == Some("chan_both:4")
    })
    .await;
}

#[sqlx::test]
async fn without_subscribers_nothing_connects(pool: PgPool) {
    let _listening = Notifications::new().start(&pool);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(listeners(&pool).await.is_empty());
}
