//! The seccomp filters a bubblewrapped worker runs under, compiled once at
//! start (with `seccompiler`) into `<runner root>/.seccomp/` and handed to
//! bubblewrap (`--add-seccomp-fd`), which loads them just before it execs
//! Node. They refuse, with `EPERM`, what a Node worker never needs and what
//! widens the kernel surface a tool can reach: tracing and reading other
//! processes, mounting, new namespaces (`unshare`, `setns`, and `clone` with
//! a namespace flag), kernel modules and kexec, BPF, perf events,
//! userfaultfd, io_uring, the kernel keyring, clocks, swap, reboot, and file
//! handles. `clone3` answers `ENOSYS` (its flags sit in memory a filter
//! cannot read), so the C library falls back to `clone`, whose flags it can.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// Syscalls refused outright.
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_vhangup,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_fspick,
];

/// `clone` flags that make a new namespace.
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

/// The compiled filters, as files bubblewrap reads.
#[derive(Debug, Clone)]
pub struct SeccompFilters {
    files: Vec<PathBuf>,
}

fn compile_error(err: impl std::fmt::Display) -> SandboxError {
    SandboxError::Start(format!("compiling the seccomp filter: {err}"))
}

/// A filter answering `errno` to the syscalls in `rules`, allowing the rest.
fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: libc::c_int,
) -> Result<BpfProgram, SandboxError> {
    let errno = u32::try_from(errno).map_err(compile_error)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        ARCH,
    )
    .map_err(compile_error)?;
    filter.try_into().map_err(compile_error)
}

/// The deny list, and `clone` with a namespace flag.
fn denied_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&call| (call, Vec::new())).collect();
    let mut namespaced = Vec::new();
    for flag in (0..64).map(|bit| 1u64 << bit) {
        if NAMESPACE_FLAGS & flag != 0 {
            let condition = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .map_err(compile_error)?;
            namespaced.push(SeccompRule::new(vec![condition]).map_err(compile_error)?);
        }
    }
    rules.insert(libc::SYS_clone, namespaced);
    Ok(rules)
}

/// A program's bytes as the kernel (and bubblewrap) read them.
fn bytes_of(program: &BpfProgram) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    bytes
}

impl SeccompFilters {
    /// Compiles the filters into `dir`.
    pub fn install(dir: &Path) -> Result<Self, SandboxError> {
        std::fs::create_dir_all(dir)?;
        let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
        let programs = [
            ("denied.bpf", program(denied_rules()?, libc::EPERM)?),
            ("clone3.bpf", program(clone3, libc::ENOSYS)?),
        ];
        let mut files = Vec::new();
        for (name, program) in programs {
            let file = dir.join(name);
            std::fs::write(&file, bytes_of(&program))?;
            files.push(file);
        }
        Ok(Self { files })
    }

    /// Each filter opened afresh (its own offset) for one bubblewrap start.
    pub fn open(&self) -> Result<Vec<OwnedFd>, SandboxError> {
        self.files
            .iter()
            .map(|file| Ok(OwnedFd::from(File::open(file)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_to_whole_instructions() {
        let dir = tempfile::tempdir().expect("temp dir");
        let filters = SeccompFilters::install(dir.path()).expect("filters");
        assert_eq!(filters.files.len(), 2);
        for file in &filters.files {
            let bytes = std::fs::read(file).expect("a program");
            assert!(!bytes.is_empty() && bytes.len() % 8 == 0, "{}", bytes.len());
        }
        assert_eq!(filters.open().expect("opened").len(), 2);
    }
}
