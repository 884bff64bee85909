//! The webhook channel's answer: posted to `replyUrl` with the event it
//! answers and its thread, signed like the events it receives, and
//! verifiable over the exact bytes received.

use serde_json::json;
use sqlx::PgPool;
use toolserver_harness::channels::hmac_hex;
use toolserver_harness::channels::webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::platform::Platform;
use super::*;
use crate::chat::with_fast_webhooks;

#[sqlx::test(migrations = "../../migrations")]
async fn a_webhook_channels_answer_is_signed_like_its_events(pool: PgPool) {
    let app = with_fast_webhooks(pool, 5).await;
    let (platform, base) = Platform::start().await;
    app.model
        .script("hook", vec![Reply::text("Answered over the webhook.")]);
    let channel = json!({"type": "webhook", "secret": WEBHOOK_SECRET, "replyUrl": format!("{base}/hooks/reply")});
    let agent = channel_agent(&app, "hook", json!({}), channel).await;
    let event =
        json!({"id": "evt-1", "thread": "ticket-7", "text": "where is my order?"}).to_string();
    let path = format!("/channels/{agent}/support");
    let headers = webhook_headers(&event, now(), WEBHOOK_SECRET);
    let (status, _) = deliver(&app, &path, &headers, &event).await;
    assert_eq!(status, 200);
    until("the answer is posted", || async {
        !platform.posts().is_empty()
    })
    .await;
    let post = &platform.posts()[0];
    assert_eq!(post.path, "hooks/reply");
    assert_eq!(
        (
            &post.body["thread"],
            &post.body["inReplyTo"],
            &post.body["text"]
        ),
        (
            &json!("ticket-7"),
            &json!("evt-1"),
            &json!("Answered over the webhook.")
        )
    );
    assert_eq!(
        post.headers["idempotency-key"],
        post.body["id"].as_str().unwrap()
    );
    let stamp = post.headers[TIMESTAMP_HEADER].to_str().unwrap();
    let expected = hmac_hex(
        WEBHOOK_SECRET,
        &[format!("{stamp}.").as_bytes(), &post.raw].concat(),
    );
    assert_eq!(
        post.headers[SIGNATURE_HEADER].to_str().unwrap(),
        format!("v1={expected}")
    );
}
