//! Engine-level behaviour through the public API: clone independence and continuation, scenario
//! validation messages, scene-state patches that change nothing when they fail.

use serde_json::{Value, json};
use simtree::embedded::assets_dir;
use simtree::engine::{Event, Simulator};
use simtree::llm::MockClient;
use simtree::scenario::{Scenario, ScenarioLibrary};

fn scenario(id: &str) -> Scenario {
    Scenario::load_file(&assets_dir().expect("assets").join(format!("scenarios/{id}.json"))).unwrap()
}

fn state(sim: &Simulator) -> Value {
    serde_json::to_value(sim).unwrap()
}

fn run(sim: &mut Simulator, turns: u64) -> Vec<Event> {
    let (report, events) = sim.run_blocking(turns, &MockClient);
    report.unwrap();
    events
}

#[test]
fn every_shipped_scenario_loads() {
    let lib = ScenarioLibrary::load_dir(&assets_dir().expect("assets").join("scenarios")).unwrap();
    assert!(lib.ids().contains(&"simple_chat"));
}

#[test]
fn mutating_a_clone_leaves_the_original_untouched() {
    let mut original = scenario("simple_chat").build(None).unwrap();
    run(&mut original, 3);
    let before = state(&original);
    let mut copy = original.fork();
    run(&mut copy, 4);
    let name = copy.world().agents[0].name.clone();
    for op in [
        json!({"op": "scene_state_patch", "updates": {"time": 5}}),
        json!({"op": "agent_props_patch", "name": name, "updates": {"mood": "tired"}}),
    ] {
        copy.apply_op(&serde_json::from_value(op).unwrap()).unwrap();
    }
    assert_ne!(state(&copy), before);
    assert_eq!(state(&original), before);
}

#[test]
fn a_clone_continues_exactly_as_the_original_would() {
    let mut straight = scenario("simple_chat").build(Some(3)).unwrap();
    run(&mut straight, 3);
    let tail_straight = run(&mut straight, 3);
    let mut forked = scenario("simple_chat").build(Some(3)).unwrap();
    run(&mut forked, 3);
    let mut child = forked.clone();
    let tail_child = run(&mut child, 3);
    assert_eq!(tail_straight, tail_child, "the mock's counters travel with the clone");
    assert_eq!(state(&straight), state(&child));
}

#[test]
fn scene_state_patches_are_validated_and_atomic() {
    let mut sim = scenario("simple_chat").build(None).unwrap();
    let before = state(&sim);
    let err = sim
        .apply_op(
            &serde_json::from_value(json!({"op": "scene_state_patch", "updates": {"time": 10, "weather": "rain"}}))
                .unwrap(),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown scene state key 'weather'"), "{err}");
    let err = sim
        .apply_op(&serde_json::from_value(json!({"op": "scene_state_patch", "updates": {"time": "noon"}})).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid scene state"), "{err}");
    assert_eq!(state(&sim), before);
}

fn load_err(text: &str) -> String {
    Scenario::from_json("scenarios/broken.json", text).unwrap_err().to_string()
}

#[test]
fn malformed_scenarios_name_the_file_and_the_field() {
    let base = json!({
        "scene": {"type": "simple_chat", "name": "room", "initial_event": "hi"},
        "agents": [{"name": "A", "action_space": ["yield"]}]
    });
    assert!(Scenario::from_json("scenarios/ok.json", &base.to_string()).is_ok());

    let mut bad = base.clone();
    bad["agents"][0]["action_space"] = json!(["yield", "fly"]);
    let msg = load_err(&bad.to_string());
    assert!(msg.starts_with("scenarios/broken.json: agents[0].action_space[1]: unknown variant `fly`"), "{msg}");

    let mut bad = base.clone();
    bad["scene"]["type"] = json!("poker");
    let msg = load_err(&bad.to_string());
    assert!(msg.contains("scene.type: unknown variant `poker`"), "{msg}");

    let mut bad = base.clone();
    bad["ordering"] = json!({"kind": "llm_moderated", "moderator": "Nobody"});
    let msg = load_err(&bad.to_string());
    assert!(msg.contains("moderator 'Nobody' is not an agent"), "{msg}");

    let mut bad = base.clone();
    bad["agents"][0]["nmae"] = json!("typo");
    let msg = load_err(&bad.to_string());
    assert!(msg.contains("agents[0].nmae: unknown field `nmae`"), "{msg}");

    let mut bad = base.clone();
    bad["scene"]["config"] = json!({"colour": 1});
    let msg = load_err(&bad.to_string());
    assert!(msg.contains("scene.config") && msg.contains("colour"), "{msg}");

    let mut bad = base.clone();
    bad["agents"] = json!([{"name": "A"}, {"name": "A"}]);
    assert!(load_err(&bad.to_string()).contains("duplicate agent name 'A'"));

    assert!(load_err("{").contains("scenarios/broken.json"));
}

#[test]
fn llm_moderated_ordering_runs_and_survives_cloning() {
    let text = json!({
        "scene": {"type": "simple_chat", "name": "room", "initial_event": "hi"},
        "agents": [
            {"name": "Mod", "action_space": ["schedule_order"]},
            {"name": "A"}, {"name": "B"}
        ],
        "ordering": {"kind": "llm_moderated", "moderator": "Mod"}
    });
    let mut sim = Scenario::from_json("scenarios/moderated.json", &text.to_string()).unwrap().build(None).unwrap();
    let events = run(&mut sim, 4);
    // The mock never answers schedule_order, so the moderator's refusal is reported and the queue
    // falls back to every name.
    assert!(events.iter().any(|e| e.data["error"] == "the moderator did not answer with a schedule_order action"));
    let mut copy = sim.clone();
    let a = run(&mut sim, 3);
    let b = run(&mut copy, 3);
    assert_eq!(a, b);
}

/// Values of the same JSON type as `v`, at the edges: empty, negative, huge, unknown names.
fn edge_values(v: &Value) -> Vec<Value> {
    match v {
        Value::Number(_) => vec![json!(-1), json!(0), json!(1_000_000_000), json!(-1_000_000_000)],
        Value::String(_) => vec![json!(""), json!("Nobody"), json!("night")],
        Value::Array(_) => vec![json!([]), json!(["Nobody"]), json!([-1, 99])],
        Value::Object(_) => vec![json!({}), json!({"Nobody": "Nobody"})],
        Value::Bool(b) => vec![json!(!b)],
        Value::Null => vec![json!("Nobody"), json!(5)],
    }
}

#[test]
fn no_accepted_scene_state_patch_makes_a_run_panic() {
    for id in ["simple_chat", "council", "werewolf", "landlord", "village"] {
        let base = scenario(id).build(Some(1)).unwrap();
        let state = base.scene().state_json();
        for (key, value) in state.as_object().unwrap() {
            for edge in edge_values(value) {
                let mut sim = base.clone();
                let patch = json!({"op": "scene_state_patch", "updates": { key.clone(): edge.clone() }});
                if sim.apply_op(&serde_json::from_value(patch).unwrap()).is_err() {
                    continue; // rejected cleanly: nothing to run
                }
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let (report, _) = sim.run_blocking(8, &MockClient);
                    report.map(|_| ())
                }));
                assert!(outcome.is_ok(), "{id}: running after {key} = {edge} panicked");
            }
        }
    }
}

#[test]
fn odd_agent_properties_never_make_a_run_panic() {
    let odd = [
        ("map_xy", json!([999, -5])),
        ("map_xy", json!("3,3")),
        ("map_position", json!("nowhere")),
        ("energy", json!("lots")),
        ("hunger", Value::Null),
        ("inventory", json!([1, 2])),
        ("role", json!(5)),
        ("role", json!("werewolf")),
    ];
    for id in ["simple_chat", "council", "werewolf", "landlord", "village"] {
        let base = scenario(id).build(Some(1)).unwrap();
        for (key, value) in &odd {
            for agent in 0..base.world().agents.len() {
                let mut sim = base.clone();
                let name = sim.world().agents[agent].name.clone();
                let patch = json!({"op": "agent_props_patch", "name": name, "updates": {*key: value}});
                sim.apply_op(&serde_json::from_value(patch).unwrap()).unwrap();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let _ = sim.run_blocking(6, &MockClient);
                }));
                assert!(outcome.is_ok(), "{id}: agent {agent} with {key} = {value} panicked");
            }
        }
    }
}
