//! The seccomp filters of the worker's sandbox: the kernel's own refusal of the system calls that
//! start processes, trace them, open network sockets or hold memory outside the sandbox's limits,
//! whatever Python does (a re-imported `_posixsubprocess`, `os.fork`, libc through `ctypes`).
//!
//! They are classic-BPF programs compiled here with `seccompiler` and installed in two steps,
//! because a filter that refused `execve` could not be installed by `bwrap` (it loads its filters
//! just before it execs the worker, and that exec must pass them):
//!
//! 1. [`Filters::sandbox`], given to `bwrap --add-seccomp-fd`, is in force from the worker's
//!    first instruction: `fork`, `vfork`, `clone` without `CLONE_THREAD` (a new process; threads
//!    are allowed), `ptrace`, `process_vm_readv`/`writev`, `socket` and `socketpair` of any
//!    family but `AF_UNIX`, `shmget` and `memfd_create` fail with `EPERM`, and `clone3` (whose
//!    flags sit in memory a filter cannot read) fails with `ENOSYS`, so that the C library falls
//!    back to `clone`, where the flags are checked.
//! 2. [`Filters::no_exec`] refuses `execve` and `execveat` with `EPERM`. The worker installs it
//!    itself (`--exec-filter-fd`), before it has a second thread and before it reads the first
//!    request, so before any model code runs; it exits if that fails. Seccomp filters can be
//!    added but never removed, and they are inherited across `execve`, so nothing later can
//!    lift either step.
//!
//! On x86-64 the same calls through the x32 ABI (numbers with bit 30 set) are refused too, where a
//! kernel offers that ABI.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::AbmError;

/// The compiled programs, as the bytes of `struct sock_filter` arrays (what `bwrap` and
/// `prctl(PR_SET_SECCOMP)` read).
pub(crate) struct Filters {
    /// Installed by `bwrap`: processes, tracing, sockets and hidden memory refused with `EPERM`.
    pub(crate) sandbox: Vec<u8>,
    /// Installed by `bwrap`: `clone3` answered with `ENOSYS`.
    pub(crate) clone3: Vec<u8>,
    /// Installed by the worker once started: `execve` and `execveat` refused with `EPERM`.
    pub(crate) no_exec: Vec<u8>,
}

/// `clone`'s flag for a thread of the caller's process (`CLONE_THREAD`).
const CLONE_THREAD: u64 = libc::CLONE_THREAD as u64;
/// The x32 ABI's bit in a system call number (x86-64 only).
#[cfg(target_arch = "x86_64")]
const X32: i64 = 0x4000_0000;

/// A rule matching when argument `arg` (32 bits) is not `value`.
fn arg_is_not(arg: u8, value: u64) -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    let cond = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, value)?;
    Ok(vec![SeccompRule::new(vec![cond])?])
}

/// The rules of [`Filters::sandbox`]: syscall number → conditions (empty: always).
fn sandbox_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let new_process = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(CLONE_THREAD), 0)?;
    let unix = libc::AF_UNIX as u64;
    let mut rules = BTreeMap::new();
    #[cfg(target_arch = "x86_64")]
    for nr in [libc::SYS_fork, libc::SYS_vfork] {
        rules.insert(nr, vec![]);
    }
    rules.insert(libc::SYS_clone, vec![SeccompRule::new(vec![new_process])?]);
    for nr in [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_shmget,
        libc::SYS_memfd_create,
    ] {
        rules.insert(nr, vec![]);
    }
    rules.insert(libc::SYS_socket, arg_is_not(0, unix)?);
    rules.insert(libc::SYS_socketpair, arg_is_not(0, unix)?);
    #[cfg(target_arch = "x86_64")]
    {
        // The x32 numbers: the common calls with the x32 bit, and x32's own ptrace and
        // process_vm_* (521, 539, 540).
        let common: Vec<(i64, Vec<SeccompRule>)> = rules.iter().map(|(nr, r)| (nr | X32, r.clone())).collect();
        rules.extend(common);
        for nr in [521, 539, 540] {
            rules.insert(nr | X32, vec![]);
        }
    }
    Ok(rules)
}

/// The rules of [`Filters::no_exec`].
fn no_exec_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_execve, vec![]), (libc::SYS_execveat, vec![])].into();
    #[cfg(target_arch = "x86_64")]
    for nr in [520, 545] {
        rules.insert(nr | X32, vec![]);
    }
    rules
}

/// The rules of [`Filters::clone3`].
fn clone3_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, vec![])].into();
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_clone3 | X32, vec![]);
    rules
}

impl Filters {
    /// Compiles the three programs for this machine's architecture.
    pub(crate) fn compile() -> Result<Filters, AbmError> {
        let failed = |e: &dyn std::fmt::Display| AbmError::Sandbox(format!("cannot build the seccomp filter: {e}"));
        let sandbox = sandbox_rules().map_err(|e| failed(&e))?;
        Ok(Filters {
            sandbox: program(sandbox, libc::EPERM).map_err(|e| failed(&e))?,
            clone3: program(clone3_rules(), libc::ENOSYS).map_err(|e| failed(&e))?,
            no_exec: program(no_exec_rules(), libc::EPERM).map_err(|e| failed(&e))?,
        })
    }
}

/// A program that answers the calls matching `rules` with `errno` and allows every other call.
fn program(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<Vec<u8>, seccompiler::Error> {
    let arch = std::env::consts::ARCH.try_into()?;
    let errno = u32::try_from(errno).unwrap_or(1);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), arch)?;
    let bpf: BpfProgram = filter.try_into()?;
    Ok(bpf
        .iter()
        .flat_map(|i| {
            let mut b = Vec::with_capacity(8);
            b.extend(i.code.to_ne_bytes());
            b.extend([i.jt, i.jf]);
            b.extend(i.k.to_ne_bytes());
            b
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let f = Filters::compile().unwrap();
        for p in [&f.sandbox, &f.clone3, &f.no_exec] {
            assert!(!p.is_empty() && p.len() % 8 == 0, "{} bytes", p.len());
        }
    }
}
