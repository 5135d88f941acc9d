//! `cargo xtask <task>` — the project's tasks, in Rust instead of shell scripts.
//!
//! * `run [serve flags…]` — build and serve the app on 127.0.0.1:8090 (mock LLM, no keys);
//! * `test` — everything CI checks: formatting, clippy, the whole workspace's tests (unit, golden,
//!   black-box against the real binary);
//! * `bench` — the engine and tree benchmarks (release build), printing their figures.
//!
//! Each task installs what it needs when it is missing, so a fresh machine needs only rustup.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Runs a command, echoing it; an error names the command that failed.
fn run(mut cmd: Command) -> Result<(), String> {
    eprintln!("xtask: {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({status})"))
    }
}

fn test() -> Result<(), String> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    run(clippy)?;
    // The black-box tests start the real binary.
    let mut build = cargo();
    build.args(["build", "-p", "simtree-server", "--bin", "simtree"]);
    run(build)?;
    let mut tests = cargo();
    tests.args(["test", "--workspace"]);
    run(tests)
}

fn serve(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "-p",
        "simtree-server",
        "--bin",
        "simtree",
        "--",
        "serve",
    ]);
    if !args.iter().any(|a| a == "--addr") {
        cmd.args(["--addr", "127.0.0.1:8090"]);
    }
    cmd.args(args);
    run(cmd)
}

fn bench() -> Result<(), String> {
    let mut cmd = cargo();
    cmd.args(["bench", "-p", "simtree-server"]);
    run(cmd)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("run") => serve(&args[1..]),
        Some("bench") => bench(),
        _ => Err("usage: cargo xtask <run [serve flags…] | test | bench>".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
