//! Warm pods against the Kubernetes API: made, waited for, vouched for,
//! claimed under a resource-version precondition, and judged abandoned.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_sandbox::{ReservationKey, SandboxError};

use crate::channel::PodChannel;
use crate::manifests::{self, HEARTBEAT_ANNOTATION, MANAGED_LABEL, REPLICA_LABEL, WARM_LABEL};
use crate::pod_state::{
    api_error, delete_unless_changed, is_status, now_rfc3339, state_of, PodState, POLL,
};
use crate::scripts;
use crate::settings::KubernetesSettings;

/// The outcome of [`WarmPods::claim`].
#[derive(Debug)]
pub enum Claim {
    /// The pod is the key's now, as patched.
    Won(Box<Pod>),
    /// The pod is gone.
    Gone,
    /// The pod changed since the resource version given (another claim, a
    /// heartbeat, a status update): nothing was patched.
    Changed,
}

/// Warm pods of one namespace.
#[derive(Clone)]
pub struct WarmPods {
    pods: Api<Pod>,
    settings: KubernetesSettings,
}

impl WarmPods {
    /// Warm pods through `pods`, made as `settings` say.
    pub fn new(pods: Api<Pod>, settings: KubernetesSettings) -> Self {
        Self { pods, settings }
    }

    /// Creates warm pod `name` for the pool of server `replica`.
    pub async fn create(&self, name: &str, replica: &str) -> Result<(), SandboxError> {
        let secret = PodChannel::new_secret();
        let pod = manifests::warm_pod(&self.settings, name, replica, &now_rfc3339(), &secret);
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .map(|_| ())
            .map_err(|e| api_error("creating a warm pod", e))
    }

    /// Waits until warm pod `name` is ready, within the ready timeout; its
    /// resource version then.
    pub async fn wait_ready(&self, name: &str) -> Result<String, SandboxError> {
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        loop {
            let Some(pod) = self.get(name).await? else {
                return Err(SandboxError::Start(format!("warm pod {name} is gone")));
            };
            match state_of(&pod) {
                PodState::Ready { .. } => return Ok(resource_version(&pod)),
                PodState::Starting => {}
                PodState::Broken { reason } => {
                    return Err(SandboxError::Start(format!(
                        "warm pod {name} cannot start: {reason}"
                    )))
                }
                other => {
                    return Err(SandboxError::Start(format!(
                        "warm pod {name} did not start: {other:?}"
                    )))
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SandboxError::Start(format!(
                    "warm pod {name} was not ready within {} s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Creates warm pod `name` of `replica`, waits until it is ready and
    /// starts its worker; its resource version then.
    pub(crate) async fn boot(&self, name: &str, replica: &str) -> Result<String, SandboxError> {
        self.create(name, replica).await?;
        let version = self.wait_ready(name).await?;
        scripts::launch(&self.pods, &self.settings, name).await?;
        Ok(version)
    }

    /// Pod `name`, if there is one.
    pub async fn get(&self, name: &str) -> Result<Option<Pod>, SandboxError> {
        self.pods
            .get_opt(name)
            .await
            .map_err(|e| api_error("reading a warm pod", e))
    }

    /// Binds warm pod `name` to `key` for good, provided it is still at
    /// `resource_version` ([`manifests::claim_patch`]).
    pub async fn claim(
        &self,
        name: &str,
        resource_version: &str,
        key: &ReservationKey,
    ) -> Result<Claim, SandboxError> {
        let patch = manifests::claim_patch(key, resource_version, &now_rfc3339());
        match self
            .pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(pod) => Ok(Claim::Won(Box::new(pod))),
            Err(err) if is_status(&err, 404) => Ok(Claim::Gone),
            Err(err) if is_status(&err, 409) => Ok(Claim::Changed),
            Err(err) => Err(api_error("claiming a warm pod", err)),
        }
    }

    /// Every warm pod of the namespace, of any server.
    pub async fn list(&self) -> Result<Vec<Pod>, SandboxError> {
        let selector = format!("{}={},{WARM_LABEL}=true", MANAGED_LABEL.0, MANAGED_LABEL.1);
        self.pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|list| list.items)
            .map_err(|e| api_error("listing warm pods", e))
    }

    /// Vouches for warm pod `name` now; the pod as patched, `None` when it
    /// is gone.
    pub async fn heartbeat(&self, name: &str) -> Result<Option<Pod>, SandboxError> {
        let patch =
            json!({ "metadata": { "annotations": { HEARTBEAT_ANNOTATION: now_rfc3339() } } });
        match self
            .pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(pod) => Ok(Some(pod)),
            Err(err) if is_status(&err, 404) => Ok(None),
            Err(err) => Err(api_error("vouching for a warm pod", err)),
        }
    }

    /// Deletes pod `name` under `preconditions`; `false` when it was gone or
    /// had changed, so nothing was deleted.
    pub async fn delete(
        &self,
        name: &str,
        preconditions: Preconditions,
    ) -> Result<bool, SandboxError> {
        delete_unless_changed(&self.pods, name, preconditions, "deleting a warm pod").await
    }
}

/// The pod's resource version ("" when it has none).
pub(crate) fn resource_version(pod: &Pod) -> String {
    pod.metadata.resource_version.clone().unwrap_or_default()
}

/// Whether `pod` is a warm pod, unclaimed, of the pool of `replica`.
pub(crate) fn is_warm_of(pod: &Pod, replica: &str) -> bool {
    let label = |name: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(name))
            .map(String::as_str)
    };
    label(WARM_LABEL) == Some("true") && label(REPLICA_LABEL) == Some(replica)
}

/// Whether warm pod `pod` is abandoned at `now`: no server vouched for it
/// within `stale` (its heartbeat is older, or missing).
pub fn abandoned(pod: &Pod, now: OffsetDateTime, stale: Duration) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(HEARTBEAT_ANNOTATION))
        .and_then(|at| OffsetDateTime::parse(at, &Rfc3339).ok())
        .is_none_or(|at| now - at >= stale)
}
