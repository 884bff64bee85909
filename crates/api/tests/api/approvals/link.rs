//! The announcement on the account's approval webhook, and its one-time
//! link: it decides once, and not after the expiry, when the call is
//! denied and the model told why.

use serde_json::json;
use sqlx::PgPool;
use std::time::Duration;

use super::*;
use crate::webhook_receiver::Receiver;

/// Points account A's approval announcements at `url`.
async fn announce_to(app: &TestApp, url: &str) {
    let (status, saved) = app
        .request(
            reqwest::Method::PUT,
            "/policies",
            ACCOUNT_A,
            Some(json!({"policies": "", "approvalWebhook": url})),
        )
        .await;
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["approvalWebhook"], url);
}

/// `POST` of the link `url` with `body`; the status and the answer.
async fn follow(app: &TestApp, url: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let response = app.client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_announced_link_approves_once(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(3600)).await;
    let (receiver, url) = Receiver::start().await;
    announce_to(&app, &url).await;
    let (_, id) = asked(&app, "link-once", "conv-link-once").await;
    let posts = receiver.posts(1).await;
    let post = &posts[0];
    assert_eq!(post["type"], "approval.requested");
    assert_eq!(post["approval"]["id"], id.as_str());
    assert_eq!(post["approval"]["tool"], "echo");
    let link = post["link"].as_str().unwrap().to_owned();
    assert!(link.contains("/approval-links/apl_"), "{link}");
    let link = format!(
        "{}{}",
        app.base(),
        &link[link.find("/approval-links/").unwrap()..]
    );

    let (status, decided) = follow(&app, &link, json!({"approved": true})).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approval"]["decidedBy"], "link");
    settled(&app, "conv-link-once", "output-available").await;
    let (status, again) = follow(&app, &link, json!({"approved": true})).await;
    assert_eq!(status, 409, "{again}");
    let forged = format!("{}/approval-links/apl_{}", app.base(), "0".repeat(64));
    let (status, _) = follow(&app, &forged, json!({"approved": true})).await;
    assert_eq!(status, 404);
    assert_eq!(app.model.requests("link-once").len(), 2);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_expired_approval_denies_the_call_and_its_link_is_refused(pool: PgPool) {
    let app = app_with_ttl(pool, Duration::from_secs(1)).await;
    let (receiver, url) = Receiver::start().await;
    announce_to(&app, &url).await;
    let (_, id) = asked(&app, "link-expired", "conv-link-expired").await;
    let link = receiver.posts(1).await[0]["link"]
        .as_str()
        .unwrap()
        .to_owned();
    let link = format!(
        "{}{}",
        app.base(),
        &link[link.find("/approval-links/").unwrap()..]
    );
    let stored = settled(&app, "conv-link-expired", "output-denied").await;
    assert_eq!(stored["messages"].as_array().unwrap().len(), 2);
    let expired = approval(&app, &id).await;
    assert_eq!(expired["status"], "expired");
    assert_eq!(expired["decidedBy"], "expiry");
    let told = app.model.requests("link-expired")[1].to_string();
    assert!(told.contains("expired"), "{told}");
    let (status, refused) = follow(&app, &link, json!({"approved": true})).await;
    assert_eq!(status, 410, "{refused}");
}
