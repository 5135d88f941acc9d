//! `cargo xtask ui-bench` — the web UI's figures in a real browser, printed without thresholds.
//!
//! It builds the release wasm (`dist --release`, the `wasm-release` profile) and the release server,
//! then runs the `ui_bench` browser test (ignored in ordinary test runs): the real server with
//! `--ephemeral` storage; trees of 250 nodes (the largest drawn in SVG), 2,000, 5,000 and
//! 20,000 nodes (on the canvas) built over HTTP. Each is opened cold three times — the first page
//! of a new headless Chromium with a fresh profile, left to settle for 2 s first, so nothing is
//! cached and the wasm is downloaded and compiled during the load — three times "at launch" (the
//! same, the moment the browser is up, while its own start-up shares the cores), and warm three
//! times (the first browser again, Home in between), timing the first render: navigation start
//! to the end of the rendering of the first frame that shows the whole tree (its layout, paint
//! and commit), with when the wasm and the graph arrived and the app's own marks (`simtree:*`:
//! start, graph parsed, layout, scene, painted), and each kind's median and range. Then a
//! drag-pan and wheel zooms with one input event per animation frame: the requestAnimationFrame
//! deltas (what a user sees; the display caps them at 16.7 ms) and the script work each input
//! cost (event handling plus the canvas paint it scheduled).
//! Last it prints the size of the shipped wasm and JS, raw and as sent (the brotli and gzip
//! files `dist` writes beside them).

use crate::{cargo, dist, root, run, setup};

pub fn bench() -> Result<(), String> {
    setup(true)?;
    dist::build(true)?;
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
        let size = |name: &str| {
            let path = out.join(name);
            std::fs::metadata(&path).map(|m| m.len()).map_err(|e| format!("{}: {e}", path.display()))
        };
        println!(
            "ui-bench: {file}: {} bytes, sent as {} bytes brotli or {} bytes gzip",
            size(file)?,
            size(&format!("{file}.br"))?,
            size(&format!("{file}.gz"))?
        );
    }
    Ok(())
}
