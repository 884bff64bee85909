//! What a call's worker is kept from: the server's secrets, other runners'
//! files (each runner is a user of its own), and new namespaces under the
//! seccomp filter.

use std::collections::HashSet;

use serde_json::json;
use toolserver_sandbox::{Executor, Frame, IsolationMode, RUNNER_UID_BASE};

use crate::support::*;

fn frame_text(frame: &Frame) -> String {
    serde_json::to_string(frame).unwrap()
}

#[tokio::test]
async fn the_worker_sees_no_server_secrets() {
    let h = Harness::new();
    let key = key("acct");
    let tool =
        "export default { execute() { return { env: process.env, uid: process.getuid() }; } };";
    let frame = run(&h.executor, &key, request(inline(tool), json!({}))).await;
    let value = final_value(&frame);
    let names: HashSet<&str> = value["env"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let allowed: HashSet<&str> = [
        "PATH",
        "HOME",
        "TMPDIR",
        "NODE_ENV",
        "TOOLSERVER_CACHE_ROOTS",
        "PWD",
        "TOOLSERVER_EGRESS_SOCKET",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ]
    .into();
    assert!(
        names.is_subset(&allowed),
        "unexpected variables: {:?}",
        names.difference(&allowed).collect::<Vec<_>>()
    );
    for (name, value) in std::env::vars() {
        if value.len() >= 8 {
            assert!(
                !frame_text(&frame).contains(&value),
                "the value of {name} leaked into the worker"
            );
        }
    }
    assert_ne!(value["uid"], json!(0), "workers never run as root");
}

/// Reports the worker's uid and gid, and tries to read `input.peek`.
const WHOAMI: &str = r#"
import { readFileSync, writeFileSync } from 'node:fs';
export default {
  execute(ctx, input) {
    writeFileSync('mine.txt', 'private');
    let peeked;
    try { peeked = readFileSync(input.peek, 'utf8'); } catch (err) { peeked = err.code; }
    return { uid: process.getuid(), gid: process.getgid(), cwd: process.cwd(), peeked };
  },
};
"#;

#[tokio::test]
async fn each_runner_runs_as_a_user_of_its_own_that_keeps_others_out() {
    for isolation in [IsolationMode::PreferBwrap, IsolationMode::None] {
        let h = Harness::with(|settings| settings.isolation = isolation);
        if !h.executor.runs_as_own_users() {
            eprintln!("skipped: the server is not root, so runners cannot get users of their own");
            return;
        }
        let (a, b) = (key("acct_a"), key("acct_b"));
        let first = final_value(
            &run(
                &h.executor,
                &a,
                request(inline(WHOAMI), json!({"peek": "/nonexistent"})),
            )
            .await,
        );
        let a_file = format!("{}/mine.txt", first["cwd"].as_str().unwrap());
        let other = final_value(
            &run(
                &h.executor,
                &b,
                request(inline(WHOAMI), json!({"peek": a_file})),
            )
            .await,
        );
        let (uid_a, uid_b) = (
            first["uid"].as_u64().unwrap(),
            other["uid"].as_u64().unwrap(),
        );
        assert!(uid_a >= u64::from(RUNNER_UID_BASE), "{first}");
        assert!(uid_b >= u64::from(RUNNER_UID_BASE), "{other}");
        assert_ne!(uid_a, uid_b, "two tenants never share a uid");
        assert_eq!(first["gid"], first["uid"]);
        // Without bubblewrap the path exists but its owner alone may enter
        // it; under bubblewrap the other runner's directory is not even there.
        let refused = other["peeked"].as_str().unwrap();
        assert!(
            ["EACCES", "ENOENT"].contains(&refused),
            "{isolation:?}: {other}"
        );

        h.executor.stop(&a).await.unwrap();
        let again = final_value(
            &run(
                &h.executor,
                &a,
                request(inline(WHOAMI), json!({"peek": "/nonexistent"})),
            )
            .await,
        );
        assert_eq!(
            again["uid"], first["uid"],
            "a runner keeps its user across restarts"
        );
    }
}

/// Tries to make new namespaces, and uses a thread and a child process.
const SYSCALLS: &str = r#"
import { execFileSync } from 'node:child_process';
import { Worker } from 'node:worker_threads';
const run = (file, args) => {
  try {
    return execFileSync(file, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString().trim();
  } catch (err) {
    return `failed: ${err.stderr}`;
  }
};
export default {
  async execute() {
    const thread = await new Promise((resolve, reject) => {
      const worker = new Worker('require("node:worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    return {
      userns: run('unshare', ['--user', 'true']),
      netns: run('unshare', ['--user', '--net', 'true']),
      shell: run('sh', ['-c', 'echo ok']),
      thread,
    };
  },
};
"#;

#[tokio::test]
async fn the_seccomp_filter_refuses_new_namespaces_and_keeps_threads_and_processes() {
    let h = Harness::new();
    assert!(
        h.executor.uses_bwrap(),
        "this test needs bubblewrap with network namespaces (make test-deps installs it)"
    );
    let value = final_value(
        &run(
            &h.executor,
            &key("acct"),
            request(inline(SYSCALLS), json!({})),
        )
        .await,
    );
    for attempt in ["userns", "netns"] {
        let said = value[attempt].as_str().unwrap();
        assert!(
            said.starts_with("failed") && said.contains("Operation not permitted"),
            "{attempt}: {value}"
        );
    }
    assert_eq!(value["shell"], "ok", "{value}");
    assert_eq!(value["thread"], 42, "{value}");
}
