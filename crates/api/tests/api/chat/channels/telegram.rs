//! A Telegram chat: `sendMessage` to the bot's API path, replying to each
//! message; a message that arrives while the chat's previous turn still
//! holds the conversation waits and is answered too, in the same
//! conversation.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::platform::Platform;
use super::*;
use crate::chat::with_fast_webhooks;

#[sqlx::test(migrations = "../../migrations")]
async fn a_busy_telegram_chat_answers_each_message_in_one_conversation(pool: PgPool) {
    let app = with_fast_webhooks(pool, 5).await;
    let (platform, base) = Platform::start().await;
    app.model
        .script("telegram-chat", vec![Reply::text("Hello from the bot.")]);
    let channel = json!({
        "type": "telegram",
        "botToken": "123:abc",
        "secretToken": TELEGRAM_SECRET,
        "apiBaseUrl": format!("{base}/telegram"),
    });
    let agent = channel_agent(&app, "telegram-chat", json!({}), channel).await;
    let path = format!("/channels/{agent}/support");
    let update = |id: u32, message: u32, text: &str| {
        json!({"update_id": id, "message": {
            "message_id": message, "date": 1700000000, "text": text,
            "chat": {"id": -100123, "type": "supergroup"}, "from": {"id": 5, "is_bot": false, "first_name": "Ana"},
        }})
        .to_string()
    };
    let headers = telegram_headers(TELEGRAM_SECRET);
    for body in [update(9001, 77, "hi bot"), update(9002, 78, "and again")] {
        let (status, answer) = deliver(&app, &path, &headers, &body).await;
        assert_eq!(status, 200, "{answer}");
    }
    until("both answers reach the chat", || async {
        platform.posts().len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let posts = platform.posts();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(posts[0].path, "telegram/bot123:abc/sendMessage");
    assert_eq!(posts[0].body["chat_id"], -100123);
    assert_eq!(posts[0].text(), "Hello from the bot.");
    let mut replied: Vec<i64> = posts
        .iter()
        .map(|post| {
            post.body["reply_parameters"]["message_id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    replied.sort();
    assert_eq!(replied, [77, 78]);
    let requests = app.model.requests("telegram-chat");
    assert_eq!(requests.len(), 2);
    let said = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(said, 2, "one conversation for the chat");
}
