//! Sweeps in a tree through the real server: an SIR epidemic swept over its infection rate
//! (cells as branches, replicates as their children, paired seeds, the faster disease peaking
//! higher, the tree socket seeing every child), a card game swept over a scene-state value with
//! the scripted player, and refusals that create nothing.

use std::time::Duration;

use serde_json::{Value, json};
use simtree_e2e::{Server, finished_sweep as finished};
use simtree_shared::SweepTable;

fn mean(cell: &Value, metric: &str) -> f64 {
    cell["metrics"][metric]["mean"].as_f64().unwrap_or_else(|| panic!("{metric}: {cell}"))
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn rate_sweep(values: Value, replicates: u64) -> Value {
    json!({
        "parent": 0, "turns": 40, "replicates": replicates, "seed": 1,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": values}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    })
}

/// A tree of the SIR epidemic (seed 7), its root the node every sweep here branches from.
async fn sir_tree(s: &Server) -> u64 {
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7})).await;
    assert_eq!(st, 200, "{created}");
    created["id"].as_u64().unwrap()
}

#[tokio::test]
async fn an_abm_sweep_lays_out_paired_replicates_and_the_faster_epidemic_peaks_higher() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    let mut watcher = s.watch(&format!("/devui/simtree/{t}/events")).await;
    // The server subscribes the socket before it sends the snapshot: wait for it, or the sweep's
    // first messages could go out before this watcher listens.
    let (_, subscribed) = watcher.until(Duration::from_secs(10), |m| m["type"] == "snapshot").await;
    assert!(subscribed);

    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &rate_sweep(json!([0.01, 0.3]), 3)).await;
    assert_eq!(st, 200, "{started}");
    let sweep = started["sweep"].as_u64().unwrap();
    let cells = ids(&started["cells"]);
    let children: Vec<Vec<u64>> = started["children"].as_array().unwrap().iter().map(ids).collect();
    assert_eq!((cells.len(), children.len(), started["total"].as_u64()), (2, 2, Some(6)));
    assert!(children.iter().all(|c| c.len() == 3));
    // The reply comes before the runs end: 6 runs share the server's two ABM workers.
    let (_, early) = s.get(&format!("/devui/simtree/{t}/sweep/{sweep}")).await;
    assert!(early["pending"].as_u64().unwrap() > 0, "{early}");

    let table = finished(&s, t, sweep).await;
    let typed: SweepTable = serde_json::from_value(table.clone()).expect("the table parses as shared::SweepTable");
    assert_eq!(typed.metrics.get("peak").map(String::as_str), Some("max:globalVariable.infectedCount"));
    let (_, listed) = s.get(&format!("/devui/simtree/{t}/sweep")).await;
    assert_eq!(listed, json!([table.clone()]), "GET …/sweep lists every sweep's table");
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(6), Some(0)), "{table}");
    assert_eq!(table["seeds"], json!([1, 2, 3]));
    let rows = table["cells"].as_array().unwrap();
    assert_eq!(rows[0]["cell"], json!({"rate": 0.01}));
    assert_eq!(rows[1]["metrics"]["peak"]["n"], 3);
    assert_eq!(ids(&rows[1]["children"]), children[1]);
    let (slow, fast) = (mean(&rows[0], "peak"), mean(&rows[1], "peak"));
    assert!(fast > slow, "peak at rate 0.3 ({fast}) should exceed rate 0.01 ({slow})");

    // In the tree: each cell a branch of the parent, each replicate an advance of its cell, all
    // marked `sweep` (the cell keeps its ops, the replicate its advance).
    let graph = s.get(&format!("/devui/simtree/{t}/graph")).await.1;
    let edge = |to: u64| {
        graph["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["to"] == to)
            .cloned()
            .unwrap_or_else(|| panic!("no edge to {to}: {graph}"))
    };
    for (cell, kids) in cells.iter().zip(&children) {
        assert_eq!((edge(*cell)["from"].as_u64(), edge(*cell)["type"].as_str()), (Some(0), Some("sweep")));
        for k in kids {
            assert_eq!((edge(*k)["from"].as_u64(), edge(*k)["type"].as_str()), (Some(*cell), Some("sweep")));
        }
    }
    // The socket saw every cell and replicate attached and every run finish.
    let mut unseen: std::collections::BTreeSet<u64> = children.iter().flatten().copied().collect();
    let (seen, all) = watcher
        .until(Duration::from_secs(10), |m| {
            if m["type"] == "run_finish" {
                unseen.remove(&m["data"]["node"].as_u64().unwrap_or(u64::MAX));
            }
            unseen.is_empty()
        })
        .await;
    assert!(all, "run_finish missing for some replicates");
    let (progress, finished_all) =
        watcher.until(Duration::from_secs(10), |m| m["type"] == "sweep_progress" && m["data"]["done"] == 6).await;
    assert!(finished_all, "no sweep_progress with 6 done");
    let last = progress.last().unwrap();
    assert_eq!(last["data"], json!({"sweep": sweep, "done": 6, "failed": 0, "total": 6}));
    let attached: Vec<u64> =
        seen.iter().filter(|m| m["type"] == "attached").filter_map(|m| m["data"]["node"].as_u64()).collect();
    for n in cells.iter().chain(children.iter().flatten()) {
        assert!(attached.contains(n), "no attached for {n}: {attached:?}");
    }

    // Pairing: two cells with the same value give the same numbers replicate by replicate,
    // while replicates (different seeds) differ from one another.
    let (st, twin) = s.post(&format!("/devui/simtree/{t}/sweep"), &rate_sweep(json!([0.1, 0.1]), 3)).await;
    assert_eq!(st, 200, "{twin}");
    let table = finished(&s, t, twin["sweep"].as_u64().unwrap()).await;
    let peaks = |i: usize| table["cells"][i]["metrics"]["peak"]["values"].clone();
    assert_eq!(peaks(0), peaks(1), "replicate k of both cells ran with seed k");
    let first = peaks(0);
    assert!(first[0] != first[1] || first[1] != first[2], "replicates differ: {first}");
}

#[tokio::test]
async fn a_social_sweep_over_a_scene_state_value_runs_in_the_tree() {
    let s = Server::start();
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "landlord", "seed": 5, "llm": "scripted"})).await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    let body = json!({
        "scenario": "landlord", "parent": 0, "turns": 600, "replicates": 2, "seed": 5,
        "axes": [{"label": "stakes", "op": {"op": "scene_state_patch", "updates": {}},
                  "field": "updates.score_multiplier", "values": [1, 8]}],
        "metrics": {"multiplier": "state:score_multiplier", "winner": "state:winner_team",
                    "plays": "count:action_end"}
    });
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &body).await;
    assert_eq!(st, 200, "{started}");
    let table = finished(&s, t, started["sweep"].as_u64().unwrap()).await;
    assert_eq!(table["failed"], 0, "{table}");
    let cells = table["cells"].as_array().unwrap();
    let raised = cells[1]["metrics"]["multiplier"]["values"].as_array().unwrap();
    assert!(raised.iter().all(|m| m.as_u64().unwrap() >= 8), "the patched stakes hold: {raised:?}");
    assert!(mean(&cells[0], "multiplier") < 8.0);
    for c in cells {
        assert_eq!(c["metrics"]["winner"]["n"], 2, "every game ended with a winner: {c}");
        assert!(mean(c, "plays") > 20.0, "{c}");
    }
}

#[tokio::test]
async fn refused_sweeps_create_nothing_and_say_what_is_wrong() {
    let s = Server::start_with(&["--max-children", "4"]);
    let t = s.create("simple_chat").await;
    let url = format!("/devui/simtree/{t}/sweep");
    let base = json!({
        "parent": 0, "turns": 2, "replicates": 2,
        "axes": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                  "values": ["rain", "sun"]}],
        "metrics": {"broadcasts": "count:system_broadcast", "actions": "count:action_end"}
    });
    let with = |patch: Value| {
        let mut b = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let cases = [
        (with(json!({"replicates": 3})), "--max-children"),
        (with(json!({"turns": 100_000})), "turns"),
        (with(json!({"metrics": {"m": "median:x"}})), "metrics.m"),
        (with(json!({"scenario": "werewolf"})), "scenario"),
        (with(json!({"prefix": 3})), "prefix"),
        (with(json!({"colour": "red"})), "colour"),
        (with(json!({"parent": 99})), "node 99"),
        (
            with(json!({"axes": [{"label": "who", "op": {"op": "agent_props_patch", "updates": {}},
                                  "field": "name", "values": ["Alice", "Nobody"]}]})),
            "cells[1].ops[0]",
        ),
    ];
    for (body, names) in cases {
        let (st, err) = s.post(&url, &body).await;
        assert!(st == 422 || st == 404, "{st} for {body}: {err}");
        let detail = err["detail"].as_str().unwrap_or_else(|| panic!("no detail: {err}"));
        assert!(detail.contains(names), "{names:?} not in {detail:?}");
    }
    let mut no_parent = base.clone();
    no_parent.as_object_mut().unwrap().remove("parent");
    let (st, err) = s.post(&url, &no_parent).await;
    assert_eq!(st, 422);
    assert!(err["detail"].as_str().unwrap().starts_with("parent"), "{err}");

    let graph = s.get(&format!("/devui/simtree/{t}/graph")).await.1;
    assert_eq!(graph["nodes"].as_array().unwrap().len(), 1, "nothing was created: {graph}");
    let (st, err) = s.get(&format!("/devui/simtree/{t}/sweep/0")).await;
    assert_eq!((st, err["detail"].as_str()), (404, Some("sweep 0 not found in simtree 0")));

    // Within the limit the same file is accepted; the id of the next sweep is then unknown.
    let (st, ok) = s.post(&url, &base).await;
    assert_eq!(st, 200, "{ok}");
    let table = finished(&s, t, ok["sweep"].as_u64().unwrap()).await;
    assert_eq!(table["done"], 4, "{table}");
    for cell in table["cells"].as_array().unwrap() {
        // The cell's own broadcast counts: a replicate is measured with its cell's ops.
        assert!(mean(cell, "broadcasts") >= 1.0, "{table}");
        assert!(mean(cell, "actions") > 0.0, "{table}");
    }
    assert_eq!(s.get(&format!("/devui/simtree/{t}/sweep/1")).await.0, 404);
}

#[tokio::test]
async fn sweeps_travel_with_an_export_and_a_forged_one_is_refused() {
    let s = Server::start();
    let t = s.create("simple_chat").await;
    let body = json!({
        "parent": 0, "turns": 1, "replicates": 2,
        "axes": [{"label": "news", "op": {"op": "public_broadcast"}, "field": "text",
                  "values": ["rain", "sun"]}],
        "metrics": {"actions": "count:action_end"}
    });
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &body).await;
    assert_eq!(st, 200, "{started}");
    let table = finished(&s, t, started["sweep"].as_u64().unwrap()).await;
    let export = s.get(&format!("/devui/simtree/{t}/export")).await.1;
    assert_eq!(export["sweeps"].as_array().map(Vec::len), Some(1), "{}", export["sweeps"]);

    let import = |body: Value| {
        let s = &s;
        async move {
            let r = s.http.post(s.url("/devui/simtree/import")).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (st, back) = import(export.clone()).await;
    assert_eq!(st, 200, "{back}");
    let back = back["id"].as_u64().unwrap();
    assert_eq!(
        s.get(&format!("/devui/simtree/{back}/sweep")).await.1,
        json!([table]),
        "the imported tree has the same sweep table"
    );

    // Forged sweeps refuse the whole import, and nothing is left behind.
    let (_, trees) = s.get("/devui/simtree").await;
    let forge = |path: &str, value: Value| {
        let mut e = export.clone();
        *e.pointer_mut(path).unwrap() = value;
        e
    };
    for (bad, why) in [
        (forge("/sweeps/0/cells/0/node", json!(0)), "is not a child"),
        (forge("/sweeps/0/cells/0/children", json!([1])), "replicates expected"),
        (forge("/sweeps/0/metrics/actions", json!("median:x")), "metrics.actions"),
        (forge("/sweeps/0/seeds", json!([])), "runs"),
        (forge("/sweeps/0/parent", json!(4242)), "not in the export"),
        (forge("/sweeps", json!([{"id": 0}])), "sweeps[0]"),
    ] {
        let (st, reply) = import(bad).await;
        assert_eq!(st, 422, "{why}: {reply}");
        let detail = reply["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{why}: {detail}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, trees);
}

/// The effect of each cell on `metric` from the table's own values, by hand: differences
/// replicate by replicate, their mean and sample standard deviation.
fn by_hand(table: &Value, cell: usize, metric: &str) -> (Vec<f64>, f64, f64) {
    let values = |c: usize| table["cells"][c]["metrics"][metric]["values"].as_array().unwrap().clone();
    let (base, other) = (values(table["baseline"].as_u64().unwrap() as usize), values(cell));
    let diffs: Vec<f64> = base.iter().zip(&other).filter_map(|(b, c)| Some(c.as_f64()? - b.as_f64()?)).collect();
    let n = diffs.len() as f64;
    let mean = diffs.iter().sum::<f64>() / n;
    let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    (diffs, mean, sd)
}

#[tokio::test]
async fn a_sweep_reports_paired_effects_against_its_baseline_with_intervals() {
    let s = Server::start();
    let t = sir_tree(&s).await;
    // Cells 0.01 (the baseline), 0.3, and 0.01 again (an A/A cell: same op, same seeds).
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &rate_sweep(json!([0.01, 0.3, 0.01]), 3)).await;
    assert_eq!(st, 200, "{started}");
    let sweep = started["sweep"].as_u64().unwrap();
    let table = finished(&s, t, sweep).await;
    let typed: SweepTable = serde_json::from_value(table.clone()).expect("the table parses as shared::SweepTable");
    assert_eq!((typed.baseline, typed.done), (0, 9));
    assert!(typed.cells[0].effects.is_empty(), "the baseline has no effect on itself");

    // Against a hand computation from the table's values. With 2 degrees of freedom Student's t
    // has a closed-form quantile: t(p) = (2p − 1) √(2 / (4p(1 − p))), 4.3026527297… at 0.975.
    let (diffs, mean, sd) = by_hand(&table, 1, "peak");
    assert_eq!(diffs.len(), 3);
    let e = &typed.cells[1].effects["peak"];
    assert_eq!((e.n_pairs, e.dropped), (3, 0));
    assert!((e.mean_diff.unwrap() - mean).abs() < 1e-9, "{e:?} vs {mean}");
    assert!((e.sd_diff.unwrap() - sd).abs() < 1e-9, "{e:?} vs {sd}");
    let t975 = 0.95 * (2.0f64 / (4.0 * 0.975 * 0.025)).sqrt();
    let half = t975 * sd / 3f64.sqrt();
    let [lo, hi] = e.ci95.unwrap();
    assert!((lo - (mean - half)).abs() < 1e-9 && (hi - (mean + half)).abs() < 1e-9, "{e:?}");
    assert!(mean > 0.0, "the faster disease peaks higher than the baseline: {e:?}");
    let aa = &typed.cells[2].effects["peak"];
    assert_eq!(
        (aa.mean_diff, aa.ci95, aa.sd_diff, aa.n_pairs),
        (Some(0.0), Some([0.0, 0.0]), Some(0.0), 3),
        "A/A: {aa:?}"
    );

    // A replicate deleted after the fact ends without a value: its pair is dropped and counted.
    let gone = typed.cells[1].children[2];
    let (st, body) = s.delete(&format!("/devui/simtree/{t}/node/{gone}")).await;
    assert_eq!(st, 200, "{body}");
    let (st, after) = s.get(&format!("/devui/simtree/{t}/sweep/{sweep}")).await;
    assert_eq!(st, 200, "{after}");
    let e = &after["cells"][1]["effects"]["peak"];
    assert_eq!((e["n_pairs"].as_u64(), e["dropped"].as_u64()), (Some(2), Some(1)), "{e}");
    let (_, mean2, _) = by_hand(&after, 1, "peak");
    assert!((e["mean_diff"].as_f64().unwrap() - mean2).abs() < 1e-9, "{e}");
    assert_eq!(after["cells"][2]["effects"]["peak"]["dropped"], 0, "the A/A cell keeps its pairs");

    // The baseline named by its axis values, and a bootstrap interval: seeded, so two reads agree.
    let mut body = rate_sweep(json!([0.01, 0.3]), 4);
    body["baseline"] = json!({"rate": 0.3});
    body["interval"] = json!("bootstrap");
    let (st, started) = s.post(&format!("/devui/simtree/{t}/sweep"), &body).await;
    assert_eq!(st, 200, "{started}");
    let id = started["sweep"].as_u64().unwrap();
    let boot = finished(&s, t, id).await;
    assert_eq!((boot["baseline"].as_u64(), boot["interval"].as_str()), (Some(1), Some("bootstrap")));
    assert!(boot["cells"][1].get("effects").is_none(), "{boot}");
    let e = &boot["cells"][0]["effects"]["peak"];
    let (diffs, mean, _) = by_hand(&boot, 0, "peak");
    assert!((e["mean_diff"].as_f64().unwrap() - mean).abs() < 1e-9, "{e}");
    let (lo, hi) = (e["ci95"][0].as_f64().unwrap(), e["ci95"][1].as_f64().unwrap());
    let (min, max) = diffs.iter().fold((f64::MAX, f64::MIN), |(a, b), d| (a.min(*d), b.max(*d)));
    assert!(min <= lo && lo <= mean && mean <= hi && hi <= max, "{e} from {diffs:?}");
    assert_eq!(s.get(&format!("/devui/simtree/{t}/sweep/{id}")).await.1, boot);

    // A baseline that names no cell, or an unknown interval, is refused and creates nothing.
    let nodes = s.get(&format!("/devui/simtree/{t}/graph")).await.1["nodes"].as_array().unwrap().len();
    for (patch, names) in [
        (json!({"baseline": 5}), "baseline"),
        (json!({"baseline": {"rate": 0.5}}), "baseline"),
        (json!({"interval": "normal"}), "interval"),
    ] {
        let mut body = rate_sweep(json!([0.01, 0.3]), 2);
        for (k, v) in patch.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (st, err) = s.post(&format!("/devui/simtree/{t}/sweep"), &body).await;
        assert_eq!(st, 422, "{err}");
        assert!(err["detail"].as_str().unwrap().contains(names), "{err}");
    }
    // An estimate on the offline mock: no provider call, no money, nothing made.
    let (st, est) =
        s.post(&format!("/devui/simtree/{t}/sweep?estimate=true"), &rate_sweep(json!([0.01, 0.3]), 2)).await;
    assert_eq!((st, est["calls"].as_u64(), est["money"].clone()), (200, Some(0), Value::Null), "{est}");
    assert!(est["basis"].as_str().unwrap().contains("the mock"), "{est}");
    let after = s.get(&format!("/devui/simtree/{t}/graph")).await.1["nodes"].as_array().unwrap().len();
    assert_eq!(after, nodes);
}
