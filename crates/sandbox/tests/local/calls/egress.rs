//! A call's network: uploaded code reaches only public hosts, through the
//! proxy, and a tool's egress allow list admits only the hosts it lists.

use std::collections::HashMap;

use serde_json::json;

use toolserver_testsupport::net::text_origin;

use crate::support::*;

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
            && field("server").contains("neither a callback to the server nor a bundle"),
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
