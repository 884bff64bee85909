//! Bundle downloads through signed links: the filesystem store's own route,
//! and S3 presigned URLs against a real `s3s-fs`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sqlx::PgPool;
use toolserver_api::ApiSettings;
use toolserver_bundles::{S3BundleStore, S3Settings};
use toolserver_testsupport::S3Server;

use crate::app::{spawn_app, TestApp};
use crate::support::*;

fn short_links() -> ApiSettings {
    ApiSettings {
        signed_url_ttl: Duration::from_secs(1),
        ..Default::default()
    }
}

async fn unauthenticated_get(app: &TestApp, url: &str) -> Reply {
    let url = url::Url::parse(url).unwrap();
    let path = format!("{}?{}", url.path(), url.query().unwrap_or(""));
    app.send(Request::builder().uri(path).body(Body::empty()).unwrap())
        .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn fs_signed_link_works_until_it_expires(pool: PgPool) {
    let app = TestApp::builder(pool).api(short_links()).spawn().await;
    let tool = app.create(ACCOUNT_A, "linked", BUNDLE).await;
    let path = format!(
        "/accounts/me/tools/{}/bundle-url",
        tool["toolId"].as_str().unwrap()
    );
    let link = app.get(&path, ACCOUNT_A).await.json();
    assert_eq!(link["bundleSha256"], tool["bundleSha256"]);
    let url = link["url"].as_str().unwrap();
    assert!(url.starts_with("http://toolserver.test/bundles/"), "{url}");

    let fetched = unauthenticated_get(&app, url).await;
    assert_eq!(fetched.status, StatusCode::OK);
    assert_eq!(&fetched.body[..], BUNDLE);

    let tampered = url.replace("signature=", "signature=00");
    assert_eq!(
        unauthenticated_get(&app, &tampered).await.status,
        StatusCode::NOT_FOUND
    );

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = unauthenticated_get(&app, url).await;
    assert_eq!(expired.status, StatusCode::GONE);
    assert_eq!(expired.code(), "expired");
}

#[sqlx::test(migrations = "../../migrations")]
async fn signed_route_needs_its_parameters(pool: PgPool) {
    let app = spawn_app(pool).await;
    let sha = toolserver_domain::Sha256Digest::of(BUNDLE);
    let reply = app
        .send(
            Request::builder()
                .uri(format!("/bundles/{sha}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = app
        .send(
            Request::builder()
                .uri("/bundles/xyz?expires=1&signature=00")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../../migrations")]
async fn s3_backed_api_uploads_downloads_and_presigns(pool: PgPool) {
    let server = S3Server::start("toolserver-bundles");
    let store = S3BundleStore::connect(S3Settings {
        bucket: "toolserver-bundles".into(),
        prefix: "bundles/".into(),
        region: "us-east-1".into(),
        endpoint: Some(server.endpoint()),
        force_path_style: true,
        credentials: Some((
            toolserver_testsupport::s3::ACCESS_KEY.into(),
            toolserver_testsupport::s3::SECRET_KEY.into(),
        )),
    })
    .await;
    let app = TestApp::builder(pool)
        .bundles(Arc::new(store))
        .api(short_links())
        .spawn()
        .await;

    let tool = app.create(ACCOUNT_A, "s3_tool", BUNDLE).await;
    let id = tool["toolId"].as_str().unwrap();
    let download = app
        .get(&format!("/accounts/me/tools/{id}/bundle"), ACCOUNT_A)
        .await;
    assert_eq!(download.status, StatusCode::OK);
    assert_eq!(&download.body[..], BUNDLE);

    let link = app
        .get(&format!("/accounts/me/tools/{id}/bundle-url"), ACCOUNT_A)
        .await
        .json();
    let url = link["url"].as_str().unwrap();
    assert!(url.starts_with(&server.endpoint()), "{url}");
    let fetched = reqwest::get(url).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(&fetched.bytes().await.unwrap()[..], BUNDLE);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = reqwest::get(url).await.unwrap();
    assert_eq!(
        expired.status(),
        403,
        "s3s-fs refuses an expired presigned URL"
    );
}
