//! A scene's rules are the document's own (issue #39, item 1), through the real server: an agent
//! holds only its scene type's actions (a foreign one is refused at its path and nothing is
//! stored), a document's prose replaces the type's in every prompt the calls trace shows and
//! travels with its tree's export, a branch (`scene_prose_set`) changes it for its subtree only,
//! and `GET /api/scene-types` shows each type's catalogue and default prose.

use serde_json::{Value, json};
use simtree_e2e::{Server, advance, ok};

fn council() -> Value {
    let file = format!("{}/../assets/scenarios/council.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

const COUNCIL_ACTIONS: &str = "speak, send_message, talk_to, yield, web_search, view_page, schedule_order, \
                               start_voting, finish_meeting, request_brief, voting_status, vote";

#[tokio::test]
async fn a_foreign_action_is_refused_at_its_path_and_nothing_is_stored() {
    let dir = simtree_e2e::TempDir::new("own-rules-refusal");
    let flags = ["--data", dir.0.to_str().unwrap()];
    let mut s = Server::start_with(&flags);
    let trees = s.get("/devui/simtree").await.1;
    let saved = s.get("/api/scenarios").await.1;

    let mut doc = council();
    doc["agents"][1]["action_space"] = json!(["vote", "send_message", "night_kill", "play_cards"]);
    let expected = format!(
        "scenario: agents[1].action_space[2]: night_kill is not an action of the council scene (its actions: {COUNCIL_ACTIONS})"
    );
    let (st, r) = s.post("/devui/simtree", &json!({"scenario": doc})).await;
    assert_eq!((st, r["detail"].as_str()), (422, Some(expected.as_str())), "{r}");
    // Saving it to the library is refused the same way.
    let (st, r) = s.post("/api/scenarios", &json!({"name": "jury", "document": doc})).await;
    assert_eq!(st, 422, "{r}");
    assert!(r["detail"].as_str().unwrap().contains("agents[1].action_space[2]: night_kill"), "{r}");
    // Prose for an action the scene does not have is refused too.
    let mut doc = council();
    doc["scene"]["prose"] = json!({"actions": {"play_cards": {"description": "play"}}});
    let (st, r) = s.post("/devui/simtree", &json!({"scenario": doc})).await;
    assert_eq!(st, 422, "{r}");
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .starts_with("scenario: scene.prose.actions.play_cards: play_cards is not an action of the council scene"),
        "{r}"
    );

    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
    assert_eq!(s.get("/api/scenarios").await.1, saved, "nothing was saved");
    s.stop();
    let s = Server::start_with(&flags);
    assert_eq!(s.get("/devui/simtree").await.1, trees, "nothing was stored");
    assert_eq!(s.get("/api/scenarios").await.1, saved);
}

/// The system prompt of each call of a node's run, as the calls trace shows it.
async fn system_prompts(s: &Server, tree: u64, node: u64) -> Vec<String> {
    let (st, calls) = s.get(&format!("/devui/simtree/{tree}/node/{node}/calls")).await;
    assert_eq!(st, 200, "{calls}");
    let prompts: Vec<String> = calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["messages"][0]["role"] == "system")
        .map(|c| c["messages"][0]["content"].as_str().unwrap().to_string())
        .collect();
    assert!(!prompts.is_empty(), "{calls}");
    prompts
}

#[tokio::test]
async fn a_documents_prose_is_in_every_prompt_and_travels_with_its_tree() {
    let s = Server::start();
    let plain = ok(&s, "/devui/simtree", json!({"scenario": council(), "llm": "mock"})).await["id"].as_u64().unwrap();
    let node = advance(&s, plain, 0, 3).await;
    for p in system_prompts(&s, plain, node).await {
        assert!(p.contains("chamber of a legislative council"), "{p}");
    }

    let mut jury = council();
    jury["title"] = json!("Jury");
    jury["agents"][0]["user_profile"] = json!("You lead the jury as its foreperson.");
    jury["scene"]["prose"] = json!({
        "description": "A jury room: the jurors deliberate on the case they heard in court.",
        "rules": "- Weigh the evidence.\n- Vote only when the foreperson calls for a verdict.",
        "actions": {
            "start_voting": {"description": "(foreperson) call for a verdict"},
            "vote": {"usage": "- To give your verdict:\n<Action name=\"vote\"><vote>yes|no|abstain</vote></Action>"}
        }
    });
    let t = ok(&s, "/devui/simtree", json!({"scenario": jury, "llm": "mock"})).await["id"].as_u64().unwrap();
    let node = advance(&s, t, 0, 3).await;
    let prompts = system_prompts(&s, t, node).await;
    assert!(prompts.len() >= 3, "three agents spoke: {prompts:?}");
    for p in &prompts {
        assert!(
            p.contains(
                "\n\nA jury room: the jurors deliberate on the case they heard in court.\n\n- Weigh the evidence.\n- Vote only when the foreperson calls for a verdict.\n\nAction Space:"
            ),
            "{p}"
        );
        for gone in ["legislative council", "the Host chairs", "follow the Host", "online chat room"] {
            assert!(!p.contains(gone), "{gone} in {p}");
        }
    }
    let host = &prompts[0];
    assert!(host.contains("- start_voting: (foreperson) call for a verdict\n"), "{host}");
    let member = prompts.iter().find(|p| p.contains("\n- vote: ")).expect("a member's prompt");
    assert!(
        member.contains("- To give your verdict:\n<Action name=\"vote\"><vote>yes|no|abstain</vote></Action>\n"),
        "{member}"
    );

    // The export carries the document and the simulator's prose; an import keeps using it.
    let export = s.get(&format!("/devui/simtree/{t}/export")).await.1;
    assert_eq!(export["document"]["scene"]["prose"], jury["scene"]["prose"]);
    assert_eq!(export["nodes"][0]["sim"]["prose"], jury["scene"]["prose"]);
    let plain_export = s.get(&format!("/devui/simtree/{plain}/export")).await.1;
    assert!(plain_export["nodes"][0]["sim"].get("prose").is_none(), "no prose, no field");
    let mut bad = export.clone();
    bad["nodes"][0]["sim"]["prose"]["actions"] = json!({"night_kill": {"description": "x"}});
    let (st, r) = s.post("/devui/simtree/import", &bad).await;
    assert_eq!(st, 422, "{r}");
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("prose.actions.night_kill: night_kill is not an action of the council scene"),
        "{r}"
    );
    let imported = ok(&s, "/devui/simtree/import", export).await["id"].as_u64().unwrap();
    let again = advance(&s, imported, node, 1).await;
    for p in system_prompts(&s, imported, again).await {
        assert!(p.contains("A jury room") && !p.contains("legislative"), "{p}");
    }
}

#[tokio::test]
async fn a_branch_rewrites_the_prose_of_its_subtree_only_and_bad_prose_makes_nothing() {
    let s = Server::start();
    let t = ok(&s, "/devui/simtree", json!({"scenario": council(), "llm": "mock"})).await["id"].as_u64().unwrap();
    let base = advance(&s, t, 0, 2).await;
    let view = s.get(&format!("/devui/simtree/{t}/node/{base}/view")).await.1;
    let rules = view["about"]["rules"].as_str().unwrap().to_string();
    assert!(view["about"]["description"].as_str().unwrap().contains("legislative council"), "{view}");

    let branch = |ops: Value| {
        let s = &s;
        async move { s.post(&format!("/devui/simtree/{t}/branch"), &json!({"parent": base, "ops": ops})).await }
    };
    let graph = s.get(&format!("/devui/simtree/{t}/graph")).await.1;
    for (ops, says) in [
        (json!([{"op": "scene_prose_set", "prose": {}}]), "give at least one part"),
        (
            json!([{"op": "scene_prose_set", "prose": {"actions": {"night_kill": {"description": "x"}}}}]),
            "night_kill is not an action of the council scene",
        ),
        (
            json!([{"op": "scene_prose_set", "prose": {"description": "x".repeat(20_001)}}]),
            "prose.description: 20001 characters",
        ),
        (json!([{"op": "scene_prose_set", "prose": {"setting": "x"}}]), "setting"),
    ] {
        let (st, r) = branch(ops).await;
        assert_eq!(st, 422, "{r}");
        assert!(r["detail"].as_str().unwrap().contains(says), "{says}: {r}");
    }
    assert_eq!(s.get(&format!("/devui/simtree/{t}/graph")).await.1, graph, "nothing made");

    let (st, r) = branch(json!([{"op": "scene_prose_set", "prose": {
        "description": "A jury room: twelve jurors weigh the case they heard.",
        "actions": {"vote": {"description": "give your verdict"}}
    }}]))
    .await;
    assert_eq!(st, 200, "{r}");
    let child = r["child"].as_u64().unwrap();
    let about = s.get(&format!("/devui/simtree/{t}/node/{child}/view")).await.1["about"].clone();
    assert_eq!(about["description"], "A jury room: twelve jurors weigh the case they heard.");
    assert_eq!(about["rules"], rules.as_str(), "the part left out stays");
    let edges = s.get(&format!("/devui/simtree/{t}/graph")).await.1["edges"].clone();
    assert_eq!(edges[1], json!({"from": base, "to": child, "type": "scene_state"}));

    // The child's prompts carry the new text; its sibling (and the parent) keep the old.
    let after = advance(&s, t, child, 3).await;
    let prompts = system_prompts(&s, t, after).await;
    for p in &prompts {
        assert!(p.contains("\n\nA jury room: twelve jurors weigh the case they heard.\n\n"), "{p}");
        assert!(!p.contains("legislative council") && p.contains(&rules), "{p}");
    }
    assert!(prompts.iter().any(|p| p.contains("- vote: give your verdict\n")), "{prompts:?}");
    let sibling = advance(&s, t, base, 3).await;
    for p in system_prompts(&s, t, sibling).await {
        assert!(p.contains("legislative council"), "{p}");
    }
}

#[tokio::test]
async fn scene_types_show_each_catalogue_and_its_default_prose() {
    let s = Server::start();
    let (st, types) = s.get("/api/scene-types").await;
    assert_eq!(st, 200, "{types}");
    let names: Vec<&str> = types.as_array().unwrap().iter().map(|t| t["type"].as_str().unwrap()).collect();
    assert_eq!(names, ["simple_chat", "council", "werewolf", "landlord", "village", "custom"]);
    // A custom scene is offered with what it is; its actions and prose are its document's.
    let custom = &types[5];
    assert!(custom["summary"].as_str().unwrap().contains("roles"), "{custom}");
    assert_eq!(custom["actions"].as_array().unwrap().len(), 1, "only yield: {custom}");
    assert_eq!(custom["description"], "");
    assert!(types[1]["summary"].as_str().unwrap().contains("Host"));
    let council = &types[1];
    let actions: Vec<&str> =
        council["actions"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(actions.join(", "), COUNCIL_ACTIONS);
    assert_eq!(council["actions"][0]["common"], true);
    assert_eq!(council["actions"][12 - 1]["common"], false);
    assert_eq!(council["actions"][7]["description"], "(Host) open a voting round on a titled question");
    assert!(council["description"].as_str().unwrap().contains("legislative council"));
    assert!(council["rules"].as_str().unwrap().contains("Do not vote before the Host"));
    assert!(types[4]["examples"].as_str().unwrap().len() > 50, "the village has examples");
    assert!(!types[0]["actions"].as_array().unwrap().iter().any(|a| a["name"] == "vote"));
}

/// A council's chair is the document's to name (`scene.config.chair`): a jury's foreperson
/// opens its vote and is named in every prompt, and no "Host" appears; a chair who is not an
/// agent, or a config key the council does not have, is refused at its path.
#[tokio::test]
async fn a_council_names_its_own_chair_and_a_chair_who_is_no_agent_is_refused() {
    let s = Server::start_with(&[]);
    let mut doc = council();
    doc["agents"][0]["name"] = json!("Foreperson");
    doc["scene"]["config"] = json!({"chair": "Foreperson"});
    let tree = s.post("/devui/simtree", &json!({"scenario": doc})).await;
    assert_eq!(tree.0, 200, "{}", tree.1);
    let t = tree.1["id"].as_u64().unwrap();
    let node = advance(&s, t, 0, 2).await;
    let prompts = system_prompts(&s, t, node).await;
    assert!(!prompts.is_empty());
    for p in &prompts {
        assert!(p.contains("while Foreperson chairs the session"), "{p}");
        assert!(!p.contains("Host"), "{p}");
    }
    // The chair's own actions are listed as theirs.
    assert!(prompts.iter().any(|p| p.contains("- start_voting: (Foreperson) open a voting round")), "{prompts:?}");

    let trees = s.get("/devui/simtree").await.1;
    for (config, expected) in [
        (json!({"chair": "Judge"}), "scenario: scene.config.chair: 'Judge' is not an agent of this scene"),
        (json!({"chairs": "Host"}), "scenario: scene.config: chairs: unknown field `chairs`, expected `chair`"),
    ] {
        let mut doc = council();
        doc["scene"]["config"] = config;
        let (st, r) = s.post("/devui/simtree", &json!({"scenario": doc})).await;
        assert_eq!((st, r["detail"].as_str()), (422, Some(expected)), "{r}");
    }
    assert_eq!(s.get("/devui/simtree").await.1, trees, "no tree was made");
}
