//! Property-based fuzz of the two ways a client shapes a simulator: branch ops (any op, any
//! fields, on every shipped social scene and trading episode) and imported states (a real export
//! with random leaves of a simulator replaced by hostile values). The property is the server's:
//! the operation is accepted or refused with an error, and whatever is accepted can be viewed
//! and advanced without a panic.

use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use simtree::embedded::assets_dir;
use simtree::engine::Event;
use simtree::llm::MockClient;
use simtree::scenario::ScenarioLibrary;
use simtree::sim::{RunCtx, Sim};
use simtree::trading::agents::MockToolModel;
use simtree::trading::data::MarketData;
use simtree::trading::episode::TradingEpisode;
use simtree::tree::{ImportLimits, NodeId, NodeStatus, SimTree, entry_json};
use simtree_shared::Op;

const SOCIAL: [&str; 5] = ["simple_chat", "council", "werewolf", "landlord", "village"];
const TRADING: [&str; 2] = ["momentum_tech", "llm_trader"];

/// A fixed seed keeps CI deterministic; `PROPTEST_RNG_SEED=random` (or a number) explores more.
fn config(cases: u32) -> ProptestConfig {
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(proptest::test_runner::RngSeed::Fixed(0x5137_13EE));
    ProptestConfig { cases, rng_seed: seed, ..ProptestConfig::default() }
}

fn library() -> &'static ScenarioLibrary {
    static LIB: OnceLock<ScenarioLibrary> = OnceLock::new();
    LIB.get_or_init(|| ScenarioLibrary::load_assets(&assets_dir().expect("assets")).expect("assets"))
}

fn market() -> &'static Arc<MarketData> {
    static M: OnceLock<Arc<MarketData>> = OnceLock::new();
    M.get_or_init(|| Arc::new(MarketData::load_default().expect("market data")))
}

fn tree_of(scenario: &str) -> SimTree {
    let lib = library();
    let sim = match lib.trading(scenario) {
        Some(t) => Sim::Trading(TradingEpisode::new(market().clone(), t.episode.clone()).unwrap()),
        None => Sim::Social(lib.get(scenario).unwrap().build(None).unwrap()),
    };
    SimTree::new(scenario, sim)
}

/// Runs `turns` turns from `parent` with the offline clients, as the server does.
fn advance(t: &mut SimTree, parent: NodeId, turns: u64) -> NodeId {
    let (id, mut sim, log) = t.start_advance(parent, turns).unwrap();
    let ctx = RunCtx { llm: Arc::new(MockClient), tools: Arc::new(MockToolModel), abm: None };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut sink = |e: Event| {
        log.push(&entry_json(&e, id));
    };
    let result = rt.block_on(sim.run(turns, &ctx, &mut sink));
    let status = if result.is_ok() { NodeStatus::Done } else { NodeStatus::Failed };
    t.finish(id, sim, status, result.err().map(String::from), Vec::new());
    id
}

/// Values that have broken parsers before: extremes, wrong types, empties.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(i64::MIN)),
        Just(json!(i64::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(1e308)),
        Just(json!(-1e308)),
        Just(json!(0.5)),
        Just(json!("")),
        Just(json!("x")),
        Just(json!("AAPL")),
        Just(json!("2012-06-01")),
        Just(json!("x".repeat(2000))),
        Just(json!([])),
        Just(json!([1, 2, 3])),
        Just(json!({})),
        Just(json!({"a": 1})),
        (0u64..1000).prop_map(|n| json!(n)),
    ]
}

fn name(names: Vec<String>) -> impl Strategy<Value = String> {
    let mut pool = names;
    pool.push("Nobody".into());
    pool.push(String::new());
    prop::sample::select(pool)
}

fn updates(keys: Vec<String>) -> impl Strategy<Value = Map<String, Value>> {
    let mut pool = keys;
    pool.push("no_such_key".into());
    prop::collection::vec((prop::sample::select(pool), hostile_value()), 0..4).prop_map(|kv| kv.into_iter().collect())
}

/// An op of the scenario's kind (mostly; one in ten is any op), with fields drawn from the
/// scenario's real names and keys and from hostile values.
fn op(agents: Vec<String>, keys: Vec<String>, tickers: Vec<String>) -> impl Strategy<Value = Op> {
    let trading = !tickers.is_empty();
    let any = any_op(agents.clone(), keys.clone(), tickers.clone()).boxed();
    let own = any_op(agents, keys, tickers)
        .prop_filter("an op of the scenario's kind", move |op| {
            let trading_op = matches!(
                op,
                Op::PortfolioPatch { .. }
                    | Op::CaseDataInject { .. }
                    | Op::AgentSwap { .. }
                    | Op::AgentPromptReplace { .. }
            );
            trading_op == trading && !matches!(op, Op::AbmSetGlobal { .. })
        })
        .boxed();
    prop_oneof![9 => own, 1 => any]
}

fn any_op(agents: Vec<String>, keys: Vec<String>, tickers: Vec<String>) -> impl Strategy<Value = Op> {
    let kinds = prop::sample::select(vec!["buy_and_hold", "momentum", "mean_reversion", "llm", "nope"]);
    prop_oneof![
        (name(agents.clone()), prop::sample::select(vec!["user", "assistant", "tool"]), ".{0,40}")
            .prop_map(|(name, role, content)| Op::AgentCtxAppend { name, role: role.into(), content }),
        // A plan that reads as one (the rest is refused with the request, before any branch).
        (name(agents.clone()), hostile_value(), hostile_value()).prop_filter_map("a plan", |(name, strategy, goal)| {
            let plan = json!({"strategy": strategy, "goals": [{"desc": goal}]});
            Some(Op::AgentPlanReplace { name, plan_state: plan.try_into().ok()? })
        }),
        (name(agents.clone()), updates(vec!["mood".into(), "role".into()]))
            .prop_map(|(name, updates)| Op::AgentPropsPatch { name, updates }),
        updates(keys).prop_map(|updates| Op::SceneStatePatch { updates }),
        ".{0,80}".prop_map(|text| Op::PublicBroadcast { text }),
        (prop::option::of(hostile_value()), updates(tickers)).prop_map(|(cash, positions)| Op::PortfolioPatch {
            cash: cash.and_then(|c| c.as_f64()),
            positions: positions.into_iter().filter_map(|(t, n)| Some((t, n.as_i64()?))).collect()
        }),
        (hostile_value(), prop::sample::select(vec!["news", "earnings", "other"])).prop_filter_map(
            "an item",
            |(content, kind)| {
                let item = serde_json::from_value(json!({"kind": kind, "content": content})).ok()?;
                Some(Op::CaseDataInject { item })
            }
        ),
        (kinds, hostile_value(), hostile_value()).prop_filter_map("an agent", |(kind, lookback, band)| {
            let mut agent = json!({"kind": kind, "lookback": lookback, "band": band});
            if kind != "mean_reversion" {
                agent.as_object_mut()?.remove("band");
            }
            Some(Op::AgentSwap { agent: agent.try_into().ok()? })
        }),
        ".{0,40}".prop_map(|system_prompt| Op::AgentPromptReplace { system_prompt }),
        (".{0,10}", hostile_value()).prop_map(|(name, value)| Op::AbmSetGlobal { name, value }),
    ]
}

/// The names, scene-state keys and tickers a scenario's ops can aim at.
fn targets(scenario: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut t = tree_of(scenario);
    let sim = t.sim(0).unwrap();
    let agents = sim.state().agents.into_iter().map(|a| a.name).collect();
    let view = sim.view();
    let keys = view.social().and_then(|v| v.state.as_object()).map(|o| o.keys().cloned().collect()).unwrap_or_default();
    let tickers = library().trading(scenario).map(|t| t.episode.tickers.clone()).unwrap_or_default();
    (agents, keys, tickers)
}

fn scenario_and_ops() -> impl Strategy<Value = (&'static str, Vec<Op>)> {
    prop::sample::select(SOCIAL.iter().chain(TRADING.iter()).copied().collect::<Vec<_>>()).prop_flat_map(|s| {
        let (agents, keys, tickers) = targets(s);
        (Just(s), prop::collection::vec(op(agents, keys, tickers), 1..4))
    })
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn branch_ops_never_panic((scenario, ops) in scenario_and_ops()) {
        let mut t = tree_of(scenario);
        let first = advance(&mut t, 0, 2);
        let nodes_before = t.len();
        match t.branch(first, ops) {
            Ok(child) => {
                let _ = (t.sim(child).unwrap().view(), t.state(child).unwrap());
                let next = advance(&mut t, child, 3);
                let _ = t.logs(next).unwrap();
            }
            Err(_) => prop_assert_eq!(t.len(), nodes_before, "a refused branch leaves nothing"),
        }
    }
}

/// Every leaf path of a JSON value (object keys and array indices), depth first.
fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(o) if !o.is_empty() => {
            for (k, child) in o {
                path.push(json!(k));
                leaves(child, path, out);
                path.pop();
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, child) in a.iter().enumerate().take(8) {
                path.push(json!(i));
                leaves(child, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

/// Half the time a value of the leaf's own type (so the typed reader accepts it and the engine's
/// own checks are what stands between it and a run), else the hostile value as is.
fn plausible(current: &Value, hostile: Value, nudge: i64) -> Value {
    if nudge % 2 == 0 {
        return hostile;
    }
    match current {
        Value::Number(n) if n.is_u64() => json!(n.as_u64().unwrap_or(0).saturating_add_signed(nudge * 7)),
        Value::Number(n) if n.is_i64() => json!(n.as_i64().unwrap_or(0).saturating_add(nudge * 7)),
        Value::Number(n) => json!(n.as_f64().unwrap_or(0.0) * nudge as f64),
        Value::Bool(b) => json!(!b),
        Value::String(_) => match hostile {
            Value::String(s) => Value::String(s),
            _ => json!(""),
        },
        _ => hostile,
    }
}

fn at_mut<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, step| match step {
        Value::String(k) => v.get_mut(k.as_str()),
        Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

fn export_of(scenario: &str) -> Value {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<String, Value>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().unwrap().get(scenario) {
        return v.clone();
    }
    let mut t = tree_of(scenario);
    advance(&mut t, 0, 4);
    let v = serde_json::to_value(t.export().unwrap()).unwrap();
    cache.lock().unwrap().insert(scenario.into(), v.clone());
    v
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn imported_states_never_panic(
        scenario in prop::sample::select(SOCIAL.iter().chain(TRADING.iter()).copied().collect::<Vec<_>>()),
        edits in prop::collection::vec((any::<prop::sample::Index>(), hostile_value(), -3i64..40), 1..4),
    ) {
        let mut export = export_of(scenario);
        let mut paths = Vec::new();
        leaves(&export["nodes"][1]["sim"], &mut Vec::new(), &mut paths);
        for (index, value, nudge) in edits {
            let path = index.get(&paths).clone();
            if let Some(slot) = at_mut(&mut export["nodes"][1]["sim"], &path) {
                *slot = plausible(slot, value, nudge);
            }
        }
        let Ok(data) = serde_json::from_value(export) else {
            return Ok(()); // refused by the typed reader: a 422
        };
        let Ok(mut t) = SimTree::import(data, Some(market()), &ImportLimits::default()) else {
            return Ok(()); // refused by the checks: a 422
        };
        let next = advance(&mut t, 1, 3);
        let _ = (t.sim(next).unwrap().view(), t.state(next).unwrap(), t.logs(next).unwrap());
    }
}
