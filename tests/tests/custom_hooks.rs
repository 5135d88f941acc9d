//! Custom scenes' Python hooks through the real server (issue 39, item 3): the test document
//! `server/tests/fixtures/custom/hooked_draw.json` has all three hooks, and its `on_phase_end`
//! draws the number that decides the outcome; it plays to its end offline, forks and replays
//! exactly. Hostile hooks (a loop, a huge allocation, a connection out, starting processes,
//! writing outside /tmp) are each stopped with a clear error, the node fails without a half-made
//! turn, and the server goes on serving. Hook sources are checked at `scene.config.hooks.source`.
//!
//! Like `hostile_abm.rs`, these run on the real sandbox (bubblewrap, as `cargo xtask test`
//! installs it) and the ABM worker's venv. A hook's wall-clock bound is the smaller of
//! `SIMTREE_ABM_CALL_TIMEOUT` (8 s here) and 5 s.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use simtree_e2e::{Server, advance, ok, own_entries};

fn doc() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/tests/fixtures/custom/hooked_draw.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The document with `source` as its hooks.
fn with_hooks(source: &str) -> Value {
    let mut d = doc();
    d["scene"]["config"]["hooks"]["source"] = json!(source);
    d
}

fn server(flags: &[&str]) -> Server {
    Server::start_env(flags, &[("SIMTREE_ABM_CALL_TIMEOUT", "8")])
}

async fn create(s: &Server, doc: Value, seed: u64) -> u64 {
    ok(s, "/devui/simtree", json!({"scenario": doc, "seed": seed})).await["id"].as_u64().unwrap()
}

async fn scene_state(s: &Server, tree: u64, node: u64) -> Value {
    let (st, view) = s.get(&format!("/devui/simtree/{tree}/node/{node}/view")).await;
    assert_eq!(st, 200, "{view}");
    view["state"].clone()
}

async fn node_info(s: &Server, tree: u64, node: u64) -> Value {
    let (st, info) = s.get(&format!("/devui/simtree/{tree}/node/{node}/info")).await;
    assert_eq!(st, 200, "{info}");
    info
}

#[tokio::test]
async fn the_phase_end_hook_decides_the_outcome_and_forks_and_replays_are_exact() {
    let s = server(&[]);
    let tree = create(&s, doc(), 7).await;
    let end = advance(&s, tree, 0, 10).await;
    let state = scene_state(&s, tree, end).await;
    let (draw, pot) = (state["vars"]["draw"].as_i64().unwrap(), state["vars"]["pot"].as_i64().unwrap());
    assert!((0..=20).contains(&draw), "on_phase_end drew: {state}");
    let outcome = if draw > pot { "house_wins" } else { "players_win" };
    assert_eq!(state["outcome"], outcome, "{state}");
    let log = own_entries(&s, tree, end).await;
    let text = serde_json::to_string(&log).unwrap();
    assert!(text.contains(&format!("The house draws {draw} against a pot of {pot}.")), "{text}");
    assert!(text.contains(&format!("It ends: {outcome}")), "the outcome hook ran: {text}");
    let chips = log
        .iter()
        .filter(|e| {
            e["event_type"] == "action_end"
                && e["data"]["success"] == true
                && e["data"]["action"]["action"] == "chip_in"
        })
        .count();
    assert_eq!(state["vars"]["moves"], json!(chips), "on_action ran once per action");
    // The mock takes no custom action; the scripted player does, and on_action counts each.
    let scripted = ok(&s, "/devui/simtree", json!({"scenario": doc(), "seed": 7, "llm": "scripted"})).await["id"]
        .as_u64()
        .unwrap();
    let played = advance(&s, scripted, 0, 10).await;
    let played_log = own_entries(&s, scripted, played).await;
    let chips = played_log
        .iter()
        .filter(|e| {
            e["type"] == "action_end" && e["data"]["success"] == true && e["data"]["action"]["action"] == "chip_in"
        })
        .count();
    assert!(chips > 0, "{played_log:?}");
    assert_eq!(scene_state(&s, scripted, played).await["vars"]["moves"], json!(chips));

    // The same advance again, and a replay of the node: the same log, and no model call.
    let again = advance(&s, tree, 0, 10).await;
    assert_eq!(own_entries(&s, tree, again).await, log, "two runs of one seed differ");
    let replayed = ok(&s, &format!("/devui/simtree/{tree}/replay"), json!({"node": end})).await;
    assert_eq!(replayed.get("error"), None, "{replayed}");
    let replayed = replayed["child"].as_u64().unwrap();
    assert_eq!(own_entries(&s, tree, replayed).await, log, "the replay differs");
    assert_eq!(node_info(&s, tree, replayed).await["usage"]["calls"], 0);

    // Fork after a hook's effect: one turn (on_action counted it), then a branch op and the rest,
    // twice, the same; the count goes on from the fork's.
    let mid = advance(&s, tree, 0, 1).await;
    let moves = scene_state(&s, tree, mid).await["vars"]["moves"].as_i64().unwrap();
    let branch = ok(
        &s,
        &format!("/devui/simtree/{tree}/branch"),
        json!({"parent": mid, "ops": [{"op": "scene_var_set", "name": "pot", "value": 100}]}),
    )
    .await;
    let fork = branch["child"].as_u64().unwrap();
    let (a, b) = (advance(&s, tree, fork, 10).await, advance(&s, tree, fork, 10).await);
    assert_eq!(own_entries(&s, tree, a).await, own_entries(&s, tree, b).await);
    let forked = scene_state(&s, tree, a).await;
    assert_eq!(forked["outcome"], "players_win", "no draw beats a pot of 100: {forked}");
    assert!(forked["vars"]["moves"].as_i64().unwrap() >= moves, "{forked}");
}

#[tokio::test]
async fn hook_sources_are_checked_in_the_sandbox_at_their_path() {
    let s = server(&[]);
    let trees = s.get("/devui/simtree").await.1;
    for (source, want) in [
        ("def on_phase_end(state, phase, rng)\n    return []\n", "scene.config.hooks.source: not valid Python: line 1"),
        ("def helper(state):\n    return []\n", "scene.config.hooks.source: defines none of the hooks"),
        (
            // A `def` line inside a string fools a lexical look, not the parser.
            "x = '''\ndef outcome(state, rng):\n'''\n",
            "scene.config.hooks.source: defines none of the hooks on_action, on_phase_end, outcome as a top-level function (it defines: nothing)",
        ),
    ] {
        let bad = with_hooks(source);
        let (st, r) = s.post("/api/documents/check", &json!({"document": bad})).await;
        assert_eq!(st, 422, "{source}: {r}");
        assert_eq!(r["path"], "scene.config.hooks.source", "{r}");
        assert!(r["detail"].as_str().unwrap().contains(want), "want {want}\n got {r}");
        let (st, created) = s.post("/devui/simtree", &json!({"scenario": bad})).await;
        assert_eq!((st, &created["detail"]), (422, &r["detail"]), "check and create say the same");
    }
    let big = with_hooks(&format!("def outcome(state, rng):\n    return []\n#{}", "x".repeat(25_000)));
    let (st, r) = s.post("/api/documents/check", &json!({"document": big})).await;
    assert_eq!((st, r["path"].as_str()), (422, Some("scene.config.hooks.source")), "{r}");
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    let checked = ok(&s, "/api/documents/check", json!({"document": doc()})).await;
    assert_eq!(checked["kind"], "social");
}

/// Runs a tree of `source`'s hooks to its end; the advance's error (the node fails).
async fn hostile_run(s: &Server, source: &str) -> (String, u64, u64) {
    let tree = create(s, with_hooks(source), 1).await;
    let (st, r) = s.post(&format!("/devui/simtree/{tree}/advance"), &json!({"parent": 0, "turns": 10})).await;
    assert_eq!(st, 200, "{r}");
    let node = r["child"].as_u64().unwrap();
    (r["error"].as_str().unwrap_or_default().to_string(), tree, node)
}

/// The failed node keeps no half of the turn its hook failed in: its scene is where the last
/// whole turn left it (still betting, no draw).
async fn no_half_turn(s: &Server, tree: u64, node: u64) {
    let info = node_info(s, tree, node).await;
    assert_eq!(info["status"], "failed", "{info}");
    let state = scene_state(s, tree, node).await;
    assert_eq!((state["vars"]["draw"].as_i64(), &state["outcome"]), (Some(-1), &Value::Null), "{state}");
}

#[tokio::test]
async fn hostile_hooks_are_stopped_by_a_named_bound_and_the_server_keeps_serving() {
    let s = server(&[]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
        .join(format!("hostile-hook-{}.txt", std::process::id()));
    let hook = |body: &str| format!("def on_phase_end(state, phase, rng):\n{body}\n    return []\n");
    let cases = [
        (
            // Under load the wall-time bound (5 s) can come before 2 s of CPU time.
            hook("    while True:\n        pass"),
            "stopped at its CPU-time bound (2 s per call) | stopped at its wall-time bound",
        ),
        (hook("    x = bytearray(1 << 40)"), "stopped at its memory bound"),
        (
            hook(&format!("    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)")),
            "raised PermissionError",
        ),
        (hook("    import os\n    os.fork()"), "may not start processes"),
        (hook("    import subprocess\n    subprocess.run(['true'])"), "may not start processes"),
        (
            // The checkout is not in the sandbox, or (where the worker's venv lives in it) only
            // read-only; either way the write is refused (and the file checked absent below).
            hook(&format!("    open('{}', 'w').write('escaped')", outside.display())),
            "raised ",
        ),
        (
            hook("    open('/usr/simtree-hostile-hook', 'w').write('escaped')"),
            "raised OSError: [Errno 30] Read-only file system",
        ),
        (
            hook("    import signal\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n    while True:\n        pass"),
            "stopped at its wall-time bound (5s per call)",
        ),
    ];
    for (source, want) in cases {
        let started = Instant::now();
        let (error, tree, node) = hostile_run(&s, &source).await;
        assert!(
            error.starts_with("hook on_phase_end failed: ") && want.split(" | ").any(|w| error.contains(w)),
            "want {want}\n got {error}"
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{want}: {:?}", started.elapsed());
        no_half_turn(&s, tree, node).await;
        assert_eq!(s.get("/health").await.0, 200);
    }
    assert!(listener.accept().is_err(), "a hook connected out");
    assert!(!outside.exists(), "a hook wrote outside /tmp");
    assert!(!std::path::Path::new("/usr/simtree-hostile-hook").exists());
    // The workers were replaced where they had to be: a well-behaved hooked game still ends.
    let tree = create(&s, doc(), 2).await;
    let end = advance(&s, tree, 0, 10).await;
    assert!(scene_state(&s, tree, end).await["outcome"].is_string());
}

#[tokio::test]
async fn a_hook_answering_no_effect_fails_the_turn_naming_the_hook_and_the_index() {
    let s = server(&[]);
    let (error, tree, node) = hostile_run(
        &s,
        "def on_phase_end(state, phase, rng):\n    return [{'reveal': '\"ok\"'}, {'explode': 'now'}]\n",
    )
    .await;
    assert!(error.starts_with("hook on_phase_end, effect [1]: unknown variant `explode`"), "{error}");
    no_half_turn(&s, tree, node).await;
}

/// A cancel stops a hook call in progress: the hook's worker is killed at once rather than at
/// the call's wall-time bound (5 s), the node ends cancelled with no half-made turn, and the next
/// hooked game gets a fresh worker.
#[tokio::test]
async fn a_cancel_stops_a_hook_call_in_progress_at_once() {
    let s = server(&[]);
    // A loop that ignores the CPU-time signal: only the wall-time bound or a kill stops it.
    let source = "def on_phase_end(state, phase, rng):\n    import signal\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n    while True:\n        pass\n";
    let tree = create(&s, with_hooks(source), 1).await;
    let run = s.advance_in_background(tree, 0, 10);
    let node = s.first_running(tree).await;
    // The betting phase's end reaches the hook well within this (four mock turns, a worker start).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let asked = Instant::now();
    let (st, r) = s.post(&format!("/devui/simtree/{tree}/node/{node}/cancel"), &json!({})).await;
    assert_eq!(st, 200, "{r}");
    let reply = run.await.unwrap();
    let took = asked.elapsed();
    // Waiting out the bound would take at least 5 - 2.5 s more.
    assert!(took < Duration::from_secs(2), "the cancel waited {took:?} for the hook: {reply}");
    let info = node_info(&s, tree, node).await;
    assert_eq!(info["status"], "cancelled", "{info}");
    let state = scene_state(&s, tree, node).await;
    assert_eq!((state["vars"]["draw"].as_i64(), &state["outcome"]), (Some(-1), &Value::Null), "{state}");
    let tree = create(&s, doc(), 2).await;
    let end = advance(&s, tree, 0, 10).await;
    assert!(scene_state(&s, tree, end).await["outcome"].is_string());
}

/// `simtree run` of a hooked document starts a sandboxed worker for its hooks (as the server
/// does) and plays to the hook's outcome; a document whose hook source is not Python is refused
/// before anything runs, naming `scene.config.hooks.source`.
#[test]
fn simtree_run_plays_a_hooked_document_on_its_own_worker_and_refuses_a_bad_source() {
    let dir = simtree_e2e::TempDir::new("hooked-run");
    std::fs::create_dir_all(&dir.0).unwrap();
    let run = |doc: &Value| {
        let file = dir.0.join("doc.json");
        std::fs::write(&file, serde_json::to_vec(doc).unwrap()).unwrap();
        let out = std::process::Command::new(simtree_e2e::simtree_bin())
            .args(["run", "--llm", "scripted", "--seed", "7", "--json", "--scenario-file"])
            .arg(&file)
            .env("SIMTREE_ABM_CALL_TIMEOUT", "8")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) = run(&doc());
    assert!(ok, "{stderr}");
    assert!(stdout.contains("The house draws "), "on_phase_end ran: {stdout}");
    assert!(stdout.contains("It ends: "), "outcome ran: {stdout}");

    let (ok, stdout, stderr) = run(&with_hooks("def on_action(state, action, rng)\n    return []\n"));
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("scene.config.hooks.source: not valid Python: line 1"), "{stderr}");
    assert!(stdout.is_empty(), "nothing ran: {stdout}");
}

/// An import carries its hooks' source inside each node's simulator: it is checked in the
/// sandbox as a created tree's is (422 at `scene.config.hooks.source`), and a node whose hooks
/// differ from the root's (no branch changes them) is refused; nothing is listed either way.
#[tokio::test]
async fn an_import_checks_its_hooks_as_creating_a_tree_does() {
    let s = server(&[]);
    let tree = create(&s, doc(), 7).await;
    advance(&s, tree, 0, 2).await;
    let export = simtree_e2e::text(&s, &format!("/devui/simtree/{tree}/export")).await;
    let source = doc()["scene"]["config"]["hooks"]["source"].as_str().unwrap().to_string();
    let encoded = serde_json::to_string(&source).unwrap();
    let copies = export.matches(&encoded).count();
    assert!(copies >= 2, "the export carries the source in each node's simulator ({copies})");
    let trees = s.get("/devui/simtree").await.1;

    let bad = serde_json::to_string("def on_phase_end(state, phase, rng)\n    return []\n").unwrap();
    let (st, r) = s.post_raw("/devui/simtree/import", "application/json", export.replace(&encoded, &bad)).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("scene.config.hooks.source: not valid Python: line 1"), "{r}");

    // Only the last copy changed (a later node's simulator): its hooks differ from the root's.
    let at = export.rfind(&encoded).unwrap();
    let other = serde_json::to_string(&format!("{source}\n# changed\n")).unwrap();
    let differing = format!("{}{other}{}", &export[..at], &export[at + encoded.len()..]);
    let (st, r) = s.post_raw("/devui/simtree/import", "application/json", differing).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("rule hooks differ from the root's"), "{r}");
    assert_eq!(s.get("/devui/simtree").await.1, trees, "nothing was listed");
    // The export as it was imports.
    let (st, r) = s.post_raw("/devui/simtree/import", "application/json", export).await;
    assert_eq!(st, 200, "{r}");
}

/// Without bubblewrap, hooks and models are refused before anything is made, with the way
/// out named; nothing runs unsandboxed and the server goes on serving.
#[tokio::test]
async fn without_bubblewrap_hooked_documents_and_models_are_refused_and_name_the_way_out() {
    let s = Server::start_env(&[], &[("SIMTREE_BWRAP", "/nonexistent/bwrap")]);
    let trees = s.get("/devui/simtree").await.1;
    for body in [json!({"scenario": doc()}), json!({"scenario": "sir_network"})] {
        let (st, r) = s.post("/devui/simtree", &body).await;
        let detail = r["detail"].as_str().unwrap_or_default();
        assert_eq!(st, 503, "{r}");
        assert!(detail.contains("/nonexistent/bwrap is not installed") && detail.contains("--unsafe-abm"), "{r}");
    }
    let (st, r) = s.post("/api/documents/check", &json!({"document": doc()})).await;
    assert_eq!(st, 503, "{r}");
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    let t = s.create("simple_chat").await;
    advance(&s, t, 0, 1).await;
}
