//! Prompts laid out for providers' prompt caches, for every shipped scene (and each as a custom
//! scene, a user's document with prose of its own): an agent's prompt on one turn starts with its
//! prompt on the turn before up to that prompt's last message (which memory may still extend),
//! and the first prompts of two children forked from one node are byte-identical up to the fork. A provider then serves all but the new part from its cache,
//! and `llm::cache` finds those prefixes (checked here too: every later prompt of an agent gets
//! the breakpoint its previous prompt fixed).
//!
//! One exception is known and held here as it is: an agent's plan lives in its system prompt, so
//! a turn whose reply updates the plan changes the system prompt, and the next prompt repeats
//! only the memory after it (`plan_updates_change_only_the_system_prompt`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use simtree::backend::OfflineClient;
use simtree::embedded::assets_dir;
use simtree::engine::memory::Message;
use simtree::engine::simulator::Simulator;
use simtree::llm::cache;
use simtree::llm::{BoxFuture, LlmClient, LlmError, LlmState, Offline};
use simtree::scenario::{ScenarioLibrary, UserScenario};
use simtree::sim::Sim;

/// One call as the engine made it: the agent whose turn it was, its prompt, the prefixes
/// `llm::cache` found repeated.
type Call = (String, Vec<Message>, Vec<usize>);

/// An offline player that keeps every prompt; with `plans`, each reply also updates the plan.
struct Capture {
    player: OfflineClient,
    plans: bool,
    calls: Mutex<Vec<Call>>,
}

impl Capture {
    fn new(player: Offline, plans: bool) -> Capture {
        Capture { player: OfflineClient(player), plans, calls: Mutex::default() }
    }

    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

impl LlmClient for Capture {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let hints = cache::plan(messages, state);
            let agent = state.speaker.clone().expect("the engine names the agent of every call");
            let reply = self.player.chat(messages, state).await?;
            let n = {
                let mut calls = self.calls.lock().unwrap();
                calls.push((agent, messages.to_vec(), hints.prefixes));
                calls.len()
            };
            Ok(if self.plans {
                reply.replace(
                    "--- Plan Update ---\nno change",
                    &format!("--- Plan Update ---\n<Goals>\n1. Goal of call {n} [CURRENT]\n</Goals>"),
                )
            } else {
                reply
            })
        })
    }
}

fn scenes() -> (ScenarioLibrary, Vec<String>) {
    let library = ScenarioLibrary::load_assets(&assets_dir().expect("assets")).expect("assets load");
    let mut names: Vec<String> = std::fs::read_dir(assets_dir().unwrap().join("scenarios"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            (p.extension()? == "json").then_some(stem)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    (library, names)
}

/// Messages two prompts share from the start.
fn common(a: &[Message], b: &[Message]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Each agent's calls in order.
fn by_agent(calls: &[Call]) -> BTreeMap<&str, Vec<&Call>> {
    let mut out: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls {
        out.entry(c.0.as_str()).or_default().push(c);
    }
    out
}

/// For each agent, every prompt starts with the one before up to its last message, from message
/// `from` on, and (`from` 0) `llm::cache` found that prefix. Returns the pairs checked.
fn check_turns(scene: &str, calls: &[Call], from: usize) -> usize {
    let mut pairs = 0;
    for (agent, calls) in by_agent(calls) {
        for w in calls.windows(2) {
            let (before, now) = (&w[0].1, &w[1].1);
            let fixed = before.len() - 1;
            assert!(
                common(&before[from..], &now[from..]) >= fixed - from,
                "{scene}: {agent}'s prompt of {} messages does not start with its previous one's first \
                 {fixed}; they part at message {}",
                now.len(),
                from + common(&before[from..], &now[from..])
            );
            if from == 0 {
                assert!(w[1].2.contains(&fixed), "{scene}: {agent}: cache hints {:?}, want {fixed}", w[1].2);
            }
            pairs += 1;
        }
    }
    pairs
}

/// Each shipped scenario as a user's document with prose of its own (`scene.prose`): a scene
/// whose words are the user's.
fn custom(name: &str) -> Simulator {
    let path = assets_dir().unwrap().join(format!("scenarios/{name}.json"));
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["scene"]["prose"] = serde_json::json!({
        "description": "A hall of our own, where everyone is heard.",
        "rules": "Speak briefly. Listen to the others."
    });
    match UserScenario::from_document(&format!("own-{name}"), &doc).unwrap() {
        UserScenario::Social(s) => s.build(Some(3)).unwrap(),
        _ => unreachable!("{name} is a social scenario"),
    }
}

#[test]
fn every_turn_of_an_agent_extends_its_previous_prompt() {
    let (library, names) = scenes();
    for player in [Offline::Mock, Offline::Scripted] {
        for name in &names {
            for (what, mut sim) in
                [("shipped", library.get(name).unwrap().build(Some(3)).unwrap()), ("custom", custom(name))]
            {
                let client = Capture::new(player, false);
                let (report, _) = sim.run_blocking(30, &client);
                report.unwrap_or_else(|e| panic!("{name} ({what}): {e}"));
                let calls = client.take();
                if what == "custom" {
                    assert!(calls[0].1[0].content.contains("A hall of our own"), "{name}: the document's prose");
                }
                let pairs = check_turns(name, &calls, 0);
                // A game over before anyone spoke twice (the ultimatum: one offer, one answer)
                // has nothing to compare.
                if pairs == 0 && sim.is_complete() {
                    continue;
                }
                assert!(pairs > 0, "{name} ({what}, {player:?}): no agent spoke twice in {} calls", calls.len());
            }
        }
    }
}

#[test]
fn siblings_first_prompts_are_identical_up_to_the_fork() {
    let (library, names) = scenes();
    for name in &names {
        let mut parent = library.get(name).unwrap().build(Some(5)).unwrap();
        let client = Capture::new(Offline::Scripted, false);
        parent.run_blocking(12, &client).0.unwrap();
        let before = client.take();
        if parent.is_complete() {
            continue; // nothing runs after the fork (the ultimatum ends in two calls)
        }
        let last: BTreeMap<&str, &Call> =
            by_agent(&before).into_iter().map(|(a, cs)| (a, *cs.last().unwrap())).collect();
        // Two children with seeds of their own, as a fan-out makes them.
        let firsts: Vec<BTreeMap<String, Vec<Message>>> = (0..2)
            .map(|i| {
                let mut child = Sim::Social(parent.fork());
                child.set_affinity(17);
                child.replicate(i);
                let Sim::Social(mut child) = child else { unreachable!() };
                child.run_blocking(12, &client).0.unwrap();
                let mut first = BTreeMap::new();
                for (agent, messages, _) in client.take() {
                    first.entry(agent).or_insert(messages);
                }
                first
            })
            .collect();
        let mut compared = 0;
        for (agent, a) in &firsts[0] {
            let (Some(b), Some(at_fork)) = (firsts[1].get(agent), last.get(agent.as_str())) else {
                continue;
            };
            let fork = at_fork.1.len() - 1;
            assert!(
                common(a, b) >= fork && common(a, &at_fork.1) >= fork,
                "{name}: {agent}'s first prompts in two children part at message {}, before the fork's {fork}",
                common(a, b)
            );
            compared += 1;
        }
        assert!(compared > 0, "{name}: no agent spoke before and after the fork in both children");
    }
}

#[test]
fn plan_updates_change_only_the_system_prompt() {
    let (library, names) = scenes();
    let mut changed = 0;
    for name in &names {
        let mut sim = library.get(name).unwrap().build(Some(3)).unwrap();
        let client = Capture::new(Offline::Scripted, true);
        sim.run_blocking(30, &client).0.unwrap();
        let calls = client.take();
        // The memory after the system prompt still extends turn by turn ...
        check_turns(name, &calls, 1);
        // ... while the system prompt, which holds the plan, changes with it.
        for cs in by_agent(&calls).values() {
            changed += cs.windows(2).filter(|w| w[0].1[0] != w[1].1[0]).count();
        }
    }
    assert!(changed > 0, "no plan update reached a system prompt");
}

/// A tree created with `prompt_layout: state_last` has every agent's emotion and plan in the last
/// message of its prompts: the plan updates of the test above then leave the system prompt as
/// it was, and every prompt of an agent starts with its previous one up to its last message,
/// system prompt included (the cache hints find it too).
#[test]
fn with_the_state_last_plan_updates_keep_the_whole_prefix() {
    let (library, names) = scenes();
    let mut pairs = 0;
    for name in &names {
        let mut sim = library.get(name).unwrap().build(Some(3)).unwrap();
        sim.set_state_last();
        let client = Capture::new(Offline::Scripted, true);
        sim.run_blocking(30, &client).0.unwrap();
        let calls = client.take();
        pairs += check_turns(name, &calls, 0);
        for (agent, cs) in by_agent(&calls) {
            assert!(cs.windows(2).all(|w| w[0].1[0] == w[1].1[0]), "{name}: {agent}'s system prompt changed");
            let last = &cs.last().unwrap().1;
            assert!(
                last.last().unwrap().content.contains("[Your state now]"),
                "{name}: {agent}'s state is in the last message"
            );
        }
    }
    assert!(pairs > 0);
}
