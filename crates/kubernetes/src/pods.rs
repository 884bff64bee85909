//! Runner pod lifecycle against the Kubernetes API. For a reservation key:
//! absent → create (its cache claim first) and wait until ready; ready →
//! reconnect; starting or terminating → wait; finished (scaled down by a
//! crash or eviction) → delete and create again. A pod of the same name that
//! belongs to another key is refused. Scale to zero deletes idle pods; the
//! next call's `ensure` resumes the runner as a new pod on the same claim.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_sandbox::{ReservationKey, SandboxError};

use crate::channel::PodChannel;
use crate::manifests::{self, LAST_USED_ANNOTATION, MANAGED_LABEL, RUNNER_LABEL};
use crate::names;
use crate::settings::KubernetesSettings;

/// Pause between looks at a pod that is starting or going away.
const POLL: Duration = Duration::from_millis(250);

/// Container waiting reasons that will not resolve by waiting.
const FATAL_WAITING: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// What a pod of the runner's name is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// There is none.
    Absent,
    /// Running and ready; `uid` identifies this incarnation.
    Ready {
        /// The pod's UID.
        uid: String,
    },
    /// Scheduled or starting.
    Starting,
    /// Being deleted.
    Terminating,
    /// Ended (`Succeeded`/`Failed`) or its container is down; it must be replaced.
    Finished {
        /// The pod's UID.
        uid: String,
    },
    /// Cannot start without a change (bad image, bad config).
    Broken {
        /// Why.
        reason: String,
    },
    /// A pod of that name that does not belong to the key.
    Foreign,
}

/// Classifies `pod` (or its absence) for `key`.
pub fn classify(pod: Option<&Pod>, key: &ReservationKey) -> PodState {
    let Some(pod) = pod else {
        return PodState::Absent;
    };
    if !manifests::belongs_to(&pod.metadata, key) {
        return PodState::Foreign;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if matches!(phase, "Succeeded" | "Failed") {
        return PodState::Finished { uid };
    }
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == names::CONTAINER));
    let waiting = container
        .and_then(|c| c.state.as_ref())
        .and_then(|state| state.waiting.as_ref());
    if let Some(reason) = waiting.and_then(|w| w.reason.as_deref()) {
        if FATAL_WAITING.contains(&reason) {
            let message = waiting.and_then(|w| w.message.clone()).unwrap_or_default();
            return PodState::Broken {
                reason: format!("{reason}: {message}"),
            };
        }
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|all| all.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if phase == "Running" && ready {
        PodState::Ready { uid }
    } else {
        PodState::Starting
    }
}

fn api_error(context: &str, err: kube::Error) -> SandboxError {
    SandboxError::Transport(format!("{context}: {err}"))
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// The current time as the last-used annotation holds it.
pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// The outcome of [`RunnerPods::ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredPod {
    /// The pod's UID.
    pub uid: String,
    /// Whether this call created it (first use or resume).
    pub created: bool,
    /// Its direct channel, when its spec has one.
    pub channel: Option<PodChannel>,
}

/// Creates, finds, resumes and deletes runner pods in one namespace.
#[derive(Clone)]
pub struct RunnerPods {
    pods: Api<Pod>,
    claims: Api<PersistentVolumeClaim>,
    settings: KubernetesSettings,
}

impl RunnerPods {
    /// Runner pods of `settings.namespace`, through `client`.
    pub fn new(client: Client, settings: KubernetesSettings) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), &settings.namespace),
            claims: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    /// The pods API of the runner namespace.
    pub fn api(&self) -> &Api<Pod> {
        &self.pods
    }

    /// Makes sure `key`'s pod exists and is ready, creating or replacing it
    /// as needed, within the ready timeout.
    pub async fn ensure(&self, key: &ReservationKey) -> Result<EnsuredPod, SandboxError> {
        let name = manifests::pod_name(key);
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        let mut created = false;
        loop {
            let pod = self
                .pods
                .get_opt(&name)
                .await
                .map_err(|e| api_error("reading the runner pod", e))?;
            match classify(pod.as_ref(), key) {
                PodState::Ready { uid } => {
                    let channel = pod.as_ref().and_then(PodChannel::of);
                    return Ok(EnsuredPod {
                        uid,
                        created,
                        channel,
                    });
                }
                PodState::Absent => {
                    self.create(key).await?;
                    created = true;
                    continue;
                }
                PodState::Finished { uid } => {
                    tracing::info!(runner = %name, pod.uid = %uid, "runner pod ended; replacing it");
                    self.delete(&name, Some(uid)).await?;
                }
                PodState::Broken { reason } => {
                    return Err(SandboxError::Start(format!(
                        "runner pod {name} cannot start: {reason}"
                    )))
                }
                PodState::Foreign => {
                    return Err(SandboxError::Start(format!(
                        "a pod named {name} exists but belongs to another runner"
                    )))
                }
                PodState::Starting | PodState::Terminating => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SandboxError::Start(format!(
                    "runner pod {name} was not ready within {} s",
                    self.settings.ready_timeout.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn create(&self, key: &ReservationKey) -> Result<(), SandboxError> {
        if let Some(claim) = manifests::cache_claim(&self.settings, key) {
            match self.claims.create(&PostParams::default(), &claim).await {
                Ok(_) => {}
                Err(err) if is_status(&err, 409) => {}
                Err(err) => return Err(api_error("creating the runner cache claim", err)),
            }
        }
        let secret = PodChannel::new_secret();
        let pod = manifests::runner_pod(&self.settings, key, &now_rfc3339(), &secret);
        match self.pods.create(&PostParams::default(), &pod).await {
            Ok(_) => {
                tracing::info!(runner = %manifests::pod_name(key), "runner pod created");
                Ok(())
            }
            // Another server created it first; the next look finds it.
            Err(err) if is_status(&err, 409) => Ok(()),
            Err(err) => Err(api_error("creating the runner pod", err)),
        }
    }

    /// Deletes pod `name` (only the incarnation `uid`, when given).
    pub async fn delete(&self, name: &str, uid: Option<String>) -> Result<(), SandboxError> {
        self.delete_with(
            name,
            Preconditions {
                uid,
                resource_version: None,
            },
        )
        .await
        .map(|_| ())
    }

    /// Deletes pod `name` under `preconditions`; `false` if it was gone or
    /// had changed (a 404 or 409), so nothing was deleted.
    async fn delete_with(
        &self,
        name: &str,
        preconditions: Preconditions,
    ) -> Result<bool, SandboxError> {
        let params = DeleteParams {
            preconditions: Some(preconditions),
            ..DeleteParams::default()
        };
        match self.pods.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(err) if is_status(&err, 404) || is_status(&err, 409) => Ok(false),
            Err(err) => Err(api_error("deleting the runner pod", err)),
        }
    }

    /// Records a call on pod `name` (the idle clock restarts).
    pub async fn touch(&self, name: &str) -> Result<(), SandboxError> {
        let patch =
            json!({ "metadata": { "annotations": { LAST_USED_ANNOTATION: now_rfc3339() } } });
        match self
            .pods
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if is_status(&err, 404) => Ok(()),
            Err(err) => Err(api_error("marking the runner pod used", err)),
        }
    }

    /// Deletes every runner pod whose last call is older than the idle
    /// timeout, except those named in `busy` and those whose worker still
    /// runs calls (`worker_busy(name)`: detached calls outlive the request
    /// that launched them), which are marked used now instead. The delete is
    /// conditional on the pod's resource version, so a pod touched meanwhile
    /// (by another server) survives. Returns the names deleted.
    pub async fn reap_idle<F, Fut>(
        &self,
        busy: &[String],
        worker_busy: F,
    ) -> Result<Vec<String>, SandboxError>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = bool>,
    {
        let selector = format!(
            "{}={},{}={}",
            RUNNER_LABEL.0, RUNNER_LABEL.1, MANAGED_LABEL.0, MANAGED_LABEL.1
        );
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| api_error("listing runner pods", e))?;
        let now = OffsetDateTime::now_utc();
        let mut reaped = Vec::new();
        for pod in pods.items {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            if busy.contains(&name) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let last_used = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LAST_USED_ANNOTATION))
                .and_then(|at| OffsetDateTime::parse(at, &Rfc3339).ok());
            let idle = last_used.is_none_or(|at| now - at >= self.settings.idle_timeout);
            if !idle {
                continue;
            }
            if worker_busy(name.clone()).await {
                tracing::debug!(runner = %name, "idle runner pod still runs calls; kept");
                if let Err(err) = self.touch(&name).await {
                    tracing::warn!(runner = %name, error = %err, "could not mark a busy runner used");
                }
                continue;
            }
            let preconditions = Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
            };
            if self.delete_with(&name, preconditions).await? {
                tracing::info!(runner = %name, "runner idle; pod deleted (scaled to zero)");
                reaped.push(name);
            }
        }
        Ok(reaped)
    }
}
