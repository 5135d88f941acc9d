//! A scene the user defines (`"scene": {"type": "custom", "config": {…}}`): the document's
//! setting, roles, variables, actions with typed parameters and effects, phases, tallies,
//! endings with named outcomes, and metrics. Every condition and value is an expression of the
//! Common Expression Language (CEL), kept here as text; the server compiles and checks each one
//! once, when the document is read (`server/src/engine/scenes/custom/`), and docs/scenarios.md
//! describes the format with an example of every part.
//!
//! Every type denies unknown fields, so a misspelt key is refused at its JSON path.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A custom scene's document: the `config` of a scene of type `custom`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CustomScene {
    /// What the place is and who is there: the description every prompt opens with.
    pub setting: String,
    /// Rules every participant reads after the setting.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rules: String,
    /// The roles; every agent names one in `properties.role`.
    pub roles: Vec<RoleDef>,
    /// Shared and per-agent state with initial values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<VarDef>,
    pub actions: Vec<ActionDef>,
    /// The phases; the first is where the scene starts.
    pub phases: Vec<PhaseDef>,
    /// Counts over the votes cast by `vote` effects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tallies: Vec<TallyDef>,
    /// The names the scene can end with.
    pub outcomes: Vec<String>,
    /// Conditions checked after every action and phase change; the first that holds ends the
    /// scene with its outcome.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endings: Vec<Ending>,
    /// Named values of the state, for sweeps and explorations (`scene:NAME`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricDef>,
    /// Rules written in Python where the declarations end (docs/scenarios.md, "Hooks"). They
    /// run only in the sandboxed Python worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Hooks>,
    /// Whether each turn starts with a status line to the actor (its phase, role, variables and
    /// the moves open now). `false` leaves the actor's memory to what happens in the scene, as
    /// the shipped scenes do; the prompt then says nothing of status lines.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub status_lines: bool,
    /// How the scene's own lines read.
    #[serde(default, skip_serializing_if = "is_default")]
    pub style: Style,
}

/// How a custom scene's own lines read to its agents and in the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Style {
    /// `say` is spoken (`Ann: text`), `reveal` reads `Reveal: text`, an action that says
    /// nothing is shown to its audience as `Action: Ann: offer (amount: 40)`, and the end is
    /// announced (`Outcome: the scene ends: accepted`).
    #[default]
    Custom,
    /// As the shipped chat scenes: `say` is a chat message (`[Message] Ann: text`, the action's
    /// result `{"message": text}` and its summary `Ann: text`), `reveal` reads
    /// `Public Event: text`, and the scene adds no line of its own about actions or the end.
    Chat,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    pub source: String,
}

/// The names a hook source may define.
pub const HOOK_NAMES: [&str; 3] = ["on_action", "on_phase_end", "outcome"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RoleDef {
    pub name: String,
    /// Private instructions: only agents of this role read them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instructions: String,
    /// A moderator sees every action whose visibility is `moderator`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub moderator: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

/// A variable's type; its values are checked against it whenever they change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum VarType {
    /// A whole number (CEL `int`).
    Int,
    /// A number with a fraction (CEL `double`).
    Number,
    String,
    Bool,
    /// A list of numbers, strings or booleans.
    List,
}

impl VarType {
    pub fn name(self) -> &'static str {
        match self {
            VarType::Int => "int",
            VarType::Number => "number",
            VarType::String => "string",
            VarType::Bool => "bool",
            VarType::List => "list",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct VarDef {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: VarType,
    /// One value per agent (`me.vars.NAME`) instead of one shared value (`vars.NAME`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub per_agent: bool,
    pub initial: Value,
    /// Left out of the status lines agents read (a shared value is shown to everyone, a
    /// per-agent one to its owner).
    #[serde(default, skip_serializing_if = "is_false")]
    pub hidden: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ActionDef {
    pub name: String,
    /// One line for the prompt's action list.
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamDef>,
    /// Roles that may use it (empty: every role).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Phases it may be used in (empty: every phase).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<String>,
    /// A condition on the state (no parameters yet): the action is offered only while it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Conditions on the chosen parameters; the first that fails refuses the action with its
    /// message and changes nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub require: Vec<Requirement>,
    #[serde(default)]
    pub visibility: Visibility,
    pub effects: Vec<Effect>,
    /// Whether a success ends the actor's turn. `false`: the actor may act again in the same
    /// turn (up to the scenario's `max_steps_per_turn`) until it yields or an action ends the
    /// turn, as the shipped scenes' `send_message`. An action that moves the phase or ends the
    /// scene always ends the turn.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub ends_turn: bool,
    /// The action's one-line summary in the log (and in its `Action:` line): a string
    /// expression that sees `params` (default `Ann: offer (amount: 40)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    pub check: String,
    pub message: String,
}

/// A parameter's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ParamType {
    /// One of `values`.
    Enum,
    /// A whole number from `min` to `max`.
    Int,
    /// A number from `min` to `max`.
    Number,
    /// Text of at most `max_length` characters.
    String,
    /// The name of an agent of the scene.
    Agent,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ParamDef {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ParamType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `enum`: the values allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// `int`, `number`: the range, both ends included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// `string`: the most characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u32>,
}

/// Who sees an action and what it says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Everyone.
    #[default]
    Public,
    /// The actor and the agent named by this `agent` parameter.
    PrivateTo(String),
    /// The actor and the agents of these roles.
    Roles(Vec<String>),
    /// The actor and the moderators (roles with `moderator: true`).
    Moderator,
}

/// What an action or a phase's entry does, from a closed set. Values are expressions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The actor says the text (a string expression) to the action's audience.
    Say(String),
    /// The actor alone reads the text (a string expression): a private answer to its action.
    Tell(String),
    /// Sets a variable to a value.
    Set(Assign),
    /// Adds a number to a numeric variable (or an item to a list).
    Add(Assign),
    /// Moves an amount of a per-agent numeric variable from one agent to another.
    Transfer(Transfer),
    /// Records the actor's vote in a tally (a later vote replaces it).
    Vote(VoteEffect),
    /// Forgets every vote of a tally.
    ClearVotes(String),
    /// Announces the text (a string expression) to everyone.
    Reveal(String),
    /// The agent named (an expression) leaves the game: no more turns or actions.
    Eliminate(String),
    /// The agent named may no longer speak (`say` effects of its actions are refused).
    Mute(String),
    Unmute(String),
    /// Ends the current phase and enters this one.
    Goto(String),
    /// Ends the scene with this outcome.
    End(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Assign {
    pub var: String,
    pub value: String,
    /// For a per-agent variable: whose (an expression naming an agent; the actor by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Transfer {
    pub var: String,
    /// The giver (an expression naming an agent; the actor by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub to: String,
    pub amount: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct VoteEffect {
    pub tally: String,
    pub choice: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PhaseDef {
    pub name: String,
    /// Shown to every agent while the phase lasts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub actors: Actors,
    #[serde(default)]
    pub order: TurnOrder,
    pub ends: PhaseEnd,
    /// Passes over the actors after which the phase ends whatever `ends` says.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// Effects run when the phase is entered (no actor: `me` is empty). A `goto` or an `end`
    /// among them leaves the phase at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_enter: Vec<Effect>,
    /// Effects run when the phase ends, before `next` is read (a round's payoff, a count).
    /// A `goto` or an `end` among them decides where the scene goes instead of `next`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_exit: Vec<Effect>,
    /// Whether entering the phase is announced to everyone (`Phase: name: description`).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub announce: bool,
    /// Where the scene goes when the phase ends: the first transition whose condition holds.
    /// The last must have no condition.
    pub next: Vec<Transition>,
}

pub fn default_max_rounds() -> u32 {
    5
}

/// Who acts in a phase, one turn each per pass, in the agents' order (or shuffled).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Actors {
    /// Every agent still in the game.
    #[default]
    All,
    /// The agents of these roles.
    Roles(Vec<String>),
    /// The names a list expression gives, evaluated at the start of every pass.
    Expr(String),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TurnOrder {
    #[default]
    Sequential,
    /// Shuffled at the start of every pass with the simulation's seeded generator.
    Random,
    /// The agents' order, but the phase's first pass starts after the agent whose turn entered
    /// the phase: turns go on round the table across phase changes, as the shipped scenes'
    /// `sequential` ordering does.
    Continue,
}

/// How a phase ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PhaseEnd {
    /// After this many passes over its actors.
    Rounds(u32),
    /// When every actor has taken an action in it.
    AllActed,
    /// When the condition holds (checked after every turn).
    When(String),
    /// As soon as the condition holds: checked after every action too, so the phase ends
    /// within the action that made it true (its exit lines follow the action's own).
    AsSoonAs(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Transition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The phase to enter (exactly one of `goto` and `end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goto: Option<String>,
    /// The outcome to end with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

/// A count over votes: `tallies.NAME` in expressions is
/// `{votes, cast, voters, counts, winner, decided, sum}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TallyDef {
    pub name: String,
    pub kind: TallyKind,
    /// Roles whose members vote (empty: every agent still in the game).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub voters: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TallyKind {
    /// Decided when one choice has more than half of the voters.
    Majority,
    /// Decided when every voter has voted and all chose the same.
    Unanimity,
    /// Decided when every voter has voted and one choice has the most votes.
    Plurality,
    /// The sum of numeric votes; decided when every voter has voted.
    Sum,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Ending {
    pub when: String,
    pub outcome: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MetricDef {
    pub name: String,
    /// An expression over the state (a number, or a boolean counted as 0/1).
    pub value: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}
