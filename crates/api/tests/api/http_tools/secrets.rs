//! Account secrets: set, listed by name, never read back; filled into an
//! HTTP tool's request in the server, and kept out of every answer, the
//! ledger and the database's plain text. Another account sees none.

use reqwest::Method;
use serde_json::json;
use sqlx::PgPool;

use super::created;
use super::upstream::{Upstream, TOKEN};
use crate::app::TestApp;
use crate::support::*;

#[sqlx::test(migrations = "../../migrations")]
async fn secrets_are_set_listed_by_name_and_never_read_back(pool: PgPool) {
    let app = TestApp::builder(pool.clone()).serve().spawn().await;
    let put = |name: &'static str, value: &'static str| {
        let app = &app;
        async move {
            app.request(
                Method::PUT,
                &format!("/accounts/me/secrets/{name}"),
                ACCOUNT_A,
                Some(json!({"value": value})),
            )
            .await
        }
    };
    let (status, first) = put("API_TOKEN", "first-value").await;
    assert_eq!(status, 201, "{first}");
    let (status, second) = put("API_TOKEN", TOKEN).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["name"], "API_TOKEN");
    assert!(second["updatedAt"].as_str().unwrap() >= first["updatedAt"].as_str().unwrap());

    let (status, list) = app
        .request(Method::GET, "/accounts/me/secrets", ACCOUNT_A, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(list["secrets"].as_array().unwrap().len(), 1, "{list}");
    assert!(!list.to_string().contains(TOKEN) && !list.to_string().contains("first-value"));

    for (name, body, status, field) in [
        ("bad-name", json!({"value": "x"}), 422, "name"),
        ("EMPTY", json!({"value": ""}), 422, "value"),
        ("HUGE", json!({"value": "x".repeat(20_000)}), 422, "value"),
    ] {
        let (got, answer) = app
            .request(
                Method::PUT,
                &format!("/accounts/me/secrets/{name}"),
                ACCOUNT_A,
                Some(body),
            )
            .await;
        assert_eq!(got, status, "{name}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
    }

    let (_, theirs) = app
        .request(Method::GET, "/accounts/me/secrets", ACCOUNT_B, None)
        .await;
    assert_eq!(theirs["secrets"], json!([]), "another account sees none");
    let (status, _) = app
        .request(
            Method::DELETE,
            "/accounts/me/secrets/API_TOKEN",
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404);

    let sealed: Vec<u8> =
        sqlx::query_scalar("SELECT sealed FROM account_secrets WHERE name = 'API_TOKEN'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        !sealed
            .windows(TOKEN.len())
            .any(|window| window == TOKEN.as_bytes()),
        "stored sealed"
    );

    let (status, _) = app
        .request(
            Method::DELETE,
            "/accounts/me/secrets/API_TOKEN",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = app
        .request(
            Method::DELETE,
            "/accounts/me/secrets/API_TOKEN",
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 404);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_secret_reaches_the_upstream_and_nothing_else(pool: PgPool) {
    let app = TestApp::builder(pool.clone()).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let authed = created(
        &app,
        "authed",
        json!({
            "method": "GET",
            "url": format!("{}/auth", upstream.base()),
            "query": {"key": "{{secret.API_TOKEN}}"},
            "headers": {"Authorization": "Bearer {{secret.API_TOKEN}}"},
        }),
    )
    .await;
    let (_, missing) = app.invoke(ACCOUNT_A, &authed, json!({"input": {}})).await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("API_TOKEN is not set"),
        "{missing}"
    );

    let (status, _) = app
        .request(
            Method::PUT,
            "/accounts/me/secrets/API_TOKEN",
            ACCOUNT_A,
            Some(json!({"value": TOKEN})),
        )
        .await;
    assert_eq!(status, 201);
    let (_, result) = app.invoke(ACCOUNT_A, &authed, json!({"input": {}})).await;
    assert_eq!(
        result["output"]["authorized"], true,
        "the upstream got the secret: {result}"
    );
    assert_eq!(
        result["output"]["youSent"], "Bearer [redacted]",
        "an upstream that echoes it does not hand it on: {result}"
    );

    let echo = created(
        &app,
        "echo_secret",
        json!({
            "method": "POST",
            "url": format!("{}/echo/anything", upstream.base()),
            "headers": {"Authorization": "Bearer {{secret.API_TOKEN}}"},
            "body": {"sig": "{{secret.API_TOKEN}}"},
        }),
    )
    .await;
    let (_, echoed) = app.invoke(ACCOUNT_A, &echo, json!({"input": {}})).await;
    assert_eq!(echoed["output"]["body"]["sig"], "[redacted]", "{echoed}");
    let fail = created(
        &app,
        "fail_secret",
        json!({
            "method": "GET",
            "url": format!("{}/fail", upstream.base()),
            "query": {"key": "{{secret.API_TOKEN}}"},
        }),
    )
    .await;
    let (_, failed) = app.invoke(ACCOUNT_A, &fail, json!({"input": {}})).await;
    assert!(failed["error"].is_object(), "{failed}");

    let mut seen = vec![result.to_string(), echoed.to_string(), failed.to_string()];
    for tool in [&authed, &echo, &fail] {
        let (_, view) = app
            .request(
                Method::GET,
                &format!("/accounts/me/tools/{tool}"),
                ACCOUNT_A,
                None,
            )
            .await;
        seen.push(view.to_string());
    }
    let calls = super::ended_calls(&app, 4).await;
    for call in &calls {
        let id = call["id"].as_str().unwrap();
        let (status, detail) = app
            .request(Method::GET, &format!("/tool-calls/{id}"), ACCOUNT_A, None)
            .await;
        assert_eq!(status, 200, "{detail}");
        seen.push(detail.to_string());
    }
    seen.push(json!(calls).to_string());
    let ledger_rows: Vec<String> =
        sqlx::query_scalar("SELECT row_to_json(tool_calls)::text FROM tool_calls")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(ledger_rows.len() >= 4, "{ledger_rows:?}");
    seen.extend(ledger_rows);
    for text in seen {
        assert!(!text.contains(TOKEN), "the secret leaked: {text}");
    }
}
