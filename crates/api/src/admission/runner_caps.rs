//! The per-account cap on live runners the runner budget asks for: each
//! account's `liveRunners` limit as admission knows it (overrides included).
//! The budget is built before admission (it wraps the runner backend the
//! state is made of), so the two are tied once both exist; until then, and
//! for an account admission has not loaded, the deployment default holds.

use std::sync::{Arc, OnceLock, Weak};

use toolserver_domain::AccountId;
use toolserver_sandbox::AccountRunnerCaps;

use super::Admission;

/// Live-runner caps read from admission's limits.
pub struct AdmittedRunnerCaps {
    default: usize,
    admission: OnceLock<Weak<Admission>>,
}

impl AdmittedRunnerCaps {
    /// Caps of `default` runners until [`AdmittedRunnerCaps::follow`] ties them to admission.
    pub fn new(default: usize) -> Self {
        Self {
            default,
            admission: OnceLock::new(),
        }
    }

    /// Reads every account's cap from `admission` from now on.
    pub fn follow(&self, admission: &Arc<Admission>) {
        let _ = self.admission.set(Arc::downgrade(admission));
    }
}

impl AccountRunnerCaps for AdmittedRunnerCaps {
    fn live_runners(&self, account: &AccountId) -> usize {
        let Some(admission) = self.admission.get().and_then(Weak::upgrade) else {
            return self.default;
        };
        if !admission.enabled() {
            return self.default;
        }
        usize::try_from(admission.known_limits(account).live_runners).unwrap_or(usize::MAX)
    }
}
