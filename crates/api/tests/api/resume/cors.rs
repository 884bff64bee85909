//! CORS: preflights answered for allowed origins only, and a real request
//! from an allowed origin can read the stream headers.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;
use toolserver_api::cors::CorsSettings;
use toolserver_api::ApiSettings;
use toolserver_testsupport::Reply;

use crate::app::{spawn_live_app, TestApp};
use crate::support::*;

#[sqlx::test(migrations = "../../migrations")]
async fn cors_answers_preflights_for_allowed_origins_only(pool: PgPool) {
    let cors = CorsSettings::parse(
        &["http://app.example".to_owned()],
        &["GET".to_owned(), "POST".to_owned()],
        &["authorization".to_owned(), "content-type".to_owned()],
        false,
        Duration::from_secs(600),
    )
    .unwrap();
    let settings = ApiSettings {
        cors,
        ..ApiSettings::default()
    };
    let app = TestApp::live(pool.clone()).api(settings).spawn().await;
    let preflight = |origin: &'static str| {
        app.client
            .request(reqwest::Method::OPTIONS, format!("{}/agents", app.base()))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let allowed = preflight("http://app.example").await.unwrap();
    assert!(allowed.status().is_success(), "{}", allowed.status());
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "http://app.example"
    );
    let methods = allowed.headers()["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(methods.contains("POST"), "{methods}");
    let refused = preflight("http://evil.example").await.unwrap();
    assert!(refused
        .headers()
        .get("access-control-allow-origin")
        .is_none());

    // A real request from the allowed origin can read the stream headers.
    app.model.script("cors", vec![Reply::text("hi")]);
    let agent = app.agent(ACCOUNT_A, "cors", json!({})).await;
    let response = app
        .client
        .post(format!("{}/agents/{agent}/chat", app.base()))
        .bearer_auth(token(ACCOUNT_A))
        .header("origin", "http://app.example")
        .json(&user_turn("conv-cors", "hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        "http://app.example"
    );
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        exposed.contains("x-workflow-stream-tail-index"),
        "{exposed}"
    );
    assert!(!parse_frames(&response.text().await.unwrap()).is_empty());

    // Without CORS settings, no origin is allowed.
    let plain = spawn_live_app(pool).await;
    let preflight = plain
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/agents", plain.base()))
        .header("origin", "http://app.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(preflight
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}
