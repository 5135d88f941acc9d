//! The payloads of a social simulation's events: one struct per event type, each tied to its
//! type by [`EventPayload`], and the parts they are made of — an agent's action call
//! ([`ActionCall`]), its plan ([`PlanState`]) and an action's result ([`ActionResult`]).
//!
//! The engine builds every social event from these types and nothing else, so this file is the
//! contract of a social log. The shapes are upstream SocialSim4's: field names, field order
//! (the JSON keeps it), `null` where upstream writes `None`, integers where upstream has ints.
//! A black-box test parses every event of a run of each scene into its type and checks that it
//! serialises back to the same JSON (`tests/tests/payloads.rs`).
//!
//! Reading is lenient where the UI reads partial entries (imported logs may be anything): fields
//! with a `default` may be missing. Writing always gives every field.

use indexmap::IndexMap;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::event::{EventPayload, EventType};

/// A grid cell of the village map, `[x, y]`.
pub type Cell = [i64; 2];

// ---- The events ----

/// `agent_process_start`: an agent begins step `step` (1-based) of its turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentProcessStart {
    pub agent: String,
    pub step: u64,
}

/// `agent_process_end`: the step's decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentProcessEnd {
    pub agent: String,
    pub step: u64,
    pub actions: StepActions,
}

/// What a step decided. Upstream writes `{}` for a step that had nothing new to answer (no LLM
/// call was made) and the list of parsed actions (zero or one) otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged, deny_unknown_fields)]
pub enum StepActions {
    /// The LLM answered; its actions in order. (First: `Idle {}` would also read `[]`.)
    Acted(Vec<ActionCall>),
    /// Nothing new had happened since the agent last spoke: `{}`.
    Idle {},
}

/// `action_start`: an action is about to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ActionStart {
    pub agent: String,
    pub action: ActionCall,
}

/// `action_end`: what an action did. The moderator's `schedule_order` has no `action_start`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct ActionEnd {
    pub agent: String,
    /// The action call as the agent made it: `{action, …its arguments}`.
    pub action: ActionCall,
    pub success: bool,
    pub result: ActionResult,
    /// One line for the log; `null` for an action outside the agent's action space.
    pub summary: Option<String>,
    /// The action ends the agent's turn.
    pub pass_control: bool,
}

impl ActionEnd {
    /// The action's name (`send_message`, `yield`, …); empty when missing.
    pub fn name(&self) -> &str {
        &self.action.name
    }

    /// The message a message action sent: the result's, else the call's, else the summary.
    pub fn message(&self) -> Option<&str> {
        self.result.message().or_else(|| self.action.get("message")).or(self.summary.as_deref())
    }
}

/// `agent_ctx_delta`: a line appended to an agent's short memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CtxDelta {
    pub agent: String,
    /// `user` (what the agent was told) or `assistant` (what it answered).
    pub role: String,
    pub content: String,
}

/// `plan_update`: an agent's plan after a response's Plan Update.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PlanUpdate {
    pub agent: String,
    pub kind: PlanUpdateKind,
    pub plan: PlanState,
}

/// How a plan update applies; upstream only ever replaces the whole plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PlanUpdateKind {
    Replace,
}

/// `emotion_update`: an agent's new emotion (scenarios with emotions enabled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmotionUpdate {
    pub agent: String,
    pub emotion: String,
}

/// `system_broadcast`: a scene event told to the agents, as the line they read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Broadcast {
    /// Scene time in minutes when it happened (`null` where the scene has no clock).
    #[serde(default)]
    pub time: Option<i64>,
    /// Upstream's event class.
    #[serde(rename = "type")]
    pub class: SceneEventClass,
    /// The agent who caused it (`null` for announcements); it does not receive it.
    #[serde(default)]
    pub sender: Option<String>,
    /// Who received it, in agent order.
    #[serde(default)]
    pub recipients: Vec<String>,
    /// The line without its time prefix.
    #[serde(default)]
    pub text: String,
}

/// Upstream's class name of a scene event (`system_broadcast.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SceneEventClass {
    MessageEvent,
    PublicEvent,
    NewsEvent,
    StatusEvent,
    SpeakEvent,
    TalkToEvent,
}

/// `landlord_deal`: the cards dealt, by player, and the bottom cards (card tokens such as `3`,
/// `10`, `BJ`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct LandlordDeal {
    /// Each player's hand in seat order, its cards sorted by rank.
    pub players: IndexMap<String, Vec<String>>,
    pub bottom: Vec<String>,
}

/// `agent_error`: an agent step that failed (social) or a decision point whose model call failed
/// (trading).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentErrorEvent {
    pub agent: String,
    pub step: u64,
    pub error: String,
}

macro_rules! payloads {
    ($($ty:ty => $kind:ident),* $(,)?) => {
        $(impl EventPayload for $ty {
            const KIND: EventType = EventType::$kind;
        })*
    };
}

payloads! {
    AgentProcessStart => AgentProcessStart,
    AgentProcessEnd => AgentProcessEnd,
    ActionStart => ActionStart,
    ActionEnd => ActionEnd,
    CtxDelta => AgentCtxDelta,
    PlanUpdate => PlanUpdate,
    EmotionUpdate => EmotionUpdate,
    Broadcast => SystemBroadcast,
    LandlordDeal => LandlordDeal,
    AgentErrorEvent => AgentError,
}

// ---- An action call ----

/// One parsed action: its name and its fields in document order.
///
/// Serialises as upstream's action map: `{"action": name, field: value, …}`. The fields are the
/// XML children the agent wrote, so any name may occur and every value is text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "IndexMap<String, String>")]
pub struct ActionCall {
    pub name: String,
    pub fields: IndexMap<String, String>,
}

impl ActionCall {
    pub fn new(name: impl Into<String>) -> Self {
        ActionCall { name: name.into(), fields: IndexMap::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.fields.insert(key.to_string(), value.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
}

impl Serialize for ActionCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.fields.len() + 1))?;
        map.serialize_entry("action", &self.name)?;
        for (k, v) in &self.fields {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// An action map without its `action` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an action map needs an \"action\" key")]
pub struct NoActionKey;

impl TryFrom<IndexMap<String, String>> for ActionCall {
    type Error = NoActionKey;
    fn try_from(mut map: IndexMap<String, String>) -> Result<Self, NoActionKey> {
        let name = map.shift_remove("action").ok_or(NoActionKey)?;
        Ok(ActionCall { name, fields: map })
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for ActionCall {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ActionCall".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "An action as the agent wrote it: its name under `action`, then its fields (any names, text values) in document order.",
            "type": "object",
            "properties": {"action": {"type": "string"}},
            "required": ["action"],
            "additionalProperties": {"type": "string"}
        })
    }
}

// ---- An agent's plan ----

/// An agent's internal plan: goals, milestones, strategy and notes. Replaced wholesale by a Plan
/// Update in an LLM response or by the `agent_plan_replace` branch op. Goal and milestone fields
/// are optional so a plan set by a branch op round-trips verbatim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PlanState {
    #[serde(default)]
    pub goals: Vec<Goal>,
    #[serde(default)]
    pub milestones: Vec<Milestone>,
    #[serde(default)]
    pub strategy: String,
    #[serde(default)]
    pub notes: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Goal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl Goal {
    pub fn new(id: impl Into<String>, desc: impl Into<String>, status: &str) -> Self {
        Goal {
            id: Some(id.into()),
            desc: Some(desc.into()),
            priority: Some("normal".into()),
            status: Some(status.into()),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Milestone {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desc: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

impl Milestone {
    pub fn new(id: impl Into<String>, desc: impl Into<String>, status: &str) -> Self {
        Milestone { id: Some(id.into()), desc: Some(desc.into()), status: Some(status.into()) }
    }
}

// ---- An action's result ----

/// The `result` of an `action_end`: one variant per shape an action handler reports, written as
/// a bare object (no tag: the shapes are upstream's). Each variant's keys, in order, are the
/// JSON's; failures carry an `error` (a snake_case code, or for council actions the sentence the
/// agent was told).
///
/// Reading picks the variant whose keys the object has exactly: every variant refuses unknown
/// keys and needs all of its own (`null` is written, and required, where a value may be missing;
/// only `Played`'s `win` is left out when false), so no two variants read the same object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged, deny_unknown_fields)]
pub enum ActionResult {
    /// `{}`: `yield`, `finish_meeting`, and an action outside the agent's action space.
    Done {},
    /// A failure with nothing more to say.
    Error { error: String },

    // Shared actions.
    /// `speak`, `send_message`.
    Message { message: String },
    /// `talk_to`.
    TalkedTo { to: String, message: String },
    /// `talk_to` to an unknown or too distant agent (`unknown_target`, `too_far`).
    TalkFailed { error: String, to: String },
    /// `web_search` (no search backend in this build).
    SearchFailed { query: String, error: String },
    /// `view_page` (no web access in this build).
    PageFailed { error: String, detail: String },
    /// `schedule_order`: the names queued, in order.
    Scheduled { scheduled: Vec<String> },

    // Council.
    /// `start_voting`.
    VotingStarted { title: String },
    /// `voting_status` during a vote. `title` is `null` when none was given.
    VotingStatus {
        started: bool,
        members: u64,
        yes: u64,
        no: u64,
        abstain: u64,
        pending: u64,
        pending_names: Vec<String>,
        #[serde(deserialize_with = "Option::deserialize")]
        #[cfg_attr(feature = "schema", schemars(required))]
        title: Option<String>,
    },
    /// `voting_status` with no vote open (`started` is false).
    VotingNotStarted { started: bool, members: u64 },
    /// `request_brief`: the material the Host got and where it came from.
    Brief { desc: String, material: String, source: BriefSource },
    /// `vote`.
    Voted { vote: Ballot, comment: String },

    // Landlord.
    /// `call_landlord`: who called.
    Called { called: String },
    /// `rob_landlord`: who robbed.
    Robbed { robbed: String },
    /// `pass` in any stage (`pass` is always true).
    Passed { pass: bool },
    /// `play_cards`: the tokens as written; `win` (true) when the hand is empty.
    Played {
        played: Vec<String>,
        #[serde(default, skip_serializing_if = "is_false")]
        win: bool,
    },
    /// `double` (true) and `no_double` (false).
    Doubled { double: bool },

    // Werewolf.
    /// `vote_lynch`, `night_kill`: the target and the votes it has now.
    Tally { target: String, tally: u64 },
    /// `inspect`.
    Inspected { target: String, is_werewolf: bool },
    /// `witch_save` (`saved` is always true).
    Saved { saved: bool },
    /// `witch_poison`.
    PoisonPrepared { target: String },
    /// `open_voting` (`opened` is always true).
    VotingOpened { opened: bool },
    /// `close_voting` (`closed` is always true).
    VotingClosed { closed: bool },

    // Village.
    /// `move_to_location` to a place that does not exist.
    UnknownLocation { error: String, location: String },
    /// `move_to_location` refused before moving (`already_there`, `no_path`).
    MoveFailed { error: String, to: Cell },
    /// `move_to_location` costing more energy than the agent has.
    LowEnergy { error: String, required: i64, have: i64 },
    /// `move_to_location`: where from (the cell the agent's `map_xy` reads as), where to, the
    /// energy spent and the cells walked, `from` and `to` included.
    Moved { from: Cell, to: Cell, energy_cost: i64, path: Vec<Cell> },
    /// `look_around`.
    LookedAround { radius: i64 },
    /// `gather_resource` with nothing to take (`not_available`, `depleted`); `resource` is
    /// `null` when the call named none.
    NoResource {
        error: String,
        #[serde(deserialize_with = "Option::deserialize")]
        #[cfg_attr(feature = "schema", schemars(required))]
        resource: Option<String>,
    },
    /// `gather_resource`.
    Gathered { resource: String, amount: i64, source: ResourceSource, position: Cell },
    /// `rest`.
    Rested { energy_gain: i64, new_energy: i64 },
}

fn is_false(b: &bool) -> bool {
    !b
}

impl Default for ActionResult {
    fn default() -> Self {
        ActionResult::Done {}
    }
}

impl ActionResult {
    /// A failure `{error}`.
    pub fn error(error: impl Into<String>) -> Self {
        ActionResult::Error { error: error.into() }
    }

    /// The message a message action delivered.
    pub fn message(&self) -> Option<&str> {
        match self {
            ActionResult::Message { message } | ActionResult::TalkedTo { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The failure code or sentence, for a failed action.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            ActionResult::Error { error }
            | ActionResult::TalkFailed { error, .. }
            | ActionResult::SearchFailed { error, .. }
            | ActionResult::PageFailed { error, .. }
            | ActionResult::UnknownLocation { error, .. }
            | ActionResult::MoveFailed { error, .. }
            | ActionResult::LowEnergy { error, .. }
            | ActionResult::NoResource { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Where a council brief came from: the model's answer, or the built-in outline when it gave none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum BriefSource {
    Llm,
    Fallback,
}

/// A council vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Ballot {
    Yes,
    No,
    Abstain,
}

impl Ballot {
    /// The ballot an agent wrote (`yes`, `no`, `abstain`; nothing else).
    pub fn parse(text: &str) -> Option<Ballot> {
        match text {
            "yes" => Some(Ballot::Yes),
            "no" => Some(Ballot::No),
            "abstain" => Some(Ballot::Abstain),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Ballot::Yes => "yes",
            Ballot::No => "no",
            Ballot::Abstain => "abstain",
        }
    }
}

/// Where gathered resources came from: the tile's stock or the named place's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ResourceSource {
    Tile,
    Location,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Parses `v` as `T` and checks it serialises back to the same text (keys in order).
    fn round_trip<T: Serialize + serde::de::DeserializeOwned + std::fmt::Debug>(v: Value) -> T {
        let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(serde_json::to_string(&t).unwrap(), v.to_string(), "{t:?}");
        t
    }

    #[test]
    fn each_result_shape_reads_as_its_own_variant() {
        let cases = [
            ("Done", json!({})),
            ("Error", json!({"error": "missing_fields"})),
            ("Message", json!({"message": "hi"})),
            ("TalkedTo", json!({"to": "Bob", "message": "hi"})),
            ("TalkFailed", json!({"error": "too_far", "to": "Bob"})),
            ("SearchFailed", json!({"query": "q", "error": "not available offline"})),
            ("PageFailed", json!({"error": "view_error", "detail": "d"})),
            ("Scheduled", json!({"scheduled": ["A", "B"]})),
            ("VotingStarted", json!({"title": "Pilot"})),
            (
                "VotingStatus",
                json!({"started": true, "members": 3, "yes": 0, "no": 1, "abstain": 0, "pending": 2,
                   "pending_names": ["A", "C"], "title": null}),
            ),
            ("VotingNotStarted", json!({"started": false, "members": 3})),
            ("Brief", json!({"desc": "d", "material": "m", "source": "llm"})),
            ("Voted", json!({"vote": "abstain", "comment": ""})),
            ("Called", json!({"called": "A"})),
            ("Robbed", json!({"robbed": "A"})),
            ("Passed", json!({"pass": true})),
            ("Played", json!({"played": ["3", "3"]})),
            ("Played", json!({"played": ["BJ"], "win": true})),
            ("Doubled", json!({"double": false})),
            ("Tally", json!({"target": "A", "tally": 2})),
            ("Inspected", json!({"target": "A", "is_werewolf": true})),
            ("Saved", json!({"saved": true})),
            ("PoisonPrepared", json!({"target": "A"})),
            ("VotingOpened", json!({"opened": true})),
            ("VotingClosed", json!({"closed": true})),
            ("UnknownLocation", json!({"error": "unknown_location", "location": "moon"})),
            ("MoveFailed", json!({"error": "no_path", "to": [3, 4]})),
            ("LowEnergy", json!({"error": "low_energy", "required": 12, "have": 3})),
            ("Moved", json!({"from": [1, 1], "to": [2, 1], "energy_cost": 1, "path": [[1, 1], [2, 1]]})),
            ("LookedAround", json!({"radius": 3})),
            ("NoResource", json!({"error": "not_available", "resource": null})),
            ("NoResource", json!({"error": "depleted", "resource": "wood"})),
            ("Gathered", json!({"resource": "wood", "amount": 1, "source": "location", "position": [1, 4]})),
            ("Rested", json!({"energy_gain": 30, "new_energy": 100})),
        ];
        for (name, case) in cases {
            let r: ActionResult = round_trip(case);
            let read = format!("{r:?}");
            assert_eq!(read.split([' ', '{']).next(), Some(name), "{read}");
        }
        assert_eq!(
            round_trip::<ActionResult>(json!({"error": "x"})),
            ActionResult::error("x"),
            "an error without a resource is not a NoResource"
        );
        let no_title = json!({"started": true, "members": 3, "yes": 0, "no": 1, "abstain": 0, "pending": 2,
                              "pending_names": []});
        assert!(serde_json::from_value::<ActionResult>(no_title).is_err(), "a nullable key is still required");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_refused() {
        for bad in [
            json!({"message": "hi", "extra": 1}),
            json!({"target": "A", "tally": "two"}),
            json!({"vote": "maybe", "comment": ""}),
        ] {
            assert!(serde_json::from_value::<ActionResult>(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn step_actions_tell_idle_from_an_empty_list() {
        assert_eq!(round_trip::<StepActions>(json!({})), StepActions::Idle {});
        assert_eq!(round_trip::<StepActions>(json!([])), StepActions::Acted(vec![]));
        let acted = round_trip::<StepActions>(json!([{"action": "vote", "vote": "yes", "comment": "ok"}]));
        assert_eq!(acted, StepActions::Acted(vec![ActionCall::new("vote").with("vote", "yes").with("comment", "ok")]));
    }

    #[test]
    fn events_keep_upstream_field_order_and_nulls() {
        round_trip::<ActionEnd>(json!({
            "agent": "Ann", "action": {"action": "look_around"}, "success": false,
            "result": {}, "summary": null, "pass_control": false
        }));
        round_trip::<Broadcast>(json!({
            "time": null, "type": "PublicEvent", "sender": null, "recipients": ["A"], "text": "Public Event: x"
        }));
        round_trip::<PlanUpdate>(json!({
            "agent": "Ann", "kind": "replace",
            "plan": {"goals": [{"id": "g1", "desc": "Win", "priority": "normal", "status": "current"}],
                     "milestones": [], "strategy": "", "notes": ""}
        }));
        round_trip::<LandlordDeal>(json!({"players": {"B": ["3"], "A": ["4"]}, "bottom": ["BJ"]}));
    }

    #[test]
    fn action_end_reads_partial_entries_and_finds_the_message() {
        let end: ActionEnd = serde_json::from_value(json!({
            "agent": "Ann", "action": {"action": "send_message", "message": "m"}, "result": {"message": "hello"}
        }))
        .unwrap();
        assert_eq!((end.name(), end.message()), ("send_message", Some("hello")));
        let end: ActionEnd = serde_json::from_value(json!({"action": {"action": "vote"}, "summary": "s"})).unwrap();
        assert_eq!((end.name(), end.message(), &end.result), ("vote", Some("s"), &ActionResult::Done {}));
    }

    #[test]
    fn an_action_map_needs_its_name() {
        assert!(serde_json::from_value::<ActionCall>(json!({"message": "x"})).is_err());
        let call: ActionCall = serde_json::from_value(json!({"to": "B", "action": "talk_to"})).unwrap();
        assert_eq!(serde_json::to_string(&call).unwrap(), r#"{"action":"talk_to","to":"B"}"#);
    }
}
