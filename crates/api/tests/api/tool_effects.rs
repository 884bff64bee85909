//! A tool's declared effects and retry policy: stored, shown on read and
//! list, changed by a patch; bad values refused naming the field, with the
//! contract's verdict the server's.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::app::{spawn_app, TestApp};
use crate::support::*;

/// Uploads `name` with `fields` added to its manifest; the reply.
async fn upload(app: &TestApp, name: &str, fields: Value) -> Reply {
    let mut body = manifest(name, BUNDLE);
    body.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    app.call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
        .await
}

/// A tool's `effects` and `retry` as the API shows them.
fn declared(tool: &Value) -> Value {
    json!({"effects": tool["effects"], "retry": tool["retry"]})
}

#[sqlx::test(migrations = "../../migrations")]
async fn effects_and_retry_are_stored_shown_listed_and_patched(pool: PgPool) {
    let app = spawn_app(pool).await;
    let plain = upload(&app, "plain", json!({})).await;
    assert_eq!(plain.status, StatusCode::CREATED);
    assert_eq!(
        declared(&plain.json()),
        json!({"effects": "side_effect", "retry": {"maxAttempts": 1, "initialBackoffMs": 250, "maxBackoffMs": 5000}}),
        "undeclared: a side effect, tried once"
    );
    let reader = upload(
        &app,
        "reader",
        json!({"effects": "read", "retry": {"maxAttempts": 5, "initialBackoffMs": 100}}),
    )
    .await;
    assert_eq!(reader.status, StatusCode::CREATED);
    let reader = reader.json();
    let shown = json!({"effects": "read", "retry": {"maxAttempts": 5, "initialBackoffMs": 100, "maxBackoffMs": 5000}});
    assert_eq!(declared(&reader), shown);
    let idempotent = upload(&app, "setter", json!({"effects": "idempotent"})).await;
    assert_eq!(
        declared(&idempotent.json()),
        json!({"effects": "idempotent", "retry": {"maxAttempts": 3, "initialBackoffMs": 250, "maxBackoffMs": 5000}}),
        "a repeatable tool is tried three times by default"
    );

    let path = format!("/accounts/me/tools/{}", reader["toolId"].as_str().unwrap());
    assert_eq!(declared(&app.get(&path, ACCOUNT_A).await.json()), shown);
    let listed = app.get("/accounts/me/tools", ACCOUNT_A).await.json();
    let effects: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["effects"].as_str().unwrap())
        .collect();
    assert_eq!(effects, ["side_effect", "read", "idempotent"]);

    let patch = |body: Value| app.call(Method::PATCH, &path, ACCOUNT_A, Some(body));
    let unchanged = patch(json!({"description": "Reads."})).await.json();
    assert_eq!(
        declared(&unchanged),
        shown,
        "a patch of other fields keeps them"
    );
    let retried = patch(json!({"retry": {"maxBackoffMs": 900}})).await.json();
    assert_eq!(
        declared(&retried),
        json!({"effects": "read", "retry": {"maxAttempts": 3, "initialBackoffMs": 250, "maxBackoffMs": 900}}),
        "a new retry replaces the declared one whole"
    );
    let widened = patch(json!({"effects": "side_effect"})).await.json();
    assert_eq!(
        declared(&widened),
        json!({"effects": "side_effect", "retry": {"maxAttempts": 1, "initialBackoffMs": 250, "maxBackoffMs": 900}})
    );
    assert_eq!(widened["version"], 4);

    let manifest_text = serde_json::to_vec(&json!({
        "name": "mp_reader",
        "description": "Uploaded as multipart.",
        "inputSchema": {"type": "object"},
        "effects": "read",
    }))
    .unwrap();
    let multipart = app
        .send_multipart(
            Method::POST,
            "/accounts/me/tools",
            &[("manifest", &manifest_text), ("bundle", BUNDLE)],
        )
        .await;
    assert_eq!(multipart.status, StatusCode::CREATED);
    assert_eq!(multipart.json()["effects"], "read");
}

/// What a manifest whose effects and retry a tool may not hold together
/// is refused as: a 409, the pair being the problem, not a field.
const CONFLICT: &str = "tool_effects_conflict";

/// Manifest fields beside the field a refusal names (`None`: accepted;
/// [`CONFLICT`]: refused as a conflicting pair, which the contract admits).
fn manifest_corpus() -> Vec<(Value, Option<&'static str>)> {
    vec![
        (json!({"effects": "read"}), None),
        (json!({"effects": null, "retry": null}), None),
        (json!({"retry": {}}), None),
        (json!({"retry": {"maxAttempts": 1}}), None),
        (
            json!({"effects": "idempotent", "retry": {"maxAttempts": 10, "initialBackoffMs": 60000, "maxBackoffMs": 300000}}),
            None,
        ),
        (json!({"effects": "write"}), Some("effects")),
        (json!({"effects": "Read"}), Some("effects")),
        (
            json!({"effects": "read", "retry": {"maxAttempts": 0}}),
            Some("retry.maxAttempts"),
        ),
        (
            json!({"effects": "read", "retry": {"maxAttempts": 11}}),
            Some("retry.maxAttempts"),
        ),
        (
            json!({"effects": "read", "retry": {"maxAttempts": 2.5}}),
            Some("retry.maxAttempts"),
        ),
        (
            json!({"effects": "side_effect", "retry": {"maxAttempts": 2}}),
            Some(CONFLICT),
        ),
        (json!({"retry": {"maxAttempts": 3}}), Some(CONFLICT)),
        (
            json!({"effects": "read", "retry": {"initialBackoffMs": 0}}),
            Some("retry.initialBackoffMs"),
        ),
        (
            json!({"effects": "read", "retry": {"maxBackoffMs": 300001}}),
            Some("retry.maxBackoffMs"),
        ),
        (
            json!({"effects": "read", "retry": {"initialBackoffMs": 500, "maxBackoffMs": 100}}),
            None,
        ),
        (
            json!({"effects": "read", "retry": {"attempts": 2}}),
            Some("retry.attempts"),
        ),
        (json!({"retry": [3]}), Some("retry")),
    ]
}

#[sqlx::test(migrations = "../../migrations")]
async fn bad_effects_and_retry_are_refused_naming_the_field_as_the_contract_says(pool: PgPool) {
    let app = spawn_app(pool).await;
    let contract = toolserver_api::contract().unwrap();
    let stated = jsonschema::validator_for(&json!({
        "components": contract["components"],
        "$ref": "#/components/schemas/CreateToolJson",
    }))
    .unwrap();
    for (n, (fields, refused)) in manifest_corpus().into_iter().enumerate() {
        let mut body = manifest(&format!("t{n}"), BUNDLE);
        body.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        assert_eq!(
            stated.is_valid(&body),
            refused.is_none_or(|refused| refused == CONFLICT),
            "the contract's verdict on {fields}"
        );
        let reply = app
            .call(Method::POST, "/accounts/me/tools", ACCOUNT_A, Some(body))
            .await;
        match refused {
            None => assert_eq!(reply.status, StatusCode::CREATED, "{fields}"),
            Some(CONFLICT) => {
                assert_eq!(reply.status, StatusCode::CONFLICT, "{fields}");
                assert_eq!(reply.json()["error"]["code"], CONFLICT, "{fields}");
            }
            Some(field) => {
                assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{fields}");
                assert_eq!(reply.json()["error"]["field"], field, "{fields}");
            }
        }
    }
    let typed = upload(&app, "typed", json!({"effects": 1})).await;
    assert_eq!(typed.status, StatusCode::BAD_REQUEST);

    // A patch is judged with what it leaves in place, and refused whole:
    // a pair of effects and retry the tool may not hold is a 409, a bad
    // field a 422.
    let reader = upload(
        &app,
        "reader",
        json!({"effects": "read", "retry": {"maxAttempts": 4}}),
    )
    .await
    .json();
    let path = format!("/accounts/me/tools/{}", reader["toolId"].as_str().unwrap());
    for body in [
        json!({"effects": "side_effect"}),
        json!({"effects": "side_effect", "description": "Writes now."}),
        json!({"effects": "side_effect", "retry": {"maxAttempts": 2}}),
    ] {
        let reply = app
            .call(Method::PATCH, &path, ACCOUNT_A, Some(body.clone()))
            .await;
        assert_eq!(reply.status, StatusCode::CONFLICT, "{body}");
        assert_eq!(
            reply.json()["error"]["code"],
            "tool_effects_conflict",
            "{body}"
        );
        assert!(reply.message().contains("retry.maxAttempts"), "{body}");
    }
    for (body, field) in [
        (json!({"effects": "sometimes"}), "effects"),
        (json!({"retry": {"maxAttempts": 20}}), "retry.maxAttempts"),
    ] {
        let reply = app
            .call(Method::PATCH, &path, ACCOUNT_A, Some(body.clone()))
            .await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert_eq!(reply.json()["error"]["field"], field, "{body}");
    }
    assert_eq!(app.get(&path, ACCOUNT_A).await.json(), reader);
    let writer = app
        .call(
            Method::PATCH,
            &path,
            ACCOUNT_A,
            Some(json!({"effects": "side_effect", "retry": {"maxAttempts": 1}})),
        )
        .await;
    assert_eq!(writer.status, StatusCode::OK);
    assert_eq!(writer.json()["effects"], "side_effect");
}
