//! A real OAuth 2.1 authorization server (clients/oauth-server: Authlib on
//! Flask, in the virtualenv scripts/test-services.sh makes) started on a free
//! loopback port for one confidential client: the authorization code grant
//! with S256 PKCE required, refresh with rotation, a protected resource
//! (`api/me`) naming the token's user, and admin endpoints to revoke a user's
//! grants and count the token answers. Its end users consent at once; a test
//! names one by following the authorize URL with [`OAuthServer::consent`].

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::clients::{client_dir, venv_python};

/// How long the server may take to print that it listens.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A real OAuth 2.1 authorization server (clients/oauth-server, authlib) on loopback; killed on drop.
pub struct OAuthServer {
    /// `http://127.0.0.1:PORT/`, with the trailing slash.
    pub base_url: String,
    http: reqwest::Client,
    _child: tokio::process::Child,
    log: tempfile::NamedTempFile,
}

impl OAuthServer {
    /// Starts the server for the confidential client `client_id` with
    /// `client_secret` (basic or post authentication), issuing access
    /// tokens that live `access_ttl_secs` seconds.
    ///
    /// # Panics
    /// When the virtualenv is missing (run scripts/test-services.sh), or the
    /// server does not say it listens within 20 s (its stderr is shown).
    pub async fn start(client_id: &str, client_secret: &str, access_ttl_secs: u64) -> Self {
        let python = venv_python("oauth-server");
        assert!(
            python.exists(),
            "{} is missing: run scripts/test-services.sh to make the OAuth server's virtualenv",
            python.display()
        );
        let log = tempfile::NamedTempFile::new().expect("a file for the OAuth server's log");
        let mut child = tokio::process::Command::new(&python)
            .arg(client_dir("oauth-server").join("server.py"))
            .args(["--client-id", client_id, "--client-secret", client_secret])
            .args(["--access-ttl", &access_ttl_secs.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.reopen().expect("the OAuth server's log"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("start {}: {err}", python.display()));
        let stdout = child.stdout.take().expect("the OAuth server's stdout");
        let mut line = String::new();
        let read =
            tokio::time::timeout(START_TIMEOUT, BufReader::new(stdout).read_line(&mut line)).await;
        let Some(origin) = line.trim().strip_prefix("listening on ") else {
            let _ = child.start_kill();
            let _ = child.wait().await;
            panic!(
                "the OAuth server did not start listening ({}): {line}{}",
                match read {
                    Err(_) => "timed out".to_owned(),
                    Ok(Err(err)) => err.to_string(),
                    Ok(Ok(_)) => "it exited".to_owned(),
                },
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
        };
        Self {
            base_url: format!("{origin}/"),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
            _child: child,
            log,
        }
    }

    /// What the server has logged to stderr so far (a line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// The authorization endpoint.
    pub fn authorization_url(&self) -> String {
        format!("{}authorize", self.base_url)
    }

    /// The token endpoint.
    pub fn token_url(&self) -> String {
        format!("{}token", self.base_url)
    }

    /// The protected resource: with a live bearer token it answers
    /// `{"user": ..., "scope": ...}`, else 401 `{"error": "invalid_token"}`.
    pub fn resource_url(&self) -> String {
        format!("{}api/me", self.base_url)
    }

    /// Revokes every token of `user`; returns how many live refresh tokens
    /// that revoked.
    pub async fn revoke(&self, user: &str) -> u64 {
        let answer = self
            .admin(
                self.http
                    .post(format!("{}admin/revoke", self.base_url))
                    .query(&[("user", user)]),
            )
            .await;
        answer["revoked"]
            .as_u64()
            .unwrap_or_else(|| panic!("revoke answered {answer}"))
    }

    /// How many token answers each grant gave and to whom:
    /// `{"authorization_code": N, "refresh_token": M, "users": [...]}`.
    pub async fn stats(&self) -> Value {
        self.admin(self.http.get(format!("{}admin/stats", self.base_url)))
            .await
    }

    /// Every access and refresh token the server has issued.
    pub async fn issued_tokens(&self) -> Vec<String> {
        let answer = self
            .admin(self.http.get(format!("{}admin/tokens", self.base_url)))
            .await;
        serde_json::from_value(answer["tokens"].clone()).unwrap_or_default()
    }

    /// Follows `authorization_url` (as a browser would) as end user `user`: appends `user=`, GETs it without following redirects, and returns the `Location` it redirects to.
    ///
    /// # Panics
    /// When the server does not redirect (e.g. an unknown client or a
    /// redirect URI it refuses); a refused request it can report to the
    /// client (e.g. no PKCE challenge) redirects with `error=...`.
    pub async fn consent(&self, authorization_url: &str, user: &str) -> String {
        let mut url = url::Url::parse(authorization_url)
            .unwrap_or_else(|err| panic!("{authorization_url}: {err}"));
        url.query_pairs_mut().append_pair("user", user);
        let response = self
            .http
            .get(url)
            .send()
            .await
            .expect("the OAuth server answers");
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        match location {
            Some(location) if status.is_redirection() => location,
            _ => panic!(
                "the OAuth server did not redirect {authorization_url}: {status} {}",
                response.text().await.unwrap_or_default()
            ),
        }
    }

    async fn admin(&self, request: reqwest::RequestBuilder) -> Value {
        let response = request.send().await.expect("the OAuth server answers");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert!(
            status.is_success(),
            "the OAuth server answered {status}: {body}"
        );
        serde_json::from_str(&body).unwrap_or_else(|err| panic!("{err}: {body}"))
    }
}
