//! HTTP tools: a manifest of `kind: http` that the server runs itself,
//! against a real HTTP server on loopback: templating of the URL, query,
//! headers and body from the input and the account's secrets; projection
//! by JMESPath and JSONPath; the byte cap; upstream errors as failed
//! calls (and to the model, in a turn); the public-only policy; and
//! secrets kept out of every answer, the ledger and the tool itself.

mod fetch;
mod import;
mod secrets;
mod upstream;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;
use upstream::Upstream;

/// Creates `account`'s HTTP tool `name` requesting `http`; the status and answer.
pub(super) async fn create(
    app: &TestApp,
    account: &str,
    name: &str,
    http: Value,
    extra: Value,
) -> (u16, Value) {
    let mut body = json!({
        "name": name,
        "description": "An HTTP tool under test.",
        "inputSchema": {"type": "object", "properties": {
            "id": {"type": "string"}, "q": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
            "pet": {"type": "object"}, "limit": {"type": "integer"}
        }},
        "kind": "http",
        "http": http,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    app.request(Method::POST, "/accounts/me/tools", account, Some(body))
        .await
}

/// Creates the tool, asserting it was; its id.
pub(super) async fn created(app: &TestApp, name: &str, http: Value) -> String {
    let (status, body) = create(app, ACCOUNT_A, name, http, json!({})).await;
    assert_eq!(status, 201, "{body}");
    body["toolId"].as_str().unwrap().to_owned()
}

/// The ledger's attempts of account A once `count` have ended.
pub(super) async fn ended_calls(app: &TestApp, count: usize) -> Vec<Value> {
    for _ in 0..200 {
        let (_, page) = app
            .request(Method::GET, "/tool-calls?limit=100", ACCOUNT_A, None)
            .await;
        let calls = page["toolCalls"].as_array().cloned().unwrap_or_default();
        if calls.len() >= count && calls.iter().all(|call| call["status"] != "running") {
            return calls;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{count} attempts never all ended");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_request_is_filled_from_the_input_and_its_answer_projected(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let tool = created(
        &app,
        "get_pet",
        json!({
            "method": "GET",
            "url": format!("{}/echo/pets/{{id}}{{?tags*}}", upstream.base()),
            "query": {"q": "{{input.q}}", "fixed": "yes", "gone": "{{input.absent}}"},
            "headers": {"X-Api-Key": "key-{{input.q}}"},
        }),
    )
    .await;
    let (status, view) = app
        .request(
            Method::GET,
            &format!("/accounts/me/tools/{tool}"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(view["kind"], "http");
    assert_eq!(
        view["egress"]["allow"],
        json!(["127.0.0.1"]),
        "the URL's host by default"
    );
    assert!(view.get("bundleSha256").is_none(), "{view}");

    let (status, result) = app
        .invoke(
            ACCOUNT_A,
            &tool,
            json!({"input": {"id": "a b/c", "tags": ["x", "y"], "q": "hi"}}),
        )
        .await;
    assert_eq!(status, 200, "{result}");
    let output = &result["output"];
    assert_eq!(output["method"], "GET", "{result}");
    assert_eq!(output["path"], "/pets/a b/c", "{result}");
    assert_eq!(
        output["query"],
        json!([["tags", "x"], ["tags", "y"], ["fixed", "yes"], ["q", "hi"]]),
        "{result}"
    );
    assert_eq!(output["apiKey"], "key-hi");

    let post = created(
        &app,
        "add_pet",
        json!({
            "method": "POST",
            "url": format!("{}/echo/pets", upstream.base()),
            "body": {"pet": "{{input.pet}}", "limit": "{{input.limit}}", "note": "for {{input.q}}", "gone": "{{input.absent}}"},
            "response": {"jmesPath": "{sent: body, type: contentType}"},
        }),
    )
    .await;
    let (_, result) = app
        .invoke(
            ACCOUNT_A,
            &post,
            json!({"input": {"pet": {"name": "rex", "age": 3}, "limit": 2, "q": "ann"}}),
        )
        .await;
    assert_eq!(
        result["output"],
        json!({"sent": {"pet": {"name": "rex", "age": 3}, "limit": 2, "note": "for ann"}, "type": "application/json"}),
        "{result}"
    );

    let names = created(
        &app,
        "names",
        json!({
            "method": "GET",
            "url": format!("{}/echo/list", upstream.base()),
            "response": {"jsonPath": "$.items[*].name"},
        }),
    )
    .await;
    let (_, result) = app.invoke(ACCOUNT_A, &names, json!({"input": {}})).await;
    assert_eq!(result["output"], json!(["ann", "bob"]), "{result}");

    let text = created(
        &app,
        "text",
        json!({"method": "GET", "url": format!("{}/text", upstream.base())}),
    )
    .await;
    let (_, result) = app.invoke(ACCOUNT_A, &text, json!({"input": {}})).await;
    assert_eq!(result["output"], "plain words", "{result}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn answers_over_the_cap_and_upstream_errors_are_failed_calls(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let big = created(
        &app,
        "big",
        json!({"method": "GET", "url": format!("{}/big", upstream.base()), "maxResponseBytes": 1000}),
    )
    .await;
    let (status, result) = app.invoke(ACCOUNT_A, &big, json!({"input": {}})).await;
    assert_eq!(status, 200, "a failing tool is a result");
    assert_eq!(result["error"]["name"], "LimitExceeded", "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 1000 bytes"),
        "{result}"
    );

    let fail = created(
        &app,
        "fail",
        json!({"method": "GET", "url": format!("{}/fail", upstream.base())}),
    )
    .await;
    let (_, result) = app.invoke(ACCOUNT_A, &fail, json!({"input": {}})).await;
    assert_eq!(result["error"]["name"], "ToolError", "{result}");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("500") && message.contains("upstream exploded"),
        "{message}"
    );

    let busy = created(
        &app,
        "busy",
        json!({"method": "GET", "url": format!("{}/busy", upstream.base())}),
    )
    .await;
    let (_, result) = app.invoke(ACCOUNT_A, &busy, json!({"input": {}})).await;
    assert_eq!(result["error"]["name"], "Unreachable", "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry after 2000 ms"),
        "{result}"
    );

    let calls = ended_calls(&app, 3).await;
    let statuses: Vec<&str> = calls
        .iter()
        .map(|call| call["status"].as_str().unwrap())
        .collect();
    for status in ["limit_exceeded", "tool_error", "runner_lost"] {
        assert!(statuses.contains(&status), "{status} in {statuses:?}");
    }
    assert!(
        calls
            .iter()
            .all(|call| call.get("bundleSha256").is_none() && call["toolVersion"] == 1),
        "{calls:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_upstream_error_reaches_the_model_as_a_failed_call(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let upstream = Upstream::start(vec![]).await;
    let fail = created(
        &app,
        "lookup",
        json!({"method": "GET", "url": format!("{}/fail", upstream.base())}),
    )
    .await;
    app.model.script(
        "http-fail",
        vec![
            Reply::tool_call("c1", "lookup", json!({})),
            Reply::text("It failed."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "http-fail", json!({ &fail: {} }))
        .await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-http-fail", "look it up")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let errors = turn.of_type("tool-output-error");
    assert_eq!(errors.len(), 1, "{}", turn.body);
    assert!(
        errors[0]["errorText"]
            .as_str()
            .unwrap()
            .contains("upstream exploded"),
        "{}",
        turn.body
    );
    let requests = app.model.requests("http-fail");
    let tool_message = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .cloned()
        .unwrap();
    assert!(
        tool_message.to_string().contains("upstream exploded"),
        "{tool_message}"
    );
    assert!(turn.text().contains("It failed."));
}

#[sqlx::test(migrations = "../../migrations")]
async fn private_destinations_are_refused_when_the_server_is_public_only(pool: PgPool) {
    let permissive = TestApp::builder(pool.clone()).serve().spawn().await;
    let public_only = TestApp::builder(pool)
        .serve()
        .public_outbound_only()
        .spawn()
        .await;
    let upstream = Upstream::start(vec![]).await;
    for base in [upstream.base(), upstream.named_base()] {
        let (status, body) = create(
            &public_only,
            ACCOUNT_A,
            "loopback",
            json!({"method": "GET", "url": format!("{base}/text")}),
            json!({}),
        )
        .await;
        assert_eq!(status, 422, "{base} is refused when saved: {body}");
        assert_eq!(body["error"]["field"], "http.url", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a public address"),
            "{body}"
        );
    }
    // Saved where private addresses were allowed, called where they are not.
    for (name, base) in [
        ("by_ip", upstream.base()),
        ("by_name", upstream.named_base()),
    ] {
        let tool = created(
            &permissive,
            name,
            json!({"method": "GET", "url": format!("{base}/text")}),
        )
        .await;
        let (status, result) = public_only
            .invoke(ACCOUNT_A, &tool, json!({"input": {}}))
            .await;
        assert_eq!(status, 200);
        let message = result["error"]["message"].as_str().unwrap_or_default();
        let refused = message.contains("is not a public address")
            || message.contains("resolves only to non-public addresses");
        assert!(refused, "{name}: {result}");
        let (_, allowed) = permissive
            .invoke(ACCOUNT_A, &tool, json!({"input": {}}))
            .await;
        assert_eq!(allowed["output"], "plain words", "{allowed}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn bad_manifests_name_their_field_and_kinds_do_not_mix(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    for (http, extra, field) in [
        (
            json!({"method": "GET", "url": "https://{host}/x"}),
            json!({}),
            "http.url",
        ),
        (
            json!({"method": "FETCH", "url": "https://api.test/"}),
            json!({}),
            "http.method",
        ),
        (
            json!({"method": "GET", "url": "https://api.test/", "response": {"jmesPath": "a[."}}),
            json!({}),
            "http.response",
        ),
        (
            json!({"method": "GET", "url": "https://api.test/", "headers": {"X": "{{env.HOME}}"}}),
            json!({}),
            "http.headers.X",
        ),
        (
            json!({"method": "GET", "url": "https://api.test/"}),
            json!({"egress": {"allow": ["other.test"]}}),
            "egress.allow",
        ),
        (
            json!({"method": "GET", "url": "https://api.test/"}),
            json!({"bundle": "ZXhwb3J0"}),
            "bundle",
        ),
        (
            json!({"method": "GET", "url": "https://api.test/"}),
            json!({"kind": "lambda"}),
            "kind",
        ),
    ] {
        let (status, body) = create(&app, ACCOUNT_A, "bad", http.clone(), extra).await;
        assert_eq!(status, 422, "{http}: {body}");
        assert_eq!(body["error"]["field"], field, "{http}: {body}");
    }
    let http_tool = created(
        &app,
        "plain",
        json!({"method": "GET", "url": "https://api.test/"}),
    )
    .await;
    let reply = app
        .call(
            axum::http::Method::PATCH,
            &format!("/accounts/me/tools/{http_tool}"),
            ACCOUNT_A,
            Some(json!({"bundle": b64(b"export default {}")})),
        )
        .await;
    assert_eq!(reply.status, 409, "{}", reply.json());
    assert_eq!(reply.code(), "tool_kind_conflict");
    let (status, _) = app
        .request(
            Method::GET,
            &format!("/accounts/me/tools/{http_tool}/bundle"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(status, 404);

    let reply = app
        .call(
            axum::http::Method::PATCH,
            &format!("/accounts/me/tools/{http_tool}"),
            ACCOUNT_A,
            Some(json!({"http": {"method": "GET", "url": "https://elsewhere.test/v2"}})),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.json());
    assert_eq!(
        reply.json()["egress"]["allow"],
        json!(["elsewhere.test"]),
        "a new host is allowed with its request"
    );
    assert_eq!(reply.json()["version"], 2);
    let (status, _) = app
        .request(
            Method::GET,
            &format!("/accounts/me/tools/{http_tool}"),
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404, "another account's tool is not found");
}
