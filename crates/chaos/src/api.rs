//! The server's public HTTP API as the trials use it: a bearer token and
//! JSON in and out.

use std::time::Duration;

use serde_json::{json, Value};

use crate::ChaosError;

/// The HS256 secret both servers verify tokens with.
pub const JWT_SECRET: &str = "toolserver-chaos-secret";

/// The account every trial runs in.
pub const ACCOUNT: &str = "chaos";

/// An HTTP client holding the account's token.
#[derive(Clone)]
pub struct Api {
    client: reqwest::Client,
    token: String,
}

/// A status code and a body (JSON, or the text as a JSON string).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

impl Answer {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl Api {
    /// A client with a week-long token for [`ACCOUNT`].
    pub fn new() -> Result<Self, ChaosError> {
        let exp = time::OffsetDateTime::now_utc().unix_timestamp() + 7 * 24 * 3600;
        let token = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &json!({"account_id": ACCOUNT, "exp": exp}),
            &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
        )
        .map_err(|err| ChaosError::Setup(format!("minting a token: {err}")))?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(15))
            .build()
            .map_err(|err| ChaosError::Setup(format!("building the HTTP client: {err}")))?;
        Ok(Self { client, token })
    }

    /// `GET {base}{path}`.
    pub async fn get(&self, base: &str, path: &str) -> Result<Answer, reqwest::Error> {
        let request = self
            .client
            .get(format!("{base}{path}"))
            .bearer_auth(&self.token);
        answer(request).await
    }

    /// `POST {base}{path}` with a JSON body.
    pub async fn post(
        &self,
        base: &str,
        path: &str,
        body: &Value,
    ) -> Result<Answer, reqwest::Error> {
        let request = self
            .client
            .post(format!("{base}{path}"))
            .bearer_auth(&self.token)
            .json(body);
        answer(request).await
    }

    /// `POST` that must answer 2xx; anything else is a setup failure.
    pub async fn post_ok(&self, base: &str, path: &str, body: &Value) -> Result<Value, ChaosError> {
        let answer = self
            .post(base, path, body)
            .await
            .map_err(|err| ChaosError::Setup(format!("POST {path}: {err}")))?;
        if answer.is_success() {
            Ok(answer.body)
        } else {
            Err(ChaosError::Setup(format!(
                "POST {path}: {} {}",
                answer.status, answer.body
            )))
        }
    }

    /// Whether `{base}/readyz` answers 2xx.
    pub async fn ready(&self, base: &str) -> bool {
        self.client
            .get(format!("{base}/readyz"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|response| response.status().is_success())
    }
}

async fn answer(request: reqwest::RequestBuilder) -> Result<Answer, reqwest::Error> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(Answer { status, body })
}
