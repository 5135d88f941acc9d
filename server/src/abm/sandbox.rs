//! How the Python worker is started: inside a bubblewrap sandbox (the default), or — only when the
//! user asks with `--unsafe-abm` — directly, as the server's user.
//!
//! Model code is arbitrary Python written by an LLM or carried by an imported tree, so the worker
//! runs in a sandbox built from Linux namespaces by `bwrap` (Debian's `bubblewrap`):
//!
//! * an empty environment except `PATH`, `HOME=/tmp` and the worker's own `PYTHON*` settings —
//!   and `bwrap` itself is started with that environment, because its first process (PID 1 in the
//!   sandbox) would otherwise expose the server's variables through `/proc/1/environ`;
//! * no network (own network namespace: even 127.0.0.1 is not the host's);
//! * read-only `/usr` (and the `/bin`, `/lib*` links), the venv and the interpreter's prefix; the
//!   worker script's folder read-only at `/worker`; a private `/tmp` of [`TMP_BYTES`] (a tmpfs,
//!   so a full one fails the model's write, not the host's disk), emptied after every call
//!   (`--scratch`: a model's state is what its snapshot holds, never files); nothing else of the
//!   host's file system (no checkout, home, data folders, `/etc`);
//! * a read-only root and `/dev` (`--remount-ro`, after the last mount): bwrap's root and `/dev`
//!   are tmpfs without a size, so they take no writes at all, `/root` and `/dev/shm` included
//!   (`EROFS`), and the sized `/tmp` is the only writable place;
//! * seccomp filters ([`super::seccomp`]): the kernel refuses new processes (`fork`, `vfork`,
//!   `clone` without `CLONE_THREAD`; threads still work), `execve`/`execveat`, `ptrace`, sockets
//!   other than `AF_UNIX`, SysV shared memory and memfds, with `EPERM`, whatever Python does.
//!   bwrap installs all but the exec ban just before it execs the interpreter (that exec has to
//!   pass); the worker installs the exec ban itself from `--exec-filter-fd` before its first
//!   request, and exits if it cannot;
//! * no inherited descriptors: bwrap passes on whatever the server inherited without
//!   close-on-exec, so the worker closes all but stdin, stdout and stderr before its first request;
//! * its own PID namespace, with all capabilities dropped: when the sandbox's PID 1 dies the
//!   kernel kills every process in it, and the worker (PID 2) kills every other process in it
//!   after each call (`--reap-strays`), so detached grandchildren do not outlive their call;
//! * `--die-with-parent` and `--new-session`;
//! * at most [`MAX_TASKS`] processes and threads where the kernel's `pids` cgroup controller
//!   (v1) is writable by the server (root on most machines, where `RLIMIT_NPROC` does not
//!   apply): every worker gets a cgroup of its own, entered before `bwrap` runs. Inside the
//!   worker, an audit hook refuses fork, exec, spawn, `subprocess` and foreign calls through
//!   `ctypes` with a clear message; the seccomp filters hold where the hook is bypassed, and the
//!   cap is a third wall where it exists.
//!
//! `--die-with-parent` is tied to the *thread* that spawned `bwrap` (Linux's parent-death signal
//! follows the parent thread), so every worker is spawned from one long-lived thread of this
//! module rather than from whichever (short-lived, blocking-pool) thread needed it.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use super::AbmError;
use super::seccomp::Filters;

/// Where model code runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sandbox {
    /// Inside bubblewrap (see the module docs). Fails with [`AbmError::Sandbox`] where `bwrap`
    /// cannot start.
    #[default]
    Bwrap,
    /// Directly, as the server's user, with a cleared environment but full access to files,
    /// network and processes. Only with `--unsafe-abm`.
    Unsafe,
}

impl Sandbox {
    /// The mode a `--unsafe-abm` flag asks for.
    pub(crate) fn from_unsafe_flag(unsafe_abm: bool) -> Sandbox {
        if unsafe_abm { Sandbox::Unsafe } else { Sandbox::Bwrap }
    }
}

/// The program that builds the sandbox: `$SIMTREE_BWRAP`, else `bwrap` as the worker's `PATH`
/// finds it.
fn bwrap() -> PathBuf {
    std::env::var_os("SIMTREE_BWRAP").map_or_else(|| PathBuf::from("bwrap"), PathBuf::from)
}
/// Size of the sandbox's `/tmp`.
pub(crate) const TMP_BYTES: u64 = 64 << 20;
/// Processes and threads one worker may have (Python, numpy's and Mesa's threads included).
pub(crate) const MAX_TASKS: u32 = 256;
/// Where the worker script's folder appears inside the sandbox.
const WORKER_DIR: &str = "/worker";
/// `PATH` inside the worker (both modes).
const PATH: &str = "/usr/bin:/bin";

/// The environment the worker gets, whatever the server's: no keys, no tokens, no proxies.
fn allowed_env() -> [(&'static str, &'static str); 5] {
    [
        ("PATH", PATH),
        ("HOME", "/tmp"),
        // Same string hashing in every worker, so set iteration in model code is the same in a
        // replayed or rebuilt branch.
        ("PYTHONHASHSEED", "0"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONIOENCODING", "utf-8"),
    ]
}

/// The command that starts the worker (`python` running `script`, in `sandbox`), with `args`
/// after the script.
pub(crate) fn worker_command(
    python: &Path,
    script: &Path,
    sandbox: Sandbox,
    args: &[String],
) -> Result<Command, AbmError> {
    match sandbox {
        Sandbox::Unsafe => {
            let mut cmd = Command::new(python);
            cmd.arg("-u").arg(script).args(args);
            cmd.env_clear().envs(allowed_env());
            Ok(cmd)
        }
        Sandbox::Bwrap => {
            let dir = script.parent().unwrap_or(Path::new("."));
            let name = script
                .file_name()
                .ok_or_else(|| AbmError::Spawn(format!("{} is not a file name", script.display())))?;
            let python = sandboxed_python(python)?;
            let mut cmd = bwrap_command(&bwrap(), &python, Some(&absolute(dir)?))?;
            let no_exec = pass_fd(&mut cmd, &Filters::compile()?.no_exec)?;
            cmd.arg(&python)
                .arg("-u")
                .arg(Path::new(WORKER_DIR).join(name))
                .args(args)
                .args(["--reap-strays", "--scratch", "/tmp", "--exec-filter-fd"])
                .arg(no_exec.to_string());
            Ok(cmd)
        }
    }
}

/// The interpreter's path with its folder resolved (`root/server/../.venv-abm/bin/python` →
/// `root/.venv-abm/bin/python`), so that binding the venv shows nothing else of the checkout. The
/// file itself stays a link: a venv's `python` finds its venv through the link's location.
fn sandboxed_python(python: &Path) -> Result<PathBuf, AbmError> {
    let missing =
        |e: io::Error| AbmError::Spawn(format!("{}: {e} (create the venv with `simtree abm setup`)", python.display()));
    let name = python.file_name().ok_or_else(|| missing(io::ErrorKind::InvalidInput.into()))?;
    let dir = python.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok(std::fs::canonicalize(dir).map_err(missing)?.join(name))
}

/// `bwrap` with every option of the sandbox, ready for the program to run inside (which must be
/// `python`, as given by [`sandboxed_python`], or live in a folder bound here: `worker_dir`
/// appears read-only at [`WORKER_DIR`]).
fn bwrap_command(bwrap: &Path, python: &Path, worker_dir: Option<&Path>) -> Result<Command, AbmError> {
    let mut cmd = Command::new(bwrap);
    // The sandbox's PID 1 is a copy of bwrap: give it nothing worth reading in /proc/1/environ.
    cmd.env_clear().envs(allowed_env());
    // First: a later bind may sit under /tmp, and a tmpfs mounted after it would hide it.
    cmd.arg("--size").arg(TMP_BYTES.to_string()).args(["--tmpfs", "/tmp"]);
    cmd.args(["--ro-bind", "/usr", "/usr"]);
    // Merged-/usr systems have /bin, /lib… as links into /usr; others have real folders.
    for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
        let p = Path::new(top);
        match std::fs::read_link(p) {
            Ok(target) => {
                cmd.arg("--symlink").arg(target).arg(p);
            }
            Err(_) if p.is_dir() => {
                cmd.arg("--ro-bind").arg(p).arg(p);
            }
            Err(_) => {}
        }
    }
    // The venv (its bin/python links to the interpreter) and the interpreter's own prefix.
    let mut binds: Vec<PathBuf> = Vec::new();
    if let Some(venv) = python.parent().and_then(Path::parent) {
        binds.push(venv.to_path_buf());
    }
    let real = std::fs::canonicalize(python).map_err(|e| {
        AbmError::Spawn(format!("{}: {e} (create the venv with `simtree abm setup`)", python.display()))
    })?;
    if let Some(prefix) = real.parent().and_then(Path::parent) {
        binds.push(prefix.to_path_buf());
    }
    for b in binds {
        // Already visible (a system interpreter), or the whole root: bind nothing.
        if b.starts_with("/usr") || b.parent().is_none() {
            continue;
        }
        cmd.arg("--ro-bind").arg(&b).arg(&b);
    }
    if let Some(dir) = worker_dir {
        cmd.arg("--ro-bind").arg(dir).arg(WORKER_DIR);
    }
    cmd.args(["--dev", "/dev", "--proc", "/proc"]);
    // Last of the mounts: the root (a tmpfs of bwrap's, unbounded) and /dev (/dev/shm with it)
    // become read-only, so the sized /tmp is the only place model code can write.
    cmd.args(["--remount-ro", "/", "--remount-ro", "/dev"]);
    let filters = Filters::compile()?;
    for program in [&filters.sandbox, &filters.clone3] {
        let fd = pass_fd(&mut cmd, program)?;
        cmd.arg("--add-seccomp-fd").arg(fd.to_string());
    }
    cmd.args(["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]);
    cmd.args(["--chdir", "/tmp", "--clearenv"]);
    for (k, v) in allowed_env() {
        cmd.args(["--setenv", k, v]);
    }
    Ok(cmd)
}

/// Makes `bytes` readable, to their end, from a file descriptor that the process `cmd` starts
/// inherits (a pipe; every other descriptor of this process is close-on-exec); returns its number.
/// The descriptor lives as long as `cmd`.
fn pass_fd(cmd: &mut Command, bytes: &[u8]) -> Result<i32, AbmError> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let failed = |e: io::Error| AbmError::Spawn(format!("cannot pass the seccomp filter: {e}"));
    let (reader, mut writer) = io::pipe().map_err(failed)?;
    // A filter is a few hundred bytes, far below a pipe's buffer: this write does not block.
    writer.write_all(bytes).map_err(failed)?;
    drop(writer);
    let fd = reader.as_raw_fd();
    // SAFETY: the closure runs in the child between fork and exec and only calls fcntl, which is
    // async-signal-safe, on a descriptor the closure keeps open (it owns `reader`).
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(reader.as_raw_fd(), libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(fd)
}

fn absolute(p: &Path) -> Result<PathBuf, AbmError> {
    std::path::absolute(p).map_err(|e| AbmError::Spawn(format!("{}: {e}", p.display())))
}

/// Checks once, at pool start, that the sandbox can be built on this machine: runs the
/// interpreter inside it. Nothing to check for [`Sandbox::Unsafe`].
pub(crate) fn probe(python: &Path, sandbox: Sandbox) -> Result<(), AbmError> {
    match sandbox {
        Sandbox::Unsafe => Ok(()),
        Sandbox::Bwrap => probe_with(&bwrap(), python),
    }
}

fn probe_with(bwrap: &Path, python: &Path) -> Result<(), AbmError> {
    let python = sandboxed_python(python)?;
    let mut cmd = bwrap_command(bwrap, &python, None)?;
    cmd.arg(&python).args(["-c", ""]);
    cmd.stdin(Stdio::null());
    let cause = match cmd.output() {
        Ok(out) if out.status.success() => return Ok(()),
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            format!("{} exited with {}: {}", bwrap.display(), out.status, last.trim())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            format!("{} is not installed (Debian: apt-get install bubblewrap)", bwrap.display())
        }
        Err(e) => format!("cannot run {}: {e}", bwrap.display()),
    };
    Err(AbmError::Sandbox(cause))
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from the one long-lived spawner thread (see the module docs), in a process group
/// of its own so that [`kill_tree`] reaches its children.
pub(crate) fn spawn(mut cmd: Command) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        let started = std::thread::Builder::new().name("abm-spawner".into()).spawn(move || {
            for (mut cmd, reply) in rx {
                let _ = reply.send(cmd.spawn());
            }
        });
        if let Err(e) = started {
            // Without the thread every send below fails and reports this.
            eprintln!("simtree: cannot start the ABM spawner thread: {e}");
        }
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    let sent = sender.lock().unwrap_or_else(|p| p.into_inner()).send((cmd, reply));
    let gone = || io::Error::other("the ABM spawner thread is gone");
    sent.map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

/// A worker's own `pids` cgroup (see the module docs), removed when dropped (once the worker's
/// processes are gone).
pub(crate) struct TaskCap {
    dir: PathBuf,
}

impl Drop for TaskCap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The `pids` controller's folder (cgroup v1), if this process may make cgroups in it.
fn pids_root() -> Option<&'static Path> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let root = mounts.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "pids")).then(|| PathBuf::from(f[1]))
        })?;
        // Folders a killed server left behind: `simtree-<pid>-<n>` of a process that is gone
        // (a live server's may be empty between its workers; rmdir refuses non-empty ones).
        if let Ok(entries) = std::fs::read_dir(&root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let owner = name.strip_prefix("simtree-").and_then(|r| r.split('-').next());
                if let Some(pid) = owner.and_then(|p| p.parse::<u32>().ok())
                    && !Path::new(&format!("/proc/{pid}")).exists()
                {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        let probe = root.join(format!("simtree-{}-probe", std::process::id()));
        std::fs::create_dir(&probe).ok()?;
        let _ = std::fs::remove_dir(&probe);
        Some(root)
    })
    .as_deref()
}

/// Puts the process `cmd` starts (and so all it starts) in a new `pids` cgroup of at most
/// [`MAX_TASKS`] tasks, entered between fork and exec. None where there is no writable `pids`
/// controller (the audit hook inside the worker still refuses new processes).
pub(crate) fn cap_tasks(cmd: &mut Command) -> Option<TaskCap> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = pids_root()?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = root.join(format!("simtree-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    let cap = TaskCap { dir };
    std::fs::write(cap.dir.join("pids.max"), MAX_TASKS.to_string()).ok()?;
    let procs = std::ffi::CString::new(cap.dir.join("cgroup.procs").as_os_str().as_bytes()).ok()?;
    // SAFETY: the closure runs in the child between fork and exec and only makes the
    // async-signal-safe calls open, write and close on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if wrote != 1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Some(cap)
}

/// SIGKILLs the worker's whole process group, then the worker itself, and reaps it. Under
/// bubblewrap the sandbox's PID 1 dies with its parent, which takes every process of the sandbox
/// with it, even ones that left the group with `setsid`.
pub(crate) fn kill_tree(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group `pid`, which the child
        // leads (spawned with process_group(0)); no memory is involved.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bwrap_is_named_with_the_way_out() {
        let err = probe_with(Path::new("/nonexistent/bwrap"), Path::new("/usr/bin/env")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/bwrap is not installed"), "{text}");
        assert!(text.contains("--unsafe-abm"), "{text}");
    }

    #[test]
    fn the_sandbox_command_clears_the_environment_of_bwrap_itself() {
        let cmd = bwrap_command(Path::new("bwrap"), Path::new("/usr/bin/env"), None).unwrap();
        let envs: Vec<_> = cmd.get_envs().collect();
        // env_clear plus exactly the allowlist: nothing of this process's environment is passed.
        assert_eq!(envs.len(), allowed_env().len(), "{envs:?}");
        let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            &args[..4],
            ["--size", &TMP_BYTES.to_string(), "--tmpfs", "/tmp"],
            "the private, bounded /tmp comes first"
        );
        for flag in ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"] {
            assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
        }
        // The root and /dev are made read-only after every mount (a later mount point could
        // not be made), and both seccomp programs are passed.
        let pos = |flag: &str, value: &str| args.windows(2).position(|w| w[0] == flag && w[1] == value);
        let last_mount = args
            .iter()
            .rposition(|a| ["--ro-bind", "--symlink", "--dev", "--proc", "--tmpfs"].contains(&a.as_str()))
            .unwrap();
        for dir in ["/", "/dev"] {
            assert!(pos("--remount-ro", dir).is_some_and(|p| p > last_mount), "{dir} in {args:?}");
        }
        assert_eq!(args.iter().filter(|a| *a == "--add-seccomp-fd").count(), 2, "{args:?}");
    }
}
