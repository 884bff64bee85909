//! One call of an uploaded tool on its runner: building the request (bundle
//! inline or by signed URL, merged config) and a handle that cancels the call
//! on the runner when dropped before its end.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value};
use toolserver_bundles::{BundleError, BundleStore};
use toolserver_sandbox::{
    BundleRef, Executor, FetchAccess, Frame, FrameStream, InvokeRequest, ReservationKey,
};
use toolserver_store::{ToolBody, ToolRecord};
use tracing::Instrument;

use crate::trace_context;

/// How bundles travel to runners, and output limits.
#[derive(Debug, Clone)]
pub struct RunnerCallSettings {
    /// Bundles up to this size travel inline; larger ones by signed URL.
    pub inline_bundle_max_bytes: u64,
    /// Lifetime of signed bundle URLs.
    pub signed_url_ttl: Duration,
    /// Largest serialized output of one call.
    pub max_output_bytes: u64,
}

impl RunnerCallSettings {
    /// The settings' defaults.
    pub const DEFAULT: Self = Self {
        inline_bundle_max_bytes: 64 * 1024,
        signed_url_ttl: Duration::from_secs(300),
        max_output_bytes: 4 * 1024 * 1024,
    };
}

/// What to run.
pub struct CallSpec {
    /// Call id (unique per call).
    pub call_id: String,
    /// Passed to the tool as `ctx.idempotencyKey`.
    pub idempotency_key: String,
    /// The input, already validated.
    pub input: Value,
    /// Options merged over the tool's `defaultConfig`.
    pub options: Map<String, Value>,
    /// Deadline of the call.
    pub timeout: Duration,
    /// Detached-completion metadata, when the call runs in the background.
    pub async_meta: Option<Value>,
    /// Where the tool's `ctx.fetch` goes, if it is offered.
    pub fetch: Option<FetchAccess>,
}

/// Builds the runner request for `tool`.
pub async fn build_request(
    bundles: &dyn BundleStore,
    settings: &RunnerCallSettings,
    tool: &ToolRecord,
    spec: CallSpec,
) -> Result<InvokeRequest, BundleError> {
    let ToolBody::Bundle { sha256, size } = tool.body else {
        // An HTTP tool has no bundle: the server makes its request itself.
        return Err(BundleError::NotFound);
    };
    let bundle = if (size as u64) <= settings.inline_bundle_max_bytes {
        let bytes = bundles.get(&sha256).await?;
        BundleRef {
            sha256: sha256.to_hex(),
            inline: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            url: None,
        }
    } else {
        let signed = bundles.signed_url(&sha256, settings.signed_url_ttl).await?;
        BundleRef {
            sha256: sha256.to_hex(),
            inline: None,
            url: Some(signed.url.to_string()),
        }
    };
    let config = tool
        .default_config
        .merged_with(&spec.options)
        .as_map()
        .clone();
    Ok(InvokeRequest {
        call_id: spec.call_id,
        idempotency_key: spec.idempotency_key,
        input: spec.input,
        config,
        bundle,
        deadline_ms: spec.timeout.as_millis() as u64,
        max_output_bytes: settings.max_output_bytes,
        async_meta: spec.async_meta,
        egress_allow: tool.egress_allow.clone(),
        egress_token: None,
        traceparent: None,
        fetch: spec.fetch,
    })
}

/// A call in progress; cancelled on the runner if dropped before its end.
pub struct RunnerCall {
    frames: FrameStream,
    executor: Arc<dyn Executor>,
    key: ReservationKey,
    call_id: String,
    finished: bool,
    /// The call's `runner_call` span, open until the call is dropped.
    span: tracing::Span,
}

impl RunnerCall {
    /// Starts `request` on the runner of `key`.
    pub async fn start(
        executor: Arc<dyn Executor>,
        key: ReservationKey,
        mut request: InvokeRequest,
    ) -> Result<Self, toolserver_sandbox::SandboxError> {
        let call_id = request.call_id.clone();
        let span = tracing::info_span!("runner_call", call.id = %call_id, runner = %key);
        request.traceparent = trace_context::of(&span).remove("traceparent");
        let frames = executor
            .invoke(&key, request)
            .instrument(span.clone())
            .await?;
        Ok(Self {
            frames,
            executor,
            key,
            call_id,
            finished: false,
            span,
        })
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The next frame; `None` after the terminal one.
    pub async fn next(&mut self) -> Option<Frame> {
        if self.finished {
            return None;
        }
        let frame = self.frames.recv().instrument(self.span.clone()).await;
        match &frame {
            Some(frame) if frame.is_terminal() => self.finished = true,
            None => self.finished = true,
            Some(_) => {}
        }
        frame
    }
}

impl Drop for RunnerCall {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (executor, key, call_id) = (
            self.executor.clone(),
            self.key.clone(),
            self.call_id.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                tracing::info!(call.id = %call_id, "call abandoned; cancelling it on the runner");
                let _ = executor.cancel(&key, &call_id).await;
            });
        }
    }
}
