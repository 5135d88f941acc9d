//! Store benchmark (simple_chat, mock LLM), through the `Workbench` the HTTP handlers call. It
//! prints figures (no thresholds); `cargo xtask bench` runs it in release mode.
//! * the 200-node chain of `server/benches/tree.rs` with no store (`--ephemeral`), SQLite and
//!   PostgreSQL (a private instance, as the tests start it);
//! * bytes on disk for a 10,000-node chain (SQLite, after a checkpoint);
//! * rebuilding the node at depth 1,000 from the store alone (a fresh workbench on the folder);
//! * start-up with 1,000,000 nodes on disk (100 trees of 10,000: the chain's rows copied), and
//!   the resident memory of a fresh process that opens all 100 trees and reads 20 nodes of each
//!   with a 512 MB cache — each in a child process of its own.
//!
//! `SIMTREE_BENCH_CHAIN_ONLY=1` stops after the first figure (the others take minutes);
//! `SIMTREE_BENCH_CHAIN_REPEAT=n` times the SQLite, ephemeral and PostgreSQL chains n times each
//! instead, then their medians (`SIMTREE_BENCH_CHAIN_KIND=sqlite|ephemeral|postgres`: only one
//! of them; `SIMTREE_BENCH_STEPS=1`: each chain's step times too).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use simtree::embedded::assets_dir;
use simtree::http::{Backend, Limits};
use simtree::scenario::ScenarioLibrary;
use simtree::store::{Store, Write};
use simtree::workbench::Workbench;

fn workbench(store: Option<Store>, cache_mb: usize) -> Arc<Workbench> {
    let lib = ScenarioLibrary::load_assets(&assets_dir().expect("assets")).expect("assets");
    let limits = Limits { max_trees: 100_000, cache_bytes: cache_mb << 20, ..Limits::default() };
    let mut wb = Workbench::new(lib, Backend::Mock, limits);
    if let Some(s) = store {
        wb.setup().attach_store(s).expect("store");
    }
    Arc::new(wb)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rss_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Bytes the allocator has handed out and not got back (glibc's `mallinfo2`), in MB.
fn heap_mb() -> f64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    info.uordblks as f64 / (1 << 20) as f64
}

/// Builds a chain of `n` single-turn advances; returns the total time and the node ids.
async fn chain(wb: &Arc<Workbench>, n: usize) -> (Duration, u64, Vec<u64>) {
    let tree = wb.trees().create_tree("simple_chat", None, Default::default(), None).unwrap().id;
    let mut node = 0;
    let mut ids = vec![0];
    let started = Instant::now();
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        node = wb.runs().advance(tree, node, 1).await.unwrap().node;
        steps.push(t.elapsed());
        ids.push(node);
    }
    let took = started.elapsed();
    if std::env::var_os("SIMTREE_BENCH_STEPS").is_some() && n > 0 {
        steps.sort();
        let slow: Duration = steps.iter().filter(|d| d.as_micros() >= 1000).sum();
        println!(
            "  steps: median {:.3} ms, p90 {:.3} ms, max {:.2} ms; {} of 1 ms or more, {:.1} ms in all",
            ms(steps[n / 2]),
            ms(steps[n * 9 / 10]),
            ms(steps[n - 1]),
            steps.iter().filter(|d| d.as_micros() >= 1000).count(),
            ms(slow)
        );
    }
    (took, tree, ids)
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()).unwrap_or(0)
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("simtree-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Copies every row of tree `from` to trees `to` (ids are per tree, so the copies are whole).
fn copy_tree(store: &Store, from: u64, to: std::ops::Range<u64>) {
    let rows = store
        .read(move |db| {
            let tree = db.trees()?.into_iter().find(|t| t.id == from).expect("tree row");
            let nodes = db.nodes(from)?.rows;
            let ids: Vec<u64> = nodes.iter().map(|n| n.id).collect();
            let chunks = db.chunks(from, &ids)?;
            let mut states = Vec::new();
            let mut logs = Vec::new();
            for &id in &ids {
                states.push((id, db.state(from, id)?));
                logs.push((id, db.log(from, id)?));
            }
            Ok((tree, nodes, chunks, states, logs))
        })
        .expect("read the tree");
    let (tree, nodes, chunks, states, logs) = rows;
    for t in to {
        let mut row = tree.clone();
        row.id = t;
        store.write(Write::Tree(row));
        for n in &nodes {
            store.write(Write::Node { tree: t, row: n.clone() });
        }
        for (id, state) in &states {
            let mine: Vec<_> = chunks.iter().filter(|c| c.0.0 == *id).cloned().collect();
            if let Some(data) = state {
                store.write(Write::State { tree: t, node: *id, data: data.clone(), chunks: mine });
            }
        }
        for (id, rows) in &logs {
            let entries: Vec<&str> = rows.iter().flat_map(|r| r.entries.split('\n')).collect();
            store.write(Write::Log {
                tree: t,
                node: *id,
                index: 0,
                count: entries.len() as u64,
                entries: entries.join("\n"),
            });
        }
        store.flush().expect("flush");
    }
}

/// Nodes read (state and log) in each of the 100 trees.
const READS_PER_TREE: usize = 20;

/// Child process: open the million-node folder, time the start, open every tree and read 20
/// nodes of each (state and log), with the server's cache sweeper running; print figures.
async fn million_child(dir: &Path) {
    let started = Instant::now();
    let wb = workbench(Some(Store::open_sqlite(dir).unwrap()), 512);
    let listed = wb.trees().list();
    let start = started.elapsed();
    let nodes: u64 = listed.iter().map(|t| t.nodes).sum();
    println!(
        "start-up with {nodes} nodes on disk ({} trees): {:.1} ms (store opened, trees listed)",
        listed.len(),
        ms(start)
    );
    // The server's cache sweeper (a trim every 500 ms, and at once after a burst of rebuilds);
    // `SIMTREE_BENCH_INLINE_TRIM=1` trims after each tree on this thread instead.
    let inline = std::env::var_os("SIMTREE_BENCH_INLINE_TRIM").is_some();
    if !inline {
        tokio::spawn(wb.upkeep().sweep_cache());
    }
    // `SIMTREE_BENCH_TREES=n` opens only the first n trees (to profile a shorter run).
    let trees = std::env::var("SIMTREE_BENCH_TREES").ok().and_then(|n| n.parse().ok()).unwrap_or(listed.len());
    let mut seed = 7u64;
    let t = Instant::now();
    for info in listed.iter().take(trees) {
        let handle = simtree::testing::tree(&wb, info.id).unwrap();
        for _ in 0..READS_PER_TREE {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let node = (seed >> 33) % info.nodes;
            let mut tree = handle.lock();
            let _ = tree.sim(node).unwrap();
            let _ = tree.log(node).unwrap();
        }
        drop(handle);
        if inline {
            wb.upkeep().trim_cache();
        }
    }
    println!(
        "opened {} trees and read {READS_PER_TREE} random nodes of each in {:.1} s with --cache-mb 512: RSS {:.0} MB (peak {:.0} MB); \
         heap in use {:.0} MB, of which the cache accounts for {:.0} MB",
        trees.min(listed.len()),
        t.elapsed().as_secs_f64(),
        rss_mb("VmRSS:"),
        rss_mb("VmHWM:"),
        heap_mb(),
        wb.upkeep().cache_bytes() as f64 / (1 << 20) as f64
    );
    // `SIMTREE_BENCH_EXIT=1`: exit without freeing, so a heap profiler lists what was in use.
    if std::env::var_os("SIMTREE_BENCH_EXIT").is_some() {
        std::process::exit(0);
    }
}

/// Where memory goes: heap before and after rebuilding single nodes, against the cache's count.
async fn probe(dir: &Path) {
    let wb = workbench(Some(Store::open_sqlite(dir).unwrap()), 512);
    let listed = wb.trees().list();
    let h0 = heap_mb();
    let handle = simtree::testing::tree(&wb, listed[0].id).unwrap();
    println!(
        "tree structure: heap +{:.1} MB, counted {:.1} MB",
        heap_mb() - h0,
        wb.upkeep().cache_bytes() as f64 / 1048576.0
    );
    for node in [5000u64, 5001, 9000, 2000] {
        let h = heap_mb();
        let c = wb.upkeep().cache_bytes();
        let sim = handle.lock().sim(node).unwrap();
        let after_sim = heap_mb();
        let _ = handle.lock().log(node).unwrap();
        println!(
            "node {node}: sim heap +{:.2} MB, with log +{:.2} MB; counted +{:.2} MB",
            after_sim - h,
            heap_mb() - h,
            (wb.upkeep().cache_bytes() - c) as f64 / 1048576.0
        );
        drop(sim);
    }
    let h = heap_mb();
    for node in [5000u64, 5001, 9000, 2000] {
        handle.lock().evict(node);
    }
    println!("evicted: heap {:.2} MB; counted {:.2} MB", heap_mb() - h, wb.upkeep().cache_bytes() as f64 / 1048576.0);
}

async fn main_bench() {
    // `SIMTREE_BENCH_CHAIN_REPEAT=n`: the SQLite and ephemeral chains n times each, alternating
    // (their spread on a shared machine), then stop.
    if let Some(n) = std::env::var("SIMTREE_BENCH_CHAIN_REPEAT").ok().and_then(|n| n.parse::<usize>().ok()) {
        // `SIMTREE_BENCH_CHAIN_KIND=sqlite|ephemeral|postgres`: only that one (to profile it alone).
        let kind = std::env::var("SIMTREE_BENCH_CHAIN_KIND").unwrap_or_default();
        chain(&workbench(None, 512), 200).await;
        // One PostgreSQL for every round (a fresh database per chain would time its start-up).
        let pg = (kind.is_empty() || kind == "postgres").then(simtree_e2e::Postgres::start);
        let postgres = || {
            let url = &pg.as_ref().expect("started").url;
            Some(Store::open_postgres(url).unwrap())
        };
        let mut rounds: Vec<[f64; 3]> = Vec::new();
        for i in 0..n {
            let dir = temp(&format!("repeat{i}"));
            if !kind.is_empty() {
                let store = match kind.as_str() {
                    "sqlite" => Some(Store::open_sqlite(&dir).unwrap()),
                    "postgres" => postgres(),
                    _ => None,
                };
                let (took, _, _) = chain(&workbench(store, 512), 200).await;
                println!("chain of 200 ({kind}): {:.0} ms", ms(took));
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
            let (sqlite, _, _) = chain(&workbench(Some(Store::open_sqlite(&dir).unwrap()), 512), 200).await;
            let (ephemeral, _, _) = chain(&workbench(None, 512), 200).await;
            let (pg_took, _, _) = chain(&workbench(postgres(), 512), 200).await;
            println!(
                "chain of 200: ephemeral {:.0} ms, SQLite {:.0} ms ({:.2}x), PostgreSQL {:.0} ms ({:.2}x)",
                ms(ephemeral),
                ms(sqlite),
                sqlite.as_secs_f64() / ephemeral.as_secs_f64(),
                ms(pg_took),
                pg_took.as_secs_f64() / ephemeral.as_secs_f64()
            );
            rounds.push([ms(ephemeral), ms(sqlite), ms(pg_took)]);
            let _ = std::fs::remove_dir_all(&dir);
        }
        if !rounds.is_empty() {
            // Medians per column: a shared machine's outliers do not move them.
            let median = |c: usize| {
                let mut v: Vec<f64> = rounds.iter().map(|r| r[c]).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let (e, s, p) = (median(0), median(1), median(2));
            println!(
                "medians of {n}: ephemeral {e:.0} ms, SQLite {s:.0} ms, PostgreSQL {p:.0} ms; \
                 the store's share (minus ephemeral): SQLite {:.0} ms, PostgreSQL {:.0} ms; PostgreSQL/SQLite {:.2}x",
                s - e,
                p - e,
                p / s
            );
        }
        return;
    }
    // (a) the 200-node chain: no store, SQLite, PostgreSQL — after a warm-up chain, so that the
    // first measured run does not also pay for the process's first scenario loads and page faults.
    chain(&workbench(None, 512), 200).await;
    let (ephemeral, _, _) = chain(&workbench(None, 512), 200).await;
    let dir = temp("chain");
    let (sqlite, _, _) = chain(&workbench(Some(Store::open_sqlite(&dir).unwrap()), 512), 200).await;
    let pg = simtree_e2e::Postgres::start();
    let (postgres, _, _) = chain(&workbench(Some(Store::open_postgres(&pg.url).unwrap()), 512), 200).await;
    drop(pg);
    println!(
        "chain of 200 single-turn advances: ephemeral {:.0} ms, SQLite {:.0} ms ({:.2}x), PostgreSQL {:.0} ms ({:.2}x)",
        ms(ephemeral),
        ms(sqlite),
        sqlite.as_secs_f64() / ephemeral.as_secs_f64(),
        ms(postgres),
        postgres.as_secs_f64() / ephemeral.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
    if std::env::var_os("SIMTREE_BENCH_CHAIN_ONLY").is_some() {
        return;
    }

    // (b) a 10,000-node chain on disk; (c) rebuilding depth 1,000 from the store alone.
    let dir = temp("million");
    let (tree, ids) = {
        let wb = workbench(Some(Store::open_sqlite(&dir).unwrap()), 512);
        let (took, tree, ids) = chain(&wb, 9_999).await;
        println!("10,000-node chain built in {:.1} s", took.as_secs_f64());
        (tree, ids)
    };
    {
        // A fresh store connection checkpoints the log into the database file on open.
        let store = Store::open_sqlite(&dir).unwrap();
        drop(store);
    }
    println!("bytes on disk for the 10,000-node chain: {:.1} MB", dir_bytes(&dir) as f64 / 1e6);
    let wb = workbench(Some(Store::open_sqlite(&dir).unwrap()), 512);
    let t = Instant::now();
    let handle = simtree::testing::tree(&wb, tree).unwrap();
    let load = t.elapsed();
    let mut samples = Vec::new();
    for d in [1_000usize, 998, 996, 994, 992] {
        let t = Instant::now();
        let mut locked = handle.lock();
        let _ = locked.sim(ids[d]).unwrap();
        samples.push(t.elapsed());
        locked.evict(ids[d]);
    }
    samples.sort();
    println!(
        "rebuild a node at depth 1,000 from the store: {:.2} ms (median of 5; the tree's 10,000-node structure loaded in {:.1} ms)",
        ms(samples[2]),
        ms(load)
    );
    drop(handle);
    drop(wb);

    // (d) 1,000,000 nodes: the chain's rows copied into 99 more trees.
    let t = Instant::now();
    copy_tree(&Store::open_sqlite(&dir).unwrap(), tree, tree + 1..tree + 100);
    println!(
        "copied the chain into 99 more trees in {:.1} s ({:.0} MB on disk)",
        t.elapsed().as_secs_f64(),
        dir_bytes(&dir) as f64 / 1e6
    );
    let exe = std::env::current_exe().expect("bench executable");
    let out = std::process::Command::new(exe).env("SIMTREE_BENCH_MILLION", &dir).output().expect("child");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if std::env::var_os("SIMTREE_BENCH_KEEP").is_some() {
        println!("kept the million-node folder: SIMTREE_BENCH_MILLION={}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if let Some(dir) = std::env::var_os("SIMTREE_BENCH_MILLION") {
        if std::env::var_os("SIMTREE_BENCH_PROBE").is_some() {
            rt.block_on(probe(Path::new(&dir)));
            return;
        }
        rt.block_on(million_child(Path::new(&dir)));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    rt.block_on(main_bench());
}
