use serde_json::json;

use super::*;
use crate::engine::event::{Event, EventType};
use crate::engine::ordering::Ordering;
use crate::engine::parse::ActionCall;
use crate::engine::scenes::testing::{passed, summaries};
use crate::engine::scenes::{Refused, Scene, SceneKind, check_refusal, check_refusals};
use crate::engine::simulator::{BuildError, SimOptions, Simulator};
use crate::llm::MockClient;
use crate::scenario::Scenario;

const NAMES: [&str; 4] = ["Alice", "Bob", "Carol", "Dave"];

fn build(names: &[&str], decks: u8, seed: u64) -> Result<Simulator, BuildError> {
    let agents = names.iter().map(|n| Agent::new(*n, vec![ActionKind::Yield])).collect();
    let config = Config { num_decks: decks };
    let scene = Scene::Landlord(Landlord::new("landlord".into(), "New game".into(), config)?);
    let opts = SimOptions { seed, max_steps_per_turn: 3, ..Default::default() };
    Simulator::build(agents, scene, Ordering::Controlled, opts)
}

/// A freshly dealt table (bidding, call stage) with empty output buffers.
fn table(decks: u8, seed: u64) -> (Landlord, World) {
    let sim = build(&NAMES, decks, seed).unwrap();
    let Scene::Landlord(scene) = sim.scene else { panic!("not a landlord scene") };
    let mut world = sim.world;
    world.take_out();
    world.pending.clear();
    (scene, world)
}

fn act_with(l: &mut Landlord, w: &mut World, who: &str, call: ActionCall) -> Outcome {
    crate::engine::scenes::act_as(l, w, who, &call).unwrap()
}

fn act(l: &mut Landlord, w: &mut World, who: &str, action: &str) -> Outcome {
    act_with(l, w, who, ActionCall::new(action))
}

fn play(l: &mut Landlord, w: &mut World, who: &str, cards: &str) -> Outcome {
    act_with(l, w, who, ActionCall::new("play_cards").with("cards", cards))
}

/// Drains the output buffer: every event, in order.
fn drain(w: &mut World) -> Vec<Event> {
    w.take_out()
}

/// The feedback lines `who` received among `events`.
fn heard(events: &[Event], who: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind == EventType::AgentCtxDelta && e.data["agent"] == who)
        .map(|e| e.data["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Each row `(cards, error, told, tried)`: Bob plays `cards`, which the table refuses with
/// `error`, telling him `told`; the summary names the cards as `tried` and Bob's hand as
/// `remaining` ([`check_refusal`]).
fn bob_cannot_play(l: &mut Landlord, w: &mut World, remaining: &str, rows: &[(&str, &str, &str, &str)]) {
    for &(cards, error, told, tried) in rows {
        let summary = format!("Bob tried: {tried} -> {error} | remaining: {remaining}");
        let call = ActionCall::new("play_cards").with("cards", cards);
        check_refusal(l, w, "Bob", &call, Refused::error(error, &summary, told));
    }
}

fn cards(spec: &str) -> Vec<Rank> {
    spec.split_whitespace().map(|t| Rank::parse(t).unwrap()).collect()
}

fn hand(spec: &str) -> Hand {
    count_ranks(&cards(spec))
}

/// Puts the table straight into the playing phase with the given landlord and hands.
fn playing(l: &mut Landlord, landlord: &str, hands: [&str; 4]) {
    let s = &mut l.state;
    s.phase = Phase::Playing;
    s.landlord = Some(landlord.into());
    s.farmers = NAMES.iter().filter(|n| **n != landlord).map(|n| n.to_string()).collect();
    s.hands = NAMES.iter().zip(hands).map(|(n, h)| (n.to_string(), hand(h))).collect();
    s.current_turn = NAMES.iter().position(|n| *n == landlord).unwrap();
    s.leading_combo = None;
    s.passes_since_play = 0;
    s.played_flags = NAMES.iter().map(|n| (n.to_string(), false)).collect();
}

fn combo(kind: ComboType, key: &str, len: u32) -> Combo {
    Combo { kind, key: Rank::parse(key).unwrap(), len, m: None, pair_top: None }
}

#[test]
fn deals_thirteen_or_twentyfive_cards_and_keeps_every_card_of_the_deck() {
    for (decks, per, bottom) in [(1u8, 13u32, 2usize), (2, 25, 8)] {
        let (l, _) = table(decks, 11);
        assert_eq!(l.state.players, NAMES);
        assert_eq!(l.state.phase, Phase::Bidding);
        assert_eq!(l.state.bidding_stage, Stage::Call);
        for n in NAMES {
            assert_eq!(l.hand_size(n), u64::from(per), "{n} with {decks} deck(s)");
        }
        assert_eq!(l.state.bottom.len(), bottom);
        let mut all = Hand::new();
        for h in l.state.hands.values() {
            for (r, c) in h {
                *all.entry(*r).or_insert(0) += c;
            }
        }
        for r in &l.state.bottom {
            *all.entry(*r).or_insert(0) += 1;
        }
        for r in Rank::ALL {
            let expected = if matches!(r, Rank::SJ | Rank::BJ) { 1 } else { 4 } * u32::from(decks);
            assert_eq!(all.get(&r).copied(), Some(expected), "{r:?}");
        }
    }
}

#[test]
fn the_deal_is_determined_by_the_simulator_seed() {
    let (a, _) = table(1, 5);
    let (b, _) = table(1, 5);
    let (c, _) = table(1, 6);
    assert_eq!(a.state.hands, b.state.hands);
    assert_eq!(a.state.bottom, b.state.bottom);
    assert_ne!((a.state.hands, a.state.bottom), (c.state.hands, c.state.bottom));
}

#[test]
fn redeal_emits_the_deal_immediately_then_announces_it() {
    let (mut l, mut w) = table(1, 3);
    l.state.time = 1085;
    l.redeal(&mut w);
    let events = drain(&mut w);
    assert_eq!(events[0].kind, EventType::LandlordDeal);
    let players = events[0].data["players"].as_object().unwrap();
    assert_eq!(players.keys().collect::<Vec<_>>(), NAMES);
    for n in NAMES {
        let shown: Vec<&str> = players[n].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(shown.join(" "), l.hand_text(n), "tokens in rank order");
    }
    let bottom: Vec<&str> = l.state.bottom.iter().map(|r| r.token()).collect();
    assert_eq!(events[0].data["bottom"], json!(bottom));
    assert_eq!(heard(&events, "Alice"), ["[18:05] Public Event: New deal. Call the landlord begins."]);
    // The system_broadcast record is queued, not emitted.
    assert_eq!(w.pending.len(), 1);
    assert_eq!(w.pending[0].data["text"], "Public Event: New deal. Call the landlord begins.");
}

#[test]
fn config_accepts_one_or_two_decks_only() {
    let ok = |v: serde_json::Value| Scene::build(SceneKind::Landlord, "l".into(), "e".into(), v);
    let Scene::Landlord(l) = ok(serde_json::Value::Null).unwrap() else { panic!() };
    assert_eq!(l.config.num_decks, 1);
    let Scene::Landlord(l) = ok(json!({"num_decks": 2})).unwrap() else { panic!() };
    assert_eq!(l.config.num_decks, 2);
    let err = ok(json!({"num_decks": 3})).unwrap_err();
    assert_eq!(err.to_string(), "num_decks: num_decks must be 1 or 2, got 3");
    let err = ok(json!({"num_decks": "two"})).unwrap_err().to_string();
    assert!(err.starts_with("num_decks:"), "{err}");
    let err = ok(json!({"seed": 4})).unwrap_err().to_string();
    assert!(err.contains("unknown field `seed`"), "{err}");
    assert_eq!(Landlord::new("l".into(), "e".into(), Config { num_decks: 0 }).unwrap_err(), SceneError::Decks(0));
}

#[test]
fn pre_run_needs_exactly_four_agents() {
    let err = build(&["Alice", "Bob", "Carol"], 1, 1).unwrap_err();
    assert_eq!(err.to_string(), "the landlord scene needs exactly 4 agents, got 3");
    assert!(build(&["A", "B", "C", "D", "E"], 1, 1).is_err());
}

#[test]
fn passing_the_call_moves_round_the_table_and_a_silent_round_redeals() {
    let (mut l, mut w) = table(1, 9);
    let first = l.state.hands.clone();
    for (i, who) in ["Alice", "Bob", "Carol"].into_iter().enumerate() {
        assert_eq!(l.controlled_next(&w).as_deref(), Some(who));
        let out = act(&mut l, &mut w, who, "pass");
        assert_eq!(out, Outcome::ok(ActionResult::Passed { pass: true }, format!("{who} passed call"), true));
        assert_eq!(l.state.bid_turn_index, i + 1);
    }
    drain(&mut w);
    act(&mut l, &mut w, "Dave", "pass");
    let events = drain(&mut w);
    let deal = events.iter().position(|e| e.kind == EventType::LandlordDeal).unwrap();
    let dave = heard(&events, "Dave");
    assert_eq!(
        dave,
        [
            "[18:00] Public Event: No one called. Redealing.",
            "[18:00] Public Event: New deal. Call the landlord begins.",
            "[18:00] Public Event: Dave did not call."
        ]
    );
    // The deal sits between the redeal notice and the new-deal announcement.
    let notice = events.iter().position(|e| e.data["content"] == dave[0]).unwrap();
    let announce = events.iter().position(|e| e.data["content"] == dave[1]).unwrap();
    assert!(notice < deal && deal < announce);
    assert_eq!(l.state.bid_turn_index, 0);
    assert_eq!(l.state.phase, Phase::Bidding);
    assert_ne!(l.state.hands, first, "a fresh shuffle");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Alice"));
}

#[test]
fn call_opens_the_rob_stage_and_robs_double_until_the_landlord_is_seated() {
    let (mut l, mut w) = table(1, 4);
    let out = act(&mut l, &mut w, "Alice", "call_landlord");
    passed(&out, ActionResult::Called { called: "Alice".into() }, "Alice called landlord");
    assert_eq!(l.state.bidding_stage, Stage::Rob);
    assert_eq!(l.state.landlord_candidate.as_deref(), Some("Alice"));
    assert_eq!(l.state.rob_eligible, ["Bob", "Carol", "Dave"]);
    assert_eq!(l.state.bid_turn_index, 1);
    assert_eq!(heard(&drain(&mut w), "Bob"), ["[18:00] Public Event: Alice called the landlord."]);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));

    // Calling is over; the caller has no rob chance.
    #[rustfmt::skip]
    let rows = [
        ("Bob", "call_landlord", "wrong_stage", "You can only call during the call stage."),
        ("Alice", "rob_landlord", "not_eligible", "You are not eligible to rob."),
    ];
    check_refusals(&mut l, &mut w, &rows);
    let out = act(&mut l, &mut w, "Alice", "pass");
    assert_eq!(out, Outcome::fail(ActionResult::error("not_eligible"), "Alice pass failed"));

    let out = act(&mut l, &mut w, "Bob", "rob_landlord");
    passed(&out, ActionResult::Robbed { robbed: "Bob".into() }, "Bob robbed landlord");
    assert_eq!(l.state.score_multiplier, 2);
    assert_eq!(l.state.landlord_candidate.as_deref(), Some("Bob"));
    assert_eq!(heard(&drain(&mut w), "Carol"), ["[18:00] Public Event: Bob robbed the landlord. Multiplier x2."]);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
    #[rustfmt::skip]
    let rows = [
        ("Bob", "rob_landlord", "already_acted", "You already acted in rob stage."),
        ("Bob", "pass", "already_acted", "You already acted in rob stage."),
    ];
    check_refusals(&mut l, &mut w, &rows);

    let out = act(&mut l, &mut w, "Carol", "pass");
    passed(&out, ActionResult::Passed { pass: true }, "Carol passed rob");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));
    drain(&mut w);

    let bottom = l.state.bottom.clone();
    let before = l.state.hands["Dave"].clone();
    act(&mut l, &mut w, "Dave", "rob_landlord");
    assert_eq!(l.state.score_multiplier, 4);
    assert_eq!(l.state.landlord.as_deref(), Some("Dave"));
    assert_eq!(l.state.farmers, ["Alice", "Bob", "Carol"]);
    assert_eq!(l.state.phase, Phase::Doubling);
    assert_eq!(l.state.doubling_order, ["Alice", "Bob", "Carol", "Dave"]);
    assert_eq!(l.hand_size("Dave"), 15);
    for r in &bottom {
        let extra = bottom.iter().filter(|b| *b == r).count() as u32;
        assert_eq!(l.state.hands["Dave"].get(r).copied().unwrap_or(0), before.get(r).copied().unwrap_or(0) + extra);
    }
    let shown: Vec<&str> = bottom.iter().map(|r| r.token()).collect();
    assert_eq!(
        heard(&drain(&mut w), "Alice"),
        [
            "[18:00] Public Event: Dave robbed the landlord. Multiplier x2.".to_string(),
            format!("[18:00] Public Event: Landlord is Dave. Bottom cards: {}", shown.join(" ")),
        ]
    );
    #[rustfmt::skip]
    let rows = [
        ("Bob", "rob_landlord", "wrong_stage", "You can only rob during the rob stage."),
    ];
    check_refusals(&mut l, &mut w, &rows);
}

#[test]
fn the_rob_stage_skips_whoever_already_acted() {
    let (mut l, mut w) = table(1, 4);
    act(&mut l, &mut w, "Carol", "call_landlord");
    // bid_turn_index was 0 when Carol called out of turn: the search starts at seat 1.
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    act(&mut l, &mut w, "Bob", "pass");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));
    act(&mut l, &mut w, "Dave", "pass");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Alice"));
    act(&mut l, &mut w, "Alice", "pass");
    assert_eq!(l.state.landlord.as_deref(), Some("Carol"));
    assert_eq!(l.state.score_multiplier, 1);
    assert_eq!(l.state.doubling_order, ["Dave", "Alice", "Bob", "Carol"]);
}

#[test]
fn doubling_runs_farmers_first_then_starts_play_with_the_landlord() {
    let (mut l, mut w) = table(1, 4);
    #[rustfmt::skip]
    let rows = [
        ("Alice", "double", "wrong_phase", "You can only double during the doubling stage."),
        ("Alice", "no_double", "wrong_phase", "You can only act during the doubling stage."),
    ];
    check_refusals(&mut l, &mut w, &rows);

    act(&mut l, &mut w, "Bob", "call_landlord");
    for who in ["Carol", "Dave", "Alice"] {
        act(&mut l, &mut w, who, "pass");
    }
    assert_eq!(l.state.doubling_order, ["Carol", "Dave", "Alice", "Bob"]);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
    drain(&mut w);

    let out = act(&mut l, &mut w, "Carol", "double");
    passed(&out, ActionResult::Doubled { double: true }, "Carol doubled");
    assert_eq!(l.state.score_multiplier, 2);
    assert_eq!(heard(&drain(&mut w), "Bob"), ["[18:00] Public Event: Carol doubled. Multiplier x2."]);
    #[rustfmt::skip]
    let rows = [
        ("Carol", "double", "already_acted", "You already acted in doubling stage."),
        ("Carol", "no_double", "already_acted", "You already acted in doubling stage."),
    ];
    check_refusals(&mut l, &mut w, &rows);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));
    let out = act(&mut l, &mut w, "Dave", "no_double");
    passed(&out, ActionResult::Doubled { double: false }, "Dave declined doubling");
    assert_eq!(heard(&drain(&mut w), "Alice"), ["[18:00] Public Event: Dave declined to double."]);
    act(&mut l, &mut w, "Alice", "no_double");
    assert_eq!(l.state.phase, Phase::Doubling);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    act(&mut l, &mut w, "Bob", "double");
    assert_eq!(l.state.score_multiplier, 4);
    assert_eq!(l.state.phase, Phase::Playing);
    assert_eq!(l.state.current_turn, 1);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    assert_eq!(
        heard(&drain(&mut w), "Carol")[1..],
        ["[18:00] Public Event: Bob doubled. Multiplier x2.", "[18:00] Public Event: Doubling finished. Game starts."]
    );
}

#[test]
fn every_combination_type_and_illegal_plays() {
    let m = |kind, key: &str, len, m: Option<u32>, top: Option<&str>| Combo {
        kind,
        key: Rank::parse(key).unwrap(),
        len,
        m,
        pair_top: top.map(|t| Rank::parse(t).unwrap()),
    };
    use ComboType::*;
    let legal = [
        ("SJ BJ", m(Rocket, "BJ", 2, None, None)),
        ("BJ SJ", m(Rocket, "BJ", 2, None, None)),
        ("5 5 5 5", m(Bomb, "5", 4, None, None)),
        ("6 6 6 6 3 9", m(FourTwoSingles, "6", 6, None, None)),
        ("6 3 6 6 3 6", m(FourTwoSingles, "6", 6, None, None)),
        ("9 9 9 9 3 3 4 4", m(FourTwoPairs, "9", 8, None, None)),
        ("8 8 8", m(Triple, "8", 3, None, None)),
        ("8 K 8 8", m(TripleSingle, "8", 4, None, None)),
        ("8 8 8 K K", m(TriplePair, "8", 5, None, None)),
        ("2", m(Single, "2", 1, None, None)),
        ("BJ", m(Single, "BJ", 1, None, None)),
        ("Q Q", m(Pair, "Q", 2, None, None)),
        ("7 3 5 4 6", m(Straight, "7", 5, None, None)),
        ("10 J Q K A", m(Straight, "A", 5, None, None)),
        ("3 4 5 6 7 8 9 10 J Q K A", m(Straight, "A", 12, None, None)),
        ("3 3 4 4 5 5", m(DoubleSeq, "5", 6, None, None)),
        ("Q Q K K A A", m(DoubleSeq, "A", 6, None, None)),
        ("3 3 3 4 4 4", m(TripleSeq, "4", 6, Some(2), None)),
        ("Q Q Q K K K A A A", m(TripleSeq, "A", 9, Some(3), None)),
        ("3 3 3 4 4 4 9 J", m(AirplaneSingles, "4", 8, Some(2), None)),
        ("3 3 3 4 4 4 9 9", m(AirplaneSingles, "4", 8, Some(2), None)),
        ("3 3 3 4 4 4 9 9 J J", m(AirplanePairs, "4", 10, Some(2), Some("J"))),
    ];
    for (spec, expected) in legal {
        assert_eq!(evaluate(&cards(spec), false), Some(expected), "{spec}");
    }
    let illegal = [
        "",
        "3 4",
        "SJ SJ BJ",
        "7 7 7 7 7",
        "7 7 7 7 7 7 7 7",
        "9 9 9 9 3 3 3 4",
        "8 8 8 K Q",
        "3 4 5 6",
        "3 4 5 6 8",
        "J Q K A 2",
        "3 3 4 4",
        "K K A A 2 2",
        "A A A 2 2 2",
        "3 3 3 5 5 5",
        "3 3 3 4 4 4 9 9 J",
        "3 3 3 4 4 4 9 9 J Q",
    ];
    for spec in illegal {
        assert_eq!(evaluate(&cards(spec), false), None, "{spec}");
    }
    // Eight of a kind is a bomb only with two decks; a pair of small jokers needs two decks
    // to exist but is an ordinary pair.
    assert_eq!(evaluate(&cards("7 7 7 7 7 7 7 7"), true), Some(m(Bomb, "7", 8, None, None)));
    assert_eq!(evaluate(&cards("SJ SJ"), true), Some(m(Pair, "SJ", 2, None, None)));
    assert_eq!(evaluate(&cards("7 7 7 7 7 7"), true), None);
}

#[test]
fn beating_rules() {
    use ComboType::*;
    let rocket = combo(Rocket, "BJ", 2);
    let bomb3 = combo(Bomb, "3", 4);
    let bomb2 = combo(Bomb, "2", 4);
    let bomb8 = combo(Bomb, "3", 8);
    let straight = combo(Straight, "A", 5);
    assert!(can_beat(&rocket, &bomb8));
    assert!(can_beat(&rocket, &straight));
    assert!(!can_beat(&bomb8, &rocket));
    assert!(!can_beat(&combo(Single, "BJ", 1), &rocket));
    assert!(can_beat(&bomb3, &straight));
    assert!(can_beat(&bomb3, &combo(Single, "2", 1)));
    assert!(!can_beat(&straight, &bomb3));
    assert!(!can_beat(&combo(FourTwoSingles, "2", 6), &bomb3));
    assert!(can_beat(&bomb2, &bomb3), "same length: higher key");
    assert!(!can_beat(&bomb3, &bomb2));
    assert!(!can_beat(&bomb3, &bomb3.clone()));
    assert!(can_beat(&bomb8, &bomb2), "longer bomb wins");
    assert!(!can_beat(&bomb2, &bomb8));
    assert!(can_beat(&combo(Single, "4", 1), &combo(Single, "3", 1)));
    assert!(!can_beat(&combo(Single, "3", 1), &combo(Single, "3", 1)));
    assert!(!can_beat(&combo(Pair, "A", 2), &combo(Single, "3", 1)), "type must match");
    assert!(!can_beat(&combo(Straight, "A", 6), &combo(Straight, "7", 5)), "length must match");
    assert!(can_beat(&combo(Straight, "8", 5), &combo(Straight, "7", 5)));
    assert!(can_beat(&combo(AirplanePairs, "5", 10), &combo(AirplanePairs, "4", 10)));
}

#[test]
fn a_trick_ends_when_everyone_else_passes() {
    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["3 3 9 K", "4 8", "5 10", "6 8"]);
    #[rustfmt::skip]
    let rows = [
        ("Alice", "pass", "cannot_pass_lead", "You must lead; cannot pass."),
    ];
    check_refusals(&mut l, &mut w, &rows);

    play(&mut l, &mut w, "Alice", "3 3");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    let lead = l.state.leading_combo.clone().unwrap();
    assert_eq!((lead.combo.kind, lead.owner.as_str()), (ComboType::Pair, "Alice"));
    let out = act(&mut l, &mut w, "Bob", "pass");
    passed(&out, ActionResult::Passed { pass: true }, "Bob passed");
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
    act(&mut l, &mut w, "Carol", "pass");
    assert_eq!(l.state.passes_since_play, 2);
    drain(&mut w);
    act(&mut l, &mut w, "Dave", "pass");
    assert_eq!(
        heard(&drain(&mut w), "Bob"),
        ["[18:00] Public Event: Dave passed.", "[18:00] Public Event: Trick ends. Alice leads next."]
    );
    assert_eq!(l.state.leading_combo, None);
    assert_eq!(l.state.passes_since_play, 0);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Alice"));

    // A play resets the pass count; the next seat follows.
    play(&mut l, &mut w, "Alice", "9");
    act(&mut l, &mut w, "Bob", "pass");
    let out = play(&mut l, &mut w, "Carol", "5");
    assert_eq!(out.result_json(), json!({"error": "not_beating"}));
    let out = play(&mut l, &mut w, "Carol", "10");
    assert!(out.success);
    assert_eq!(l.state.passes_since_play, 0);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));

    l.state.phase = Phase::Doubling;
    let out = act(&mut l, &mut w, "Dave", "pass");
    assert_eq!(out, Outcome::fail(ActionResult::error("bad_phase"), "Dave pass failed"));
    assert_eq!(heard(&drain(&mut w), "Dave").last().unwrap(), "You cannot pass right now.");
}

#[test]
fn the_landlord_going_out_untouched_is_a_spring() {
    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["3 3", "4", "5", "6"]);
    l.state.score_multiplier = 2;
    let out = play(&mut l, &mut w, "Alice", "3 3");
    passed(
        &out,
        ActionResult::Played { played: vec!["3".into(), "3".into()], win: true },
        "Alice played: 3 3 (pair), remaining: (empty) [WIN]",
    );
    assert_eq!(
        heard(&drain(&mut w), "Dave"),
        [
            "[18:00] Public Event: Alice played: 3 3 (pair).",
            "[18:00] Public Event: Spring! Multiplier doubled.",
            "[18:00] Public Event: Game over. Winner: landlord (x4)."
        ]
    );
    assert_eq!(l.state.winner_team, Some(Team::Landlord));
    assert_eq!(l.state.phase, Phase::Complete);
    assert!(l.is_complete());
    assert_eq!(l.controlled_next(&w), None);

    // Once a farmer has played, it is a plain win.
    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["3", "4", "5", "6"]);
    l.state.played_flags.insert("Carol".into(), true);
    play(&mut l, &mut w, "Alice", "3");
    assert_eq!(l.state.score_multiplier, 1);
    assert_eq!(heard(&drain(&mut w), "Bob").last().unwrap(), "[18:00] Public Event: Game over. Winner: landlord (x1).");
}

#[test]
fn a_farmer_going_out_before_the_landlord_played_is_a_counter_spring() {
    // Upstream does not check whose turn it is, so a farmer can go out first.
    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["3", "4 4 4 4", "5", "6"]);
    let out = play(&mut l, &mut w, "Bob", "4 4 4 4");
    assert!(out.success);
    assert_eq!(
        heard(&drain(&mut w), "Alice"),
        [
            "[18:00] Public Event: Bob played: 4 4 4 4 (bomb).",
            "[18:00] Public Event: Counter-spring! Multiplier doubled.",
            "[18:00] Public Event: Game over. Winner: farmers (x4)."
        ]
    );
    assert_eq!(l.state.winner_team, Some(Team::Farmers));

    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["3 9", "4", "5", "6"]);
    play(&mut l, &mut w, "Alice", "3");
    play(&mut l, &mut w, "Bob", "4");
    assert_eq!(l.state.winner_team, Some(Team::Farmers));
    assert_eq!(l.state.score_multiplier, 1);
}

#[test]
fn play_cards_failures_report_code_and_remaining_hand_in_rank_order() {
    let (mut l, mut w) = table(1, 2);
    l.state.hands.insert("Bob".into(), hand("2 3 K 3 BJ 10"));
    let remaining = "3 3 10 K 2 BJ";
    #[rustfmt::skip]
    let cases = [
        ("3 3", "wrong_phase", "You can only play during the playing phase.", "3 3"),
        ("", "wrong_phase", "You can only play during the playing phase.", "(none)"),
    ];
    bob_cannot_play(&mut l, &mut w, remaining, &cases);

    let bob = "2 3 K 3 BJ 10";
    playing(&mut l, "Alice", ["9 9 J", bob, "5", "6"]);
    play(&mut l, &mut w, "Alice", "9 9");
    drain(&mut w);
    #[rustfmt::skip]
    let cases = [
        ("  ", "missing_cards", "Provide cards to play.", "(none)"),
        ("3 X3", "unknown_token", "Unknown card token: X3", "3 X3"),
        ("K K", "not_in_hand", "You don't have those cards.", "K K"),
        ("4", "not_in_hand", "You don't have those cards.", "4"),
        ("3 10", "invalid_combo", "Invalid combination.", "3 10"),
        ("3\t3", "not_beating", "Your play does not beat the current lead.", "3 3"),
        ("BJ", "not_beating", "Your play does not beat the current lead.", "BJ"),
    ];
    bob_cannot_play(&mut l, &mut w, remaining, &cases);
    // A missing <cards> field is the same as an empty one.
    let out = act(&mut l, &mut w, "Bob", "play_cards");
    assert_eq!(out.result_json(), json!({"error": "missing_cards"}));

    // Success: the broadcast repeats the cards as written, the summary lists what is left.
    l.state.current_turn = 1;
    l.state.leading_combo = None;
    drain(&mut w);
    let out = play(&mut l, &mut w, "Bob", "3  3");
    passed(
        &out,
        ActionResult::Played { played: vec!["3".into(), "3".into()], win: false },
        "Bob played: 3 3 (pair), remaining: 10 K 2 BJ",
    );
    assert_eq!(heard(&drain(&mut w), "Carol"), ["[18:00] Public Event: Bob played: 3  3 (pair)."]);
    assert_eq!(l.hand_text("Bob"), "10 K 2 BJ");
    assert!(l.state.played_flags["Bob"]);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
}

#[test]
fn bombs_and_rockets_double_the_multiplier() {
    let (mut l, mut w) = table(1, 2);
    playing(&mut l, "Alice", ["5 5 5 5 9", "SJ BJ 3", "6", "7"]);
    play(&mut l, &mut w, "Alice", "5 5 5 5");
    assert_eq!(l.state.score_multiplier, 2);
    play(&mut l, &mut w, "Bob", "SJ BJ");
    assert_eq!(l.state.score_multiplier, 4);
    assert_eq!(heard(&drain(&mut w), "Dave").last().unwrap(), "[18:00] Public Event: Bob played: SJ BJ (rocket).");
}

#[test]
fn one_message_per_turn_until_post_turn() {
    let (mut l, mut w) = table(1, 2);
    let msg = |text: &str| ActionCall::new("send_message").with("message", text);
    let out = act_with(&mut l, &mut w, "Alice", msg("hi"));
    assert_eq!(out, Outcome::ok(ActionResult::Message { message: "hi".into() }, "Alice: hi", false));
    assert_eq!(heard(&drain(&mut w), "Bob"), ["[18:00] [Message] Alice: hi"]);
    let out = act_with(&mut l, &mut w, "Alice", msg("again"));
    assert_eq!(out, Outcome::fail(ActionResult::error("message_already_sent"), "Alice extra chat blocked"));
    let events = drain(&mut w);
    assert_eq!(heard(&events, "Alice"), ["You have already sent a message this turn."]);
    assert!(heard(&events, "Bob").is_empty());

    // A failed post does not use up Bob's message.
    let out = act_with(&mut l, &mut w, "Bob", msg(""));
    assert!(!out.success);
    assert!(act_with(&mut l, &mut w, "Bob", msg("ok")).success);

    l.post_turn(0, &mut w);
    assert_eq!(l.state.time, 1081);
    assert!(!l.state.turn_msg_used["Alice"]);
    assert!(l.state.turn_msg_used["Bob"], "only the actor's flag is cleared");
    assert!(act_with(&mut l, &mut w, "Alice", msg("next turn")).success);
}

#[test]
fn status_prompt_shows_phase_multiplier_hand_and_counts() {
    let (mut l, _) = table(1, 2);
    playing(&mut l, "Alice", ["2 3 K 3 BJ 10", "", "5 5", "6"]);
    l.state.score_multiplier = 8;
    let agent = |n: &str| Agent::new(n, vec![]);
    assert_eq!(
        l.status_prompt(&agent("Alice")),
        "--- Status ---\nPhase: playing\nMultiplier: x8\nHand: 3 3 10 K 2 BJ\nHand counts: Alice=6 | Bob=0 | Carol=2 | Dave=1\n"
    );
    assert!(l.status_prompt(&agent("Bob")).contains("\nHand: (empty)\n"));
    let fresh = Landlord::new("l".into(), "e".into(), Config::default()).unwrap();
    assert_eq!(fresh.status_prompt(&agent("Alice")), "--- Status ---\nPhase: init\nMultiplier: x1\nHand: (empty)\n");
}

#[test]
fn controlled_next_in_each_phase() {
    let (mut l, w) = table(1, 2);
    l.state.bid_turn_index = 2;
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
    l.state.bid_turn_index = 9;
    assert_eq!(l.controlled_next(&w), None, "an out-of-range seat picks no one");

    l.state.bidding_stage = Stage::Rob;
    l.state.bid_turn_index = 3;
    l.state.rob_eligible = vec!["Alice".into(), "Bob".into(), "Dave".into()];
    l.state.rob_acted =
        [("Alice", false), ("Bob", false), ("Dave", true)].map(|(n, a)| (n.to_string(), a)).into_iter().collect();
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Alice"), "wraps past the acted seat");
    l.state.rob_acted.insert("Alice".into(), true);
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    l.state.rob_acted.insert("Bob".into(), true);
    assert_eq!(l.controlled_next(&w), None);

    l.state.phase = Phase::Doubling;
    l.state.doubling_order = vec!["Carol".into(), "Dave".into()];
    l.state.doubling_acted = [("Carol", true), ("Dave", false)].map(|(n, a)| (n.to_string(), a)).into_iter().collect();
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));

    l.state.phase = Phase::Playing;
    l.state.current_turn = 1;
    assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
    for phase in [Phase::Init, Phase::Complete] {
        l.state.phase = phase;
        assert_eq!(l.controlled_next(&w), None);
    }
}

#[test]
fn state_round_trips_through_json_and_patches() {
    let (mut l, mut w) = table(2, 2);
    act(&mut l, &mut w, "Alice", "call_landlord");
    playing(&mut l, "Alice", ["3 3 3 4 4 4 9 9 J J", "5", "6", "7"]);
    play(&mut l, &mut w, "Alice", "3 3 3 4 4 4 9 9 J J");
    let lead = serde_json::to_value(&l.state.leading_combo).unwrap();
    assert_eq!(
        lead,
        json!({"type": "airplane_pairs", "key": "4", "len": 10, "m": 2, "pair_top": "J", "owner": "Alice"})
    );
    let mut scene = Scene::Landlord(l.clone());
    let text = serde_json::to_string(&scene).unwrap();
    let back: Scene = serde_json::from_str(&text).unwrap();
    let Scene::Landlord(back) = back else { panic!() };
    assert_eq!(back.state, l.state);
    assert_eq!(back.config.num_decks, 2);
    assert_eq!(scene.state_json()["hands"]["Bob"], json!({"5": 1}));

    let patch = json!({"phase": "doubling", "score_multiplier": 16}).as_object().unwrap().clone();
    scene.patch_state(&patch).unwrap();
    assert_eq!(scene.state_json()["phase"], "doubling");
    let bad = json!({"phase": "lunch"}).as_object().unwrap().clone();
    assert!(scene.patch_state(&bad).is_err());
    let bad = json!({"hands": {"Bob": {"3": 9}}}).as_object().unwrap().clone();
    assert!(scene.patch_state(&bad).unwrap_err().to_string().contains("Bob holds 9 cards of rank 3"));
    let bad = json!({"hands": {"Bob": {"X": 1}}}).as_object().unwrap().clone();
    assert!(scene.patch_state(&bad).is_err());
}

#[test]
fn prompt_text_names_the_game_and_avoids_other_scenes_trigger_words() {
    for decks in [1, 2] {
        let l = Landlord::new("l".into(), "e".into(), Config { num_decks: decks }).unwrap();
        let text = l.text();
        let mut all = format!("{}\n{}", text.description, text.guidelines);
        for (_, spec) in ACTIONS {
            all.push_str(spec.desc);
            all.push_str(spec.instruction);
        }
        let low = all.to_lowercase();
        assert_eq!(crate::llm::mock::trigger_words_in(&low), ["dou dizhu", "landlord"]);
        assert!(!low.contains("you are"));
        let (per, bottom) = if decks == 1 { ("13 cards", "last 2") } else { ("25 cards", "last 8") };
        assert!(text.description.contains(per) && text.description.contains(bottom));
    }
}

#[test]
fn patched_nonsense_never_panics() {
    let (mut l, mut w) = table(1, 2);
    let mut scene = Scene::Landlord(l.clone());
    let patch = json!({
        "players": ["Alice", "Zed"],
        "bid_turn_index": usize::MAX,
        "current_turn": usize::MAX,
        "passes_since_play": u32::MAX,
        "score_multiplier": u64::MAX,
        "hands": {"Alice": {"3": 8, "4": 8}},
        "landlord_candidate": "Zed",
        "leading_combo": {"type": "single", "key": "3", "len": 1, "owner": "Nobody"}
    });
    scene.patch_state(patch.as_object().unwrap()).unwrap();
    let Scene::Landlord(patched) = scene else { panic!() };
    l = patched;
    let _ = l.controlled_next(&w);
    assert!(l.status_prompt(&Agent::new("Bob", vec![])).contains("Alice=16 | Zed=0"));
    for action in ["call_landlord", "pass", "rob_landlord", "pass", "double", "no_double"] {
        for who in NAMES {
            act(&mut l, &mut w, who, action);
        }
    }
    l.state.phase = Phase::Playing;
    l.state.current_turn = usize::MAX;
    act(&mut l, &mut w, "Bob", "pass");
    l.redeal(&mut w);
    assert_eq!(l.state.hands.len(), 2);
    assert_eq!(l.hand_size("Zed"), 13);
}

#[test]
fn the_scenario_file_builds_a_dealt_table() {
    let s = Scenario::shipped("landlord");
    assert_eq!((s.max_steps_per_turn, s.default_turns), (3, 200));
    let sim = s.build(Some(1)).unwrap();
    let Scene::Landlord(l) = &sim.scene else { panic!() };
    assert_eq!(l.config.num_decks, 2);
    assert_eq!(l.state.players, NAMES);
    for a in &sim.world.agents {
        assert_eq!(a.action_space[0], ActionKind::Yield);
        assert_eq!(a.action_space.len(), 8);
    }
    let texts: Vec<&str> = sim.world.pending.iter().map(|e| e.data["text"].as_str().unwrap()).collect();
    assert_eq!(
        texts,
        [
            "Public Event: New game: Dou Dizhu (4 players). Call/rob bidding, doubling stage, full combos.",
            "Public Event: New deal. Call the landlord begins.",
            "Public Event: Players: Alice, Bob, Carol, Dave"
        ]
    );
}

#[test]
fn a_sixty_turn_mock_run_bids_doubles_and_plays_without_panicking() {
    for decks in [2, 1] {
        let mut s = Scenario::shipped("landlord");
        s.scene.config = json!({"num_decks": decks});
        let mut sim = s.build(Some(42)).unwrap();
        let (report, events) = sim.run_blocking(60, &MockClient);
        let report = report.unwrap();
        assert!(!report.stuck);
        assert!(report.complete || report.turns == 60);
        let done = summaries(&events);
        // Alice calls; the others first try to call in the rob stage (now a plain failure),
        // then pass; everyone declines to double; Alice leads her lowest single.
        assert_eq!(
            done[..11],
            [
                "Alice called landlord",
                "Bob call_landlord failed",
                "Bob passed rob",
                "Carol call_landlord failed",
                "Carol passed rob",
                "Dave call_landlord failed",
                "Dave passed rob",
                "Bob declined doubling",
                "Carol declined doubling",
                "Dave declined doubling",
                "Alice declined doubling",
            ]
        );
        assert!(done[11].starts_with("Alice played: "), "{}", done[11]);
        let Scene::Landlord(l) = &sim.scene else { panic!() };
        assert_eq!(l.state.landlord.as_deref(), Some("Alice"));
        assert_eq!(l.state.time, 1080 + report.turns as i64);
        assert!(matches!(l.state.phase, Phase::Playing | Phase::Complete));
    }
}
