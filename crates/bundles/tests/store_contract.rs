//! One behavioural suite run against both bundle store backends: the
//! filesystem store and S3 against a real `s3s-fs` on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use toolserver_bundles::{
    BundleError, BundleStore, FsBundleStore, S3BundleStore, S3Settings, UrlSigner,
};
use toolserver_domain::Sha256Digest;
use toolserver_testsupport::S3Server;

async fn round_trip_and_dedup(store: &dyn BundleStore) {
    let bytes = Bytes::from_static(b"export default { execute() { return 1; } };");
    let first = store.put(bytes.clone()).await.unwrap();
    assert_eq!(first.sha256, Sha256Digest::of(&bytes));
    assert_eq!(first.size, bytes.len() as u64);
    assert!(first.newly_stored);
    let second = store.put(bytes.clone()).await.unwrap();
    assert_eq!(second.sha256, first.sha256);
    assert!(!second.newly_stored, "identical bytes must be stored once");
    assert!(store.contains(&first.sha256).await.unwrap());
    assert_eq!(store.get(&first.sha256).await.unwrap(), bytes);
}

async fn missing_and_empty(store: &dyn BundleStore) {
    let absent = Sha256Digest::of(b"never stored");
    assert!(!store.contains(&absent).await.unwrap());
    assert!(matches!(
        store.get(&absent).await,
        Err(BundleError::NotFound)
    ));
    assert!(matches!(
        store.put(Bytes::new()).await,
        Err(BundleError::Empty)
    ));
}

async fn signed_url_works_then_expires(store: &dyn BundleStore, fetch: impl AsyncFetch) {
    let bytes = Bytes::from(vec![b'x'; 200 * 1024]);
    let stored = store.put(bytes.clone()).await.unwrap();
    let signed = store
        .signed_url(&stored.sha256, Duration::from_secs(1))
        .await
        .unwrap();
    let (status, body) = fetch.get(signed.url.as_str()).await;
    assert_eq!(status, 200);
    assert_eq!(body, bytes);
    // Signatures are checked at one-second resolution; wait past the expiry.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, _) = fetch.get(signed.url.as_str()).await;
    assert!(
        status == 403 || status == 410,
        "expired URL answered {status}"
    );
}

/// Fetches a URL for the signed-URL test: plain HTTP for S3, a direct
/// signature check for the filesystem store (its route lives in the API crate).
trait AsyncFetch {
    async fn get(&self, url: &str) -> (u16, Bytes);
}

struct Http;

impl AsyncFetch for Http {
    async fn get(&self, url: &str) -> (u16, Bytes) {
        let response = reqwest::get(url).await.unwrap();
        let status = response.status().as_u16();
        (status, response.bytes().await.unwrap())
    }
}

struct FsVerify<'a>(&'a FsBundleStore);

impl AsyncFetch for FsVerify<'_> {
    async fn get(&self, url: &str) -> (u16, Bytes) {
        let url = url::Url::parse(url).unwrap();
        let sha = Sha256Digest::parse(url.path_segments().unwrap().next_back().unwrap()).unwrap();
        let query: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        let expires = query["expires"].parse().unwrap();
        match self.0.verify_download(&sha, expires, &query["signature"]) {
            Ok(()) => (200, self.0.get(&sha).await.unwrap()),
            Err(BundleError::Expired) => (410, Bytes::new()),
            Err(other) => panic!("unexpected {other}"),
        }
    }
}

async fn fs_store(dir: &std::path::Path) -> FsBundleStore {
    let base = url::Url::parse("http://127.0.0.1:1/").unwrap();
    FsBundleStore::open(dir, UrlSigner::new(b"test-key".to_vec(), base).unwrap())
        .await
        .unwrap()
}

async fn s3_store(server: &S3Server) -> S3BundleStore {
    S3BundleStore::connect(S3Settings {
        bucket: "bundles".into(),
        prefix: "tools/".into(),
        region: "us-east-1".into(),
        endpoint: Some(server.endpoint()),
        force_path_style: true,
        credentials: Some((
            toolserver_testsupport::s3::ACCESS_KEY.into(),
            toolserver_testsupport::s3::SECRET_KEY.into(),
        )),
    })
    .await
}

#[tokio::test]
async fn fs_round_trip_and_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let store = fs_store(dir.path()).await;
    round_trip_and_dedup(&store).await;
    let files = walk(dir.path().to_path_buf());
    assert_eq!(files, 1, "one stored file for two identical puts");
}

#[tokio::test]
async fn s3_round_trip_and_dedup() {
    let server = S3Server::start("bundles");
    let store = s3_store(&server).await;
    store.check_bucket().await.unwrap();
    round_trip_and_dedup(&store).await;
}

#[tokio::test]
async fn fs_missing_and_empty() {
    let dir = tempfile::tempdir().unwrap();
    missing_and_empty(&fs_store(dir.path()).await).await;
}

#[tokio::test]
async fn s3_missing_and_empty() {
    let server = S3Server::start("bundles");
    missing_and_empty(&s3_store(&server).await).await;
}

#[tokio::test]
async fn fs_signed_url_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = fs_store(dir.path()).await;
    signed_url_works_then_expires(&store, FsVerify(&store)).await;
}

#[tokio::test]
async fn s3_presigned_url_expires() {
    let server = S3Server::start("bundles");
    let store = s3_store(&server).await;
    signed_url_works_then_expires(&store, Http).await;
}

#[tokio::test]
async fn s3_check_refuses_unknown_bucket_and_bad_secret() {
    let server = S3Server::start("bundles");
    let settings = |bucket: &str, secret: &str| S3Settings {
        bucket: bucket.into(),
        prefix: String::new(),
        region: "us-east-1".into(),
        endpoint: Some(server.endpoint()),
        force_path_style: true,
        credentials: Some((toolserver_testsupport::s3::ACCESS_KEY.into(), secret.into())),
    };
    let good =
        S3BundleStore::connect(settings("bundles", toolserver_testsupport::s3::SECRET_KEY)).await;
    assert!(good.check_bucket().await.is_ok());
    let unknown =
        S3BundleStore::connect(settings("missing", toolserver_testsupport::s3::SECRET_KEY)).await;
    assert!(unknown.check_bucket().await.is_err());
    let bad_secret = S3BundleStore::connect(settings("bundles", "wrong-secret")).await;
    assert!(bad_secret.check_bucket().await.is_err());
}

#[tokio::test]
async fn fs_detects_corruption_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = fs_store(dir.path()).await;
    let stored = store.put(Bytes::from_static(b"original")).await.unwrap();
    let hex = stored.sha256.to_hex();
    std::fs::write(dir.path().join(&hex[..2]).join(&hex), b"tampered").unwrap();
    assert!(matches!(
        store.get(&stored.sha256).await,
        Err(BundleError::Corrupt { .. })
    ));
}

fn walk(dir: std::path::PathBuf) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(entry.path())
            } else {
                1
            }
        })
        .sum()
}
