//! The turn loop with a scripted LLM: how each failure class of a response is handled (upstream's
//! semantics, spec §1.11), what the shared actions do, and that an LLM failure ends the run with
//! a visible reason.

use std::sync::Mutex;

use serde_json::{Value, json};
use simtree::engine::memory::Message;
use simtree::engine::{Event, EventType, Simulator};
use simtree::llm::{BoxFuture, LlmClient, LlmError, LlmState};
use simtree::scenario::Scenario;

/// Replies from a script, in order; `Err` entries fail the call.
struct Script(Mutex<Vec<Result<String, LlmError>>>);

impl Script {
    fn new(replies: Vec<Result<&str, LlmError>>) -> Self {
        let mut r: Vec<_> = replies.into_iter().map(|x| x.map(str::to_string)).collect();
        r.reverse();
        Script(Mutex::new(r))
    }
}

impl LlmClient for Script {
    fn chat<'a>(&'a self, _: &'a [Message], _: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let next = self.0.lock().unwrap().pop().unwrap_or_else(|| Ok(action("yield", &[])));
        Box::pin(async move { next })
    }
}

fn action(name: &str, fields: &[(&str, &str)]) -> String {
    let body: String = fields.iter().map(|(k, v)| format!("<{k}>{v}</{k}>")).collect();
    format!(
        "--- Thoughts ---\nt\n--- Plan ---\n1. p\n--- Action ---\n<Action name=\"{name}\">{body}</Action>\n--- Plan Update ---\nno change"
    )
}

/// A one-agent chat (plus a listener) so each test controls every reply.
fn sim(max_steps: u32) -> Simulator {
    let text = json!({
        "scene": {"type": "simple_chat", "name": "room", "initial_event": "Welcome."},
        "agents": [{"name": "Ann", "action_space": ["web_search", "talk_to", "view_page"]}, {"name": "Ben"}],
        "ordering": {"kind": "cycled", "names": ["Ann"]},
        "max_steps_per_turn": max_steps
    });
    let mut sim = Scenario::from_json("scenarios/test.json", &text.to_string()).unwrap().build(None).unwrap();
    // The initial broadcast is the root's log in a tree; drop it here.
    sim.flush_pending(&mut Vec::new());
    sim
}

fn kinds(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

fn of(events: &[Event], kind: EventType) -> Vec<&Value> {
    events.iter().filter(|e| e.kind == kind).map(|e| &e.data).collect()
}

#[test]
fn an_unknown_action_fails_silently_and_ends_the_turn() {
    let mut s = sim(5);
    let llm = Script::new(vec![Ok(&action("dance", &[]))]);
    let (report, events) = s.run_blocking(1, &llm);
    assert_eq!(report.unwrap().turns, 1);
    let end = of(&events, EventType::ActionEnd);
    assert_eq!(end.len(), 1);
    assert_eq!(end[0]["success"], false);
    assert_eq!(end[0]["summary"], Value::Null);
    assert_eq!(end[0]["result"], json!({}));
    // No feedback was given, so the next step has no new input and returns the empty map.
    let process_ends = of(&events, EventType::AgentProcessEnd);
    assert_eq!(process_ends.len(), 2);
    assert_eq!(process_ends[1]["actions"], json!({}));
}

#[test]
fn a_missing_required_field_is_an_agent_error_without_action_end() {
    let mut s = sim(5);
    let llm = Script::new(vec![Ok(&action("web_search", &[]))]);
    let (_, events) = s.run_blocking(1, &llm);
    assert_eq!(
        kinds(&events)[..5],
        ["agent_process_start", "agent_ctx_delta", "agent_process_end", "action_start", "agent_error"]
    );
    assert!(of(&events, EventType::ActionEnd).is_empty());
    assert!(of(&events, EventType::AgentError)[0]["error"].as_str().unwrap().contains("<query>"));
}

#[test]
fn unparseable_output_is_retried_then_reported_and_the_step_consumed() {
    let mut s = sim(2);
    let two = "--- Action ---\n<Action name=\"yield\"></Action>\n<Action name=\"yield\"></Action>";
    // 4 attempts for step 1 fail; step 2 succeeds.
    let llm = Script::new(vec![Ok(two), Ok(two), Ok(two), Ok(two), Ok(&action("yield", &[]))]);
    let (report, events) = s.run_blocking(1, &llm);
    assert_eq!(report.unwrap().turns, 1);
    let err = of(&events, EventType::AgentError);
    assert_eq!(err.len(), 1);
    assert_eq!(err[0]["step"], 1);
    assert!(err[0]["error"].as_str().unwrap().starts_with("no usable response after 4 attempts"));
    assert_eq!(of(&events, EventType::AgentProcessStart).len(), 2);
    assert_eq!(of(&events, EventType::ActionEnd)[0]["summary"], "Ann yielded the floor");
}

#[test]
fn shared_actions_give_their_feedback() {
    let mut s = sim(5);
    let llm = Script::new(vec![
        Ok(&action("view_page", &[("url", "https://example.com")])),
        Ok(&action("send_message", &[("message", "")])),
        Ok(&action("web_search", &[("query", "rust")])),
        Ok(&action("talk_to", &[("to", "Zed"), ("message", "hi")])),
        Ok(&action("talk_to", &[("to", "Ben"), ("message", "psst")])),
    ]);
    let (_, events) = s.run_blocking(1, &llm);
    let feedback: Vec<(&str, &str)> = of(&events, EventType::AgentCtxDelta)
        .into_iter()
        .filter(|d| d["role"] == "user")
        .map(|d| (d["agent"].as_str().unwrap(), d["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        feedback,
        [
            ("Ann", "view_page failed: web access is not available offline (https://example.com)"),
            ("Ann", "Missing message."),
            ("Ann", "web_search: no results or network unavailable."),
            ("Ann", "No such person: Zed."),
            ("Ann", "[18:00] Ann to Ben: psst"),
            ("Ben", "[18:00] Ann to Ben: psst"),
        ]
    );
    let summaries: Vec<&Value> = of(&events, EventType::ActionEnd).iter().map(|d| &d["summary"]).collect();
    assert_eq!(summaries[0], "Ann failed to view page: https://example.com");
    assert_eq!(summaries[1], "Ann failed to post");
    assert_eq!(summaries[4], "Ann to Ben: psst");
    // talk_to is private: no system_broadcast.
    assert!(of(&events, EventType::SystemBroadcast).is_empty());
}

#[test]
fn max_steps_per_turn_caps_a_turn_and_time_advances_three_minutes() {
    let mut s = sim(3);
    let say = action("send_message", &[("message", "again")]);
    let llm = Script::new(vec![Ok(&say), Ok(&say), Ok(&say), Ok(&say)]);
    let (_, events) = s.run_blocking(2, &llm);
    let sent =
        of(&events, EventType::ActionEnd).into_iter().filter(|d| d["action"]["action"] == "send_message").count();
    assert_eq!(sent, 3 + 1, "three messages in turn one, then the fourth in turn two");
    let lines: Vec<&str> =
        of(&events, EventType::SystemBroadcast).iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert_eq!(lines.len(), 4);
    let times: Vec<i64> = of(&events, EventType::SystemBroadcast).iter().map(|d| d["time"].as_i64().unwrap()).collect();
    assert_eq!(times, [1080, 1080, 1080, 1083]);
}

#[test]
fn an_llm_failure_ends_the_run_with_a_visible_reason() {
    let mut s = sim(5);
    let llm = Script::new(vec![Err(LlmError::Request("connection refused".into()))]);
    let (report, events) = s.run_blocking(3, &llm);
    let err = report.unwrap_err();
    assert_eq!(err.to_string(), "Ann: LLM request failed: connection refused");
    assert_eq!(of(&events, EventType::AgentError)[0]["error"], "LLM request failed: connection refused");
}

#[test]
fn view_page_and_schedule_order_feedback() {
    let text = json!({
        "scene": {"type": "simple_chat", "name": "room", "initial_event": "Welcome."},
        "agents": [{"name": "Mod", "action_space": ["schedule_order", "view_page"]}, {"name": "Ann"}, {"name": "Ben"}],
        "ordering": {"kind": "llm_moderated", "moderator": "Mod"}
    });
    let mut s = Scenario::from_json("scenarios/test.json", &text.to_string()).unwrap().build(None).unwrap();
    s.flush_pending(&mut Vec::new());
    let llm = Script::new(vec![
        // The moderator's refill: schedule Ben then an unknown name (dropped), then Ann.
        Ok(&action("schedule_order", &[("order", "Ben, Zed, Ann")])),
        // Ben's turn: read a page (offline), then yield.
        Ok(&action("view_page", &[("url", "https://example.com")])),
    ]);
    let (_, events) = s.run_blocking(1, &llm);
    let feedback: Vec<&str> = of(&events, EventType::AgentCtxDelta)
        .into_iter()
        .filter(|d| d["role"] == "user")
        .map(|d| d["content"].as_str().unwrap())
        .collect();
    assert!(feedback.contains(&"Scheduled order: Ben, Ann"), "{feedback:?}");
    let end = &of(&events, EventType::ActionEnd)[0];
    assert_eq!(end["summary"], "Mod scheduled: Ben,Ann");
    assert_eq!(end["result"], json!({"scheduled": ["Ben", "Ann"]}));
    // Ben (no view_page in his space) acted first: the picked name is Ben.
    assert_eq!(of(&events, EventType::AgentProcessStart)[0]["agent"], "Ben");
}
