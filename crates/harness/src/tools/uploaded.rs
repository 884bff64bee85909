//! Uploaded tools: each call runs on the tool's runner through the executor,
//! with the agent's options merged over the tool's `defaultConfig`.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Map, Value};
use toolserver_bundles::BundleStore;
use toolserver_domain::AccountId;
use toolserver_sandbox::{Executor, Frame, ReservationKey};
use toolserver_store::ToolRecord;

use super::{Failure, FailureKind, Invocation, ToolEvent, ToolEvents, ToolImpl};
use crate::fetch_grant::FetchMinter;
use crate::runner_call::{build_request, CallSpec, RunnerCall, RunnerCallSettings};

/// An account's uploaded tool, bound to its runner.
#[derive(Clone)]
pub struct UploadedTool {
    pub(super) account: AccountId,
    pub(super) record: ToolRecord,
    pub(super) options: Map<String, Value>,
    pub(super) executor: Arc<dyn Executor>,
    pub(super) bundles: Arc<dyn BundleStore>,
    pub(super) settings: RunnerCallSettings,
    pub(super) fetch: Option<FetchMinter>,
    /// The end user calls act for (`""`: the account).
    pub(super) user: String,
}

impl ToolImpl for UploadedTool {
    fn call(&self, invocation: Invocation) -> ToolEvents {
        let tool = self.clone();
        futures::stream::once(async move { tool.start(invocation, None).await })
            .flatten()
            .boxed()
    }

    fn detachable(&self) -> bool {
        true
    }

    fn call_detached(&self, invocation: Invocation, async_meta: Value) -> Option<ToolEvents> {
        let tool = self.clone();
        let events =
            futures::stream::once(async move { tool.start(invocation, Some(async_meta)).await });
        Some(events.flatten().boxed())
    }

    fn connection(&self) -> Option<&str> {
        self.record.connection.as_deref()
    }

    fn for_user(&self, user: &str) -> Option<Arc<dyn ToolImpl>> {
        self.record.connection.as_ref()?;
        Some(Arc::new(Self {
            user: user.to_owned(),
            ..self.clone()
        }))
    }
}

impl UploadedTool {
    async fn start(self, invocation: Invocation, async_meta: Option<Value>) -> ToolEvents {
        // A detached call is known by its result id, so it can be stopped later.
        let call_id = async_meta
            .as_ref()
            .and_then(|meta| meta["resultId"].as_str())
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
        let spec = CallSpec {
            call_id: call_id.clone(),
            idempotency_key: invocation.idempotency_key,
            input: invocation.input,
            options: self.options.clone(),
            timeout: invocation.timeout,
            async_meta,
            fetch: self.fetch.as_ref().map(|minter| {
                let grantee = (&self.account, self.record.id, self.user.as_str());
                minter.access(grantee, invocation.timeout)
            }),
        };
        let request =
            match build_request(self.bundles.as_ref(), &self.settings, &self.record, spec).await {
                Ok(request) => request,
                Err(err) => {
                    let message = format!("the tool's bundle is unavailable: {err}");
                    return failed(Failure::new(FailureKind::Unreachable, message));
                }
            };
        let key = ReservationKey::new(self.account.clone(), self.record.id);
        let call = match RunnerCall::start(self.executor.clone(), key, request).await {
            Ok(call) => call,
            Err(err) => {
                let message = format!("the tool's runner is unavailable: {err}");
                return failed(Failure::new(FailureKind::Unreachable, message));
            }
        };
        futures::stream::unfold((call, None::<Value>), |(mut call, mut last)| async move {
            let event = match call.next().await? {
                Frame::Log { level, message } => ToolEvent::Log { level, message },
                Frame::Chunk { value } => {
                    last = Some(value.clone());
                    ToolEvent::Snapshot(value)
                }
                Frame::End => ToolEvent::Output(last.take().unwrap_or(Value::Null)),
                Frame::Final { value } => ToolEvent::Output(value),
                Frame::Error { name, message } => ToolEvent::Failed(Failure::new(
                    FailureKind::of_runner_error(&name),
                    format!("{name}: {message}"),
                )),
                Frame::Launched => ToolEvent::Launched,
            };
            Some((event, (call, last)))
        })
        .boxed()
    }
}

fn failed(failure: Failure) -> ToolEvents {
    futures::stream::once(async move { ToolEvent::Failed(failure) }).boxed()
}
