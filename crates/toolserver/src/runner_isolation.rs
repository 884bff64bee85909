//! How `TOOLSERVER_RUNNER_ISOLATION` becomes the local backend's isolation.
//! Uploaded code runs under bubblewrap, and a server that cannot use it
//! refuses to start, unless plain processes were asked for (`none`) or the
//! server runs on its generated development secret (`make run` on a fresh
//! machine). Runners left unisolated are said loudly at start (and listed
//! by `GET /readyz`).

use toolserver_sandbox::{IsolationMode, LocalExecutor, SandboxError};

use crate::config::{AuthConfig, RunnerIsolation};

/// Whether runners may go unisolated where bubblewrap cannot work under
/// `auto`: tokens are verified with the generated development secret
/// (`on_dev_secret`) and nothing else about tokens is configured either.
pub fn development_server(auth: &AuthConfig, on_dev_secret: bool) -> bool {
    on_dev_secret && auth.jwt_issuer.is_none() && auth.jwt_audience.is_none()
}

/// The local backend's isolation for `setting` on a server that is a
/// development one (see [`development_server`]) or not.
pub fn mode(setting: RunnerIsolation, development: bool) -> IsolationMode {
    match setting {
        RunnerIsolation::Auto if development => IsolationMode::PreferBwrap,
        RunnerIsolation::Auto | RunnerIsolation::Bwrap => IsolationMode::Bwrap,
        RunnerIsolation::None => IsolationMode::None,
    }
}

/// Why the local backend did not start: for want of bubblewrap, what to do
/// about it; anything else as it is.
pub fn explain(err: SandboxError, setting: RunnerIsolation) -> anyhow::Error {
    let SandboxError::Unisolated(reason) = err else {
        return err.into();
    };
    let asked = if setting == RunnerIsolation::Auto {
        "TOOLSERVER_RUNNER_ISOLATION=auto (the default) goes without bubblewrap only on the \
         generated development secret, and this server has a JWT secret, key, JWKS URL, issuer \
         or audience configured"
    } else {
        "TOOLSERVER_RUNNER_ISOLATION=bwrap requires it"
    };
    anyhow::anyhow!(
        "refusing to start: uploaded code must run isolated, but bubblewrap cannot isolate it \
         on this machine: {reason}. {asked}.\n\
         Either install bubblewrap (apt-get install bubblewrap) and allow unprivileged user \
         namespaces (sysctl kernel.unprivileged_userns_clone=1 on Debian, \
         kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu; in a container, a seccomp \
         profile that lets it create namespaces),\n\
         or set TOOLSERVER_RUNNER_ISOLATION=none to run uploaded code as plain processes that \
         see this host's files and network (only for code you trust)."
    )
}

/// Says at start, at error level, why the runners of `executor` are not
/// isolated, when they are not (the backend itself says what that means).
pub fn announce(executor: &LocalExecutor, setting: RunnerIsolation) {
    if executor.uses_bwrap() {
        return;
    }
    if setting == RunnerIsolation::None {
        tracing::error!(
            "TOOLSERVER_RUNNER_ISOLATION=none: uploaded code runs unisolated on this host, as \
             asked; GET /readyz lists the warning"
        );
    } else {
        tracing::error!(
            "DEVELOPMENT ONLY: runners run unisolated because bubblewrap cannot work here and this \
             server verifies tokens with the generated development secret; with a JWT secret, \
             key, JWKS URL, issuer or audience configured it refuses to start like this. Install \
             bubblewrap to isolate them, or set TOOLSERVER_RUNNER_ISOLATION=none to say that \
             unisolated runners are meant"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_back_to_plain_processes_only_on_a_development_server() {
        assert_eq!(
            mode(RunnerIsolation::Auto, true),
            IsolationMode::PreferBwrap
        );
        assert_eq!(mode(RunnerIsolation::Auto, false), IsolationMode::Bwrap);
        for development in [true, false] {
            assert_eq!(
                mode(RunnerIsolation::Bwrap, development),
                IsolationMode::Bwrap
            );
            assert_eq!(
                mode(RunnerIsolation::None, development),
                IsolationMode::None
            );
        }
    }

    #[test]
    fn the_refusal_names_both_ways_out() {
        let said = format!(
            "{}",
            explain(
                SandboxError::Unisolated("no `bwrap` on PATH".into()),
                RunnerIsolation::Auto
            )
        );
        for needed in [
            "no `bwrap` on PATH",
            "install bubblewrap",
            "unprivileged user namespaces",
            "TOOLSERVER_RUNNER_ISOLATION=none",
        ] {
            assert!(said.contains(needed), "{needed}: {said}");
        }
    }
}
