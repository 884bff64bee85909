//! The tool management lifecycle: upload, read, list, update, download, delete.

use axum::http::{header, Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use crate::app::spawn_app;
use crate::support::*;

#[sqlx::test(migrations = "../../migrations")]
async fn upload_read_update_download_delete(pool: PgPool) {
    let app = spawn_app(pool).await;
    let created = app.create(ACCOUNT_A, "echo", BUNDLE).await;
    let id = created["toolId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("tool_"));
    assert_eq!(created["version"], 1);
    assert_eq!(created["bundleSize"], BUNDLE.len());
    assert_eq!(
        created["bundleSha256"],
        toolserver_domain::Sha256Digest::of(BUNDLE).to_hex()
    );
    assert_eq!(created["defaultConfig"], json!({"greeting": "hi"}));

    let read = app
        .get(&format!("/accounts/me/tools/{id}"), ACCOUNT_A)
        .await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json(), created);

    let new_bundle = b"export default { execute() { return 'v2'; } };";
    let patched = app
        .call(
            Method::PATCH,
            &format!("/accounts/me/tools/{id}"),
            ACCOUNT_A,
            Some(json!({"bundle": b64(new_bundle), "description": "Version two."})),
        )
        .await;
    assert_eq!(
        patched.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&patched.body)
    );
    let patched = patched.json();
    assert_eq!(patched["version"], 2);
    assert_eq!(patched["description"], "Version two.");
    assert_ne!(patched["bundleSha256"], created["bundleSha256"]);
    assert_eq!(patched["name"], "echo");
    assert_eq!(patched["inputSchema"], created["inputSchema"]);

    let download = app
        .get(&format!("/accounts/me/tools/{id}/bundle"), ACCOUNT_A)
        .await;
    assert_eq!(download.status, StatusCode::OK);
    assert_eq!(&download.body[..], new_bundle);
    assert_eq!(download.headers[header::CONTENT_TYPE], "text/javascript");

    let deleted = app
        .call(
            Method::DELETE,
            &format!("/accounts/me/tools/{id}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = app
        .get(&format!("/accounts/me/tools/{id}"), ACCOUNT_A)
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.code(), "not_found");
    let again = app
        .call(
            Method::DELETE,
            &format!("/accounts/me/tools/{id}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../../migrations")]
async fn multipart_upload_and_patch(pool: PgPool) {
    let app = spawn_app(pool).await;
    let manifest = json!({
        "name": "mp_tool",
        "description": "Uploaded as multipart.",
        "inputSchema": {"type": "object"},
    });
    let manifest_text = serde_json::to_vec(&manifest).unwrap();
    let reply = app
        .send_multipart(
            Method::POST,
            "/accounts/me/tools",
            &[("manifest", &manifest_text), ("bundle", BUNDLE)],
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let created = reply.json();
    assert_eq!(created["defaultConfig"], json!({}));
    let id = created["toolId"].as_str().unwrap();
    assert_eq!(
        reply.headers[header::LOCATION],
        format!("/accounts/me/tools/{id}")
    );

    let path = format!("/accounts/me/tools/{id}");
    let v2: &[u8] = b"export default { execute() { return 2; } };";
    let patched = app
        .send_multipart(Method::PATCH, &path, &[("bundle", v2)])
        .await;
    assert_eq!(patched.status, StatusCode::OK);
    assert_eq!(patched.json()["version"], 2);
    assert_eq!(patched.json()["description"], "Uploaded as multipart.");
}

#[sqlx::test(migrations = "../../migrations")]
async fn list_pages_are_stable_and_complete(pool: PgPool) {
    let app = spawn_app(pool).await;
    let mut expected = Vec::new();
    for i in 0..7 {
        let tool = app.create(ACCOUNT_A, &format!("tool_{i}"), BUNDLE).await;
        expected.push(tool["toolId"].as_str().unwrap().to_owned());
    }
    app.create(ACCOUNT_B, "other_account", BUNDLE).await;

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/accounts/me/tools?limit=3&cursor={c}"),
            None => "/accounts/me/tools?limit=3".to_owned(),
        };
        let page = app.get(&path, ACCOUNT_A).await;
        assert_eq!(page.status, StatusCode::OK);
        let page = page.json();
        let tools = page["tools"].as_array().unwrap();
        assert!(tools.len() <= 3);
        seen.extend(
            tools
                .iter()
                .map(|t| t["toolId"].as_str().unwrap().to_owned()),
        );
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, expected, "every tool once, in creation order");
    let pages_again = app
        .get("/accounts/me/tools?limit=3", ACCOUNT_A)
        .await
        .json();
    let first_again: Vec<&str> = pages_again["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolId"].as_str().unwrap())
        .collect();
    assert_eq!(
        first_again,
        expected[..3].iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn identical_bundles_are_stored_once(pool: PgPool) {
    let app = spawn_app(pool).await;
    let first = app.create(ACCOUNT_A, "first", BUNDLE).await;
    let second = app.create(ACCOUNT_B, "second", BUNDLE).await;
    assert_eq!(first["bundleSha256"], second["bundleSha256"]);
    let sha = toolserver_domain::Sha256Digest::of(BUNDLE);
    let stored_again = app
        .bundles
        .put(bytes::Bytes::from_static(BUNDLE))
        .await
        .unwrap();
    assert!(
        !stored_again.newly_stored,
        "the bytes were already stored once"
    );
    assert!(app.bundles.contains(&sha).await.unwrap());
}

#[sqlx::test(migrations = "../../migrations")]
async fn concurrent_uploads_of_one_name_have_one_winner(pool: PgPool) {
    let app = spawn_app(pool).await;
    let uploads = (0..8).map(|i| {
        let body = manifest(
            "contested",
            format!("export default {{ execute() {{ return {i}; }} }};").as_bytes(),
        );
        app.call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
    });
    let replies = futures::future::join_all(uploads).await;
    let created = replies
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    let conflicts: Vec<_> = replies
        .iter()
        .filter(|r| r.status == StatusCode::CONFLICT)
        .collect();
    assert_eq!(created, 1, "exactly one upload wins");
    assert_eq!(conflicts.len(), 7);
    assert!(conflicts.iter().all(|r| r.code() == "tool_name_taken"));
    let list = app.get("/accounts/me/tools", ACCOUNT_A).await.json();
    assert_eq!(list["tools"].as_array().unwrap().len(), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn renaming_onto_a_taken_name_conflicts_and_changes_nothing(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.create(ACCOUNT_A, "taken", BUNDLE).await;
    let other = app.create(ACCOUNT_A, "other", BUNDLE).await;
    let id = other["toolId"].as_str().unwrap();
    let reply = app
        .call(
            Method::PATCH,
            &format!("/accounts/me/tools/{id}"),
            ACCOUNT_A,
            Some(json!({"name": "taken"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    let after = app
        .get(&format!("/accounts/me/tools/{id}"), ACCOUNT_A)
        .await
        .json();
    assert_eq!(after, other);
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_egress_allow_list_is_stored_shown_replaced_and_lifted(pool: PgPool) {
    let app = spawn_app(pool).await;
    let created = app.create(ACCOUNT_A, "open", BUNDLE).await;
    assert_eq!(created["egress"], json!({}), "no list: any public host");

    let mut body = manifest("narrow", BUNDLE);
    body["egress"] = json!({"allow": ["API.example.com", "*.stripe.com"]});
    let reply = app
        .call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let narrow = reply.json();
    assert_eq!(
        narrow["egress"],
        json!({"allow": ["api.example.com", "*.stripe.com"]})
    );
    let path = format!("/accounts/me/tools/{}", narrow["toolId"].as_str().unwrap());
    assert_eq!(
        app.get(&path, ACCOUNT_A).await.json()["egress"],
        narrow["egress"]
    );

    for bad in [
        json!({"allow": ["http://api.example.com"]}),
        json!({"allow": ["a.*.com"]}),
        json!({"allow": [""]}),
    ] {
        let reply = app
            .call(
                Method::PATCH,
                &path,
                ACCOUNT_A,
                Some(json!({"egress": bad})),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert_eq!(reply.json()["error"]["field"], "egress.allow", "{bad}");
    }
    let unknown = app
        .call(
            Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({"egress": {"deny": []}})),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        app.get(&path, ACCOUNT_A).await.json()["egress"],
        narrow["egress"],
        "refused patches change nothing"
    );

    let replaced = app
        .call(
            Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({"egress": {"allow": []}})),
        )
        .await
        .json();
    assert_eq!(
        replaced["egress"],
        json!({"allow": []}),
        "an empty list allows nothing"
    );
    let untouched = app
        .call(
            Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({"description": "Still narrow."})),
        )
        .await
        .json();
    assert_eq!(untouched["egress"], json!({"allow": []}));
    let lifted = app
        .call(Method::PATCH, &path, ACCOUNT_A, Some(json!({"egress": {}})))
        .await
        .json();
    assert_eq!(lifted["egress"], json!({}));
    assert_eq!(lifted["version"], 4);
}
