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
pub struct Council {
    pub name: String,
    pub initial_event: String,
    pub state: State,
}

impl Council {
    pub fn new(name: String, initial_event: String, _config: Config) -> Self {
        Council {
            name,
            initial_event,
            state: State { time: 1080 },
        }
    }
}

impl SceneRules for Council {
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

pub const START_VOTING: ActionSpec = ActionSpec {
    name: "start_voting",
    desc: "",
    instruction: "",
};

pub const FINISH_MEETING: ActionSpec = ActionSpec {
    name: "finish_meeting",
    desc: "",
    instruction: "",
};

pub const REQUEST_BRIEF: ActionSpec = ActionSpec {
    name: "request_brief",
    desc: "",
    instruction: "",
};

pub const VOTING_STATUS: ActionSpec = ActionSpec {
    name: "voting_status",
    desc: "",
    instruction: "",
};

pub const VOTE: ActionSpec = ActionSpec {
    name: "vote",
    desc: "",
    instruction: "",
};
