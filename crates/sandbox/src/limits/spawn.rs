//! What a worker's process does between fork and exec: join its runner's
//! cgroups, set its rlimits, let the descriptors meant for it (the seccomp
//! filters bubblewrap reads) cross the exec, drop to the runner user
//! (joining a cgroup needs the server's privileges, so the user switch
//! cannot be left to `Command::uid`, which runs first), and only then ask to
//! be killed with the server.
//!
//! The last step closes a window bubblewrap's `--die-with-parent` leaves
//! open: a server killed between the fork and bubblewrap's own `prctl`
//! (joining a cgroup can take milliseconds) would leave the child running,
//! reparented, with nothing to kill it. The parent-death signal is set after
//! the user switch (a credential change clears it), survives the `exec` of a
//! binary that is not set-user-ID, and a child whose parent is already gone
//! when it is set does not exec at all. (Bubblewrap's own namespaced child
//! has a window of its own; the next server's start-up sweep kills what it
//! leaves: `CgroupSupport::sweep`.)
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{Mode, OFlags};
use rustix::io::{Errno, FdFlags};
use rustix::process::{Pid, Resource, Rlimit, Signal};

use super::{CgroupSupport, RunnerCgroup, RunnerLimits};

/// Everything prepared before the fork, so that nothing allocates after it.
#[derive(Debug, Clone)]
pub struct SpawnLimits {
    joins: Vec<CString>,
    rlimits: Vec<(Resource, u64)>,
    run_as: Option<(u32, u32)>,
    /// The server: the child's parent, until the server dies.
    parent: Pid,
    /// Descriptors the parent holds open across the spawn, inherited by the
    /// child's `exec` (every other one closes there).
    inherited: Vec<RawFd>,
}

impl SpawnLimits {
    /// The limits for a worker of a runner in `cgroup`, run as `run_as`
    /// (uid, gid) when the server is root. What the cgroup does not hold
    /// (memory, processes) falls back to an rlimit.
    pub fn new(
        limits: &RunnerLimits,
        support: &CgroupSupport,
        cgroup: Option<&RunnerCgroup>,
        run_as: Option<(u32, u32)>,
    ) -> Self {
        let joins = cgroup
            .map(|group| {
                group
                    .procs_files()
                    .iter()
                    .filter_map(|file| CString::new(file.as_os_str().as_bytes()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let mut rlimits = vec![
            (Resource::Nofile, limits.open_files),
            (Resource::Fsize, limits.file_size_bytes),
            (Resource::Core, 0),
        ];
        if cgroup.is_none() || !support.has_memory() {
            rlimits.push((Resource::Data, limits.memory_bytes));
        }
        if cgroup.is_none() || !support.has_pids() {
            rlimits.push((Resource::Nproc, limits.processes));
        }
        Self {
            joins,
            rlimits,
            run_as,
            parent: rustix::process::getpid(),
            inherited: Vec::new(),
        }
    }

    /// Lets `fds` cross the child's `exec`; the caller keeps them open
    /// until the spawn returned.
    pub fn inheriting(mut self, fds: Vec<RawFd>) -> Self {
        self.inherited = fds;
        self
    }

    /// Makes `command` apply these limits in its child before `exec`.
    pub fn apply(self, command: &mut tokio::process::Command) {
        // SAFETY: the hook runs in the forked child, which has one thread.
        // It only makes system calls (open, write, setrlimit, fcntl,
        // setgroups, setresgid, setresuid, prctl, getppid) on data prepared
        // before the fork (the inherited descriptors are held open by the
        // parent), and allocates nothing (its error is a bare errno), so it
        // is async-signal-safe.
        unsafe {
            command.pre_exec(move || self.enter());
        }
    }

    fn enter(&self) -> std::io::Result<()> {
        for procs in &self.joins {
            let file = rustix::fs::open(
                procs.as_c_str(),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            rustix::io::write(&file, b"0")?;
        }
        for &(resource, value) in &self.rlimits {
            let limit = Rlimit {
                current: Some(value),
                maximum: Some(value),
            };
            rustix::process::setrlimit(resource, limit)?;
        }
        for &fd in &self.inherited {
            // SAFETY: the parent keeps `fd` open until the spawn returned,
            // so it is open in this child until exec.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            rustix::io::fcntl_setfd(fd, FdFlags::empty())?;
        }
        if let Some((uid, gid)) = self.run_as {
            // One thread after fork: the thread's ids are the process's.
            let (uid, gid) = (
                rustix::process::Uid::from_raw(uid),
                rustix::process::Gid::from_raw(gid),
            );
            rustix::thread::set_thread_groups(&[])?;
            rustix::thread::set_thread_res_gid(gid, gid, gid)?;
            rustix::thread::set_thread_res_uid(uid, uid, uid)?;
        }
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        if rustix::process::getppid() != Some(self.parent) {
            return Err(Errno::SRCH.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rustix::process::WaitOptions;

    use super::*;
    use crate::limits::RunnerLimits;

    /// The parent-death signal follows the thread that forked: a child
    /// spawned from a thread that ends is killed, as it is when the whole
    /// server dies.
    #[test]
    fn a_child_is_killed_when_the_thread_that_spawned_it_ends() {
        let limits = SpawnLimits::new(
            &RunnerLimits::DEFAULT,
            &CgroupSupport::none("not under test"),
            None,
            None,
        );
        let pid = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let mut command = tokio::process::Command::new("sleep");
                command.arg("30");
                limits.apply(&mut command);
                let child = command.spawn().expect("sleep spawned");
                child.id().expect("its pid")
            })
        })
        .join()
        .expect("the spawning thread ended");
        let pid = Pid::from_raw(pid as i32).expect("a pid");
        let (_, status) = rustix::process::waitpid(Some(pid), WaitOptions::empty())
            .expect("waited")
            .expect("a status");
        assert_eq!(status.terminating_signal(), Some(Signal::KILL.as_raw()));
    }
}
