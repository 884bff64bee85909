//! Another account's tool is indistinguishable from a missing one on every route.

use axum::http::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use crate::app::spawn_app;
use crate::support::*;

#[sqlx::test(migrations = "../../migrations")]
async fn other_accounts_get_404_on_every_tool_route(pool: PgPool) {
    let app = spawn_app(pool).await;
    let owned = app.create(ACCOUNT_A, "private_tool", BUNDLE).await;
    let id = owned["toolId"].as_str().unwrap();
    let base = format!("/accounts/me/tools/{id}");
    let missing = format!(
        "/accounts/me/tools/{}",
        toolserver_domain::ToolId::generate()
    );
    for path in [&base, &missing] {
        let attempts = [
            (Method::GET, path.clone(), None),
            (
                Method::PATCH,
                path.clone(),
                Some(json!({"description": "hijacked"})),
            ),
            (Method::DELETE, path.clone(), None),
            (Method::GET, format!("{path}/bundle"), None),
            (Method::GET, format!("{path}/bundle-url"), None),
        ];
        for (method, route, body) in attempts {
            let reply = app.call(method.clone(), &route, ACCOUNT_B, body).await;
            assert_eq!(reply.status, StatusCode::NOT_FOUND, "{method} {route}");
            assert_eq!(reply.code(), "not_found");
            assert_eq!(
                reply.message(),
                "tool not found",
                "same answer as a missing tool"
            );
        }
    }
    let listed = app.get("/accounts/me/tools", ACCOUNT_B).await.json();
    assert_eq!(listed["tools"], json!([]));
    let still = app.get(&base, ACCOUNT_A).await;
    assert_eq!(still.json(), owned, "untouched by the other account");
}

#[sqlx::test(migrations = "../../migrations")]
async fn same_name_in_two_accounts_is_two_tools(pool: PgPool) {
    let app = spawn_app(pool).await;
    let a = app.create(ACCOUNT_A, "shared_name", BUNDLE).await;
    let b = app.create(ACCOUNT_B, "shared_name", BUNDLE).await;
    assert_ne!(a["toolId"], b["toolId"]);
}

#[sqlx::test(migrations = "../../migrations")]
async fn malformed_tool_ids_are_not_found(pool: PgPool) {
    let app = spawn_app(pool).await;
    for id in ["nope", "tool_", "tool_zz", "123"] {
        let reply = app
            .get(&format!("/accounts/me/tools/{id}"), ACCOUNT_A)
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{id}");
    }
}
