//! Requests to the test app: in-process through its router, or over HTTP
//! to the served app, with the tokens of the test accounts.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};
use toolserver_testsupport::http::request_json;
use toolserver_testsupport::tools;
use tower::ServiceExt;

use super::TestApp;
use crate::support::{authed, manifest, multipart, parse_frames, token, user_turn, Reply, Turn};

/// In-process requests, through the router without a socket.
impl TestApp {
    /// Sends `request` through the router.
    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            body,
        }
    }

    /// Sends `method path` as `account`, with `body` as JSON if given.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        account: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {}", token(account)));
        let body = match body {
            Some(value) => {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(&value).unwrap())
            }
            None => Body::empty(),
        };
        self.send(builder.body(body).unwrap()).await
    }

    /// Sends a multipart body of `parts` as account A.
    pub async fn send_multipart(
        &self,
        method: Method,
        path: &str,
        parts: &[(&str, &[u8])],
    ) -> Reply {
        let (content_type, body) = multipart(parts);
        self.send(authed(method, path, &content_type, body)).await
    }

    /// `GET path` as `account`.
    pub async fn get(&self, path: &str, account: &str) -> Reply {
        self.call(Method::GET, path, account, None).await
    }

    /// Uploads a tool as JSON and asserts it was created.
    pub async fn create(&self, account: &str, name: &str, bundle: &[u8]) -> Value {
        let reply = self
            .call(
                Method::POST,
                "/accounts/me/tools",
                account,
                Some(manifest(name, bundle)),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::CREATED,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.json()
    }
}

/// Requests over HTTP, to the app served on loopback.
impl TestApp {
    /// The served app's address, e.g. `http://127.0.0.1:40123`.
    pub fn base(&self) -> &str {
        self.base
            .as_deref()
            .expect("the app is not served: build it with .serve()")
    }

    /// Sends `method path` as `account`, with `body` as JSON if given; the
    /// status and the answer.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        account: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base());
        request_json(&self.client, method, &url, &token(account), body).await
    }

    /// A `POST path` as `account`, to finish and send.
    pub fn post(&self, path: &str, account: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base()))
            .bearer_auth(token(account))
    }

    /// Uploads a tool with `source` as its bundle and an input schema; its id.
    pub async fn upload(&self, account: &str, name: &str, source: &str, schema: Value) -> String {
        tools::upload(
            &self.client,
            self.base(),
            &token(account),
            name,
            source,
            schema,
        )
        .await
    }

    /// Uploads a tool as [`Self::upload`] does, its manifest also carrying
    /// `fields` (such as `effects` and `retry`); its id.
    pub async fn upload_declaring(
        &self,
        account: &str,
        (name, source): (&str, &str),
        schema: Value,
        fields: Value,
    ) -> String {
        let mut body = tools::upload_body(name, source, schema);
        if let (Some(body), Some(fields)) = (body.as_object_mut(), fields.as_object()) {
            body.extend(fields.clone());
        }
        let (status, created) = self
            .request(
                reqwest::Method::POST,
                "/accounts/me/tools",
                account,
                Some(body),
            )
            .await;
        assert_eq!(status, 201, "uploading {name}: {created}");
        created["toolId"].as_str().unwrap().to_owned()
    }

    /// Invokes `account`'s `tool` with `body`; the status and the answer.
    pub async fn invoke(&self, account: &str, tool: &str, body: Value) -> (u16, Value) {
        let response = self.invoke_response(account, tool, body).await;
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    /// Invokes `account`'s `tool` with `body`; the response as it came.
    pub async fn invoke_response(
        &self,
        account: &str,
        tool: &str,
        body: Value,
    ) -> reqwest::Response {
        tools::invoke(&self.client, self.base(), &token(account), tool, &body).await
    }

    /// The config of an agent on the scripted model `model_id`.
    pub fn agent_config(&self, model_id: &str, tools: Value) -> Value {
        json!({
            "model": {"provider": "openai", "modelId": model_id},
            "provider": {"openai": {"apiKey": "sk-test-key", "baseUrl": self.model.base_url()}},
            "systemPrompt": "You are a test agent.",
            "tools": tools,
        })
    }

    /// Creates an agent and returns its id.
    pub async fn agent(&self, account: &str, model_id: &str, tools: Value) -> String {
        let config = self.agent_config(model_id, tools);
        self.agent_with_config(account, model_id, config).await["agentId"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Creates an agent named `name` with `config`; the created agent.
    pub async fn agent_with_config(&self, account: &str, name: &str, config: Value) -> Value {
        let (status, body) = self
            .request(
                reqwest::Method::POST,
                "/agents",
                account,
                Some(json!({"name": name, "config": config})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body
    }

    /// Starts a turn and returns the raw response.
    pub async fn start_turn(&self, account: &str, agent: &str, body: Value) -> reqwest::Response {
        self.post(&format!("/agents/{agent}/chat"), account)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Runs a turn to its end.
    pub async fn turn(&self, account: &str, agent: &str, body: Value) -> Turn {
        self.turn_as(&token(account), agent, body).await
    }

    /// Runs a turn to its end with `bearer` (e.g. a token naming an end user).
    pub async fn turn_as(&self, bearer: &str, agent: &str, body: Value) -> Turn {
        let response = self
            .client
            .post(format!("{}/agents/{agent}/chat", self.base()))
            .bearer_auth(bearer)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap();
        let chunks = if status == 200 {
            parse_frames(&body)
        } else {
            Vec::new()
        };
        Turn {
            status,
            headers,
            body,
            chunks,
        }
    }

    /// A user message turn on conversation `conversation`.
    pub async fn say(&self, account: &str, agent: &str, conversation: &str, text: &str) -> Turn {
        self.turn(account, agent, user_turn(conversation, text))
            .await
    }
}
