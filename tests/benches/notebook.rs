//! Notebook benchmark (issue #27), through the `Workbench` the HTTP handlers call, mock LLM: a
//! 20,000-node simple_chat tree (each node an advance of one turn from a random earlier node,
//! every 200th a `public_broadcast` of a rare phrase) on SQLite, then
//! * search latency (p50, p95, max over repeated queries): a word of many nodes, a rare phrase
//!   (its entering nodes and the descendants that carry it), a word that is nowhere, and across
//!   every tree (`/api/search`);
//! * annotation latency on the 20,000-node tree against a 200-node one (an annotation writes its
//!   own rows only, so the two should match).
//!
//! It prints figures (no thresholds); `cargo xtask bench` runs it in release mode.
//! `SIMTREE_BENCH_NOTEBOOK_NODES=n` changes the tree's size; `SIMTREE_BENCH_NOTEBOOK_PG=1` runs
//! the same on a private PostgreSQL afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use simtree::embedded::assets_dir;
use simtree::http::{Backend, Limits};
use simtree::scenario::ScenarioLibrary;
use simtree::store::Store;
use simtree::workbench::Workbench;
use simtree_shared::{NodePatch, Op};

fn workbench(store: Store) -> Arc<Workbench> {
    let lib = ScenarioLibrary::load_assets(&assets_dir().expect("assets")).expect("assets");
    let mut wb = Workbench::new(lib, Backend::Mock, Limits::default());
    wb.setup().attach_store(store).expect("store");
    Arc::new(wb)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `p50 / p95 / max` of `times`, in ms.
fn spread(mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |q: f64| ms(times[((times.len() - 1) as f64 * q).round() as usize]);
    format!("p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms", at(0.5), at(0.95), at(1.0))
}

/// A tree of `n` nodes grown from random earlier nodes (a linear congruential draw, so every run
/// builds the same tree); returns its id and node ids.
async fn grow(wb: &Arc<Workbench>, n: usize) -> (u64, Vec<u64>) {
    let tree = wb.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let mut nodes = vec![0u64];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 1..n {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        // Mostly recent nodes, so the tree is deep as well as wide.
        let back = ((x >> 33) as usize % 64).min(nodes.len() - 1);
        let parent = nodes[nodes.len() - 1 - back];
        let child = if i % 200 == 0 {
            let text = format!("Bulletin {i}: the amber lighthouse signal number {}", i / 200);
            wb.runs().branch(tree, parent, vec![Op::PublicBroadcast { text }]).unwrap()
        } else {
            wb.runs().advance(tree, parent, 1).await.unwrap().node
        };
        nodes.push(child);
    }
    (tree, nodes)
}

fn time_search(wb: &Arc<Workbench>, tree: Option<u64>, q: &str, repeat: usize) -> (String, u64) {
    let mut times = Vec::with_capacity(repeat);
    let mut total = 0;
    for _ in 0..repeat {
        let t = Instant::now();
        let r = wb.notebook().search(tree, Some(q), None, Some(20)).unwrap();
        times.push(t.elapsed());
        total = r.total;
    }
    (spread(times), total)
}

fn time_annotations(wb: &Arc<Workbench>, tree: u64, nodes: &[u64], count: usize) -> String {
    let mut times = Vec::with_capacity(count);
    for (k, &node) in nodes.iter().cycle().step_by(7).take(count).enumerate() {
        let patch = NodePatch {
            title: Some(format!("checkpoint {k}")),
            note: Some("looked at this one\nand again".into()),
            tags: Some(vec!["bench".into()]),
            starred: Some(k % 2 == 0),
        };
        let t = Instant::now();
        wb.notebook().annotate(tree, node, &patch).unwrap();
        times.push(t.elapsed());
    }
    spread(times)
}

async fn run(label: &str, store: Store, n: usize) {
    let wb = workbench(store);
    let started = Instant::now();
    let (small, small_nodes) = grow(&wb, 200).await;
    let (tree, nodes) = grow(&wb, n).await;
    println!("{label}: built a {n}-node tree (and a 200-node one) in {:.1} s", started.elapsed().as_secs_f64());
    // The first read waits for the build's queued writes to be committed: not a search's cost.
    wb.notebook().search(Some(tree), Some("warm"), None, None).unwrap();
    for (what, q) in [
        ("a word of many nodes", "lighthouse"),
        ("a rare phrase", "signal number 42"),
        ("a word that is nowhere", "xylophone"),
    ] {
        let (times, total) = time_search(&wb, Some(tree), q, 100);
        println!("{label}: search {what} ({q:?}, {total} hits): {times}");
    }
    let (times, total) = time_search(&wb, None, "signal number 42", 100);
    println!("{label}: search every tree (\"signal number 42\", {total} hits): {times}");
    println!("{label}: annotate, 200-node tree: {}", time_annotations(&wb, small, &small_nodes, 200));
    println!("{label}: annotate, {n}-node tree: {}", time_annotations(&wb, tree, &nodes, 200));
    let (times, total) = time_search(&wb, Some(tree), "checkpoint", 100);
    println!("{label}: search annotated titles (\"checkpoint\", {total} hits): {times}");
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::var("SIMTREE_BENCH_NOTEBOOK_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let dir = std::env::temp_dir().join(format!("simtree-bench-notebook-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open_sqlite(&dir).expect("sqlite");
    run("sqlite", store, n).await;
    let _ = std::fs::remove_dir_all(&dir);
    if std::env::var_os("SIMTREE_BENCH_NOTEBOOK_PG").is_some() {
        let pg = simtree_e2e::Postgres::start();
        let store = Store::open_postgres(&pg.url).expect("postgres");
        run("postgresql", store, n).await;
    }
}
