//! The landlord table's state as it is stored and patched: phase, bidding stage, teams, the
//! trick's lead, the scene configuration, and the hands (checked when read).

use indexmap::IndexMap;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use super::SceneError;
use super::cards::{Combo, Hand, Rank};

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
    pub(crate) fn as_str(self) -> &'static str {
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
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Team::Landlord => "landlord",
            Team::Farmers => "farmers",
        }
    }
}

/// The combination to beat in the current trick, and who played it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lead {
    #[serde(flatten)]
    pub(crate) combo: Combo,
    pub(crate) owner: String,
}

/// Scene configuration in a scenario file. The shuffle uses the simulator's seeded RNG (the
/// scenario's `seed`), so there is no `seed` key here.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// 1 (54 cards: 13 each, 2 bottom) or 2 (108 cards: 25 each, 8 bottom).
    #[serde(default = "one_deck", deserialize_with = "deck_count")]
    pub(crate) num_decks: u8,
}

impl Default for Config {
    fn default() -> Self {
        Config { num_decks: 1 }
    }
}

fn one_deck() -> u8 {
    1
}

pub(super) fn check_decks(n: u64) -> Result<u8, SceneError> {
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
            return Err(D::Error::custom(format!("{name} holds {c} cards of rank {}; at most 8 exist", r.token())));
        }
    }
    Ok(hands)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub(crate) time: i64,
    pub(crate) phase: Phase,
    /// Agent names in seat order (set by `pre_run`).
    pub(crate) players: Vec<String>,
    /// Bottom cards in dealt order; they stay listed after joining the landlord's hand.
    pub(crate) bottom: Vec<Rank>,
    /// Each player's cards. Counts above 8 (two full decks) are rejected when the state is read, so
    /// a patch cannot make a hand that takes gigabytes to print.
    #[serde(deserialize_with = "checked_hands")]
    pub(crate) hands: IndexMap<String, Hand>,
    pub(crate) bidding_stage: Stage,
    /// Seat whose turn it is to call; in the rob stage, where the search for the next robber starts.
    pub(crate) bid_turn_index: usize,
    pub(crate) landlord_candidate: Option<String>,
    pub(crate) landlord: Option<String>,
    pub(crate) farmers: Vec<String>,
    /// Seat whose turn it is while playing.
    pub(crate) current_turn: usize,
    pub(crate) leading_combo: Option<Lead>,
    pub(crate) passes_since_play: u32,
    pub(crate) score_multiplier: u64,
    pub(crate) rob_eligible: Vec<String>,
    pub(crate) rob_acted: IndexMap<String, bool>,
    /// Whether each player has played any cards (spring / counter-spring).
    pub(crate) played_flags: IndexMap<String, bool>,
    /// Whether each player has already sent its one message this turn.
    pub(crate) turn_msg_used: IndexMap<String, bool>,
    pub(crate) doubling_order: Vec<String>,
    pub(crate) doubling_acted: IndexMap<String, bool>,
    pub(crate) complete: bool,
    pub(crate) winner_team: Option<Team>,
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
