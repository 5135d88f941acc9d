//! Hostile agent-based models against the real server (issue 10): model code that reads the
//! environment, writes outside its sandbox, connects to the host, starts processes, fills its
//! /tmp, floods its output, or ignores SIGXCPU and spins; an import carrying a pickle that would create a file when loaded;
//! and a deleted node whose run is in flight. Each model is the one-behaviour fixture
//! (`server/tests/fixtures/abm/one_behavior.json`) with hostile code, brought in through the
//! import route as an untrusted tree would be.
//!
//! Servers get `SIMTREE_ABM_CALL_TIMEOUT` (seconds per worker call, see the README) so that the
//! wall-clock kill is quick to observe.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree_e2e::Server;

const SECRET: &str = "sk-test-secret-123456";

/// The fixture model with `code` as its agents' one behaviour (3 agents: it runs 3 times a step).
fn model_with(code: &str) -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/tests/fixtures/abm/one_behavior.json");
    let mut model: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    model["agents"][0][0]["agentBehaviors"][0]["code"] = json!(code);
    model
}

/// A server with the secret in its environment and a short wall-clock budget per ABM call.
fn server(call_timeout_s: u64, flags: &[&str]) -> Server {
    let timeout = call_timeout_s.to_string();
    Server::start_env(flags, &[("LLM_API_KEY", SECRET), ("SIMTREE_ABM_CALL_TIMEOUT", timeout.as_str())])
}

/// The export of a fresh `sir_network` tree (creating it also starts the ABM workers).
async fn sir_export(s: &Server) -> Value {
    let t = s.create("sir_network").await;
    let (st, export) = s.get(&format!("/devui/simtree/{t}/export")).await;
    assert_eq!(st, 200, "{export}");
    export
}

/// Imports a one-node tree whose root runs `model`; returns the new tree's id.
async fn import_model(s: &Server, model: Value) -> u64 {
    let mut export = sir_export(s).await;
    export["nodes"][0]["sim"]["model"] = model;
    let (st, r) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{r}");
    r["id"].as_u64().unwrap()
}

async fn advance(s: &Server, t: u64, parent: u64, turns: u64) -> (u16, Value) {
    s.post(&format!("/devui/simtree/{t}/advance"), &json!({"parent": parent, "turns": turns})).await
}

/// Host processes whose command line contains `marker` (`pgrep -f`).
fn host_processes(marker: &str) -> String {
    let out = std::process::Command::new("pgrep").args(["-a", "-f", marker]).output().unwrap();
    // pgrep matches its own command line too when run through a shell; not here (direct exec).
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn model_code_cannot_read_secrets_write_outside_or_connect_out() {
    let s = server(30, &[]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let in_tmp = std::env::temp_dir().join(format!("simtree-hostile-{}", std::process::id()));
    let in_checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
        .join(format!("hostile-{}.txt", std::process::id()));
    let code = format!(
        r#"def act(self):
    import os, socket
    globalVariable.ticks += 1
    found = [k + '=' + v for k, v in os.environ.items()]
    for p in ('/proc/1/environ', '/proc/self/environ'):
        try:
            found.append(open(p).read())
        except Exception as e:
            found.append(repr(e))
    for p in ('{in_tmp}', '{in_checkout}'):
        try:
            open(p, 'w').write('escaped')
            found.append('wrote ' + p)
        except Exception as e:
            found.append(repr(e))
    try:
        socket.create_connection(('127.0.0.1', {port}), timeout=2)
        found.append('connected')
    except Exception as e:
        found.append(repr(e))
    globalVariable.seen = ' '.join(found)
    if globalVariable.ticks > 3:
        raise RuntimeError('leaking ' + globalVariable.seen)"#,
        in_tmp = in_tmp.display(),
        in_checkout = in_checkout.display(),
    );
    let t = import_model(&s, model_with(&code)).await;
    // Step 1 records what the code found; step 2 raises it in an error.
    let (st, first) = advance(&s, t, 0, 1).await;
    assert_eq!((st, first.get("error")), (200, None), "{first}");
    let (_, second) = advance(&s, t, first["child"].as_u64().unwrap(), 1).await;
    let error = second["error"].as_str().unwrap_or_default();
    assert!(error.contains("leaking"), "the model's error comes back: {second}");
    let (_, export) = s.get(&format!("/devui/simtree/{t}/export")).await;
    let everything = format!("{first}{second}{export}");
    // The code ran and saw an environment, just not the server's.
    assert!(everything.contains("PATH=/usr/bin:/bin"), "{everything}");
    assert!(!everything.contains(SECRET), "the key leaked: {everything}");
    assert!(!everything.contains("LLM_API_KEY"), "{everything}");
    // The sandbox's seccomp filter refuses an internet socket before any connection is tried.
    assert!(everything.contains("PermissionError(1"), "{everything}");
    assert!(listener.accept().is_err(), "a connection reached the host's listener");
    assert!(!in_tmp.exists(), "{} was written", in_tmp.display());
    assert!(!in_checkout.exists(), "{} was written", in_checkout.display());
}

#[tokio::test]
async fn model_code_cannot_start_processes() {
    let s = server(30, &[]);
    let marker = format!("{}.{}", std::process::id(), 8181);
    // Each way in: fork (with a detached grandchild if it worked), system, subprocess, the C
    // fork_exec under subprocess, and libc through ctypes.
    let code = format!(
        r#"def act(self):
    import os, subprocess, _posixsubprocess, ctypes
    seen = []
    def fork():
        if os.fork() == 0:
            os.setsid()
            os.execv('/usr/bin/sleep', ['sleep', '{marker}'])
    tries = [
        ('fork', fork),
        ('system', lambda: os.system('sleep {marker} &')),
        ('popen', lambda: subprocess.Popen(['sleep', '{marker}'])),
        ('fork_exec', lambda: _posixsubprocess.fork_exec()),
        ('ctypes', lambda: ctypes.CDLL(None).fork()),
    ]
    for name, f in tries:
        try:
            f()
            seen.append(name + ' ran')
        except PermissionError:
            seen.append(name + ' refused')
    raise RuntimeError(' '.join(seen))"#
    );
    let t = import_model(&s, model_with(&code)).await;
    let (st, r) = advance(&s, t, 0, 1).await;
    assert_eq!(st, 200, "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(error.contains("fork refused system refused popen refused fork_exec refused ctypes refused"), "{r}");
    assert_eq!(host_processes(&marker), "", "a process was started");
    // The worker is fine afterwards: a healthy model runs.
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 3).await;
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
    // Where the machine lets the server make pids cgroups (root, cgroup v1 here), each worker
    // lives in one of its own, capped.
    let root = std::path::Path::new("/sys/fs/cgroup/pids");
    if unsafe { libc::geteuid() } == 0 && root.join("cgroup.procs").exists() {
        let prefix = format!("simtree-{}-", s.pid());
        let capped: Vec<(String, String)> = std::fs::read_dir(root)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| {
                let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
                (read("pids.max").trim().to_string(), read("cgroup.procs"))
            })
            .collect();
        assert!(
            capped.iter().any(|(max, procs)| max == "256" && !procs.trim().is_empty()),
            "no capped cgroup holds a worker: {capped:?}"
        );
    }
}

/// Model code that first disarms the worker's audit hook (emptying the set of events it refuses,
/// which code that finds the worker's module can do), then tries every way to start or trace a
/// process, exec, open an internet socket or hide memory. Each try is reported as
/// `NAME refused` (PermissionError), `NAME ran`, or `NAME failed ERROR`; threads and Unix
/// sockets must still work. The report is raised as the model's error.
const PAST_THE_HOOK: &str = r#"def act(self):
    import os, sys, socket, subprocess, threading, ctypes
    sys.modules['__main__'].FORBIDDEN_EVENTS = frozenset()
    libc = ctypes.CDLL(None, use_errno=True)
    def checked(r, name):
        if r == -1:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        if r == 0 and name == 'fork':
            os._exit(0)
    def reimported():
        del sys.modules['_posixsubprocess']
        import _posixsubprocess
        subprocess._fork_exec = _posixsubprocess.fork_exec
        subprocess.Popen(['/usr/bin/sleep', 'MARKER'])
    def thread():
        t = threading.Thread(target=lambda: None)
        t.start()
        t.join()
    tries = [
        ('os.fork', lambda: os.fork() == 0 and os._exit(0)),
        ('reimported fork_exec', reimported),
        ('libc fork', lambda: checked(libc.fork(), 'fork')),
        ('posix_spawn', lambda: os.posix_spawn('/usr/bin/sleep', ['sleep', 'MARKER'], {})),
        ('execv', lambda: os.execv('/usr/bin/sleep', ['sleep', 'MARKER'])),
        ('ptrace', lambda: checked(libc.ptrace(16, 1, 0, 0), 'ptrace')),
        ('inet socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
        ('inet6 socket', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
        ('memfd', lambda: os.memfd_create('hidden')),
        ('thread', thread),
        ('unix socketpair', lambda: socket.socketpair(socket.AF_UNIX)),
    ]
    seen = []
    for name, f in tries:
        try:
            f()
            seen.append(name + ' ran')
        except PermissionError:
            seen.append(name + ' refused')
        except Exception as e:
            seen.append(name + ' failed ' + repr(e))
    raise RuntimeError('; '.join(seen) + '.')"#;

/// Checks the report of [`PAST_THE_HOOK`] (given as the error text).
fn assert_past_the_hook_refused(report: &str) {
    for refused in [
        "os.fork",
        "reimported fork_exec",
        "libc fork",
        "posix_spawn",
        "execv",
        "ptrace",
        "inet socket",
        "inet6 socket",
        "memfd",
    ] {
        assert!(report.contains(&format!("{refused} refused")), "{refused}: {report}");
    }
    for works in ["thread", "unix socketpair"] {
        assert!(report.contains(&format!("{works} ran")), "{works}: {report}");
    }
}

#[tokio::test]
async fn the_kernel_refuses_processes_exec_and_sockets_even_past_the_audit_hook() {
    let s = server(30, &[]);
    let marker = format!("{}.{}", std::process::id(), 8282);
    let t = import_model(&s, model_with(&PAST_THE_HOOK.replace("MARKER", &marker))).await;
    let (st, r) = advance(&s, t, 0, 1).await;
    assert_eq!(st, 200, "{r}");
    assert_past_the_hook_refused(r["error"].as_str().unwrap_or_default());
    assert_eq!(host_processes(&marker), "", "a process was started");
    // The server keeps serving, and a healthy model runs.
    assert_eq!(s.get("/health").await.0, 200);
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 3).await;
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
}

/// Model code that writes 300 MiB to `/`, `/dev/shm` and `/root` in its first call, and in its
/// second call (tick 4) raises what it managed and which files are still there.
const BIG_WRITES: &str = r#"def act(self):
    import os
    paths = ('/fill', '/dev/shm/fill', '/root/fill')
    globalVariable.ticks += 1
    if globalVariable.ticks == 1:
        seen = []
        for p in paths:
            n = 0
            try:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, 'wb') as f:
                    for _ in range(300):
                        f.write(b'x' * (1 << 20))
                        n += 1
                seen.append(p + ' took 300 MiB')
            except OSError as e:
                seen.append(p + ' errno ' + str(e.errno) + ' after ' + str(n) + ' MiB')
        globalVariable.seen = '; '.join(seen)
    if globalVariable.ticks == 4:
        left = [p for p in paths if os.path.exists(p)]
        raise RuntimeError(globalVariable.seen + '. left: ' + ','.join(left) + '.')"#;

/// Checks the report of [`BIG_WRITES`]: at most 64 MiB went anywhere, and nothing was left for
/// the next call.
fn assert_big_writes_contained(report: &str) {
    for p in ["/fill", "/dev/shm/fill", "/root/fill"] {
        let mib: u64 = report
            .split(&format!("{p} errno "))
            .nth(1)
            .and_then(|r| r.split(" after ").nth(1))
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(mib <= 64, "{p}: {mib} MiB written: {report}");
    }
}

/// Checks that [`BIG_WRITES`]'s files did not outlive the call that wrote them.
fn assert_nothing_left(report: &str) {
    let left = report.split("left: ").nth(1).and_then(|l| l.lines().next());
    assert_eq!(left, Some("."), "files outlived their call: {report}");
}

#[tokio::test]
async fn the_sandbox_root_dev_shm_and_root_take_no_big_writes() {
    let s = server(60, &[]);
    let t = import_model(&s, model_with(BIG_WRITES)).await;
    let (st, first) = advance(&s, t, 0, 1).await;
    assert_eq!((st, first.get("error")), (200, None), "{first}");
    let (_, second) = advance(&s, t, first["child"].as_u64().unwrap(), 1).await;
    let report = second["error"].as_str().unwrap_or_default();
    assert_big_writes_contained(report);
    assert_nothing_left(report);
    assert_eq!(s.get("/health").await.0, 200);
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 2).await;
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
}

/// Where a root test run keeps the ABM venv that user `nobody` runs models with: world-readable,
/// made from Debian's `/usr/bin/python3` (the checkout's `.venv-abm` may link to an interpreter
/// under root's private home, such as pyenv's, which `nobody` cannot read).
const SYSTEM_VENV_ROOT: &str = "/var/cache/simtree/abm-system-python";

/// The interpreter of the venv under [`SYSTEM_VENV_ROOT`], made (or brought up to the checkout's
/// requirements) by `simtree abm setup` with Debian's Python, idempotently and one test process
/// at a time; or why it cannot be had here.
fn system_python_venv(checkout: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use std::os::fd::AsRawFd;
    let root = std::path::Path::new(SYSTEM_VENV_ROOT);
    let requirements = std::fs::read(checkout.join("assets/python/requirements.txt")).map_err(|e| e.to_string())?;
    let copy = root.join("assets/python/requirements.txt");
    std::fs::create_dir_all(copy.parent().unwrap()).map_err(|e| format!("{}: {e}", root.display()))?;
    let lock = std::fs::File::create(root.join(".lock")).map_err(|e| e.to_string())?;
    // SAFETY: flock on a descriptor this function owns; released when `lock` is dropped.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    if std::fs::read(&copy).ok().as_deref() != Some(&requirements[..]) {
        std::fs::write(&copy, &requirements).map_err(|e| e.to_string())?;
    }
    let out = std::process::Command::new(simtree_e2e::simtree_bin())
        .arg("--assets")
        .arg(root.join("assets"))
        .args(["abm", "setup"])
        .env("SIMTREE_BOOTSTRAP_PYTHON", "/usr/bin/python3")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("simtree abm setup: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(root.join(".venv-abm/bin/python"))
}

/// `simtree abm run` on the fixture model with `code`, for `steps` steps, as a normal user:
/// `nobody` when the test runs as root (with the interpreter of [`system_python_venv`]), this
/// user otherwise. Returns what it printed on stderr, or None, with the reason printed, where
/// that venv cannot be made (Debian's python3-venv missing, no way to the package index).
fn abm_run_as_normal_user(code: &str, steps: u32) -> Option<String> {
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let python = match system_python_venv(&checkout) {
            Ok(python) => python,
            Err(why) => {
                eprintln!("skipped: no venv of Debian's python3 for user nobody: {why}");
                return None;
            }
        };
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(simtree_e2e::simtree_bin())
            .env("SIMTREE_PYTHON", python);
        cmd
    } else {
        std::process::Command::new(simtree_e2e::simtree_bin())
    };
    let file = std::env::temp_dir().join(format!("simtree-walls-{}-{steps}.json", std::process::id()));
    std::fs::write(&file, model_with(code).to_string()).unwrap();
    let out = cmd.args(["abm", "run"]).arg(&file).args(["--steps", &steps.to_string(), "--json"]).output().unwrap();
    let _ = std::fs::remove_file(&file);
    Some(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_walls_hold_for_a_normal_user() {
    let marker = format!("{}.{}", std::process::id(), 8383);
    let Some(report) = abm_run_as_normal_user(&PAST_THE_HOOK.replace("MARKER", &marker), 1) else {
        return;
    };
    assert_past_the_hook_refused(&report);
    assert_eq!(host_processes(&marker), "", "a process was started");
    // One call here (the command line runs both steps at once): the writes are refused.
    let report = abm_run_as_normal_user(BIG_WRITES, 2).unwrap_or_default();
    assert_big_writes_contained(&report);
}

#[tokio::test]
async fn descriptors_the_server_inherited_do_not_reach_model_code() {
    // A host file open without close-on-exec in the server's parent (this test), so the server
    // and bwrap inherit it.
    let path = std::env::temp_dir().join(format!("simtree-inherited-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: fcntl on a descriptor this test owns; no memory is involved.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
    let s = server(30, &[]);
    let code = format!(
        "def act(self):\n    import os\n    try:\n        os.write({fd}, b'escaped')\n        seen = 'wrote'\n    except OSError as e:\n        seen = 'errno ' + str(e.errno)\n    raise RuntimeError('fd {fd}: ' + seen)"
    );
    let t = import_model(&s, model_with(&code)).await;
    let (st, r) = advance(&s, t, 0, 1).await;
    drop(file);
    let written = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(st, 200, "{r}");
    assert!(written.is_empty(), "model code wrote to the host's file: {r}");
    assert!(r["error"].as_str().unwrap_or_default().contains("errno 9"), "{r}");
}

#[tokio::test]
async fn the_sandbox_tmp_is_bounded_and_emptied_after_each_call() {
    let s = server(60, &[]);
    // Step 1 fills /tmp (64 MiB) and leaves a file; step 2 (another call) looks for it.
    let code = r#"def act(self):
    import os
    globalVariable.ticks += 1
    if globalVariable.ticks == 1:
        try:
            with open('/tmp/fill', 'wb') as f:
                for _ in range(1024):
                    f.write(b'x' * (1 << 20))
            globalVariable.seen = 'wrote 1 GiB'
        except OSError as e:
            globalVariable.seen = 'full at ' + str(os.path.getsize('/tmp/fill') >> 20) + ' MiB errno ' + str(e.errno)
        open('/tmp/left-behind', 'w').close()
    if globalVariable.ticks == 4:
        raise RuntimeError(globalVariable.seen + '; left: ' + ','.join(sorted(os.listdir('/tmp'))) + '.')"#;
    let t = import_model(&s, model_with(code)).await;
    let (st, first) = advance(&s, t, 0, 1).await;
    assert_eq!((st, first.get("error")), (200, None), "{first}");
    let (_, second) = advance(&s, t, first["child"].as_u64().unwrap(), 1).await;
    let error = second["error"].as_str().unwrap_or_default();
    assert!(error.contains("errno 28"), "a full /tmp fails the write: {second}");
    let mib: u64 = error
        .split("full at ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(mib <= 64, "{mib} MiB written");
    // Emptied: the next call finds neither file (only folders the sandbox made for its binds,
    // when the checkout lives under /tmp).
    let left = error.split("; left: ").nth(1).unwrap_or_default();
    assert!(!left.contains("fill") && !left.contains("left-behind"), "the next call found /tmp emptied: {second}");
}

#[tokio::test]
async fn an_output_flood_without_newlines_is_kept_by_bytes() {
    let s = server(120, &[]);
    let sir = s.create("sir_network").await;
    assert_eq!(advance(&s, sir, 0, 1).await.0, 200);
    let before = s.peak_rss_mib();
    // 3 agents × 100 MiB on stderr, not one newline.
    let code = "def act(self):\n    import sys\n    for _ in range(100):\n        sys.stderr.write('y' * (1 << 20))\n    sys.stderr.flush()\n    globalVariable.ticks += 1";
    let t = import_model(&s, model_with(code)).await;
    let (st, r) = advance(&s, t, 0, 1).await;
    assert_eq!((st, r.get("error")), (200, None), "{r}");
    let grew = s.peak_rss_mib().saturating_sub(before);
    assert!(grew < 64, "the server's peak memory grew by {grew} MiB for 300 MiB of output");
}

#[tokio::test]
async fn code_ignoring_sigxcpu_is_killed_by_the_wall_clock_and_the_server_keeps_serving() {
    let s = server(3, &[]);
    let code = "def act(self):\n    import signal\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n    while True:\n        pass";
    let t = import_model(&s, model_with(code)).await;
    let started = Instant::now();
    let (st, r) = advance(&s, t, 0, 1).await;
    let took = started.elapsed();
    assert_eq!(st, 200, "{r}");
    let error = r["error"].as_str().unwrap_or_default();
    assert!(error.contains("did not finish within 3s"), "{r}");
    assert!(took < Duration::from_secs(10), "killed after {took:?}");
    assert_eq!(s.get("/health").await.0, 200);
    // The worker was replaced: a healthy model runs.
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 3).await;
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
}

/// `builtins.open('/tmp/simtree-hostile-pickle-marker', 'w')` as a protocol-0 pickle, base64.
const EVIL_PICKLE: &str = "Y2J1aWx0aW5zCm9wZW4KKFYvdG1wL3NpbXRyZWUtaG9zdGlsZS1waWNrbGUtbWFya2VyClZ3CnRSLg==";
const PICKLE_MARKER: &str = "/tmp/simtree-hostile-pickle-marker";

#[tokio::test]
async fn an_imported_pickle_is_never_loaded_and_the_node_is_rebuilt_from_its_spec() {
    // Unsandboxed on purpose: a pickle loaded here would create the file on the host, so the
    // test sees the import defence alone.
    let s = server(60, &["--unsafe-abm"]);
    let _ = std::fs::remove_file(PICKLE_MARKER);
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 3})).await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    let (_, a) = advance(&s, t, 0, 6).await;
    let a = a["child"].as_u64().unwrap();
    let op = json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.25});
    let (st, b) = s.post(&format!("/devui/simtree/{t}/branch"), &json!({"parent": a, "ops": [op]})).await;
    assert_eq!(st, 200, "{b}");
    let b = b["child"].as_u64().unwrap();
    let (_, c) = advance(&s, t, b, 4).await;
    let c = c["child"].as_u64().unwrap();
    let (_, export) = s.get(&format!("/devui/simtree/{t}/export")).await;
    assert!(!export.to_string().contains("\"snapshot\""), "exports carry no pickles");

    // The hostile copy: every node carries the pickle.
    let mut hostile = export.clone();
    for n in hostile["nodes"].as_array_mut().unwrap() {
        n["sim"]["snapshot"] = json!(EVIL_PICKLE);
    }
    let (st, imported) = s.post("/devui/simtree/import", &hostile).await;
    assert_eq!(st, 200, "{imported}");
    let copy = imported["id"].as_u64().unwrap();
    let (st, cont) = advance(&s, copy, c, 5).await;
    assert_eq!((st, cont.get("error")), (200, None), "{cont}");
    assert!(!std::path::Path::new(PICKLE_MARKER).exists(), "the imported pickle was loaded");

    // Rebuilt from the spec, seed and recorded history, it continues exactly like the original.
    let (_, orig) = advance(&s, t, c, 5).await;
    let series = |s: Value| -> Vec<Value> {
        s.as_array().unwrap().iter().filter(|e| e["type"] == "abm_step").map(|e| e["data"].clone()).collect()
    };
    let logs = |tree: u64, node: &Value| format!("/devui/simtree/{tree}/node/{}/logs", node["child"]);
    let rebuilt = series(s.get(&logs(copy, &cont)).await.1);
    let original = series(s.get(&logs(t, &orig)).await.1);
    // A node's log holds its ancestors' steps too: step 0, 6 + 4 steps, then the 5 new ones.
    assert_eq!(rebuilt.len(), 16);
    assert_eq!(rebuilt[11]["step"], 11);
    assert_eq!(rebuilt[11..], original[11..], "the continuation matches step for step");
}

#[tokio::test]
async fn deleting_nodes_whose_runs_are_in_flight_frees_the_workers() {
    let s = server(600, &[]);
    let sleeper = model_with("def act(self):\n    import time\n    time.sleep(600)");
    let t = import_model(&s, sleeper).await;
    let mut watcher = s.watch(&format!("/devui/simtree/{t}/events")).await;
    // The server has two workers: occupy both.
    let base = s.base.clone();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let url = format!("{base}/devui/simtree/{t}/advance");
        runs.push(tokio::spawn(async move {
            reqwest::Client::new().post(url).json(&json!({"parent": 0, "turns": 1})).send().await
        }));
    }
    let mut running = Vec::new();
    let (_, seen) = watcher
        .until(Duration::from_secs(60), |m| {
            if m["type"] == "run_start" {
                running.push(m["data"]["node"].as_u64().unwrap());
            }
            running.len() == 2
        })
        .await;
    assert!(seen, "both runs started");
    // Let both reach the model code (past the worker start and the model's load).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in &running {
        let (st, r) = s.delete(&format!("/devui/simtree/{t}/node/{n}")).await;
        assert_eq!(st, 200, "{r}");
    }
    let deleted = Instant::now();
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 2).await;
    let took = deleted.elapsed();
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
    eprintln!("a new ABM run finished {took:?} after deleting the busy nodes");
    // Without cancellation it would wait for a 600 s sleep; with it, the killed workers are
    // free at once and their replacements start while the tree is created.
    assert!(took < Duration::from_secs(15), "{took:?}");
    for r in runs {
        r.abort();
    }
}

#[tokio::test]
async fn cancel_stops_an_abm_run_keeps_its_node_and_frees_the_worker() {
    let s = server(600, &[]);
    let sleeper = model_with("def act(self):\n    import time\n    time.sleep(600)");
    let t = import_model(&s, sleeper).await;
    let run = s.advance_in_background(t, 0, 1);
    let node = s.first_running(t).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = Instant::now();
    let (st, r) = s.post(&format!("/devui/simtree/{t}/node/{node}/cancel"), &json!({})).await;
    assert_eq!(st, 200, "{r}");
    assert!(asked.elapsed() < Duration::from_secs(2), "cancel took {:?}", asked.elapsed());
    let reply = run.await.unwrap();
    assert_eq!(reply["error"], "the run was cancelled", "{reply}");
    let (_, info) = s.get(&format!("/devui/simtree/{t}/node/{node}/info")).await;
    assert_eq!(info["status"], "cancelled");
    // The worker is free again: a normal model advances.
    let sir = s.create("sir_network").await;
    let (st, ok) = advance(&s, sir, 0, 2).await;
    assert_eq!((st, ok.get("error")), (200, None), "{ok}");
}

#[test]
fn the_cli_runs_models_sandboxed_and_with_unsafe_abm_when_asked() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/abm/wealth_exchange.json");
    for flags in [&[][..], &["--unsafe-abm"][..]] {
        let out = std::process::Command::new(simtree_e2e::simtree_bin())
            .args(["abm", "run", model, "--steps", "2", "--json"])
            .args(flags)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{flags:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(stdout.lines().count(), 4, "start, 2 steps, end: {stdout}");
    }
}
