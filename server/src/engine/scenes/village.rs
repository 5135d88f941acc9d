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
pub struct Village {
    pub name: String,
    pub initial_event: String,
    pub state: State,
}

impl Village {
    pub fn new(name: String, initial_event: String, _config: Config) -> Result<Self, String> {
        Ok(Village {
            name,
            initial_event,
            state: State { time: 1080 },
        })
    }
}

impl SceneRules for Village {
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

pub const MOVE_TO_LOCATION: ActionSpec = ActionSpec {
    name: "move_to_location",
    desc: "",
    instruction: "",
};

pub const LOOK_AROUND: ActionSpec = ActionSpec {
    name: "look_around",
    desc: "",
    instruction: "",
};

pub const GATHER_RESOURCE: ActionSpec = ActionSpec {
    name: "gather_resource",
    desc: "",
    instruction: "",
};

pub const REST: ActionSpec = ActionSpec {
    name: "rest",
    desc: "",
    instruction: "",
};
