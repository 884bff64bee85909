//! What only Slack has: the URL check, mentions and bots' own messages, a
//! reply in a thread answered in that thread, and the bot token on each
//! post.

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::platform::Platform;
use super::*;
use crate::chat::with_fast_webhooks;

#[sqlx::test(migrations = "../../migrations")]
async fn slack_checks_its_url_and_answers_a_mention_in_its_thread(pool: PgPool) {
    let app = with_fast_webhooks(pool.clone(), 5).await;
    let (platform, base) = Platform::start().await;
    app.model.script("slack-thread", vec![Reply::text("Hi.")]);
    let channel = json!({"type": "slack", "signingSecret": SIGNING_SECRET, "botToken": BOT_TOKEN, "apiBaseUrl": format!("{base}/slack/api")});
    let agent = channel_agent(&app, "slack-thread", json!({}), channel).await;
    let path = format!("/channels/{agent}/support");
    let signed = |body: &str| slack_headers(body, now(), SIGNING_SECRET);

    let check =
        json!({"token": "t", "challenge": "ch-123", "type": "url_verification"}).to_string();
    let (status, answer) = deliver(&app, &path, &signed(&check), &check).await;
    assert_eq!((status, answer), (200, json!({"challenge": "ch-123"})));

    let mention = json!({
        "type": "event_callback", "event_id": "Ev9",
        "event": {"type": "app_mention", "channel": "C9", "user": "U7", "text": "<@U0BOT> hello", "ts": "2.0", "thread_ts": "1.0"},
    })
    .to_string();
    for elsewhere in [
        format!("/channels/{agent}/other"),
        "/channels/agent_00000000000000000000000000000000/support".to_owned(),
    ] {
        let (status, _) = deliver(&app, &elsewhere, &signed(&mention), &mention).await;
        assert_eq!(status, 404, "{elsewhere}");
    }
    let own = json!({
        "type": "event_callback", "event_id": "Ev8",
        "event": {"type": "message", "channel": "C9", "bot_id": "B1", "text": "an answer", "ts": "3.0"},
    })
    .to_string();
    let (status, answer) = deliver(&app, &path, &signed(&own), &own).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["ignored"].is_string(), "{answer}");
    assert_eq!(events(&pool).await, 0, "a bot's own message runs nothing");

    let (status, _) = deliver(&app, &path, &signed(&mention), &mention).await;
    assert_eq!(status, 200);
    until("the answer is posted", || async {
        !platform.posts().is_empty()
    })
    .await;
    let post = &platform.posts()[0];
    assert_eq!(post.path, "slack/api/chat.postMessage");
    assert_eq!(post.headers["authorization"], format!("Bearer {BOT_TOKEN}"));
    assert_eq!(
        (
            &post.body["channel"],
            &post.body["thread_ts"],
            &post.body["text"]
        ),
        (&json!("C9"), &json!("1.0"), &json!("Hi."))
    );
    let read = conversation(&app, &format!("{agent}:support:C9:1.0")).await;
    assert_eq!(
        read["messages"][0]["parts"][0]["text"], "hello",
        "the mention is not part of the text"
    );
}
