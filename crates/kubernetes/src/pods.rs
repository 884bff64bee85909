//! Runner pod lifecycle against the Kubernetes API. For a reservation key:
//! absent → create (its cache claim first) and wait until ready; ready →
//! reconnect; starting or terminating → wait; finished (scaled down by a
//! crash or eviction) → delete and create again. A pod of the same name that
//! belongs to another key is refused. Scale to zero deletes idle pods; the
//! next call's `ensure` resumes the runner as a new pod on the same claim.
//!
//! With a warm pool (`warm.rs`), a key with no pod of its name looks for a
//! claimed warm pod of its own ([`RUNNER_NAME_LABEL`]) before it claims one
//! or, when the pool has none ready, creates its pod as above. Two servers
//! claiming for one new key at once may each bind a pod: then both settle
//! on the earlier claim ([`CLAIMED_AT_ANNOTATION`], then the name), and the
//! later one is deleted by its claimer. Each may still keep a pod of its
//! own, until the idle reaper deletes one: with clocks further apart than
//! the two claims, or with persistent caches when the second finds the
//! key's cache claim already made and creates the key's own pod.

use std::future::Future;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_sandbox::{ReservationKey, SandboxError};

use crate::channel::PodChannel;
use crate::manifests::{
    self, CLAIMED_AT_ANNOTATION, LAST_USED_ANNOTATION, MANAGED_LABEL, RUNNER_LABEL,
    RUNNER_NAME_LABEL, WARM_LABEL,
};
use crate::pod_state::{api_error, delete_unless_changed, is_status, POLL};
pub use crate::pod_state::{now_rfc3339, state_of, PodState};
use crate::settings::KubernetesSettings;
use crate::warm::WarmPool;

/// Classifies `pod` (or its absence) for `key`.
pub fn classify(pod: Option<&Pod>, key: &ReservationKey) -> PodState {
    let Some(pod) = pod else {
        return PodState::Absent;
    };
    if !manifests::belongs_to(&pod.metadata, key) {
        return PodState::Foreign;
    }
    state_of(pod)
}

/// The outcome of [`RunnerPods::ensure`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredPod {
    /// The pod's name: the key's own, or a claimed warm pod's.
    pub name: String,
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
        self.ensure_in(key, None, None).await
    }

    /// [`Self::ensure`], with `pool`'s warm pods when it keeps any: the
    /// key's pod is then `known` while it lasts (a claimed warm pod found
    /// before), else the pod of its name, else a claimed warm pod of its
    /// own, else one claimed now, else one created as without a pool.
    pub(crate) async fn ensure_with(
        &self,
        key: &ReservationKey,
        known: Option<&str>,
        pool: &WarmPool,
    ) -> Result<EnsuredPod, SandboxError> {
        if pool.enabled() {
            self.ensure_in(key, known, Some(pool)).await
        } else {
            self.ensure(key).await
        }
    }

    async fn ensure_in(
        &self,
        key: &ReservationKey,
        known: Option<&str>,
        pool: Option<&WarmPool>,
    ) -> Result<EnsuredPod, SandboxError> {
        let home = manifests::pod_name(key);
        let mut name = known.unwrap_or(&home).to_owned();
        let deadline = tokio::time::Instant::now() + self.settings.ready_timeout;
        let mut created = false;
        // Whether this call looked for a claimed pod of the key already.
        let mut looked = false;
        // A pod just claimed, as patched: no need to read it again.
        let mut seen: Option<Pod> = None;
        loop {
            let pod = match seen.take() {
                Some(pod) => Some(pod),
                None => self
                    .pods
                    .get_opt(&name)
                    .await
                    .map_err(|e| api_error("reading the runner pod", e))?,
            };
            match classify(pod.as_ref(), key) {
                PodState::Ready { uid } => {
                    let channel = pod.as_ref().and_then(PodChannel::of);
                    return Ok(EnsuredPod {
                        name,
                        uid,
                        created,
                        channel,
                    });
                }
                // A claimed pod that went away: the key starts over.
                PodState::Absent | PodState::Foreign if name != home => {
                    name.clone_from(&home);
                    continue;
                }
                PodState::Absent => {
                    if pool.is_some() && !looked {
                        looked = true;
                        if let Some(found) = self.claimed(key).await? {
                            name = found;
                            continue;
                        }
                    }
                    let (started, claimed) = self.start(key, pool).await?;
                    (name, seen, created) = (started, claimed, true);
                    continue;
                }
                PodState::Finished { uid } => {
                    tracing::info!(runner = %name, pod.uid = %uid, "runner pod ended; replacing it");
                    self.delete(&name, Some(uid)).await?;
                    name.clone_from(&home);
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

    /// Starts `key`'s runner, which has no pod: its cache claim first (when
    /// persistent), then a warm pod of `pool` claimed when this is the
    /// key's first start, else its own pod created. The pod's name, and the
    /// claimed pod as patched.
    async fn start(
        &self,
        key: &ReservationKey,
        pool: Option<&WarmPool>,
    ) -> Result<(String, Option<Pod>), SandboxError> {
        let first = self.create_claim(key).await?;
        if let (Some(pool), true) = (pool, first) {
            if let Some(pod) = pool.claim(key).await {
                return self.settle(key, pod).await;
            }
        }
        self.create_pod(key).await?;
        Ok((manifests::pod_name(key), None))
    }

    /// The pod `key` runs in after claiming `mine`: `mine`, unless another
    /// server claimed a pod for the key earlier, which is then the key's
    /// and `mine` is deleted.
    async fn settle(
        &self,
        key: &ReservationKey,
        mine: Pod,
    ) -> Result<(String, Option<Pod>), SandboxError> {
        let name = mine.metadata.name.clone().unwrap_or_default();
        let Some(first) = self.claimed(key).await? else {
            return Ok((name, Some(mine)));
        };
        if first == name {
            return Ok((name, Some(mine)));
        }
        tracing::info!(runner = %manifests::pod_name(key), pod = %name, kept = %first, "another server claimed a pod for this runner first; deleting this one");
        self.delete(&name, mine.metadata.uid.clone()).await?;
        Ok((first, None))
    }

    /// The claimed warm pod `key` runs in, if any: of those bound to it and
    /// not going away, the earliest claimed (then the first by name).
    async fn claimed(&self, key: &ReservationKey) -> Result<Option<String>, SandboxError> {
        let selector = format!("{RUNNER_NAME_LABEL}={}", manifests::pod_name(key));
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| api_error("listing claimed runner pods", e))?;
        let claimed_at = |pod: &Pod| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(CLAIMED_AT_ANNOTATION))
                .and_then(|at| OffsetDateTime::parse(at, &Rfc3339).ok())
        };
        Ok(pods
            .items
            .into_iter()
            .filter(|pod| {
                manifests::belongs_to(&pod.metadata, key)
                    && pod.metadata.deletion_timestamp.is_none()
            })
            .filter_map(|pod| Some((claimed_at(&pod)?, pod.metadata.name.clone()?)))
            .min()
            .map(|(_, name)| name))
    }

    /// The name of `key`'s pod as it is now: its own, a claimed warm pod
    /// of its own when `pool` keeps any, else its own name anyway.
    pub(crate) async fn locate(
        &self,
        key: &ReservationKey,
        pool: &WarmPool,
    ) -> Result<String, SandboxError> {
        let home = manifests::pod_name(key);
        if !pool.enabled() {
            return Ok(home);
        }
        let own = self
            .pods
            .get_opt(&home)
            .await
            .map_err(|e| api_error("reading the runner pod", e))?;
        if own.is_some() {
            return Ok(home);
        }
        Ok(self.claimed(key).await?.unwrap_or(home))
    }

    /// Creates `key`'s cache claim when the cache is persistent; whether
    /// this is the key's first start (the claim is new, or there is none).
    async fn create_claim(&self, key: &ReservationKey) -> Result<bool, SandboxError> {
        let Some(claim) = manifests::cache_claim(&self.settings, key) else {
            return Ok(true);
        };
        match self.claims.create(&PostParams::default(), &claim).await {
            Ok(_) => Ok(true),
            Err(err) if is_status(&err, 409) => Ok(false),
            Err(err) => Err(api_error("creating the runner cache claim", err)),
        }
    }

    async fn create_pod(&self, key: &ReservationKey) -> Result<(), SandboxError> {
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
        delete_unless_changed(&self.pods, name, preconditions, "deleting the runner pod").await
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

    /// Deletes every runner pod (warm pods are not runners yet) whose last
    /// call is older than the idle timeout, except those named in `busy` and those whose worker still
    /// runs calls (`worker_busy(name)`: detached calls outlive the request
    /// that launched them), which are marked used now instead. The delete is
    /// conditional on the pod's resource version, so a pod touched meanwhile
    /// (by another server) survives. Returns the pod names deleted.
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
            "{}={},{}={},{WARM_LABEL}!=true",
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
