//! A user and group of its own for every local runner (when the server is
//! root), so two tenants' workers never share a uid: neither can signal,
//! trace or read the other's processes and files, whatever the file modes.
//! Ids come from [`RUNNER_UID_BASE`] onwards. A runner's id is claimed by
//! creating `<root>/.uids/<n>` (atomic, so two server processes sharing the
//! root never hand one id to two runners) holding the runner's name, and is
//! kept by the owner of the runner's directory, so a runner keeps its id
//! across worker restarts and server restarts.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::SandboxError;

/// The first uid (and gid) handed to a runner: far above the ids of system
/// and login users and of the usual subordinate-id ranges, and below 2³¹
/// (bubblewrap cannot map larger ones into a user namespace).
pub const RUNNER_UID_BASE: u32 = 2_000_000_000;
/// How many ids runners may take.
pub const RUNNER_UID_COUNT: u32 = 1 << 20;

/// Hands out runner ids under one runner root.
#[derive(Debug)]
pub struct RunnerIdentities {
    claims: PathBuf,
}

impl RunnerIdentities {
    /// The ids of the runners under `root`.
    pub fn new(root: &Path) -> Result<Self, SandboxError> {
        let claims = root.join(".uids");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&claims)?;
        Ok(Self { claims })
    }

    /// The (uid, gid) of runner `name`, whose directory is `dir`: the id
    /// that owns `dir` when it is a runner id claimed for this name, else
    /// the first free one from a point given by the name's hash, claimed now.
    pub fn of(&self, name: &str, dir: &Path) -> Result<(u32, u32), SandboxError> {
        if let Ok(meta) = std::fs::metadata(dir) {
            let owner = meta.uid();
            let index = owner.wrapping_sub(RUNNER_UID_BASE);
            if index < RUNNER_UID_COUNT && self.claimed_by(index).as_deref() == Some(name) {
                return Ok((owner, owner));
            }
        }
        let digest = Sha256::digest(name.as_bytes());
        let start = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        for step in 0..RUNNER_UID_COUNT {
            let index = start.wrapping_add(step) % RUNNER_UID_COUNT;
            if self.claim(index, name)? {
                let id = RUNNER_UID_BASE + index;
                return Ok((id, id));
            }
        }
        Err(SandboxError::Start(format!(
            "all {RUNNER_UID_COUNT} runner user ids are taken; remove runner directories no longer used"
        )))
    }

    /// Hands the id `uid`, claimed by `from`, to `to` for good (a warm
    /// worker's id passes to the runner that claimed it); `false` when
    /// `from` did not hold it.
    pub fn transfer(&self, uid: u32, from: &str, to: &str) -> Result<bool, SandboxError> {
        let Some(index) = self.index_held_by(uid, from) else {
            return Ok(false);
        };
        let staged = self.claims.join(format!(".{index}.{to}"));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&staged)?;
        // Not synced: a claim a crash left empty names no runner, so its id
        // is never handed out again and a runner finding it gets another.
        file.write_all(to.as_bytes())?;
        std::fs::rename(&staged, self.claim_path(index))?;
        Ok(true)
    }

    /// Frees the id `uid` claimed by `name` (a warm worker discarded
    /// unclaimed, its directory gone).
    pub fn release(&self, uid: u32, name: &str) {
        if let Some(index) = self.index_held_by(uid, name) {
            let _ = std::fs::remove_file(self.claim_path(index));
        }
    }

    /// The index of `uid` when `name` claimed it.
    fn index_held_by(&self, uid: u32, name: &str) -> Option<u32> {
        let index = uid.wrapping_sub(RUNNER_UID_BASE);
        (index < RUNNER_UID_COUNT && self.claimed_by(index).as_deref() == Some(name))
            .then_some(index)
    }

    fn claim_path(&self, index: u32) -> PathBuf {
        self.claims.join(index.to_string())
    }

    fn claimed_by(&self, index: u32) -> Option<String> {
        std::fs::read_to_string(self.claim_path(index)).ok()
    }

    /// Claims id `index` for `name`; true if it is (now, or already) `name`'s.
    fn claim(&self, index: u32, name: &str) -> Result<bool, SandboxError> {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.claim_path(index))
        {
            Ok(mut file) => {
                file.write_all(name.as_bytes())?;
                file.sync_all()?;
                Ok(true)
            }
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {
                Ok(self.claimed_by(index).as_deref() == Some(name))
            }
            Err(err) => Err(err.into()),
        }
    }
}

/// Gives `dir` and everything under it to `ids` (symlinks themselves, never
/// what they point at), unless `dir` is theirs already.
pub fn give_tree(dir: &Path, (uid, gid): (u32, u32)) -> Result<(), SandboxError> {
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.uid() == uid && meta.gid() == gid {
        return Ok(());
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        if std::fs::symlink_metadata(&path)?.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_get_distinct_ids_that_they_keep() {
        let root = tempfile::tempdir().expect("temp dir");
        let ids = RunnerIdentities::new(root.path()).expect("claims dir");
        let (a_dir, b_dir) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a_dir).expect("dir a");
        let a = ids.of("a", &a_dir).expect("an id for a");
        let b = ids.of("b", &b_dir).expect("an id for b");
        assert_ne!(a, b);
        assert!(a.0 >= RUNNER_UID_BASE && b.0 >= RUNNER_UID_BASE);
        // Not yet given its directory, a runner finds its claim again.
        assert_eq!(ids.of("a", &a_dir).expect("a again"), a);
        let again = RunnerIdentities::new(root.path()).expect("claims dir");
        assert_eq!(again.of("b", &b_dir).expect("b again"), b);
    }

    #[test]
    fn a_transferred_id_belongs_to_its_new_holder_and_a_released_one_is_free() {
        let root = tempfile::tempdir().expect("temp dir");
        let ids = RunnerIdentities::new(root.path()).expect("claims dir");
        let warm = ids.of("warm-1", &root.path().join("w")).expect("an id");
        assert!(!ids
            .transfer(warm.0, "warm-2", "tr-a")
            .expect("not its holder"));
        assert!(ids.transfer(warm.0, "warm-1", "tr-a").expect("transferred"));
        let index = warm.0 - RUNNER_UID_BASE;
        assert!(ids.claim(index, "tr-a").expect("now tr-a's"));
        assert!(!ids.claim(index, "warm-1").expect("no longer warm-1's"));
        ids.release(warm.0, "warm-1");
        assert!(!ids
            .claim(index, "b")
            .expect("release by a non-holder is a no-op"));
        ids.release(warm.0, "tr-a");
        assert!(ids.claim(index, "b").expect("free again"));
    }

    #[test]
    fn an_id_claimed_by_another_runner_is_never_handed_out() {
        let root = tempfile::tempdir().expect("temp dir");
        let ids = RunnerIdentities::new(root.path()).expect("claims dir");
        let a = ids.of("a", &root.path().join("a")).expect("an id for a");
        let index = a.0 - RUNNER_UID_BASE;
        assert!(!ids.claim(index, "b").expect("a refused claim"));
        assert!(ids.claim(index, "a").expect("its own claim"));
    }
}
