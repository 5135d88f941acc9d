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

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use simtree_shared::LandlordDeal;

use super::{SceneError, SceneRules};
use crate::engine::action::{ActionCtx, ActionKind, ActionResult, ActionSpec, Handled, Outcome, handle_common};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::prompt::SceneText;
use crate::engine::world::World;

/// A card rank. The declaration order is the game order (3 lowest … BJ highest) and the
/// discriminant is upstream's rank value, used for sequences and comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Rank {
    #[serde(rename = "3")]
    Three = 3,
    #[serde(rename = "4")]
    Four,
    #[serde(rename = "5")]
    Five,
    #[serde(rename = "6")]
    Six,
    #[serde(rename = "7")]
    Seven,
    #[serde(rename = "8")]
    Eight,
    #[serde(rename = "9")]
    Nine,
    #[serde(rename = "10")]
    Ten,
    J,
    Q,
    K,
    A,
    #[serde(rename = "2")]
    Two,
    /// Small joker.
    SJ,
    /// Big joker.
    BJ,
}

impl Rank {
    pub const ALL: [Rank; 15] = [
        Rank::Three,
        Rank::Four,
        Rank::Five,
        Rank::Six,
        Rank::Seven,
        Rank::Eight,
        Rank::Nine,
        Rank::Ten,
        Rank::J,
        Rank::Q,
        Rank::K,
        Rank::A,
        Rank::Two,
        Rank::SJ,
        Rank::BJ,
    ];

    pub fn token(self) -> &'static str {
        match self {
            Rank::Three => "3",
            Rank::Four => "4",
            Rank::Five => "5",
            Rank::Six => "6",
            Rank::Seven => "7",
            Rank::Eight => "8",
            Rank::Nine => "9",
            Rank::Ten => "10",
            Rank::J => "J",
            Rank::Q => "Q",
            Rank::K => "K",
            Rank::A => "A",
            Rank::Two => "2",
            Rank::SJ => "SJ",
            Rank::BJ => "BJ",
        }
    }

    /// Strict token parsing: exactly the tokens above, case-sensitive.
    pub fn parse(token: &str) -> Option<Rank> {
        Rank::ALL.into_iter().find(|r| r.token() == token)
    }

    pub fn value(self) -> u8 {
        self as u8
    }

    /// 2 and the jokers never take part in straights or sequences.
    fn sequenceable(self) -> bool {
        !matches!(self, Rank::Two | Rank::SJ | Rank::BJ)
    }
}

/// A hand: how many cards of each rank (suits play no part).
pub type Hand = BTreeMap<Rank, u32>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Init,
    Bidding,
    Doubling,
    Playing,
    Complete,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Init => "init",
            Phase::Bidding => "bidding",
            Phase::Doubling => "doubling",
            Phase::Playing => "playing",
            Phase::Complete => "complete",
        }
    }
}

/// The two stages of bidding. Upstream stores a free string and has an `Unknown bidding stage.`
/// branch in `pass`; a typed stage cannot hold anything else, so that branch does not exist here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Call,
    Rob,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Team {
    Landlord,
    Farmers,
}

impl Team {
    fn as_str(self) -> &'static str {
        match self {
            Team::Landlord => "landlord",
            Team::Farmers => "farmers",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ComboType {
    Rocket,
    Bomb,
    FourTwoSingles,
    FourTwoPairs,
    Triple,
    TripleSingle,
    TriplePair,
    Single,
    Pair,
    Straight,
    DoubleSeq,
    TripleSeq,
    AirplaneSingles,
    AirplanePairs,
}

impl ComboType {
    pub fn as_str(self) -> &'static str {
        match self {
            ComboType::Rocket => "rocket",
            ComboType::Bomb => "bomb",
            ComboType::FourTwoSingles => "four_two_singles",
            ComboType::FourTwoPairs => "four_two_pairs",
            ComboType::Triple => "triple",
            ComboType::TripleSingle => "triple_single",
            ComboType::TriplePair => "triple_pair",
            ComboType::Single => "single",
            ComboType::Pair => "pair",
            ComboType::Straight => "straight",
            ComboType::DoubleSeq => "double_seq",
            ComboType::TripleSeq => "triple_seq",
            ComboType::AirplaneSingles => "airplane_singles",
            ComboType::AirplanePairs => "airplane_pairs",
        }
    }
}

/// A legal combination: upstream's `{type, key, len[, m][, pair_top]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Combo {
    #[serde(rename = "type")]
    pub kind: ComboType,
    /// The rank that decides comparisons (the highest of a sequence, the quad of a four-with-two).
    pub key: Rank,
    /// Number of cards.
    pub len: u32,
    /// Number of triples in a triple sequence or an airplane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u32>,
    /// Highest attached pair of an airplane with pairs (informational only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_top: Option<Rank>,
}

/// The combination to beat in the current trick, and who played it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lead {
    #[serde(flatten)]
    pub combo: Combo,
    pub owner: String,
}

/// Scene configuration in a scenario file. The shuffle uses the simulator's seeded RNG (the
/// scenario's `seed`), so there is no `seed` key here.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// 1 (54 cards: 13 each, 2 bottom) or 2 (108 cards: 25 each, 8 bottom).
    #[serde(default = "one_deck", deserialize_with = "deck_count")]
    pub num_decks: u8,
}

impl Default for Config {
    fn default() -> Self {
        Config { num_decks: 1 }
    }
}

fn one_deck() -> u8 {
    1
}

fn check_decks(n: u64) -> Result<u8, SceneError> {
    match n {
        1 => Ok(1),
        2 => Ok(2),
        _ => Err(SceneError::Decks(n)),
    }
}

fn deck_count<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    check_decks(u64::deserialize(d)?).map_err(D::Error::custom)
}

fn checked_hands<'de, D: Deserializer<'de>>(d: D) -> Result<IndexMap<String, Hand>, D::Error> {
    let hands = IndexMap::<String, Hand>::deserialize(d)?;
    for (name, hand) in &hands {
        if let Some((r, c)) = hand.iter().find(|(_, c)| **c > 8) {
            return Err(D::Error::custom(format!(
                "{name} holds {c} cards of rank {}; at most 8 exist",
                r.token()
            )));
        }
    }
    Ok(hands)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub time: i64,
    pub phase: Phase,
    /// Agent names in seat order (set by `pre_run`).
    pub players: Vec<String>,
    /// Bottom cards in dealt order; they stay listed after joining the landlord's hand.
    pub bottom: Vec<Rank>,
    /// Each player's cards. Counts above 8 (two full decks) are rejected when the state is read, so
    /// a patch cannot make a hand that takes gigabytes to print.
    #[serde(deserialize_with = "checked_hands")]
    pub hands: IndexMap<String, Hand>,
    pub bidding_stage: Stage,
    /// Seat whose turn it is to call; in the rob stage, where the search for the next robber starts.
    pub bid_turn_index: usize,
    pub landlord_candidate: Option<String>,
    pub landlord: Option<String>,
    pub farmers: Vec<String>,
    /// Seat whose turn it is while playing.
    pub current_turn: usize,
    pub leading_combo: Option<Lead>,
    pub passes_since_play: u32,
    pub score_multiplier: u64,
    pub rob_eligible: Vec<String>,
    pub rob_acted: IndexMap<String, bool>,
    /// Whether each player has played any cards (spring / counter-spring).
    pub played_flags: IndexMap<String, bool>,
    /// Whether each player has already sent its one message this turn.
    pub turn_msg_used: IndexMap<String, bool>,
    pub doubling_order: Vec<String>,
    pub doubling_acted: IndexMap<String, bool>,
    pub complete: bool,
    pub winner_team: Option<Team>,
}

impl Default for State {
    fn default() -> Self {
        State {
            time: 1080,
            phase: Phase::Init,
            players: Vec::new(),
            bottom: Vec::new(),
            hands: IndexMap::new(),
            bidding_stage: Stage::Call,
            bid_turn_index: 0,
            landlord_candidate: None,
            landlord: None,
            farmers: Vec::new(),
            current_turn: 0,
            leading_combo: None,
            passes_since_play: 0,
            score_multiplier: 1,
            rob_eligible: Vec::new(),
            rob_acted: IndexMap::new(),
            played_flags: IndexMap::new(),
            turn_msg_used: IndexMap::new(),
            doubling_order: Vec::new(),
            doubling_acted: IndexMap::new(),
            complete: false,
            winner_team: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Landlord {
    pub name: String,
    pub initial_event: String,
    /// Boxed: the state is several times larger than other scenes' and lives inside `Scene`.
    pub state: Box<State>,
    #[serde(default)]
    pub config: Config,
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
    pub fn new(name: String, initial_event: String, config: Config) -> Result<Self, SceneError> {
        check_decks(u64::from(config.num_decks))?;
        Ok(Landlord {
            name,
            initial_event,
            state: Box::default(),
            config,
        })
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
    pub fn hand_text(&self, name: &str) -> String {
        self.hand(name).map(hand_tokens).unwrap_or_default().join(" ")
    }

    fn announce(&self, world: &mut World, text: String) {
        world.broadcast(&SceneEvent::public(text), Some(self.state.time), None);
    }

    fn multiply(&mut self) {
        self.state.score_multiplier = self.state.score_multiplier.saturating_mul(2);
    }

    /// Shuffles a fresh deck with the simulator's RNG, deals it and restarts bidding.
    pub fn redeal(&mut self, world: &mut World) {
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
            let owner = self
                .state
                .leading_combo
                .as_ref()
                .map(|l| l.owner.clone())
                .unwrap_or_default();
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
            (
                Team::Landlord,
                (!farmers_played).then_some("Spring! Multiplier doubled."),
            )
        } else {
            let landlord_played = s.landlord.as_deref().is_some_and(played);
            (
                Team::Farmers,
                (!landlord_played).then_some("Counter-spring! Multiplier doubled."),
            )
        };
        if let Some(line) = doubled {
            self.multiply();
            self.announce(world, line.into());
        }
        self.state.winner_team = Some(team);
        self.state.phase = Phase::Complete;
        self.state.complete = true;
        let text = format!(
            "Game over. Winner: {} (x{}).",
            team.as_str(),
            self.state.score_multiplier
        );
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
            None => Some(fail(
                world,
                ctx.actor,
                "You are not eligible to rob.",
                "not_eligible",
                summary,
            )),
            // Upstream: a 3-tuple.
            Some(true) => Some(fail(
                world,
                ctx.actor,
                "You already acted in rob stage.",
                "already_acted",
                summary,
            )),
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
            _ => fail(
                world,
                ctx.actor,
                "You cannot pass right now.",
                "bad_phase",
                format!("{a} pass failed"),
            ),
        }
    }

    fn play_cards(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let a = ctx.actor_name(world).to_string();
        let given = ctx.call.get("cards").unwrap_or("");
        let attempted: Vec<&str> = given.split_whitespace().collect();
        let failure = |world: &mut World, feedback: &str, code: &str| {
            let tried = if attempted.is_empty() {
                "(none)".to_string()
            } else {
                attempted.join(" ")
            };
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
        self.state.leading_combo = Some(Lead {
            combo,
            owner: a.clone(),
        });
        // The broadcast repeats the cards exactly as the agent wrote them.
        self.announce(world, format!("{a} played: {given} ({kind})."));
        let tried = attempted.join(" ");
        let played = |win| ActionResult::Played {
            played: attempted.iter().map(|t| t.to_string()).collect(),
            win,
        };
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

fn hand_tokens(hand: &Hand) -> Vec<&'static str> {
    hand.iter()
        .flat_map(|(r, &c)| std::iter::repeat_n(r.token(), c as usize))
        .collect()
}

fn count_ranks(cards: &[Rank]) -> BTreeMap<Rank, u32> {
    let mut counts = BTreeMap::new();
    for &c in cards {
        *counts.entry(c).or_insert(0) += 1;
    }
    counts
}

/// Ranks ascending, every one sequenceable and each exactly one above the previous.
fn consecutive(ranks: &[Rank]) -> bool {
    ranks.iter().all(|r| r.sequenceable()) && ranks.windows(2).all(|w| w[1].value() == w[0].value() + 1)
}

/// Classifies a play (spec §1.10.4 rules 1–13, first match wins); `None` is an illegal play.
/// Eight of a kind is a bomb only with two decks.
pub fn evaluate(cards: &[Rank], two_decks: bool) -> Option<Combo> {
    let n = cards.len();
    let counts = count_ranks(cards);
    let ranks: Vec<Rank> = counts.keys().copied().collect();
    let with = |count: u32| -> Vec<Rank> { counts.iter().filter(|(_, c)| **c == count).map(|(r, _)| *r).collect() };
    let combo = |kind, key, m: Option<usize>, pair_top| Combo {
        kind,
        key,
        len: n as u32,
        m: m.map(|m| m as u32),
        pair_top,
    };

    if n == 2 && counts.get(&Rank::SJ) == Some(&1) && counts.get(&Rank::BJ) == Some(&1) {
        return Some(combo(ComboType::Rocket, Rank::BJ, None, None));
    }
    if let [only] = ranks[..] {
        let c = counts.get(&only).copied().unwrap_or(0);
        if c == 4 || (two_decks && c == 8) {
            return Some(combo(ComboType::Bomb, only, None, None));
        }
    }
    let quads = with(4);
    if n == 6
        && let [quad] = quads[..]
    {
        return Some(combo(ComboType::FourTwoSingles, quad, None, None));
    }
    if n == 8
        && let [quad] = quads[..]
        && with(2).len() == 2
    {
        return Some(combo(ComboType::FourTwoPairs, quad, None, None));
    }
    let triples = with(3);
    if n == 3
        && let [only] = ranks[..]
    {
        return Some(combo(ComboType::Triple, only, None, None));
    }
    if n == 4
        && let [triple] = triples[..]
    {
        return Some(combo(ComboType::TripleSingle, triple, None, None));
    }
    if n == 5
        && let [triple] = triples[..]
        && with(2).len() == 1
    {
        return Some(combo(ComboType::TriplePair, triple, None, None));
    }
    if let [only] = cards[..] {
        return Some(combo(ComboType::Single, only, None, None));
    }
    if n == 2
        && let [only] = ranks[..]
    {
        return Some(combo(ComboType::Pair, only, None, None));
    }
    if n >= 5
        && ranks.len() == n
        && consecutive(&ranks)
        && let Some(&top) = ranks.last()
    {
        return Some(combo(ComboType::Straight, top, None, None));
    }
    let pairs = with(2);
    if n.is_multiple_of(2)
        && pairs.len() * 2 == n
        && pairs.len() >= 3
        && consecutive(&pairs)
        && let Some(&top) = pairs.last()
    {
        return Some(combo(ComboType::DoubleSeq, top, None, None));
    }
    if triples.len() >= 2
        && consecutive(&triples)
        && let Some(&top) = triples.last()
    {
        let m = triples.len();
        if n == 3 * m {
            return Some(combo(ComboType::TripleSeq, top, Some(m), None));
        }
        // The attachments are the n - 3m cards outside the triples, so with n = 4m there are m.
        if n == 4 * m {
            return Some(combo(ComboType::AirplaneSingles, top, Some(m), None));
        }
        // Ranks of count 2 can never be triple ranks, so every pair found is an attachment.
        if n == 5 * m && pairs.len() == m {
            return Some(combo(ComboType::AirplanePairs, top, Some(m), pairs.last().copied()));
        }
    }
    None
}

/// Whether `new` beats the current `lead`.
pub fn can_beat(new: &Combo, lead: &Combo) -> bool {
    use ComboType::{Bomb, Rocket};
    match (new.kind, lead.kind) {
        (Rocket, _) => true,
        (_, Rocket) => false,
        (Bomb, Bomb) => (new.len, new.key) > (lead.len, lead.key),
        (Bomb, _) => true,
        (_, Bomb) => false,
        (a, b) => a == b && new.len == lead.len && new.key > lead.key,
    }
}

impl SceneRules for Landlord {
    fn time(&self) -> i64 {
        self.state.time
    }
    fn set_time(&mut self, minutes: i64) {
        self.state.time = minutes;
    }
    fn minutes_per_turn(&self) -> i64 {
        1
    }
    fn initial_event(&self) -> &str {
        &self.initial_event
    }
    fn text(&self) -> SceneText {
        let (description, combos) = if self.two_decks() {
            (DESCRIPTION_TWO_DECKS, COMBOS_TWO_DECKS)
        } else {
            (DESCRIPTION_ONE_DECK, COMBOS_ONE_DECK)
        };
        SceneText {
            description: description.into(),
            guidelines: format!("{RULES_BIDDING}{combos}{RULES_FORMAT}"),
            examples: String::new(),
        }
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
                (0..n)
                    .filter_map(|off| s.players.get((s.bid_turn_index % n + off) % n))
                    .find_map(|p| {
                        let waiting = s.rob_eligible.contains(p) && !s.rob_acted.get(p).copied().unwrap_or(false);
                        waiting.then(|| p.clone())
                    })
            }
            (Phase::Doubling, _) => s
                .doubling_order
                .iter()
                .find(|p| !s.doubling_acted.get(*p).copied().unwrap_or(false))
                .cloned(),
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
pub const ACTIONS: &[(ActionKind, &ActionSpec)] = &[
    (ActionKind::CallLandlord, &CALL_LANDLORD),
    (ActionKind::RobLandlord, &ROB_LANDLORD),
    (ActionKind::Pass, &PASS),
    (ActionKind::PlayCards, &PLAY_CARDS),
    (ActionKind::Double, &DOUBLE),
    (ActionKind::NoDouble, &NO_DOUBLE),
];

pub const CALL_LANDLORD: ActionSpec = ActionSpec {
    desc: "in the call stage of bidding, claim the landlord seat for yourself",
    instruction: "- To call the landlord while bidding is in its call stage:\n<Action name=\"call_landlord\" />\n",
};

pub const ROB_LANDLORD: ActionSpec = ActionSpec {
    desc: "in the rob stage, take the landlord seat from whoever holds it; the multiplier doubles",
    instruction: "- To rob the landlord after a call (one chance per player):\n<Action name=\"rob_landlord\" />\n",
};

pub const PASS: ActionSpec = ActionSpec {
    desc: "decline: no call or no rob while bidding, or let the current lead stand while playing",
    instruction: "- To pass (decline a call or rob, or skip beating the lead):\n<Action name=\"pass\" />\n",
};

pub const PLAY_CARDS: ActionSpec = ActionSpec {
    desc: "put down a legal combination from your hand; when following, it has to beat the lead",
    instruction: "- To play cards, list their rank tokens separated by spaces:\n<Action name=\"play_cards\"><cards>7 7 7 4</cards></Action>\nRank tokens: 3 4 5 6 7 8 9 10 J Q K A 2 SJ BJ\n",
};

pub const DOUBLE: ActionSpec = ActionSpec {
    desc: "in the doubling stage, raise the stakes: the multiplier doubles",
    instruction: "- To double in the doubling stage:\n<Action name=\"double\" />\n",
};

pub const NO_DOUBLE: ActionSpec = ActionSpec {
    desc: "in the doubling stage, keep the stakes as they are",
    instruction: "- To decline doubling in the doubling stage:\n<Action name=\"no_double\" />\n",
};

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::event::{Event, EventType};
    use crate::engine::ordering::Ordering;
    use crate::engine::parse::ActionCall;
    use crate::engine::scenes::{Scene, SceneKind};
    use crate::engine::simulator::{BuildError, SimOptions, Simulator};
    use crate::llm::MockClient;
    use crate::scenario::Scenario;

    const NAMES: [&str; 4] = ["Alice", "Bob", "Carol", "Dave"];

    fn build(names: &[&str], decks: u8, seed: u64) -> Result<Simulator, BuildError> {
        let agents = names.iter().map(|n| Agent::new(*n, vec![ActionKind::Yield])).collect();
        let config = Config { num_decks: decks };
        let scene = Scene::Landlord(Landlord::new("landlord".into(), "New game".into(), config)?);
        let opts = SimOptions {
            seed,
            max_steps_per_turn: 3,
            ..Default::default()
        };
        Simulator::build(agents, scene, Ordering::Controlled, opts)
    }

    /// A freshly dealt table (bidding, call stage) with empty output buffers.
    fn table(decks: u8, seed: u64) -> (Landlord, World) {
        let sim = build(&NAMES, decks, seed).unwrap();
        let Scene::Landlord(scene) = sim.scene else {
            panic!("not a landlord scene")
        };
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
        s.farmers = NAMES
            .iter()
            .filter(|n| **n != landlord)
            .map(|n| n.to_string())
            .collect();
        s.hands = NAMES.iter().zip(hands).map(|(n, h)| (n.to_string(), hand(h))).collect();
        s.current_turn = NAMES.iter().position(|n| *n == landlord).unwrap();
        s.leading_combo = None;
        s.passes_since_play = 0;
        s.played_flags = NAMES.iter().map(|n| (n.to_string(), false)).collect();
    }

    fn combo(kind: ComboType, key: &str, len: u32) -> Combo {
        Combo {
            kind,
            key: Rank::parse(key).unwrap(),
            len,
            m: None,
            pair_top: None,
        }
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
            let shown: Vec<&str> = players[n]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            assert_eq!(shown.join(" "), l.hand_text(n), "tokens in rank order");
        }
        let bottom: Vec<&str> = l.state.bottom.iter().map(|r| r.token()).collect();
        assert_eq!(events[0].data["bottom"], json!(bottom));
        assert_eq!(
            heard(&events, "Alice"),
            ["[18:05] Public Event: New deal. Call the landlord begins."]
        );
        // The system_broadcast record is queued, not emitted.
        assert_eq!(w.pending.len(), 1);
        assert_eq!(
            w.pending[0].data["text"],
            "Public Event: New deal. Call the landlord begins."
        );
    }

    #[test]
    fn config_accepts_one_or_two_decks_only() {
        let ok = |v: serde_json::Value| Scene::build(SceneKind::Landlord, "l".into(), "e".into(), v);
        let Scene::Landlord(l) = ok(serde_json::Value::Null).unwrap() else {
            panic!()
        };
        assert_eq!(l.config.num_decks, 1);
        let Scene::Landlord(l) = ok(json!({"num_decks": 2})).unwrap() else {
            panic!()
        };
        assert_eq!(l.config.num_decks, 2);
        let err = ok(json!({"num_decks": 3})).unwrap_err();
        assert_eq!(err.to_string(), "num_decks: num_decks must be 1 or 2, got 3");
        let err = ok(json!({"num_decks": "two"})).unwrap_err().to_string();
        assert!(err.starts_with("num_decks:"), "{err}");
        let err = ok(json!({"seed": 4})).unwrap_err().to_string();
        assert!(err.contains("unknown field `seed`"), "{err}");
        assert_eq!(
            Landlord::new("l".into(), "e".into(), Config { num_decks: 0 }).unwrap_err(),
            SceneError::Decks(0)
        );
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
            assert_eq!(
                out,
                Outcome::ok(ActionResult::Passed { pass: true }, format!("{who} passed call"), true)
            );
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
        assert_eq!(
            out,
            Outcome::ok(
                ActionResult::Called { called: "Alice".into() },
                "Alice called landlord",
                true
            )
        );
        assert_eq!(l.state.bidding_stage, Stage::Rob);
        assert_eq!(l.state.landlord_candidate.as_deref(), Some("Alice"));
        assert_eq!(l.state.rob_eligible, ["Bob", "Carol", "Dave"]);
        assert_eq!(l.state.bid_turn_index, 1);
        assert_eq!(
            heard(&drain(&mut w), "Bob"),
            ["[18:00] Public Event: Alice called the landlord."]
        );
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));

        // Calling is over; the caller has no rob chance.
        let out = act(&mut l, &mut w, "Bob", "call_landlord");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("wrong_stage"), "Bob call_landlord failed")
        );
        assert_eq!(
            heard(&drain(&mut w), "Bob"),
            ["You can only call during the call stage."]
        );
        let out = act(&mut l, &mut w, "Alice", "rob_landlord");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("not_eligible"), "Alice rob_landlord failed")
        );
        assert_eq!(heard(&drain(&mut w), "Alice"), ["You are not eligible to rob."]);
        let out = act(&mut l, &mut w, "Alice", "pass");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("not_eligible"), "Alice pass failed")
        );

        let out = act(&mut l, &mut w, "Bob", "rob_landlord");
        assert_eq!(
            out,
            Outcome::ok(
                ActionResult::Robbed { robbed: "Bob".into() },
                "Bob robbed landlord",
                true
            )
        );
        assert_eq!(l.state.score_multiplier, 2);
        assert_eq!(l.state.landlord_candidate.as_deref(), Some("Bob"));
        assert_eq!(
            heard(&drain(&mut w), "Carol"),
            ["[18:00] Public Event: Bob robbed the landlord. Multiplier x2."]
        );
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
        for action in ["rob_landlord", "pass"] {
            let out = act(&mut l, &mut w, "Bob", action);
            assert_eq!(
                out,
                Outcome::fail(ActionResult::error("already_acted"), format!("Bob {action} failed"))
            );
            assert_eq!(heard(&drain(&mut w), "Bob"), ["You already acted in rob stage."]);
        }

        let out = act(&mut l, &mut w, "Carol", "pass");
        assert_eq!(
            out,
            Outcome::ok(ActionResult::Passed { pass: true }, "Carol passed rob", true)
        );
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
            assert_eq!(
                l.state.hands["Dave"].get(r).copied().unwrap_or(0),
                before.get(r).copied().unwrap_or(0) + extra
            );
        }
        let shown: Vec<&str> = bottom.iter().map(|r| r.token()).collect();
        assert_eq!(
            heard(&drain(&mut w), "Alice"),
            [
                "[18:00] Public Event: Dave robbed the landlord. Multiplier x2.".to_string(),
                format!(
                    "[18:00] Public Event: Landlord is Dave. Bottom cards: {}",
                    shown.join(" ")
                ),
            ]
        );
        let out = act(&mut l, &mut w, "Bob", "rob_landlord");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("wrong_stage"), "Bob rob_landlord failed")
        );
        assert_eq!(heard(&drain(&mut w), "Bob"), ["You can only rob during the rob stage."]);
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
        let out = act(&mut l, &mut w, "Alice", "double");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("wrong_phase"), "Alice double failed")
        );
        assert_eq!(
            heard(&drain(&mut w), "Alice"),
            ["You can only double during the doubling stage."]
        );
        let out = act(&mut l, &mut w, "Alice", "no_double");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("wrong_phase"), "Alice no_double failed")
        );
        assert_eq!(
            heard(&drain(&mut w), "Alice"),
            ["You can only act during the doubling stage."]
        );

        act(&mut l, &mut w, "Bob", "call_landlord");
        for who in ["Carol", "Dave", "Alice"] {
            act(&mut l, &mut w, who, "pass");
        }
        assert_eq!(l.state.doubling_order, ["Carol", "Dave", "Alice", "Bob"]);
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
        drain(&mut w);

        let out = act(&mut l, &mut w, "Carol", "double");
        assert_eq!(
            out,
            Outcome::ok(ActionResult::Doubled { double: true }, "Carol doubled", true)
        );
        assert_eq!(l.state.score_multiplier, 2);
        assert_eq!(
            heard(&drain(&mut w), "Bob"),
            ["[18:00] Public Event: Carol doubled. Multiplier x2."]
        );
        for action in ["double", "no_double"] {
            let out = act(&mut l, &mut w, "Carol", action);
            assert_eq!(
                out,
                Outcome::fail(ActionResult::error("already_acted"), format!("Carol {action} failed"))
            );
            assert_eq!(heard(&drain(&mut w), "Carol"), ["You already acted in doubling stage."]);
        }
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Dave"));
        let out = act(&mut l, &mut w, "Dave", "no_double");
        assert_eq!(
            out,
            Outcome::ok(ActionResult::Doubled { double: false }, "Dave declined doubling", true)
        );
        assert_eq!(
            heard(&drain(&mut w), "Alice"),
            ["[18:00] Public Event: Dave declined to double."]
        );
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
            [
                "[18:00] Public Event: Bob doubled. Multiplier x2.",
                "[18:00] Public Event: Doubling finished. Game starts."
            ]
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
        assert_eq!(
            evaluate(&cards("7 7 7 7 7 7 7 7"), true),
            Some(m(Bomb, "7", 8, None, None))
        );
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
        assert!(
            !can_beat(&combo(Pair, "A", 2), &combo(Single, "3", 1)),
            "type must match"
        );
        assert!(
            !can_beat(&combo(Straight, "A", 6), &combo(Straight, "7", 5)),
            "length must match"
        );
        assert!(can_beat(&combo(Straight, "8", 5), &combo(Straight, "7", 5)));
        assert!(can_beat(&combo(AirplanePairs, "5", 10), &combo(AirplanePairs, "4", 10)));
    }

    #[test]
    fn a_trick_ends_when_everyone_else_passes() {
        let (mut l, mut w) = table(1, 2);
        playing(&mut l, "Alice", ["3 3 9 K", "4 8", "5 10", "6 8"]);
        let out = act(&mut l, &mut w, "Alice", "pass");
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("cannot_pass_lead"), "Alice pass failed")
        );
        assert_eq!(heard(&drain(&mut w), "Alice"), ["You must lead; cannot pass."]);

        play(&mut l, &mut w, "Alice", "3 3");
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
        let lead = l.state.leading_combo.clone().unwrap();
        assert_eq!((lead.combo.kind, lead.owner.as_str()), (ComboType::Pair, "Alice"));
        let out = act(&mut l, &mut w, "Bob", "pass");
        assert_eq!(
            out,
            Outcome::ok(ActionResult::Passed { pass: true }, "Bob passed", true)
        );
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Carol"));
        act(&mut l, &mut w, "Carol", "pass");
        assert_eq!(l.state.passes_since_play, 2);
        drain(&mut w);
        act(&mut l, &mut w, "Dave", "pass");
        assert_eq!(
            heard(&drain(&mut w), "Bob"),
            [
                "[18:00] Public Event: Dave passed.",
                "[18:00] Public Event: Trick ends. Alice leads next."
            ]
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
        assert_eq!(
            heard(&drain(&mut w), "Dave").last().unwrap(),
            "You cannot pass right now."
        );
    }

    #[test]
    fn the_landlord_going_out_untouched_is_a_spring() {
        let (mut l, mut w) = table(1, 2);
        playing(&mut l, "Alice", ["3 3", "4", "5", "6"]);
        l.state.score_multiplier = 2;
        let out = play(&mut l, &mut w, "Alice", "3 3");
        assert_eq!(
            out,
            Outcome::ok(
                ActionResult::Played {
                    played: vec!["3".into(), "3".into()],
                    win: true
                },
                "Alice played: 3 3 (pair), remaining: (empty) [WIN]",
                true
            )
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
        assert_eq!(
            heard(&drain(&mut w), "Bob").last().unwrap(),
            "[18:00] Public Event: Game over. Winner: landlord (x1)."
        );
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
        let cases = [
            (
                "3 3",
                "wrong_phase",
                "You can only play during the playing phase.",
                "3 3",
            ),
            (
                "",
                "wrong_phase",
                "You can only play during the playing phase.",
                "(none)",
            ),
        ];
        for (given, code, feedback, tried) in cases {
            let out = play(&mut l, &mut w, "Bob", given);
            assert_eq!(
                out,
                Outcome::fail(
                    ActionResult::error(code),
                    format!("Bob tried: {tried} -> {code} | remaining: {remaining}")
                )
            );
            assert_eq!(heard(&drain(&mut w), "Bob"), [feedback]);
        }

        let bob = "2 3 K 3 BJ 10";
        playing(&mut l, "Alice", ["9 9 J", bob, "5", "6"]);
        play(&mut l, &mut w, "Alice", "9 9");
        drain(&mut w);
        let cases = [
            ("  ", "missing_cards", "Provide cards to play.", "(none)"),
            ("3 X3", "unknown_token", "Unknown card token: X3", "3 X3"),
            ("K K", "not_in_hand", "You don't have those cards.", "K K"),
            ("4", "not_in_hand", "You don't have those cards.", "4"),
            ("3 10", "invalid_combo", "Invalid combination.", "3 10"),
            (
                "3\t3",
                "not_beating",
                "Your play does not beat the current lead.",
                "3 3",
            ),
            ("BJ", "not_beating", "Your play does not beat the current lead.", "BJ"),
        ];
        for (given, code, feedback, tried) in cases {
            let out = play(&mut l, &mut w, "Bob", given);
            assert_eq!(
                out,
                Outcome::fail(
                    ActionResult::error(code),
                    format!("Bob tried: {tried} -> {code} | remaining: {remaining}")
                ),
                "{given:?}"
            );
            assert!(!out.pass_control);
            assert_eq!(heard(&drain(&mut w), "Bob"), [feedback]);
        }
        // A missing <cards> field is the same as an empty one.
        let out = act(&mut l, &mut w, "Bob", "play_cards");
        assert_eq!(out.result_json(), json!({"error": "missing_cards"}));

        // Success: the broadcast repeats the cards as written, the summary lists what is left.
        l.state.current_turn = 1;
        l.state.leading_combo = None;
        drain(&mut w);
        let out = play(&mut l, &mut w, "Bob", "3  3");
        assert_eq!(
            out,
            Outcome::ok(
                ActionResult::Played {
                    played: vec!["3".into(), "3".into()],
                    win: false
                },
                "Bob played: 3 3 (pair), remaining: 10 K 2 BJ",
                true
            )
        );
        assert_eq!(
            heard(&drain(&mut w), "Carol"),
            ["[18:00] Public Event: Bob played: 3  3 (pair)."]
        );
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
        assert_eq!(
            heard(&drain(&mut w), "Dave").last().unwrap(),
            "[18:00] Public Event: Bob played: SJ BJ (rocket)."
        );
    }

    #[test]
    fn one_message_per_turn_until_post_turn() {
        let (mut l, mut w) = table(1, 2);
        let msg = |text: &str| ActionCall::new("send_message").with("message", text);
        let out = act_with(&mut l, &mut w, "Alice", msg("hi"));
        assert_eq!(
            out,
            Outcome::ok(ActionResult::Message { message: "hi".into() }, "Alice: hi", false)
        );
        assert_eq!(heard(&drain(&mut w), "Bob"), ["[18:00] [Message] Alice: hi"]);
        let out = act_with(&mut l, &mut w, "Alice", msg("again"));
        assert_eq!(
            out,
            Outcome::fail(ActionResult::error("message_already_sent"), "Alice extra chat blocked")
        );
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
        assert_eq!(
            fresh.status_prompt(&agent("Alice")),
            "--- Status ---\nPhase: init\nMultiplier: x1\nHand: (empty)\n"
        );
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
        l.state.rob_acted = [("Alice", false), ("Bob", false), ("Dave", true)]
            .map(|(n, a)| (n.to_string(), a))
            .into_iter()
            .collect();
        assert_eq!(
            l.controlled_next(&w).as_deref(),
            Some("Alice"),
            "wraps past the acted seat"
        );
        l.state.rob_acted.insert("Alice".into(), true);
        assert_eq!(l.controlled_next(&w).as_deref(), Some("Bob"));
        l.state.rob_acted.insert("Bob".into(), true);
        assert_eq!(l.controlled_next(&w), None);

        l.state.phase = Phase::Doubling;
        l.state.doubling_order = vec!["Carol".into(), "Dave".into()];
        l.state.doubling_acted = [("Carol", true), ("Dave", false)]
            .map(|(n, a)| (n.to_string(), a))
            .into_iter()
            .collect();
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

        let patch = json!({"phase": "doubling", "score_multiplier": 16})
            .as_object()
            .unwrap()
            .clone();
        scene.patch_state(&patch).unwrap();
        assert_eq!(scene.state_json()["phase"], "doubling");
        let bad = json!({"phase": "lunch"}).as_object().unwrap().clone();
        assert!(scene.patch_state(&bad).is_err());
        let bad = json!({"hands": {"Bob": {"3": 9}}}).as_object().unwrap().clone();
        assert!(
            scene
                .patch_state(&bad)
                .unwrap_err()
                .to_string()
                .contains("Bob holds 9 cards of rank 3")
        );
        let bad = json!({"hands": {"Bob": {"X": 1}}}).as_object().unwrap().clone();
        assert!(scene.patch_state(&bad).is_err());
    }

    #[test]
    fn prompt_text_names_the_game_and_avoids_other_scenes_trigger_words() {
        for decks in [1, 2] {
            let l = Landlord::new("l".into(), "e".into(), Config { num_decks: decks }).unwrap();
            let text = l.text();
            let mut all = format!("{}\n{}", text.description, text.guidelines);
            for spec in [CALL_LANDLORD, ROB_LANDLORD, PASS, PLAY_CARDS, DOUBLE, NO_DOUBLE] {
                all.push_str(spec.desc);
                all.push_str(spec.instruction);
            }
            let low = all.to_lowercase();
            assert_eq!(crate::llm::mock::trigger_words_in(&low), ["dou dizhu", "landlord"]);
            assert!(!low.contains("you are"));
            let (per, bottom) = if decks == 1 {
                ("13 cards", "last 2")
            } else {
                ("25 cards", "last 8")
            };
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

    fn scenario() -> Scenario {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/scenarios/landlord.json");
        Scenario::load_file(std::path::Path::new(path)).unwrap()
    }

    fn summaries(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter(|e| e.kind == EventType::ActionEnd)
            .map(|e| e.data["summary"].as_str().unwrap_or("-").to_string())
            .collect()
    }

    #[test]
    fn the_scenario_file_builds_a_dealt_table() {
        let s = scenario();
        assert_eq!((s.max_steps_per_turn, s.default_turns), (3, 200));
        let sim = s.build(Some(1)).unwrap();
        let Scene::Landlord(l) = &sim.scene else { panic!() };
        assert_eq!(l.config.num_decks, 2);
        assert_eq!(l.state.players, NAMES);
        for a in &sim.world.agents {
            assert_eq!(a.action_space[0], ActionKind::Yield);
            assert_eq!(a.action_space.len(), 8);
        }
        let texts: Vec<&str> = sim
            .world
            .pending
            .iter()
            .map(|e| e.data["text"].as_str().unwrap())
            .collect();
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
            let mut s = scenario();
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
}
