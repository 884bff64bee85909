//! The bundle a call runs: a tampered one refused, a downloaded one cached
//! on disk across restarts, an updated one run as the new code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use toolserver_domain::Sha256Digest;
use toolserver_sandbox::{BundleRef, Executor, Frame};

use crate::support::*;

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
