//! Turn-stream tests run once per chunk store: Postgres, and NATS JetStream
//! (the real server at 127.0.0.1:4222, a stream and subject prefix of the
//! test's own, deleted when the test's app goes).

use std::time::Duration;

use sqlx::PgPool;
use toolserver_harness::stream::{ChunkStore, JetStreamChunks, JetStreamSettings};

/// The NATS server the tests use.
pub const NATS_URL: &str = "127.0.0.1:4222";

/// Where a test's server keeps turn chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunks {
    /// Rows in Postgres.
    Postgres,
    /// Messages in NATS JetStream.
    Nats,
}

impl Chunks {
    /// A store of this kind for one test (a JetStream one of its own).
    pub async fn store(self) -> TestStore {
        match self {
            Self::Postgres => TestStore(ChunkStore::Postgres),
            Self::Nats => TestStore(ChunkStore::JetStream(own_jetstream().await)),
        }
    }

    /// Checks that the turns recorded so far were recorded in this store
    /// (and that there were some).
    pub async fn assert_recorded_here(self, pool: &PgPool) {
        let (streams, in_log, batch_rows): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM turn_streams), \
                    (SELECT count(*) FROM turn_streams WHERE log_start IS NOT NULL), \
                    (SELECT count(*) FROM turn_stream_batches)",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert!(streams > 0, "no turn stream was recorded");
        match self {
            Self::Postgres => assert_eq!((in_log, batch_rows > 0), (0, true)),
            Self::Nats => assert_eq!((in_log, batch_rows), (streams, 0)),
        }
    }
}

/// A JetStream stream and subject prefix no other test uses.
pub async fn own_jetstream() -> JetStreamChunks {
    let client = async_nats::connect(NATS_URL).await.unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let settings = JetStreamSettings {
        stream: format!("TEST_{id}"),
        subject_prefix: format!("test.{id}"),
    };
    JetStreamChunks::connect(client, settings, Duration::from_secs(600))
        .await
        .unwrap()
}

/// A test's chunk store; a JetStream one is deleted when it goes.
pub struct TestStore(pub ChunkStore);

impl Drop for TestStore {
    fn drop(&mut self) {
        let ChunkStore::JetStream(chunks) = &self.0 else {
            return;
        };
        let name = chunks.settings().stream.clone();
        // The test's runtime may be ending: delete from a runtime of its own.
        let deleting = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = async_nats::connect(NATS_URL).await.unwrap();
                let _ = async_nats::jetstream::new(client)
                    .delete_stream(&name)
                    .await;
            });
        });
        let _ = deleting.join();
    }
}

/// Runs each named test, an `async fn(PgPool, Chunks)`, once per chunk
/// store, as `<name>::postgres` and `<name>::nats`, each on a database of
/// its own.
macro_rules! on_each_chunk_store {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use $crate::chunk_stores::Chunks;

                #[sqlx::test(migrations = "../../migrations")]
                async fn postgres(pool: sqlx::PgPool) {
                    super::$name(pool, Chunks::Postgres).await;
                }

                #[sqlx::test(migrations = "../../migrations")]
                async fn nats(pool: sqlx::PgPool) {
                    super::$name(pool, Chunks::Nats).await;
                }
            }
        )*
    };
}
pub(crate) use on_each_chunk_store;
