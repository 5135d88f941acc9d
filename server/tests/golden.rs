//! Golden logs: with the mock LLM, `simple_chat` and `council` run for 10 turns must reproduce the
//! committed event logs (type, order, text) exactly; so must the custom ultimatum game played to its
//! end by the scripted player (a custom scene's prompts, parameters, effects and outcome). The committed files were produced by this
//! engine and cross-checked event by event against a run of upstream SocialSim4 (commit 77540b6)
//! with its mock dialect; see README "Parity with upstream" for the listed differences.
//!
//! Regenerate after an intended change with `UPDATE_GOLDEN=1 cargo test -p simtree-server --test golden`.

use std::path::PathBuf;

use simtree::embedded::assets_dir;
use simtree::engine::Event;
use simtree::llm::chat::Message;
use simtree::llm::{BoxFuture, LlmClient, LlmError, LlmState, MockClient};
use simtree::scenario::Scenario;

/// The scripted player as a client.
struct Scripted;

impl LlmClient for Scripted {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let reply = simtree::engine::scripted::reply(messages, state);
        Box::pin(async move { Ok(reply) })
    }
}

fn log_of(scenario: &str, turns: u64, seed: Option<u64>) -> Vec<String> {
    log_with(scenario, turns, seed, &MockClient)
}

fn log_with(scenario: &str, turns: u64, seed: Option<u64>, llm: &dyn LlmClient) -> Vec<String> {
    let path = assets_dir().expect("assets").join(format!("scenarios/{scenario}.json"));
    let scenario = Scenario::load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = scenario.build(seed).unwrap_or_else(|e| panic!("{e}"));
    let mut events: Vec<Event> = Vec::new();
    sim.flush_pending(&mut events);
    let (report, more) = sim.run_blocking(turns, llm);
    report.unwrap_or_else(|e| panic!("{e}"));
    events.extend(more);
    events.iter().map(|e| serde_json::to_string(e).unwrap()).collect()
}

fn check_golden(scenario: &str) {
    check_golden_with(scenario, &MockClient, "10turns");
}

fn check_golden_with(scenario: &str, llm: &dyn LlmClient, suffix: &str) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{scenario}_{suffix}.jsonl"));
    let actual = log_with(scenario, 10, None, llm);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&file, actual.join("\n") + "\n").unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let expected: Vec<&str> = expected.lines().collect();
    for (i, (want, got)) in expected.iter().zip(&actual).enumerate() {
        assert_eq!(
            want,
            got,
            "{scenario}: event #{i} differs from {}\n  expected: {want}\n  actual:   {got}",
            file.display()
        );
    }
    assert_eq!(expected.len(), actual.len(), "{scenario}: number of events differs");
}

#[test]
fn simple_chat_matches_the_golden_log() {
    check_golden("simple_chat");
}

#[test]
fn council_matches_the_golden_log() {
    check_golden("council");
}

#[test]
fn the_custom_ultimatum_game_matches_the_golden_log() {
    check_golden_with("custom_ultimatum", &Scripted, "scripted");
    // The log holds a whole game: an offer, an answer and the outcome.
    let log = log_with("custom_ultimatum", 10, None, &Scripted).join("\n");
    assert!(log.contains("Outcome: the scene ends: "), "{log}");
}

#[test]
fn simple_chat_turn_shape_is_upstreams() {
    // 3 initial broadcasts, then 45 events per turn: per step process_start, ctx(assistant),
    // process_end, action_start, 3 ctx(user), action_end, system_broadcast; 5 steps per turn.
    let log = log_of("simple_chat", 2, None);
    assert_eq!(log.len(), 3 + 2 * 45);
    assert!(log[3 + 44].contains("[5] Hello from Host."));
    assert!(log[3 + 45 + 4].contains("[18:03] [Message] Alice: [1] Hello from Alice."));
}

#[test]
fn same_scenario_and_seed_give_byte_identical_logs() {
    for entry in std::fs::read_dir(assets_dir().expect("assets").join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let id = path.file_stem().unwrap().to_string_lossy().into_owned();
        let a = log_of(&id, 25, Some(7));
        let b = log_of(&id, 25, Some(7));
        assert!(!a.is_empty());
        assert_eq!(a, b, "{id}: two runs with seed 7 differ");
    }
}

/// `custom_simple_chat` and `custom_council` are simple_chat and council written as custom scenes
/// (docs/scenarios.md, "The shipped scenes as documents"). Under the mock, with the same seed and
/// the same number of turns, each logs exactly what its Rust scene logs: every event, byte for
/// byte.
#[test]
fn the_custom_twins_log_what_the_rust_scenes_log_under_the_mock() {
    for (rust, custom) in [("simple_chat", "custom_simple_chat"), ("council", "custom_council")] {
        for seed in [None, Some(7)] {
            let want = log_of(rust, 40, seed);
            let got = log_of(custom, 40, seed);
            assert_same(&format!("{custom} (seed {seed:?})"), want, got, &[]);
        }
    }
}

/// What still differs between a Rust scene's log and its custom twin's, each with why: a
/// normalisation applied to both logs' events (it says whether it changed the event). The
/// comparisons below use every one they are given and find nothing else.
type Difference = (&'static str, fn(&mut serde_json::Value) -> bool);

/// A custom action records `{}` as its result (`{"message"}` for one that says something in the
/// `chat` style); the Rust council records typed results (`{"title"}` for `start_voting`,
/// `{"vote", "comment"}` for `vote`), a closed set of shapes a document cannot extend.
const RESULTS: Difference = ("the results of start_voting and vote", |e| {
    let action = e["data"]["action"]["action"].as_str().unwrap_or("");
    if e["type"] != "action_end" || !matches!(action, "start_voting" | "vote") {
        return false;
    }
    e["data"]["result"] = serde_json::Value::Null;
    true
});

/// Compares two logs event by event after `differences`, each of which must be needed.
fn assert_same(what: &str, want: Vec<String>, got: Vec<String>, differences: &[Difference]) {
    let mut used = vec![false; differences.len()];
    let mut normal = |log: Vec<String>| -> Vec<String> {
        log.iter()
            .map(|line| {
                let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
                for (k, (_, normalise)) in differences.iter().enumerate() {
                    used[k] |= normalise(&mut e);
                }
                if differences.is_empty() { line.clone() } else { e.to_string() }
            })
            .collect()
    };
    let (want, got) = (normal(want), normal(got));
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w, g, "{what}: event #{i} differs from the Rust scene's");
    }
    assert_eq!(want.len(), got.len(), "{what}: number of events");
    for ((why, _), used) in differences.iter().zip(used) {
        assert!(used, "{what}: the listed difference '{why}' no longer occurs");
    }
}

/// A council sitting off the mock's path: the Host opens a vote on "Pilot" at once, every member
/// votes at its next turn (one with a comment, one abstaining), and the Host closes the session
/// once the vote has concluded; anyone else, or at any other time, yields.
struct Sitting;

impl LlmClient for Sitting {
    fn chat<'a>(&'a self, messages: &'a [Message], _: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let system = messages.first().map(|m| m.content.to_string()).unwrap_or_default();
        let name = system
            .lines()
            .find_map(|l| l.strip_prefix("You are "))
            .and_then(|l| l.strip_suffix('.'))
            .unwrap_or("")
            .to_string();
        let heard = |text: &str| messages.iter().skip(1).any(|m| m.content.contains(text));
        let action = if name == "Host" {
            if heard("has concluded") {
                "<Action name=\"finish_meeting\" />".to_string()
            } else if !heard("initiated the voting round") {
                "<Action name=\"start_voting\"><title>Pilot</title></Action>".to_string()
            } else {
                "<Action name=\"yield\" />".to_string()
            }
        } else if heard("initiated the voting round") && !heard(&format!("{name}: I vote")) {
            let (vote, comment) = match name.as_str() {
                "Rep. Zhang Rui" => ("no", "Too costly for shops."),
                "Rep. Wang Mei" => ("abstain", ""),
                _ => ("yes", ""),
            };
            format!("<Action name=\"vote\"><vote>{vote}</vote><comment>{comment}</comment></Action>")
        } else {
            "<Action name=\"yield\" />".to_string()
        };
        let reply = format!("--- Thoughts ---\nx\n\n--- Plan ---\n1. y\n\n--- Action ---\n{action}\n");
        Box::pin(async move { Ok(reply) })
    }
}

/// Off the mock's path too, a whole sitting (a vote opened, cast, concluded and the session
/// closed) logs the same in the custom council as in the Rust one, but for [`RESULTS`].
#[test]
fn a_sitting_of_the_custom_council_logs_what_the_rust_council_logs() {
    let want = log_with("council", 30, None, &Sitting);
    let got = log_with("custom_council", 30, None, &Sitting);
    let log = got.join("\n");
    for line in [
        "[Message] Rep. Zhang Rui: I vote no on 'Pilot'. Comment: Too costly for shops.",
        "Public Event: Voting on 'Pilot' has concluded. It passed with 3 yes, 1 no, and 1 abstain.",
        "Public Event: The council session is adjourned.",
    ] {
        assert!(log.contains(line), "{line}");
    }
    assert_same("custom_council's sitting", want, got, &[RESULTS]);
}
