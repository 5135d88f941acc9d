//! Agent-based models in the tree through the real server (real Python worker, real Mesa):
//! advance, branch with a patched global variable, replicates with distinct seeds, and the
//! generation, schema and validation routes.

use serde_json::{Value, json};
use simtree_e2e::Server;
use simtree_shared::NodeView;
use simtree_shared::abm::AbmStep;

/// The tracked series of a node: (step, values) from its full log.
fn series(logs: &Value) -> Vec<(u64, Value)> {
    logs.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "abm_step")
        .map(|e| {
            let step: AbmStep = serde_json::from_value(e["data"].clone()).unwrap_or_else(|err| panic!("{err}: {e}"));
            (step.step, Value::Object(step.values))
        })
        .collect()
}

async fn last(s: &Server, t: u64, n: u64) -> (u64, Value) {
    series(&s.get(&format!("/devui/simtree/{t}/node/{n}/logs")).await.1).last().cloned().unwrap()
}

#[tokio::test]
async fn an_abm_tree_advances_branches_and_replicates() {
    let s = Server::start();
    let list = s.get("/api/scenarios").await.1;
    assert!(list.as_array().unwrap().iter().any(|x| x["id"] == "sir_network" && x["kind"] == "abm"));
    let (st, created) = s.post("/devui/simtree", &json!({"scenario": "sir_network", "seed": 7})).await;
    assert_eq!(st, 200, "{created}");
    let t = created["id"].as_u64().unwrap();
    let p = |rest: &str| format!("/devui/simtree/{t}{rest}");

    let (st, adv) = s.post(&p("/advance"), &json!({"parent": 0, "turns": 20})).await;
    assert_eq!((st, adv.get("error")), (200, None), "{adv}");
    let base = adv["child"].as_u64().unwrap();
    let base_series = series(&s.get(&p(&format!("/node/{base}/logs"))).await.1);
    assert_eq!(base_series.first().unwrap().0, 0, "step 0 holds the initial values");
    assert_eq!(base_series.last().unwrap().0, 20);
    let view = s.get(&p(&format!("/node/{base}/view"))).await.1;
    let Ok(NodeView::Abm(view)) = serde_json::from_value::<NodeView>(view.clone()) else {
        panic!("not an ABM view: {view}")
    };
    assert_eq!(view.steps, 20);
    assert!(view.snapshot_bytes.unwrap() > 0);
    assert!(view.terminated.is_none() && view.pending.is_empty());
    let outline = view.outline();
    assert!(
        outline.global_variables.iter().flatten().any(|g| g.name == "infectionRate"),
        "the outline lists the model's globals: {:?}",
        outline.global_variables
    );

    // A counterfactual: a far higher infection rate from step 20 on.
    let bad = json!({"parent": base, "ops": [{"op": "abm_set_global", "name": "noSuchVariable", "value": 1}]});
    assert_eq!(s.post(&p("/branch"), &bad).await.0, 422);
    let op = json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.3});
    let (st, br) = s.post(&p("/branch"), &json!({"parent": base, "ops": [op]})).await;
    assert_eq!(st, 200, "{br}");
    let patched = br["child"].as_u64().unwrap();
    let hot = s.post(&p("/advance"), &json!({"parent": patched, "turns": 10})).await.1["child"].as_u64().unwrap();
    let same = s.post(&p("/advance"), &json!({"parent": base, "turns": 10})).await.1["child"].as_u64().unwrap();
    let again = s.post(&p("/advance"), &json!({"parent": base, "turns": 10})).await.1["child"].as_u64().unwrap();
    let (h, a, b) = (last(&s, t, hot).await, last(&s, t, same).await, last(&s, t, again).await);
    assert_eq!(a, b, "continuing unchanged reproduces the run exactly");
    assert_ne!(h, a, "the patched branch diverges");
    let susceptible = |v: &(u64, Value)| v.1["globalVariable.susceptibleCount"].as_f64().unwrap();
    assert!(susceptible(&h) < susceptible(&a), "fewer left susceptible with the higher rate");

    // Replicates: children of one parent with distinct seeds.
    let (st, multi) = s.post(&p("/advance_multi"), &json!({"parent": base, "turns": 10, "count": 3})).await;
    assert_eq!(st, 200, "{multi}");
    let mut ends = Vec::new();
    for c in multi["children"].as_array().unwrap() {
        ends.push(last(&s, t, c.as_u64().unwrap()).await);
    }
    assert!(ends[0] != ends[1] || ends[1] != ends[2], "replicates differ: {ends:?}");
}

#[tokio::test]
async fn generation_schema_and_validation_routes() {
    let s = Server::start();
    let (st, gen_) = s.post("/api/abm/generate", &json!({"prompt": "a forest fire spreading on a grid"})).await;
    assert_eq!(st, 200);
    assert_eq!(gen_["success"], true, "{gen_}");
    assert!(gen_["model"]["agents"].is_array());
    assert!(gen_["supportingInfo"]["title"].is_string());
    let (st, checked) = s.post("/api/abm/validate", &gen_).await;
    assert_eq!(st, 200);
    assert_eq!(checked["ok"], true, "{checked}");
    for provider in ["openai", "gemini", "claude"] {
        let (st, schema) = s.get(&format!("/api/abm/schema?provider={provider}")).await;
        assert_eq!(st, 200);
        assert!(schema.is_object());
    }
    assert_eq!(s.get("/api/abm/schema?provider=llama").await.0, 422);
    let seed = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/abm/sir_network.json")).unwrap();
    let mut broken: Value = serde_json::from_str(&seed).unwrap();
    broken["model"]["terminationCriteria"]["terminationRules"][0]["sourceName"] = json!("globalVariable.nothing");
    let (_, report) = s.post("/api/abm/validate", &broken).await;
    assert_eq!(report["ok"], false);
    assert!(report["issues"].to_string().contains("terminationRules[0]"), "{report}");
}
