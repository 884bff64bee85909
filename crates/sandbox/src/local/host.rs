//! What the host offers runners, read at start: the view a bubblewrapped
//! worker gets, and whether runner users can reach the runner root.

use std::path::{Path, PathBuf};

use crate::SandboxError;

/// What a bubblewrapped worker sees of the host: a private `/tmp` (first, as
/// the binds after it may lie under it); read-only, `/usr` with the
/// merged-`/usr` links, the CA certificates, the Node installation if it
/// lives elsewhere, the worker sources; a minimal `/dev` and its own `/proc`.
pub(super) fn host_view(node_binary: &Path, assets: &Path) -> Vec<String> {
    let mut shown: Vec<PathBuf> = vec!["/usr".into()];
    shown.extend(node_prefix(node_binary).filter(|prefix| !prefix.starts_with("/usr")));
    shown.push(assets.to_path_buf());
    shown.extend(
        ["/etc/ssl", "/etc/ca-certificates"]
            .map(PathBuf::from)
            .into_iter()
            .filter(|etc| etc.is_dir()),
    );
    let mut view: Vec<String> = vec!["--tmpfs".to_owned(), "/tmp".to_owned()];
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::read_link(&host) {
            Ok(target) => view.extend([
                "--symlink".to_owned(),
                target.to_string_lossy().into_owned(),
                host.to_string_lossy().into_owned(),
            ]),
            Err(_) if host.is_dir() => shown.push(host),
            Err(_) => {}
        }
    }
    for path in shown {
        let path = path.to_string_lossy().into_owned();
        view.extend(["--ro-bind".to_owned(), path.clone(), path]);
    }
    view.extend(["--dev", "/dev", "--proc", "/proc"].map(str::to_owned));
    view
}

/// The installation prefix of the `node` binary (`<prefix>/bin/node`),
/// found on `PATH` when it is a bare name.
pub(super) fn node_prefix(node_binary: &Path) -> Option<PathBuf> {
    let found = if node_binary.components().count() > 1 {
        node_binary.to_path_buf()
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(node_binary))
            .find(|candidate| candidate.is_file())?
    };
    let real = std::fs::canonicalize(found).ok()?;
    Some(real.parent()?.parent()?.to_path_buf())
}

/// The `nobody` user and group on Debian-like systems: bubblewrap is probed
/// as it, and a runner root must be traversable by it (by anyone).
pub(super) const NOBODY: u32 = 65534;

/// Refuses a runner root the runner user `uid` could not reach: every
/// directory above it must let others pass (mode `o+x`).
pub(super) fn refuse_untraversable(root: &Path, uid: u32) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    for ancestor in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        if meta.mode() & 0o001 == 0 && meta.uid() != uid {
            return Err(SandboxError::Start(format!(
                "the runner directory {} lies under {} (mode {:o}), which the runner user (uid {uid}) cannot enter; \
                 make it traversable (chmod o+x {}) or choose a data directory outside it",
                root.display(),
                ancestor.display(),
                meta.mode() & 0o7777,
                ancestor.display(),
            )));
        }
    }
    Ok(())
}

pub(super) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
