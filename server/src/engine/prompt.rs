//! The system prompt an agent sends with every LLM call (built fresh each time, never stored).
//!
//! The layout follows upstream block by block (spec §1.4); the prose is our own. Two properties
//! matter beyond style and are tested: the prompt starts with `You are {name}.` (the mock reads the
//! agent's name from the first "You are"), and the generic blocks here never contain the words the
//! mock uses to pick a scene (`vote`, `voting`, `werewolf`, `landlord`, …) — those come only from
//! scene text and action descriptions.

use std::borrow::Cow;
use std::sync::Arc;

use simtree_shared::SceneProse;

use super::action::{ActionKind, ActionSpec};
use super::agent::Agent;
use super::plan;

/// The scene-provided parts of the prompt: the scene's own text, then (from
/// [`SceneText::with_prose`]) a document's prose in its place where the document gives some.
#[derive(Clone, Debug, Default)]
pub struct SceneText {
    pub(crate) description: String,
    pub(crate) guidelines: String,
    pub(crate) examples: String,
    /// The document's prose, for its actions' lines and usage (the rest is already in place).
    pub(crate) prose: Option<Arc<SceneProse>>,
    /// Actions the scene defines itself (a custom scene's, those legal for the agent now),
    /// listed before the agent's own.
    pub(crate) own_actions: Vec<OwnAction>,
    /// The catalogue's text of an action (`scenes::action_spec`, given by the simulator, which
    /// knows the scenes); without it (an agent in no scene) the catalogue's lines are empty.
    pub(crate) catalogue: Option<fn(ActionKind) -> &'static ActionSpec>,
    /// Who the catalogue's "(Host)" actions belong to when that is someone else (a council
    /// whose document names its chair): their lines and usage name them instead.
    pub(crate) chair: Option<String>,
}

/// An action a scene defines itself, as the prompt lists it.
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnAction {
    pub(crate) name: String,
    /// Its line in the action list.
    pub(crate) description: String,
    /// Its usage block, ending with a newline.
    pub(crate) usage: String,
}

impl SceneText {
    /// A scene's own description, rules and examples, with no document prose or own actions.
    pub(crate) fn plain(
        description: impl Into<String>,
        guidelines: impl Into<String>,
        examples: impl Into<String>,
    ) -> SceneText {
        SceneText {
            description: description.into(),
            guidelines: guidelines.into(),
            examples: examples.into(),
            ..SceneText::default()
        }
    }

    /// The scene's text with each part `prose` gives in place of the scene's own.
    pub(crate) fn with_prose(mut self, prose: Option<&Arc<SceneProse>>) -> SceneText {
        if let Some(p) = prose {
            let own = |part: &Option<String>, default: &mut String| {
                if let Some(text) = part {
                    default.clone_from(text);
                }
            };
            own(&p.description, &mut self.description);
            own(&p.rules, &mut self.guidelines);
            own(&p.examples, &mut self.examples);
            self.prose = Some(Arc::clone(p));
        }
        self
    }

    /// The text with the catalogue's action text at hand.
    pub(crate) fn with_catalogue(mut self, catalogue: fn(ActionKind) -> &'static ActionSpec) -> SceneText {
        self.catalogue = Some(catalogue);
        self
    }

    /// An action's line in the action list and its usage text: the document's where it gives
    /// them, else the catalogue's (naming the scene's chair in place of the Host). A document's
    /// usage always ends its line.
    fn action(&self, kind: ActionKind) -> (Cow<'_, str>, Cow<'_, str>) {
        let spec = self.catalogue.map_or(&NO_TEXT, |c| c(kind));
        let own = self.prose.as_deref().and_then(|p| p.action(kind));
        let chaired = |text: &'static str| match &self.chair {
            Some(chair) if text.contains("Host") => Cow::Owned(text.replace("Host", chair)),
            _ => Cow::Borrowed(text),
        };
        let desc = match own.and_then(|o| o.description.as_deref()) {
            Some(d) => Cow::Borrowed(d),
            None => chaired(spec.desc),
        };
        let usage = match own.and_then(|o| o.usage.as_deref()) {
            Some(u) if u.ends_with('\n') => Cow::Borrowed(u),
            Some(u) => Cow::Owned(format!("{u}\n")),
            None => chaired(spec.instruction),
        };
        (desc, usage)
    }
}

/// An action's text where there is no catalogue.
const NO_TEXT: ActionSpec = ActionSpec { desc: "", instruction: "" };

const PLAN_INIT_HINT: &str = "You have no goals or milestones yet. In this response, add a Plan Update that sets up numbered Goals and Milestones for yourself.";

fn language_policy(language: &str) -> String {
    format!(
        "Language Policy:\n\
         - Write everything other people will read in {language}.\n\
         - Keep the Action XML element and attribute names in English; only the values may be in {language}.\n\
         - Keep the Plan Update tag names (Goals, Milestones, Strategy, Notes) in English.\n\
         - Do not change language unless someone explicitly asks you to."
    )
}

const PLANNING_GUIDE: &str = "Planning:\n\
- Goals describe end states you want to reach and should stay stable over time.\n\
- Milestones are concrete, observable results on the way to a goal.\n\
- Keep one item of your plan marked as your current focus.\n\
- The strategy says how you intend to get there; notes hold facts worth remembering.\n\
- Prefer continuity: change the plan only when something important has changed.\n\
\n\
Turn flow:\n\
- Each response contains exactly one Thoughts / Plan / Action block.\n\
- Each response performs exactly one action. Some actions report their results right away; you will see them before your next response.\n\
- When you have nothing more to do this turn, end it with <Action name=\"yield\"></Action>.";

const SKELETON: &str = "Respond in exactly this format:\n\
\n\
--- Thoughts ---\n\
Your private reasoning about the situation.\n\
\n\
--- Plan ---\n\
1. A numbered step. [CURRENT]\n\
2. Another step.\n\
\n\
--- Action ---\n\
Exactly one Action XML element, without code fences.\n\
\n\
--- Plan Update ---\n\
Optional. Either the words: no change\n\
or any of these tags:\n\
<Goals>\n\
1. A goal [CURRENT]\n\
2. Another goal\n\
</Goals>\n\
<Milestones>\n\
1. A milestone [DONE]\n\
2. A later milestone\n\
</Milestones>\n\
<Strategy>How you will proceed.</Strategy>\n\
<Notes>Anything worth remembering.</Notes>";

const EMOTION_SECTION: &str = "\n\
\n\
--- Emotion Update ---\n\
Mandatory. Name your current emotion: one of Plutchik's eight primary emotions (Joy, Trust, Fear, Surprise, Sadness, Disgust, Anger, Anticipation) or a dyad of two of them. Base it on how your goals are progressing, on what is new or surprising, on conflict and on what you expect next. Prefer continuity with your previous emotion.";

/// The output-format block, with the emotion section when emotions are enabled.
pub(crate) fn output_format(emotion_enabled: bool) -> String {
    let mut s = format!("{PLANNING_GUIDE}\n\n{SKELETON}");
    if emotion_enabled {
        s.push_str(EMOTION_SECTION);
    }
    s
}

/// The agent's emotion line (empty when emotions are off).
fn emotion_line(agent: &Agent) -> String {
    if agent.emotion_enabled { format!("Your current emotion is {}.", agent.emotion) } else { String::new() }
}

/// The agent's plan as the prompt shows it, with the hint to start one while it has none.
fn plan_block(agent: &Agent) -> String {
    let mut plan_block = plan::render(&agent.plan_state);
    if agent.plan_state.goals.is_empty() && agent.plan_state.milestones.is_empty() {
        plan_block.push_str(PLAN_INIT_HINT);
        plan_block.push('\n');
    }
    plan_block
}

/// Where the system prompt of an agent laid out with its state last points to it.
const STATE_LAST_NOTE: &str = "Your current plan (and emotion) are in the last message of the conversation.\n";

/// The state an agent laid out with its state last reads in its prompt's last message (see
/// `Agent::state_last`): its emotion line and its plan, which change as it acts. Kept out of the
/// system prompt so that the system prompt and the memory stay a prefix the provider has cached.
pub(crate) fn state_message(agent: &Agent) -> String {
    let emotion = emotion_line(agent);
    let plan = plan_block(agent);
    if emotion.is_empty() {
        format!("[Your state now]\n{plan}")
    } else {
        format!("[Your state now]\n{emotion}\n\n{plan}")
    }
}

/// What `agent`'s next decision in `scene` sends before its memory and after it: its system
/// prompt, and its state message when its state goes last.
pub(crate) fn agent_prompt(agent: &Agent, scene: &SceneText) -> (String, Option<String>) {
    (system_prompt(agent, scene), agent.state_last.then(|| state_message(agent)))
}

/// Builds the full system prompt of `agent` in `scene`.
pub(crate) fn system_prompt(agent: &Agent, scene: &SceneText) -> String {
    let (emotion_line, plan_block) = if agent.state_last {
        (String::new(), STATE_LAST_NOTE.to_string())
    } else {
        (emotion_line(agent), plan_block(agent))
    };
    let mut catalogue = String::new();
    let mut usage = String::new();
    for own in &scene.own_actions {
        catalogue.push_str(format!("- {}: {}", own.name, own.description).trim_end());
        catalogue.push('\n');
        usage.push_str(&own.usage);
    }
    for kind in &agent.action_space {
        let (desc, instruction) = scene.action(*kind);
        catalogue.push_str(format!("- {}: {desc}", kind.name()).trim_end());
        catalogue.push('\n');
        usage.push_str(&instruction);
    }
    let examples = if scene.examples.is_empty() {
        String::new()
    } else {
        format!("Here are some examples:\n{}\n\n", scene.examples)
    };
    let language = if agent.language.is_empty() { "en" } else { &agent.language };
    format!(
        "\nYou are {name}.\nYou speak in a {style} style.\n{emotion_line}\n\n{profile}\n\n{role}\n\n{plan_block}\n{policy}\n\n{description}\n\n{guidelines}\n\nAction Space:\n\nAvailable Actions:\n{catalogue}\nUsage:\n{usage}\n{examples}{format}\n\nInitial instruction:\n{instruction}\n",
        name = agent.name,
        style = agent.style,
        profile = agent.user_profile,
        role = agent.role_prompt,
        policy = language_policy(language),
        description = scene.description,
        guidelines = scene.guidelines,
        format = output_format(agent.emotion_enabled),
        instruction = agent.initial_instruction,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_blocks_avoid_mock_trigger_words() {
        let text = format!("{}{}{}{}", output_format(true), language_policy("en"), PLAN_INIT_HINT, PLANNING_GUIDE)
            .to_lowercase();
        let found = crate::llm::mock::trigger_words_in(&text);
        assert!(found.is_empty(), "trigger words in generic text: {found:?}");
        assert!(!text.contains("you are"), "only the name line may say 'You are'");
    }
}
