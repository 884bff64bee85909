//! `Idempotency-Key` on direct calls, over real HTTP with real Node runners:
//! the tools count their runs in a file of their runner's working directory,
//! so every test can tell how often a tool body ran. A repeat is replayed
//! (JSON or SSE) without running anything; another request under the same
//! key is a 422; a repeat while the first runs is a 409; a key whose call
//! was cut off or whose process died is never run again; a refused request
//! frees its key; a key expires after its TTL; accounts do not share keys.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_api::admission::AdmissionSettings;
use toolserver_api::ApiSettings;
use toolserver_domain::{AccountId, AccountLimits, ToolId};
use toolserver_store::invoke_keys::{self, Claimed, NewClaim};
use toolserver_testsupport::wait::until;
use uuid::Uuid;

use crate::app::TestApp;
use crate::support::*;

/// Counts its runs in `runs`, logs the count, and returns it with a random
/// number (or throws, when asked to).
const COUNTER: &str = r#"
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
export default {
  execute(ctx, input) {
    const path = process.cwd() + '/runs';
    const runs = (existsSync(path) ? Number(readFileSync(path, 'utf8')) : 0) + 1;
    writeFileSync(path, String(runs));
    console.log('run ' + runs);
    console.warn('key ' + ctx.idempotencyKey);
    if (input.fail) throw new RangeError('failed on run ' + runs);
    return { runs, random: Math.random(), input };
  },
};"#;

/// Counts its runs in `runs`, writes `started`, then waits for a `release`
/// file before it returns.
const WAITER: &str = r#"
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
export default {
  async execute(ctx, input) {
    const dir = process.cwd();
    const runs = (existsSync(dir + '/runs') ? Number(readFileSync(dir + '/runs', 'utf8')) : 0) + 1;
    writeFileSync(dir + '/runs', String(runs));
    writeFileSync(dir + '/started', 'yes');
    while (!existsSync(dir + '/release')) await new Promise(r => setTimeout(r, 10));
    return { runs };
  },
};"#;

fn any_input() -> Value {
    json!({"type": "object"})
}

/// A keyed invoke of `account`'s `tool` with `body`.
fn keyed(
    app: &TestApp,
    account: &str,
    tool: &str,
    key: &str,
    body: &Value,
) -> reqwest::RequestBuilder {
    app.post(&format!("/accounts/me/tools/{tool}/invoke"), account)
        .header("idempotency-key", key)
        .json(body)
}

/// Sends a keyed invoke; its status, replay header and body.
async fn invoke_keyed(
    app: &TestApp,
    account: &str,
    tool: &str,
    key: &str,
    body: &Value,
) -> (u16, Option<String>, Value) {
    answer(keyed(app, account, tool, key, body).send().await.unwrap()).await
}

async fn answer(response: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, replayed, response.json().await.unwrap())
}

/// How often `account`'s `tool` ran.
fn runs(app: &TestApp, account: &str, tool: &str) -> u64 {
    match std::fs::read_to_string(app.work_dir(account, tool).join("runs")) {
        Ok(count) => count.parse().unwrap(),
        Err(_) => 0,
    }
}

/// Waits for this app's process to have its liveness row, which keyed
/// calls name.
async fn process_alive(app: &TestApp) {
    let id = app.state.lifecycle().process().id();
    until("this server process's liveness row", || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT EXISTS (SELECT 1 FROM server_processes WHERE id = $1 AND alive_until > now())",
        )
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
    })
    .await;
}

/// Starts a keyed call of the waiting `tool` and waits until its body runs.
async fn start_waiting(
    app: &TestApp,
    tool: &str,
    key: &str,
    accept: &str,
) -> tokio::task::JoinHandle<reqwest::Response> {
    let request = keyed(app, ACCOUNT_A, tool, key, &json!({"input": {}})).header("accept", accept);
    let first = tokio::spawn(async move { request.send().await.unwrap() });
    let started = app.work_dir(ACCOUNT_A, tool).join("started");
    until("the first call's body to run", || {
        let started = started.clone();
        async move { started.exists() }
    })
    .await;
    first
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_repeat_is_replayed_without_running_the_tool_again(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {"q": "x", "n": [1, 2]}, "config": {"mode": "a"}});
    let (status, replayed, first) = invoke_keyed(&app, ACCOUNT_A, &tool, "order-1", &body).await;
    assert_eq!((status, replayed), (200, None), "{first}");
    assert_eq!(first["output"]["runs"], 1);
    assert_eq!(first["logs"][1]["message"], "key order-1");

    // The same request, its keys in another order and spaced otherwise.
    let reordered = r#"{ "config": {"mode": "a"}, "input": { "n": [1, 2], "q": "x" } }"#;
    let again = app
        .post(&format!("/accounts/me/tools/{tool}/invoke"), ACCOUNT_A)
        .header("idempotency-key", "order-1")
        .header("content-type", "application/json")
        .body(reordered)
        .send()
        .await
        .unwrap();
    let (status, replayed, second) = answer(again).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(second, first, "the stored result, callId and logs included");
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1, "the tool body ran once");

    let (_, replayed, other) = invoke_keyed(&app, ACCOUNT_A, &tool, "order-2", &body).await;
    assert_eq!((replayed, &other["output"]["runs"]), (None, &json!(2)));
    let (_, unkeyed) = app.invoke(ACCOUNT_A, &tool, body.clone()).await;
    assert_eq!(
        unkeyed["output"]["runs"], 3,
        "a call without a key always runs"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_failed_call_is_a_result_and_is_replayed(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {"fail": true}});
    let (status, _, first) = invoke_keyed(&app, ACCOUNT_A, &tool, "fails", &body).await;
    assert_eq!(status, 200);
    assert_eq!(
        first["error"],
        json!({"name": "RangeError", "message": "failed on run 1"})
    );
    let (status, replayed, second) = invoke_keyed(&app, ACCOUNT_A, &tool, "fails", &body).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(second, first);
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_used_for_another_request_is_a_422(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let other_tool = app.upload(ACCOUNT_A, "other", COUNTER, any_input()).await;
    let body = json!({"input": {"q": "x"}});
    let (status, _, _) = invoke_keyed(&app, ACCOUNT_A, &tool, "k", &body).await;
    assert_eq!(status, 200);
    for (target, changed) in [
        (&tool, json!({"input": {"q": "y"}})),
        (&tool, json!({"input": {"q": "x"}, "config": {"mode": "b"}})),
        (&tool, json!({"input": {"q": "x"}, "timeoutMs": 5000})),
        (&other_tool, body.clone()),
    ] {
        let (status, _, answer) = invoke_keyed(&app, ACCOUNT_A, target, "k", &changed).await;
        assert_eq!(status, 422, "{changed}: {answer}");
        assert_eq!(answer["error"]["field"], "Idempotency-Key", "{answer}");
        assert_eq!(answer["error"]["code"], "validation_failed");
    }
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1);
    assert_eq!(runs(&app, ACCOUNT_A, &other_tool), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_repeat_while_the_first_runs_is_a_409_then_a_replay(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    process_alive(&app).await;
    let tool = app.upload(ACCOUNT_A, "waiter", WAITER, any_input()).await;
    let first = start_waiting(&app, &tool, "slow", "application/json").await;

    let repeat = keyed(&app, ACCOUNT_A, &tool, "slow", &json!({"input": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(repeat.status(), 409);
    assert_eq!(repeat.headers()["retry-after"], "1");
    let refusal: Value = repeat.json().await.unwrap();
    assert_eq!(
        refusal["error"]["code"], "idempotency_key_in_use",
        "{refusal}"
    );

    std::fs::write(app.work_dir(ACCOUNT_A, &tool).join("release"), b"go").unwrap();
    let (status, replayed, done) = answer(first.await.unwrap()).await;
    assert_eq!((status, replayed), (200, None), "{done}");
    let (status, replayed, again) =
        invoke_keyed(&app, ACCOUNT_A, &tool, "slow", &json!({"input": {}})).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(again, done);
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_call_cut_off_by_its_client_is_never_run_again(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "waiter", WAITER, any_input()).await;
    let first = start_waiting(&app, &tool, "cut", "text/event-stream").await;
    // The stream's client goes away mid-call: the call is cancelled.
    drop(first.await.unwrap());
    until("the repeat to say the outcome is unknown", || async {
        let (status, _, answer) =
            invoke_keyed(&app, ACCOUNT_A, &tool, "cut", &json!({"input": {}})).await;
        assert_eq!(status, 409, "{answer}");
        answer["error"]["code"] == "idempotency_outcome_unknown"
    })
    .await;
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_held_by_a_dead_process_is_never_run_again(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {}});
    // Another server process claimed the key and died mid-call.
    let dead = Uuid::now_v7();
    sqlx::query("INSERT INTO server_processes (id, alive_until) VALUES ($1, now())")
        .bind(dead)
        .execute(&app.pool)
        .await
        .unwrap();
    let fingerprint = {
        // The fingerprint the server computes: SHA-256 of the canonical body.
        use sha2::Digest;
        sha2::Sha256::digest(br#"{"config":null,"input":{},"timeoutMs":null}"#).into()
    };
    let claim = NewClaim {
        key: "orphan".into(),
        claim: Uuid::now_v7(),
        tool_id: ToolId::parse(&tool).unwrap(),
        fingerprint,
        process: dead,
        ttl: Duration::from_secs(3600),
    };
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let claimed = invoke_keys::claim(&app.pool, &account, &claim)
        .await
        .unwrap();
    assert_eq!(claimed, Claimed::Taken);

    let (status, _, answer) = invoke_keyed(&app, ACCOUNT_A, &tool, "orphan", &body).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "idempotency_outcome_unknown");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not run again"),
        "{answer}"
    );
    let (status, _, answer) = invoke_keyed(
        &app,
        ACCOUNT_A,
        &tool,
        "orphan",
        &json!({"input": {"q": 1}}),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (422, &json!("Idempotency-Key"))
    );
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_request_refused_before_it_ran_frees_its_key(pool: PgPool) {
    let api = ApiSettings {
        admission: AdmissionSettings {
            enabled: true,
            defaults: AccountLimits {
                concurrent_calls: 1,
                ..AccountLimits::DEFAULT
            },
            prompt_refusals: 1000,
            refusal_hold: Duration::ZERO,
        },
        ..ApiSettings::default()
    };
    let app = TestApp::builder(pool).serve().api(api).spawn().await;
    let schema =
        json!({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}});
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, schema).await;
    let missing = ToolId::generate().to_string();
    let valid = json!({"input": {"q": "x"}});
    // Each refusal frees the key: the next request under it, another tool
    // or body, is not a 422 for the key but runs.
    let refusals = [
        (missing.as_str(), valid.clone(), 404),
        (tool.as_str(), json!({"input": {"q": 5}}), 422),
        (
            tool.as_str(),
            json!({"input": {"q": "x"}, "timeoutMs": 0}),
            400,
        ),
    ];
    for (n, (target, body, refused)) in refusals.into_iter().enumerate() {
        let key = format!("refused-{n}");
        let (status, _, answer) = invoke_keyed(&app, ACCOUNT_A, target, &key, &body).await;
        assert_eq!(status, refused, "{answer}");
        assert_ne!(answer["error"]["field"], "Idempotency-Key");
        let (status, replayed, ran) = invoke_keyed(&app, ACCOUNT_A, &tool, &key, &valid).await;
        assert_eq!((status, replayed), (200, None), "{ran}");
    }
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 3);

    // Refused by admission (the account's one concurrent call is taken).
    let waiter = app.upload(ACCOUNT_A, "waiter", WAITER, any_input()).await;
    let busy = start_waiting(&app, &waiter, "holds-the-slot", "application/json").await;
    let (status, _, answer) = invoke_keyed(&app, ACCOUNT_A, &tool, "admitted", &valid).await;
    assert_eq!(status, 429, "{answer}");
    std::fs::write(app.work_dir(ACCOUNT_A, &waiter).join("release"), b"go").unwrap();
    assert_eq!(busy.await.unwrap().status(), 200);
    // The slot frees up shortly after; until then the key is refused again.
    let ran = std::sync::Mutex::new(Value::Null);
    until("the keyed retry to be admitted", || async {
        let (status, replayed, answer) =
            invoke_keyed(&app, ACCOUNT_A, &tool, "admitted", &valid).await;
        assert!(
            status == 429 || (status == 200 && replayed.is_none()),
            "{status}: {answer}"
        );
        *ran.lock().unwrap() = answer;
        status == 200
    })
    .await;
    assert_eq!(ran.lock().unwrap()["output"]["runs"], 4);
}

#[sqlx::test(migrations = "../../migrations")]
async fn another_accounts_identical_key_is_unrelated(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let a = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let b = app.upload(ACCOUNT_B, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {"q": "x"}});
    let (_, _, first_a) = invoke_keyed(&app, ACCOUNT_A, &a, "shared", &body).await;
    let (status, replayed, first_b) = invoke_keyed(&app, ACCOUNT_B, &b, "shared", &body).await;
    assert_eq!((status, replayed), (200, None), "{first_b}");
    assert_ne!(first_a["callId"], first_b["callId"]);
    // B's other body under the same key is its own business too.
    let (status, _, _) = invoke_keyed(&app, ACCOUNT_B, &b, "shared-2", &json!({"input": {}})).await;
    assert_eq!(status, 200);
    let (status, _, _) = invoke_keyed(
        &app,
        ACCOUNT_A,
        &a,
        "shared-2",
        &json!({"input": {"q": "y"}}),
    )
    .await;
    assert_eq!(status, 200);
    // B repeating A's request under A's key gets B's 404, not A's result.
    let (_, _, only_a) = invoke_keyed(&app, ACCOUNT_A, &a, "only-a", &body).await;
    assert_eq!(only_a["output"]["runs"], 3);
    let (status, replayed, answer) = invoke_keyed(&app, ACCOUNT_B, &a, "only-a", &body).await;
    assert_eq!((status, replayed), (404, None), "{answer}");
    assert_eq!(
        (runs(&app, ACCOUNT_A, &a), runs(&app, ACCOUNT_B, &b)),
        (3, 2)
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_is_free_again_after_its_ttl(pool: PgPool) {
    let api = ApiSettings {
        invoke_idempotency_ttl: Duration::from_secs(1),
        ..ApiSettings::default()
    };
    let app = TestApp::builder(pool).serve().api(api).spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {}});
    let (_, _, first) = invoke_keyed(&app, ACCOUNT_A, &tool, "brief", &body).await;
    assert_eq!(first["output"]["runs"], 1);
    let kept: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM expires_at - created_at)::float8 FROM invoke_idempotency_keys",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(kept, 1.0, "kept for the configured TTL");
    until("the key to expire", || async {
        sqlx::query_scalar::<_, bool>("SELECT expires_at <= now() FROM invoke_idempotency_keys")
            .fetch_one(&app.pool)
            .await
            .unwrap()
    })
    .await;
    let (status, replayed, second) = invoke_keyed(&app, ACCOUNT_A, &tool, "brief", &body).await;
    assert_eq!((status, replayed), (200, None), "{second}");
    assert_eq!(second["output"]["runs"], 2);
    assert_ne!(second["callId"], first["callId"]);
}

/// Reads an SSE response to its end.
async fn sse_text(response: reqwest::Response) -> String {
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while let Some(bytes) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&bytes.unwrap()));
    }
    text
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_sse_repeat_replays_the_logs_then_the_result(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let body = json!({"input": {"q": "x"}});
    let stream = |key: &'static str| {
        keyed(&app, ACCOUNT_A, &tool, key, &body)
            .header("accept", "text/event-stream")
            .send()
    };
    let first = stream("streamed").await.unwrap();
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first = sse_text(first).await;
    let result_line = first
        .lines()
        .find(|line| line.starts_with("data: {\"output\""))
        .unwrap()
        .to_owned();
    assert!(result_line.contains(r#""runs":1"#), "{first}");

    let again = stream("streamed").await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert!(again.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events: Vec<String> = sse_text(again)
        .await
        .split("\n\n")
        .filter(|event| !event.is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        events,
        [
            "event: log\ndata: {\"level\":\"log\",\"message\":\"run 1\"}".to_owned(),
            "event: log\ndata: {\"level\":\"warn\",\"message\":\"key streamed\"}".to_owned(),
            format!("event: result\n{result_line}"),
        ]
    );
    // The same key asked for JSON gets the same call's result.
    let (status, replayed, json) = invoke_keyed(&app, ACCOUNT_A, &tool, "streamed", &body).await;
    assert_eq!((status, replayed.as_deref()), (200, Some("true")));
    assert_eq!(json["output"]["runs"], 1);
    assert_eq!(runs(&app, ACCOUNT_A, &tool), 1);

    let failing = json!({"input": {"fail": true}});
    let failed = keyed(&app, ACCOUNT_A, &tool, "fails", &failing)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    sse_text(failed).await;
    let again = keyed(&app, ACCOUNT_A, &tool, "fails", &failing)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let text = sse_text(again).await;
    assert!(
        text.ends_with(
            "event: error\ndata: {\"name\":\"RangeError\",\"message\":\"failed on run 2\"}\n\n"
        ),
        "{text}"
    );
}

/// The contract's schema of the `Idempotency-Key` header of invokes.
fn key_schema() -> jsonschema::Validator {
    let contract = toolserver_api::contract().unwrap();
    let parameters = contract["paths"]["/accounts/me/tools/{toolId}/invoke"]["post"]["parameters"]
        .as_array()
        .unwrap();
    let key = parameters
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .unwrap();
    assert_eq!(key["in"], "header");
    jsonschema::validator_for(&key["schema"]).unwrap()
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_server_and_the_contract_agree_on_keys_and_a_bad_one_is_a_400(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let tool = app.upload(ACCOUNT_A, "counter", COUNTER, any_input()).await;
    let path = format!("/accounts/me/tools/{tool}/invoke");
    let body = json!({"input": {}});
    let schema = key_schema();
    let longest = "k".repeat(255);
    let too_long = "k".repeat(256);
    let corpus = [
        ("", false),
        (too_long.as_str(), false),
        ("clé", false),
        ("a\tb", false),
        (longest.as_str(), true),
        ("a key with spaces ~!", true),
        ("k", true),
    ];
    let mut ran = 0;
    for (key, accepted) in corpus {
        assert_eq!(
            schema.is_valid(&json!(key)),
            accepted,
            "contract on {key:?}"
        );
        let value = reqwest::header::HeaderValue::from_bytes(key.as_bytes()).unwrap();
        let request = app.post(&path, ACCOUNT_A).json(&body);
        let (status, _, answer) = answer(
            request
                .header("idempotency-key", value)
                .send()
                .await
                .unwrap(),
        )
        .await;
        if accepted {
            ran += 1;
            assert_eq!(status, 200, "{key:?}: {answer}");
        } else {
            assert_eq!(status, 400, "{key:?}: {answer}");
            assert_eq!(answer["error"]["field"], "Idempotency-Key", "{answer}");
        }
    }
    let twice = app
        .post(&path, ACCOUNT_A)
        .json(&body)
        .header("idempotency-key", "one")
        .header("idempotency-key", "two");
    let (status, _, answer) = answer(twice.send().await.unwrap()).await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (400, &json!("Idempotency-Key"))
    );
    assert_eq!(runs(&app, ACCOUNT_A, &tool), ran);
}
