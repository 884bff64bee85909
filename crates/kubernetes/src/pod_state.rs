//! What every user of the pods API shares: what a pod is doing, how the
//! API's errors read, the pause between looks at a pod, and a delete that
//! gives way to any change since the pod was read.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::Api;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use toolserver_sandbox::SandboxError;

use crate::names;

/// Pause between looks at a pod that is starting or going away.
pub(crate) const POLL: Duration = Duration::from_millis(250);

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

/// What `pod` is doing, whoever it belongs to.
pub fn state_of(pod: &Pod) -> PodState {
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

/// `err` of the API, in the words of `context`.
pub(crate) fn api_error(context: &str, err: kube::Error) -> SandboxError {
    SandboxError::Transport(format!("{context}: {err}"))
}

/// Whether `err` is the API's answer `code`.
pub(crate) fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// The current time as the last-used annotation holds it.
pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Deletes pod `name` of `pods` under `preconditions`; `false` if it was
/// gone or had changed (a 404 or 409), so nothing was deleted. `context`
/// names the deletion in an error.
pub(crate) async fn delete_unless_changed(
    pods: &Api<Pod>,
    name: &str,
    preconditions: Preconditions,
    context: &str,
) -> Result<bool, SandboxError> {
    let params = DeleteParams {
        preconditions: Some(preconditions),
        ..DeleteParams::default()
    };
    match pods.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(err) if is_status(&err, 404) || is_status(&err, 409) => Ok(false),
        Err(err) => Err(api_error(context, err)),
    }
}
