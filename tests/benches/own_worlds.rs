//! Users' own worlds benchmark, through the `Workbench` the HTTP handlers call, on a SQLite store:
//! * creating a tree from a 1,000-agent ABM document (the shipped wealth exchange with its
//!   population set to 1,000): the JSON parse, the validator, the tree and its stored rows. The
//!   first creation also starts the Python worker and is shown apart;
//! * importing a 10-ticker × 10-year daily CSV (25,200 rows, ~1.4 MB): parse, every check, the
//!   stored row.
//!
//! It prints figures (no thresholds); `cargo xtask bench` runs it in release mode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use simtree::embedded::assets_dir;
use simtree::http::{Backend, Limits};
use simtree::scenario::ScenarioLibrary;
use simtree::store::Store;
use simtree::workbench::Workbench;
use simtree_shared::ScenarioSource;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// 10 tickers, 2,520 weekdays each from 2010-01-04, prices drifting with the day.
fn csv_10_by_10() -> String {
    let mut out = String::from("date,ticker,open,high,low,close,volume,adj_close\n");
    let mut days = Vec::new();
    let (mut y, mut m, mut d, mut weekday) = (2010, 1, 4, 0); // a Monday
    while days.len() < 2520 {
        if weekday < 5 {
            days.push(format!("{y:04}-{m:02}-{d:02}"));
        }
        weekday = (weekday + 1) % 7;
        let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
        let len = match m {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        d += 1;
        if d > len {
            d = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    for (i, day) in days.iter().enumerate() {
        for t in 0..10 {
            let close = 20.0 + t as f64 + (i as f64 / 50.0).sin() * 5.0;
            let open = close * 0.995;
            out.push_str(&format!(
                "{day},T{t},{open:.4},{:.4},{:.4},{close:.4},{},{close:.4}\n",
                close * 1.01,
                open * 0.99,
                1000 + i
            ));
        }
    }
    out
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = std::env::temp_dir().join(format!("simtree-bench-own-worlds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let assets = assets_dir().expect("assets");
    let lib = ScenarioLibrary::load_assets(&assets).expect("assets");
    let limits = Limits { max_trees: 100_000, ..Limits::default() };
    let mut wb = Workbench::new(lib, Backend::Mock, limits);
    wb.setup().attach_store(Store::open_sqlite(&dir).expect("store")).expect("store");
    let wb = Arc::new(wb);

    let mut model: Value =
        serde_json::from_str(&std::fs::read_to_string(assets.join("abm/wealth_exchange.json")).unwrap()).unwrap();
    model["globalVariables"][0]["initialValue"] = 1000.into();
    let body = serde_json::json!({ "scenario": model }).to_string();
    let create = {
        let wb = wb.clone();
        move || {
            let t = Instant::now();
            let req: simtree_shared::CreateRequest = serde_json::from_str(&body).unwrap();
            let src: ScenarioSource = req.scenario;
            wb.trees().create_tree_from(&src, None, Some(1), Default::default(), Default::default()).expect("create");
            t.elapsed()
        }
    };
    let csv = csv_10_by_10();
    rt.block_on(async move {
        let first = tokio::task::spawn_blocking(create.clone()).await.unwrap();
        let mut runs = Vec::new();
        for _ in 0..20 {
            runs.push(tokio::task::spawn_blocking(create.clone()).await.unwrap());
        }
        println!(
            "tree from a 1,000-agent ABM document ({} bytes): first {:.1} ms (starts the worker), then median {:.2} ms, max {:.2} ms of 20",
            serde_json::to_string(&model).unwrap().len(),
            ms(first),
            ms(median(runs.clone())),
            ms(*runs.iter().max().unwrap())
        );
        let rows = csv.lines().count() - 1;
        let mut runs = Vec::new();
        for i in 0..5 {
            let (wb, csv) = (wb.clone(), csv.clone());
            runs.push(
                tokio::task::spawn_blocking(move || {
                    let t = Instant::now();
                    wb.datasets().import_dataset(&format!("bench{i}"), &csv).expect("import");
                    t.elapsed()
                })
                .await
                .unwrap(),
            );
        }
        println!(
            "dataset of 10 tickers x 10 years ({rows} rows, {} bytes): median {:.1} ms, max {:.1} ms of 5",
            csv.len(),
            ms(median(runs.clone())),
            ms(*runs.iter().max().unwrap())
        );
    });
    let _ = std::fs::remove_dir_all(&dir);
}
