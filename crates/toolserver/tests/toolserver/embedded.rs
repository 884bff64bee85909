//! The private PostgreSQL cluster used when `DATABASE_URL` is unset: created,
//! started, migrated, stopped, and started again with its data intact.

use std::os::unix::fs::PermissionsExt;

use sqlx::Connection;
use toolserver::embedded_pg::EmbeddedPostgres;

#[tokio::test]
async fn private_cluster_starts_migrates_and_restarts_with_data() {
    let dir = tempfile::tempdir().unwrap();
    // The cluster may run as the `postgres` user, which must reach the directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    let (cluster, url) = EmbeddedPostgres::start(dir.path(), None).await.unwrap();
    assert!(url.contains(&dir.path().display().to_string()), "{url}");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE marker (v int)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO marker VALUES (42)")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    toolserver_store::migrate(&pool).await.unwrap();
    pool.close().await;
    cluster.stop();
    assert!(sqlx::PgConnection::connect(&url).await.is_err(), "stopped");

    let (again, url_again) = EmbeddedPostgres::start(dir.path(), None).await.unwrap();
    assert_eq!(url, url_again);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let kept: i32 = sqlx::query_scalar("SELECT v FROM marker")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept, 42);
    let tools: i64 = sqlx::query_scalar("SELECT count(*) FROM tools")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(tools, 0, "migrated schema is still there");
    conn.close().await.unwrap();
    again.stop();
}
