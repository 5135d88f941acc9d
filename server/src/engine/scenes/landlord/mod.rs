//! landlord (upstream `landlord_scene`): four-player Dou Dizhu with call/rob bidding, a doubling
//! stage, full combination rules and spring scoring (spec §1.10.4, actions §1.6.6).
//!
//! The table runs in phases: `bidding` (a `call` stage in seat order, then one `rob` chance for
//! each other player), `doubling` (farmers after the landlord in seat order, the landlord last),
//! `playing` (tricks led by the landlord) and `complete`. The scene drives the `controlled`
//! ordering through [`SceneRules::controlled_next`] and tells each agent its hand in a status
//! prompt at the start of every turn, which is also what the mock LLM reads.
//!
//! Differences from upstream, on purpose:
//! * The deck is shuffled with the simulator's seeded `world.rng`, so a deal is reproducible and a
//!   clone continues with the numbers the original would have drawn. Upstream's `seed` config
//!   (a private `random.Random`, not serialised) is therefore not accepted.
//! * `num_decks` must be exactly 1 or 2 in a scenario and in a stored scene (upstream coerces
//!   with `int(...)`).
//! * Upstream's failure paths that return a 3-tuple (an exception, no `action_end`) are normal
//!   failures here with the same feedback and an `error` code: calling outside the call stage,
//!   robbing outside the rob stage or twice, passing twice in the rob stage, passing as the leader.
//! * A rob-stage `rob_landlord` or `pass` by someone not in `rob_acted` (the caller, or a player
//!   patched out) is upstream's `KeyError`; here it fails with `You are not eligible to rob.`
//!   (`not_eligible`).
//! * An unknown card token in `play_cards` is upstream's `ValueError`; here it fails like the
//!   other play errors, with feedback `Unknown card token: {token}` and code `unknown_token`.
//!   Tokens are split on any whitespace (upstream splits on single spaces only, so a tab or a
//!   newline between tokens raised).
//! * Seats, hands and indices patched to odd values never panic: a missing hand is empty and an
//!   out-of-range seat picks no one.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use simtree_shared::LandlordDeal;

mod cards;
mod state;

pub use cards::{Combo, ComboType, Hand, Rank};
pub(crate) use cards::{can_beat, evaluate};
use cards::{count_ranks, hand_tokens};
use state::check_decks;
pub use state::{Config, Lead, Phase, Stage, State, Team};

use super::{SceneError, SceneRules};
use crate::engine::action::{ActionCtx, ActionKind, ActionResult, ActionSpec, Handled, Outcome};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::prompt::SceneText;
use crate::engine::scenes::handle_common;
use crate::engine::world::World;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Landlord {
    name: String,
    initial_event: String,
    /// Boxed: the state is several times larger than other scenes' and lives inside `Scene`.
    state: Box<State>,
    #[serde(default)]
    config: Config,
}

const DESCRIPTION_ONE_DECK: &str = "Four players sit down to Dou Dizhu (Landlord) with a single 54-card deck: the ranks 3 up to A, then 2, the small joker SJ and the big joker BJ. Suits do not matter, only ranks and how many of each you hold. Everyone receives 13 cards; the last 2 lie face down as bottom cards and go to the landlord once bidding is over.";

const DESCRIPTION_TWO_DECKS: &str = "Four players sit down to Dou Dizhu (Landlord) with two 54-card decks shuffled together (108 cards): the ranks 3 up to A, then 2, the small joker SJ and the big joker BJ. Suits do not matter, only ranks and how many of each you hold. Everyone receives 25 cards; the last 8 lie face down as bottom cards and go to the landlord once bidding is over.";

const RULES_BIDDING: &str = "Table rules:\n\
- Bidding: seats take turns to call the landlord, one chance each. After a call, each of the other three players gets exactly one chance to rob it; whoever called or robbed last takes the seat. Every rob doubles the multiplier. When nobody calls, the cards are dealt again.\n\
- Doubling: once the landlord is known, the farmers (in seat order after the landlord) and then the landlord each decide once whether to double the multiplier.\n\
- Play: the landlord leads the first trick. A player who leads must put down a legal combination and may not pass. To follow, beat the lead with the same combination type and the same number of cards and a higher rank. A bomb beats anything except a rocket or a bigger bomb; the rocket beats everything. When everyone else has passed, whoever played last leads again.\n\
- Ending: the first player to empty the hand ends the game. If that is the landlord, the landlord wins; otherwise the farmers win together.\n\
- Multiplier: it starts at x1 and doubles for each rob, each double, each bomb and each rocket, and once more for a spring (the landlord goes out before any farmer has played) or a counter-spring (a farmer goes out before the landlord has played).\n";

const COMBOS_ONE_DECK: &str = "- Combinations: single; pair; triple; triple with one card; triple with a pair; straight of 5 or more distinct consecutive ranks from 3 to A; three or more consecutive pairs; two or more consecutive triples, optionally carrying one extra card per triple or one extra pair per triple (never of the triples' ranks); four of a kind with two single cards or with two pairs; bomb (four of a kind); rocket (SJ with BJ). 2 and the jokers never appear in straights or sequences.\n";

const COMBOS_TWO_DECKS: &str = "- Combinations: single; pair; triple; triple with one card; triple with a pair; straight of 5 or more distinct consecutive ranks from 3 to A; three or more consecutive pairs; two or more consecutive triples, optionally carrying one extra card per triple or one extra pair per triple (never of the triples' ranks); four of a kind with two single cards or with two pairs; bomb (four or eight of a kind); rocket (SJ with BJ). Between two bombs the one with more cards wins, and with equal size the higher rank wins. 2 and the jokers never appear in straights or sequences.\n";

const RULES_FORMAT: &str = "- Writing cards: name ranks only, separated by spaces, using exactly these tokens: 3 4 5 6 7 8 9 10 J Q K A 2 SJ BJ.\n\
- Table talk: during your own turn you may post one message to the table with send_message.";

impl Landlord {
    pub(crate) fn new(name: String, initial_event: String, config: Config) -> Result<Self, SceneError> {
        check_decks(u64::from(config.num_decks))?;
        Ok(Landlord { name, initial_event, state: Box::default(), config })
    }

    fn two_decks(&self) -> bool {
        self.config.num_decks == 2
    }

    /// Cards per player and bottom cards for the configured deck count.
    fn deal_sizes(&self) -> (usize, usize) {
        if self.two_decks() { (25, 8) } else { (13, 2) }
    }

    fn seat(&self, name: &str) -> Option<usize> {
        self.state.players.iter().position(|p| p == name)
    }

    fn hand(&self, name: &str) -> Option<&Hand> {
        self.state.hands.get(name)
    }

    fn hand_size(&self, name: &str) -> u64 {
        self.hand(name).map_or(0, |h| h.values().map(|&c| u64::from(c)).sum())
    }

    /// A player's cards as tokens in rank order, space separated ("" when empty).
    pub(crate) fn hand_text(&self, name: &str) -> String {
        self.hand(name).map(hand_tokens).unwrap_or_default().join(" ")
    }

    fn announce(&self, world: &mut World, text: String) {
        world.broadcast(&SceneEvent::public(text), Some(self.state.time), None);
    }

    fn multiply(&mut self) {
        self.state.score_multiplier = self.state.score_multiplier.saturating_mul(2);
    }

    /// Shuffles a fresh deck with the simulator's RNG, deals it and restarts bidding.
    pub(crate) fn redeal(&mut self, world: &mut World) {
        let players = self.state.players.clone();
        let mut deck: Vec<Rank> = Vec::new();
        for _ in 0..self.config.num_decks {
            for r in Rank::ALL {
                let copies = if matches!(r, Rank::SJ | Rank::BJ) { 1 } else { 4 };
                deck.extend(std::iter::repeat_n(r, copies));
            }
        }
        world.rng.shuffle(&mut deck);
        let (per, bottom_n) = self.deal_sizes();
        let dealt = per * players.len();
        let mut hands: IndexMap<String, Hand> = players.iter().map(|p| (p.clone(), Hand::new())).collect();
        for (i, &card) in deck.iter().take(dealt).enumerate() {
            if let Some(hand) = players.get(i % players.len()).and_then(|p| hands.get_mut(p)) {
                *hand.entry(card).or_insert(0) += 1;
            }
        }
        let s = &mut self.state;
        s.bottom = deck.iter().skip(dealt).take(bottom_n).copied().collect();
        s.hands = hands;
        s.phase = Phase::Bidding;
        s.bidding_stage = Stage::Call;
        s.bid_turn_index = 0;
        s.landlord_candidate = None;
        s.landlord = None;
        s.farmers = Vec::new();
        s.current_turn = 0;
        s.leading_combo = None;
        s.passes_since_play = 0;
        s.score_multiplier = 1;
        s.rob_eligible = Vec::new();
        s.rob_acted = IndexMap::new();
        s.played_flags = players.iter().map(|p| (p.clone(), false)).collect();
        let owned = |tokens: Vec<&str>| -> Vec<String> { tokens.into_iter().map(String::from).collect() };
        let deal = LandlordDeal {
            players: players
                .iter()
                .map(|p| (p.clone(), owned(self.hand(p).map(hand_tokens).unwrap_or_default())))
                .collect(),
            bottom: owned(self.state.bottom.iter().map(|r| r.token()).collect()),
        };
        // Emitted now, not queued: the deal precedes the broadcast that announces it.
        world.emit(&deal);
        self.announce(world, "New deal. Call the landlord begins.".into());
    }

    /// A call-stage pass: the next seat calls; a full round without a call redeals.
    fn advance_call_pass(&mut self, world: &mut World) {
        let n = self.state.players.len().max(1);
        let next = next_seat(self.state.bid_turn_index, n);
        self.state.bid_turn_index = next;
        if next == 0 && self.state.landlord_candidate.is_none() {
            self.announce(world, "No one called. Redealing.".into());
            self.redeal(world);
        }
    }

    /// Every rob-eligible player has acted: seat the landlord, hand over the bottom cards and open
    /// the doubling stage.
    fn finalize_landlord(&mut self, world: &mut World) {
        let Some(name) = self.state.landlord_candidate.clone().filter(|n| !n.is_empty()) else {
            self.redeal(world);
            return;
        };
        let players = self.state.players.clone();
        self.state.landlord = Some(name.clone());
        self.state.farmers = players.iter().filter(|p| **p != name).cloned().collect();
        let bottom = self.state.bottom.clone();
        let hand = self.state.hands.entry(name.clone()).or_default();
        for &r in &bottom {
            *hand.entry(r).or_insert(0) += 1;
        }
        let shown: Vec<&str> = bottom.iter().map(|r| r.token()).collect();
        self.announce(world, format!("Landlord is {name}. Bottom cards: {}", shown.join(" ")));
        let li = self.seat(&name).unwrap_or(0);
        let n = players.len();
        let mut order: Vec<String> = (1..n).filter_map(|i| players.get((li + i) % n).cloned()).collect();
        order.push(name);
        self.state.doubling_acted = order.iter().map(|p| (p.clone(), false)).collect();
        self.state.doubling_order = order;
        self.state.phase = Phase::Doubling;
    }

    /// Once everyone has doubled or declined, the landlord leads the first trick.
    fn advance_doubling(&mut self, world: &mut World) {
        if self.state.doubling_acted.values().all(|&a| a) {
            let landlord = self.state.landlord.clone().unwrap_or_default();
            self.state.phase = Phase::Playing;
            self.state.current_turn = self.seat(&landlord).unwrap_or(0);
            self.state.leading_combo = None;
            self.state.passes_since_play = 0;
            self.announce(world, "Doubling finished. Game starts.".into());
        }
    }

    fn advance_turn(&mut self) {
        let n = self.state.players.len().max(1);
        self.state.current_turn = next_seat(self.state.current_turn, n);
    }

    /// A pass while playing: after everyone else has passed, the lead's owner starts a new trick.
    fn on_player_pass(&mut self, world: &mut World) {
        self.state.passes_since_play = self.state.passes_since_play.saturating_add(1);
        let needed = self.state.players.len().saturating_sub(1) as u32;
        if self.state.passes_since_play >= needed {
            let owner = self.state.leading_combo.as_ref().map(|l| l.owner.clone()).unwrap_or_default();
            if let Some(seat) = self.seat(&owner) {
                self.state.current_turn = seat;
            }
            self.state.leading_combo = None;
            self.state.passes_since_play = 0;
            self.announce(world, format!("Trick ends. {owner} leads next."));
        } else {
            self.advance_turn();
        }
    }

    fn on_player_won(&mut self, winner: &str, world: &mut World) {
        let s = &self.state;
        let played = |p: &str| s.played_flags.get(p).copied().unwrap_or(false);
        let (team, doubled) = if s.landlord.as_deref() == Some(winner) {
            let farmers_played = s.farmers.iter().any(|f| played(f));
            (Team::Landlord, (!farmers_played).then_some("Spring! Multiplier doubled."))
        } else {
            let landlord_played = s.landlord.as_deref().is_some_and(played);
            (Team::Farmers, (!landlord_played).then_some("Counter-spring! Multiplier doubled."))
        };
        if let Some(line) = doubled {
            self.multiply();
            self.announce(world, line.into());
        }
        self.state.winner_team = Some(team);
        self.state.phase = Phase::Complete;
        self.state.complete = true;
        let text = format!("Game over. Winner: {} (x{}).", team.as_str(), self.state.score_multiplier);
        self.announce(world, text);
    }

    fn call_landlord(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        if !(self.state.phase == Phase::Bidding && self.state.bidding_stage == Stage::Call) {
            // Upstream: a 3-tuple (exception, no action_end).
            return fail(
                world,
                ctx.actor,
                "You can only call during the call stage.",
                "wrong_stage",
                format!("{a} call_landlord failed"),
            );
        }
        let players = self.state.players.clone();
        self.state.landlord_candidate = Some(a.clone());
        self.state.bidding_stage = Stage::Rob;
        self.state.rob_eligible = players.iter().filter(|p| **p != a).cloned().collect();
        self.state.rob_acted = self.state.rob_eligible.iter().map(|p| (p.clone(), false)).collect();
        self.state.bid_turn_index = next_seat(self.state.bid_turn_index, players.len().max(1));
        self.announce(world, format!("{a} called the landlord."));
        let summary = format!("{a} called landlord");
        Ok(Outcome::ok(ActionResult::Called { called: a }, summary, true))
    }

    /// The rob-stage checks shared by `rob_landlord` and `pass`; `verb` names the action in the
    /// failure summary.
    fn check_rob_turn(&self, ctx: &ActionCtx, world: &mut World, verb: &str) -> Option<Handled> {
        let a = ctx.actor_name(world).to_string();
        let summary = format!("{a} {verb} failed");
        match self.state.rob_acted.get(&a) {
            // Upstream: KeyError (the caller, or a name outside the table).
            None => Some(fail(world, ctx.actor, "You are not eligible to rob.", "not_eligible", summary)),
            // Upstream: a 3-tuple.
            Some(true) => Some(fail(world, ctx.actor, "You already acted in rob stage.", "already_acted", summary)),
            Some(false) => None,
        }
    }

    /// Marks the actor's rob-stage chance as used and seats the landlord when nobody is left.
    fn record_rob_turn(&mut self, a: &str, world: &mut World, line: String) {
        self.state.rob_acted.insert(a.to_string(), true);
        self.announce(world, line);
        if self.state.rob_acted.values().all(|&x| x) {
            self.finalize_landlord(world);
        }
    }

    fn rob_landlord(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        if !(self.state.phase == Phase::Bidding && self.state.bidding_stage == Stage::Rob) {
            return fail(
                world,
                ctx.actor,
                "You can only rob during the rob stage.",
                "wrong_stage",
                format!("{a} rob_landlord failed"),
            );
        }
        if let Some(failed) = self.check_rob_turn(ctx, world, "rob_landlord") {
            return failed;
        }
        self.state.landlord_candidate = Some(a.clone());
        self.multiply();
        self.record_rob_turn(&a, world, format!("{a} robbed the landlord. Multiplier x2."));
        let summary = format!("{a} robbed landlord");
        Ok(Outcome::ok(ActionResult::Robbed { robbed: a }, summary, true))
    }

    fn pass(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        match (self.state.phase, self.state.bidding_stage) {
            (Phase::Bidding, Stage::Call) => {
                // Upstream order: a redeal's announcements come before "did not call".
                self.advance_call_pass(world);
                self.announce(world, format!("{a} did not call."));
                Ok(Outcome::ok(PASSED, format!("{a} passed call"), true))
            }
            (Phase::Bidding, Stage::Rob) => {
                if let Some(failed) = self.check_rob_turn(ctx, world, "pass") {
                    return failed;
                }
                self.record_rob_turn(&a, world, format!("{a} did not rob."));
                Ok(Outcome::ok(PASSED, format!("{a} passed rob"), true))
            }
            (Phase::Playing, _) => {
                if self.state.leading_combo.is_none() {
                    // Upstream: a 3-tuple.
                    return fail(
                        world,
                        ctx.actor,
                        "You must lead; cannot pass.",
                        "cannot_pass_lead",
                        format!("{a} pass failed"),
                    );
                }
                self.announce(world, format!("{a} passed."));
                self.on_player_pass(world);
                Ok(Outcome::ok(PASSED, format!("{a} passed"), true))
            }
            _ => fail(world, ctx.actor, "You cannot pass right now.", "bad_phase", format!("{a} pass failed")),
        }
    }

    fn play_cards(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        let given = ctx.call.get("cards").unwrap_or("");
        let attempted: Vec<&str> = given.split_whitespace().collect();
        let failure = |world: &mut World, feedback: &str, code: &str| {
            let tried = if attempted.is_empty() { "(none)".to_string() } else { attempted.join(" ") };
            let summary = format!("{a} tried: {tried} -> {code} | remaining: {}", self.hand_text(&a));
            fail(world, ctx.actor, feedback, code, summary)
        };
        if self.state.phase != Phase::Playing {
            return failure(world, "You can only play during the playing phase.", "wrong_phase");
        }
        if attempted.is_empty() {
            return failure(world, "Provide cards to play.", "missing_cards");
        }
        let mut cards = Vec::with_capacity(attempted.len());
        for token in &attempted {
            match Rank::parse(token) {
                Some(r) => cards.push(r),
                // Upstream raises ValueError("Unknown card token: …") here.
                None => {
                    return failure(world, &format!("Unknown card token: {token}"), "unknown_token");
                }
            }
        }
        let wanted = count_ranks(&cards);
        let empty = Hand::new();
        let hand = self.hand(&a).unwrap_or(&empty);
        if wanted.iter().any(|(r, &c)| hand.get(r).copied().unwrap_or(0) < c) {
            return failure(world, "You don't have those cards.", "not_in_hand");
        }
        let Some(combo) = evaluate(&cards, self.two_decks()) else {
            return failure(world, "Invalid combination.", "invalid_combo");
        };
        if let Some(lead) = &self.state.leading_combo
            && !can_beat(&combo, &lead.combo)
        {
            return failure(world, "Your play does not beat the current lead.", "not_beating");
        }

        let hand = self.state.hands.entry(a.clone()).or_default();
        for (r, c) in wanted {
            if let Some(have) = hand.get_mut(&r) {
                *have = have.saturating_sub(c);
                if *have == 0 {
                    hand.remove(&r);
                }
            }
        }
        self.state.played_flags.insert(a.clone(), true);
        self.state.passes_since_play = 0;
        if matches!(combo.kind, ComboType::Bomb | ComboType::Rocket) {
            self.multiply();
        }
        let kind = combo.kind.as_str();
        self.state.leading_combo = Some(Lead { combo, owner: a.clone() });
        // The broadcast repeats the cards exactly as the agent wrote them.
        self.announce(world, format!("{a} played: {given} ({kind})."));
        let tried = attempted.join(" ");
        let played = |win| ActionResult::Played { played: attempted.iter().map(|t| t.to_string()).collect(), win };
        if self.hand_size(&a) == 0 {
            self.on_player_won(&a, world);
            let summary = format!("{a} played: {tried} ({kind}), remaining: (empty) [WIN]");
            return Ok(Outcome::ok(played(true), summary, true));
        }
        self.advance_turn();
        let summary = format!("{a} played: {tried} ({kind}), remaining: {}", self.hand_text(&a));
        Ok(Outcome::ok(played(false), summary, true))
    }

    fn double(&mut self, ctx: &ActionCtx, world: &mut World, double: bool) -> Handled {
        let a = ctx.actor_name(world).to_string();
        let verb = if double { "double" } else { "no_double" };
        if self.state.phase != Phase::Doubling {
            let feedback = if double {
                "You can only double during the doubling stage."
            } else {
                "You can only act during the doubling stage."
            };
            return fail(world, ctx.actor, feedback, "wrong_phase", format!("{a} {verb} failed"));
        }
        if self.state.doubling_acted.get(&a).copied().unwrap_or(false) {
            return fail(
                world,
                ctx.actor,
                "You already acted in doubling stage.",
                "already_acted",
                format!("{a} {verb} failed"),
            );
        }
        self.state.doubling_acted.insert(a.clone(), true);
        let summary = if double {
            self.multiply();
            self.announce(world, format!("{a} doubled. Multiplier x2."));
            format!("{a} doubled")
        } else {
            self.announce(world, format!("{a} declined to double."));
            format!("{a} declined doubling")
        };
        self.advance_doubling(world);
        Ok(Outcome::ok(ActionResult::Doubled { double }, summary, true))
    }

    /// `send_message`, at most once per turn (`post_turn` clears the flag).
    fn send_message(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        if self.state.turn_msg_used.get(&a).copied().unwrap_or(false) {
            return fail(
                world,
                ctx.actor,
                "You have already sent a message this turn.",
                "message_already_sent",
                format!("{a} extra chat blocked"),
            );
        }
        let outcome = handle_common(self, ctx, world)?;
        if outcome.success {
            self.state.turn_msg_used.insert(a, true);
        }
        Ok(outcome)
    }
}

/// The seat after `seat` at a table of `n > 0` (a patched index far out of range cannot overflow).
fn next_seat(seat: usize, n: usize) -> usize {
    (seat % n + 1) % n
}

/// The result of a pass in any stage.
const PASSED: ActionResult = ActionResult::Passed { pass: true };

/// Feedback to the actor plus a failed outcome `{error: code}` that keeps the turn.
fn fail(world: &mut World, actor: usize, feedback: &str, code: &str, summary: String) -> Handled {
    world.feedback(actor, feedback);
    Ok(Outcome::fail(ActionResult::error(code), summary))
}

impl SceneRules for Landlord {
    clock_and_opening!();
    fn minutes_per_turn(&self) -> i64 {
        1
    }
    fn text(&self) -> SceneText {
        let (description, combos) = if self.two_decks() {
            (DESCRIPTION_TWO_DECKS, COMBOS_TWO_DECKS)
        } else {
            (DESCRIPTION_ONE_DECK, COMBOS_ONE_DECK)
        };
        SceneText::plain(description, format!("{RULES_BIDDING}{combos}{RULES_FORMAT}"), String::new())
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![
            ActionKind::CallLandlord,
            ActionKind::RobLandlord,
            ActionKind::Double,
            ActionKind::NoDouble,
            ActionKind::PlayCards,
            ActionKind::SendMessage,
            ActionKind::Pass,
            ActionKind::Yield,
        ]
    }
    fn initialize_agent(&mut self, agent: &mut Agent) {
        self.state.played_flags.insert(agent.name.clone(), false);
    }
    fn pre_run(&mut self, world: &mut World) -> Result<(), SceneError> {
        if world.agents.len() != 4 {
            return Err(SceneError::Players(world.agents.len()));
        }
        self.state.players = world.names();
        self.state.turn_msg_used = self.state.players.iter().map(|p| (p.clone(), false)).collect();
        self.redeal(world);
        Ok(())
    }
    fn is_complete(&self) -> bool {
        self.state.complete
    }
    fn status_prompt(&self, agent: &Agent) -> String {
        let s = &self.state;
        let hand = self.hand_text(&agent.name);
        let mut lines = vec![
            "--- Status ---".to_string(),
            format!("Phase: {}", s.phase.as_str()),
            format!("Multiplier: x{}", s.score_multiplier),
            format!("Hand: {}", if hand.is_empty() { "(empty)" } else { &hand }),
        ];
        if !s.players.is_empty() {
            let counts: Vec<String> = s.players.iter().map(|p| format!("{p}={}", self.hand_size(p))).collect();
            lines.push(format!("Hand counts: {}", counts.join(" | ")));
        }
        lines.join("\n") + "\n"
    }
    fn controlled_next(&self, _world: &World) -> Option<String> {
        let s = &self.state;
        match (s.phase, s.bidding_stage) {
            (Phase::Bidding, Stage::Call) => s.players.get(s.bid_turn_index).cloned(),
            (Phase::Bidding, Stage::Rob) => {
                let n = s.players.len();
                (0..n).filter_map(|off| s.players.get((s.bid_turn_index % n + off) % n)).find_map(|p| {
                    let waiting = s.rob_eligible.contains(p) && !s.rob_acted.get(p).copied().unwrap_or(false);
                    waiting.then(|| p.clone())
                })
            }
            (Phase::Doubling, _) => {
                s.doubling_order.iter().find(|p| !s.doubling_acted.get(*p).copied().unwrap_or(false)).cloned()
            }
            (Phase::Playing, _) => s.players.get(s.current_turn).cloned(),
            _ => None,
        }
    }
    fn handle(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        match ctx.kind {
            ActionKind::CallLandlord => self.call_landlord(ctx, world),
            ActionKind::RobLandlord => self.rob_landlord(ctx, world),
            ActionKind::Pass => self.pass(ctx, world),
            ActionKind::PlayCards => self.play_cards(ctx, world),
            ActionKind::Double => self.double(ctx, world, true),
            ActionKind::NoDouble => self.double(ctx, world, false),
            ActionKind::SendMessage => self.send_message(ctx, world),
            _ => handle_common(self, ctx, world),
        }
    }
    fn post_turn(&mut self, actor: usize, world: &mut World) {
        self.set_time(self.time().saturating_add(self.minutes_per_turn()));
        if let Some(agent) = world.agents.get(actor)
            && let Some(used) = self.state.turn_msg_used.get_mut(&agent.name)
        {
            *used = false;
        }
    }
}

/// The prompt text of the actions this scene adds, for the catalogue in `scenes/mod.rs`.
pub(crate) const ACTIONS: &[(ActionKind, ActionSpec)] = &[
    (
        ActionKind::CallLandlord,
        ActionSpec {
            desc: "in the call stage of bidding, claim the landlord seat for yourself",
            instruction: "- To call the landlord while bidding is in its call stage:\n<Action name=\"call_landlord\" />\n",
        },
    ),
    (
        ActionKind::RobLandlord,
        ActionSpec {
            desc: "in the rob stage, take the landlord seat from whoever holds it; the multiplier doubles",
            instruction: "- To rob the landlord after a call (one chance per player):\n<Action name=\"rob_landlord\" />\n",
        },
    ),
    (
        ActionKind::Pass,
        ActionSpec {
            desc: "decline: no call or no rob while bidding, or let the current lead stand while playing",
            instruction: "- To pass (decline a call or rob, or skip beating the lead):\n<Action name=\"pass\" />\n",
        },
    ),
    (
        ActionKind::PlayCards,
        ActionSpec {
            desc: "put down a legal combination from your hand; when following, it has to beat the lead",
            instruction: "- To play cards, list their rank tokens separated by spaces:\n<Action name=\"play_cards\"><cards>7 7 7 4</cards></Action>\nRank tokens: 3 4 5 6 7 8 9 10 J Q K A 2 SJ BJ\n",
        },
    ),
    (
        ActionKind::Double,
        ActionSpec {
            desc: "in the doubling stage, raise the stakes: the multiplier doubles",
            instruction: "- To double in the doubling stage:\n<Action name=\"double\" />\n",
        },
    ),
    (
        ActionKind::NoDouble,
        ActionSpec {
            desc: "in the doubling stage, keep the stakes as they are",
            instruction: "- To decline doubling in the doubling stage:\n<Action name=\"no_double\" />\n",
        },
    ),
];

#[cfg(test)]
mod tests;
