//! A turn's calls by their tools' effects: a read whose runner dies is
//! tried again (an attempt of its own on the ledger, under the same key)
//! and succeeds; a side-effect call whose runner dies mid-call is not run
//! again and the model is told it may have run; two side-effect calls of
//! one pass run one after the other, in the model's order, while reads run
//! beside them; and a tool whose runner keeps dying has its breaker opened,
//! then closed by a probe once it recovers.

use std::time::Duration;

use serde_json::{json, Value};
use sqlx::PgPool;
use toolserver_harness::tools::BreakerSettings;
use toolserver_harness::turn::MAY_HAVE_RUN;
use toolserver_testsupport::Reply;

use crate::app::TestApp;
use crate::support::*;

/// Counts its runs in `runs`; its runner dies on the runs listed in
/// `crash` (a file of run numbers), and it dies on every run while a file
/// `broken` exists; otherwise it records `<name>-start <ms>` and
/// `<name>-end <ms>` (the clock's milliseconds) in `log` around `input.ms`
/// of waiting, and returns its run's number.
const FLAKY: &str = r#"
import { existsSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
export default { async execute(ctx, input) {
    const dir = process.cwd();
    const runs = (existsSync(dir + '/runs') ? Number(readFileSync(dir + '/runs', 'utf8')) : 0) + 1;
    writeFileSync(dir + '/runs', String(runs));
    const crash = existsSync(dir + '/crash') ? readFileSync(dir + '/crash', 'utf8').split(',') : [];
    if (existsSync(dir + '/broken') || crash.includes(String(runs))) process.kill(process.pid, 'SIGKILL');
    appendFileSync(dir + '/log', (input.name || 'x') + '-start ' + Date.now() + '\n');
    await new Promise(r => setTimeout(r, input.ms || 0));
    appendFileSync(dir + '/log', (input.name || 'x') + '-end ' + Date.now() + '\n');
    return { runs, key: ctx.idempotencyKey };
} };
"#;

fn any_input() -> Value {
    json!({"type": "object"})
}

/// Uploads FLAKY as `name` declaring `effects`, with fast retries.
async fn flaky(app: &TestApp, name: &str, effects: &str) -> String {
    let fields = match effects {
        "side_effect" => json!({"effects": effects}),
        _ => {
            json!({"effects": effects, "retry": {"maxAttempts": 3, "initialBackoffMs": 10, "maxBackoffMs": 20}})
        }
    };
    app.upload_declaring(ACCOUNT_A, (name, FLAKY), any_input(), fields)
        .await
}

fn runs(app: &TestApp, tool: &str) -> u64 {
    std::fs::read_to_string(app.work_dir(ACCOUNT_A, tool).join("runs"))
        .map_or(0, |text| text.trim().parse().unwrap())
}

/// Makes the runner of `tool` die on its runs `numbers`.
fn crash_on(app: &TestApp, tool: &str, numbers: &str) {
    let dir = app.work_dir(ACCOUNT_A, tool);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("crash"), numbers).unwrap();
}

/// The attempts on the ledger of the calls of `conversation`, oldest
/// first, once at least `count` have been written and none is running. The
/// ledger writes a moment after each call, so it is read once more after
/// that moment: an attempt that should not exist has been written by then.
async fn attempts(app: &TestApp, conversation: &str, count: usize) -> Vec<Value> {
    let path = format!("/tool-calls?conversationId={conversation}");
    let read = || async {
        let (_, page) = app
            .request(reqwest::Method::GET, &path, ACCOUNT_A, None)
            .await;
        let mut calls = page["toolCalls"].as_array().unwrap().clone();
        calls.reverse();
        calls
    };
    for _ in 0..200 {
        let calls = read().await;
        if calls.len() >= count && calls.iter().all(|c| c["status"] != "running") {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return read().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{count} attempts of {conversation} never all ended");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_read_whose_runner_dies_is_tried_again_and_succeeds(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let tool = flaky(&app, "reader", "read").await;
    crash_on(&app, &tool, "1");
    app.model.script(
        "retry-read",
        vec![
            Reply::tool_call("c1", "reader", json!({})),
            Reply::text("Read it."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "retry-read", json!({ &tool: {} }))
        .await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-retry-read", "read").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let output = &turn.of_type("tool-output-available")[0]["output"];
    assert_eq!(output["runs"], 2, "{}", turn.body);
    assert_eq!(runs(&app, &tool), 2);

    let attempts = attempts(&app, "conv-retry-read", 2).await;
    let seen: Vec<(i64, &str)> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_i64().unwrap(),
                a["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [(1, "runner_lost"), (2, "ok")]);
    assert_eq!(attempts[0]["idempotencyKey"], attempts[1]["idempotencyKey"]);
    assert_eq!(output["key"], attempts[1]["idempotencyKey"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_side_effect_whose_runner_dies_is_not_run_again_and_may_have_run(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let tool = flaky(&app, "charge", "side_effect").await;
    crash_on(&app, &tool, "1");
    app.model.script(
        "retry-side",
        vec![
            Reply::tool_call("c1", "charge", json!({})),
            Reply::text("Told."),
        ],
    );
    let agent = app
        .agent(ACCOUNT_A, "retry-side", json!({ &tool: {} }))
        .await;
    let turn = app
        .say(ACCOUNT_A, &agent, "conv-retry-side", "charge")
        .await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let error = turn.of_type("tool-output-error")[0]["errorText"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains(MAY_HAVE_RUN), "{error}");
    assert_eq!(runs(&app, &tool), 1, "never run again");
    let told = app.model.requests("retry-side")[1]["messages"].to_string();
    assert!(told.contains("it may have run"), "{told}");
    let attempts = attempts(&app, "conv-retry-side", 1).await;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0]["status"], "runner_lost");
}

#[sqlx::test(migrations = "../../migrations")]
async fn side_effects_of_one_pass_run_in_order_while_reads_run_beside_them(pool: PgPool) {
    let app = TestApp::live(pool).spawn().await;
    let writes = flaky(&app, "writes", "side_effect").await;
    let reads = flaky(&app, "reads", "read").await;
    app.model.script(
        "ordered",
        vec![
            Reply::tool_call("w1", "writes", json!({"name": "first", "ms": 1500}))
                .and_tool_call("r1", "reads", json!({"name": "read", "ms": 0}))
                .and_tool_call("w2", "writes", json!({"name": "second", "ms": 0})),
            Reply::text("Done."),
        ],
    );
    let tools = json!({ &writes: {}, &reads: {} });
    let agent = app.agent(ACCOUNT_A, "ordered", tools).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-ordered", "go").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let events = |tool: &str| -> Vec<(String, u64)> {
        std::fs::read_to_string(app.work_dir(ACCOUNT_A, tool).join("log"))
            .unwrap()
            .lines()
            .map(|line| {
                let (event, at) = line.split_once(' ').unwrap();
                (event.to_owned(), at.parse().unwrap())
            })
            .collect()
    };
    let written = events(&writes);
    let order: Vec<&str> = written.iter().map(|(event, _)| event.as_str()).collect();
    assert_eq!(
        order,
        ["first-start", "first-end", "second-start", "second-end"],
        "the second write starts after the first ends"
    );
    let read = events(&reads);
    assert!(
        read[0].1 < written[1].1,
        "the read started before the first write ended (beside it): {read:?} {written:?}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_tools_breaker_opens_after_repeated_runner_deaths_and_a_probe_closes_it(pool: PgPool) {
    let breakers = BreakerSettings {
        failures: 3,
        open_for: Duration::from_millis(500),
    };
    let app = TestApp::live(pool).breakers(breakers).spawn().await;
    let tool = flaky(&app, "fragile", "side_effect").await;
    let dir = app.work_dir(ACCOUNT_A, &tool);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("broken"), "").unwrap();
    let mut script = Vec::new();
    for n in 0..=breakers.failures {
        script.push(Reply::tool_call(&format!("b{n}"), "fragile", json!({})));
    }
    script.push(Reply::text("Gave up."));
    app.model.script("breaker", script);
    let agent = app.agent(ACCOUNT_A, "breaker", json!({ &tool: {} })).await;
    let turn = app.say(ACCOUNT_A, &agent, "conv-breaker", "go").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let errors: Vec<String> = turn
        .of_type("tool-output-error")
        .iter()
        .map(|c| c["errorText"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(errors.len(), breakers.failures as usize + 1, "{errors:?}");
    assert!(
        errors.last().unwrap().contains("refused without running"),
        "{errors:?}"
    );
    assert_eq!(
        runs(&app, &tool),
        u64::from(breakers.failures),
        "the refused call never ran"
    );
    let attempts = attempts(&app, "conv-breaker", breakers.failures as usize + 1).await;
    assert_eq!(attempts.last().unwrap()["status"], "throttled");

    // The tool recovers; once the breaker's time is over a probe passes and closes it.
    std::fs::remove_file(dir.join("broken")).unwrap();
    tokio::time::sleep(breakers.open_for).await;
    app.model.script(
        "breaker",
        vec![
            Reply::tool_call("p1", "fragile", json!({})),
            Reply::tool_call("p2", "fragile", json!({})),
            Reply::text("Recovered."),
        ],
    );
    let turn = app.say(ACCOUNT_A, &agent, "conv-breaker-2", "again").await;
    assert_eq!(turn.status, 200, "{}", turn.body);
    let outputs = turn.of_type("tool-output-available");
    assert_eq!(outputs.len(), 2, "{}", turn.body);
    assert_eq!(runs(&app, &tool), u64::from(breakers.failures) + 2);
}
