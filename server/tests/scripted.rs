//! The `scripted` dialect plays the built-in games to their end: werewolf until a side wins,
//! landlord until someone goes out, council until the vote concludes and the Host adjourns —
//! within 600 turns, for five seeds each, without a single refused action or unusable response,
//! and the same seed always gives the same log.

use serde_json::Value;
use simtree::backend::OfflineClient;
use simtree::embedded::assets_dir;
use simtree::engine::{Event, EventType};
use simtree::llm::Offline;
use simtree::scenario::ScenarioLibrary;

const TURNS: u64 = 600;
const SEEDS: [u64; 5] = [1, 2, 3, 4, 5];

/// Runs `scenario` with the scripted player; returns the final scene state, the turns taken and
/// the log as JSON lines.
fn play(scenario: &str, seed: u64) -> (Value, u64, Vec<String>) {
    let library = ScenarioLibrary::load_assets(&assets_dir().expect("assets")).expect("assets load");
    let mut sim = library.get(scenario).unwrap().build(Some(seed)).unwrap();
    let (report, events) = sim.run_blocking(TURNS, &OfflineClient(Offline::Scripted));
    let report = report.unwrap_or_else(|e| panic!("{scenario} seed {seed}: the run failed: {e}"));
    assert!(
        report.complete,
        "{scenario} seed {seed}: not finished after {} turns; state {}",
        report.turns,
        sim.scene().state_json()
    );
    check_legal(scenario, seed, &events);
    let log = events.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    (sim.scene().state_json(), report.turns, log)
}

/// No action was refused and every response parsed.
fn check_legal(scenario: &str, seed: u64, events: &[Event]) {
    for e in events {
        assert_ne!(e.kind, EventType::AgentError, "{scenario} seed {seed}: {}", e.data);
        if e.kind == EventType::ActionEnd {
            assert_eq!(e.data["success"], Value::Bool(true), "{scenario} seed {seed}: a refused action: {}", e.data);
        }
    }
}

#[test]
fn werewolf_ends_with_a_winner_for_every_seed() {
    let mut winners = Vec::new();
    for seed in SEEDS {
        let (state, _, _) = play("werewolf", seed);
        assert_eq!(state["complete"], true);
        let winner = state["winner"].as_str().unwrap_or_default().to_string();
        assert!(["villagers", "werewolves"].contains(&winner.as_str()), "seed {seed}: {winner}");
        winners.push(winner);
    }
    eprintln!("werewolf winners by seed: {winners:?}");
}

#[test]
fn landlord_ends_when_a_player_goes_out_for_every_seed() {
    for seed in SEEDS {
        let (state, turns, log) = play("landlord", seed);
        assert_eq!(state["phase"], "complete", "seed {seed}");
        assert!(state["winner_team"].is_string(), "seed {seed}: {}", state["winner_team"]);
        let hands = state["hands"].as_object().unwrap();
        let empty = hands.values().filter(|h| h.as_object().is_some_and(|m| m.is_empty())).count();
        assert_eq!(empty, 1, "seed {seed}: exactly the winner has no cards left");
        assert!(log.iter().any(|l| l.contains("played: ")), "cards were played");
        eprintln!("landlord seed {seed}: {turns} turns, winner {}", state["winner_team"]);
    }
}

#[test]
fn council_concludes_its_vote_and_adjourns_for_every_seed() {
    for seed in SEEDS {
        let (state, _, log) = play("council", seed);
        assert_eq!(state["complete"], true, "seed {seed}");
        let votes = state["past_votes"].as_array().unwrap();
        assert_eq!(votes.len(), 1, "seed {seed}: one concluded round");
        let v = &votes[0];
        let cast = v["yes"].as_u64().unwrap() + v["no"].as_u64().unwrap() + v["abstain"].as_u64().unwrap();
        assert_eq!(cast, 5, "every member voted");
        assert!(log.iter().any(|l| l.contains("has concluded")));
    }
}

#[test]
fn the_same_seed_gives_the_same_log_and_seeds_differ() {
    for scenario in ["werewolf", "landlord", "council"] {
        let (_, _, a) = play(scenario, 3);
        let (_, _, b) = play(scenario, 3);
        assert_eq!(a, b, "{scenario}: two runs of seed 3 differ");
        let (_, _, c) = play(scenario, 4);
        assert_ne!(a, c, "{scenario}: seeds 3 and 4 play the same game");
    }
}

#[test]
fn village_and_chat_run_without_refusals() {
    let library = ScenarioLibrary::load_assets(&assets_dir().expect("assets")).unwrap();
    for scenario in ["village", "simple_chat"] {
        let mut sim = library.get(scenario).unwrap().build(Some(1)).unwrap();
        let (report, events) = sim.run_blocking(40, &OfflineClient(Offline::Scripted));
        report.unwrap();
        check_legal(scenario, 1, &events);
        let acted = events.iter().filter(|e| e.kind == EventType::ActionEnd).count();
        assert!(acted > 20, "{scenario}: only {acted} actions in 40 turns");
    }
}
