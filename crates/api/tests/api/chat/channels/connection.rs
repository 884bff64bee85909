//! A channel's turn whose call needs a connection its user has not made:
//! the thread cannot wait mid-turn for an authorization, so the call fails
//! and the answer carries the link; once connected, asking again runs it
//! with the user's token.

use reqwest::Method;
use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::oauth_server::OAuthServer;
use toolserver_testsupport::wait::until;
use toolserver_testsupport::Reply;

use super::platform::Platform;
use super::*;
use crate::chat::with_fast_webhooks;
use crate::connections::{configure, whoami_tool, CLIENT_ID, CLIENT_SECRET};

#[sqlx::test(migrations = "../../migrations")]
async fn a_channel_shows_the_link_to_connect_and_the_call_runs_when_asked_again(pool: PgPool) {
    let app = with_fast_webhooks(pool, 5).await;
    let (platform, base) = Platform::start().await;
    let oauth = OAuthServer::start(CLIENT_ID, CLIENT_SECRET, 3600).await;
    configure(&app, &oauth, None).await;
    let tool = whoami_tool(&app, &oauth).await;
    app.model.script(
        "linked",
        vec![
            Reply::tool_call("c1", "whoami", json!({})),
            Reply::text("Answered."),
        ],
    );
    let channel = json!({"type": "webhook", "secret": WEBHOOK_SECRET, "replyUrl": format!("{base}/hooks/reply")});
    let agent = channel_agent(&app, "linked", json!({ &tool: {} }), channel).await;
    let path = format!("/channels/{agent}/support");

    let first = json!({"id": "evt-1", "thread": "t1", "text": "who am I?"}).to_string();
    let (status, _) = deliver(
        &app,
        &path,
        &webhook_headers(&first, now(), WEBHOOK_SECRET),
        &first,
    )
    .await;
    assert_eq!(status, 200);
    until("the first answer is posted", || async {
        !platform.posts().is_empty()
    })
    .await;
    let answer = platform.posts()[0].text().to_owned();
    assert!(
        answer.contains("This needs your demo account") && answer.ends_with("Answered."),
        "{answer}"
    );
    let url = answer
        .split_whitespace()
        .find(|word| word.starts_with(&oauth.authorization_url()))
        .unwrap()
        .to_owned();
    let callback = oauth.consent(&url, "ann").await;
    let connected: serde_json::Value = app
        .client
        .get(&callback)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(connected["connected"], true, "{connected}");
    assert!(
        connected["resumedTurn"].is_null(),
        "no call waited: {connected}"
    );

    let second = json!({"id": "evt-2", "thread": "t1", "text": "and now?"}).to_string();
    let (status, _) = deliver(
        &app,
        &path,
        &webhook_headers(&second, now(), WEBHOOK_SECRET),
        &second,
    )
    .await;
    assert_eq!(status, 200);
    until("the second answer is posted", || async {
        platform
            .posts()
            .iter()
            .any(|post| post.body["inReplyTo"] == "evt-2")
    })
    .await;
    let texts: Vec<(String, String)> = platform
        .posts()
        .iter()
        .map(|post| {
            (
                post.body["inReplyTo"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                post.text().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        texts.last().unwrap(),
        &("evt-2".to_owned(), "Answered.".to_owned()),
        "no link once connected: {texts:?}"
    );
    let (_, stored) = app
        .request(
            Method::GET,
            &format!("/conversations/{agent}:support:t1"),
            ACCOUNT_A,
            None,
        )
        .await;
    let outputs: Vec<&serde_json::Value> = stored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["parts"].as_array().unwrap())
        .filter(|part| part["type"] == "tool-whoami")
        .collect();
    assert_eq!(outputs.len(), 2, "{stored}");
    assert_eq!(outputs[0]["state"], "output-error", "{stored}");
    assert_eq!(outputs[1]["output"]["user"], "ann", "{stored}");
}
