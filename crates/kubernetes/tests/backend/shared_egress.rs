//! Runner pods behind the shared egress proxy: the real worker in a fake
//! pod routes `fetch` and `node:http` through a real proxy on loopback TCP,
//! presenting the grant the executor minted for the call, so the tool's
//! allow list and the public-only rule hold for pods as for local runners.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use toolserver_domain::EgressAllowList;
use toolserver_kubernetes::manifests::EGRESS_PROXY_ENV;
use toolserver_kubernetes::SharedEgress;
use toolserver_sandbox::{EgressKey, EgressProxy, EgressSettings, Frame};
use toolserver_testsupport::net::text_origin;

use super::exec_transport::{bundle, cluster, key, request, NS};

const KEY: &str = "the egress key of this test suite";

/// A shared proxy on loopback TCP that takes `*.example.test` for public
/// names of loopback.
async fn proxy() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let settings = EgressSettings {
        resolve_overrides: HashMap::from([
            ("api.example.test".to_owned(), loopback),
            ("other.example.test".to_owned(), loopback),
        ]),
        resolve_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        ..EgressSettings::default()
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = EgressProxy::new(settings).serve_shared(listener, EgressKey::new(KEY).unwrap());
    (address, task)
}

const PROBE: &str = r#"
import http from 'node:http';
import net from 'node:net';
const attempt = async (f) => {
  try { return 'ok: ' + await f(); }
  catch (e) { return 'refused: ' + (e.cause?.message ?? e.message); }
};
const viaHttp = (url) => new Promise((resolve, reject) => {
  http.get(url, (res) => { let body = ''; res.on('data', (c) => body += c); res.on('end', () => resolve(`${res.statusCode} ${body}`)); })
    .on('error', reject);
});
// What a client honouring HTTP_PROXY does: CONNECT through the relay, then
// a request inside the tunnel; the whole exchange as text.
const viaProxyVariable = (authority) => new Promise((resolve, reject) => {
  const proxy = new URL(process.env.HTTP_PROXY);
  const socket = net.connect(Number(proxy.port), proxy.hostname);
  let seen = '';
  socket.on('data', (chunk) => {
    seen += chunk;
    if (seen.startsWith('HTTP/1.1 200') && seen.endsWith('\r\n\r\n')) socket.write(`GET / HTTP/1.1\r\nhost: ${authority}\r\n\r\n`);
  });
  socket.on('end', () => resolve(seen.replace(/\r\n/g, '|'))).on('error', reject);
  socket.write(`CONNECT ${authority} HTTP/1.1\r\nhost: ${authority}\r\n\r\n`);
});
export default { async execute(ctx, input) {
  const out = {};
  for (const [name, url] of Object.entries(input.fetch)) {
    out[name] = await attempt(() => fetch(url).then(async (r) => `${r.status} ${await r.text()}`));
  }
  for (const [name, url] of Object.entries(input.http)) out[name] = await attempt(() => viaHttp(url));
  for (const [name, authority] of Object.entries(input.relay)) out[name] = await attempt(() => viaProxyVariable(authority));
  return out;
} };
"#;

fn final_value(frame: Frame) -> Value {
    match frame {
        Frame::Final { value } => value,
        other => panic!("expected a final frame, got {other:?}"),
    }
}

#[tokio::test]
async fn pods_reach_out_only_through_the_shared_proxy_under_their_tools_grant() {
    let port = text_origin("listed").await;
    let (proxy, _task) = proxy().await;
    let cluster = cluster(|settings| {
        settings.egress = Some(SharedEgress {
            proxy: proxy.to_string(),
            key: EgressKey::new(KEY).unwrap(),
        });
    })
    .await;
    let key = key("acct_egress");
    let url = |host: &str| format!("http://{host}:{port}/");
    let input = json!({
        "fetch": {
            "listed": url("api.example.test"),
            "unlisted": url("other.example.test"),
            "loopback": url("127.0.0.1"),
        },
        "http": { "httpListed": url("api.example.test"), "httpUnlisted": url("other.example.test") },
        "relay": {
            "relayListed": format!("api.example.test:{port}"),
            "relayUnlisted": format!("other.example.test:{port}"),
        },
    });

    let mut narrowed = request(bundle(PROBE), input.clone());
    narrowed.egress_allow = Some(EgressAllowList::parse(&["api.example.test".to_owned()]).unwrap());
    let out = final_value(cluster.call(&key, narrowed).await);
    let refused = |host: &str| {
        format!("refused: egress to {host}:{port} refused: {host} is not in the tool's egress allow list")
    };
    assert_eq!(out["listed"], "ok: 200 listed", "{out:#}");
    assert_eq!(out["httpListed"], "ok: 200 listed", "{out:#}");
    assert_eq!(out["unlisted"], refused("other.example.test"), "{out:#}");
    assert_eq!(
        out["httpUnlisted"],
        refused("other.example.test"),
        "{out:#}"
    );
    assert_eq!(out["loopback"], refused("127.0.0.1"), "{out:#}");
    let relayed = out["relayListed"].as_str().unwrap_or_default();
    assert!(
        relayed.starts_with("ok: HTTP/1.1 200 Connection Established||HTTP/1.1 200 OK|")
            && relayed.ends_with("|listed"),
        "{out:#}"
    );
    let relay_refusal = out["relayUnlisted"].as_str().unwrap_or_default();
    assert!(
        relay_refusal.starts_with("ok: HTTP/1.1 403 Refused|")
            && relay_refusal.ends_with("other.example.test is not in the tool's egress allow list"),
        "{out:#}"
    );

    let out = final_value(cluster.call(&key, request(bundle(PROBE), input)).await);
    assert_eq!(
        out["unlisted"], "ok: 200 listed",
        "without a list, any public host: {out:#}"
    );
    let loopback = out["loopback"].as_str().unwrap_or_default();
    assert!(
        loopback.starts_with(&format!("refused: egress to 127.0.0.1:{port} refused:"))
            && loopback.contains("not a public address"),
        "{out:#}"
    );

    let pod = cluster.fake.pod(NS, &key.runner_name()).unwrap();
    let env = &pod["spec"]["containers"][0]["env"];
    let proxy_var = env
        .as_array()
        .unwrap()
        .iter()
        .find(|var| var["name"] == EGRESS_PROXY_ENV);
    assert_eq!(proxy_var.unwrap()["value"], proxy.to_string(), "{env:#}");
}
