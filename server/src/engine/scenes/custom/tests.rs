//! Custom scenes: the shipped documents play to a named outcome with the scripted player, a
//! document's problems are refused at their paths, and the rules (legality, strict parameters,
//! all-or-nothing effects, visibility) hold.

use serde_json::{Value, json};

use crate::engine::Simulator;
use crate::engine::scenes::Scene;
use crate::llm::chat::Message;
use crate::llm::{BoxFuture, LlmClient, LlmError, LlmState, MockClient};
use crate::scenario::UserScenario;

/// The scripted player as a client.
struct Scripted;

impl LlmClient for Scripted {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let reply = crate::engine::scripted::reply(messages, state);
        Box::pin(async move { Ok(reply) })
    }
}

fn shipped(id: &str) -> Value {
    let path = crate::embedded::assets_dir().unwrap().join(format!("scenarios/{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn build(doc: &Value, seed: u64) -> Result<Simulator, crate::scenario::ScenarioError> {
    match UserScenario::from_document("doc", doc)? {
        UserScenario::Social(s) => s.build(Some(seed)),
        _ => unreachable!("a social document"),
    }
}

fn custom(sim: &Simulator) -> &super::Custom {
    match &sim.scene {
        Scene::Custom(c) => c,
        _ => panic!("a custom scene"),
    }
}

fn refusal(doc: &Value) -> String {
    build(doc, 0).unwrap_err().to_string()
}

const SHIPPED: [(&str, &[&str]); 4] = [
    ("custom_jury", &["guilty", "not_guilty", "hung"]),
    ("custom_public_goods", &["finished"]),
    ("custom_ultimatum", &["accepted", "rejected", "no_deal"]),
    ("custom_town_hall", &["closed"]),
];

#[test]
fn every_shipped_custom_game_reaches_a_named_outcome_with_the_scripted_player() {
    for (id, outcomes) in SHIPPED {
        for seed in [1, 2, 3] {
            let mut sim = build(&shipped(id), seed).unwrap();
            let (report, events) = sim.run_blocking(400, &Scripted);
            let report = report.unwrap();
            let outcome = custom(&sim).state.outcome.clone();
            assert!(report.complete, "{id} seed {seed}: not over after {} turns", report.turns);
            assert!(outcome.as_deref().is_some_and(|o| outcomes.contains(&o)), "{id} seed {seed}: {outcome:?}");
            // Nothing the scripted player wrote was refused as malformed.
            let refused =
                events.iter().filter(|e| e.kind.as_str() == "action_end" && e.data["success"] == false).count();
            let errors = events.iter().filter(|e| e.kind.as_str() == "agent_error").count();
            assert_eq!(errors, 0, "{id} seed {seed}");
            assert!(refused * 5 <= events.len(), "{id} seed {seed}: {refused} refused actions");
        }
    }
}

#[test]
fn the_mock_also_ends_every_shipped_custom_game() {
    // The mock knows none of these actions; the phases' bounds end each game anyway.
    for (id, outcomes) in SHIPPED {
        let mut sim = build(&shipped(id), 1).unwrap();
        let (report, _) = sim.run_blocking(400, &MockClient);
        assert!(report.unwrap().complete, "{id}");
        let outcome = custom(&sim).state.outcome.clone().unwrap();
        assert!(outcomes.contains(&outcome.as_str()), "{id}: {outcome}");
    }
}

#[test]
fn metrics_read_the_final_state() {
    let mut sim = build(&shipped("custom_public_goods"), 4).unwrap();
    sim.run_blocking(400, &Scripted).0.unwrap();
    let c = custom(&sim);
    let total = c.metric("total_contribution").unwrap();
    assert_eq!(total, c.state.vars["total_contribution"]);
    assert!(total.as_i64().unwrap() > 0, "{total}");
    // Five rounds of 10 coins each, doubled pots shared: every coin is accounted for.
    let coins: i64 = c.state.agents.values().map(|m| m.vars["coins"].as_i64().unwrap()).sum();
    let pots = total.as_i64().unwrap();
    assert!((coins - (4 * 5 * 10 - pots + 2 * pots)).abs() <= 4 * 5, "{coins} {pots}");
    assert_eq!(c.metric("nothing"), None);
}

/// The ultimatum game with a proposer and a responder, for small rule tests.
fn ultimatum() -> Simulator {
    build(&shipped("custom_ultimatum"), 1).unwrap()
}

fn prompt(sim: &Simulator, agent: &str) -> String {
    sim.interview(agent, "q").unwrap()[0].content.to_string()
}

#[test]
fn prompts_show_the_setting_the_roles_instructions_and_only_the_legal_actions() {
    let sim = ultimatum();
    let pat = prompt(&sim, "Pat");
    assert!(pat.contains("Two strangers split 100 coins once."));
    assert!(pat.contains("Your role: proposer.\nMake one offer"));
    assert!(!pat.contains("Accept the offer or reject it"), "another role's instructions");
    assert!(pat.contains("Available Actions:\n- offer: offer the responder part of the 100 coins\n- yield:"));
    assert!(
        pat.contains("<Action name=\"offer\"><amount>…</amount></Action>\n  <amount>: a whole number from 0 to 100\n")
    );
    // The catalogue is the role's, whatever the phase (so a prompt's start never changes);
    // each turn's status line says which moves are open now.
    let robin = prompt(&sim, "Robin");
    assert!(robin.contains("- accept:") && !robin.contains("- offer:"), "the responder's own");
    let c = custom(&sim);
    assert!(c.status("Pat").ends_with("moves open now: offer | yield"), "{}", c.status("Pat"));
    assert!(c.status("Robin").ends_with("moves open now: yield"), "{}", c.status("Robin"));
}

fn act(sim: &mut Simulator, agent: &str, xml: &str) -> Vec<crate::engine::Event> {
    let reply = format!("--- Action ---\n{xml}\n--- Plan Update ---\nno change");
    struct Fixed(String);
    impl LlmClient for Fixed {
        fn chat<'a>(&'a self, _: &'a [Message], _: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
            let r = self.0.clone();
            Box::pin(async move { Ok(r) })
        }
    }
    assert_eq!(super::super::SceneRules::controlled_next(custom(sim), &sim.world).as_deref(), Some(agent));
    sim.max_steps_per_turn = 1;
    let (report, events) = sim.run_blocking(1, &Fixed(reply));
    report.unwrap();
    events
}

fn failure(events: &[crate::engine::Event]) -> Option<String> {
    events
        .iter()
        .find(|e| e.kind.as_str() == "action_end" && e.data["success"] == false)
        .map(|e| e.data["result"]["error"].as_str().unwrap_or("").to_string())
}

#[test]
fn parameters_are_read_strictly_and_a_refused_action_changes_nothing() {
    for (xml, want) in [
        ("<Action name=\"offer\" />", "offer needs the field <amount>: a whole number from 0 to 100."),
        (
            "<Action name=\"offer\"><amount>101</amount></Action>",
            "<amount> must be a whole number from 0 to 100; got '101'.",
        ),
        (
            "<Action name=\"offer\"><amount>4.5</amount></Action>",
            "<amount> must be a whole number from 0 to 100; got '4.5'.",
        ),
        (
            "<Action name=\"offer\"><amount>4</amount><to>me</to></Action>",
            "<to> is not a field of offer (its fields: amount).",
        ),
        ("<Action name=\"accept\" />", "accept is not possible for you now."),
    ] {
        let mut sim = ultimatum();
        let before = custom(&sim).state.clone();
        let events = act(&mut sim, "Pat", xml);
        assert_eq!(failure(&events).as_deref(), Some(want), "{xml}");
        let after = &custom(&sim).state;
        assert_eq!(
            (&after.vars, &after.agents, &after.votes, &after.acted, &after.phase),
            (&before.vars, &before.agents, &before.votes, &before.acted, &before.phase),
            "{xml}"
        );
    }
}

#[test]
fn an_offer_and_its_acceptance_pay_both_and_end_the_game() {
    let mut sim = ultimatum();
    act(&mut sim, "Pat", "<Action name=\"offer\"><amount>40</amount></Action>");
    assert_eq!(custom(&sim).state.phase, "response");
    assert!(prompt(&sim, "Robin").contains("- accept: accept the offer\n- reject:"));
    let events = act(&mut sim, "Robin", "<Action name=\"accept\" />");
    assert_eq!(failure(&events), None);
    let c = custom(&sim);
    assert_eq!(c.state.outcome.as_deref(), Some("accepted"));
    assert_eq!(c.state.agents["Robin"].vars["payoff"], json!(40));
    assert_eq!(c.state.agents["Pat"].vars["payoff"], json!(60));
    assert!(sim.is_complete());
    assert_eq!(c.metric("accepted"), Some(json!(true)));
}

#[test]
fn a_private_action_reaches_only_the_actor_and_the_moderators() {
    let mut sim = build(&shipped("custom_jury"), 1).unwrap();
    let mut c = custom(&sim).clone();
    c.state.phase = "ballot".into();
    sim.scene = Scene::Custom(c);
    let events = act(&mut sim, "Foreperson", "<Action name=\"cast_vote\"><verdict>guilty</verdict></Action>");
    assert_eq!(failure(&events), None);
    let told: Vec<&str> = events
        .iter()
        .filter(|e| {
            e.kind.as_str() == "agent_ctx_delta"
                && e.data["role"] == "user"
                && e.data["content"].as_str().unwrap_or("").contains("cast_vote")
                && !e.data["content"].as_str().unwrap_or("").contains(super::OPEN_NOW)
        })
        .map(|e| e.data["agent"].as_str().unwrap())
        .collect();
    assert_eq!(told, ["Foreperson"], "the foreperson is the only moderator");
}

#[test]
fn the_branch_ops_set_variables_and_roles_by_name_and_type() {
    let mut sim = ultimatum();
    let c = match &mut sim.scene {
        Scene::Custom(c) => c,
        _ => unreachable!(),
    };
    c.set_var("offer", &json!(30), None).unwrap();
    assert_eq!(c.state.vars["offer"], json!(30));
    c.set_var("payoff", &json!(5), Some("Robin")).unwrap();
    assert_eq!(c.state.agents["Robin"].vars["payoff"], json!(5));
    assert_eq!(c.set_var("pot", &json!(1), None).unwrap_err().0, "unknown variable 'pot' (variables: offer, payoff)");
    assert_eq!(c.set_var("offer", &json!("x"), None).unwrap_err().0, "value: \"x\" is not a value of type int");
    assert_eq!(c.set_var("payoff", &json!(1), None).unwrap_err().0, "'payoff' is per agent: say whose with `agent`");
    assert_eq!(c.set_var("payoff", &json!(1), Some("Zed")).unwrap_err().0, "unknown agent 'Zed' (agents: Pat, Robin)");
    c.set_role("Robin", "proposer").unwrap();
    assert_eq!(c.state.agents["Robin"].role, "proposer");
    assert_eq!(c.set_role("Robin", "king").unwrap_err().0, "unknown role 'king' (roles: proposer, responder)");
}

#[test]
fn a_custom_scene_survives_its_stored_form() {
    let mut sim = build(&shipped("custom_town_hall"), 2).unwrap();
    sim.run_blocking(7, &Scripted).0.unwrap();
    let text = serde_json::to_string(&sim).unwrap();
    let mut back: Simulator = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
    // The copy continues exactly as the original.
    let (_, a) = sim.run_blocking(20, &Scripted);
    let (_, b) = back.run_blocking(20, &Scripted);
    assert_eq!(a, b);
}

// ---- hostile and broken documents ----

fn minimal() -> Value {
    json!({
        "scene": {"type": "custom", "name": "t", "config": {
            "setting": "A room.",
            "roles": [{"name": "member"}],
            "variables": [{"name": "n", "type": "int", "initial": 0}],
            "actions": [{"name": "bump", "description": "add one", "effects": [{"add": {"var": "n", "value": "1"}}]}],
            "phases": [{"name": "main", "ends": {"rounds": 2}, "next": [{"end": "done"}]}],
            "outcomes": ["done"]
        }},
        "agents": [{"name": "A", "properties": {"role": "member"}}, {"name": "B", "properties": {"role": "member"}}]
    })
}

fn with(path: &[&str], value: Value) -> Value {
    let mut doc = minimal();
    let mut at = &mut doc["scene"]["config"];
    for (i, key) in path.iter().enumerate() {
        if i + 1 == path.len() {
            at[*key] = value.clone();
            break;
        }
        at = match key.parse::<usize>() {
            Ok(n) => &mut at[n],
            Err(_) => &mut at[*key],
        };
    }
    doc
}

#[test]
fn the_minimal_document_runs() {
    let mut sim = build(&minimal(), 0).unwrap();
    let (report, _) = sim.run_blocking(10, &Scripted);
    assert!(report.unwrap().complete);
    assert_eq!(custom(&sim).state.vars["n"], json!(4));
}

#[test]
fn hostile_documents_are_refused_at_their_paths() {
    let many_actions: Vec<Value> =
        (0..100_000).map(|i| json!({"name": format!("a{i}"), "description": "x", "effects": []})).collect();
    let many_phases: Vec<Value> = (0..100_000)
        .map(|i| json!({"name": format!("p{i}"), "ends": "all_acted", "next": [{"end": "done"}]}))
        .collect();
    let deep = format!("{}true{}", "(".repeat(5000), ")".repeat(5000));
    let cases: Vec<(Value, &str)> = vec![
        (
            with(&["actions"], Value::Array(many_actions)),
            "scene.config.actions: 100000 actions; a custom scene may have at most 100",
        ),
        (
            with(&["phases"], Value::Array(many_phases)),
            "scene.config.phases: 100000 phases; a custom scene may have at most 100",
        ),
        (
            with(&["actions", "0", "when"], json!(deep)),
            "scene.config.actions[0].when: 10004 characters; an expression may have at most 500",
        ),
        (
            with(&["actions", "0", "when"], json!(format!("{}true{}", "[".repeat(30), "]".repeat(30)))),
            "scene.config.actions[0].when: nested 30 deep; at most 16 levels of brackets, conditionals and prefix operators",
        ),
        (
            with(&["actions", "0", "when"], json!("agents.all(a, agents.all(b, agents.all(c, true)))")),
            "scene.config.actions[0].when: 3 list macros (all, exists, exists_one, map, filter); at most 2",
        ),
        (with(&["actions", "0", "when"], json!("vars.n >")), "scene.config.actions[0].when: does not parse"),
        (
            with(&["actions", "0", "when"], json!("env.HOME == ''")),
            "scene.config.actions[0].when: uses 'env', which is not a name of the state",
        ),
        (with(&["setting"], json!("x".repeat(20_001))), "scene.config.setting: 20001 characters; at most 20000"),
        (
            with(&["roles"], json!([{"name": "member"}, {"name": "member"}])),
            "scene.config.roles[1].name: 'member' is named twice",
        ),
        (with(&["actions", "0", "name"], json!("Bump It")), "scene.config.actions[0].name: 'Bump It' is not a name"),
        (
            with(&["actions", "0", "name"], json!("yield")),
            "scene.config.actions[0].name: 'yield' is every agent's own action",
        ),
        (
            with(&["actions", "0", "effects"], json!([{"add": {"var": "m", "value": "1"}}])),
            "scene.config.actions[0].effects[0].add.var: no variable is named 'm' (the variables: n)",
        ),
        (
            with(&["actions", "0", "effects"], json!([{"goto": "elsewhere"}])),
            "scene.config.actions[0].effects[0].goto: no phase is named 'elsewhere' (the phases: main)",
        ),
        (
            with(&["actions", "0", "effects"], json!([{"teleport": "x"}])),
            "scene.config.actions[0].effects[0]: unknown variant `teleport`",
        ),
        (with(&["actions", "0", "colour"], json!("red")), "scene.config.actions[0].colour: unknown field `colour`"),
        (
            with(
                &["phases"],
                json!([
                    {"name": "main", "ends": "all_acted", "next": [{"end": "done"}]},
                    {"name": "lost", "ends": "all_acted", "next": [{"end": "done"}]}
                ]),
            ),
            "scene.config.phases[1]: 'lost' is never entered: no transition or goto leads to it from 'main'",
        ),
        (
            with(
                &["phases"],
                json!([
                    {"name": "main", "ends": "all_acted", "next": [{"goto": "again"}]},
                    {"name": "again", "ends": "all_acted", "next": [{"goto": "main"}]}
                ]),
            ),
            "scene.config.phases[0]: from 'main' no end can be reached: the scene would never end",
        ),
        (
            with(&["phases", "0", "next"], json!([{"when": "vars.n > 1", "end": "done"}])),
            "scene.config.phases[0].next[0].when: the last transition must have no condition",
        ),
        (
            with(&["variables", "0", "initial"], json!("zero")),
            "scene.config.variables[0].initial: \"zero\" is not a value of type int",
        ),
        (
            with(&["variables"], json!([{"name": "l", "type": "list", "initial": vec![0; 201]}])),
            "scene.config.variables[0].initial: 201 items; a list may have at most 200",
        ),
        (
            with(&["actions", "0", "params"], json!([{"name": "x", "type": "int", "min": 5}])),
            "scene.config.actions[0].params[0]: an int or number parameter has `min` and `max`",
        ),
        (
            with(&["actions", "0", "visibility"], json!({"private_to": "nobody"})),
            "scene.config.actions[0].visibility.private_to: 'nobody' is not an agent parameter of bump",
        ),
        (
            with(
                &["actions"],
                json!([{"name": "stop", "description": "x", "effects": [{"end": "done"}], "ends_turn": false}]),
            ),
            "scene.config.actions[0].ends_turn: false, but effects[0] moves the phase or ends the scene",
        ),
        (
            with(&["actions", "0", "ends_turn"], json!("no")),
            "scene.config.actions[0].ends_turn: invalid type: string \"no\", expected a boolean",
        ),
        (with(&["actions", "0", "summary"], json!("me.nam +")), "scene.config.actions[0].summary: "),
        (
            with(&["phases", "0", "on_exit"], json!([{"tell": "'x'"}])),
            "scene.config.phases[0].on_exit[0].tell: a phase has no actor to tell: use reveal",
        ),
        (
            with(&["phases", "0", "ends"], json!({"as_soon_as": "nobody > 1"})),
            "scene.config.phases[0].ends.as_soon_as: ",
        ),
        (
            with(&["phases", "0", "announce"], json!(0)),
            "scene.config.phases[0].announce: invalid type: integer `0`, expected a boolean",
        ),
        (with(&["phases", "0", "order"], json!("onward")), "scene.config.phases[0].order: unknown variant `onward`"),
        (with(&["style"], json!("shipped")), "scene.config.style: unknown variant `shipped`"),
        (
            with(&["status_lines"], json!("off")),
            "scene.config.status_lines: invalid type: string \"off\", expected a boolean",
        ),
    ];
    for (doc, want) in cases {
        let got = refusal(&doc);
        assert!(got.starts_with(&format!("scenario: {want}")), "want: {want}\n got: {got}");
    }
}

#[test]
fn agents_must_hold_roles_of_the_document_and_no_registry_actions() {
    let mut doc = minimal();
    doc["agents"][1]["properties"]["role"] = json!("king");
    assert!(
        refusal(&doc).starts_with("scenario: agents[1].properties.role: no role is named 'king' (the roles: member)"),
        "{}",
        refusal(&doc)
    );
    let mut doc = minimal();
    doc["agents"][0]["properties"] = json!({});
    assert!(
        refusal(&doc).starts_with("scenario: agents[0].properties.role: every agent of a custom scene names its role")
    );
    let mut doc = minimal();
    doc["agents"][0]["action_space"] = json!(["speak"]);
    assert!(
        refusal(&doc).starts_with("scenario: agents[0].action_space[0]: speak is not an action of the custom scene"),
        "{}",
        refusal(&doc)
    );
    let mut doc = minimal();
    doc["ordering"] = json!({"kind": "random"});
    assert!(refusal(&doc).starts_with("scenario: ordering: a custom scene's phases say who acts"));
}

#[test]
fn an_effect_naming_an_agent_that_does_not_exist_fails_the_action_and_changes_nothing() {
    let doc = with(&["actions", "0", "effects"], json!([{"add": {"var": "n", "value": "1"}}, {"eliminate": "'Zed'"}]));
    let mut sim = build(&doc, 0).unwrap();
    let events = act(&mut sim, "A", "<Action name=\"bump\" />");
    assert_eq!(failure(&events).as_deref(), Some("there is no agent named 'Zed'"));
    assert_eq!(custom(&sim).state.vars["n"], json!(0), "the add before it was not kept");
}

#[test]
fn runaway_values_are_stopped_by_their_bounds() {
    let mut doc = with(&["variables"], json!([{"name": "n", "type": "list", "initial": [1]}]));
    doc["scene"]["config"]["actions"][0]["effects"] = json!([{"set": {"var": "n", "value": "vars.n + vars.n"}}]);
    doc["scene"]["config"]["phases"][0]["ends"] = json!({"rounds": 10});
    let mut sim = build(&doc, 0).unwrap();
    let mut refused = Vec::new();
    for _ in 0..10 {
        let next = super::super::SceneRules::controlled_next(custom(&sim), &sim.world).unwrap();
        refused.extend(failure(&act(&mut sim, &next, "<Action name=\"bump\" />")));
    }
    assert_eq!(custom(&sim).state.vars["n"].as_array().unwrap().len(), 128);
    assert_eq!(refused[0], "n: 256 items; a list may have at most 200");
}

// ---- Python hooks, through a runner that answers as a hook would ----

mod hooks {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::{Scripted, build, custom};
    use crate::engine::hooks::{Hook, HookCall, HookCallFailed, HookError, HookRunner, Hooks};
    use crate::engine::simulator::RunError;

    /// How a fake hook answers a call.
    type Answer = fn(&HookCall<'_>) -> Value;

    /// Answers each hook with what its function gives.
    struct Fake(Answer);

    impl HookRunner for Fake {
        fn call(&self, call: &HookCall<'_>) -> Result<Value, HookCallFailed> {
            Ok((self.0)(call))
        }
    }

    fn doc() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/custom/hooked_draw.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn hooked(answer: Answer) -> crate::engine::Simulator {
        let mut sim = build(&doc(), 5).unwrap();
        sim.world.hooks = Hooks::new(Arc::new(Fake(answer)));
        sim
    }

    #[test]
    fn hook_effects_change_the_state_and_decide_the_outcome() {
        let mut sim = hooked(|c| match c.hook {
            Hook::OnAction => {
                assert_eq!(c.arg.as_ref().unwrap()["name"], "chip_in");
                json!([{"add": {"var": "moves", "value": "1"}}])
            }
            Hook::OnPhaseEnd => {
                assert_eq!(c.arg, Some(json!("betting")));
                json!([{"set": {"var": "draw", "value": "vars.pot + 1"}}, {"reveal": "'drawn'"}])
            }
            Hook::Outcome => {
                assert_eq!(c.state["outcome"], "house_wins");
                json!([{"end": "players_win"}])
            }
        });
        let (report, events) = sim.run_blocking(20, &Scripted);
        assert!(report.unwrap().complete);
        let state = &custom(&sim).state;
        let chips = events
            .iter()
            .filter(|e| {
                e.kind.as_str() == "action_end" && e.data["action"]["action"] == "chip_in" && e.data["success"] == true
            })
            .count();
        assert!(
            chips > 0,
            "{:?}",
            events.iter().filter(|e| e.kind.as_str() == "action_end").map(|e| e.data.to_string()).collect::<Vec<_>>()
        );
        assert_eq!(state.vars["moves"], json!(chips), "on_action ran once per action");
        assert_eq!(state.vars["draw"], json!(state.vars["pot"].as_i64().unwrap() + 1));
        assert_eq!(state.outcome.as_deref(), Some("players_win"), "the outcome hook replaced house_wins");
        assert!(events.iter().any(|e| e.data.to_string().contains("drawn")));
    }

    /// Runs one turn at a time until a run fails; the simulator is then as the failed turn
    /// found it.
    fn fails_cleanly(mut sim: crate::engine::Simulator) -> String {
        for _ in 0..20 {
            let before = serde_json::to_string(&sim).unwrap();
            let (report, _) = sim.run_blocking(1, &Scripted);
            match report {
                Ok(_) => continue,
                Err(e @ RunError::Hook(_)) => {
                    assert_eq!(serde_json::to_string(&sim).unwrap(), before, "the turn was undone");
                    return e.to_string();
                }
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no hook failed");
    }

    #[test]
    fn a_bad_effect_names_the_hook_and_its_index_and_undoes_the_turn() {
        let cases: [(Answer, &str); 5] = [
            (
                |c| match c.hook {
                    Hook::OnPhaseEnd => json!([{"set": {"var": "draw", "value": "1"}}, {"explode": "now"}]),
                    _ => Value::Null,
                },
                "hook on_phase_end, effect [1]: unknown variant `explode`",
            ),
            (
                |c| match c.hook {
                    Hook::OnAction => json!([{"set": {"var": "nope", "value": "1"}}]),
                    _ => Value::Null,
                },
                "hook on_action, effect [0]: set.var: no variable is named 'nope'",
            ),
            (
                |c| match c.hook {
                    Hook::OnAction => json!({"set": "draw"}),
                    _ => Value::Null,
                },
                "hook on_action returned {\"set\":\"draw\"}; a hook returns a list of effects",
            ),
            (
                |c| match c.hook {
                    Hook::OnPhaseEnd => json!([{"set": {"var": "draw", "value": "'many'"}}]),
                    _ => Value::Null,
                },
                "hook on_phase_end, effect [0]: draw: \"many\" is not a value of type int",
            ),
            (
                |c| match c.hook {
                    Hook::Outcome => json!([{"goto": "betting"}]),
                    _ => Value::Null,
                },
                "hook outcome, effect [0]: goto: the scene is ending",
            ),
        ];
        for (answer, want) in cases {
            let error = fails_cleanly(hooked(answer));
            assert!(error.contains(want), "want {want}\n got {error}");
        }
    }

    #[test]
    fn without_a_runner_a_hooked_scene_stops_with_a_clear_error() {
        let sim = build(&doc(), 5).unwrap();
        let error = fails_cleanly(sim);
        assert!(matches!(error.as_str(), e if e.starts_with("hook on_action: this scene has Python hooks")), "{error}");
        let _ = HookError::NoRunner { hook: "on_action" };
    }

    #[test]
    fn a_hook_source_is_bounded_and_must_define_a_hook() {
        let mut d = doc();
        d["scene"]["config"]["hooks"]["source"] = json!("def helper(x):\n    return x\n");
        assert!(super::refusal(&d).contains("scene.config.hooks.source: defines none of the hooks"));
        d["scene"]["config"]["hooks"]["source"] =
            json!(format!("def outcome(state, rng):\n    return []\n#{}", "x".repeat(30_000)));
        assert!(
            super::refusal(&d)
                .contains("scene.config.hooks.source: 30040 characters; hook source may have at most 20000"),
            "{}",
            super::refusal(&d)
        );
    }
}

/// The options that make a document read as a shipped scene: no status line or phase
/// announcement, a `chat` style message that lets the turn go on, a private `tell`, a
/// `summary`, a phase that ends `as_soon_as` an action makes it true, and a `continue` order.
#[test]
fn the_shipped_scene_options_change_what_is_said_and_when_a_turn_ends() {
    let mut doc = minimal();
    let config = &mut doc["scene"]["config"];
    config["status_lines"] = json!(false);
    config["style"] = json!("chat");
    config["actions"] = json!([
        {"name": "post", "description": "post", "params": [{"name": "text", "type": "string", "max_length": 50}],
         "effects": [{"say": "params.text"}, {"add": {"var": "n", "value": "1"}}], "ends_turn": false},
        {"name": "peek", "description": "peek", "summary": "me.name + ' peeked'", "effects": [{"tell": "'n is ' + string(vars.n)"}]}
    ]);
    config["phases"] = json!([
        {"name": "main", "announce": false, "ends": {"as_soon_as": "vars.n >= 2"}, "max_rounds": 10,
         "on_exit": [{"reveal": "'Two posts.'"}], "next": [{"goto": "after"}]},
        {"name": "after", "announce": false, "order": "continue", "ends": {"rounds": 1}, "next": [{"end": "done"}]}
    ]);
    let mut sim = build(&doc, 0).unwrap();
    assert!(sim.world.pending.iter().all(|e| !e.data.to_string().contains("Phase")));
    let events = act(&mut sim, "A", "<Action name=\"post\"><text>hi</text></Action>");
    let end = events.iter().find(|e| e.kind.as_str() == "action_end").unwrap();
    assert_eq!(end.data["result"], json!({"message": "hi"}));
    assert_eq!(end.data["summary"], "A: hi");
    assert_eq!(end.data["pass_control"], false, "the turn goes on");
    let lines = said(&events);
    assert!(lines.contains(&"[18:00] [Message] A: hi".to_string()), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains("Action:") && !l.contains("Status:")), "{lines:?}");
    let events = act(&mut sim, "B", "<Action name=\"peek\" />");
    let end = events.iter().find(|e| e.kind.as_str() == "action_end").unwrap();
    assert_eq!(end.data["summary"], "B peeked");
    assert_eq!(end.data["result"], json!({}));
    assert_eq!(said(&events), ["n is 1"], "told to B alone, without a time");
    // The second post ends the phase within the action: the reveal follows the message, and
    // the next phase's pass starts after A.
    let events = act(&mut sim, "A", "<Action name=\"post\"><text>again</text></Action>");
    let end = events.iter().find(|e| e.kind.as_str() == "action_end").unwrap();
    assert_eq!(end.data["pass_control"], true, "a phase change ends the turn");
    let lines = said(&events);
    let post = lines.iter().position(|l| l.ends_with("[Message] A: again")).unwrap();
    let reveal = lines.iter().position(|l| l.ends_with("Public Event: Two posts.")).unwrap();
    assert!(post < reveal, "{lines:?}");
    let c = custom(&sim);
    assert_eq!(c.state.phase, "after");
    assert_eq!(c.state.queue, ["B", "A"]);
}

/// What the agents read in `events`: every line given to any of them.
fn said(events: &[crate::engine::Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind.as_str() == "agent_ctx_delta" && e.data["role"] == "user")
        .map(|e| e.data["content"].as_str().unwrap_or("").to_string())
        .collect()
}
