//! Custom-scene benchmark: what one turn of a scene the document defines costs under the mock
//! LLM, against a shipped Rust scene's turn (issue 39: declarative only, within 2×), and with
//! Python hooks run on a sandboxed worker (`server/tests/fixtures/custom/hooked_draw.json`).
//!
//! Each figure is the wall time of whole runs (build excluded) over the turns they took, summed
//! over seeds until at least `MIN_TURNS` turns ran. Run with `cargo xtask bench` (or `cargo bench
//! -p simtree-server --bench custom`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use simtree::abm::venv::{ensure_venv, python_available};
use simtree::abm::{Sandbox, WorkerConfig, WorkerPool};
use simtree::backend::OfflineClient;
use simtree::engine::Simulator;
use simtree::llm::{LlmClient, MockClient, Offline};
use simtree::scenario::UserScenario;

const MIN_TURNS: u64 = 400;
/// A run's most turns (a shipped chat never ends by itself).
const RUN_TURNS: u64 = 100;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn document(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

fn build(doc: &Value, seed: u64) -> Simulator {
    match UserScenario::from_document("bench", doc).unwrap() {
        UserScenario::Social(s) => s.build(Some(seed)).unwrap(),
        _ => unreachable!("a social document"),
    }
}

/// Microseconds per turn of runs of `doc`, each simulator prepared by `prepare`.
fn per_turn(doc: &Value, llm: &dyn LlmClient, prepare: &dyn Fn(&mut Simulator)) -> (f64, u64) {
    let (mut spent, mut turns) = (Duration::ZERO, 0u64);
    for seed in 1.. {
        if turns >= MIN_TURNS {
            break;
        }
        let mut sim = build(doc, seed);
        prepare(&mut sim);
        let started = Instant::now();
        let (report, _) = sim.run_blocking(RUN_TURNS, llm);
        spent += started.elapsed();
        turns += report.expect("the run").turns;
    }
    (spent.as_secs_f64() * 1e6 / turns as f64, turns)
}

fn row(name: &str, (us, turns): (f64, u64)) -> f64 {
    println!("{name:<58} {us:>10.1} µs/turn  ({turns} turns)");
    us
}

fn main() {
    let none = |_: &mut Simulator| {};
    println!("one turn under the mock LLM (wall time of whole runs / their turns)");
    let chat =
        row("simple_chat (Rust scene)", per_turn(&document("assets/scenarios/simple_chat.json"), &MockClient, &none));
    let council = row("council (Rust scene)", per_turn(&document("assets/scenarios/council.json"), &MockClient, &none));
    let mut custom = Vec::new();
    for id in ["custom_jury", "custom_public_goods", "custom_ultimatum", "custom_town_hall"] {
        let doc = document(&format!("assets/scenarios/{id}.json"));
        custom.push(row(&format!("{id} (custom, declarative)"), per_turn(&doc, &MockClient, &none)));
    }
    let hooked = document("server/tests/fixtures/custom/hooked_draw.json");
    let mut declarative = hooked.clone();
    declarative["scene"]["config"].as_object_mut().unwrap().remove("hooks");
    let plain = row("house draw, hooks removed (custom, declarative)", per_turn(&declarative, &MockClient, &none));
    custom.push(plain);
    let worst = custom.iter().copied().fold(0.0, f64::max);
    let mean = custom.iter().sum::<f64>() / custom.len() as f64;
    println!(
        "custom declarative vs shipped Rust: mean {:.2}× simple_chat, {:.2}× council; slowest {:.2}× council",
        mean / chat,
        mean / council,
        worst / council
    );

    if !python_available() {
        println!("hook figures skipped: python3 is not installed");
        return;
    }
    let python = ensure_venv(&root()).expect("venv");
    let config = WorkerConfig::for_root(&root());
    let config = WorkerConfig { python, ..config };
    let (pool, sandbox) = match WorkerPool::spawn(&config, 1) {
        Ok(p) => (p, "bubblewrap"),
        Err(e) => {
            println!("(no sandbox here: {e}; hooks run unsandboxed)");
            let unsafe_config = config.with_sandbox(Sandbox::Unsafe);
            (WorkerPool::spawn(&unsafe_config, 1).expect("a worker"), "unsandboxed")
        }
    };
    let pool = Arc::new(pool);
    let never = simtree::abm::worker::CancelToken::new();
    let give = |sim: &mut Simulator| simtree::sim::hooks::give(sim, Some(&pool), &never);
    let with_hooks =
        row(&format!("house draw with its three hooks, mock ({sandbox})"), per_turn(&hooked, &MockClient, &give));
    let scripted = OfflineClient(Offline::Scripted);
    let scripted_plain = per_turn(&declarative, &scripted, &none);
    let scripted_hooks = per_turn(&hooked, &scripted, &give);
    row("house draw, hooks removed, scripted player", scripted_plain);
    row(&format!("house draw with its three hooks, scripted player ({sandbox})"), scripted_hooks);
    println!(
        "with hooks vs without: {:.1}× (mock), {:.1}× (scripted, every action calls on_action)",
        with_hooks / plain,
        scripted_hooks.0 / scripted_plain.0
    );
}
