//! `cargo xtask <task>` — the project's tasks, in Rust instead of shell scripts.
//!
//! * `run [serve flags…]` — build the web UI and the server, serve on 127.0.0.1:8090 (mock LLM, no
//!   keys);
//! * `dist [--release]` — build the web UI into `frontend/dist` (wasm-bindgen as a library),
//!   each file also brotli- and gzip-compressed beside itself; only files whose bytes change are
//!   written, and nothing is redone when its inputs have not changed (see `dist.rs`);
//! * `test` — everything CI checks: formatting, clippy, the web UI build, the whole workspace's
//!   tests (unit, golden, black-box against the real binary, headless Chromium), then the
//!   schemathesis contract run against `/openapi.json` (`contract`) beside the Python client's
//!   pytest suite (`pyclient`), then the real-model tests (`llm-e2e`);
//! * `bench` — the engine and tree benchmarks (release build), printing their figures, and the
//!   prompt-caching bench when llama-server and the model are already cached;
//! * `bench-llm-cache` — provider prompt caching on real inference: two llama.cpp `llama-server`
//!   processes (built once per machine into `~/.cache/simtree`), affinity on and off (see
//!   `llama_server.rs`, `tests/benches/llm_cache.rs`);
//! * `ui-bench` — the web UI in headless Chromium (release wasm): first render, cold and warm,
//!   and frame times of 250- to 20,000-node trees, the sizes sent (see `ui_bench.rs`);
//! * `llm-e2e` — the real-model step of `test` alone: SmolLM2-135M (from PyPI) behind
//!   llama-cpp-python's OpenAI-compatible server, built once per machine into `~/.cache/simtree`
//!   (see `real_llm.rs`; `SIMTREE_SKIP_REAL_LLM=1` skips it);
//! * `pyclient` — the Python client's tests alone (`clients/python`, pytest against
//!   `target/debug/simtree`; see `pyclient.rs`);
//! * `upstream-client [flags…]` — upstream SocialSim4's own React client, built from its mirror,
//!   driven in headless Chromium against the server (`tests/upstream-client/run.mjs`). Opt-in, not
//!   part of `test`: it needs Node ≥ 20.19 and the npm registry.
//!
//! Each task installs what it needs when it is missing, so a fresh machine needs only rustup.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod dist;
mod llama_server;
mod pyclient;
mod pyenv;
mod real_llm;
mod retry;
mod schemathesis;
mod ui_bench;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command, echoing it; an error names the command that failed.
fn run(mut cmd: Command) -> Result<(), String> {
    eprintln!("xtask: {cmd:?}");
    let status = cmd.status().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed ({status})")) }
}

/// Installs what the build and the tests need when it is missing: the wasm32 target, Debian's
/// bubblewrap (the ABM sandbox) and, for the tests, chromium + chromium-driver (the browser
/// tests), postgresql (the PostgreSQL store's tests start private instances of it),
/// python3-yaml (the deploy examples' test) and, as root, python3-venv (the sandbox's
/// normal-user test).
fn setup(for_tests: bool) -> Result<(), String> {
    let targets = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let has_wasm = targets.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-unknown-unknown"));
    if !has_wasm {
        let mut add = Command::new("rustup");
        add.args(["target", "add", "wasm32-unknown-unknown"]);
        run(add)?;
    }
    // The sandbox for agent-based model code (server/src/abm/sandbox.rs).
    let has_bwrap = Command::new("bwrap").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut missing = Vec::new();
    if !has_bwrap {
        missing.push("bubblewrap");
    }
    if for_tests {
        if !(Path::new("/usr/bin/chromedriver").exists() && Path::new("/usr/bin/chromium").exists()) {
            missing.extend(["chromium", "chromium-driver"]);
        }
        let has_postgres = std::fs::read_dir("/usr/lib/postgresql")
            .is_ok_and(|d| d.flatten().any(|v| v.path().join("bin/initdb").exists()));
        if !has_postgres {
            missing.push("postgresql");
        }
        // The deploy examples' test reads compose.yaml and kubernetes.yaml with PyYAML.
        let has_yaml = Command::new("python3").args(["-c", "import yaml"]).output().is_ok_and(|o| o.status.success());
        if !has_yaml {
            missing.push("python3-yaml");
        }
        // As root, the sandbox's normal-user test (tests/tests/hostile_abm.rs) runs models as
        // `nobody` in a venv it makes from Debian's python3, which needs Debian's venv module.
        let has_system_venv = Command::new("/usr/bin/python3")
            .args(["-c", "import ensurepip, venv"])
            .output()
            .is_ok_and(|o| o.status.success());
        if is_root() && !has_system_venv {
            missing.push("python3-venv");
        }
    }
    if !missing.is_empty() {
        run(apt(&["update", "-q"]))?;
        let mut install = apt(&["install", "-y", "-q"]);
        install.args(&missing).env("DEBIAN_FRONTEND", "noninteractive");
        run(install)?;
    }
    Ok(())
}

/// `apt-get ARGS`, through sudo unless we are root.
fn apt(args: &[&str]) -> Command {
    let mut cmd = if is_root() { Command::new("apt-get") } else { Command::new("sudo") };
    if !is_root() {
        cmd.arg("apt-get");
    }
    cmd.args(args);
    cmd
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn test() -> Result<(), String> {
    setup(true)?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)?;
    dist::build(false)?;
    // The black-box tests start the real binary.
    let build = || {
        let mut build = cargo();
        build.args(["build", "-p", "simtree-server", "--bin", "simtree"]);
        run(build)
    };
    build()?;
    let bin = target_dir().join("debug/simtree");
    second_build_rewrites_nothing(&bin, || {
        dist::build(false)?;
        build()
    })?;
    // The ABM worker's Python venv (real Mesa from PyPI), created once.
    let mut setup_abm = Command::new(&bin);
    setup_abm.args(["abm", "setup"]).current_dir(root());
    run(setup_abm)?;
    // E2E=1: the browser tests must run (they fail instead of skipping when something is missing).
    // A few failed tests get one second run, reported as FLAKY when it passes (see retry.rs).
    retry::test_workspace(|| {
        let mut c = cargo();
        c.env("E2E", "1");
        c
    })?;
    // The OpenAPI contract against the real binary, and beside it the Python client's tests: each
    // starts servers of its own and mostly waits on them.
    let (contract, client) = std::thread::scope(|s| {
        let client = s.spawn(pyclient::test);
        let contract = schemathesis::test();
        let client = client.join().unwrap_or_else(|_| Err("the Python client's tests panicked".into()));
        (contract, client)
    });
    contract?;
    client?;
    // Last and alone: llama.cpp needs both cores.
    real_llm::test()
}

/// `cargo xtask run`: the release web UI and server, built when something changed, then served.
/// Prints how long it took to get to serving: with nothing changed since the last run, the web
/// UI's check and cargo's are all that runs (seconds; see `dist.rs` and `server/build.rs`).
/// Issue 37, item 9, timed in CI: a second UI build and server build with nothing changed
/// rewrites no UI file, so the binary that embeds them is not linked again (its modification
/// time stays) and `cargo xtask run` starts serving at once. Prints the figure.
fn second_build_rewrites_nothing(
    bin: &std::path::Path,
    again: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before = modified(bin);
    let started = std::time::Instant::now();
    again()?;
    let took = started.elapsed().as_secs_f64();
    eprintln!("xtask: a second UI and server build with nothing changed took {took:.1} s");
    if modified(bin) != before {
        return Err(format!(
            "a second UI and server build with nothing changed linked {} again ({took:.1} s): a UI file was rewritten",
            bin.display()
        ));
    }
    Ok(())
}

fn serve(args: &[String]) -> Result<(), String> {
    let started = std::time::Instant::now();
    setup(false)?;
    dist::build(true)?;
    let ui = started.elapsed();
    let mut build = cargo();
    build.args(["build", "--release", "-p", "simtree-server", "--bin", "simtree"]);
    run(build)?;
    let server = started.elapsed() - ui;
    let bin = target_dir().join("release/simtree");
    let mut setup_abm = Command::new(&bin);
    setup_abm.args(["abm", "setup"]).current_dir(root());
    run(setup_abm)?;
    eprintln!("xtask: ready to serve in {:.1?} (web UI {ui:.1?}, server build {server:.1?})", started.elapsed());
    let mut cmd = Command::new(&bin);
    cmd.current_dir(root()).arg("serve");
    if !args.iter().any(|a| a == "--addr") {
        cmd.args(["--addr", "127.0.0.1:8090"]);
    }
    cmd.args(args);
    run(cmd)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// The engine, tree, ABM and sweep benchmarks, then the store's (which starts a private
/// PostgreSQL, hence the test setup).
fn bench() -> Result<(), String> {
    setup(true)?;
    let mut cmd = cargo();
    cmd.args(["bench", "-p", "simtree-server"]);
    run(cmd)?;
    let mut store = cargo();
    store.args(["bench", "-p", "simtree-e2e", "--bench", "store"]);
    run(store)?;
    let mut worlds = cargo();
    worlds.args(["bench", "-p", "simtree-e2e", "--bench", "own_worlds"]);
    run(worlds)?;
    let mut endpoints = cargo();
    endpoints.args(["bench", "-p", "simtree-e2e", "--bench", "endpoints"]);
    run(endpoints)?;
    let mut notebook = cargo();
    notebook.args(["bench", "-p", "simtree-e2e", "--bench", "notebook"]);
    run(notebook)?;
    let mut explore = cargo();
    explore.args(["bench", "-p", "simtree-e2e", "--bench", "explore"]);
    run(explore)?;
    let mut jobs = cargo();
    jobs.args(["bench", "-p", "simtree-e2e", "--bench", "jobs"]);
    run(jobs)?;
    // Opt-in: needs llama-server built (half an hour) and the model downloaded.
    llama_server::bench_if_cached().unwrap_or_else(|| {
        eprintln!("xtask: prompt-caching bench skipped: run `cargo xtask bench-llm-cache` once to build llama-server");
        Ok(())
    })
}

/// `tests/upstream-client/run.mjs` with its node modules (`npm ci` when they are missing or older
/// than the lockfile) and the debug server (built unless `SIMTREE_BIN` names one).
fn upstream_client(args: &[String]) -> Result<(), String> {
    let dir = root().join("tests/upstream-client");
    let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let installed = modified(dir.join("node_modules/.package-lock.json"));
    if installed.is_none() || installed < modified(dir.join("package-lock.json")) {
        let mut ci = Command::new("npm");
        ci.args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir).env("PUPPETEER_SKIP_DOWNLOAD", "1");
        run(ci)?;
    }
    let mut node = Command::new("node");
    node.arg("run.mjs").args(args).current_dir(&dir);
    if std::env::var_os("SIMTREE_BIN").is_none() {
        let mut build = cargo();
        build.args(["build", "-p", "simtree-server", "--bin", "simtree"]);
        run(build)?;
        node.env("SIMTREE_BIN", target_dir().join("debug/simtree"));
    }
    run(node)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("run") => serve(&args[1..]),
        Some("bench") => bench(),
        Some("bench-llm-cache") => llama_server::bench(),
        Some("llm-e2e") => real_llm::test(),
        Some("contract") => schemathesis::test(),
        Some("pyclient") => pyclient::test(),
        Some("ui-bench") => ui_bench::bench(),
        Some("upstream-client") => upstream_client(&args[1..]),
        Some("dist") => setup(false).and_then(|()| dist::build(args.iter().any(|a| a == "--release"))),
        _ => Err(
            "usage: cargo xtask <run [serve flags…] | dist [--release] | test | bench | bench-llm-cache | ui-bench | llm-e2e | contract | pyclient | upstream-client>"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
