//! A mocked Kubernetes API: a kube `Client` on a tower-test service, and a
//! verifier that plays out the expected requests in order, checking method,
//! path and body.

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle, SendResponse};

/// The API side of a mocked client.
pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// One request the client made.
pub struct Call {
    pub body: Value,
    respond: SendResponse<Response<Body>>,
}

impl Call {
    /// Answers with `status` and a JSON body.
    pub fn reply(self, status: u16, body: Value) {
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Answers with the `metav1.Status` of a failed request.
    pub fn fail(self, code: u16, reason: &str) {
        self.reply(
            code,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": reason, "reason": reason, "code": code}),
        );
    }
}

/// A client whose requests arrive at the returned [`ApiServer`].
pub fn mocked() -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServer { handle })
}

impl ApiServer {
    /// The next request, which must be `method` on `path` (path and query).
    pub async fn expect(&mut self, method: &str, path: &str) -> Call {
        let (request, respond) = self
            .handle
            .next_request()
            .await
            .unwrap_or_else(|| panic!("expected {method} {path}, but the client is gone"));
        let uri = request.uri().clone();
        let actual = uri.path_and_query().map(|p| p.as_str()).unwrap_or("");
        assert_eq!(
            (request.method().as_str(), actual),
            (method, path),
            "unexpected request"
        );
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Call { body, respond }
    }
}
