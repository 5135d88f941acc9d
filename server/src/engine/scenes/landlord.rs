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
pub struct Landlord {
    pub name: String,
    pub initial_event: String,
    pub state: State,
}

impl Landlord {
    pub fn new(name: String, initial_event: String, _config: Config) -> Result<Self, String> {
        Ok(Landlord {
            name,
            initial_event,
            state: State { time: 1080 },
        })
    }
}

impl SceneRules for Landlord {
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

pub const CALL_LANDLORD: ActionSpec = ActionSpec {
    name: "call_landlord",
    desc: "",
    instruction: "",
};

pub const ROB_LANDLORD: ActionSpec = ActionSpec {
    name: "rob_landlord",
    desc: "",
    instruction: "",
};

pub const PASS: ActionSpec = ActionSpec {
    name: "pass",
    desc: "",
    instruction: "",
};

pub const PLAY_CARDS: ActionSpec = ActionSpec {
    name: "play_cards",
    desc: "",
    instruction: "",
};

pub const DOUBLE: ActionSpec = ActionSpec {
    name: "double",
    desc: "",
    instruction: "",
};

pub const NO_DOUBLE: ActionSpec = ActionSpec {
    name: "no_double",
    desc: "",
    instruction: "",
};
