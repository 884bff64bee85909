//! A webhook receiver on loopback keeping every post's body, for the
//! announcements tests wait on.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value;
use toolserver_testsupport::wait::until;

/// A webhook receiver keeping every post's body.
#[derive(Clone, Default)]
pub struct Receiver {
    posts: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    /// Starts one; it and the URL to post to.
    pub async fn start() -> (Self, String) {
        let receiver = Self::default();
        let app = Router::new()
            .route("/hooks", post(take))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    /// The posts, once there are `count`.
    pub async fn posts(&self, count: usize) -> Vec<Value> {
        until("the webhook to be posted", || async {
            self.posts.lock().unwrap().len() >= count
        })
        .await;
        self.posts.lock().unwrap().clone()
    }
}

async fn take(State(receiver): State<Receiver>, Json(body): Json<Value>) -> StatusCode {
    receiver.posts.lock().unwrap().push(body);
    StatusCode::OK
}
