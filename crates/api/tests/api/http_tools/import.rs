//! `POST /accounts/me/tools/import`: every operation of a real OpenAPI
//! document becomes an HTTP tool or is skipped with its reason; the tools
//! call the API the document describes; importing again updates them in
//! place.

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use super::upstream::Upstream;
use crate::app::TestApp;
use crate::support::*;

/// A fixture document of the converter's tests.
fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../openapi/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

/// Operations in `document`, counted here, apart from the converter.
fn operations(document: &Value) -> usize {
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    document["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| {
            METHODS
                .iter()
                .filter(|method| item.get(**method).is_some())
                .count()
        })
        .sum()
}

async fn import(app: &TestApp, body: Value) -> Value {
    let (status, answer) = app
        .request(
            Method::POST,
            "/accounts/me/tools/import",
            ACCOUNT_A,
            Some(body),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

fn count(answer: &Value, key: &str) -> usize {
    answer[key].as_array().unwrap().len()
}

/// Every operation is accounted for, each skip with a reason; the counts.
fn accounted(answer: &Value, document: &Value) -> (usize, usize, usize) {
    let (created, updated, skipped) = (
        count(answer, "created"),
        count(answer, "updated"),
        count(answer, "skipped"),
    );
    assert_eq!(
        created + updated + skipped,
        operations(document),
        "{answer}"
    );
    for skip in answer["skipped"].as_array().unwrap() {
        assert!(!skip["reason"].as_str().unwrap().is_empty(), "{skip}");
    }
    (created, updated, skipped)
}

#[sqlx::test(migrations = "../../migrations")]
async fn petstore_becomes_tools_that_call_the_api_and_a_second_import_updates_them(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let text = fixture("petstore3.json");
    let document: Value = serde_json::from_str(&text).unwrap();
    let body = json!({
        "document": document,
        "namespace": "pets",
        "baseUrl": format!("{}/echo/api/v3", upstream.base()),
        "secret": "PETSTORE_KEY",
    });
    let first = import(&app, body.clone()).await;
    let (created, _, skipped) = accounted(&first, &document);
    eprintln!(
        "petstore 3.0: {created} created, {skipped} skipped of {}",
        operations(&document)
    );
    assert_eq!(skipped, 0, "{first}");

    let get_pet = first["created"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["operationId"] == "getPetById")
        .cloned()
        .unwrap();
    assert_eq!(get_pet["name"], "pets_getPetById");
    let (status, _) = app
        .request(
            Method::PUT,
            "/accounts/me/secrets/PETSTORE_KEY",
            ACCOUNT_A,
            Some(json!({"value": "pk-1"})),
        )
        .await;
    assert_eq!(status, 201);
    let (_, result) = app
        .invoke(
            ACCOUNT_A,
            get_pet["toolId"].as_str().unwrap(),
            json!({"input": {"petId": 7}}),
        )
        .await;
    assert_eq!(result["output"]["method"], "GET", "{result}");
    assert_eq!(result["output"]["path"], "/api/v3/pet/7", "{result}");
    let (_, view) = app
        .request(
            Method::GET,
            &format!("/accounts/me/tools/{}", get_pet["toolId"].as_str().unwrap()),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(view["effects"], "read");
    assert_eq!(view["inputSchema"]["required"], json!(["petId"]), "{view}");

    let again = import(&app, body).await;
    let (created_again, updated, _) = accounted(&again, &document);
    assert_eq!(
        (created_again, updated),
        (0, created),
        "updated in place: {again}"
    );
    let (_, page) = app
        .request(Method::GET, "/accounts/me/tools?limit=100", ACCOUNT_A, None)
        .await;
    assert_eq!(
        page["tools"].as_array().unwrap().len(),
        created,
        "no duplicates"
    );
    assert_eq!(page["tools"][0]["version"], 2);

    let filtered = import(
        &app,
        json!({"document": text, "namespace": "some", "operations": ["getPetById", "DELETE /pet/{petId}", "noSuchOperation"], "baseUrl": upstream.base()}),
    )
    .await;
    assert_eq!(count(&filtered, "created"), 2, "{filtered}");
    assert_eq!(filtered["unmatched"], json!(["noSuchOperation"]));
}

#[sqlx::test(migrations = "../../migrations")]
async fn documents_in_3_1_and_a_large_real_one_fetched_by_url(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let upstream = Upstream::start(vec![
        ("tictactoe.json", fixture("tictactoe-3.1.json")),
        ("petstore-3.1.json", fixture("petstore-3.1.json")),
        ("asana.json", fixture("asana.json")),
    ])
    .await;
    for (name, namespace) in [
        ("petstore-3.1.json", "pets31"),
        ("tictactoe.json", "ttt"),
        ("asana.json", "asana"),
    ] {
        let document: Value = serde_json::from_str(&fixture(match name {
            "tictactoe.json" => "tictactoe-3.1.json",
            other => other,
        }))
        .unwrap();
        let answer = import(
            &app,
            json!({"url": format!("{}/files/{name}", upstream.base()), "namespace": namespace}),
        )
        .await;
        let (created, _, skipped) = accounted(&answer, &document);
        let total = operations(&document);
        eprintln!("{name}: {created} created, {skipped} skipped of {total}");
        for skip in answer["skipped"].as_array().unwrap() {
            eprintln!("  skipped {}: {}", skip["operation"], skip["reason"]);
        }
        assert!(
            created * 100 >= total * 95,
            "{name}: {created} of {total} created"
        );
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn documents_that_cannot_be_imported_are_refused_by_name(pool: PgPool) {
    let app = TestApp::builder(pool)
        .serve()
        .public_outbound_only()
        .spawn()
        .await;
    for (body, field) in [
        (json!({}), "document"),
        (
            json!({"document": {"swagger": "2.0", "paths": {}}}),
            "document",
        ),
        (json!({"document": "openapi: [unclosed"}), "document"),
        (
            json!({"document": {"openapi": "3.0.3", "paths": {}}, "namespace": "bad space"}),
            "document",
        ),
        (json!({"url": "http://127.0.0.1:9/openapi.json"}), "url"),
        (json!({"url": "ftp://example.test/x"}), "url"),
    ] {
        let (status, answer) = app
            .request(
                Method::POST,
                "/accounts/me/tools/import",
                ACCOUNT_A,
                Some(body.clone()),
            )
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
}
