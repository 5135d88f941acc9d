//! STUB — to be implemented (see issue 2).

use serde::{Deserialize, Serialize};

use super::SceneRules;
use crate::engine::action::{ActionKind, ActionSpec};
use crate::engine::agent::Agent;
use crate::engine::prompt::SceneText;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub time: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Werewolf {
    pub name: String,
    pub initial_event: String,
    pub state: State,
}

impl Werewolf {
    pub fn new(name: String, initial_event: String, _config: Config) -> Result<Self, String> {
        Ok(Werewolf {
            name,
            initial_event,
            state: State { time: 1080 },
        })
    }
}

impl SceneRules for Werewolf {
    fn time(&self) -> i64 {
        self.state.time
    }
    fn set_time(&mut self, minutes: i64) {
        self.state.time = minutes;
    }
    fn initial_event(&self) -> &str {
        &self.initial_event
    }
    fn text(&self) -> SceneText {
        SceneText::default()
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![ActionKind::Yield]
    }
}

pub const VOTE_LYNCH: ActionSpec = ActionSpec {
    name: "vote_lynch",
    desc: "",
    instruction: "",
};

pub const NIGHT_KILL: ActionSpec = ActionSpec {
    name: "night_kill",
    desc: "",
    instruction: "",
};

pub const INSPECT: ActionSpec = ActionSpec {
    name: "inspect",
    desc: "",
    instruction: "",
};

pub const WITCH_SAVE: ActionSpec = ActionSpec {
    name: "witch_save",
    desc: "",
    instruction: "",
};

pub const WITCH_POISON: ActionSpec = ActionSpec {
    name: "witch_poison",
    desc: "",
    instruction: "",
};

pub const OPEN_VOTING: ActionSpec = ActionSpec {
    name: "open_voting",
    desc: "",
    instruction: "",
};

pub const CLOSE_VOTING: ActionSpec = ActionSpec {
    name: "close_voting",
    desc: "",
    instruction: "",
};
