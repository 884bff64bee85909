//! The OAuth 2.1 authorization server helper (clients/oauth-server) through
//! a whole grant's life: PKCE S256 authorization as end user alice, the code
//! exchanged, the resource read with the bearer, a refresh that rotates the
//! refresh token, and a revocation after which refreshing is refused.
#![allow(clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use toolserver_testsupport::OAuthServer;

const CLIENT_ID: &str = "toolserver";
const CLIENT_SECRET: &str = "toolserver-secret";
const REDIRECT_URI: &str = "http://127.0.0.1:9/oauth/callback";

/// A PKCE verifier and its S256 challenge.
fn pkce() -> (String, String) {
    let verifier = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    (verifier, challenge)
}

/// The query parameter `name` of `url`.
fn param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .expect("a URL")
        .query_pairs()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// A form post to the token endpoint: status and JSON answer.
async fn token(server: &OAuthServer, form: &[(&str, &str)]) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(server.token_url())
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(form)
        .send()
        .await
        .expect("the token endpoint answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

#[tokio::test]
async fn a_grant_is_authorized_exchanged_refreshed_and_revoked() {
    let server = OAuthServer::start(CLIENT_ID, CLIENT_SECRET, 60).await;
    assert!(
        server.base_url.starts_with("http://127.0.0.1:"),
        "{}",
        server.base_url
    );
    assert!(server.base_url.ends_with('/'), "{}", server.base_url);
    let (verifier, challenge) = pkce();
    let mut authorize = url::Url::parse(&server.authorization_url()).unwrap();
    authorize
        .query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", CLIENT_ID)
        .append_pair("redirect_uri", REDIRECT_URI)
        .append_pair("scope", "read write")
        .append_pair("state", "st4te");

    // Without a PKCE challenge the request is refused back to the client.
    let refused = server.consent(authorize.as_str(), "alice").await;
    assert!(refused.starts_with(REDIRECT_URI), "{refused}");
    assert_eq!(
        param(&refused, "error").as_deref(),
        Some("invalid_request"),
        "{refused}"
    );

    authorize
        .query_pairs_mut()
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    let location = server.consent(authorize.as_str(), "alice").await;
    assert!(location.starts_with(REDIRECT_URI), "{location}");
    assert_eq!(
        param(&location, "state").as_deref(),
        Some("st4te"),
        "{location}"
    );
    let code = param(&location, "code").unwrap_or_else(|| panic!("{location}"));

    let (status, granted) = token(
        &server,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", &verifier),
        ],
    )
    .await;
    assert_eq!(status, 200, "{granted}");
    assert_eq!(granted["token_type"], "Bearer", "{granted}");
    assert_eq!(granted["expires_in"], 60, "{granted}");
    let access = granted["access_token"].as_str().unwrap();
    let refresh = granted["refresh_token"].as_str().unwrap();

    let me = reqwest::Client::new()
        .get(server.resource_url())
        .bearer_auth(access)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200);
    assert_eq!(
        me.json::<Value>().await.unwrap(),
        json!({"user": "alice", "scope": "read write"})
    );
    let anonymous = reqwest::get(server.resource_url()).await.unwrap();
    assert_eq!(anonymous.status(), 401);

    let (status, refreshed) = token(
        &server,
        &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
    )
    .await;
    assert_eq!(status, 200, "{refreshed}");
    let rotated = refreshed["refresh_token"].as_str().unwrap();
    assert_ne!(rotated, refresh);
    assert_ne!(refreshed["access_token"], granted["access_token"]);
    // Rotation: the old refresh token is spent.
    let (status, spent) = token(
        &server,
        &[("grant_type", "refresh_token"), ("refresh_token", refresh)],
    )
    .await;
    assert_eq!(
        (status, &spent["error"]),
        (400, &json!("invalid_grant")),
        "{spent}"
    );

    assert_eq!(
        server.stats().await,
        json!({"authorization_code": 1, "refresh_token": 1, "users": ["alice"]})
    );
    assert_eq!(server.revoke("alice").await, 1);
    let (status, revoked) = token(
        &server,
        &[("grant_type", "refresh_token"), ("refresh_token", rotated)],
    )
    .await;
    assert_eq!(
        (status, &revoked["error"]),
        (400, &json!("invalid_grant")),
        "{revoked}"
    );
    assert_eq!(server.revoke("alice").await, 0);
}
