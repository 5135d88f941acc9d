//! The scripted player: an offline, deterministic player that reads what an agent's prompt
//! shows — its action catalogue, the scene's status lines and what it has heard — and answers with
//! a legal action in the engine's strict response format, so that every built-in game reaches its
//! end without a model: werewolf (night kills, inspections, potions, talk, lynch votes, the
//! moderator's vote), landlord (calling, robbing, doubling, plays that beat the lead, passing),
//! council (debate, a voting round, votes, adjournment), village (looking, moving, gathering,
//! resting) and chat rooms.
//!
//! Like the mock, it keeps nothing of its own: its choices are drawn from a hash of the
//! simulator's seed ([`LlmState::seed`]), the agent's name and the prompt, so the same simulator
//! state always gets the same answer (a clone continues exactly as the original, a replay matches)
//! and two seeds play two different games. It only reads the prompt, as a model would; where the
//! prompt leaves something out (a werewolf player is never told who the moderator is) it relies
//! on the built-in scenarios' conventions, named where they are used.
//!
//! Prompts without an action catalogue (a council brief) get the mock's plain reply. It lives in
//! the engine because it plays the engine's games with the engine's own parser and hand rules;
//! the client that serves it as the `scripted` dialect (with the mock's answers to structured and
//! tool requests) is built above, in `crate::backend`.

use crate::engine::parse::{self, ActionCall};
use crate::engine::scenes::landlord::{Combo, ComboType, Rank, can_beat, evaluate};
use crate::llm::chat::{Message, Role};
use crate::llm::{LlmState, mock};

/// The scripted answer to one agent prompt (see the module docs).
pub fn reply(messages: &[Message], state: &mut LlmState) -> String {
    let system = messages.iter().find(|m| m.role == Role::System).map_or("", |m| m.content.as_ref());
    let catalogue = catalogue(system);
    if catalogue.is_empty() {
        return mock::reply(messages, state);
    }
    let me = mock::extract_name(system);
    let t = Transcript::new(messages, &me, state.seed, catalogue, system);
    let has = |a: &str| t.can(a);
    let (thought, call) = if crate::engine::scenes::custom::marks(system) {
        custom(&t, system)
    } else if has("open_voting") || has("vote_lynch") || has("night_kill") {
        werewolf(&t)
    } else if has("call_landlord") || has("play_cards") {
        landlord(&t)
    } else if has("start_voting") || has("vote") {
        council(&t)
    } else if has("look_around") || has("move_to_location") {
        village(&t)
    } else {
        chat(&t)
    };
    respond(thought, &call)
}

/// The action names listed under "Available Actions:" in the system prompt.
fn catalogue(system: &str) -> Vec<String> {
    let Some(start) = system.find("Available Actions:\n") else {
        return Vec::new();
    };
    system[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("- "))
        .filter_map(|l| l[2..].split(':').next().map(|n| n.trim().to_string()))
        .collect()
}

/// A well-formed response with one action and no plan change.
fn respond(thought: &str, call: &ActionCall) -> String {
    let xml = if call.fields.is_empty() {
        format!("<Action name=\"{}\" />", call.name)
    } else {
        let body: String = call.fields.iter().map(|(k, v)| format!("<{k}>{}</{k}>", xml_escape(v))).collect();
        format!("<Action name=\"{}\">{body}</Action>", call.name)
    };
    format!(
        "--- Thoughts ---\n{thought}\n\n--- Plan ---\n1. {thought} [CURRENT]\n\n--- Action ---\n{xml}\n\n--- Plan Update ---\nno change\n"
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// What an agent has seen, line by line, and what it did, in order.
#[derive(Debug)]
enum Item {
    Heard(String),
    Did(ActionCall),
}

/// The prompt as the policy reads it.
struct Transcript {
    me: String,
    items: Vec<Item>,
    catalogue: Vec<String>,
    /// Hash of the seed, the name and the prompt: the base of every choice of this decision.
    base: u64,
    two_decks: bool,
}

impl Transcript {
    fn new(messages: &[Message], me: &str, seed: u64, catalogue: Vec<String>, system: &str) -> Self {
        let mut items = Vec::new();
        let mut h = Fnv::new();
        h.write(&seed.to_le_bytes());
        h.write(me.as_bytes());
        for m in messages.iter().filter(|m| m.role != Role::System) {
            h.write(m.content.as_bytes());
            match m.role {
                Role::Assistant => {
                    let action = parse::split_sections(&m.content).action;
                    if let Ok(Some(call)) = parse::parse_action(action) {
                        items.push(Item::Did(call));
                    }
                }
                _ => items.extend(m.content.lines().map(|l| Item::Heard(l.trim().to_string()))),
            }
        }
        Transcript {
            me: me.to_string(),
            items,
            catalogue,
            base: h.finish(),
            // The two-deck table's description says so; a hand never shows more than 4 of a
            // rank with one deck.
            two_decks: system.contains("(108 cards)"),
        }
    }

    fn can(&self, action: &str) -> bool {
        self.catalogue.iter().any(|a| a == action)
    }

    /// A deterministic number in `0..n` for the choice named `salt` (0 when `n` is 0).
    fn pick(&self, salt: &str, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let mut h = Fnv(self.base);
        h.write(salt.as_bytes());
        (h.finish() % n as u64) as usize
    }

    /// A deterministic fraction in `[0, 1)` for the choice named `salt`.
    fn chance(&self, salt: &str) -> f64 {
        self.pick(salt, 1_000_000) as f64 / 1_000_000.0
    }

    fn heard(&self) -> impl DoubleEndedIterator<Item = (usize, &str)> {
        self.items.iter().enumerate().filter_map(|(i, it)| match it {
            Item::Heard(l) => Some((i, l.as_str())),
            Item::Did(_) => None,
        })
    }

    /// Index of the last heard line containing `needle`.
    fn last_heard(&self, needle: &str) -> Option<usize> {
        self.heard().rev().find(|(_, l)| l.contains(needle)).map(|(i, _)| i)
    }

    /// The rest of the last heard line that starts with `prefix` (after any `[hh:mm]` time).
    fn field(&self, prefix: &str) -> Option<&str> {
        self.heard().rev().find_map(|(_, l)| untimed(l).strip_prefix(prefix)).map(str::trim)
    }

    /// The actions this agent took after item `since`.
    fn did_since(&self, since: usize) -> impl Iterator<Item = &ActionCall> {
        self.items[since.min(self.items.len())..].iter().filter_map(|it| match it {
            Item::Did(c) => Some(c),
            Item::Heard(_) => None,
        })
    }

    fn ever_did(&self, action: &str) -> bool {
        self.did_since(0).any(|c| c.name == action)
    }

    /// Whether the agent has just spoken this turn: its last action is speech and it has heard
    /// nothing since but its own words (or the engine's "Continue." nudge). Then it yields.
    fn just_spoke(&self) -> bool {
        let Some(last) = self.items.iter().rposition(|it| matches!(it, Item::Did(_))) else {
            return false;
        };
        let Item::Did(call) = &self.items[last] else {
            return false;
        };
        let echo = format!("{}: ", self.me);
        matches!(call.name.as_str(), "speak" | "send_message")
            && self.items[last + 1..].iter().all(|it| match it {
                Item::Heard(l) => l.is_empty() || l == "Continue." || l.contains(&echo),
                Item::Did(_) => false,
            })
    }

    /// The speech action this agent has (`speak` in werewolf, `send_message` elsewhere).
    fn say(&self, message: String) -> ActionCall {
        let name = if self.can("speak") { "speak" } else { "send_message" };
        ActionCall::new(name).with("message", message)
    }
}

/// A line without its leading `[hh:mm] ` time and the label of a public announcement.
fn untimed(line: &str) -> &str {
    let rest = match line.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((t, rest)) if t.len() <= 6 && t.contains(':') => rest,
        _ => line,
    };
    ["Public Event: ", "Event: ", "System: "].into_iter().find_map(|p| rest.strip_prefix(p)).unwrap_or(rest)
}

/// FNV-1a: a small hash that is the same on every platform and Rust version.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        // A final avalanche so that nearby inputs spread over the whole range.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn yield_() -> ActionCall {
    ActionCall::new("yield")
}

// ---------------------------------------------------------------------------------------------
// werewolf

/// The players announced in the opening "Participants: A, B, C." line.
fn participants(t: &Transcript) -> Vec<String> {
    let Some((_, line)) = t.heard().find(|(_, l)| l.contains("Participants: ")) else {
        return Vec::new();
    };
    let list = &line[line.find("Participants: ").map_or(0, |i| i + "Participants: ".len())..];
    let mut names: Vec<String> = list.split(", ").map(|n| n.trim().to_string()).collect();
    if let Some(last) = names.last_mut()
        && let Some(i) = last.find('.')
    {
        last.truncate(i);
    }
    names.retain(|n| !n.is_empty());
    names
}

/// Players announced dead at dawn or by a lynch.
fn werewolf_dead(t: &Transcript) -> Vec<String> {
    let mut dead = Vec::new();
    for (_, l) in t.heard() {
        let l = untimed(l);
        if let Some(rest) = l.split("At dawn, ").nth(1)
            && let Some(name) = rest.strip_suffix(" was found dead.")
        {
            dead.push(name.to_string());
        }
        if let Some(rest) = l.split("multiple bodies were found: ").nth(1) {
            dead.extend(rest.split(", ").map(|n| n.trim_end_matches('.').to_string()));
        }
        if let Some(rest) = l.split("By vote, ").nth(1)
            && let Some((name, _)) = rest.split_once(" was lynched.")
        {
            dead.push(name.to_string());
        }
    }
    dead
}

/// The built-in scenarios call the game master "Moderator"; players are never told otherwise.
fn is_moderator_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("moderator")
}

fn werewolf(t: &Transcript) -> (&'static str, ActionCall) {
    if t.can("open_voting") || t.can("close_voting") {
        return moderate(t);
    }
    let dead = werewolf_dead(t);
    let living: Vec<String> =
        participants(t).into_iter().filter(|n| !dead.contains(n) && !is_moderator_name(n) && *n != t.me).collect();
    let Some(phase_line) = t.heard().rev().find_map(|(_, l)| l.strip_prefix("Phase: ")) else {
        return ("Nothing to do yet.", yield_());
    };
    let phase_line = phase_line.to_string();
    // "night (day 2)" is written only during that night, so its first line starts the phase.
    let start = t.heard().find(|(_, l)| l.strip_prefix("Phase: ") == Some(phase_line.as_str())).map_or(0, |(i, _)| i);
    let day: i64 = phase_line.split("(day ").nth(1).and_then(|r| r.trim_end_matches(')').parse().ok()).unwrap_or(0);
    let acted = |names: &[&str]| t.did_since(start).any(|c| names.contains(&c.name.as_str()));
    // Wolves know each other from the first night's talk and from the kill votes they hear.
    let mut wolves: Vec<String> = t
        .heard()
        .filter_map(|(_, l)| {
            let l = untimed(l);
            l.split_once(": I am ")
                .filter(|(_, rest)| rest.contains("one of the wolves"))
                .map(|(n, _)| n.to_string())
                .or_else(|| l.split_once(" voted night kill to ").map(|(n, _)| n.to_string()))
        })
        .collect();
    if t.can("night_kill") {
        wolves.push(t.me.clone());
    }
    let seer_finds: Vec<(String, bool)> = t
        .heard()
        .filter_map(|(_, l)| {
            let rest = untimed(l).strip_prefix("Inspection result: ")?;
            let (name, verdict) = rest.split_once(" is ")?;
            Some((name.to_string(), verdict.starts_with("a werewolf")))
        })
        .collect();
    let known_wolf = seer_finds.iter().find(|(n, w)| *w && living.contains(n)).map(|(n, _)| n.clone());

    if phase_line.starts_with("night") {
        if t.can("night_kill") {
            if day == 0 {
                if acted(&["speak"]) {
                    return ("The wolves know each other now.", yield_());
                }
                let msg = format!("I am {}, one of the wolves.", t.me);
                return ("No kill on the first night; make myself known to the pack.", t.say(msg));
            }
            if acted(&["night_kill"]) {
                return ("My kill vote is cast.", yield_());
            }
            // Follow a fellow wolf's vote tonight, so the pack agrees (it may come before this
            // wolf's first status line of the night).
            let dusk = t.last_heard("Night begins.").unwrap_or(0);
            let tonight = t.items[dusk..].iter().rev().find_map(|it| match it {
                Item::Heard(l) => {
                    untimed(l).split_once(" voted night kill to ").map(|(_, v)| v.trim_end_matches('.').to_string())
                }
                Item::Did(_) => None,
            });
            let prey: Vec<&String> = living.iter().filter(|n| !wolves.contains(n)).collect();
            let target = tonight
                .filter(|v| prey.contains(&v))
                .or_else(|| prey.get(t.pick("prey", prey.len())).map(|s| s.to_string()));
            return match target {
                Some(v) => ("Vote with the pack.", ActionCall::new("night_kill").with("target", v)),
                None => ("No prey left.", yield_()),
            };
        }
        if t.can("inspect") {
            if acted(&["inspect"]) {
                return ("I have looked tonight.", yield_());
            }
            let unseen: Vec<&String> = living.iter().filter(|n| !seer_finds.iter().any(|(s, _)| s == *n)).collect();
            return match unseen.get(t.pick("inspect", unseen.len())) {
                Some(n) => ("Look into someone new.", ActionCall::new("inspect").with("target", *n)),
                None => ("Everyone is known.", yield_()),
            };
        }
        if t.can("witch_save") || t.can("witch_poison") {
            if acted(&["witch_save", "witch_poison"]) {
                return ("My potion is prepared.", yield_());
            }
            let victim = t.field("Tonight's victim:").filter(|v| *v != "none");
            if victim.is_some() && t.can("witch_save") && !t.ever_did("witch_save") {
                return ("Rescue tonight's victim.", ActionCall::new("witch_save"));
            }
            if day >= 2 && t.can("witch_poison") && !t.ever_did("witch_poison") && t.chance("poison") < 0.5 {
                let target = known_wolf.clone().or_else(|| living.get(t.pick("poison-target", living.len())).cloned());
                if let Some(target) = target {
                    return ("Poison a suspect.", ActionCall::new("witch_poison").with("target", target));
                }
            }
            return ("Keep my potions.", yield_());
        }
        return ("Sleep through the night.", yield_());
    }

    if phase_line.starts_with("day_discussion") {
        if acted(&["speak"]) || t.just_spoke() {
            return ("I have said my piece.", yield_());
        }
        let suspect = living.get(t.pick("suspect", living.len())).cloned().unwrap_or_default();
        let msg = match (&known_wolf, t.can("inspect")) {
            (Some(w), true) => format!("I am the Seer: {w} is a werewolf."),
            _ if suspect.is_empty() => "I have nothing to add.".to_string(),
            _ => format!("I do not trust {suspect}."),
        };
        return ("Share a suspicion.", t.say(msg));
    }

    // day_voting
    if t.field("Vote:").is_some_and(|v| v != "none") || acted(&["vote_lynch"]) {
        return ("My vote is in.", yield_());
    }
    let votes_today: Vec<(String, String)> = t.items[start..]
        .iter()
        .filter_map(|it| match it {
            Item::Heard(l) => {
                let (voter, target) = untimed(l).split_once(" voted to lynch ")?;
                Some((voter.to_string(), target.trim_end_matches('.').to_string()))
            }
            Item::Did(_) => None,
        })
        .collect();
    let alive = |n: &String| living.contains(n);
    let target = if t.can("night_kill") {
        let pack = votes_today
            .iter()
            .find(|(v, tg)| wolves.contains(v) && alive(tg) && !wolves.contains(tg))
            .map(|(_, tg)| tg.clone());
        let prey: Vec<&String> = living.iter().filter(|n| !wolves.contains(n)).collect();
        pack.or_else(|| prey.get(t.pick("lynch", prey.len())).map(|s| s.to_string()))
    } else {
        // The Seer's claim, else the day's front-runner, else a guess.
        let claimed = t.heard().rev().find_map(|(_, l)| {
            let rest = l.split("I am the Seer: ").nth(1)?;
            rest.strip_suffix(" is a werewolf.").map(str::to_string)
        });
        let mut tally: Vec<(String, usize)> = Vec::new();
        for (_, tg) in votes_today.iter().filter(|(_, tg)| alive(tg)) {
            match tally.iter_mut().find(|(n, _)| n == tg) {
                Some((_, c)) => *c += 1,
                None => tally.push((tg.clone(), 1)),
            }
        }
        let leader = tally.iter().max_by_key(|(_, c)| *c).map(|(n, _)| n.clone());
        known_wolf
            .clone()
            .or(claimed.filter(alive))
            .or(leader)
            .or_else(|| living.get(t.pick("lynch", living.len())).cloned())
    };
    match target {
        Some(v) => ("Vote for the likeliest wolf.", ActionCall::new("vote_lynch").with("target", v)),
        None => ("No one to vote for.", yield_()),
    }
}

/// The moderator opens the vote on its first turn after dawn (the discussion round comes first in
/// the built-in turn order) and closes it on the next.
fn moderate(t: &Transcript) -> (&'static str, ActionCall) {
    let dawn = t.last_heard("The night ends.");
    let open = t.last_heard("Voting is now open.");
    let night = t.last_heard("Night begins.");
    let latest = [dawn, open, night].into_iter().flatten().max();
    if latest.is_some() && latest == dawn && t.can("open_voting") {
        return ("The discussion has run; open the vote.", ActionCall::new("open_voting"));
    }
    if latest.is_some() && latest == open && t.can("close_voting") {
        return ("Everyone has had a turn to vote; close it.", ActionCall::new("close_voting"));
    }
    ("Let the night run.", yield_())
}

// ---------------------------------------------------------------------------------------------
// landlord

/// A hand as rank counts, from the status line's tokens.
fn parse_hand(text: &str) -> Vec<(Rank, u32)> {
    let mut hand: Vec<(Rank, u32)> = Vec::new();
    for r in text.split_whitespace().filter_map(Rank::parse) {
        match hand.iter_mut().find(|(x, _)| *x == r) {
            Some((_, c)) => *c += 1,
            None => hand.push((r, 1)),
        }
    }
    hand.sort();
    hand
}

/// How strong a hand is for bidding: high cards and bombs.
fn strength(hand: &[(Rank, u32)]) -> u32 {
    hand.iter()
        .map(|&(r, c)| {
            let high = match r {
                Rank::BJ => 3 * c,
                Rank::SJ => 2 * c,
                Rank::Two => 2 * c,
                Rank::A => c,
                _ => 0,
            };
            high + if c >= 4 { 3 } else { 0 }
        })
        .sum()
}

/// Every play of the kinds the policy uses that `hand` can make, checked by the scene's own rules.
fn candidates(hand: &[(Rank, u32)], two_decks: bool) -> Vec<(Vec<Rank>, Combo)> {
    let count = |r: Rank| hand.iter().find(|(x, _)| *x == r).map_or(0, |(_, c)| *c);
    let mut plays: Vec<Vec<Rank>> = Vec::new();
    for &(r, c) in hand {
        for n in 1..=c.min(3) {
            plays.push(vec![r; n as usize]);
        }
        if c >= 4 {
            plays.push(vec![r; 4]);
        }
        if two_decks && c >= 8 {
            plays.push(vec![r; 8]);
        }
        if c >= 3 {
            for &(s, sc) in hand.iter().filter(|(s, _)| *s != r) {
                plays.push([vec![r; 3], vec![s]].concat());
                if sc >= 2 {
                    plays.push([vec![r; 3], vec![s; 2]].concat());
                }
            }
        }
    }
    // Sequences: straights (5+ singles), pair sequences (3+ pairs), triple sequences (2+).
    let seq: Vec<Rank> = Rank::ALL.into_iter().filter(|r| !matches!(r, Rank::Two | Rank::SJ | Rank::BJ)).collect();
    for (width, min_len) in [(1u32, 5usize), (2, 3), (3, 2)] {
        for start in 0..seq.len() {
            let mut run = Vec::new();
            for &r in &seq[start..] {
                if count(r) < width {
                    break;
                }
                run.extend(std::iter::repeat_n(r, width as usize));
                if run.len() / width as usize >= min_len {
                    plays.push(run.clone());
                }
            }
        }
    }
    if count(Rank::SJ) >= 1 && count(Rank::BJ) >= 1 {
        plays.push(vec![Rank::SJ, Rank::BJ]);
    }
    plays.into_iter().filter_map(|p| evaluate(&p, two_decks).map(|c| (p, c))).collect()
}

fn is_bomb(c: &Combo) -> bool {
    matches!(c.kind, ComboType::Bomb | ComboType::Rocket)
}

fn cards_text(cards: &[Rank]) -> String {
    cards.iter().map(|r| r.token()).collect::<Vec<_>>().join(" ")
}

fn landlord(t: &Transcript) -> (&'static str, ActionCall) {
    let phase = t.field("Phase:").unwrap_or("");
    let hand = parse_hand(t.field("Hand:").unwrap_or(""));
    let power = strength(&hand);
    match phase {
        "bidding" => {
            let deal = t.last_heard("New deal.").unwrap_or(0);
            let robbing = t.heard().any(|(i, l)| i > deal && l.contains(" called the landlord."));
            if robbing {
                if power >= 10 && t.chance("rob") < 0.5 && t.can("rob_landlord") {
                    return ("My hand is strong; rob the seat.", ActionCall::new("rob_landlord"));
                }
                return ("Let the caller keep it.", ActionCall::new("pass"));
            }
            // A weak table would redeal forever; the bar drops with each silent deal.
            let redeals = t.heard().filter(|(_, l)| l.contains("No one called.")).count() as u32;
            let bar = 8u32.saturating_sub(2 * redeals);
            if power >= bar || t.chance("call") < 0.25 {
                return ("Worth calling.", ActionCall::new("call_landlord"));
            }
            ("Too weak to call.", ActionCall::new("pass"))
        }
        "doubling" => {
            if power >= 12 && t.chance("double") < 0.6 {
                ("Raise the stakes.", ActionCall::new("double"))
            } else {
                ("Keep the stakes.", ActionCall::new("no_double"))
            }
        }
        "playing" => play(t, &hand),
        _ => ("Nothing to do.", yield_()),
    }
}

/// The current lead (cards and owner), when a trick is under way.
fn current_lead(t: &Transcript) -> Option<(Vec<Rank>, String)> {
    t.heard().rev().find_map(|(_, l)| {
        let l = untimed(l);
        if l.starts_with("Trick ends.") || l.starts_with("Doubling finished.") || l.starts_with("New deal.") {
            return Some(None);
        }
        let (owner, rest) = l.split_once(" played: ")?;
        let cards = rest.rsplit_once(" (").map_or(rest, |(c, _)| c);
        Some(Some((cards.split_whitespace().filter_map(Rank::parse).collect(), owner.to_string())))
    })?
}

fn play(t: &Transcript, hand: &[(Rank, u32)]) -> (&'static str, ActionCall) {
    let options = candidates(hand, t.two_decks);
    let play_of = |cards: &[Rank]| ActionCall::new("play_cards").with("cards", cards_text(cards));
    let landlord = t.field("Landlord is").and_then(|r| r.split('.').next()).map(str::to_string);
    let lead = current_lead(t).filter(|(_, owner)| *owner != t.me);
    let Some((cards, owner)) = lead else {
        // Lead: get rid of the lowest rank in the longest shape that holds it, bombs kept back.
        let Some(&(low, _)) = hand.first() else {
            return ("No cards left.", yield_());
        };
        let best = options
            .iter()
            .filter(|(p, c)| p.contains(&low) && !is_bomb(c))
            .max_by_key(|(p, c)| (p.len(), std::cmp::Reverse(c.key)));
        return match best {
            Some((p, _)) => ("Lead with my lowest cards.", play_of(p)),
            None => ("Lead a single.", play_of(&[low])),
        };
    };
    let Some(lead) = evaluate(&cards, t.two_decks) else {
        return ("I cannot read the lead; pass.", ActionCall::new("pass"));
    };
    let partner = landlord.as_deref().is_some_and(|l| l != t.me && l != owner);
    if partner && t.chance("let-partner") < 0.8 {
        return ("My partner holds the trick.", ActionCall::new("pass"));
    }
    // An opponent close to going out is worth a bomb.
    let danger = t.field("Hand counts:").is_some_and(|counts| {
        counts.split(" | ").any(|e| {
            let (name, n) = e.split_once('=').unwrap_or(("", ""));
            let rival =
                name != t.me && (landlord.as_deref() == Some(t.me.as_str()) || landlord.as_deref() == Some(name));
            rival && n.trim().parse::<u32>().is_ok_and(|n| n <= 4)
        })
    });
    let beat = options
        .iter()
        .filter(|(_, c)| can_beat(c, &lead) && (danger || !is_bomb(c)))
        .min_by_key(|(p, c)| (is_bomb(c), c.key, p.len()));
    match beat {
        Some((p, _)) => ("Beat the lead as cheaply as I can.", play_of(p)),
        None => ("Nothing cheap beats it.", ActionCall::new("pass")),
    }
}

// ---------------------------------------------------------------------------------------------
// council and chat

/// Debate rounds the Host allows before calling the vote.
const DEBATE_ROUNDS: usize = 2;

fn council(t: &Transcript) -> (&'static str, ActionCall) {
    let opened = t.last_heard("has initiated the voting round");
    let concluded = t.last_heard("has concluded.");
    let open = opened.is_some_and(|o| concluded.is_none_or(|c| o > c));
    if t.can("start_voting") {
        if concluded.is_some() && t.can("finish_meeting") {
            return ("The chamber has voted; adjourn.", ActionCall::new("finish_meeting"));
        }
        if open || t.just_spoke() {
            return ("Let the members act.", yield_());
        }
        let spoken = t.did_since(0).filter(|c| c.name == "send_message").count();
        if spoken >= DEBATE_ROUNDS || concluded.is_some() {
            let call = ActionCall::new("start_voting").with("title", "the draft ordinance");
            return ("The debate has run its course; call the vote.", call);
        }
        let msg = if spoken == 0 {
            "The sitting is open. Members, your opening statements please."
        } else {
            "Thank you. Any final remarks before we vote?"
        };
        return ("Chair the debate.", t.say(msg.to_string()));
    }
    if open && t.can("vote") && !t.did_since(opened.unwrap_or(0)).any(|c| c.name == "vote") {
        let roll = t.chance("vote");
        let vote = if roll < 0.55 {
            "yes"
        } else if roll < 0.9 {
            "no"
        } else {
            "abstain"
        };
        let call = ActionCall::new("vote").with("vote", vote).with("comment", "My considered view.");
        return ("Cast my vote.", call);
    }
    if open || concluded.is_some() || t.just_spoke() {
        return ("Nothing to add now.", yield_());
    }
    chat(t)
}

const LINES: [&str; 4] = [
    "I see it the same way, with one reservation about the cost.",
    "Let us hear the numbers before we decide.",
    "I disagree; the burden falls on the wrong people.",
    "That is a fair point; I could support it with changes.",
];

fn chat(t: &Transcript) -> (&'static str, ActionCall) {
    if t.just_spoke() || !(t.can("send_message") || t.can("speak")) {
        return ("I have spoken this turn.", yield_());
    }
    let line = LINES[t.pick("line", LINES.len())];
    ("Say one thing this turn.", t.say(line.to_string()))
}

// ---------------------------------------------------------------------------------------------
// custom scenes

/// A scene the document defines: one of the actions its latest status line says are open now
/// (never `yield` while there is another), each field drawn from what its usage line allows.
fn custom(t: &Transcript, system: &str) -> (&'static str, ActionCall) {
    use crate::engine::scenes::custom::{IN_THE_GAME, OPEN_NOW};
    let listed = |label: &str| -> Option<Vec<String>> {
        let line = t.heard().rev().map(|(_, l)| l).find(|l| l.contains(OPEN_NOW))?;
        let rest = &line[line.find(label)? + label.len()..];
        let rest = rest.split(';').next().unwrap_or_default().trim();
        Some(rest.split(" | ").filter(|n| !n.is_empty()).map(str::to_string).collect())
    };
    let open = listed(OPEN_NOW).unwrap_or_else(|| t.catalogue.clone());
    let in_game = listed(IN_THE_GAME);
    let choices: Vec<&String> = open.iter().filter(|a| *a != "yield").collect();
    if choices.is_empty() {
        return ("Nothing to do in this phase.", yield_());
    }
    let name = choices[t.pick("custom-action", choices.len())];
    let mut call = ActionCall::new(name.as_str());
    for (field, spec) in custom_fields(system, name) {
        let salt = format!("custom-{name}-{field}");
        let value = if let Some(list) = spec.strip_prefix("one of ") {
            let items: Vec<&str> = list.split(" | ").collect();
            items[t.pick(&salt, items.len())].to_string()
        } else if let Some(list) = spec.strip_prefix("the name of one of ") {
            let items: Vec<&str> = list
                .split(" | ")
                .filter(|n| *n != t.me && in_game.as_ref().is_none_or(|g| g.iter().any(|a| a == n)))
                .collect();
            let items = if items.is_empty() { vec![t.me.as_str()] } else { items };
            items[t.pick(&salt, items.len())].to_string()
        } else if let Some(range) = spec.strip_prefix("a whole number from ") {
            let (lo, hi) = range_of(range);
            let (lo, hi) = (lo as i64, hi as i64);
            let span = (hi - lo).max(0) as usize + 1;
            (lo + t.pick(&salt, span) as i64).to_string()
        } else if let Some(range) = spec.strip_prefix("a number from ") {
            let (lo, hi) = range_of(range);
            format!("{:.2}", lo + t.chance(&salt) * (hi - lo))
        } else if let Some(n) = spec.strip_prefix("text of at most ") {
            let max: usize = n.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0);
            LINES[t.pick(&salt, LINES.len())].chars().take(max).collect()
        } else {
            String::new()
        };
        call = call.with(&field, value);
    }
    ("Take one of the moves the rules allow now.", call)
}

/// The fields of action `name` as its usage block lists them: `(field, what it takes)`.
fn custom_fields(system: &str, name: &str) -> Vec<(String, String)> {
    let head = format!("- To {name}:\n");
    let Some(start) = system.find(&head) else {
        return Vec::new();
    };
    system[start + head.len()..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| {
            let rest = l.strip_prefix("  <")?;
            let (field, spec) = rest.split_once(">: ")?;
            Some((field.to_string(), spec.to_string()))
        })
        .collect()
}

/// `"A to B"` as two numbers.
fn range_of(text: &str) -> (f64, f64) {
    let mut parts = text.split(" to ").map(|p| p.trim().parse::<f64>().unwrap_or(0.0));
    let lo = parts.next().unwrap_or(0.0);
    (lo, parts.next().unwrap_or(lo))
}

// ---------------------------------------------------------------------------------------------
// village

fn village(t: &Transcript) -> (&'static str, ActionCall) {
    let turn = t.last_heard("--- Status ---").unwrap_or(0);
    let done: Vec<&str> = t.did_since(turn).map(|c| c.name.as_str()).collect();
    let energy: i64 = t.field("Energy level:").and_then(|e| e.parse().ok()).unwrap_or(100);
    match done.as_slice() {
        [] if energy < 30 && t.can("rest") => ("Too tired to go on; rest.", ActionCall::new("rest")),
        [] if t.can("look_around") => ("See what is around.", ActionCall::new("look_around")),
        ["look_around"] => {
            let here = t
                .heard()
                .rev()
                .find_map(|(_, l)| l.strip_prefix("Resources here: "))
                .filter(|_| t.last_heard("Resources here: ") > t.last_heard("You are at ("));
            let stock = here.and_then(|list| {
                list.split(", ").find_map(|e| {
                    let (name, n) = e.trim_end_matches(')').split_once('(')?;
                    (n.parse::<i64>().ok()? > 0).then(|| name.to_string())
                })
            });
            if let Some(resource) = stock.filter(|_| t.can("gather_resource")) {
                let amount = (1 + t.pick("amount", 3)).to_string();
                let call = ActionCall::new("gather_resource").with("resource", resource).with("amount", amount);
                return ("Collect what is here.", call);
            }
            // A place near enough that the walk cannot cost more than the energy left.
            let places: Vec<String> = t
                .heard()
                .filter(|(i, _)| *i > turn)
                .filter_map(|(_, l)| {
                    let rest = l.strip_prefix("- ")?;
                    let (name, d) = rest.split_once(" (distance: ")?;
                    let d: i64 = d.split(')').next()?.parse().ok()?;
                    (d * 3 < energy).then(|| name.to_string())
                })
                .collect();
            match places.get(t.pick("place", places.len())) {
                Some(p) if t.can("move_to_location") => {
                    ("Walk somewhere new.", ActionCall::new("move_to_location").with("location", p.clone()))
                }
                _ => ("Nowhere worth the walk.", yield_()),
            }
        }
        _ => ("Enough for this turn.", yield_()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(system: &str, user: &str) -> Vec<Message> {
        vec![Message::new(Role::System, system), Message::new(Role::User, user)]
    }

    const WOLF: &str =
        "\nYou are Elena.\nAvailable Actions:\n- speak: x\n- vote_lynch: y\n- night_kill: z\n- yield: w\nUsage:\n";

    #[test]
    fn reads_the_catalogue_and_answers_in_the_strict_format() {
        assert_eq!(catalogue(WOLF), ["speak", "vote_lynch", "night_kill", "yield"]);
        let mut st = LlmState::default();
        let r = reply(
            &msgs(
                WOLF,
                "Participants: Moderator, Elena, Pia. Roles.\n[18:00] Status: --- Status ---\nPhase: night (day 0)\nAlive: True",
            ),
            &mut st,
        );
        let s = parse::split_sections(&r);
        let call = parse::parse_action(s.action).unwrap().unwrap();
        assert_eq!(call.name, "speak");
        assert_eq!(call.get("message"), Some("I am Elena, one of the wolves."));
        assert!(parse::parse_plan_update(s.plan_update).unwrap().is_none());
    }

    #[test]
    fn a_wolf_kills_a_living_non_wolf_after_the_first_night() {
        let mut st = LlmState { seed: 7, ..LlmState::default() };
        let heard = "Participants: Moderator, Elena, Mira, Pia, Taro. Roles.\n[18:00] Mira: I am Mira, one of the wolves.\n[06:00] The night ends. At dawn, Taro was found dead.\nStatus: --- Status ---\nPhase: night (day 1)";
        let r = reply(&msgs(WOLF, heard), &mut st);
        assert!(r.contains("<Action name=\"night_kill\"><target>Pia</target></Action>"), "{r}");
    }

    #[test]
    fn a_landlord_player_beats_the_lead_cheaply_or_passes() {
        let sys = "\nYou are Bob.\nAvailable Actions:\n- call_landlord: a\n- play_cards: b\n- pass: c\nUsage:\n";
        let status = "Landlord is Ann. Bottom cards: 3\nAnn played: 9 (single).\nStatus: --- Status ---\nPhase: playing\nHand: 5 8 10 K 2";
        let r = reply(&msgs(sys, status), &mut LlmState::default());
        assert!(r.contains("<cards>10</cards>"), "{r}");
        let status = "Landlord is Ann. Bottom cards: 3\nAnn played: 9 9 (pair).\nStatus: --- Status ---\nPhase: playing\nHand: 5 8 10 K 2";
        let r = reply(&msgs(sys, status), &mut LlmState::default());
        assert!(r.contains("<Action name=\"pass\" />"), "{r}");
        let lead = "Doubling finished. Game starts.\nStatus: --- Status ---\nPhase: playing\nHand: 3 4 5 6 7 9 9";
        let r = reply(&msgs(sys, lead), &mut LlmState::default());
        assert!(r.contains("<cards>3 4 5 6 7</cards>"), "{r}");
    }

    #[test]
    fn the_same_prompt_and_seed_give_the_same_answer() {
        let sys = "\nYou are Ann.\nAvailable Actions:\n- send_message: a\n- yield: b\nUsage:\n";
        let a = reply(&msgs(sys, "hello"), &mut LlmState { seed: 3, ..LlmState::default() });
        let b = reply(&msgs(sys, "hello"), &mut LlmState { seed: 3, ..LlmState::default() });
        assert_eq!(a, b);
        let per_seed: std::collections::BTreeSet<String> =
            (0..20).map(|seed| reply(&msgs(sys, "hello"), &mut LlmState { seed, ..LlmState::default() })).collect();
        assert!(per_seed.len() > 1, "the seed changes the lines");
    }
}
