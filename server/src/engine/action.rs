//! Actions: what a handled action reports, what a handler is given, and the prompt text of the
//! actions every scene shares (speak, send_message, yield, talk_to, web_search, view_page,
//! schedule_order). Their handlers are in `scenes/shared.rs`.
//!
//! The registry of names, [`ActionKind`], and which actions each scene type offers are in
//! `simtree_shared::scene`, where the web UI reads them too. Scene-specific actions (council
//! voting, werewolf night actions, landlord bidding and play, village movement) keep their prompt
//! text and handlers in their scene's file. This module names neither a scene nor the world: the
//! scenes hand their prompt text to the catalogue in `scenes/mod.rs`.

pub use simtree_shared::{ActionKind, ActionResult};

use super::parse::ActionCall;

/// Default prompt text of one action: the catalogue line and the usage block of the system prompt
/// (the name is the [`ActionKind`]'s; a document's `scene.prose` may replace either).
#[derive(Debug)]
pub(crate) struct ActionSpec {
    /// One line for the "Available Actions" catalogue.
    pub(crate) desc: &'static str,
    /// Usage text with an XML example; concatenated under "Usage:".
    pub(crate) instruction: &'static str,
}

/// What a handled action reports: upstream's `(success, result, summary, meta, pass_control)`
/// minus `meta`, which is always empty. It becomes the `action_end` event.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub(crate) success: bool,
    pub(crate) result: ActionResult,
    pub(crate) summary: Option<String>,
    pub(crate) pass_control: bool,
}

impl Outcome {
    pub(crate) fn ok(result: ActionResult, summary: impl Into<String>, pass_control: bool) -> Self {
        Outcome { success: true, result, summary: Some(summary.into()), pass_control }
    }

    pub(crate) fn fail(result: ActionResult, summary: impl Into<String>) -> Self {
        Outcome { success: false, result, summary: Some(summary.into()), pass_control: false }
    }

    /// The action is not in the agent's action space: no feedback, no summary (upstream's silent
    /// failure; the agent's next step sees no new input and its turn ends).
    pub(crate) fn silent() -> Self {
        Outcome { success: false, result: ActionResult::Done {}, summary: None, pass_control: false }
    }

    /// The result as it is logged, for tests that compare it with the JSON upstream writes.
    #[cfg(test)]
    pub(crate) fn result_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.result).expect("a result serialises")
    }
}

/// An action that could not be executed at all (upstream raises; the step is consumed and no
/// `action_end` is logged). The message lands in an `agent_error` event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionError(pub String);

pub(crate) type Handled = Result<Outcome, ActionError>;

/// A required field of an action, or the error upstream's `KeyError` stands for.
pub(crate) fn required<'a>(call: &'a ActionCall, field: &str) -> Result<&'a str, ActionError> {
    call.get(field).ok_or_else(|| ActionError(format!("action {} is missing its required field <{field}>", call.name)))
}

/// Everything a handler gets besides the scene and the world.
pub struct ActionCtx<'a> {
    pub(crate) call: &'a ActionCall,
    pub(crate) kind: ActionKind,
    /// Index of the acting agent in `world.agents`.
    pub(crate) actor: usize,
    /// The answer of an LLM call the simulator made on the action's behalf (`request_brief`).
    pub(crate) llm_reply: Option<String>,
}

/// The prompt text of the actions every scene shares.
pub(crate) const SHARED_ACTIONS: &[(ActionKind, ActionSpec)] = &[
    (
        ActionKind::Speak,
        ActionSpec {
            desc: "say something out loud to everyone who can hear you right now",
            instruction: "- To say something aloud:\n<Action name=\"speak\"><message>your words</message></Action>\n",
        },
    ),
    (
        ActionKind::SendMessage,
        ActionSpec {
            desc: "post a message that everyone in the room can read",
            instruction: "- To post a message to everyone:\n<Action name=\"send_message\"><message>your message</message></Action>\n",
        },
    ),
    (
        ActionKind::TalkTo,
        ActionSpec {
            desc: "speak privately to one person who is close enough to hear you",
            instruction: "- To talk to someone nearby:\n<Action name=\"talk_to\"><to>their name</to><message>your words</message></Action>\n",
        },
    ),
    (
        ActionKind::Yield,
        ActionSpec {
            desc: "end your turn and let others act",
            instruction: "- To end your turn:\n<Action name=\"yield\"></Action>\n",
        },
    ),
    (
        ActionKind::WebSearch,
        ActionSpec {
            desc: "look something up on the web and read a list of results",
            instruction: "- To search the web:\n<Action name=\"web_search\"><query>search terms</query><max_results>5</max_results></Action>\n",
        },
    ),
    (
        ActionKind::ViewPage,
        ActionSpec {
            desc: "open a web page and read its main text",
            instruction: "- To read a web page:\n<Action name=\"view_page\"><url>https://example.com</url></Action>\n",
        },
    ),
    (
        ActionKind::ScheduleOrder,
        ActionSpec {
            desc: "decide who acts next, as a comma-separated list of names",
            instruction: "- To set who acts next:\n<Action name=\"schedule_order\"><order>Alice, Bob</order></Action>\n",
        },
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_prompt_text_avoids_the_mock_trigger_words() {
        // The mock picks its branch from keywords in the system prompt; actions every chat agent
        // may hold must not contain them (spec §1.14.2 porting rule).
        for (_, spec) in SHARED_ACTIONS {
            let text = format!("{} {}", spec.desc, spec.instruction).to_lowercase();
            let found = crate::llm::mock::trigger_words_in(&text);
            assert!(found.is_empty(), "trigger words in generic text: {found:?}");
        }
    }
}
