//! Bad input: every validation failure answers a 4xx naming the problem, and
//! nothing is stored.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::{spawn_app, TestApp};
use crate::support::*;

/// (case, body, status, error code, field named)
fn create_cases() -> Vec<(
    &'static str,
    Value,
    StatusCode,
    &'static str,
    Option<&'static str>,
)> {
    let with = |key: &str, value: Value| {
        let mut body = manifest("valid_name", BUNDLE);
        body[key] = value;
        body
    };
    let without = |key: &str| {
        let mut body = manifest("valid_name", BUNDLE);
        body.as_object_mut().unwrap().remove(key);
        body
    };
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let bad = StatusCode::BAD_REQUEST;
    vec![
        (
            "name with space",
            with("name", json!("has space")),
            unprocessable,
            "validation_failed",
            Some("name"),
        ),
        (
            "empty name",
            with("name", json!("")),
            unprocessable,
            "validation_failed",
            Some("name"),
        ),
        (
            "65-char name",
            with("name", json!("n".repeat(65))),
            unprocessable,
            "validation_failed",
            Some("name"),
        ),
        (
            "name with dot",
            with("name", json!("a.b")),
            unprocessable,
            "validation_failed",
            Some("name"),
        ),
        (
            "blank description",
            with("description", json!("  ")),
            unprocessable,
            "validation_failed",
            Some("description"),
        ),
        (
            "schema not object type",
            with("inputSchema", json!({"type": "string"})),
            unprocessable,
            "validation_failed",
            Some("inputSchema"),
        ),
        (
            "schema not an object",
            with("inputSchema", json!([1])),
            unprocessable,
            "validation_failed",
            Some("inputSchema"),
        ),
        (
            "schema does not compile",
            with(
                "inputSchema",
                json!({"type": "object", "properties": {"a": {"type": 12}}}),
            ),
            unprocessable,
            "validation_failed",
            Some("inputSchema"),
        ),
        (
            "config not an object",
            with("defaultConfig", json!([1, 2])),
            unprocessable,
            "validation_failed",
            Some("defaultConfig"),
        ),
        (
            "empty bundle",
            with("bundle", json!("")),
            unprocessable,
            "validation_failed",
            Some("bundle"),
        ),
        (
            "bundle not base64",
            with("bundle", json!("%%% not base64 %%%")),
            unprocessable,
            "validation_failed",
            Some("bundle"),
        ),
        (
            "unknown field",
            with("runtime", json!("node")),
            bad,
            "invalid_request",
            None,
        ),
        (
            "missing name",
            without("name"),
            bad,
            "invalid_request",
            None,
        ),
        (
            "missing bundle",
            without("bundle"),
            bad,
            "invalid_request",
            None,
        ),
        (
            "name of wrong type",
            with("name", json!(5)),
            bad,
            "invalid_request",
            None,
        ),
    ]
}

#[sqlx::test(migrations = "../../migrations")]
async fn create_rejects_each_bad_field(pool: PgPool) {
    let app = spawn_app(pool).await;
    for (case, body, status, code, field) in create_cases() {
        let reply = app
            .call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
            .await;
        assert_eq!(
            reply.status,
            status,
            "{case}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        assert_eq!(reply.code(), code, "{case}");
        let error = &reply.json()["error"];
        if let Some(field) = field {
            assert_eq!(error["field"], field, "{case}");
            assert!(
                reply.message().contains(field),
                "{case}: message should name the field: {}",
                reply.message()
            );
        }
        assert!(!reply.message().is_empty(), "{case}");
    }
    let unknown = app
        .call(
            Method::POST,
            "/accounts/me/tools",
            ACCOUNT_A,
            Some({
                let mut b = manifest("x", BUNDLE);
                b["runtime"] = json!("node");
                b
            }),
        )
        .await;
    assert!(
        unknown.message().contains("runtime"),
        "{}",
        unknown.message()
    );
    let listed = app.get("/accounts/me/tools", ACCOUNT_A).await.json();
    assert_eq!(listed["tools"], json!([]), "nothing was stored");
}

#[sqlx::test(migrations = "../../migrations")]
async fn malformed_json_and_wrong_media_type(pool: PgPool) {
    let app = spawn_app(pool).await;
    let reply = app
        .send(authed(
            Method::POST,
            "/accounts/me/tools",
            "application/json",
            b"{not json".to_vec(),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code(), "invalid_request");
    let reply = app
        .send(authed(
            Method::POST,
            "/accounts/me/tools",
            "text/plain",
            b"hello".to_vec(),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(reply.code(), "unsupported_media_type");
}

#[sqlx::test(migrations = "../../migrations")]
async fn bundle_size_limit_is_inclusive(pool: PgPool) {
    let app = spawn_app(pool).await;
    let limit = 1_048_576;
    let exact = filler_bundle(limit);
    let created = app.create(ACCOUNT_A, "exactly_the_limit", &exact).await;
    assert_eq!(created["bundleSize"], limit);

    let over = filler_bundle(limit + 1);
    let reply = app
        .call(
            Method::POST,
            "/accounts/me/tools",
            ACCOUNT_A,
            Some(manifest("one_byte_over", &over)),
        )
        .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code(), "payload_too_large");
    assert!(reply.message().contains("1048576"), "{}", reply.message());

    let manifest_text = serde_json::to_vec(&json!({
        "name": "multipart_over", "description": "d", "inputSchema": {"type": "object"}
    }))
    .unwrap();
    let reply = app
        .send_multipart(
            Method::POST,
            "/accounts/me/tools",
            &[("manifest", &manifest_text), ("bundle", &over)],
        )
        .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);

    let reply = app
        .send_multipart(
            Method::POST,
            "/accounts/me/tools",
            &[("manifest", &manifest_text), ("bundle", &exact)],
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);

    let id = created["toolId"].as_str().unwrap();
    let patch = app
        .call(
            Method::PATCH,
            &format!("/accounts/me/tools/{id}"),
            ACCOUNT_A,
            Some(json!({"bundle": b64(&over)})),
        )
        .await;
    assert_eq!(patch.status, StatusCode::PAYLOAD_TOO_LARGE);
    let after = app
        .get(&format!("/accounts/me/tools/{id}"), ACCOUNT_A)
        .await
        .json();
    assert_eq!(after["version"], 1, "a refused patch changes nothing");
}

#[sqlx::test(migrations = "../../migrations")]
async fn request_body_limit_answers_413_json(pool: PgPool) {
    let settings = toolserver_api::ApiSettings {
        max_request_bytes: 1024,
        ..Default::default()
    };
    let app = TestApp::builder(pool).api(settings).spawn().await;
    let reply = app
        .call(
            Method::POST,
            "/accounts/me/tools",
            ACCOUNT_A,
            Some(manifest("big", &filler_bundle(4096))),
        )
        .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code(), "payload_too_large");
}

#[sqlx::test(migrations = "../../migrations")]
async fn patch_rejects_bad_changes_and_keeps_the_tool(pool: PgPool) {
    let app = spawn_app(pool).await;
    let created = app.create(ACCOUNT_A, "stable", BUNDLE).await;
    let path = format!("/accounts/me/tools/{}", created["toolId"].as_str().unwrap());
    let unchanged = app
        .call(Method::PATCH, &path, ACCOUNT_A, Some(json!({})))
        .await;
    assert_eq!(
        unchanged.status,
        StatusCode::OK,
        "a patch that changes nothing is a no-op"
    );
    assert_eq!(unchanged.json()["version"], 1);
    let cases = [
        (
            json!({"inputSchema": {"type": "array"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("inputSchema"),
        ),
        (
            json!({"name": "bad name"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("name"),
        ),
        (
            json!({"defaultConfig": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("defaultConfig"),
        ),
        (
            json!({"bundle": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("bundle"),
        ),
        (json!({"toolId": "tool_x"}), StatusCode::BAD_REQUEST, None),
    ];
    for (body, status, field) in cases {
        let reply = app
            .call(Method::PATCH, &path, ACCOUNT_A, Some(body.clone()))
            .await;
        assert_eq!(
            reply.status,
            status,
            "{body}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        if let Some(field) = field {
            assert_eq!(reply.json()["error"]["field"], field, "{body}");
        }
    }
    assert_eq!(app.get(&path, ACCOUNT_A).await.json(), created);
}

/// Input schemas broken below the top level: each refusal is a 422 naming
/// `inputSchema` and where in it the problem is, on create and on PATCH,
/// and nothing changes.
#[sqlx::test(migrations = "../../migrations")]
async fn a_schema_broken_in_a_nested_subschema_is_refused_naming_where(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let nested = |inner: Value| json!({"type": "object", "allOf": [{"allOf": [inner]}]});
    let cases = [
        (
            nested(json!({"properties": ["q"]})),
            "/allOf/0/allOf/0/properties",
        ),
        (
            nested(json!({"required": "q"})),
            "/allOf/0/allOf/0/required",
        ),
        (
            json!({"type": "object", "properties": {"q": {"oneOf": []}}}),
            "/properties/q/oneOf",
        ),
        (
            json!({"type": "object", "$defs": {"d": {"minProperties": -1}}}),
            "/$defs/d/minProperties",
        ),
        (
            json!({"type": "object", "$schema": "https://example.com/my-dialect"}),
            "/$schema",
        ),
    ];
    let created = app.create(ACCOUNT_A, "kept", BUNDLE).await;
    let path = format!("/accounts/me/tools/{}", created["toolId"].as_str().unwrap());
    for (schema, at) in cases {
        let mut body = manifest("nested", BUNDLE);
        body["inputSchema"] = schema.clone();
        let create = app
            .call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
            .await;
        let patch = app
            .call(
                Method::PATCH,
                &path,
                ACCOUNT_A,
                Some(json!({"inputSchema": schema})),
            )
            .await;
        for (route, reply) in [("create", create), ("patch", patch)] {
            assert_eq!(
                reply.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{route} {schema}: {}",
                String::from_utf8_lossy(&reply.body)
            );
            assert_eq!(reply.json()["error"]["field"], "inputSchema");
            assert!(
                reply.message().contains(&format!("at {at}:")),
                "{route} {schema}: {}",
                reply.message()
            );
        }
    }
    assert_eq!(app.get(&path, ACCOUNT_A).await.json(), created);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM tools")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 1, "only the first tool was stored");
}

#[sqlx::test(migrations = "../../migrations")]
async fn list_rejects_bad_paging(pool: PgPool) {
    let app = spawn_app(pool).await;
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=nope", "cursor"),
    ] {
        let reply = app
            .get(&format!("/accounts/me/tools?{query}"), ACCOUNT_A)
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(reply.json()["error"]["field"], field, "{query}");
    }
    let reply = app.get("/accounts/me/tools?limit=abc", ACCOUNT_A).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

/// A syntactically valid module padded to exactly `size` bytes.
pub fn filler_bundle(size: usize) -> Vec<u8> {
    let head = b"export default { execute() { return 1; } };\n//";
    let mut bytes = head.to_vec();
    bytes.resize(size, b'x');
    bytes
}
