//! Detached turns end to end: `/async` with two async uploaded tools in one
//! pass; the runners post both results themselves; exactly one continuation
//! runs and the model sees both results; `GET /async/{id}` shows the answer.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::chunk_stores::{on_each_chunk_store, Chunks};
use crate::support::*;

const JOB: &str = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 150)); return { finished: input.job }; } };";

/// The next message on a subscription, as JSON (at most 30 s away).
pub async fn next_reply(replies: &mut async_nats::Subscriber) -> Value {
    use futures::StreamExt;
    let message = tokio::time::timeout(Duration::from_secs(30), replies.next())
        .await
        .expect("a reply within 30 s")
        .expect("the subscription is open");
    serde_json::from_slice(&message.payload).unwrap()
}

/// Starts a detached turn and returns its status id.
pub async fn start_async(app: &TestApp, agent: &str, conversation: &str, text: &str) -> String {
    let (status, accepted) = app
        .request(
            reqwest::Method::POST,
            &format!("/agents/{agent}/async"),
            ACCOUNT_A,
            Some(user_turn(conversation, text)),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    accepted["statusId"].as_str().unwrap().to_owned()
}

pub async fn wait_for_status(app: &TestApp, id: &str, wanted: &str) -> Value {
    wait_for_status_within(app, id, wanted, Duration::from_secs(10)).await
}

/// Polls `GET /async/{id}` every 50 ms until the turn is `wanted`, for at most `limit`.
pub async fn wait_for_status_within(
    app: &TestApp,
    id: &str,
    wanted: &str,
    limit: Duration,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..limit.as_millis() / 50 {
        let (status, body) = app
            .request(
                reqwest::Method::GET,
                &format!("/async/{id}"),
                ACCOUNT_A,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == wanted {
            return body;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the detached turn never became {wanted}: {last}");
}

async fn a_detached_turn_continues_once_with_both_results(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool.clone()).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "detached",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "a"})).and_tool_call(
                "c2",
                "job",
                json!({"job": "b"}),
            ),
            Reply::text("Both jobs started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Both jobs finished."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "detached", json!({ &tool: {"async": true} }))
        .await;
    let id = start_async(&app, &agent, "conv-detached", "run both").await;

    let done = wait_for_status(&app, &id, "completed").await;
    let messages = done["messages"].as_array().unwrap();
    let parts = messages.last().unwrap()["parts"].as_array().unwrap();
    let text: String = parts
        .iter()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap())
        .collect();
    assert!(text.ends_with("Both jobs finished."), "{text}");
    let pending: Vec<&Value> = parts.iter().filter(|p| p["type"] == "tool-job").collect();
    assert_eq!(pending.len(), 2);
    assert!(pending.iter().all(|p| p["output"]["status"] == "pending"));
    let arrived: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"] == "tool-async_status")
        .collect();
    assert_eq!(arrived.len(), 2, "{parts:?}");
    let mut results: Vec<Value> = arrived
        .iter()
        .map(|p| p["output"]["result"].clone())
        .collect();
    results.sort_by_key(|r| r.to_string());
    assert_eq!(
        results,
        [json!({"finished": "a"}), json!({"finished": "b"})]
    );

    let requests = app.model.requests("detached");
    assert_eq!(
        requests.len(),
        3,
        "launch pass, its answer, one continuation"
    );
    let last = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let told: Vec<&str> = last
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        told.iter().any(|c| c.contains("\"finished\":\"a\""))
            && told.iter().any(|c| c.contains("\"finished\":\"b\"")),
        "{told:?}"
    );
    let (outbox, continued): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM continuation_outbox), \
                (SELECT count(*) FROM dispatch_groups WHERE continued_at IS NOT NULL)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (outbox, continued),
        (0, 1),
        "one continuation ran; finished jobs leave no rows"
    );
    let (status, _) = app
        .request(
            reqwest::Method::GET,
            &format!("/async/{id}"),
            ACCOUNT_B,
            None,
        )
        .await;
    assert_eq!(status, 404);
}

async fn a_detached_turn_asks_for_approval_and_resumes_once_decided(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "detached-approval",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "x"})),
            Reply::text("Ran it."),
        ],
    );
    let agent = app
        .agent(
            ACCOUNT_A,
            "detached-approval",
            json!({ &tool: {"needsApproval": true} }),
        )
        .await;
    let id = start_async(&app, &agent, "conv-ask", "run").await;
    let done = wait_for_status(&app, &id, "completed").await;
    let parts = done["messages"].as_array().unwrap().last().unwrap()["parts"].clone();
    let job = parts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-job")
        .unwrap()
        .clone();
    assert_eq!(job["state"], "approval-requested", "{job}");
    let approval = job["approval"]["id"].as_str().unwrap();
    let (status, decided) = app
        .request(
            reqwest::Method::POST,
            &format!("/approvals/{approval}"),
            ACCOUNT_A,
            Some(json!({"approved": true})),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let resumed = decided["statusId"].as_str().unwrap();
    let done = wait_for_status(&app, resumed, "completed").await;
    let last = done["messages"].as_array().unwrap().last().unwrap().clone();
    let job = last["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tool-job")
        .unwrap()
        .clone();
    assert_eq!(job["state"], "output-available", "{last}");
    assert_eq!(app.model.requests("detached-approval").len(), 2);
}

const LONG: &str = "export default { async execute(ctx) { ctx.log('started the long job'); await new Promise((resolve, reject) => { ctx.signal.addEventListener('abort', () => reject(new Error('aborted'))); setTimeout(resolve, 60000); }); return 'late'; } };";

async fn async_status_reads_logs_and_stops_a_detached_call(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool.clone()).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "long", LONG, json!({"type": "object"}))
        .await;
    app.model.script(
        "stop-origin",
        vec![
            Reply::tool_call("c1", "long", json!({})),
            Reply::text("Waiting for the long job."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("The long job was stopped."),
        ],
    );
    let origin = app
        .agent(ACCOUNT_A, "stop-origin", json!({ &tool: {"async": true} }))
        .await;
    let id = start_async(&app, &origin, "conv-origin", "start the long job").await;
    wait_for_status(&app, &id, "waiting").await;
    let (result_id,): (uuid::Uuid,) = sqlx::query_as("SELECT id FROM async_tool_results")
        .fetch_one(&pool)
        .await
        .unwrap();
    let result_id = result_id.to_string();
    for _ in 0..100 {
        if app.inflight(ACCOUNT_A, &tool).await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        app.inflight(ACCOUNT_A, &tool).await,
        1,
        "the detached call runs"
    );

    // Another turn of the account asks about it, by status id.
    app.model.script(
        "stop-asker",
        vec![
            Reply::tool_call(
                "s1",
                "async_status",
                json!({"statusId": result_id, "action": "logs"}),
            )
            .and_tool_call(
                "s2",
                "async_status",
                json!({"statusId": result_id, "action": "stop"}),
            ),
            Reply::text("Stopped it."),
        ],
    );
    let asker = app
        .agent(ACCOUNT_A, "stop-asker", json!({ &tool: {"async": true} }))
        .await;
    let turn = app
        .say(ACCOUNT_A, &asker, "conv-asker", "stop the long job")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(
        outputs[0]["output"]["logs"][0]["message"], "started the long job",
        "{outputs:?}"
    );
    assert_eq!(outputs[1]["output"]["status"], "cancelled", "{outputs:?}");

    let mut stopped = false;
    for _ in 0..100 {
        if app.inflight(ACCOUNT_A, &tool).await == 0 {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(stopped, "the runner call was not cancelled");
    // The group still continues once, and the model hears the call was stopped.
    let done = wait_for_status(&app, &id, "completed").await;
    let text = done["messages"].to_string();
    assert!(text.contains("The long job was stopped."), "{done}");
    assert!(text.contains("\"status\":\"cancelled\""), "{done}");
}

async fn a_turn_requested_over_nats_answers_on_its_reply_subject(pool: PgPool, chunks: Chunks) {
    let nats = async_nats::connect("127.0.0.1:4222")
        .await
        .expect("NATS on 127.0.0.1:4222 (make test-deps)");
    let subject = format!("toolserver-test.{}.turns", uuid::Uuid::new_v4().simple());
    let app = TestApp::live(pool)
        .nats(nats.clone(), &subject)
        .chunks(chunks)
        .spawn()
        .await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    app.model.script(
        "over-nats",
        vec![
            Reply::tool_call("c1", "job", json!({"job": "n"})),
            Reply::text("Started over NATS."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("Finished over NATS."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "over-nats", json!({ &tool: {"async": true} }))
        .await;
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(inbox.clone()).await.unwrap();
    let request = json!({"token": token(ACCOUNT_A), "agentId": agent, "request": user_turn("conv-nats", "run over nats")});
    nats.publish_with_reply(
        subject.clone(),
        inbox.clone(),
        serde_json::to_vec(&request).unwrap().into(),
    )
    .await
    .unwrap();
    let ack = next_reply(&mut replies).await;
    assert_eq!(ack["status"], "running", "{ack}");
    let status_id = ack["statusId"].as_str().unwrap().to_owned();
    let last = next_reply(&mut replies).await;
    assert_eq!(
        (last["statusId"].as_str(), last["status"].as_str()),
        (Some(status_id.as_str()), Some("completed")),
        "{last}"
    );
    assert!(
        last["messages"].to_string().contains("Finished over NATS."),
        "{last}"
    );

    // A bad token is refused on the reply subject, and nothing runs.
    let forged =
        json!({"token": "not-a-jwt", "agentId": agent, "request": user_turn("conv-nats-2", "hi")});
    nats.publish_with_reply(subject, inbox, serde_json::to_vec(&forged).unwrap().into())
        .await
        .unwrap();
    let refused = next_reply(&mut replies).await;
    assert_eq!(refused["error"]["code"], "unauthorized", "{refused}");
}

async fn two_hundred_detached_siblings_continue_the_model_once(pool: PgPool, chunks: Chunks) {
    let app = TestApp::live(pool.clone()).chunks(chunks).spawn().await;
    let tool = app
        .upload(ACCOUNT_A, "job", JOB, json!({"type": "object"}))
        .await;
    let mut calls = Reply::tool_call("c0", "job", json!({"job": 0}));
    for i in 1..200 {
        calls = calls.and_tool_call(&format!("c{i}"), "job", json!({"job": i}));
    }
    app.model.script(
        "two-hundred",
        vec![
            calls,
            Reply::text("All started."),
            Reply::error(500, "step 2 is the injected async_status call"),
            Reply::text("All two hundred finished."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "two-hundred", json!({ &tool: {"async": true} }))
        .await;
    let id = start_async(&app, &agent, "conv-200", "run them all").await;
    let done = wait_for_status(&app, &id, "completed").await;
    assert!(done["messages"]
        .to_string()
        .contains("All two hundred finished."));
    assert_eq!(
        app.model.request_count("two-hundred"),
        3,
        "exactly one continuation pass"
    );
    let (rows, completed, outbox): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM async_tool_results), \
                (SELECT count(*) FROM async_tool_results WHERE status = 'completed'), \
                (SELECT count(*) FROM continuation_outbox)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((rows, completed, outbox), (200, 200, 0));
    let told = app.model.requests("two-hundred")[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["role"] == "tool"
                && m["content"]
                    .as_str()
                    .unwrap()
                    .contains("\"status\":\"completed\"")
        })
        .count();
    assert_eq!(told, 200, "the model saw every sibling's result");
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_detached_routes_answer_only_on_their_own_paths(pool: PgPool) {
    let app = TestApp::live(pool).quiet().spawn().await;
    let agent = app.agent(ACCOUNT_A, "routes", json!({})).await;
    let (status, body) = app
        .request(
            reqwest::Method::POST,
            "/async/0",
            ACCOUNT_A,
            Some(user_turn("conv-routes", "hi")),
        )
        .await;
    assert_eq!(status, 405, "POST /async/{{id}} starts nothing: {body}");
    let (status, body) = app
        .request(
            reqwest::Method::GET,
            &format!("/agents/{agent}/async"),
            ACCOUNT_A,
            None,
        )
        .await;
    assert_eq!(
        status, 405,
        "GET /agents/{{id}}/async reads nothing: {body}"
    );
}

on_each_chunk_store!(
    a_detached_turn_continues_once_with_both_results,
    a_detached_turn_asks_for_approval_and_resumes_once_decided,
    async_status_reads_logs_and_stops_a_detached_call,
    a_turn_requested_over_nats_answers_on_its_reply_subject,
    two_hundred_detached_siblings_continue_the_model_once,
);
