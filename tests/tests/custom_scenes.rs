//! Custom scenes through the real server: each shipped custom game is created, advanced to its
//! end with the offline scripted player and reaches one of its named outcomes; a branch op of
//! custom scenes and a scene metric in a sweep work; a broken document is a 422 at its path and
//! stores nothing; a custom tree fans out, sweeps, explores, replays and exports as any other.

use std::time::Duration;

use serde_json::{Value, json};
use simtree_e2e::{Server, advance, ok, text};

async fn scene_state(s: &Server, tree: u64, node: u64) -> Value {
    let (st, view) = s.get(&format!("/devui/simtree/{tree}/node/{node}/view")).await;
    assert_eq!(st, 200, "{view}");
    view["state"].clone()
}

#[tokio::test]
async fn every_shipped_custom_game_finishes_offline_with_a_named_outcome() {
    let s = Server::start();
    for (id, outcomes) in [
        ("custom_jury", &["guilty", "not_guilty", "hung"][..]),
        ("custom_public_goods", &["finished"][..]),
        ("custom_ultimatum", &["accepted", "rejected", "no_deal"][..]),
        ("custom_town_hall", &["closed"][..]),
    ] {
        let tree = ok(&s, "/devui/simtree", json!({"scenario": id, "seed": 3, "llm": "scripted"})).await["id"]
            .as_u64()
            .unwrap();
        let end = advance(&s, tree, 0, 400).await;
        let state = scene_state(&s, tree, end).await;
        let outcome = state["outcome"].as_str().unwrap_or_else(|| panic!("{id}: no outcome in {state}"));
        assert!(outcomes.contains(&outcome), "{id}: {outcome}");
        // Replaying the same advance from the same node gives the same log.
        let again = advance(&s, tree, 0, 400).await;
        assert_eq!(
            simtree_e2e::own_entries(&s, tree, end).await,
            simtree_e2e::own_entries(&s, tree, again).await,
            "{id}: two runs of one seed differ"
        );
    }
}

#[tokio::test]
async fn a_custom_branch_op_changes_the_game_and_a_bad_one_changes_nothing() {
    let s = Server::start();
    let tree = ok(&s, "/devui/simtree", json!({"scenario": "custom_ultimatum", "llm": "scripted"})).await["id"]
        .as_u64()
        .unwrap();
    let p = |x: &str| format!("/devui/simtree/{tree}{x}");
    let branch = ok(
        &s,
        &p("/branch"),
        json!({"parent": 0, "ops": [{"op": "scene_var_set", "name": "payoff", "agent": "Pat", "value": 7},
                                     {"op": "agent_role_set", "name": "Robin", "role": "proposer"}]}),
    )
    .await;
    let child = branch["child"].as_u64().or(branch["id"].as_u64()).unwrap();
    let state = scene_state(&s, tree, child).await;
    assert_eq!(state["agents"]["Pat"]["vars"]["payoff"], 7);
    assert_eq!(state["agents"]["Robin"]["role"], "proposer");
    let graph = s.get(&p("/graph")).await.1;
    for (op, want) in [
        (json!({"op": "scene_var_set", "name": "pot", "value": 1}), "unknown variable 'pot'"),
        (json!({"op": "scene_var_set", "name": "offer", "value": "many"}), "is not a value of type int"),
        (json!({"op": "agent_role_set", "name": "Robin", "role": "king"}), "unknown role 'king'"),
        (json!({"op": "agent_role_set", "name": "Zed", "role": "proposer"}), "unknown agent 'Zed'"),
    ] {
        let (st, r) = s.post(&p("/branch"), &json!({"parent": 0, "ops": [op]})).await;
        assert_eq!(st, 422, "{r}");
        assert!(r.to_string().contains(want), "{want}: {r}");
    }
    assert_eq!(s.get(&p("/graph")).await.1, graph, "no node was made");
    // On a scene that is not custom the ops are refused by name.
    let chat = ok(&s, "/devui/simtree", json!({"scenario": "simple_chat"})).await["id"].as_u64().unwrap();
    let (st, r) = s
        .post(
            &format!("/devui/simtree/{chat}/branch"),
            &json!({"parent": 0, "ops": [{"op": "scene_var_set", "name": "x", "value": 1}]}),
        )
        .await;
    assert_eq!(st, 422);
    assert!(r.to_string().contains("scene_var_set applies to custom scenes only"), "{r}");
}

#[tokio::test]
async fn a_broken_document_is_refused_at_its_path_and_nothing_is_stored() {
    let s = Server::start();
    let doc: Value = serde_json::from_str(include_str!("../../assets/scenarios/custom_ultimatum.json")).unwrap();
    let trees = s.get("/devui/simtree").await.1;
    let mut cases = Vec::new();
    let mut bad = doc.clone();
    bad["scene"]["config"]["actions"][2]["when"] = json!("vars.offer >");
    cases.push((bad, "scenario: scene.config.actions[2].when: does not parse"));
    let many = |n: usize| {
        let mut bad = doc.clone();
        bad["scene"]["config"]["actions"] =
            Value::Array((0..n).map(|i| json!({"name": format!("a{i}"), "description": "x", "effects": []})).collect());
        bad
    };
    cases.push((many(1000), "scenario: scene.config.actions: 1000 actions; a custom scene may have at most 100"));
    // 10^5 actions do not fit in a request body at all: the body's bound refuses them first.
    let body = serde_json::to_vec(&json!({"scenario": many(100_000)})).unwrap();
    let (st, r) = simtree_e2e::post_streamed(&s, "/devui/simtree", "application/json", body).await;
    assert_eq!(st, 413, "{r}");
    assert!(r.contains("request body too large"), "{r}");
    let mut bad = doc.clone();
    bad["scene"]["config"]["actions"][0]["effects"][0] =
        json!({"set": {"var": "offer", "value": format!("{}1{}", "(".repeat(5000), ")".repeat(5000))}});
    cases.push((bad, "scenario: scene.config.actions[0].effects[0].set.value: 10001 characters"));
    let mut bad = doc.clone();
    bad["scene"]["config"]["phases"][1]["next"] = json!([{"goto": "proposal"}]);
    bad["scene"]["config"]["phases"][0]["next"] = json!([{"goto": "response"}]);
    bad["scene"]["config"]["actions"][0]["effects"] = json!([]);
    bad["scene"]["config"]["actions"][1]["effects"] = json!([]);
    bad["scene"]["config"]["actions"][2]["effects"] = json!([]);
    cases.push((bad, "scenario: scene.config.phases[0]: from 'proposal' no end can be reached"));
    let mut bad = doc.clone();
    bad["agents"][1]["properties"]["role"] = json!("judge");
    cases.push((bad, "scenario: agents[1].properties.role: no role is named 'judge'"));
    for (bad, want) in cases {
        let (st, r) = s.post("/devui/simtree", &json!({"scenario": bad})).await;
        assert_eq!(st, 422, "{want}: {r}");
        assert!(r.to_string().contains(want), "want {want}\n got {r}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    // The server is still up and the document itself is fine.
    ok(&s, "/devui/simtree", json!({"scenario": doc, "llm": "scripted"})).await;
}

/// `POST /api/documents/check` answers what creating a tree would, at the refusal's JSON path;
/// `POST /api/documents/preview` gives each role the prompt its first call then sends, to the
/// byte; the tree's info shows the scene's prose, roles, phases and outcomes. Nothing is made.
#[tokio::test]
async fn a_document_is_checked_and_its_prompts_previewed_without_a_tree() {
    let s = Server::start();
    let (st, shipped) = s.get("/api/scenarios/custom_ultimatum").await;
    assert_eq!(st, 200, "{shipped}");
    let doc = shipped["document"].clone();
    let trees = s.get("/devui/simtree").await.1;

    let checked = ok(&s, "/api/documents/check", json!({"document": doc})).await;
    assert_eq!(checked, json!({"kind": "social", "title": "Ultimatum game"}));
    let mut bad = doc.clone();
    bad["agents"][1]["properties"]["role"] = json!("judge");
    let (st, r) = s.post("/api/documents/check", &json!({"document": bad})).await;
    assert_eq!(st, 422, "{r}");
    assert_eq!(r["path"], "agents[1].properties.role", "{r}");
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": bad})).await;
    assert_eq!((st, &created["detail"]), (422, &r["detail"]), "check and create say the same");
    let mut bad = doc.clone();
    bad["scene"]["config"]["actions"][0]["effects"][0] = json!({"set": {"var": "nope", "value": "1"}});
    let (st, r) = s.post("/api/documents/check", &json!({"document": bad})).await;
    assert_eq!(st, 422, "{r}");
    assert_eq!(r["path"], "scene.config.actions[0].effects[0].set.var", "{r}");

    let preview = ok(&s, "/api/documents/preview", json!({"document": doc})).await;
    let roles: Vec<&str> = preview.as_array().unwrap().iter().map(|p| p["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["proposer", "responder"]);
    let system = |i: usize| preview[i]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system(0).contains("Your role: proposer.\nMake one offer"), "{}", system(0));
    assert!(system(0).contains("- offer: offer the responder part"), "{}", system(0));
    assert!(!system(0).contains("Accept the offer or reject it"), "{}", system(0));
    assert!(system(1).contains("Your role: responder.\nAccept the offer"), "{}", system(1));
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    let (st, r) = s.post("/api/documents/preview", &json!({"document": {"episode": {}}})).await;
    assert_eq!(st, 422, "{r}");

    // The proposer acts first: its first call is the preview, message for message.
    let tree = ok(&s, "/devui/simtree", json!({"scenario": doc})).await["id"].as_u64().unwrap();
    let node = advance(&s, tree, 0, 1).await;
    let (st, calls) = s.get(&format!("/devui/simtree/{tree}/node/{node}/calls")).await;
    assert_eq!(st, 200, "{calls}");
    assert_eq!(calls["calls"][0]["agent"], "Pat");
    assert_eq!(calls["calls"][0]["messages"], preview[0]["messages"]);

    let (_, info) = s.get(&format!("/devui/simtree/{tree}")).await;
    let scene = &info["scene"];
    assert_eq!(scene["type"], "custom");
    assert!(scene["description"].as_str().unwrap().starts_with("Two strangers split 100 coins"));
    assert_eq!(scene["roles"][1]["name"], "responder");
    assert_eq!(scene["phases"][0]["name"], "proposal");
    assert_eq!(scene["outcomes"], json!(["accepted", "rejected", "no_deal"]));
    // A shipped type's tree shows its default prose.
    let council = s.create("council").await;
    let (_, info) = s.get(&format!("/devui/simtree/{council}")).await;
    assert!(info["scene"]["rules"].as_str().unwrap().contains("Do not vote before the Host"), "{info}");
    assert!(info["scene"].get("roles").is_none());
}

/// A public-goods tree played by the scripted player (seed 5).
async fn public_goods(s: &Server) -> u64 {
    ok(s, "/devui/simtree", json!({"scenario": "custom_public_goods", "seed": 5, "llm": "scripted"})).await["id"]
        .as_u64()
        .unwrap()
}

/// A custom scene is first-class in the tree (issue #39, item 4): it fans out, sweeps and
/// explores on its own metrics with paired seeds, replays with zero calls, and its export
/// imports into a tree that reads back the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_custom_scene_fans_out_sweeps_explores_replays_and_travels() {
    let s = Server::start();
    let t = public_goods(&s).await;
    let p = |path: &str| format!("/devui/simtree/{t}/{path}");

    // Fan-out: three children of the root, each with its own seed, each a whole game.
    let fan = ok(&s, &p("advance_multi"), json!({"parent": 0, "turns": 400, "count": 3})).await;
    let kids: Vec<u64> =
        fan["children"].as_array().unwrap_or_else(|| panic!("{fan}")).iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(kids.len(), 3, "{fan}");
    for &k in &kids {
        assert_eq!(scene_state(&s, t, k).await["outcome"], "finished");
    }

    // Replay: the same log, and no call (the scripted player is a recorded player too).
    let replayed = ok(&s, &p("replay"), json!({"node": kids[0]})).await["child"].as_u64().unwrap();
    let (first, again) =
        (simtree_e2e::own_entries(&s, t, kids[0]).await, simtree_e2e::own_entries(&s, t, replayed).await);
    let differs = first.iter().zip(&again).position(|(a, b)| a != b);
    assert!(
        differs.is_none() && first.len() == again.len(),
        "the replay differs at {differs:?} ({} vs {} entries): {:?} vs {:?}",
        first.len(),
        again.len(),
        differs.map(|i| &first[i]),
        differs.map(|i| &again[i])
    );
    let (_, info) = s.get(&p(&format!("node/{replayed}/info"))).await;
    assert_eq!(info["usage"]["calls"].as_u64().unwrap_or(0), 0, "{info}");

    // Sweep: the multiplier over seeds 1–3; the same sweep again reads the same table (each
    // replicate plays its seed), and tripling the pot pays more than keeping it in every replicate.
    let sweep = json!({
        "parent": 0, "turns": 400, "replicates": 3, "seed": 1,
        "axes": [{"label": "multiplier", "op": {"op": "scene_var_set", "name": "multiplier"},
                  "field": "value", "values": [1, 3]}],
        "metrics": {"total": "scene:total_contribution", "coins": "scene:mean_coins"}
    });
    let mut tables = Vec::new();
    for _ in 0..2 {
        let started = ok(&s, &p("sweep"), sweep.clone()).await;
        tables.push(simtree_e2e::finished_sweep(&s, t, started["sweep"].as_u64().unwrap()).await);
    }
    let table = &tables[0];
    assert_eq!((table["done"].as_u64(), table["failed"].as_u64()), (Some(6), Some(0)), "{table}");
    let values = |table: &Value, cell: usize, m: &str| -> Vec<f64> {
        table["cells"][cell]["metrics"][m]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{table}"))
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    for (cell, m) in [(0, "total"), (1, "total"), (0, "coins"), (1, "coins")] {
        assert_eq!(values(table, cell, m), values(&tables[1], cell, m), "{cell} {m}");
    }
    assert!(values(table, 0, "total").iter().sum::<f64>() > 0.0, "{table}");
    let (low, high) = (values(table, 0, "coins"), values(table, 1, "coins"));
    assert!(low.iter().zip(&high).all(|(l, h)| h > l), "x3 pays more than x1: {table}");

    // Explore: the multiplier that maximises what players end with.
    let explore = json!({
        "parent": 0, "turns": 400, "seed": 2, "replicates": 2, "budget": {"runs": 6},
        "objective": {"metric": "scene:mean_coins", "goal": "max"},
        "space": [{"label": "multiplier", "op": {"op": "scene_var_set", "name": "multiplier"},
                   "field": "value", "values": [1, 2, 3]}]
    });
    let id = ok(&s, &p("explore"), explore).await["explore"].as_u64().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let table = loop {
        let (_, table) = s.get(&p(&format!("explore/{id}"))).await;
        if table["status"] != "running" {
            break table;
        }
        assert!(tokio::time::Instant::now() < deadline, "{table}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(table["status"], "done", "{table}");
    assert_eq!(table["best"]["point"]["multiplier"], 3, "{table}");

    // Export and import: the imported tree reads back every node's log and scene state.
    let export = text(&s, &p("export")).await;
    let (st, imported) = s.post_raw("/devui/simtree/import", "application/json", export).await;
    assert_eq!(st, 200, "{imported}");
    let back = imported["id"].as_u64().unwrap();
    for &k in &kids {
        assert_eq!(simtree_e2e::own_entries(&s, t, k).await, simtree_e2e::own_entries(&s, back, k).await);
        assert_eq!(scene_state(&s, t, k).await, scene_state(&s, back, k).await);
    }
    // The imported tree plays on.
    let more = ok(
        &s,
        &format!("/devui/simtree/{back}/branch"),
        json!({"parent": kids[1], "ops": [
        {"op": "scene_var_set", "name": "multiplier", "value": 3}]}),
    )
    .await;
    assert!(more["child"].as_u64().or(more["id"].as_u64()).is_some(), "{more}");
}
