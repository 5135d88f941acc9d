//! Tree benchmark (simple_chat, mock LLM), through the same `Workbench` operations the HTTP
//! handlers call:
//! * a chain of 200 single-turn advances: total time and per-step time at depth 1 vs 200;
//! * one `advance_multi` of 64 children (1 turn each), run in parallel on all cores;
//! * `branch` (one public_broadcast) at depth 50;
//! * resident memory of a 1,000-node and a 10,000-node chain, each measured in a fresh process.
//!
//! Upstream's figures for the same workload (spec §6.3): chain 14.8 s, 87 ms per step at depth
//! 200, 146 ms for 64 children, 923 MB for a 200-node chain.

use std::time::{Duration, Instant};

use simtree::backend::Backend;
use simtree::embedded::assets_dir;
use simtree::scenario::ScenarioLibrary;
use simtree::workbench::{Limits, Workbench};
use simtree_shared::Op;

fn app() -> std::sync::Arc<Workbench> {
    let lib = ScenarioLibrary::load_dir(&assets_dir().expect("assets").join("scenarios")).expect("scenarios");
    let limits = Limits { max_children_per_request: 100_000, max_trees: 100_000, ..Limits::default() };
    std::sync::Arc::new(Workbench::new(lib, Backend::Mock, limits))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Child-process mode: build an N-node chain and print the RSS growth in MB.
async fn memory_child(n: u64) {
    let app = app();
    let before = rss_kb();
    let tree = app.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let mut node = 0;
    for _ in 1..n {
        node = app.runs().advance(tree, node, 1).await.unwrap().node;
    }
    let after = rss_kb();
    println!("{:.1}", (after.saturating_sub(before)) as f64 / 1024.0);
}

fn memory_of_chain(n: u64) -> String {
    let exe = std::env::current_exe().expect("bench executable");
    let out = std::process::Command::new(exe).env("SIMTREE_BENCH_MEM", n.to_string()).output().expect("child");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn main_bench() {
    let app = app();

    // (a) chain of 200 single-turn advances.
    let tree = app.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let mut steps = Vec::new();
    let mut node = 0;
    let started = Instant::now();
    for _ in 0..200 {
        let t = Instant::now();
        node = app.runs().advance(tree, node, 1).await.unwrap().node;
        steps.push(t.elapsed());
    }
    let chain_total = started.elapsed();
    let step_at = |depth: usize| median(steps[depth.saturating_sub(3)..(depth + 2).min(200)].to_vec());
    let (d1, d200) = (median(steps[0..5].to_vec()), step_at(198));
    println!("chain of 200 single-turn advances: {:.1} ms total", ms(chain_total));
    println!(
        "  per step at depth 1: {:.3} ms; at depth 200: {:.3} ms (ratio {:.2})",
        ms(d1),
        ms(d200),
        ms(d200) / ms(d1)
    );

    // (b) 64-child advance_multi from a depth-1 node.
    let tree = app.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let parent = app.runs().advance(tree, 0, 1).await.unwrap().node;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let kids = app.runs().advance_multi(tree, parent, 1, 64, false).await.unwrap();
        runs.push(t.elapsed());
        assert_eq!(kids.len(), 64);
    }
    println!("advance_multi, 64 children x 1 turn: {:.2} ms (median of 5)", ms(median(runs)));

    // (c) branch at depth 50.
    let tree = app.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let deep = app.runs().advance_chain(tree, 0, 50).await.unwrap().node;
    let samples: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            app.runs().branch(tree, deep, vec![Op::PublicBroadcast { text: "news".into() }]).unwrap();
            t.elapsed()
        })
        .collect();
    println!("branch (public_broadcast) at depth 50: {:.3} ms (median of 50)", ms(median(samples)));

    // (d) memory of long chains, each in a fresh process.
    for n in [1_000u64, 10_000] {
        println!("resident memory of a {n}-node chain: {} MB", memory_of_chain(n));
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if let Some(n) = std::env::var("SIMTREE_BENCH_MEM").ok().and_then(|v| v.parse().ok()) {
        rt.block_on(memory_child(n));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    rt.block_on(main_bench());
}
