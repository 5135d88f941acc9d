//! The handlers of the actions every scene shares (their prompt text is in `engine/action.rs`).
//! They reach the scene they run in through [`SharedActionScene`].

use crate::engine::action::{ActionCtx, ActionError, ActionKind, ActionResult, Handled, Outcome, required};
use crate::engine::event::SceneEvent;
use crate::engine::world::World;

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
        ActionKind::Yield => Ok(Outcome::ok(ActionResult::Done {}, format!("{name} yielded the floor"), true)),
        ActionKind::Speak | ActionKind::SendMessage => {
            let speak = ctx.kind == ActionKind::Speak;
            let message = ctx.call.get("message").unwrap_or("").to_string();
            if message.is_empty() {
                world.feedback(ctx.actor, "Missing message.");
                let verb = if speak { "speak" } else { "post" };
                return Ok(Outcome::fail(ActionResult::error("Missing message."), format!("{name} failed to {verb}")));
            }
            let event = if speak {
                SceneEvent::Speak { sender: name.clone(), message: message.clone() }
            } else {
                SceneEvent::Message { sender: name.clone(), message: message.clone() }
            };
            scene.deliver_message(&event, ctx.actor, world);
            let summary = if speak { format!("{name} said: {message}") } else { format!("{name}: {message}") };
            Ok(Outcome::ok(ActionResult::Message { message }, summary, false))
        }
        ActionKind::TalkTo => {
            let (Some(to), Some(message)) = (ctx.call.get("to"), ctx.call.get("message")) else {
                world.feedback(ctx.actor, "Provide 'to' (name) and 'message'.");
                return Ok(Outcome::fail(ActionResult::error("missing_fields"), format!("{name} failed to talk")));
            };
            // The addressee is unknown or out of range: `error`, telling the speaker `feedback`.
            let refuse = |world: &mut World, error: &str, feedback: String| {
                world.feedback(ctx.actor, &feedback);
                let result = ActionResult::TalkFailed { error: error.into(), to: to.into() };
                Ok(Outcome::fail(result, format!("{name} failed to talk")))
            };
            let Some(target) = world.agent_index(to) else {
                return refuse(world, "unknown_target", format!("No such person: {to}."));
            };
            if let (Some(range), Some(d)) = (scene.chat_range(), world.distance(ctx.actor, target))
                && d > range
            {
                // Upstream returns a malformed tuple here (an exception); we report a plain failure.
                return refuse(world, "too_far", format!("{to} is too far to talk to."));
            }
            let line =
                SceneEvent::TalkTo { sender: name.clone(), recipient: to.to_string(), message: message.to_string() }
                    .line(time);
            world.feedback(ctx.actor, &line);
            world.feedback(target, &line);
            Ok(Outcome::ok(
                ActionResult::TalkedTo { to: to.into(), message: message.into() },
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
                ActionResult::SearchFailed { query: query.into(), error: "not available offline".into() },
                format!("{name} searched: '{query}' (0 results)"),
            ))
        }
        ActionKind::ViewPage => {
            let url = required(ctx.call, "url")?;
            world.feedback(ctx.actor, &format!("view_page failed: web access is not available offline ({url})"));
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
            Ok(Outcome::fail(ActionResult::error("unsupported_in_scene"), format!("{name} tried {}", other.name())))
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
    let names: Vec<String> =
        order.split(',').map(str::trim).filter(|n| world.agent_index(n).is_some()).map(String::from).collect();
    world.ordering.add_to_queue(&names);
    world.feedback(ctx.actor, &format!("Scheduled order: {}", names.join(", ")));
    let summary = format!("{name} scheduled: {}", names.join(","));
    Ok(Outcome::ok(ActionResult::Scheduled { scheduled: names }, summary, false))
}
