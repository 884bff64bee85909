//! A warm worker's warm-up: once it listens, and before it joins the pool,
//! the pool sends it one call of a built-in bundle over its real socket,
//! so the first call a tenant sends finds Node's module loader, its HTTP
//! server and the worker's call path already compiled. The bundle is the
//! server's own and runs no tenant's code; what the call wrote (the
//! bundle's copy in the worker's cache directory) is removed before the
//! worker can be claimed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Map};

use super::runner::WORKER_SOCKET;
use crate::{BundleRef, Frame, InvokeRequest, SandboxError, WorkerClient};

/// The warm-up bundle: answers its input.
#[cfg(test)]
const BUNDLE: &str = "export default { async execute(ctx, input) { return { warm: input }; } };";
/// The bundle in base64, as it travels inline.
const BUNDLE_BASE64: &str = "ZXhwb3J0IGRlZmF1bHQgeyBhc3luYyBleGVjdXRlKGN0eCwgaW5wdXQpIHsgcmV0dXJuIHsgd2FybTogaW5wdXQgfTsgfSB9Ow==";
/// The bundle's SHA-256, in hex: its directory in the worker's cache.
const BUNDLE_SHA256: &str = "f79459e75149b5bd7b0a743a83241afb1332d2d866f6c515c806f4ac29b986d7";

/// How long the warm-up call may take.
const DEADLINE: Duration = Duration::from_secs(10);

/// Sends the worker listening in `dir` its warm-up call and removes what
/// the call left in its cache; `Err` when it did not answer as it should.
pub(super) async fn warm_up(dir: &Path) -> Result<(), SandboxError> {
    let answered = tokio::time::timeout(DEADLINE, call(dir)).await;
    let removed = std::fs::remove_dir_all(dir.join("cache").join(BUNDLE_SHA256));
    match answered {
        Err(_) => return Err(SandboxError::Start("the warm-up call timed out".into())),
        Ok(Err(err)) => return Err(err),
        Ok(Ok(())) => {}
    }
    match removed {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(SandboxError::Start(
            format!("removing the warm-up bundle: {err}"),
        )),
        _ => Ok(()),
    }
}

/// The warm-up call, to its final frame.
async fn call(dir: &Path) -> Result<(), SandboxError> {
    let mut frames = WorkerClient::new(dir.join(WORKER_SOCKET))
        .invoke(&request())
        .await?;
    while let Some(frame) = frames.recv().await {
        match frame {
            Frame::Final { .. } => return Ok(()),
            Frame::Log { .. } => {}
            other => {
                return Err(SandboxError::Start(format!(
                    "the warm-up call answered {other:?}"
                )))
            }
        }
    }
    Err(SandboxError::Start(
        "the warm-up call ended without an answer".into(),
    ))
}

fn request() -> InvokeRequest {
    InvokeRequest {
        call_id: "warm-up".into(),
        idempotency_key: "warm-up".into(),
        input: json!({ "warm": true }),
        config: Map::new(),
        bundle: BundleRef {
            sha256: BUNDLE_SHA256.into(),
            inline: Some(BUNDLE_BASE64.into()),
            url: None,
        },
        deadline_ms: DEADLINE.as_millis() as u64,
        max_output_bytes: 1024,
        async_meta: None,
        egress_allow: None,
        egress_token: None,
        fetch: None,
        traceparent: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_travels_as_itself_under_its_own_hash() {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(BUNDLE_BASE64)
            .expect("base64");
        assert_eq!(decoded, BUNDLE.as_bytes());
        assert_eq!(
            toolserver_domain::Sha256Digest::of(BUNDLE.as_bytes()).to_hex(),
            BUNDLE_SHA256
        );
    }
}
