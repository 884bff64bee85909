//! How much the local backend isolates its workers: under bubblewrap,
//! found and tried out here at start, or as plain processes. Plain
//! processes are never chosen silently: they are either asked for
//! ([`IsolationMode::None`]) or accepted where bubblewrap cannot work
//! ([`IsolationMode::PreferBwrap`]), and either way reported as warnings.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::SandboxError;

/// How much the local backend isolates a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationMode {
    /// Require bubblewrap: without a `bwrap` that can build a worker's
    /// sandbox here, the backend refuses to start
    /// ([`SandboxError::Unisolated`]).
    Bwrap,
    /// Bubblewrap when it works here, else plain processes, reported as a
    /// warning. For development machines and tests, never for tenants.
    PreferBwrap,
    /// Plain child processes (environment and user isolation only), asked
    /// for explicitly; reported as a warning.
    None,
}

/// The namespaces every bubblewrapped worker gets to itself, and its tie to
/// the server's life.
pub(super) const BWRAP_NAMESPACES: [&str; 6] = [
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-net",
    "--die-with-parent",
    "--new-session",
];

/// The isolation the backend settled on at start.
#[derive(Debug)]
pub(super) struct Isolation {
    /// The `bwrap` workers run under, or `None` for plain processes.
    pub bwrap: Option<PathBuf>,
    /// What an operator must know: why workers are not isolated, when they
    /// are not.
    pub warnings: Vec<String>,
}

/// What plain processes mean for the host, said in every warning about them.
const UNISOLATED: &str = "uploaded code runs as plain processes that can read the host's files, \
     reach its network (databases on loopback included) and leave processes behind that \
     outlive the server; do not serve untrusted tenants like this";

/// Settles `mode`: finds `bwrap_binary` (on `PATH` when it is a bare name)
/// and tries it out with the workers' host `view` as their user `run_as`,
/// unless bubblewrap is switched off.
pub(super) fn settle(
    mode: IsolationMode,
    bwrap_binary: &Path,
    run_as: Option<(u32, u32)>,
    view: &[String],
) -> Result<Isolation, SandboxError> {
    let unisolated = |why: String| Isolation {
        bwrap: None,
        warnings: vec![format!("RUNNERS ARE NOT ISOLATED ({why}): {UNISOLATED}")],
    };
    if mode == IsolationMode::None {
        return Ok(unisolated("bubblewrap is switched off".to_owned()));
    }
    match probe(bwrap_binary, run_as, view) {
        Ok(bwrap) => Ok(Isolation {
            bwrap: Some(bwrap),
            warnings: Vec::new(),
        }),
        Err(reason) if mode == IsolationMode::PreferBwrap => Ok(unisolated(reason)),
        Err(reason) => Err(SandboxError::Unisolated(reason)),
    }
}

/// Finds `bwrap_binary` and checks it can build a worker's sandbox here
/// (namespaces included) as the worker's user; else says why not.
fn probe(
    bwrap_binary: &Path,
    run_as: Option<(u32, u32)>,
    view: &[String],
) -> Result<PathBuf, String> {
    let bwrap = locate(bwrap_binary)?;
    let mut probe = std::process::Command::new(&bwrap);
    probe
        .args(view)
        .args(BWRAP_NAMESPACES)
        .args(["--", "/usr/bin/true"]);
    if let Some((uid, gid)) = run_as {
        use std::os::unix::process::CommandExt;
        probe.uid(uid).gid(gid);
    }
    let tried = probe
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|err| format!("running {}: {err}", bwrap.display()))?;
    if tried.status.success() {
        return Ok(bwrap);
    }
    let said = String::from_utf8_lossy(&tried.stderr);
    let detail = match said.trim() {
        "" => tried.status.to_string(),
        said => format!("{}: {said}", tried.status),
    };
    Err(format!(
        "{} cannot build a sandbox with its own network namespace ({detail})",
        bwrap.display()
    ))
}

/// `binary` itself when it names a path, else the first match on `PATH`.
fn locate(binary: &Path) -> Result<PathBuf, String> {
    if binary.components().count() > 1 {
        return match binary.is_file() {
            true => Ok(binary.to_path_buf()),
            false => Err(format!(
                "bubblewrap is not installed: no {}",
                binary.display()
            )),
        };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "bubblewrap is not installed: no `{}` on PATH",
                binary.display()
            )
        })
}
