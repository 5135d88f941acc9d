//! What the API answers is the node's truth (issue #30, server side): fan-out children differ by
//! their own reproducible seeds (or the reply says they are copies), a refused fan-out makes no
//! child, and a node's live socket loses no entry however small its queue.

use std::time::Duration;

use serde_json::{Value, json};
use simtree_e2e::{Server, ok, own_entries};

async fn seed_of(s: &Server, tree: u64, node: u64) -> Value {
    s.get(&format!("/devui/simtree/{tree}/node/{node}/info")).await.1["seed"].clone()
}

async fn fan_out(s: &Server, tree: u64, body: Value) -> (Vec<u64>, Value) {
    let reply = ok(s, &format!("/devui/simtree/{tree}/advance_multi"), body).await;
    let ids = reply["children"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    (ids, reply["note"].clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn fan_out_children_get_their_own_reproducible_seeds() {
    let s = Server::start();
    // The scripted player draws its moves from the simulator's seed.
    let (st, t) = s.post("/devui/simtree", &json!({"scenario": "werewolf", "llm": "scripted"})).await;
    assert_eq!(st, 200, "{t}");
    let tree = t["id"].as_u64().unwrap();
    let (kids, note) = fan_out(&s, tree, json!({"parent": 0, "turns": 20, "count": 4})).await;
    assert_eq!(kids.len(), 4);
    assert_eq!(note, Value::Null, "the children differ, so no note");
    let mut seeds = Vec::new();
    let mut logs = Vec::new();
    for &k in &kids {
        seeds.push(seed_of(&s, tree, k).await);
        logs.push(own_entries(&s, tree, k).await);
    }
    assert!(seeds.iter().all(Value::is_u64), "every child's seed is on record: {seeds:?}");
    let distinct: std::collections::BTreeSet<String> = seeds.iter().map(Value::to_string).collect();
    assert_eq!(distinct.len(), 4, "four children, four seeds: {seeds:?}");
    assert!(logs.iter().any(|l| *l != logs[0]), "the children's runs differ");
    // The same fan-out again: the same seeds and the same runs, child by child.
    let (again, _) = fan_out(&s, tree, json!({"parent": 0, "turns": 20, "count": 4})).await;
    for (i, &k) in again.iter().enumerate() {
        assert_eq!(seed_of(&s, tree, k).await, seeds[i], "child {i}'s seed is reproducible");
        assert_eq!(own_entries(&s, tree, k).await, logs[i], "child {i}'s run is reproducible");
    }
    // `same_seed`: today's copies, and the reply says so.
    let (copies, note) = fan_out(&s, tree, json!({"parent": 0, "turns": 6, "count": 3, "same_seed": true})).await;
    let first = own_entries(&s, tree, copies[0]).await;
    for &k in &copies[1..] {
        assert_eq!(own_entries(&s, tree, k).await, first);
    }
    assert!(note.as_str().is_some_and(|n| n.contains("same_seed")), "{note}");
}

#[tokio::test(flavor = "multi_thread")]
async fn identical_mock_children_are_reported_as_copies() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let (kids, note) = fan_out(&s, tree, json!({"parent": 0, "turns": 2, "count": 3})).await;
    assert_eq!(kids.len(), 3);
    let note = note.as_str().unwrap_or_else(|| panic!("a note for identical children: {note}"));
    assert!(note.contains("3 children produced the same log"), "{note}");
    assert!(note.contains("deterministic"), "{note}");
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_based_fan_out_children_have_distinct_seeds() {
    let s = Server::start();
    let tree = s.create("sir_network").await;
    let (kids, _) = fan_out(&s, tree, json!({"parent": 0, "turns": 5, "count": 3})).await;
    let mut seeds = std::collections::BTreeSet::new();
    for &k in &kids {
        let seed = seed_of(&s, tree, k).await;
        assert!(seed.is_u64(), "{seed}");
        seeds.insert(seed.to_string());
    }
    assert_eq!(seeds.len(), 3, "{seeds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_fan_out_makes_no_child() {
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let path = |p: &str| format!("/devui/simtree/{tree}/{p}");
    let a = ok(&s, &path("advance"), json!({"parent": 0, "turns": 1})).await["child"].as_u64().unwrap();
    ok(&s, &path("advance"), json!({"parent": 0, "turns": 1})).await;
    // A long run under `a`: the frontier now holds a running leaf.
    let long = s.advance_in_background(tree, a, 1000);
    let running = s.first_running(tree).await;
    let (_, before) = s.get(&path("graph")).await;
    let (status, body) = s.post(&path("advance_frontier"), &json!({"turns": 1, "only_max_depth": false})).await;
    assert_eq!(status, 409, "{body}");
    let (_, after) = s.get(&path("graph")).await;
    assert_eq!(
        before["nodes"].as_array().unwrap().len(),
        after["nodes"].as_array().unwrap().len(),
        "no child was made under the other leaves: {after}"
    );
    assert_eq!(s.post(&format!("/devui/simtree/{tree}/node/{running}/cancel"), &json!({})).await.0, 200);
    long.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_socket_loses_no_entry_past_its_queue() {
    // A queue of one entry: the run outpaces the socket's task many times over.
    let s = Server::start_with(&["--ws-queue", "1"]);
    let tree = s.create("simple_chat").await;
    let run = s.advance_in_background(tree, 0, 400);
    let node = s.first_running(tree).await;
    let mut w = s.watch(&format!("/devui/simtree/{tree}/sim/{node}/events")).await;
    let done = run.await.unwrap();
    assert_eq!(done["child"], node, "{done}");
    let mut got = Vec::new();
    while let Some(v) = w.next(Duration::from_millis(500)).await {
        assert_ne!(v["type"], "resync", "a node watcher is never told it missed entries");
        got.push(v);
    }
    let (_, logs) = s.get(&format!("/devui/simtree/{tree}/node/{node}/logs")).await;
    let own: Vec<Value> = logs.as_array().unwrap().iter().filter(|e| e["node"] == node).cloned().collect();
    assert!(got.len() > 100, "the run was watched from early on: {} entries", got.len());
    // What the socket gave is exactly the node's entries from the moment it joined, in order.
    assert_eq!(got[..], own[own.len() - got.len()..]);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_branch_names_its_ops_in_its_own_log() {
    let s = Server::start();
    for (scenario, op) in [
        ("simple_chat", json!({"op": "agent_props_patch", "name": "Alice", "updates": {"mood": "curious"}})),
        ("momentum_tech", json!({"op": "portfolio_patch", "cash": 5000.5})),
        ("sir_network", json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.3})),
    ] {
        let tree = s.create(scenario).await;
        let child =
            ok(&s, &format!("/devui/simtree/{tree}/branch"), json!({"parent": 0, "ops": [op.clone()]})).await["child"]
                .as_u64()
                .unwrap();
        let (_, logs) = s.get(&format!("/devui/simtree/{tree}/node/{child}/logs")).await;
        let own: Vec<&Value> = logs.as_array().unwrap().iter().filter(|e| e["node"] == child).collect();
        assert_eq!(
            own.first().copied(),
            Some(&json!({"type": "counterfactual", "data": {"ops": [op]}, "node": child})),
            "{scenario}: {logs}"
        );
        // A run after the branch reads the path with the counterfactual where it happened.
        let next =
            ok(&s, &format!("/devui/simtree/{tree}/advance"), json!({"parent": child, "turns": 1})).await["child"]
                .as_u64()
                .unwrap();
        let (_, path) = s.get(&format!("/devui/simtree/{tree}/node/{next}/logs")).await;
        let at = path.as_array().unwrap().iter().position(|e| e["type"] == "counterfactual");
        assert!(at.is_some(), "{scenario}: the path's log names the counterfactual");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_node_shows_its_state_so_far() {
    let s = Server::start_with(&["--max-turns", "100000"]);
    let tree = s.create("simple_chat").await;
    let (_, root) = s.get(&format!("/devui/simtree/{tree}/node/0/state")).await;
    let long = s.advance_in_background(tree, 0, 100_000);
    let node = s.first_running(tree).await;
    // Both paths answer 200 while the node runs, and the state grows turn by turn.
    let mut turns = Vec::new();
    for path in ["node", "sim", "node", "sim"] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (st, state) = s.get(&format!("/devui/simtree/{tree}/{path}/{node}/state")).await;
        assert_eq!(st, 200, "{state}");
        assert_eq!(state["agents"].as_array().unwrap().len(), root["agents"].as_array().unwrap().len(), "{state}");
        turns.push(state["turns"].as_u64().unwrap());
    }
    assert!(turns.windows(2).all(|w| w[0] <= w[1]), "{turns:?}");
    assert!(turns[3] > 0, "the state is the run's, not its start's: {turns:?}");
    let (_, info) = s.get(&format!("/devui/simtree/{tree}/node/{node}/info")).await;
    assert_eq!(info["status"], "running", "{info}");
    assert_eq!(s.post(&format!("/devui/simtree/{tree}/node/{node}/cancel"), &json!({})).await.0, 200);
    long.await.unwrap();
    // Once finished the route reads the stored state again.
    let (st, done) = s.get(&format!("/devui/simtree/{tree}/node/{node}/state")).await;
    assert_eq!(st, 200, "{done}");
    assert!(done["turns"].as_u64().unwrap() >= turns[3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn upstream_aliases_give_an_empty_value_for_a_node_the_tree_lacks() {
    // Upstream's Studio keeps these bodies whatever the status when it switches trees.
    let s = Server::start();
    let tree = s.create("simple_chat").await;
    let resp = reqwest::get(s.url(&format!("/devui/simtree/{tree}/sim/7/events"))).await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers()["x-simtree-error"].to_str().unwrap().contains('7'), "{:?}", resp.headers());
    assert_eq!(resp.json::<Value>().await.unwrap(), json!([]));
    let (st, state) = s.get(&format!("/devui/simtree/{tree}/sim/7/state")).await;
    assert_eq!((st, state), (404, json!({"turns": 0, "agents": []})));
    // Our own node routes and an unknown tree keep the usual error body.
    let (st, body) = s.get(&format!("/devui/simtree/{tree}/node/7/state")).await;
    assert_eq!(st, 404);
    assert!(body["detail"].is_string(), "{body}");
    let (st, body) = s.get("/devui/simtree/999/sim/0/events").await;
    assert_eq!(st, 404);
    assert_eq!(body["detail"], "simtree not found");
}

/// Issue 38 item 3 / issue 41 item 4: one provenance, stated alike by tree info, node info and
/// the export: the scenario and its version with the document's hash, the dataset and its hash,
/// the seed, the player, the price table and the simtree that served it, and one line of all.
#[tokio::test]
async fn provenance_is_one_statement_in_tree_info_node_info_and_exports() {
    use simtree::workbench::provenance::{sha256_hex, sha256_json};
    let s = Server::start();
    let csv = "date,ticker,open,high,low,close,volume\n2020-01-01,AAA,10,10,10,10,100\n\
               2020-01-02,AAA,11,11,11,11,100\n2020-01-03,AAA,12,12,12,12,100\n";
    let r = s
        .http
        .post(s.url("/api/datasets?name=prices"))
        .header("content-type", "text/csv")
        .body(csv)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let info: Value = r.json().await.unwrap();
    assert_eq!(info["sha256"], sha256_hex(csv.as_bytes()));
    let doc = json!({"title": "Hold", "default_turns": 2, "episode": {
        "episode_id": "hold", "agent_id": "buy_and_hold", "tickers": ["AAA"], "initial_cash": 1000.0,
        "dataset": "prices", "agent": {"kind": "buy_and_hold"}}});
    let (st, saved) = s.post("/api/scenarios", &json!({"name": "hold", "document": doc})).await;
    assert_eq!(st, 201, "{saved}");
    let (st, made) = s.post("/devui/simtree", &json!({"scenario": "hold@1"})).await;
    assert_eq!(st, 200, "{made}");
    let t = made["id"].as_u64().unwrap();
    let (_, tree) = s.get(&format!("/devui/simtree/{t}")).await;
    let p = &tree["provenance"];
    assert_eq!(p["scenario"], "hold", "{tree}");
    assert_eq!(p["version"], 1);
    assert_eq!(p["dataset"], "prices");
    assert_eq!(p["dataset_sha256"], info["sha256"]);
    assert_eq!(p["player"], "mock");
    let (_, library) = s.get("/api/scenarios/hold?version=1").await;
    assert_eq!(p["document_sha256"], sha256_json(&library["document"]), "{library}");
    let line = p["line"].as_str().unwrap();
    let doc_hash = p["document_sha256"].as_str().unwrap();
    for part in [
        "hold@1".to_string(),
        format!("sha256:{}", &doc_hash[..12]),
        "dataset prices".into(),
        " · mock".into(),
        format!("simtree {}", p["simtree"].as_str().unwrap()),
    ] {
        assert!(line.contains(&part), "{part:?} in {line:?}");
    }
    // A social tree: the root's seed in the tree's statement, each node's own in its info.
    let c = s.create("council").await;
    let child = simtree_e2e::advance(&s, c, 0, 1).await;
    let (_, tree) = s.get(&format!("/devui/simtree/{c}")).await;
    let (_, root) = s.get(&format!("/devui/simtree/{c}/node/0/info")).await;
    let (_, node) = s.get(&format!("/devui/simtree/{c}/node/{child}/info")).await;
    assert_eq!(tree["provenance"]["seed"], root["seed"]);
    assert_eq!(node["provenance"]["seed"], node["seed"]);
    assert!(tree["provenance"]["line"].as_str().unwrap().contains(&format!("seed {}", root["seed"])));
    // The export states it too, and an import takes the export (the statement is not trusted).
    let export: Value =
        serde_json::from_str(&simtree_e2e::text(&s, &format!("/devui/simtree/{c}/export")).await).unwrap();
    assert_eq!(export["provenance"], tree["provenance"]);
    let (st, back) = s.post("/devui/simtree/import", &export).await;
    assert_eq!(st, 200, "{back}");
}

/// Replaying from an export on another server: the import compares the provenance the export
/// states with what the importing server states for the new tree, field by field, and builds
/// nothing from the statement.
#[tokio::test]
async fn an_import_says_which_provenance_fields_differ_and_trusts_none() {
    let s = Server::start();
    let c = ok(&s, "/devui/simtree", json!({"scenario": "council", "seed": 3})).await["id"].as_u64().unwrap();
    simtree_e2e::advance(&s, c, 0, 1).await;
    let export: Value =
        serde_json::from_str(&simtree_e2e::text(&s, &format!("/devui/simtree/{c}/export")).await).unwrap();
    // The same server: everything agrees.
    let back = ok(&s, "/devui/simtree/import", export.clone()).await;
    let check = &back["provenance"];
    assert_eq!((&check["same"], &check["differences"]), (&json!(true), &json!([])), "{back}");
    assert_eq!(check["export"], export["provenance"]);

    // Another server, whose price table differs: that one field is named, with both values.
    let dir = simtree_e2e::TempDir::new("replay-prices");
    std::fs::create_dir_all(&dir.0).unwrap();
    let prices = dir.0.join("prices.json");
    std::fs::write(&prices, r#"{"some-model": {"prompt": 1.0, "completion": 2.0}}"#).unwrap();
    let other = Server::start_with(&["--prices", prices.to_str().unwrap()]);
    let back = ok(&other, "/devui/simtree/import", export.clone()).await;
    let check = &back["provenance"];
    let fields: Vec<&str> =
        check["differences"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert_eq!((fields, &check["same"]), (vec!["prices_sha256"], &json!(false)), "{back}");
    assert_eq!(check["differences"][0]["export"], export["provenance"]["prices_sha256"]);
    assert_eq!(check["differences"][0]["here"], check["here"]["prices_sha256"]);

    // A forged statement is reported, not believed: the tree states its own seed and document.
    let mut forged = export.clone();
    forged["provenance"]["seed"] = json!(999);
    forged["provenance"]["document_sha256"] = json!("0".repeat(64));
    let back = ok(&s, "/devui/simtree/import", forged).await;
    let fields: Vec<&str> =
        back["provenance"]["differences"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["document_sha256", "seed"], "{back}");
    let (_, tree) = s.get(&format!("/devui/simtree/{}", back["id"])).await;
    assert_eq!(tree["provenance"]["seed"], export["provenance"]["seed"]);
    assert_eq!(tree["provenance"]["document_sha256"], export["provenance"]["document_sha256"]);

    // An export that states none (written before exports did), or an unreadable one.
    let mut old = export.clone();
    old.as_object_mut().unwrap().shift_remove("provenance");
    let back = ok(&s, "/devui/simtree/import", old).await;
    assert_eq!(back["provenance"]["same"], false);
    assert!(back["provenance"]["note"].as_str().unwrap().contains("states no provenance"), "{back}");
    let mut odd = export;
    odd["provenance"] = json!("made by hand");
    let back = ok(&s, "/devui/simtree/import", odd).await;
    assert!(back["provenance"]["note"].as_str().unwrap().contains("not readable"), "{back}");
}
