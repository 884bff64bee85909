//! `toolserver-tools` (clients/cli) against the running server: one `push`
//! of a TypeScript entry that imports an npm package makes a working tool;
//! a second push updates it by name; `list` shows it, `rm` removes it; bad
//! entries and missing settings are refused with readable errors.

use std::process::Output;

use serde_json::json;
use sqlx::PgPool;
use toolserver_testsupport::clients::client_dir;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

async fn cli(app: &TestApp, args: &[&str]) -> Output {
    tokio::process::Command::new("node")
        .arg("bin/toolserver-tools.mjs")
        .args(args)
        .current_dir(client_dir("cli"))
        .env("TOOLSERVER_URL", app.base())
        .env("TOOLSERVER_TOKEN", token(ACCOUNT_A))
        .output()
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const CLASSIFY: [&str; 7] = [
    "push",
    "test/fixtures/classify.ts",
    "--description",
    "Says whether a value is a number",
    "--schema",
    "test/fixtures/classify.schema.json",
    "--config",
];

#[sqlx::test(migrations = "../../migrations")]
async fn one_push_bundles_a_typescript_tool_with_its_npm_import_and_it_runs(pool: PgPool) {
    let app = spawn_live_app(pool).await;

    let mut args = CLASSIFY.to_vec();
    args.push("test/fixtures/classify.config.json");
    let pushed = cli(&app, &args).await;
    assert!(pushed.status.success(), "push failed: {}", stderr(&pushed));
    let tool_id = stdout(&pushed);
    assert!(tool_id.starts_with("tool_"), "prints the toolId: {tool_id}");
    assert!(
        stderr(&pushed).contains("created classify, version 1"),
        "{}",
        stderr(&pushed)
    );

    let (_, answer) = app
        .invoke(ACCOUNT_A, &tool_id, json!({"input": {"value": "42"}}))
        .await;
    assert_eq!(
        answer["output"],
        json!({"label": "checked", "isNumber": true}),
        "{answer}"
    );
    let (_, answer) = app
        .invoke(
            ACCOUNT_A,
            &tool_id,
            json!({"input": {"value": "forty-two"}}),
        )
        .await;
    assert_eq!(answer["output"]["isNumber"], false, "{answer}");

    let again = cli(
        &app,
        &[
            "push",
            "test/fixtures/classify.ts",
            "--config",
            "test/fixtures/empty.config.json",
        ],
    )
    .await;
    assert!(again.status.success(), "update failed: {}", stderr(&again));
    assert_eq!(stdout(&again), tool_id, "the same tool, found by name");
    assert!(
        stderr(&again).contains("updated classify, version 2"),
        "{}",
        stderr(&again)
    );
    let (_, answer) = app
        .invoke(ACCOUNT_A, &tool_id, json!({"input": {"value": 7}}))
        .await;
    assert_eq!(
        answer["output"],
        json!({"label": "value", "isNumber": true}),
        "{answer}"
    );

    let listed = cli(&app, &["list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    let line = stdout(&listed);
    assert!(
        line.starts_with(&format!("{tool_id}\tclassify\tv2\t")),
        "{line}"
    );

    let removed = cli(&app, &["rm", "classify"]).await;
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert_eq!(stdout(&removed), tool_id);
    let listed = cli(&app, &["list"]).await;
    assert_eq!(stdout(&listed), "", "nothing left");
}

#[sqlx::test(migrations = "../../migrations")]
async fn bad_entries_and_missing_settings_are_refused_readably(pool: PgPool) {
    let app = spawn_live_app(pool).await;

    let no_default = cli(
        &app,
        &[
            "push",
            "test/fixtures/no-default.js",
            "--description",
            "d",
            "--schema",
            "test/fixtures/classify.schema.json",
        ],
    )
    .await;
    assert_eq!(no_default.status.code(), Some(2));
    assert!(
        stderr(&no_default).contains("has no default export"),
        "{}",
        stderr(&no_default)
    );

    let too_big = cli(
        &app,
        &[
            "push",
            "test/fixtures/classify.ts",
            "--max-bytes",
            "100",
            "--description",
            "d",
            "--schema",
            "test/fixtures/classify.schema.json",
        ],
    )
    .await;
    assert_eq!(too_big.status.code(), Some(2));
    assert!(
        stderr(&too_big).contains("the bundle limit is 100"),
        "{}",
        stderr(&too_big)
    );

    let new_without_schema = cli(&app, &["push", "test/fixtures/classify.ts"]).await;
    assert_eq!(new_without_schema.status.code(), Some(2));
    assert!(
        stderr(&new_without_schema).contains("give --description and --schema"),
        "{}",
        stderr(&new_without_schema)
    );

    let bad_schema = cli(
        &app,
        &[
            "push",
            "test/fixtures/classify.ts",
            "--description",
            "d",
            "--schema",
            "test/fixtures/bad.schema.json",
        ],
    )
    .await;
    assert_eq!(bad_schema.status.code(), Some(2));
    assert!(
        stderr(&bad_schema).contains("answered 422"),
        "the server's error is shown: {}",
        stderr(&bad_schema)
    );

    let no_token = tokio::process::Command::new("node")
        .args(["bin/toolserver-tools.mjs", "list"])
        .current_dir(client_dir("cli"))
        .env_remove("TOOLSERVER_TOKEN")
        .env("TOOLSERVER_URL", app.base())
        .output()
        .await
        .unwrap();
    assert_eq!(no_token.status.code(), Some(2));
    assert!(
        stderr(&no_token).contains("no token"),
        "{}",
        stderr(&no_token)
    );

    let listed = cli(&app, &["list"]).await;
    assert_eq!(stdout(&listed), "", "nothing was stored");
}
