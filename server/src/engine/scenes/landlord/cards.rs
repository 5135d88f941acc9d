//! The cards of the landlord table: ranks, hands, and which plays are legal combinations and
//! what beats what (spec §1.10.4 rules 1–13).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

    pub(crate) fn token(self) -> &'static str {
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
    pub(crate) fn parse(token: &str) -> Option<Rank> {
        Rank::ALL.into_iter().find(|r| r.token() == token)
    }

    pub(crate) fn value(self) -> u8 {
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
    pub(crate) fn as_str(self) -> &'static str {
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
    pub(crate) kind: ComboType,
    /// The rank that decides comparisons (the highest of a sequence, the quad of a four-with-two).
    pub(crate) key: Rank,
    /// Number of cards.
    pub(crate) len: u32,
    /// Number of triples in a triple sequence or an airplane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) m: Option<u32>,
    /// Highest attached pair of an airplane with pairs (informational only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pair_top: Option<Rank>,
}

pub(super) fn hand_tokens(hand: &Hand) -> Vec<&'static str> {
    hand.iter().flat_map(|(r, &c)| std::iter::repeat_n(r.token(), c as usize)).collect()
}

pub(super) fn count_ranks(cards: &[Rank]) -> BTreeMap<Rank, u32> {
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
pub(crate) fn evaluate(cards: &[Rank], two_decks: bool) -> Option<Combo> {
    let n = cards.len();
    let counts = count_ranks(cards);
    let ranks: Vec<Rank> = counts.keys().copied().collect();
    let with = |count: u32| -> Vec<Rank> { counts.iter().filter(|(_, c)| **c == count).map(|(r, _)| *r).collect() };
    let combo =
        |kind, key, m: Option<usize>, pair_top| Combo { kind, key, len: n as u32, m: m.map(|m| m as u32), pair_top };

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
pub(crate) fn can_beat(new: &Combo, lead: &Combo) -> bool {
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
