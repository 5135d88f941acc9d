//! The long-format tables through the real server and `simtree table`: a sweep's runs as CSV
//! carry the sweep table's numbers (metric values, seeds, nodes) and each run's own steps; pages
//! put together make the whole table; NDJSON holds the same rows; a tree's log table holds every
//! entry once, and a path's the node's full log; bad queries are 422 and unknown trees or sweeps
//! 404, with nothing made.

use serde_json::{Value, json};
use simtree_e2e::{Server, advance, finished_sweep, ok, simtree_bin};

/// `GET path` → (status, the `x-total-count` and `x-next-offset` headers, the body).
async fn page(s: &Server, path: &str) -> (u16, Option<u64>, Option<u64>, String) {
    let r = s.http.get(s.url(path)).send().await.expect("GET");
    let header = |name: &str| r.headers().get(name).and_then(|v| v.to_str().ok()?.parse().ok());
    let (total, next) = (header("x-total-count"), header("x-next-offset"));
    (r.status().as_u16(), total, next, r.text().await.expect("body"))
}

/// The rows of a CSV whose cells hold no comma, quote or newline, header first.
fn plain_csv(text: &str) -> Vec<Vec<String>> {
    text.lines().map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[tokio::test]
async fn a_sweeps_runs_table_carries_the_sweep_tables_numbers_and_each_runs_steps() {
    let s = Server::start();
    let t = ok(&s, "/devui/simtree", json!({"scenario": "sir_network", "seed": 7})).await["id"].as_u64().unwrap();
    let spec = json!({
        "parent": 0, "turns": 12, "replicates": 3, "seed": 5,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.05, 0.3]}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    });
    let sweep = ok(&s, &format!("/devui/simtree/{t}/sweep"), spec).await["sweep"].as_u64().unwrap();
    let table = finished_sweep(&s, t, sweep).await;
    let route = format!("/devui/simtree/{t}/sweep/{sweep}/table");

    let (st, total, next, csv) = page(&s, &route).await;
    assert_eq!((st, next), (200, None), "{csv}");
    let rows = plain_csv(&csv);
    assert_eq!(rows[0], ["run", "cell", "rate", "replicate", "seed", "node", "step", "variable", "value"]);
    let rows = &rows[1..];
    assert_eq!(total, Some(rows.len() as u64));

    // One metric row per run, in the grid's order, with the table's value, seed and node.
    let metric_rows: Vec<&Vec<String>> = rows.iter().filter(|r| r[6].is_empty()).collect();
    let mut want = Vec::new();
    for (i, cell) in table["cells"].as_array().unwrap().iter().enumerate() {
        for (k, node) in cell["children"].as_array().unwrap().iter().enumerate() {
            want.push(vec![
                (want.len()).to_string(),
                i.to_string(),
                cell["cell"]["rate"].to_string(),
                k.to_string(),
                table["seeds"][k].to_string(),
                node.to_string(),
                String::new(),
                "peak".to_string(),
                cell["metrics"]["peak"]["values"][k].to_string(),
            ]);
        }
    }
    assert_eq!(metric_rows.iter().map(|r| (*r).clone()).collect::<Vec<_>>(), want);
    // Each run's steps: the peak the sweep measured is the largest infected count among them.
    for m in &metric_rows {
        let counts: Vec<f64> = rows
            .iter()
            .filter(|r| r[0] == m[0] && r[7] == "globalVariable.infectedCount")
            .map(|r| r[8].parse().unwrap())
            .collect();
        assert_eq!(counts.len(), 13, "run {}: one row per step, and the initial state", m[0]);
        let peak: f64 = m[8].parse().unwrap();
        assert_eq!(counts.iter().cloned().fold(f64::MIN, f64::max), peak, "run {}", m[0]);
    }

    // Pages of 7 rows put together are the whole table; each says where the next starts.
    let mut paged = String::new();
    let mut at = Some(0);
    while let Some(offset) = at {
        let (st, t2, next, body) = page(&s, &format!("{route}?limit=7&offset={offset}")).await;
        assert_eq!((st, t2), (200, total));
        let mut lines = body.lines();
        assert_eq!(lines.next(), csv.lines().next(), "every page has the header");
        let got: Vec<&str> = lines.collect();
        assert_eq!(got.len() as u64, 7.min(total.unwrap() - offset));
        paged.extend(got.iter().map(|l| format!("{l}\n")));
        at = next;
    }
    assert_eq!(paged, csv.split_once('\n').unwrap().1);

    // NDJSON: the same rows, typed.
    let (_, _, _, nd) = page(&s, &format!("{route}?format=ndjson")).await;
    let objects: Vec<Value> = nd.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(objects.len(), rows.len());
    assert_eq!(objects[0]["value"], table["cells"][0]["metrics"]["peak"]["values"][0]);
    assert_eq!(objects[0]["step"], Value::Null);
    // Without series, only the metric rows.
    let (_, n, _, bare) = page(&s, &format!("{route}?series=false")).await;
    assert_eq!((n, bare.lines().count() - 1), (Some(6), 6));

    // `simtree table` writes the same CSV, however it pages.
    let out = std::process::Command::new(simtree_bin())
        .args(["table", &t.to_string(), "--sweep", &sweep.to_string(), "--page", "5"])
        .args(["--url", &s.url("/")])
        .output()
        .expect("simtree table");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), csv);

    // Refusals: a 422 naming the parameter, a 404 naming what is missing.
    for (query, says) in [
        ("format=xlsx", "format"),
        ("limit=0", "limit"),
        ("limit=100001", "limit"),
        ("series=perhaps", "series"),
        ("offset=-3", "offset"),
    ] {
        let (st, body) = s.get(&format!("{route}?{query}")).await;
        assert_eq!(st, 422, "{query}: {body}");
        assert!(body["detail"].as_str().unwrap().contains(says), "{query}: {body}");
    }
    let (st, body) = s.get(&format!("/devui/simtree/{t}/sweep/9/table")).await;
    assert_eq!((st, body["detail"].as_str()), (404, Some("sweep 9 not found in simtree 0")));
    let (st, _) = s.get("/devui/simtree/42/sweep/0/table").await;
    assert_eq!(st, 404);
    let out = std::process::Command::new(simtree_bin())
        .args(["table", &t.to_string(), "--sweep", "9", "--url", &s.url("/")])
        .output()
        .expect("simtree table");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("404 Not Found: sweep 9 not found"));
}

#[tokio::test]
async fn a_log_table_holds_every_entry_once_and_a_path_its_full_log() {
    let s = Server::start();
    let t = ok(&s, "/devui/simtree", json!({"scenario": "council", "seed": 3, "llm": "scripted"})).await["id"]
        .as_u64()
        .unwrap();
    let a = advance(&s, t, 0, 2).await;
    let side = ok(
        &s,
        &format!("/devui/simtree/{t}/branch"),
        json!({"parent": a, "ops": [{"op": "public_broadcast", "text": "Recess, then a vote."}]}),
    )
    .await["child"]
        .as_u64()
        .unwrap();
    let b = advance(&s, t, side, 1).await;
    let c = advance(&s, t, a, 1).await;

    let logs = |n: u64| {
        let s = &s;
        async move { s.get(&format!("/devui/simtree/{t}/node/{n}/logs")).await.1 }
    };
    // The path: the node's full log, in order, each row's kind, node and data as the log has them.
    let (st, total, _, nd) = page(&s, &format!("/devui/simtree/{t}/node/{b}/table?format=ndjson&scope=path")).await;
    assert_eq!(st, 200);
    let rows: Vec<Value> = nd.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let full = logs(b).await;
    let full = full.as_array().unwrap();
    assert_eq!((rows.len(), total), (full.len(), Some(full.len() as u64)));
    for (i, (r, e)) in rows.iter().zip(full).enumerate() {
        assert_eq!((&r["seq"], &r["kind"], &r["node"], &r["data"]), (&json!(i), &e["type"], &e["node"], &e["data"]));
    }
    let broadcast = rows.iter().find(|r| r["kind"] == "system_broadcast" && r["node"] == side).unwrap();
    assert_eq!(broadcast["text"], "Public Event: Recess, then a vote.");
    assert!(rows.iter().filter(|r| r["node"] == b).all(|r| r["step"].as_i64() >= Some(3)), "b's turn follows a's two");

    // The whole tree: every node's own entries once, each numbered along its own path.
    let (_, total, _, nd) = page(&s, &format!("/devui/simtree/{t}/node/0/table?format=ndjson")).await;
    let rows: Vec<Value> = nd.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut want = 0;
    for n in [0, a, side, b, c] {
        let own = logs(n).await.as_array().unwrap().iter().filter(|e| e["node"] == n).count();
        assert_eq!(rows.iter().filter(|r| r["node"] == n).count(), own, "node {n}");
        want += own;
    }
    assert_eq!((rows.len(), total), (want, Some(want as u64)));
    let first_of_c = rows.iter().find(|r| r["node"] == c).unwrap();
    let before_c = logs(a).await.as_array().unwrap().len();
    assert_eq!(first_of_c["seq"], json!(before_c), "c's entries follow a's path, not the side branch");
    // A subtree below `side`: its ancestors' entries, its own and b's.
    let (_, below, _, _) = page(&s, &format!("/devui/simtree/{t}/node/{side}/table")).await;
    assert_eq!(below, Some(full.len() as u64));

    let (st, body) = s.get(&format!("/devui/simtree/{t}/node/{b}/table?scope=everything")).await;
    assert_eq!((st, body["detail"].as_str()), (422, Some("scope: \"everything\" is not subtree or path")));
    let (st, _) = s.get(&format!("/devui/simtree/{t}/node/99/table")).await;
    assert_eq!(st, 404);
}

/// Agent text is model output: a cell that a spreadsheet would run as a formula (here the
/// mock's replies, which start with `---`) is written inert in CSV (a leading `'`), while NDJSON
/// carries the text exactly.
#[tokio::test]
async fn model_text_that_reads_as_a_formula_is_inert_in_csv_and_exact_in_ndjson() {
    let s = Server::start();
    let t = s.create("simple_chat").await;
    let n = advance(&s, t, 0, 1).await;
    let (st, _, _, csv) = page(&s, &format!("/devui/simtree/{t}/node/{n}/table")).await;
    assert_eq!(st, 200);
    assert!(csv.contains(",agent_ctx_delta,\"'--- Thoughts ---\n"), "{csv}");
    assert!(!csv.contains(",agent_ctx_delta,\"--- Thoughts"), "{csv}");
    let (_, _, _, nd) = page(&s, &format!("/devui/simtree/{t}/node/{n}/table?format=ndjson")).await;
    let replies = nd
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["data"]["role"] == "assistant")
        .count();
    assert!(replies > 0, "{nd}");
    assert!(
        nd.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["data"]["role"] == "assistant")
            .all(|r| r["text"].as_str().unwrap().starts_with("--- Thoughts ---")),
        "{nd}"
    );
}
