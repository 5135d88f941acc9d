//! Custom scenes through the real server: each shipped custom game is created, advanced to its
//! end with the offline scripted player and reaches one of its named outcomes; a branch op of
//! custom scenes and a scene metric in a sweep work; a broken document is a 422 at its path and
//! stores nothing.

use serde_json::{Value, json};
use simtree_e2e::{Server, advance, ok};

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
        let tree = ok(
            &s,
            "/devui/simtree",
            json!({"scenario": id, "seed": 3, "llm": "scripted"}),
        )
        .await["id"]
            .as_u64()
            .unwrap();
        let end = advance(&s, tree, 0, 400).await;
        let state = scene_state(&s, tree, end).await;
        let outcome = state["outcome"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: no outcome in {state}"));
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
    let tree = ok(
        &s,
        "/devui/simtree",
        json!({"scenario": "custom_ultimatum", "llm": "scripted"}),
    )
    .await["id"]
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
        (
            json!({"op": "scene_var_set", "name": "pot", "value": 1}),
            "unknown variable 'pot'",
        ),
        (
            json!({"op": "scene_var_set", "name": "offer", "value": "many"}),
            "is not a value of type int",
        ),
        (
            json!({"op": "agent_role_set", "name": "Robin", "role": "king"}),
            "unknown role 'king'",
        ),
        (
            json!({"op": "agent_role_set", "name": "Zed", "role": "proposer"}),
            "unknown agent 'Zed'",
        ),
    ] {
        let (st, r) = s.post(&p("/branch"), &json!({"parent": 0, "ops": [op]})).await;
        assert_eq!(st, 422, "{r}");
        assert!(r.to_string().contains(want), "{want}: {r}");
    }
    assert_eq!(s.get(&p("/graph")).await.1, graph, "no node was made");
    // On a scene that is not custom the ops are refused by name.
    let chat = ok(&s, "/devui/simtree", json!({"scenario": "simple_chat"})).await["id"]
        .as_u64()
        .unwrap();
    let (st, r) = s
        .post(
            &format!("/devui/simtree/{chat}/branch"),
            &json!({"parent": 0, "ops": [{"op": "scene_var_set", "name": "x", "value": 1}]}),
        )
        .await;
    assert_eq!(st, 422);
    assert!(
        r.to_string().contains("scene_var_set applies to custom scenes only"),
        "{r}"
    );
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
        bad["scene"]["config"]["actions"] = Value::Array(
            (0..n)
                .map(|i| json!({"name": format!("a{i}"), "description": "x", "effects": []}))
                .collect(),
        );
        bad
    };
    cases.push((
        many(1000),
        "scenario: scene.config.actions: 1000 actions; a custom scene may have at most 100",
    ));
    // 10^5 actions do not fit in a request body at all: the body's bound refuses them first.
    let body = serde_json::to_vec(&json!({"scenario": many(100_000)})).unwrap();
    let (st, r) = simtree_e2e::post_streamed(&s, "/devui/simtree", "application/json", body).await;
    assert_eq!(st, 413, "{r}");
    assert!(r.contains("request body too large"), "{r}");
    let mut bad = doc.clone();
    bad["scene"]["config"]["actions"][0]["effects"][0] =
        json!({"set": {"var": "offer", "value": format!("{}1{}", "(".repeat(5000), ")".repeat(5000))}});
    cases.push((
        bad,
        "scenario: scene.config.actions[0].effects[0].set.value: 10001 characters",
    ));
    let mut bad = doc.clone();
    bad["scene"]["config"]["phases"][1]["next"] = json!([{"goto": "proposal"}]);
    bad["scene"]["config"]["phases"][0]["next"] = json!([{"goto": "response"}]);
    bad["scene"]["config"]["actions"][0]["effects"] = json!([]);
    bad["scene"]["config"]["actions"][1]["effects"] = json!([]);
    bad["scene"]["config"]["actions"][2]["effects"] = json!([]);
    cases.push((
        bad,
        "scenario: scene.config.phases[0]: from 'proposal' no end can be reached",
    ));
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
    assert_eq!(
        (st, &created["detail"]),
        (422, &r["detail"]),
        "check and create say the same"
    );
    let mut bad = doc.clone();
    bad["scene"]["config"]["actions"][0]["effects"][0] = json!({"set": {"var": "nope", "value": "1"}});
    let (st, r) = s.post("/api/documents/check", &json!({"document": bad})).await;
    assert_eq!(st, 422, "{r}");
    assert_eq!(r["path"], "scene.config.actions[0].effects[0].set.var", "{r}");

    let preview = ok(&s, "/api/documents/preview", json!({"document": doc})).await;
    let roles: Vec<&str> = preview
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["proposer", "responder"]);
    let system = |i: usize| preview[i]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(
        system(0).contains("Your role: proposer.\nMake one offer"),
        "{}",
        system(0)
    );
    assert!(system(0).contains("- offer: offer the responder part"), "{}", system(0));
    assert!(!system(0).contains("Accept the offer or reject it"), "{}", system(0));
    assert!(
        system(1).contains("Your role: responder.\nAccept the offer"),
        "{}",
        system(1)
    );
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    let (st, r) = s
        .post("/api/documents/preview", &json!({"document": {"episode": {}}}))
        .await;
    assert_eq!(st, 422, "{r}");

    // The proposer acts first: its first call is the preview, message for message.
    let tree = ok(&s, "/devui/simtree", json!({"scenario": doc})).await["id"]
        .as_u64()
        .unwrap();
    let node = advance(&s, tree, 0, 1).await;
    let (st, calls) = s.get(&format!("/devui/simtree/{tree}/node/{node}/calls")).await;
    assert_eq!(st, 200, "{calls}");
    assert_eq!(calls["calls"][0]["agent"], "Pat");
    assert_eq!(calls["calls"][0]["messages"], preview[0]["messages"]);

    let (_, info) = s.get(&format!("/devui/simtree/{tree}")).await;
    let scene = &info["scene"];
    assert_eq!(scene["type"], "custom");
    assert!(
        scene["description"]
            .as_str()
            .unwrap()
            .starts_with("Two strangers split 100 coins")
    );
    assert_eq!(scene["roles"][1]["name"], "responder");
    assert_eq!(scene["phases"][0]["name"], "proposal");
    assert_eq!(scene["outcomes"], json!(["accepted", "rejected", "no_deal"]));
    // A shipped type's tree shows its default prose.
    let council = s.create("council").await;
    let (_, info) = s.get(&format!("/devui/simtree/{council}")).await;
    assert!(
        info["scene"]["rules"]
            .as_str()
            .unwrap()
            .contains("Do not vote before the Host"),
        "{info}"
    );
    assert!(info["scene"].get("roles").is_none());
}
