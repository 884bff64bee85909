//! Every path's calls reach the ledger: a streamed turn's calls (with their
//! place and the key the tool ran under), an approved call in a later
//! request, direct invokes by how they ended, MCP calls, and a detached
//! turn's calls with their outcome.

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_domain::AccountId;
use toolserver_harness::ledger::idempotency_key;
use toolserver_testsupport::Reply;

use super::ended_calls;
use crate::app::{spawn_live_app, TestApp};
use crate::detached::{start_async, wait_for_status};
use crate::support::*;

const KEYED: &str = "export default { async execute(ctx, input) { return { key: ctx.idempotencyKey, q: input.q }; } };";

const THROWS: &str =
    "export default { async execute() { throw new TypeError('the tool broke'); } };";

const SLOW: &str = "export default { async execute() { await new Promise(r => setTimeout(r, 5000)); return 'late'; } };";

fn by_tool_call_id<'a>(calls: &'a [Value], id: &str) -> &'a Value {
    calls
        .iter()
        .find(|c| c["toolCallId"] == id)
        .unwrap_or_else(|| panic!("no attempt of {id} in {calls:?}"))
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_turns_calls_are_recorded_with_their_place_and_key(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "keyed", KEYED, json!({"type": "object"}))
        .await;
    app.model.script(
        "ledger-turn",
        vec![
            Reply::tool_call("call_a", "keyed", json!({"q": "a"})).and_tool_call(
                "call_b",
                "keyed",
                json!({"q": "b"}),
            ),
            Reply::text("Done."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "ledger-turn", json!({ &tool: {} }))
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-ledger", "go").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let message_id = turn.chunks[0]["messageId"].as_str().unwrap().to_owned();
    let outputs = turn.of_type("tool-output-available");

    let calls = ended_calls(&app, ACCOUNT_A, "conversationId=conv-ledger", 2).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    for (seq, id) in ["call_a", "call_b"].into_iter().enumerate() {
        let call = by_tool_call_id(&calls, id);
        let key = idempotency_key(&account, &message_id, 1, seq as i32);
        assert_eq!(call["path"], "turn");
        assert_eq!(call["status"], "ok");
        assert_eq!(call["attempt"], 1);
        assert_eq!(call["toolName"], "keyed");
        assert_eq!(call["toolId"], tool.as_str());
        assert_eq!(call["toolVersion"], 1);
        assert_eq!(call["bundleSha256"].as_str().unwrap().len(), 64);
        assert_eq!(call["agentId"], agent.as_str());
        assert_eq!(call["turnId"], message_id.as_str());
        assert_eq!(
            (call["step"].as_i64(), call["seq"].as_i64()),
            (Some(1), Some(seq as i64))
        );
        assert_eq!(call["idempotencyKey"], key.as_str());
        let output = outputs.iter().find(|o| o["toolCallId"] == id).unwrap();
        assert_eq!(
            output["output"]["key"],
            key.as_str(),
            "the tool ran under the recorded key"
        );
        let input: Value = serde_json::from_str(call["input"]["text"].as_str().unwrap()).unwrap();
        assert_eq!(input["q"], output["output"]["q"]);
        let recorded: Value =
            serde_json::from_str(call["output"]["text"].as_str().unwrap()).unwrap();
        assert_eq!(recorded, output["output"]);
        assert!(call["durationMs"].as_i64().unwrap() >= 0);
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_approved_call_runs_under_the_key_of_its_place(pool: PgPool) {
    let app = spawn_live_app(pool).await;
    let tool = app
        .upload(ACCOUNT_A, "keyed", KEYED, json!({"type": "object"}))
        .await;
    app.model.script(
        "ledger-approval",
        vec![
            Reply::tool_call("call_x", "keyed", json!({"q": "x"})),
            Reply::text("Approved and done."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "ledger-approval",
            json!({ &tool: {"needsApproval": true} }),
        )
        .await;
    let first = app.say(ACCOUNT_A, &agent, "conv-approve", "go").await;
    assert_eq!(first.status, 200, "{}", first.body);
    let message_id = first.chunks[0]["messageId"].as_str().unwrap().to_owned();
    let approval_id = first.of_type("tool-approval-request")[0]["approvalId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, stored) = app
        .request(
            reqwest::Method::GET,
            "/conversations/conv-approve",
            ACCOUNT_A,
            None,
        )
        .await;
    let messages = stored["messages"].as_array().unwrap();
    let (user, mut assistant) = (messages[0].clone(), messages[1].clone());
    for part in assistant["parts"].as_array_mut().unwrap() {
        if part["toolCallId"] == "call_x" {
            part["state"] = json!("approval-responded");
            part["approval"] = json!({"id": approval_id, "approved": true});
        }
    }
    let body = json!({
        "id": "conv-approve",
        "messages": [user, assistant],
        "trigger": "submit-message",
        "messageId": message_id,
    });
    let second = app.turn(ACCOUNT_A, &agent, body).await;
    assert_eq!(second.status, 200, "{}", second.body);

    let calls = ended_calls(&app, ACCOUNT_A, "conversationId=conv-approve", 1).await;
    assert_eq!(
        calls.len(),
        1,
        "only the approved run is an attempt: {calls:?}"
    );
    let account = AccountId::parse(ACCOUNT_A).unwrap();
    let key = idempotency_key(&account, &message_id, 1, 0);
    assert_eq!(calls[0]["idempotencyKey"], key.as_str());
    assert_eq!(calls[0]["status"], "ok");
    let output = &second.of_type("tool-output-available")[0]["output"];
    assert_eq!(output["key"], key.as_str());
}

#[sqlx::test(migrations = "../../migrations")]
async fn direct_invokes_are_recorded_by_how_they_ended(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let keyed = app
        .upload(ACCOUNT_A, "keyed", KEYED, json!({"type": "object"}))
        .await;
    let throws = app
        .upload(ACCOUNT_A, "throws", THROWS, json!({"type": "object"}))
        .await;
    let slow = app
        .upload(ACCOUNT_A, "slow", SLOW, json!({"type": "object"}))
        .await;
    let (status, ok) = app
        .invoke(ACCOUNT_A, &keyed, json!({"input": {"q": "direct"}}))
        .await;
    assert_eq!(status, 200, "{ok}");
    let (_, broke) = app.invoke(ACCOUNT_A, &throws, json!({"input": {}})).await;
    assert_eq!(broke["error"]["name"], "TypeError", "{broke}");
    let (_, late) = app
        .invoke(ACCOUNT_A, &slow, json!({"input": {}, "timeoutMs": 300}))
        .await;
    assert_eq!(late["error"]["name"], "DeadlineExceeded", "{late}");
    let (status, _) = app
        .invoke(ACCOUNT_A, &keyed, json!({"input": "not an object"}))
        .await;
    assert_eq!(status, 422, "refused input is not an attempt");

    let calls = ended_calls(&app, ACCOUNT_A, "", 3).await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    let of = |result: &Value| by_tool_call_id(&calls, result["callId"].as_str().unwrap()).clone();
    let ok_call = of(&ok);
    assert_eq!(
        (ok_call["path"].as_str(), ok_call["status"].as_str()),
        (Some("invoke"), Some("ok"))
    );
    assert_eq!(ok_call["idempotencyKey"], ok["callId"]);
    let broke_call = of(&broke);
    assert_eq!(broke_call["status"], "tool_error");
    assert!(
        broke_call["error"]
            .as_str()
            .unwrap()
            .contains("the tool broke"),
        "{broke_call}"
    );
    assert!(broke_call.get("output").is_none());
    assert_eq!(of(&late)["status"], "timeout");
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_mcp_call_is_recorded(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    app.upload(ACCOUNT_A, "keyed", KEYED, json!({"type": "object"}))
        .await;
    let called = crate::mcp::mcp(&app, Some(ACCOUNT_A), &["call", "keyed", r#"{"q":"m"}"#]).await;
    assert_eq!(called["result"]["isError"], json!(false), "{called}");
    let calls = ended_calls(&app, ACCOUNT_A, "tool=keyed", 1).await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["path"], "mcp");
    assert_eq!(calls[0]["status"], "ok");
    let output: Value = serde_json::from_str(calls[0]["output"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        output["key"], calls[0]["idempotencyKey"],
        "the tool ran under the recorded key"
    );
}

const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 100)); if (input.fail) throw new Error('job failed'); return { finished: input.job }; } };";

#[sqlx::test(migrations = "../../migrations")]
async fn a_detached_turns_calls_are_recorded_with_their_outcome(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "ledger-detached",
        vec![
            Reply::tool_call("d1", "job", json!({"job": "a"})).and_tool_call(
                "d2",
                "job",
                json!({"job": "b", "fail": true}),
            ),
            Reply::text("Started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Both ended."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "ledger-detached",
            json!({ &tool: {"async": true} }),
        )
        .await;
    let id = start_async(&app, &agent, "conv-ledger-detached", "run").await;
    wait_for_status(&app, &id, "completed").await;

    let query = "conversationId=conv-ledger-detached";
    let calls = ended_calls(&app, ACCOUNT_A, query, 2).await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    let done = by_tool_call_id(&calls, "d1");
    assert_eq!(
        (done["path"].as_str(), done["status"].as_str()),
        (Some("detached"), Some("ok"))
    );
    assert_eq!(done["turnId"], id.as_str());
    assert_eq!(done["agentId"], agent.as_str());
    assert_eq!(done["idempotencyKey"], done["resultId"]);
    let recorded: Value = serde_json::from_str(done["output"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(recorded, json!({"finished": "a"}));
    let failed = by_tool_call_id(&calls, "d2");
    assert_eq!(failed["status"], "tool_error");
    assert!(
        failed["error"].as_str().unwrap().contains("job failed"),
        "{failed}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_replayed_invoke_is_an_attempt_that_ran_nothing(pool: PgPool) {
    let app = TestApp::builder(pool).serve().spawn().await;
    let keyed = app
        .upload(ACCOUNT_A, "keyed", KEYED, json!({"type": "object"}))
        .await;
    let send = || async {
        let response = app
            .post(&format!("/accounts/me/tools/{keyed}/invoke"), ACCOUNT_A)
            .header("Idempotency-Key", "order-42")
            .json(&json!({"input": {"q": "once"}}))
            .send()
            .await
            .unwrap();
        let replayed = response.headers().get("idempotent-replayed").is_some();
        (replayed, response.json::<Value>().await.unwrap())
    };
    let (first_replayed, first) = send().await;
    let (again_replayed, again) = send().await;
    assert_eq!((first_replayed, again_replayed), (false, true));
    assert_eq!(first, again);

    let calls = ended_calls(&app, ACCOUNT_A, "", 2).await;
    let statuses: Vec<&str> = calls
        .iter()
        .map(|c| c["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["replayed", "ok"], "newest first");
    assert!(calls.iter().all(|c| c["toolCallId"] == first["callId"]));
    assert!(calls.iter().all(|c| c["idempotencyKey"] == "order-42"));
    let kept: Value = serde_json::from_str(calls[0]["output"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(kept, first["output"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn refused_calls_are_recorded_without_running(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let schema =
        json!({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}});
    let keyed = app.upload(ACCOUNT_A, "keyed", KEYED, schema).await;
    let guarded = app
        .upload(ACCOUNT_A, "guarded", KEYED, json!({"type": "object"}))
        .await;
    app.model.script(
        "ledger-refused",
        vec![
            Reply::tool_call("r1", "nope", json!({}))
                .and_tool_call("r2", "keyed", json!({"q": 5}))
                .and_tool_call("r3", "guarded", json!({"q": "x"})),
            Reply::text("All refused."),
        ],
    );
    let tools = json!({ &keyed: {}, &guarded: {"needsApproval": true} });
    let agent = app.agent(ACCOUNT_A, "ledger-refused", tools).await;
    let id = start_async(&app, &agent, "conv-refused", "try").await;
    wait_for_status(&app, &id, "completed").await;
    let (_, page) = app
        .request(
            reqwest::Method::GET,
            "/approvals?status=pending&conversationId=conv-refused",
            ACCOUNT_A,
            None,
        )
        .await;
    let approval = page["approvals"][0]["id"].as_str().unwrap().to_owned();
    let (status, decided) = app
        .request(
            reqwest::Method::POST,
            &format!("/approvals/{approval}"),
            ACCOUNT_A,
            Some(json!({"approved": false, "reason": "not today"})),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    wait_for_status(&app, decided["statusId"].as_str().unwrap(), "completed").await;

    let calls = ended_calls(&app, ACCOUNT_A, "conversationId=conv-refused", 3).await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    let seen: Vec<(&str, &str, i64)> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| {
            let call = by_tool_call_id(&calls, id);
            (
                call["toolName"].as_str().unwrap(),
                call["status"].as_str().unwrap(),
                call["seq"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("nope", "input_error", 0),
            ("keyed", "input_error", 1),
            ("guarded", "denied", 2)
        ]
    );
    assert!(calls
        .iter()
        .all(|c| c.get("output").is_none() && c["error"].is_string()));
}
