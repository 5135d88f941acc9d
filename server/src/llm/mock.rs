//! The `mock` dialect: a deterministic offline stand-in for an LLM (spec §1.14).
//!
//! It reads the agent's name from the first "You are …" of the system prompt, counts calls per
//! name, picks a branch from keywords in the prompt and answers with a fixed, well-formed response.
//! Unlike upstream, the counters live in the simulator's [`LlmState`], so a clone continues exactly
//! as the original would and concurrent runs of sibling nodes cannot race on them.
//!
//! As a [`ChatProvider`] the mock also answers structured and tool requests, deterministically
//! and validly: a request with a response schema gets [`schema::example`] of it as JSON text; a
//! request with tools (and any tool choice but `none`) gets one call of the chosen tool — the
//! named one, else the first — with the example of its parameter schema as arguments. Neither
//! touches the call counters. Usage counts whitespace-separated words, a stand-in for tokens.

use super::chat::{ChatRequest, ChatResponse, Message, Role, StreamSink, ToolCall, ToolChoice, Usage, Watch};
use super::config::Dialect;
use super::provider::ChatProvider;
use super::{BoxFuture, LlmClient, LlmError, LlmState, schema};

/// The offline mock LLM. Stateless itself; see [`LlmState::mock_counters`]. (A tree that chose
/// the scripted player is served by `crate::backend`'s offline client, not by this one.)
#[derive(Clone, Copy, Debug, Default)]
pub struct MockClient;

impl LlmClient for MockClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let reply = reply(messages, state);
        Box::pin(async move { Ok(reply) })
    }
}

impl ChatProvider for MockClient {
    fn dialect(&self) -> Dialect {
        Dialect::Mock
    }

    fn label(&self) -> String {
        "mock:mock".into()
    }

    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        let response = respond_to(request, state);
        Box::pin(async move { response })
    }
}

/// How many pieces an offline reply is shown in while someone watches, and the pause before
/// each piece after the first: long enough that the watchers get a few `delta` messages (they
/// are gathered every 50 ms), short enough that a watched run stays quick.
pub(crate) const LIVE_PIECES: usize = 4;
pub(crate) const LIVE_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);
/// The most one run waits for its pauses in all: a long watched run is slowed by at most this
/// much, its later replies shown in pieces without a pause.
pub(crate) const LIVE_PAUSE_BUDGET: std::time::Duration = std::time::Duration::from_millis(1500);

/// An offline player whose replies are also shown live: while someone watches the run (its
/// [`Watch`] is wanted), each reply goes to the watchers in [`LIVE_PIECES`] pieces before it is
/// returned, paused — only while a person has this run's node open ([`StreamSink::paced`]) —
/// while the run's [`LIVE_PAUSE_BUDGET`] lasts. The reply itself, the player's
/// counters and everything stored are those of the plain player; unwatched runs do not wait.
pub(crate) struct LiveReplies<C> {
    client: C,
    watch: Watch,
    /// What is left of the run's pause budget, in microseconds.
    budget_us: std::sync::atomic::AtomicU64,
}

impl<C> LiveReplies<C> {
    /// `client`'s replies shown to `watch` (one per run: the budget is the run's).
    pub(crate) fn new(client: C, watch: Watch) -> LiveReplies<C> {
        LiveReplies { client, watch, budget_us: (LIVE_PAUSE_BUDGET.as_micros() as u64).into() }
    }

    /// Whether the next reply's pauses fit in what is left of the budget (taken if so).
    fn spend(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let cost = (LIVE_PAUSE * (LIVE_PIECES as u32 - 1)).as_micros() as u64;
        self.budget_us.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(cost)).is_ok()
    }
}

impl<C: LlmClient> LlmClient for LiveReplies<C> {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let reply = self.client.chat(messages, state).await?;
            if let Some(sink) = self.watch.wanted() {
                sink.speaker(state.speaker.as_deref());
                show_in_pieces(sink, &reply, sink.paced() && self.spend()).await;
            }
            Ok(reply)
        })
    }
}

/// Sends `text` to `sink` as one streamed call of [`LIVE_PIECES`] pieces (cut on characters),
/// pausing [`LIVE_PAUSE`] between them if `pause` and a Tokio timer is at hand.
pub(crate) async fn show_in_pieces(sink: &dyn StreamSink, text: &str, pause: bool) {
    let timer = pause && tokio::runtime::Handle::try_current().is_ok();
    sink.start();
    let size = text.len().div_ceil(LIVE_PIECES).max(1);
    let mut from = 0;
    while from < text.len() {
        let mut to = (from + size).min(text.len());
        while !text.is_char_boundary(to) {
            to += 1;
        }
        if from > 0 && timer {
            tokio::time::sleep(LIVE_PAUSE).await;
        }
        sink.text(&text[from..to]);
        from = to;
    }
    sink.end();
}

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

/// The mock's answer to a rich request (see the module docs).
pub(crate) fn respond_to(request: &ChatRequest, state: &mut LlmState) -> Result<ChatResponse, LlmError> {
    // Tool calls and results count as the text they flatten to, whatever the dialect.
    let prompt_tokens = request.messages.iter().map(|m| words(&m.flat().1)).sum();
    let mut out = ChatResponse::default();
    if let Some(s) = &request.response_schema {
        out.text = schema::example(&s.schema).to_string();
    } else if !request.tools.is_empty() && request.tool_choice != ToolChoice::None {
        let tool = match &request.tool_choice {
            ToolChoice::Tool(name) => request.tools.iter().find(|t| &t.name == name).ok_or_else(|| {
                LlmError::Request(format!("mock:mock: tool_choice names {name:?}, which is not among the tools"))
            })?,
            _ => &request.tools[0],
        };
        out.tool_calls.push(ToolCall {
            id: None,
            name: tool.name.clone(),
            arguments: schema::example(&tool.parameters),
        });
    } else {
        out.text = reply(&request.messages, state);
    }
    let completion = words(&out.text) + out.tool_calls.iter().map(|c| words(&c.arguments.to_string())).sum::<u64>();
    out.usage = Usage { prompt_tokens, completion_tokens: completion, cached_tokens: 0, cache_write_tokens: 0 };
    out.finish_reason = Some("stop".into());
    Ok(out)
}

/// The phrases the mock picks its branch by (spec §1.14.2). Prompt prose must carry them only
/// where upstream does; tests use [`trigger_words_in`] to keep other text clear of them.
#[cfg(test)]
pub(crate) const TRIGGER_WORDS: [&str; 7] = [
    "grid-based virtual village",
    "vote",
    "voting",
    "you are living in a virtual village",
    "werewolf",
    "dou dizhu",
    "landlord",
];

/// The trigger phrases that occur in `text`, case-insensitively.
#[cfg(test)]
pub(crate) fn trigger_words_in(text: &str) -> Vec<&'static str> {
    let low = text.to_lowercase();
    TRIGGER_WORDS.into_iter().filter(|w| low.contains(w)).collect()
}

/// The agent name the mock counts calls under: the text after the first "You are" up to the first
/// `.` or newline (so `Rep. Chen Wei` counts as `Rep`).
pub fn extract_name(system: &str) -> String {
    let Some(i) = system.find("You are") else {
        return "Agent".into();
    };
    let rest = &system[i + "You are".len()..];
    let trimmed = rest.trim_start();
    if trimmed.len() == rest.len() {
        return "Agent".into(); // "You are" must be followed by whitespace
    }
    let end = trimmed.find(['.', '\n']).unwrap_or(trimmed.len());
    let name = trimmed[..end].trim();
    if name.is_empty() { "Agent".into() } else { name.to_string() }
}

fn last_user(messages: &[Message]) -> Option<&str> {
    messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_ref())
}

/// Formats the action XML: self-closing without fields, else one child per field in order.
fn action_xml(name: &str, fields: &[(&str, &str)]) -> String {
    if fields.is_empty() {
        return format!("<Action name=\"{name}\" />");
    }
    let body: String = fields.iter().map(|(k, v)| format!("<{k}>{v}</{k}>")).collect();
    format!("<Action name=\"{name}\">{body}</Action>")
}

fn respond(thoughts: &str, plan: &str, xml: &str) -> String {
    format!(
        "--- Thoughts ---\n{thoughts}\n\n--- Plan ---\n{plan}\n\n--- Action ---\n{xml}\n\n--- Plan Update ---\nno change\n"
    )
}

/// Computes the mock's answer and advances its counter for the calling agent.
pub fn reply(messages: &[Message], state: &mut LlmState) -> String {
    let system = messages.iter().find(|m| m.role == Role::System).map(|m| m.content.as_ref()).unwrap_or("");
    let name = extract_name(system);
    let counter = state.mock_counters.entry(name.clone()).or_insert(0);
    *counter = counter.saturating_add(1);
    let n = *counter;
    let low = system.to_lowercase();

    if low.contains("grid-based virtual village") {
        return if n == 1 {
            respond("Scout surroundings before moving.", "1. Look around. [CURRENT]", &action_xml("look_around", &[]))
        } else {
            respond("Pause to let others act.", "1. Yield. [CURRENT]", &action_xml("yield", &[]))
        };
    }
    if low.contains("vote") || low.contains("voting") {
        let host = name.to_lowercase() == "host";
        return match (host, n == 1) {
            (true, true) => respond(
                "Open the session briefly.",
                "1. Greet. [CURRENT]",
                &action_xml("send_message", &[("message", "Good morning, council.")]),
            ),
            (true, false) => {
                respond("Yield the floor for members to respond.", "1. Yield. [CURRENT]", &action_xml("yield", &[]))
            }
            (false, true) => respond(
                "Make a brief opening remark.",
                "1. Remark. [CURRENT]",
                &action_xml("send_message", &[("message", "I support moving forward.")]),
            ),
            (false, false) => respond("No further comment now.", "1. Yield. [CURRENT]", &action_xml("yield", &[])),
        };
    }
    if low.contains("you are living in a virtual village") {
        return if n == 1 {
            respond(
                "Greet others in the village.",
                "1. Greet. [CURRENT]",
                &action_xml("send_message", &[("message", "Good morning everyone!")]),
            )
        } else {
            respond("No need to say more now.", "1. Yield. [CURRENT]", &action_xml("yield", &[]))
        };
    }
    if low.contains("werewolf") {
        return werewolf_reply(&low, n);
    }
    if low.contains("dou dizhu") || low.contains("landlord") || low.contains("landlord_scene") {
        return landlord_reply(messages, n);
    }
    if last_user(messages).map(str::trim) == Some("Continue.") {
        return respond("Already spoke this turn; yield.", "1. Yield. [CURRENT]", &action_xml("yield", &[]));
    }
    respond(
        "Say one line this turn.",
        "1. Speak once. [CURRENT]",
        &action_xml("send_message", &[("message", &format!("[{n}] Hello from {name}."))]),
    )
}

/// Unreachable with the built-in prompts (they all mention voting first), kept for completeness.
fn werewolf_reply(low: &str, n: u64) -> String {
    let has = |a: &str, b: &str| low.contains(a) || low.contains(b);
    let role = if has("you are the seer", "you are seer") {
        "seer"
    } else if has("you are the witch", "you are witch") {
        "witch"
    } else if has("you are a werewolf", "you are werewolf") {
        "werewolf"
    } else {
        "villager"
    };
    if n > 1 {
        let target = if role == "werewolf" { "Elena" } else { "Ronan" };
        return respond(
            "Participate in the day vote.",
            "1. Vote. [CURRENT]",
            &action_xml("vote_lynch", &[("target", target)]),
        );
    }
    match role {
        "werewolf" => respond(
            "Coordinate a night kill discreetly.",
            "1. Night kill. [CURRENT]",
            &action_xml("night_kill", &[("target", "Pia")]),
        ),
        "seer" => respond(
            "Inspect a likely suspect.",
            "1. Inspect. [CURRENT]",
            &action_xml("inspect", &[("target", "Ronan")]),
        ),
        "witch" => respond("Prepare to save tonight's victim.", "1. Save. [CURRENT]", &action_xml("witch_save", &[])),
        _ => respond("Nothing to do at night.", "1. Wait. [CURRENT]", &action_xml("yield", &[])),
    }
}

const RANK_ORDER: [&str; 15] = ["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ"];

fn landlord_reply(messages: &[Message], n: u64) -> String {
    let status = messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User && m.content.contains("Status:"))
        .map(|m| m.content.as_ref())
        .unwrap_or("");
    let phase = status.find("Phase:").map(|i| {
        let rest = status[i + "Phase:".len()..].trim_start_matches([' ', '\t', '\n', '\r']);
        let end = rest.find(|c: char| !(c.is_ascii_alphabetic() || c == '_')).unwrap_or(rest.len());
        &rest[..end]
    });
    let (t, p, xml) = match phase {
        Some("bidding") => {
            let a = if n == 1 { "call_landlord" } else { "pass" };
            ("Decide whether to call landlord.", "1. Act in bidding. [CURRENT]", action_xml(a, &[]))
        }
        Some("doubling") => ("Decline doubling.", "1. Consider doubling. [CURRENT]", action_xml("no_double", &[])),
        Some("playing") => {
            // Like upstream's `Hand:\s*([\w\s]+)`: word characters and whitespace, which runs on
            // into the following lines' words.
            let hand = status.find("Hand:").map_or("", |i| {
                let rest = status[i + "Hand:".len()..].trim_start();
                let end =
                    rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c.is_whitespace())).unwrap_or(rest.len());
                &rest[..end]
            });
            let tokens: Vec<&str> = hand.split_whitespace().filter(|t| *t != "(empty)").collect();
            match RANK_ORDER.iter().find(|r| tokens.contains(r)) {
                Some(r) => (
                    "Try a small single.",
                    "1. Play a small single. [CURRENT]",
                    format!("<Action name=\"play_cards\"><cards>{r}</cards></Action>"),
                ),
                None => ("No cards to play.", "1. Yield. [CURRENT]", action_xml("yield", &[])),
            }
        }
        _ => ("Wait.", "1. Yield. [CURRENT]", action_xml("yield", &[])),
    };
    format!("--- Thoughts ---\n{t}\n\n--- Plan ---\n{p}\n\n--- Action ---\n{xml}\n\n--- Plan Update ---\nno change")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(system: &str, last_user: &str) -> Vec<Message> {
        vec![Message::new(Role::System, system), Message::new(Role::User, last_user)]
    }

    #[test]
    fn rich_requests_get_valid_deterministic_tool_calls_and_json() {
        use crate::llm::chat::{JsonSchema, ToolSpec};
        use serde_json::json;
        let params = json!({"type": "object", "properties": {"target": {"type": "string", "enum": ["Pia", "Ronan"]},
                            "confidence": {"type": "number", "minimum": 0.5}},
                            "required": ["target", "confidence"], "additionalProperties": false});
        let tool = |name: &str| ToolSpec { name: name.into(), description: "d".into(), parameters: params.clone() };
        let mut st = LlmState::default();
        let mut r = ChatRequest::new(req("You are Alice.\nchat", "pick one"));
        r.tools = vec![tool("skip"), tool("vote")];
        r.tool_choice = ToolChoice::Tool("vote".into());
        let out = respond_to(&r, &mut st).unwrap();
        assert_eq!(out.tool_calls.len(), 1);
        assert_eq!(out.tool_calls[0].name, "vote");
        assert_eq!(out.tool_calls[0].arguments, json!({"target": "Pia", "confidence": 0.5}));
        assert_eq!(out.usage.prompt_tokens, 6);
        r.tool_choice = ToolChoice::Required;
        assert_eq!(respond_to(&r, &mut st).unwrap().tool_calls[0].name, "skip");
        r.tool_choice = ToolChoice::Tool("fly".into());
        assert!(respond_to(&r, &mut st).unwrap_err().to_string().contains("\"fly\""));
        assert!(st.mock_counters.is_empty(), "tool answers leave the counters alone");

        r.tools.clear();
        r.response_schema = Some(JsonSchema::new("vote", params.clone()));
        let out = respond_to(&r, &mut st).unwrap();
        assert_eq!(out.text, r#"{"target":"Pia","confidence":0.5}"#);

        r.response_schema = None;
        let text = respond_to(&r, &mut st).unwrap().text;
        assert_eq!(text, reply(&req("You are Alice.\nchat", "pick one"), &mut LlmState::default()));
        assert_eq!(st.mock_counters["Alice"], 1, "the text path counts as the plain mock does");
    }

    #[test]
    fn names_are_read_from_the_first_you_are() {
        assert_eq!(extract_name("\nYou are Rep. Chen Wei.\nYou are the chair."), "Rep");
        assert_eq!(extract_name("You are Elias Thorne.\n"), "Elias Thorne");
        assert_eq!(extract_name("You are 主持人.\n"), "主持人");
        assert_eq!(extract_name("nobody"), "Agent");
    }

    #[test]
    fn chat_branch_counts_per_name_and_yields_after_continue() {
        let mut st = LlmState::default();
        let a = reply(&req("You are Alice.\nchat", "hi"), &mut st);
        assert!(a.contains("<Action name=\"send_message\"><message>[1] Hello from Alice.</message></Action>"));
        assert!(a.ends_with("--- Plan Update ---\nno change\n"));
        let b = reply(&req("You are Alice.\nchat", "hi"), &mut st);
        assert!(b.contains("[2] Hello from Alice."));
        let c = reply(&req("You are Alice.\nchat", " Continue. "), &mut st);
        assert!(c.contains("<Action name=\"yield\" />"));
        assert_eq!(st.mock_counters["Alice"], 3);
    }

    #[test]
    fn keyword_precedence() {
        let mut st = LlmState::default();
        let host = reply(&req("You are Host.\nplease vote and mind the werewolf", "x"), &mut st);
        assert!(host.contains("Good morning, council."));
        assert!(reply(&req("You are Host.\nvoting", "x"), &mut st).contains("name=\"yield\""));
        let map = reply(&req("You are Kaelen.\na grid-based virtual village, vote", "x"), &mut st);
        assert!(map.contains("<Action name=\"look_around\" />"));
        let wolf = reply(&req("You are Mira.\nYou are a Werewolf.", "x"), &mut st);
        assert!(wolf.contains("<Action name=\"night_kill\"><target>Pia</target></Action>"));
    }

    #[test]
    fn landlord_branch_reads_phase_and_hand_from_the_status() {
        let mut st = LlmState::default();
        let status =
            "[18:00] Status: --- Status ---\nPhase: playing\nMultiplier: x1\nHand: 5 5 9 J 2 BJ\nHand counts: A=1";
        let r = reply(&req("You are Bob.\nDou Dizhu", status), &mut st);
        assert!(r.ends_with("<Action name=\"play_cards\"><cards>5</cards></Action>\n\n--- Plan Update ---\nno change"));
        let bid = reply(&req("You are Bob.\nlandlord", "Status: Phase: bidding"), &mut st);
        assert!(bid.contains("<Action name=\"pass\" />"), "second call passes");
        let dbl = reply(&req("You are Bob.\nlandlord", "Status: Phase: doubling"), &mut st);
        assert!(dbl.contains("no_double"));
        let none = reply(&req("You are Bob.\nlandlord", "no status"), &mut st);
        assert!(none.contains("<Action name=\"yield\" />"));
    }

    /// A sink that keeps what it is sent, watched or not.
    #[derive(Default)]
    struct Kept {
        watched: bool,
        got: std::sync::Mutex<Vec<String>>,
    }

    impl StreamSink for Kept {
        fn wanted(&self) -> bool {
            self.watched
        }
        fn start(&self) {
            self.got.lock().unwrap().push("<start>".into());
        }
        fn text(&self, piece: &str) {
            self.got.lock().unwrap().push(piece.into());
        }
        fn end(&self) {
            self.got.lock().unwrap().push("<end>".into());
        }
    }

    #[tokio::test]
    async fn watched_replies_are_shown_in_pieces_and_are_the_plain_replies() {
        let messages = req("You are Émile, a villager.", "Hello ☕ there");
        let mut plain_state = LlmState::default();
        let plain = [reply(&messages, &mut plain_state), reply(&messages, &mut plain_state)];
        for watched in [true, false] {
            let sink = std::sync::Arc::new(Kept { watched, ..Kept::default() });
            let live = LiveReplies::new(MockClient, Watch::new(sink.clone()));
            let mut state = LlmState::default();
            let got = [
                LlmClient::chat(&live, &messages, &mut state).await.unwrap(),
                LlmClient::chat(&live, &messages, &mut state).await.unwrap(),
            ];
            assert_eq!(got, plain, "the same replies");
            assert_eq!(state.mock_counters, plain_state.mock_counters, "the same counters");
            let seen = sink.got.lock().unwrap().clone();
            if !watched {
                assert!(seen.is_empty(), "nothing shown unwatched");
                continue;
            }
            let calls: Vec<&[String]> = seen.split(|p| p == "<start>").skip(1).collect();
            assert_eq!(calls.len(), 2, "{seen:?}");
            for (call, reply) in calls.iter().zip(&plain) {
                assert_eq!(call.last().map(String::as_str), Some("<end>"));
                let pieces = &call[..call.len() - 1];
                assert!((2..=LIVE_PIECES).contains(&pieces.len()), "{pieces:?}");
                assert_eq!(pieces.concat(), *reply);
            }
        }
    }

    #[tokio::test]
    async fn a_long_watched_run_pauses_for_at_most_its_budget() {
        let sink = std::sync::Arc::new(Kept { watched: true, ..Kept::default() });
        let live = LiveReplies::new(MockClient, Watch::new(sink.clone()));
        let messages = req("You are Ann.", "Hello");
        let mut state = LlmState::default();
        let t0 = std::time::Instant::now();
        let per_call = LIVE_PAUSE * (LIVE_PIECES as u32 - 1);
        let calls = 2 * (LIVE_PAUSE_BUDGET.as_micros() / per_call.as_micros()) as usize;
        for _ in 0..calls {
            LlmClient::chat(&live, &messages, &mut state).await.unwrap();
        }
        let took = t0.elapsed();
        assert!(took >= LIVE_PAUSE_BUDGET - per_call, "paused while the budget lasted: {took:?}");
        assert!(took < LIVE_PAUSE_BUDGET + 2 * per_call + std::time::Duration::from_millis(500), "{took:?}");
        let starts = sink.got.lock().unwrap().iter().filter(|p| *p == "<start>").count();
        assert_eq!(starts, calls, "every reply is still shown");
    }
}
