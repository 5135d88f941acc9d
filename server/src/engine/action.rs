//! Actions: what a handled action reports, and the prompt text and handlers of the actions every
//! scene shares (speak, send_message, yield, talk_to, web_search, view_page, schedule_order).
//!
//! The registry of names, [`ActionKind`], and which actions each scene type offers are in
//! `simtree_shared::scene`, where the web UI reads them too. Scene-specific actions (council
//! voting, werewolf night actions, landlord bidding and play, village movement) keep their prompt
//! text and handlers in their scene's file. This module never names a scene: the scenes hand their
//! prompt text to the catalogue in `scenes/mod.rs`, and the shared handlers reach the scene they
//! run in through [`SharedActionScene`].

pub use simtree_shared::{ActionKind, ActionResult};

use super::event::SceneEvent;
use super::parse::ActionCall;
use super::world::World;

/// Default prompt text of one action: the catalogue line and the usage block of the system prompt
/// (the name is the [`ActionKind`]'s; a document's `scene.prose` may replace either).
#[derive(Debug)]
pub(crate) struct ActionSpec {
    /// One line for the "Available Actions" catalogue.
    pub desc: &'static str,
    /// Usage text with an XML example; concatenated under "Usage:".
    pub(crate) instruction: &'static str,
}

/// What a handled action reports: upstream's `(success, result, summary, meta, pass_control)`
/// minus `meta`, which is always empty. It becomes the `action_end` event.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub success: bool,
    pub result: ActionResult,
    pub summary: Option<String>,
    pub(crate) pass_control: bool,
}

impl Outcome {
    pub fn ok(result: ActionResult, summary: impl Into<String>, pass_control: bool) -> Self {
        Outcome {
            success: true,
            result,
            summary: Some(summary.into()),
            pass_control,
        }
    }

    pub fn fail(result: ActionResult, summary: impl Into<String>) -> Self {
        Outcome {
            success: false,
            result,
            summary: Some(summary.into()),
            pass_control: false,
        }
    }

    /// The action is not in the agent's action space: no feedback, no summary (upstream's silent
    /// failure; the agent's next step sees no new input and its turn ends).
    pub fn silent() -> Self {
        Outcome {
            success: false,
            result: ActionResult::Done {},
            summary: None,
            pass_control: false,
        }
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
pub fn required<'a>(call: &'a ActionCall, field: &str) -> Result<&'a str, ActionError> {
    call.get(field)
        .ok_or_else(|| ActionError(format!("action {} is missing its required field <{field}>", call.name)))
}

/// Everything a handler gets besides the scene and the world.
pub struct ActionCtx<'a> {
    pub call: &'a ActionCall,
    pub kind: ActionKind,
    /// Index of the acting agent in `world.agents`.
    pub(crate) actor: usize,
    /// The answer of an LLM call the simulator made on the action's behalf (`request_brief`).
    pub(crate) llm_reply: Option<String>,
}

impl ActionCtx<'_> {
    pub(crate) fn actor_name<'w>(&self, world: &'w World) -> &'w str {
        &world.agents[self.actor].name
    }
}

/// What the shared handlers need of the scene they run in. Every scene has it through its
/// `SceneRules` (a blanket impl in `scenes/mod.rs`), so this module needs no scene type.
pub(crate) trait SharedActionScene {
    /// Scene time in minutes.
    fn time(&self) -> i64;
    /// Speaking range for `talk_to`, where the scene has a map.
    fn chat_range(&self) -> Option<i64>;
    /// Delivers a spoken or posted message as the scene does.
    fn deliver_message(&mut self, event: &SceneEvent, sender: usize, world: &mut World);
}

/// Handles the actions every scene shares. Scenes call this for any kind they do not handle
/// themselves; an action the scene cannot run gets a clear failure instead of upstream's crash.
pub(crate) fn handle_common<S: SharedActionScene + ?Sized>(
    scene: &mut S,
    ctx: &ActionCtx,
    world: &mut World,
) -> Handled {
    let name = world.agents[ctx.actor].name.clone();
    let time = Some(scene.time());
    match ctx.kind {
        ActionKind::Yield => Ok(Outcome::ok(
            ActionResult::Done {},
            format!("{name} yielded the floor"),
            true,
        )),
        ActionKind::Speak | ActionKind::SendMessage => {
            let speak = ctx.kind == ActionKind::Speak;
            let message = ctx.call.get("message").unwrap_or("").to_string();
            if message.is_empty() {
                world.feedback(ctx.actor, "Missing message.");
                let verb = if speak { "speak" } else { "post" };
                return Ok(Outcome::fail(
                    ActionResult::error("Missing message."),
                    format!("{name} failed to {verb}"),
                ));
            }
            let event = if speak {
                SceneEvent::Speak {
                    sender: name.clone(),
                    message: message.clone(),
                }
            } else {
                SceneEvent::Message {
                    sender: name.clone(),
                    message: message.clone(),
                }
            };
            scene.deliver_message(&event, ctx.actor, world);
            let summary = if speak {
                format!("{name} said: {message}")
            } else {
                format!("{name}: {message}")
            };
            Ok(Outcome::ok(ActionResult::Message { message }, summary, false))
        }
        ActionKind::TalkTo => {
            let (Some(to), Some(message)) = (ctx.call.get("to"), ctx.call.get("message")) else {
                world.feedback(ctx.actor, "Provide 'to' (name) and 'message'.");
                return Ok(Outcome::fail(
                    ActionResult::error("missing_fields"),
                    format!("{name} failed to talk"),
                ));
            };
            let Some(target) = world.agent_index(to) else {
                world.feedback(ctx.actor, &format!("No such person: {to}."));
                return Ok(Outcome::fail(
                    ActionResult::TalkFailed {
                        error: "unknown_target".into(),
                        to: to.into(),
                    },
                    format!("{name} failed to talk"),
                ));
            };
            if let (Some(range), Some(d)) = (scene.chat_range(), world.distance(ctx.actor, target))
                && d > range
            {
                // Upstream returns a malformed tuple here (an exception); we report a plain failure.
                world.feedback(ctx.actor, &format!("{to} is too far to talk to."));
                return Ok(Outcome::fail(
                    ActionResult::TalkFailed {
                        error: "too_far".into(),
                        to: to.into(),
                    },
                    format!("{name} failed to talk"),
                ));
            }
            let line = SceneEvent::TalkTo {
                sender: name.clone(),
                recipient: to.to_string(),
                message: message.to_string(),
            }
            .line(time);
            world.feedback(ctx.actor, &line);
            world.feedback(target, &line);
            Ok(Outcome::ok(
                ActionResult::TalkedTo {
                    to: to.into(),
                    message: message.into(),
                },
                format!("{name} to {to}: {message}"),
                false,
            ))
        }
        ActionKind::WebSearch => {
            let query = required(ctx.call, "query")?;
            // No search backend is configured in this build: say so, as upstream does when the
            // network is unavailable.
            world.feedback(ctx.actor, "web_search: no results or network unavailable.");
            Ok(Outcome::fail(
                ActionResult::SearchFailed {
                    query: query.into(),
                    error: "not available offline".into(),
                },
                format!("{name} searched: '{query}' (0 results)"),
            ))
        }
        ActionKind::ViewPage => {
            let url = required(ctx.call, "url")?;
            world.feedback(
                ctx.actor,
                &format!("view_page failed: web access is not available offline ({url})"),
            );
            Ok(Outcome::fail(
                ActionResult::PageFailed {
                    error: "view_error".into(),
                    detail: "web access is not available offline".into(),
                },
                format!("{name} failed to view page: {url}"),
            ))
        }
        ActionKind::ScheduleOrder => schedule_order(ctx, world),
        other => {
            let msg = format!("The action {} is not available in this scene.", other.name());
            world.feedback(ctx.actor, &msg);
            Ok(Outcome::fail(
                ActionResult::error("unsupported_in_scene"),
                format!("{name} tried {}", other.name()),
            ))
        }
    }
}

fn schedule_order(ctx: &ActionCtx, world: &mut World) -> Handled {
    let name = ctx.actor_name(world).to_string();
    let order = required(ctx.call, "order")?;
    if !world.ordering.can_schedule() {
        return Err(ActionError("schedule_order needs the llm_moderated ordering".into()));
    }
    if !world.ordering.queue_is_empty() {
        world.feedback(ctx.actor, "The schedule is not empty; shouldn't schedule now.");
        return Ok(Outcome::fail(
            ActionResult::error("schedule_not_empty"),
            "schedule_order failed: schedule not empty",
        ));
    }
    let names: Vec<String> = order
        .split(',')
        .map(str::trim)
        .filter(|n| world.agent_index(n).is_some())
        .map(String::from)
        .collect();
    world.ordering.add_to_queue(&names);
    world.feedback(ctx.actor, &format!("Scheduled order: {}", names.join(", ")));
    let summary = format!("{name} scheduled: {}", names.join(","));
    Ok(Outcome::ok(
        ActionResult::Scheduled { scheduled: names },
        summary,
        false,
    ))
}

/// The prompt text of the actions every scene shares.
pub(crate) const SHARED_ACTIONS: &[(ActionKind, &ActionSpec)] = &[
    (ActionKind::Speak, &SPEAK),
    (ActionKind::SendMessage, &SEND_MESSAGE),
    (ActionKind::TalkTo, &TALK_TO),
    (ActionKind::Yield, &YIELD),
    (ActionKind::WebSearch, &WEB_SEARCH),
    (ActionKind::ViewPage, &VIEW_PAGE),
    (ActionKind::ScheduleOrder, &SCHEDULE_ORDER),
];

pub(crate) const SPEAK: ActionSpec = ActionSpec {
    desc: "say something out loud to everyone who can hear you right now",
    instruction: "- To say something aloud:\n<Action name=\"speak\"><message>your words</message></Action>\n",
};

pub(crate) const SEND_MESSAGE: ActionSpec = ActionSpec {
    desc: "post a message that everyone in the room can read",
    instruction: "- To post a message to everyone:\n<Action name=\"send_message\"><message>your message</message></Action>\n",
};

pub(crate) const TALK_TO: ActionSpec = ActionSpec {
    desc: "speak privately to one person who is close enough to hear you",
    instruction: "- To talk to someone nearby:\n<Action name=\"talk_to\"><to>their name</to><message>your words</message></Action>\n",
};

pub(crate) const YIELD: ActionSpec = ActionSpec {
    desc: "end your turn and let others act",
    instruction: "- To end your turn:\n<Action name=\"yield\"></Action>\n",
};

pub(crate) const WEB_SEARCH: ActionSpec = ActionSpec {
    desc: "look something up on the web and read a list of results",
    instruction: "- To search the web:\n<Action name=\"web_search\"><query>search terms</query><max_results>5</max_results></Action>\n",
};

pub(crate) const VIEW_PAGE: ActionSpec = ActionSpec {
    desc: "open a web page and read its main text",
    instruction: "- To read a web page:\n<Action name=\"view_page\"><url>https://example.com</url></Action>\n",
};

pub(crate) const SCHEDULE_ORDER: ActionSpec = ActionSpec {
    desc: "decide who acts next, as a comma-separated list of names",
    instruction: "- To set who acts next:\n<Action name=\"schedule_order\"><order>Alice, Bob</order></Action>\n",
};

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
