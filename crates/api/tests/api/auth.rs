//! Token verification: pinned algorithms, required claims, PEM keys and JWKS.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use serde_json::json;
use sqlx::PgPool;
use toolserver_api::auth::{AuthSettings, Authenticator, JwksKeys, KeySource};

use crate::app::{spawn_app, TestApp};
use crate::support::*;

const RSA_PRIVATE: &[u8] = include_bytes!("fixtures/rsa_private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("fixtures/rsa_public.pem");
const EC_PRIVATE: &[u8] = include_bytes!("fixtures/ec_private.pem");
const EC_PUBLIC: &[u8] = include_bytes!("fixtures/ec_public.pem");
const JWKS: &str = include_str!("fixtures/jwks.json");

async fn app_with(pool: PgPool, settings: AuthSettings, keys: KeySource) -> TestApp {
    let auth = Authenticator::new(&settings, keys);
    TestApp::builder(pool).auth(auth).spawn().await
}

async fn status_with(app: &TestApp, authorization: Option<String>) -> (StatusCode, String) {
    let mut request = Request::builder().uri("/accounts/me/tools");
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    let reply = app.send(request.body(Body::empty()).unwrap()).await;
    let message = if reply.status == StatusCode::OK {
        String::new()
    } else {
        assert_eq!(reply.headers[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(reply.code(), "unauthorized");
        reply.message()
    };
    (reply.status, message)
}

fn hs(claims: serde_json::Value) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        claims,
        None,
    )
}

fn unsigned_token(claims: serde_json::Value) -> String {
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = engine.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = engine.encode(serde_json::to_vec(&claims).unwrap());
    format!("{header}.{payload}.")
}

#[sqlx::test(migrations = "../../migrations")]
async fn hs256_refuses_bad_tokens(pool: PgPool) {
    let app = spawn_app(pool).await;
    let valid = json!({"account_id": ACCOUNT_A, "exp": now() + 600});
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("no header", None, "missing Authorization"),
        ("basic scheme", Some("Basic dXNlcjpwdw==".into()), "Bearer"),
        ("garbage", Some("Bearer not.a.jwt".into()), "malformed"),
        (
            "expired",
            Some(format!(
                "Bearer {}",
                hs(json!({"account_id": ACCOUNT_A, "exp": now() - 120}))
            )),
            "expired",
        ),
        (
            "no exp",
            Some(format!("Bearer {}", hs(json!({"account_id": ACCOUNT_A})))),
            "exp",
        ),
        (
            "alg none",
            Some(format!("Bearer {}", unsigned_token(valid.clone()))),
            "invalid bearer token",
        ),
        (
            "RS256 when HS256 is pinned",
            Some(format!(
                "Bearer {}",
                sign(Algorithm::RS256, &rsa, valid.clone(), None)
            )),
            "algorithm",
        ),
        (
            "HS384 when HS256 is pinned",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::HS384,
                    &EncodingKey::from_secret(SECRET.as_bytes()),
                    valid.clone(),
                    None
                )
            )),
            "algorithm",
        ),
        (
            "wrong secret",
            Some(format!(
                "Bearer {}",
                sign(
                    Algorithm::HS256,
                    &EncodingKey::from_secret(b"other"),
                    valid.clone(),
                    None
                )
            )),
            "signature",
        ),
        (
            "no account claim",
            Some(format!(
                "Bearer {}",
                hs(json!({"sub": "x", "exp": now() + 600}))
            )),
            "account_id",
        ),
        (
            "numeric account claim",
            Some(format!(
                "Bearer {}",
                hs(json!({"account_id": 123, "exp": now() + 600}))
            )),
            "must be a string",
        ),
        (
            "fractional account claim",
            Some(format!(
                "Bearer {}",
                hs(json!({"account_id": 1.5, "exp": now() + 600}))
            )),
            "must be a string",
        ),
        (
            "bad account id",
            Some(format!(
                "Bearer {}",
                hs(json!({"account_id": "a/b", "exp": now() + 600}))
            )),
            "account",
        ),
        (
            "not yet valid",
            Some(format!(
                "Bearer {}",
                hs(json!({"account_id": ACCOUNT_A, "exp": now() + 600, "nbf": now() + 300}))
            )),
            "not valid yet",
        ),
    ];
    for (case, authorization, expected) in cases {
        let (status, message) = status_with(&app, authorization).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}");
        assert!(
            message.contains(expected),
            "{case}: {message:?} should mention {expected:?}"
        );
    }
    let (status, _) = status_with(&app, Some(format!("Bearer {}", hs(valid)))).await;
    assert_eq!(status, StatusCode::OK);
}

#[sqlx::test(migrations = "../../migrations")]
async fn issuer_and_audience_are_enforced_when_configured(pool: PgPool) {
    let settings = AuthSettings {
        issuer: Some("https://issuer.test".into()),
        audience: Some("toolserver".into()),
        ..hs256_settings()
    };
    let keys = KeySource::Static(Arc::new(DecodingKey::from_secret(SECRET.as_bytes())));
    let app = app_with(pool, settings, keys).await;
    let good = json!({"account_id": ACCOUNT_A, "exp": now() + 600, "iss": "https://issuer.test", "aud": "toolserver"});
    let (status, _) = status_with(&app, Some(format!("Bearer {}", hs(good.clone())))).await;
    assert_eq!(status, StatusCode::OK);
    let variants = [
        ("wrong audience", json!({"aud": "someone-else"}), "audience"),
        (
            "wrong issuer",
            json!({"iss": "https://evil.test"}),
            "issuer",
        ),
    ];
    for (case, patch, expected) in variants {
        let mut claims = good.clone();
        for (k, v) in patch.as_object().unwrap() {
            claims[k] = v.clone();
        }
        let (status, message) = status_with(&app, Some(format!("Bearer {}", hs(claims)))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{case}");
        assert!(message.contains(expected), "{case}: {message}");
    }
    for missing in ["aud", "iss"] {
        let mut claims = good.clone();
        claims.as_object_mut().unwrap().remove(missing);
        let (status, message) = status_with(&app, Some(format!("Bearer {}", hs(claims)))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "missing {missing}");
        assert!(message.contains(missing), "{message}");
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn rs256_and_es256_with_pem_keys(pool: PgPool) {
    let claims = json!({"account_id": ACCOUNT_A, "exp": now() + 600});
    let rsa_app = app_with(
        pool.clone(),
        AuthSettings {
            algorithm: Algorithm::RS256,
            ..hs256_settings()
        },
        KeySource::Static(Arc::new(DecodingKey::from_rsa_pem(RSA_PUBLIC).unwrap())),
    )
    .await;
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let (status, _) = status_with(
        &rsa_app,
        Some(format!(
            "Bearer {}",
            sign(Algorithm::RS256, &rsa, claims.clone(), None)
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = status_with(&rsa_app, Some(format!("Bearer {}", hs(claims.clone())))).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "an HS256 token must not pass an RS256 server"
    );

    let ec_app = app_with(
        pool,
        AuthSettings {
            algorithm: Algorithm::ES256,
            ..hs256_settings()
        },
        KeySource::Static(Arc::new(DecodingKey::from_ec_pem(EC_PUBLIC).unwrap())),
    )
    .await;
    let ec = EncodingKey::from_ec_pem(EC_PRIVATE).unwrap();
    let (status, _) = status_with(
        &ec_app,
        Some(format!(
            "Bearer {}",
            sign(Algorithm::ES256, &ec, claims.clone(), None)
        )),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = status_with(
        &ec_app,
        Some(format!(
            "Bearer {}",
            sign(Algorithm::RS256, &rsa, claims, None)
        )),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// Serves the fixture JWKS on loopback and counts fetches.
async fn serve_jwks() -> (url::Url, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { ([(header::CONTENT_TYPE, "application/json")], JWKS) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (
        url::Url::parse(&format!("http://{addr}/.well-known/jwks.json")).unwrap(),
        hits,
    )
}

#[sqlx::test(migrations = "../../migrations")]
async fn jwks_keys_are_found_by_kid_and_refetches_are_bounded(pool: PgPool) {
    let (url, hits) = serve_jwks().await;
    let jwks = JwksKeys::new(url, reqwest::Client::new(), Duration::from_secs(3600));
    let app = app_with(
        pool,
        AuthSettings {
            algorithm: Algorithm::RS256,
            ..hs256_settings()
        },
        KeySource::Jwks(Arc::new(jwks)),
    )
    .await;
    let rsa = EncodingKey::from_rsa_pem(RSA_PRIVATE).unwrap();
    let claims = json!({"account_id": ACCOUNT_A, "exp": now() + 600});
    let good = format!(
        "Bearer {}",
        sign(Algorithm::RS256, &rsa, claims.clone(), Some("test-rsa-1"))
    );
    for _ in 0..3 {
        let (status, _) = status_with(&app, Some(good.clone())).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1, "keys are cached");
    for i in 0..5 {
        let unknown = format!(
            "Bearer {}",
            sign(
                Algorithm::RS256,
                &rsa,
                claims.clone(),
                Some(&format!("made-up-{i}"))
            )
        );
        let (status, message) = status_with(&app, Some(unknown)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(message.contains("no key"), "{message}");
    }
    let no_kid = format!("Bearer {}", sign(Algorithm::RS256, &rsa, claims, None));
    assert_eq!(
        status_with(&app, Some(no_kid)).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "unknown kids do not trigger a fetch each"
    );
}
