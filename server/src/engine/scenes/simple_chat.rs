//! simple_chat (upstream `simple_chat_scene`): an open chat room. No state beyond the clock; agents
//! post messages everyone reads and yield when they have nothing to add.

use serde::{Deserialize, Serialize};

use super::SceneRules;
use crate::engine::action::ActionKind;
use crate::engine::agent::Agent;
use crate::engine::prompt::SceneText;

/// Scene-specific configuration in a scenario file (none for simple_chat).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChatState {
    time: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimpleChat {
    name: String,
    initial_event: String,
    state: ChatState,
    #[serde(default)]
    config: serde_json::Map<String, serde_json::Value>,
}

pub(crate) const DESCRIPTION: &str = "This is an online chat room. Behave like a real person in a group chat: post only when you have something worth saying, and feel free to stay quiet.";

pub(crate) const GUIDELINES: &str = "Chat guidelines:\n\
- Your patience is limited; long threads wear you out.\n\
- Let your feelings show naturally in what you write.\n\
- Do not repeat points you or others have already made.\n\
- Reply selectively: not every message needs an answer.\n\
- Vary the length and tone of your messages.\n\
- You may get tired of the topic and say so.\n\
- Keep ordinary chat etiquette; no walls of text.\n\
- Stay open to other views and change your mind when persuaded.\n\
- Question claims that sound doubtful before accepting them.\n\
- You do not have to post anything at all this turn.\n\
- Ignore messages that have nothing to do with you.";

impl SimpleChat {
    pub(crate) fn new(name: String, initial_event: String, _config: Config) -> Self {
        SimpleChat { name, initial_event, state: ChatState { time: 1080 }, config: Default::default() }
    }
}

impl SceneRules for SimpleChat {
    clock_and_opening!();
    fn text(&self) -> SceneText {
        SceneText::plain(DESCRIPTION, GUIDELINES, String::new())
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![ActionKind::SendMessage, ActionKind::Yield]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_keeps_clear_of_the_mock_trigger_words() {
        let text = format!("{DESCRIPTION}{GUIDELINES}").to_lowercase();
        assert_eq!(crate::llm::mock::trigger_words_in(&text), Vec::<&str>::new());
        assert!(!text.contains("virtual village") && !text.contains("you are"));
    }
}
