use super::*;
use crate::embedded::assets_dir;
use crate::llm::MockClient;
use crate::scenario::Scenario;
use serde_json::json;

fn tree() -> SimTree {
    let s = Scenario::load_file(&assets_dir().unwrap().join("scenarios/simple_chat.json")).unwrap();
    SimTree::new("simple_chat", Sim::Social(s.build(None).unwrap()))
}

fn advance(t: &mut SimTree, parent: NodeId, turns: u64) -> NodeId {
    let (id, mut sim, log) = t.start_advance(parent, turns).unwrap();
    let mut sink = |e: Event| {
        log.push(&entry_json(&e, id));
    };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let ctx = crate::sim::RunCtx {
        llm: std::sync::Arc::new(MockClient),
        tools: std::sync::Arc::new(crate::trading::agents::MockToolModel),
        abm: None,
    };
    rt.block_on(sim.run(turns, &ctx, &mut sink)).unwrap();
    t.finish(id, sim, NodeStatus::Done, None, Vec::new());
    id
}

#[test]
fn logs_are_root_path_concatenations_tagged_by_node() {
    let mut t = tree();
    assert_eq!(t.logs(0).unwrap().len(), 3);
    let a = advance(&mut t, 0, 1);
    let b = advance(&mut t, a, 1);
    let logs = t.logs(b).unwrap();
    assert_eq!(logs.len(), 3 + 45 + 45);
    assert!(logs[0].ends_with("\"node\":0}"));
    assert!(logs[3].ends_with(&format!("\"node\":{a}}}")));
    assert!(logs[48].ends_with(&format!("\"node\":{b}}}")));
    assert_eq!(t.node(a).unwrap().log.len(), 45, "a node stores only its own entries");
    assert_eq!(t.summaries()[1].turns, 1);
}

#[test]
fn entries_from_reads_the_entries_after_an_index() {
    let log = NodeLog::default();
    for e in ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"] {
        log.push(e);
    }
    assert_eq!(log.entries_from(0), log.entries());
    assert_eq!(log.entries_from(1), ["{\"b\":2}", "{\"c\":3}"]);
    assert_eq!(log.entries_from(3), Vec::<String>::new());
    assert_eq!(log.entries_from(7), Vec::<String>::new());
}

#[test]
fn branch_applies_every_op_kind_and_sets_edge_types() {
    let mut t = tree();
    let cases = [
        (json!({"op": "agent_ctx_append", "name": "Alice", "role": "user", "content": "psst"}), EdgeType::AgentCtx),
        (json!({"op": "agent_plan_replace", "name": "Alice", "plan_state": {"strategy": "x"}}), EdgeType::AgentPlan),
        (json!({"op": "agent_props_patch", "name": "Bob", "updates": {"mood": "grim"}}), EdgeType::AgentProps),
        (json!({"op": "scene_state_patch", "updates": {"time": 1200}}), EdgeType::SceneState),
        (json!({"op": "public_broadcast", "text": "Breaking"}), EdgeType::PublicEvent),
    ];
    for (op, edge) in cases {
        let op: Op = serde_json::from_value(op).unwrap();
        let id = t.branch(0, vec![op]).unwrap();
        assert_eq!(t.node(id).unwrap().edge_type, edge);
    }
    let bcast = t.node(5).unwrap();
    assert_eq!(bcast.log.len(), 1 + 3 + 1, "the counterfactual, three deltas and one system_broadcast");
    let state = t.state(5).unwrap();
    assert!(state.agents[0].short_memory[0].content.ends_with("Public Event: Breaking"));
    let plan = t.state(2).unwrap().agents[1].plan_state.clone();
    assert_eq!(plan["strategy"], "x");
    let multi = t.branch(0, vec![]).unwrap();
    assert_eq!(t.node(multi).unwrap().edge_type, EdgeType::Multi);
}

#[test]
fn a_failing_branch_leaves_no_node_and_no_id() {
    let mut t = tree();
    let bad = vec![
        Op::PublicBroadcast { text: "ok".into() },
        Op::AgentPropsPatch { name: "Nobody".into(), updates: Default::default() },
    ];
    let err = t.branch(0, bad).unwrap_err();
    assert_eq!(err, TreeError::InvalidOp("ops[1]: unknown agent 'Nobody' (agents: Host, Alice, Bob)".into()));
    assert_eq!(t.len(), 1);
    let next = t.branch(0, vec![]).unwrap();
    assert_eq!(next, 1, "no id was burnt");
    assert!(t.branch(0, vec![Op::Advance { turns: 1 }]).is_err());
    assert!(t.branch(42, vec![]).is_err());
}

#[test]
fn delete_lca_frontier_and_root_protection() {
    let mut t = tree();
    let a = advance(&mut t, 0, 1);
    let b = advance(&mut t, a, 1);
    let c = advance(&mut t, a, 1);
    let d = advance(&mut t, 0, 1);
    assert_eq!(t.lca(b, c).unwrap(), a);
    assert_eq!(t.lca(b, d).unwrap(), 0);
    assert_eq!(t.frontier(true), vec![b, c]);
    assert_eq!(t.frontier(false), vec![b, c, d]);
    assert_eq!(t.delete_subtree(0), Err(TreeError::DeleteRoot));
    assert_eq!(t.delete_subtree(a).unwrap(), vec![a, b, c]);
    assert_eq!(t.leaves(), vec![d]);
    assert_eq!(t.graph().edges.len(), 1);
    assert_eq!(t.delete_subtree(a), Err(TreeError::NodeNotFound(a)));
}

#[test]
fn export_import_is_lossless() {
    let mut t = tree();
    let a = advance(&mut t, 0, 2);
    t.branch(a, vec![Op::PublicBroadcast { text: "x".into() }]).unwrap();
    let exported = t.export().unwrap();
    let json = serde_json::to_string(&exported).unwrap();
    let mut back = SimTree::import(serde_json::from_str(&json).unwrap(), None, &ImportLimits::default()).unwrap();
    assert_eq!(serde_json::to_string(&back.export().unwrap()).unwrap(), json);
    assert_eq!(back.logs(2).unwrap(), t.logs(2).unwrap());
    let mut broken: TreeExport = serde_json::from_str(&json).unwrap();
    broken.nodes[1].parent = Some(99);
    assert!(SimTree::import(broken, None, &ImportLimits::default()).is_err());
}

#[test]
fn an_import_beyond_the_engine_limits_names_the_node_and_the_field() {
    let mut t = tree();
    advance(&mut t, 0, 1);
    let mut export = t.export().unwrap();
    assert!(matches!(export.nodes[1].sim, Sim::Social(_)), "a social tree");
    // As a hand-edited export would say it (nothing outside the engine writes a simulator).
    let mut sim = serde_json::to_value(&export.nodes[1].sim).unwrap();
    *find_key(&mut sim, "max_steps_per_turn").expect("the field is written") = 0.into();
    export.nodes[1].sim = serde_json::from_value(sim).unwrap();
    let Err(e) = SimTree::import(export, None, &ImportLimits::default()) else {
        panic!("a simulator of 0 steps per turn was imported")
    };
    assert_eq!(e.to_string(), "nodes[1] (node 1): max_steps_per_turn must be between 1 and 100, got 0");
}

#[test]
fn a_node_that_would_decode_past_its_share_of_memory_is_refused_before_it_is_built() {
    let mut t = tree();
    advance(&mut t, 0, 1);
    let mut export = serde_json::to_value(t.export().unwrap()).unwrap();
    // A million small numbers: 2 MB of text, ~50 MB as values.
    let props = find_object_with(&mut export["nodes"][1]["sim"], "properties").expect("an agent");
    props["properties"]["big"] = serde_json::Value::from(vec![0u8; 1_000_000]);
    let text = serde_json::to_vec(&export).unwrap();
    let limits = ImportLimits { max_memory: 64 << 20, ..ImportLimits::default() };
    assert_eq!(limits.max_part_bytes(), 16 << 20);
    let Err(e) = read_export(&text[..], &limits, None, |imp, n| imp.add(n).map(drop)) else {
        panic!("a node of ~50 MB decoded was imported under a 16 MiB share")
    };
    assert!(matches!(e, TreeError::TooLarge(_)), "{e:?}");
    assert!(e.to_string().contains("nodes[1]: one node would take more than 16 MiB"), "{e}");
    // The same export fits a larger budget.
    let roomy = ImportLimits { max_memory: 1 << 30, ..ImportLimits::default() };
    read_export(&text[..], &roomy, None, |imp, n| imp.add(n).map(drop)).expect("fits");
}

/// The first object under `v` (depth first) that has the field `key`.
fn find_object_with<'v>(v: &'v mut serde_json::Value, key: &str) -> Option<&'v mut serde_json::Value> {
    if v.get(key).is_some() {
        return Some(v);
    }
    match v {
        serde_json::Value::Object(m) => m.values_mut().find_map(|c| find_object_with(c, key)),
        serde_json::Value::Array(a) => a.iter_mut().find_map(|c| find_object_with(c, key)),
        _ => None,
    }
}

/// The first value under `key`, at any depth.
fn find_key<'v>(v: &'v mut serde_json::Value, key: &str) -> Option<&'v mut serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => {
            if m.contains_key(key) {
                return m.get_mut(key);
            }
            m.values_mut().find_map(|x| find_key(x, key))
        }
        serde_json::Value::Array(a) => a.iter_mut().find_map(|x| find_key(x, key)),
        _ => None,
    }
}
