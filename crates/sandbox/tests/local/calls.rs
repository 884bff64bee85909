//! What a call does: results, streaming, errors, caching, limits, environment.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolserver_domain::Sha256Digest;
use toolserver_sandbox::{BundleRef, Executor, Frame, IsolationMode, RUNNER_UID_BASE};

use toolserver_testsupport::net::text_origin;

use crate::support::*;

#[tokio::test]
async fn plain_return_is_one_final_frame_with_merged_config() {
    let h = Harness::new();
    let key = key("acct");
    let mut req = request(inline(ECHO), json!({"q": "hello"}));
    req.config.insert("greeting".into(), json!("hi"));
    let frame = run(&h.executor, &key, req).await;
    assert_eq!(
        final_value(&frame),
        json!({"echo": {"q": "hello"}, "config": {"greeting": "hi"}})
    );
}

#[tokio::test]
async fn generator_chunks_stream_before_the_generator_finishes() {
    let h = Harness::new();
    let key = key("acct");
    let tool = r#"
import { existsSync } from 'node:fs';
export default {
  async *execute(ctx, input) {
    yield { step: 1 };
    while (!existsSync(process.cwd() + '/release')) await new Promise(r => setTimeout(r, 10));
    yield { step: 2 };
  },
};"#;
    let mut frames = h
        .executor
        .invoke(&key, request(inline(tool), json!({})))
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), frames.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first,
        Frame::Chunk {
            value: json!({"step": 1})
        },
        "first chunk arrives while the tool waits"
    );
    let release = h
        .executor
        .socket_path(&key)
        .parent()
        .unwrap()
        .join("work/release");
    std::fs::write(&release, b"go").unwrap();
    let rest = collect(frames).await;
    assert_eq!(
        rest,
        vec![
            Frame::Chunk {
                value: json!({"step": 2})
            },
            Frame::End
        ]
    );
}

#[tokio::test]
async fn a_throwing_tool_is_an_error_frame_and_logs_are_captured() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "export default { execute(ctx) { console.log('about to fail'); ctx.log('via ctx'); throw new TypeError('bad input shape'); } };";
    let frames = collect(
        h.executor
            .invoke(&key, request(inline(tool), json!({})))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        frames.last().unwrap(),
        &Frame::Error {
            name: "TypeError".into(),
            message: "bad input shape".into()
        }
    );
    let logs: Vec<_> = frames
        .iter()
        .filter_map(|f| match f {
            Frame::Log { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(logs, vec!["about to fail", "via ctx"]);
}

#[tokio::test]
async fn tampered_bundle_is_refused() {
    let h = Harness::new();
    let key = key("acct");
    let mut bundle = inline(ECHO);
    bundle.sha256 = Sha256Digest::of(b"something else").to_hex();
    let frame = run(&h.executor, &key, request(bundle, json!({}))).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "BundleIntegrityError"),
        "{frame:?}"
    );
}

/// Serves `body` on loopback and counts requests.
async fn serve_bundle(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    (format!("http://{addr}/bundle"), hits)
}

#[tokio::test]
async fn downloaded_bundle_is_cached_on_disk_across_restarts() {
    let h = Harness::new();
    let key = key("acct");
    let mut source = ECHO.to_owned();
    source.push_str(&format!("\n//{}", "x".repeat(200 * 1024)));
    let (url, hits) = serve_bundle(source.clone().into_bytes()).await;
    let bundle = BundleRef {
        sha256: Sha256Digest::of(source.as_bytes()).to_hex(),
        inline: None,
        url: Some(url),
    };
    for i in 0..3 {
        let frame = run(&h.executor, &key, request(bundle.clone(), json!({"i": i}))).await;
        assert_eq!(echo_of(&frame), json!({"i": i}));
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "downloaded once, then served from cache"
    );
    h.executor.stop(&key).await.unwrap();
    let frame = run(
        &h.executor,
        &key,
        request(bundle, json!({"i": "after restart"})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"i": "after restart"}));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the on-disk cache survives a restart"
    );
}

#[tokio::test]
async fn an_updated_bundle_runs_the_new_code() {
    let h = Harness::new();
    let key = key("acct");
    let v1 = "export default { execute() { return 'v1'; } };";
    let v2 = "export default { execute() { return 'v2'; } };";
    assert_eq!(
        final_value(&run(&h.executor, &key, request(inline(v1), json!({}))).await),
        json!("v1")
    );
    assert_eq!(
        final_value(&run(&h.executor, &key, request(inline(v2), json!({}))).await),
        json!("v2")
    );
    assert_eq!(
        final_value(&run(&h.executor, &key, request(inline(v1), json!({}))).await),
        json!("v1")
    );
}

#[tokio::test]
async fn oversized_output_is_refused_and_the_runner_keeps_serving() {
    let h = Harness::new();
    let key = key("acct");
    let big = "export default { execute() { return 'x'.repeat(4096); } };";
    let mut req = request(inline(big), json!({}));
    req.max_output_bytes = 1024;
    let frame = run(&h.executor, &key, req).await;
    assert!(
        matches!(&frame, Frame::Error { name, .. } if name == "OutputTooLarge"),
        "{frame:?}"
    );
    let pid = h.executor.worker_pid(&key).await;
    let frame = run(
        &h.executor,
        &key,
        request(inline(ECHO), json!({"ok": true})),
    )
    .await;
    assert_eq!(echo_of(&frame), json!({"ok": true}));
    assert_eq!(h.executor.worker_pid(&key).await, pid, "same worker");
}

#[tokio::test]
async fn twenty_concurrent_calls_on_one_runner() {
    let h = Harness::new();
    let key = key("acct");
    let tool = "export default { async execute(ctx, input) { await new Promise(r => setTimeout(r, 20)); return input.n * 2; } };";
    let calls = (0..20).map(|n| {
        let executor = h.executor.clone();
        let key = key.clone();
        tokio::spawn(
            async move { run(&executor, &key, request(inline(tool), json!({"n": n}))).await },
        )
    });
    let results = futures_results(calls).await;
    for (n, frame) in results.iter().enumerate() {
        assert_eq!(final_value(frame), json!(n * 2));
    }
}

async fn futures_results(
    handles: impl Iterator<Item = tokio::task::JoinHandle<Frame>>,
) -> Vec<Frame> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.unwrap());
    }
    out
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

fn frame_text(frame: &Frame) -> String {
    serde_json::to_string(frame).unwrap()
}

/// Tries each way out of the sandbox and reports what happened.
const PROBE: &str = r#"
import { readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
const attempt = async (f) => {
  try { return 'ok: ' + String(await f()).slice(0, 200); }
  catch (e) { return 'refused: ' + (e.cause?.message ?? e.code ?? e.message); }
};
const socket = (options) => new Promise((resolve, reject) => {
  const s = net.connect(options);
  s.on('connect', () => { s.destroy(); resolve('connected'); });
  s.on('error', reject);
});
const get = (url) => fetch(url).then(async (r) => `${r.status} ${await r.text()}`);
const httpGet = (url, agent) => new Promise((resolve, reject) => {
  http.get(url, { agent }, (res) => {
    let body = '';
    res.setEncoding('utf8').on('data', (part) => { body += part; }).on('end', () => resolve(`${res.statusCode} ${body}`));
  }).on('error', (err) => reject(Object.assign(new Error(err.message), { cause: { message: err.message } })));
});
export default { async execute(ctx, input) {
  const out = {};
  out.etc = await attempt(() => readFileSync('/etc/passwd', 'utf8'));
  out.pgSocket = await attempt(() => socket({ path: '/var/run/postgresql/.s.PGSQL.5432' }));
  out.serverData = await attempt(() => readFileSync(input.serverData, 'utf8'));
  out.otherRunner = await attempt(() => readdirSync(input.otherRunner).join(','));
  for (const [name, url] of Object.entries(input.fetch)) out[name] = await attempt(() => get(url));
  for (const [name, url] of Object.entries(input.http ?? {})) out[name] = await attempt(() => httpGet(url));
  for (const [name, url] of Object.entries(input.httpOwnAgent ?? {})) out[name] = await attempt(() => httpGet(url, new http.Agent({ keepAlive: true })));
  for (const [name, [host, port]] of Object.entries(input.tcp)) out[name] = await attempt(() => socket({ host, port }));
  return out;
}};
"#;

#[tokio::test]
async fn uploaded_code_reaches_only_public_hosts_through_the_proxy_and_sees_none_of_the_host() {
    let public_port = text_origin("hello from the public internet").await;
    let server_port = text_origin("the server's own port").await;
    let data = tempfile::tempdir().unwrap();
    let secret = data.path().join("dev-jwt.key");
    std::fs::write(&secret, "server-secret-material").unwrap();
    let server_url = format!("http://127.0.0.1:{server_port}/");
    let base = url::Url::parse(&server_url).unwrap();
    let h = Harness::with(move |s| {
        s.egress.callback_base = Some(base);
        s.egress.resolve_overrides =
            HashMap::from([("api.example.test".to_owned(), "127.0.0.1".parse().unwrap())]);
    });
    assert!(
        h.executor.uses_bwrap(),
        "this test needs bubblewrap with network namespaces (make test-deps installs it)"
    );
    let other = key("acct_other");
    run(&h.executor, &other, request(inline(ECHO), json!({}))).await;
    let other_dir = h.executor.socket_path(&other).parent().unwrap().to_owned();

    let input = json!({
        "serverData": secret,
        "otherRunner": other_dir,
        "fetch": {
            "public": format!("http://api.example.test:{public_port}/"),
            "postgres": "http://127.0.0.1:5432/",
            "nats": "http://127.0.0.1:4222/",
            "ipv6Loopback": "http://[::1]:5432/",
            "mappedLoopback": "http://[::ffff:127.0.0.1]:5432/",
            "loopbackName": "http://localhost:5432/",
            "metadata": "http://169.254.169.254/latest/meta-data/",
            "server": format!("{server_url}agents"),
        },
        "http": {
            "httpModulePublic": format!("http://api.example.test:{public_port}/"),
            "httpModulePostgres": "http://127.0.0.1:5432/",
        },
        "httpOwnAgent": {
            "ownAgentPublic": format!("http://api.example.test:{public_port}/"),
            "ownAgentNats": "http://127.0.0.1:4222/",
        },
        "tcp": { "tcpPostgres": ["127.0.0.1", 5432], "tcpNats": ["127.0.0.1", 4222] },
    });
    let frame = run(&h.executor, &key("acct"), request(inline(PROBE), input)).await;
    let out = final_value(&frame);
    let field = |name: &str| out[name].as_str().unwrap_or_default().to_owned();
    for name in ["public", "httpModulePublic", "ownAgentPublic"] {
        assert_eq!(
            field(name),
            "ok: 200 hello from the public internet",
            "{name}: {out:#}"
        );
    }
    for name in ["etc", "pgSocket", "serverData", "otherRunner"] {
        assert!(
            field(name).starts_with("refused: ENOENT"),
            "{name}: {out:#}"
        );
    }
    for name in [
        "postgres",
        "httpModulePostgres",
        "ownAgentNats",
        "nats",
        "ipv6Loopback",
        "mappedLoopback",
        "loopbackName",
        "metadata",
    ] {
        let seen = field(name);
        assert!(
            seen.starts_with("refused: egress to ") && seen.contains("not a public address"),
            "{name}: {out:#}"
        );
    }
    assert!(
        field("server").starts_with("ok: 403 egress to 127.0.0.1:")
            && field("server").contains("neither a job callback nor a bundle"),
        "{out:#}"
    );
    for name in ["tcpPostgres", "tcpNats"] {
        assert!(
            field(name).starts_with("refused: ECONNREFUSED"),
            "{name}: {out:#}"
        );
    }
}

#[tokio::test]
async fn a_tools_egress_allow_list_admits_listed_hosts_and_refuses_the_rest() {
    let public_port = text_origin("listed").await;
    let loopback: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let h = Harness::with(move |s| {
        s.egress.resolve_overrides = HashMap::from([
            ("api.example.test".to_owned(), loopback),
            ("eu.stripe.test".to_owned(), loopback),
            ("other.example.test".to_owned(), loopback),
        ]);
    });
    assert!(
        h.executor.uses_bwrap(),
        "this test needs bubblewrap with network namespaces (make test-deps installs it)"
    );
    let key = key("acct");
    let url = |host: &str| format!("http://{host}:{public_port}/");
    let input = json!({
        "serverData": "/nonexistent",
        "otherRunner": "/nonexistent",
        "fetch": {
            "listed": url("api.example.test"),
            "wildcard": url("eu.stripe.test"),
            "unlisted": url("other.example.test"),
        },
        "tcp": {},
    });
    let mut req = request(inline(PROBE), input.clone());
    req.egress_allow = Some(
        toolserver_domain::EgressAllowList::parse(&[
            "api.example.test".to_owned(),
            "*.stripe.test".to_owned(),
        ])
        .unwrap(),
    );
    let out = final_value(&run(&h.executor, &key, req).await);
    assert_eq!(out["listed"], "ok: 200 listed", "{out:#}");
    assert_eq!(out["wildcard"], "ok: 200 listed", "{out:#}");
    assert_eq!(
        out["unlisted"],
        "refused: egress to other.example.test:".to_owned()
            + &public_port.to_string()
            + " refused: other.example.test is not in the tool's egress allow list",
        "{out:#}"
    );

    let out = final_value(&run(&h.executor, &key, request(inline(PROBE), input)).await);
    assert_eq!(
        out["unlisted"], "ok: 200 listed",
        "without a list, any public host: {out:#}"
    );
}
