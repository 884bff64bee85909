//! How the backend settles isolation at start: required bubblewrap that
//! cannot work refuses the backend; runners left unisolated, asked for or
//! accepted, are reported as warnings.

use serde_json::json;
use toolserver_sandbox::{Executor, Frame, IsolationMode, LocalExecutor, SandboxError};

use crate::support::*;

/// Reads a host file no sandbox shows.
const READ_HOST: &str = "import { readFileSync } from 'node:fs';
export default { execute() { return { passwd: readFileSync('/etc/passwd', 'utf8').length > 0 }; } };";

fn start(
    isolation: IsolationMode,
    bwrap: &str,
) -> (Result<LocalExecutor, SandboxError>, tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut settings = settings(&dir.path().join("runners"));
    settings.isolation = isolation;
    settings.bwrap_binary = bwrap.into();
    (LocalExecutor::new(settings), dir)
}

#[test]
fn required_bubblewrap_that_is_missing_or_broken_refuses_the_backend() {
    for (bwrap, says) in [
        ("/nonexistent/bwrap", "no /nonexistent/bwrap"),
        ("no-such-bwrap", "no `no-such-bwrap` on PATH"),
        ("/usr/bin/false", "cannot build a sandbox"),
    ] {
        let (started, _dir) = start(IsolationMode::Bwrap, bwrap);
        match started {
            Err(err @ SandboxError::Unisolated(_)) => {
                let said = err.to_string();
                assert!(said.contains(says), "{bwrap}: {said}");
            }
            Err(other) => panic!("{bwrap}: refused for another reason: {other}"),
            Ok(_) => panic!("{bwrap}: the backend started without isolation"),
        }
    }
}

#[tokio::test]
async fn preferred_bubblewrap_that_cannot_work_leaves_runners_unisolated_and_says_so() {
    let (started, _dir) = start(IsolationMode::PreferBwrap, "/usr/bin/false");
    let executor = started.unwrap();
    assert!(!executor.uses_bwrap());
    let warnings = executor.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("RUNNERS ARE NOT ISOLATED")
            && warnings[0].contains("/usr/bin/false cannot build a sandbox"),
        "{warnings:?}"
    );
    // What the warning says is so: the tool reads the host's files.
    let frame = run(
        &executor,
        &key("acct"),
        request(inline(READ_HOST), json!({})),
    )
    .await;
    assert_eq!(final_value(&frame), json!({"passwd": true}));
}

#[test]
fn runners_unisolated_on_request_are_warned_about() {
    let (started, _dir) = start(IsolationMode::None, "bwrap");
    let executor = started.unwrap();
    assert!(!executor.uses_bwrap());
    let warnings = executor.warnings();
    assert!(
        warnings.len() == 1 && warnings[0].contains("bubblewrap is switched off"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn working_bubblewrap_isolates_runners_without_a_warning() {
    for isolation in [IsolationMode::Bwrap, IsolationMode::PreferBwrap] {
        let (started, _dir) = start(isolation, "bwrap");
        let executor = started.unwrap_or_else(|err| {
            panic!("this test needs bubblewrap with network namespaces (make test-deps installs it): {err}")
        });
        assert!(executor.uses_bwrap());
        assert_eq!(executor.warnings(), Vec::<String>::new());
        let frame = run(
            &executor,
            &key("acct"),
            request(inline(READ_HOST), json!({})),
        )
        .await;
        assert!(
            matches!(&frame, Frame::Error { message, .. } if message.contains("ENOENT")),
            "{isolation:?}: {frame:?}"
        );
    }
}
