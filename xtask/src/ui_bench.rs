//! `cargo xtask ui-bench` — the web UI's figures in a real browser, printed without thresholds.
//!
//! It builds the release wasm (`dist --release`, the `wasm-release` profile) and the release server,
//! then runs the `ui_bench` browser test (ignored in ordinary test runs): the real server with
//! `--ephemeral` storage, a 5,000- and a 20,000-node tree built over HTTP, each opened three
//! times in headless Chromium, timing the first render (navigation start to the first frame that
//! draws the whole tree, with when the wasm and the graph had arrived), then a drag-pan and wheel
//! zooms with one input event per animation frame: the requestAnimationFrame deltas (what a user
//! sees; the display caps them at 16.7 ms) and the script work each input cost (event handling
//! plus the canvas paint it scheduled), which shows how far below that cap a frame is.
//! Last it prints the size of the shipped wasm and JS, raw and gzip-compressed (`gzip -9`, as
//! a server would send them compressed).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::{cargo, dist, root, run, setup};

pub fn bench() -> Result<(), String> {
    setup(true)?;
    dist(true)?;
    let mut server = cargo();
    // The server `cargo xtask run` starts: a release build (a debug one spends most of a big
    // tree's first render building the graph's JSON).
    server.args(["build", "--release", "-p", "simtree-server", "--bin", "simtree"]);
    run(server)?;
    let out = root().join("frontend/dist");
    let mut test = cargo();
    test.args([
        "test",
        "-p",
        "simtree-e2e",
        "--test",
        "browser",
        "--",
        "--ignored",
        "--exact",
        "ui_bench",
        "--nocapture",
    ])
    .env("E2E", "1")
    .env("SIMTREE_DIST", &out)
    .env("SIMTREE_BIN", crate::target_dir().join("release/simtree"));
    run(test)?;
    for file in ["simtree_frontend_bg.wasm", "simtree_frontend.js"] {
        let path = out.join(file);
        let raw = std::fs::metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        println!("ui-bench: {file}: {} bytes, {} bytes gzip -9", raw, gzip_size(&path)?);
    }
    Ok(())
}

/// The size of `path` compressed by `gzip -9` (the system's gzip; the xtask has no compressor).
fn gzip_size(path: &Path) -> Result<usize, String> {
    let out = Command::new("gzip")
        .args(["-9", "-c"])
        .arg(path)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run gzip: {e}"))?;
    if !out.status.success() {
        return Err(format!("gzip {} failed ({})", path.display(), out.status));
    }
    Ok(out.stdout.len())
}
