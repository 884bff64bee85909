//! The protected MCP server helper: a request without a bearer token is
//! refused before MCP; rmcp's client with end user ada's access token lists
//! the one tool and calls it as ada; a wrong token cannot even initialize.
#![allow(clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rmcp::model::{CallToolRequestParams, ErrorCode};
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use toolserver_testsupport::protected_mcp::ProtectedMcpServer;
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

/// An access token of end user `user`, through the authorization code
/// grant with PKCE.
async fn access_token(server: &OAuthServer, user: &str) -> String {
    let (verifier, challenge) = pkce();
    let mut authorize = url::Url::parse(&server.authorization_url()).expect("a URL");
    authorize
        .query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", CLIENT_ID)
        .append_pair("redirect_uri", REDIRECT_URI)
        .append_pair("scope", "read")
        .append_pair("state", "st4te")
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256");
    let location = server.consent(authorize.as_str(), user).await;
    let code = param(&location, "code").unwrap_or_else(|| panic!("{location}"));
    let response = reqwest::Client::new()
        .post(server.token_url())
        .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", &verifier),
        ])
        .send()
        .await
        .expect("the token endpoint answers");
    assert_eq!(response.status(), 200);
    let granted: Value = response.json().await.expect("a JSON answer");
    granted["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{granted}"))
        .to_owned()
}

/// rmcp's client transport to `url` with `token` as bearer.
fn transport(url: &str, token: &str) -> StreamableHttpClientTransport<reqwest_mcp::Client> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
    StreamableHttpClientTransport::with_client(reqwest_mcp::Client::new(), config)
}

#[tokio::test]
async fn only_bearers_of_the_oauth_servers_tokens_reach_mcp_as_their_user() {
    let oauth = OAuthServer::start(CLIENT_ID, CLIENT_SECRET, 60).await;
    let token = access_token(&oauth, "ada").await;
    let mcp = ProtectedMcpServer::start(&oauth.resource_url()).await;
    assert!(mcp.url().starts_with("http://127.0.0.1:"), "{}", mcp.url());
    assert!(mcp.url().ends_with("/mcp"), "{}", mcp.url());

    // No Authorization: refused before MCP.
    let anonymous = reqwest::Client::new()
        .post(mcp.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .expect("the MCP server answers");
    assert_eq!(anonymous.status(), 401);
    assert_eq!(
        anonymous
            .headers()
            .get("www-authenticate")
            .and_then(|value| value.to_str().ok()),
        Some(r#"Bearer error="invalid_token""#)
    );
    assert_eq!(
        anonymous.json::<Value>().await.expect("a JSON answer"),
        json!({"error": "invalid_token"})
    );
    assert_eq!(mcp.refused(), 1);

    // Ada's token: the one tool, called as ada.
    let session =
        ().serve(transport(&mcp.url(), &token))
            .await
            .expect("the client connects with ada's token");
    let tools = session.list_all_tools().await.expect("the tools list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["whoami"]);
    let result = session
        .call_tool(CallToolRequestParams::new("whoami"))
        .await
        .expect("whoami answers");
    assert_eq!(result.structured_content, Some(json!({"user": "ada"})));
    assert_eq!(result.is_error, Some(false));
    let unknown = session
        .call_tool(CallToolRequestParams::new("nope"))
        .await
        .expect_err("an unknown tool is an error");
    match unknown {
        ServiceError::McpError(error) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => panic!("not an MCP error: {other}"),
    }
    let _ = session.cancel().await;
    assert_eq!(mcp.calls(), ["ada"]);
    assert!(mcp.accepted_tokens().contains(&token));
    assert_eq!(mcp.accepted_tokens().len(), 1);

    // A wrong token: initialize is refused.
    let refused_before = mcp.refused();
    let wrong =
        ().serve(transport(&mcp.url(), "not-a-token"))
            .await
            .expect_err("a wrong token does not connect");
    assert_eq!(
        wrong.auth_challenge(),
        Some(r#"Bearer error="invalid_token""#),
        "{wrong}"
    );
    assert!(mcp.refused() > refused_before);
    assert_eq!(mcp.calls(), ["ada"]);
}
